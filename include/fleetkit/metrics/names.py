"""Every metric the fleet publishes: name -> (labels, help). One list, read by the collector, the
tests, the Grafana dashboard's test and docs/metrics.md.

Names: where kafka-lag-exporter publishes the same thing, its name and labels are used (`LAG_EXPORTER`:
`cluster_name`, `group`, `topic`, `partition`, `member_host`, `consumer_id`, `client_id`,
`is_simple_consumer`), so its dashboards and alerts work unchanged; KMinion's consumer-group and
water-mark names (`KMINION`: `group_id`, `topic_name`, `partition_id`) are published too when
FLEET_METRICS_NAMES asks for them; everything else is `fleet_*`. Extra labels on the compatible
names: `cluster_name` on KMinion's (one scrape serves every cluster), `source` on kafka-lag-exporter's
(where the offset lives: kafka, zookeeper, storm; one group name may exist in two stores) and, on
the time lag, `kind` (exact, interpolated, bounded: how the seconds were estimated,
fleetkit.stuck.timelag).
"""

from __future__ import annotations

#: a partition of a group, with the member holding it (kafka-lag-exporter's labels, then `source`)
PARTITION = ("cluster_name", "group", "topic", "partition", "member_host", "consumer_id", "client_id", "source")
#: a partition of a group, by verdict (the fleet's own metrics)
JUDGED = ("cluster_name", "group", "source", "topic", "partition")
GROUP = ("cluster_name", "group", "source")
TOPIC_PARTITION = ("cluster_name", "topic", "partition")
KM_GROUP_TOPIC = ("cluster_name", "group_id", "topic_name")

METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    # every partition of every group in the newest collection of each cluster (worst first, at most
    # FLEET_METRICS_MAX_PARTITION_SERIES partitions): kafka-lag-exporter's names
    "kafka_consumergroup_group_offset": (PARTITION, "Committed offset of a partition (newest collection)"),
    "kafka_consumergroup_group_lag": (PARTITION, "Lag in records of a partition (log end - committed)"),
    "kafka_consumergroup_group_lag_seconds": (PARTITION + ("kind",),
                                              "Lag in seconds of a partition (newest stuck run); kind: exact, "
                                              "interpolated, bounded (at least)"),
    "kafka_partition_latest_offset": (TOPIC_PARTITION, "Log end offset of a topic partition a group reads"),
    "kafka_partition_earliest_offset": (TOPIC_PARTITION, "Log start offset of a topic partition a group reads"),
    # per group (every partition counted), at most FLEET_METRICS_MAX_GROUP_SERIES groups
    "kafka_consumergroup_group_max_lag": (("cluster_name", "group", "is_simple_consumer", "source"),
                                          "Largest lag in records of a group's partitions"),
    "kafka_consumergroup_group_max_lag_seconds": (("cluster_name", "group", "is_simple_consumer", "source"),
                                                  "Largest lag in seconds of a group's partitions (newest stuck "
                                                  "run)"),
    "kafka_consumergroup_group_sum_lag": (GROUP, "Total lag in records of a group"),
    "kafka_consumergroup_group_topic_sum_lag": (("cluster_name", "group", "topic", "source"),
                                                "Total lag in records of a group on one topic"),
    # KMinion's names (FLEET_METRICS_NAMES=kminion or kafka-lag-exporter,kminion): groups kept in Kafka only
    "kminion_kafka_consumer_group_topic_partition_lag": (KM_GROUP_TOPIC + ("partition_id",),
                                                         "Lag in records of a partition of a group"),
    "kminion_kafka_consumer_group_topic_lag": (KM_GROUP_TOPIC, "Lag in records of a group on one topic"),
    "kminion_kafka_consumer_group_topic_offset_sum": (KM_GROUP_TOPIC, "Sum of a group's committed offsets on one "
                                                                      "topic"),
    "kminion_kafka_consumer_group_topic_assigned_partitions": (KM_GROUP_TOPIC, "Partitions of a topic a member of "
                                                                               "the group holds"),
    "kminion_kafka_consumer_group_info": (("cluster_name", "group_id", "state"),
                                          "1 when the group is Stable, else 0"),
    "kminion_kafka_topic_partition_high_water_mark": (("cluster_name", "topic_name", "partition_id"),
                                                      "Log end offset of a topic partition a group reads"),
    "kminion_kafka_topic_partition_low_water_mark": (("cluster_name", "topic_name", "partition_id"),
                                                     "Log start offset of a topic partition a group reads"),
    "kminion_kafka_topic_high_water_mark_sum": (("cluster_name", "topic_name"),
                                                "Sum of the log end offsets of a topic's partitions groups read"),
    "kminion_kafka_topic_low_water_mark_sum": (("cluster_name", "topic_name"),
                                               "Sum of the log start offsets of a topic's partitions groups read"),
    # the verdicts: per flagged partition (every verdict but OK), per group (worst first, at most
    # FLEET_METRICS_MAX_GROUP_SERIES), and counts of everything
    "fleet_partition_verdict": (JUDGED + ("verdict",), "1 for the verdict of a flagged partition"),
    "fleet_partitions_flagged": (("cluster_name", "verdict"), "Flagged partitions per verdict (all, not limited)"),
    "fleet_group_verdict": (GROUP + ("verdict",), "1 for a group's worst verdict (BLIND: OK not backed by the "
                                                  "newest collection)"),
    "fleet_group_rebalance_storm": (GROUP, "1 when the group is in a rebalance storm"),
    "fleet_cluster_groups": (("cluster_name", "verdict"), "Groups per shown verdict (all, not limited)"),
    # per cluster of the fleet file
    "fleet_cluster_state": (("cluster_name", "state"), "1 for the cluster's state: OK, BLIND, FAILING, STALE, NEVER"),
    "fleet_cluster_blind": (("cluster_name",), "1 when the newest collection was blind or failed"),
    "fleet_cluster_stale": (("cluster_name",), "1 when the newest collection is older than twice the interval"),
    "fleet_cluster_collection_age_seconds": (("cluster_name",), "Age of the newest successful collection"),
    "fleet_collection_interval_seconds": ((), "The deployment's collection interval (FLEET_COLLECTION_INTERVAL)"),
    # __consumer_offsets, per replica (cluster, broker, partition)
    "fleet_offsets_partition_verdict": (("cluster_name", "broker", "partition", "verdict"),
                                        "1 for a __consumer_offsets replica's health verdict"),
    "fleet_offsets_partition_size_bytes": (("cluster_name", "broker", "partition"),
                                           "Bytes on disk of a __consumer_offsets replica"),
    # coordinator ownership, per __consumer_offsets partition with a problem
    "fleet_coordinator_partition_verdict": (("cluster_name", "partition", "verdict"),
                                            "1 for a __consumer_offsets partition's coordinator problem"),
    "fleet_coordinator_partition_groups_affected": (("cluster_name", "partition"),
                                                    "Groups of the partition not served by their coordinator"),
    "fleet_coordinator_partition_not_ok_seconds": (("cluster_name", "partition"),
                                                   "How long the partition's groups have waited"),
    # approvals
    "fleet_pending_approvals": ((), "Approval records without an answer"),
    "fleet_pending_approval_oldest_age_seconds": ((), "Age of the oldest unanswered approval (0: none)"),
    # the metrics themselves
    "fleet_report_age_seconds": (("report",), "Age of the newest result file of a report (stuck, coordinator, "
                                              "offsets)"),
    "fleet_metrics_series_left_out": (("kind",), "What the limits left out (kind: partition, group: groups' "
                                                 "verdicts, group_lag: groups' lag)"),
    "fleet_metrics_source_up": (("source",), "0 when a part of the read model could not be read"),
    "fleet_metrics_partitions_behind": ((), "1 while the per-partition series are the collection's before the "
                                            "newest (the newest one's are being built)"),
}

#: the names shared with kafka-lag-exporter and with KMinion
LAG_EXPORTER = tuple(n for n in METRICS if n.startswith("kafka_"))
KMINION = tuple(n for n in METRICS if n.startswith("kminion_"))
COMPAT = LAG_EXPORTER + KMINION
#: FLEET_METRICS_NAMES: which of the compatible sets a scrape carries (the fleet_* names always)
NAME_SETS = {"kafka-lag-exporter": LAG_EXPORTER, "kminion": KMINION}
DEFAULT_NAME_SETS = ("kafka-lag-exporter",)

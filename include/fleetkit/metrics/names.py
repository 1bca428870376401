"""Every metric the fleet publishes: name -> (labels, help). One list, read by the collector, the
tests, the Grafana dashboard's test and docs/metrics.md.

Names: where kafka-lag-exporter publishes the same thing its name and labels are used (`cluster_name`,
`group`, `topic`, `partition`), so its dashboards work unchanged (`COMPAT`); everything else is
`fleet_*`. Extra labels on the compatible names: `source` (where the offset lives: kafka, zookeeper,
storm; one group name may exist in two stores) and, on the time lag, `kind` (exact, interpolated,
bounded: how the seconds were estimated, fleetkit.stuck.timelag).
"""

from __future__ import annotations

PARTITION = ("cluster_name", "group", "source", "topic", "partition")
GROUP = ("cluster_name", "group", "source")

METRICS: dict[str, tuple[tuple[str, ...], str]] = {
    # per flagged partition (every verdict but OK), worst first, at most FLEET_METRICS_MAX_PARTITION_SERIES
    "kafka_consumergroup_group_offset": (PARTITION, "Committed offset of a flagged partition (newest stuck run)"),
    "kafka_consumergroup_group_lag": (PARTITION, "Lag in records of a flagged partition (log end - committed)"),
    "kafka_consumergroup_group_lag_seconds": (PARTITION + ("kind",),
                                              "Lag in seconds of a flagged partition; kind: exact, interpolated, "
                                              "bounded (at least)"),
    "kafka_partition_latest_offset": (("cluster_name", "topic", "partition"),
                                      "Log end offset of a flagged partition's topic partition"),
    "fleet_partition_verdict": (PARTITION + ("verdict",), "1 for the verdict of a flagged partition"),
    "fleet_partitions_flagged": (("cluster_name", "verdict"), "Flagged partitions per verdict (all, not limited)"),
    # per group, worst first, at most FLEET_METRICS_MAX_GROUP_SERIES
    "fleet_group_verdict": (GROUP + ("verdict",), "1 for a group's worst verdict (BLIND: OK not backed by the "
                                                  "newest collection)"),
    "fleet_group_rebalance_storm": (GROUP, "1 when the group is in a rebalance storm"),
    "kafka_consumergroup_group_sum_lag": (GROUP, "Total lag in records of a group"),
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
    "fleet_metrics_series_left_out": (("kind",), "Series left out by the limits (kind: partition, group)"),
    "fleet_metrics_source_up": (("source",), "0 when a part of the read model could not be read"),
}

#: the names shared with kafka-lag-exporter (its labels cluster_name, group, topic, partition)
COMPAT = tuple(n for n in METRICS if n.startswith("kafka_"))

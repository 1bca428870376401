"""CollectClusterOperator: the collect stage for one cluster of the fleet."""

from __future__ import annotations

from typing import Any, Sequence

from airflow.providers.common.compat.sdk import AirflowException, AirflowFailException, BaseOperator

from fleetkit.core.errors import FleetConfigError, FleetError
from fleetkit.core.fleet import load_fleet
from fleetkit.core.render import visible_controls as v


class CollectClusterOperator(BaseOperator):
    """Read one cluster (groups, committed offsets, log offsets, partition state, coordinators) and
    append the rows to the datasets under the data root, all or nothing.

    Fails with a message naming the cluster and its bootstrap servers when the cluster does not
    answer; other clusters' tasks are unaffected. A blind collection (fleetkit.collection.blind: a
    refused ACL, groups not read, no rows) is written and recorded first, then fails the task (no
    retry: the next run collects again) with one line naming what was not seen: the analyses still
    run on what every cluster gave, and the run ends failed.
    """

    template_fields: Sequence[str] = ("fleet_file", "cluster", "data_root")
    ui_color = "#e8f1fb"

    def __init__(self, *, fleet_file: str, cluster: str, data_root: str, retention_days: int = 30,
                 **kwargs):
        super().__init__(**kwargs)
        self.fleet_file = fleet_file
        self.cluster = cluster
        self.data_root = data_root
        self.retention_days = retention_days

    def execute(self, context) -> dict[str, Any]:
        from fleet_airflow import clusters

        try:
            cluster = load_fleet(self.fleet_file).cluster(self.cluster)
            self.log.info("collecting cluster %s (fleet file %s) into %s", cluster.name, self.fleet_file,
                          self.data_root)
            res = clusters.collect(cluster, self.data_root, self.retention_days)
        except FleetError as e:
            if not isinstance(e, FleetConfigError):  # unreachable, login or TLS refused: not seen at all
                self.log.error("cluster %s blind: %s", v(self.cluster), v(" ".join(str(e).split())))
            raise AirflowException(str(e)) from None
        from fleetkit.collection.blind import cluster_state
        from fleetkit.collection.groups import collection_status
        from fleetkit.core.datasets import DataRoot

        self.log.info("%s", v(res.summary()))
        for p in res.problems:  # problems name groups and topics: one line each
            self.log.warning("cluster %s: %s", cluster.name, v(p))
        state = cluster_state(collection_status(DataRoot(self.data_root), cluster.name))
        if state["state"] != "OK":
            self.log.error("cluster %s %s", v(cluster.name), state["line"])
            raise AirflowFailException(f"cluster {v(cluster.name)} {state['line']}")
        return {"cluster": res.cluster, "observed_at": res.observed_at.isoformat(),
                "groups": len(res.groups), "rows": {k: len(v) for k, v in res.rows.items()},
                "problems": res.problems[:50], "seconds": round(res.seconds, 2)}


class CollectOffsetsTopicOperator(BaseOperator):
    """Read one cluster's new __consumer_offsets records (incrementally) and the segment inventory
    and cleaner checkpoints of its brokers' log dirs; append them to the datasets, all or nothing."""

    template_fields: Sequence[str] = ("fleet_file", "cluster", "data_root", "partitions")
    ui_color = "#e8f1fb"

    def __init__(self, *, fleet_file: str, cluster: str, data_root: str, partitions: str = "all", **kwargs):
        super().__init__(**kwargs)
        self.fleet_file, self.cluster, self.data_root, self.partitions = fleet_file, cluster, data_root, partitions

    def execute(self, context) -> dict[str, Any]:
        from fleet_airflow import clusters

        try:
            cluster = load_fleet(self.fleet_file).cluster(self.cluster)
            parts = None
            if self.partitions not in ("all", "", None, "all-unhealthy"):
                parts = sorted({int(p) for p in str(self.partitions).split(",") if p.strip()})
            res = clusters.collect_offsets_topic(cluster, self.data_root, parts)
        except ValueError:
            raise AirflowException(f"partitions {self.partitions!r} must be 'all' or numbers like 3,7") from None
        except FleetError as e:
            raise AirflowException(str(e)) from None
        for p in res.problems[:100]:
            self.log.warning("cluster %s: %s", self.cluster, v(p))
        return {"cluster": self.cluster, "records": res.records_written, "other_versions": res.other_versions,
                "restarted": res.restarted, "problems": len(res.problems), "seconds": round(res.seconds, 1)}

"""The ownership check's collection: group_coordinators and the __consumer_offsets partition_state,
repeated while a partition is loading so the analysis sees the whole timeline.

``collect_coordinators`` is one light pass (seconds). ``collect_until_settled`` repeats it every
`interval` seconds while any group is not served -- its verdict (fleetkit.ownership.rules) is not
OK: an error, or a coordinator that is not its partition's leader -- for at most `settle_seconds`,
writing each pass (all or nothing). ``not_served`` is the per-pass verdict it stops on.
"""

from __future__ import annotations

import datetime as dt
import time
from typing import Callable

from fleetkit.clients.kafka import KafkaCluster
from fleetkit.clients.zookeeper import ZooKeeperCluster
from fleetkit.collection.groups import CollectionResult, coordinator_rows, partition_state_rows, state_path
from fleetkit.core.datasets import DataRoot, utcnow, write_collection
from fleetkit.core.fleet import Cluster
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.partitioning import partitions_for
from fleetkit.ownership.rules import OK, verdict


def collect_coordinators(cluster: Cluster, kafka: KafkaCluster, zk: ZooKeeperCluster | None,
                         groups: list[str] | None = None, now: dt.datetime | None = None) -> CollectionResult:
    """The light collection behind the ownership check: group_coordinators and the
    __consumer_offsets partition_state only (seconds, so it can repeat while a partition loads)."""
    t0 = time.monotonic()
    problems: list[str] = []
    if groups is None:
        groups = sorted({g for g, _ in kafka.list_groups()} | set(cluster.groups))
    observed_at = now or utcnow()
    rows = {"group_coordinators": coordinator_rows(cluster.name, kafka, groups, None, observed_at, problems),
            "partition_state": partition_state_rows(cluster, kafka, zk, [OFFSETS_TOPIC], observed_at, problems)}
    result = CollectionResult(cluster=cluster.name, observed_at=observed_at, rows=rows, groups=groups,
                              problems=problems, known_groups={})
    result.seconds = time.monotonic() - t0
    return result


def groups_to_watch(cluster: Cluster, kafka: KafkaCluster, root: DataRoot) -> list[str]:
    """The groups the cluster lists, those of the fleet file and those earlier collections remember."""
    return sorted({g for g, _ in kafka.list_groups()} | set(cluster.groups)
                  | set(root.read_json(state_path(root, cluster.name), default={}) or {}))


def not_served(rows: dict[str, list[dict]], groups: list[str]) -> dict[str, str]:
    """{group: verdict} of the groups of one pass whose verdict is not OK. The group_coordinators
    rows are aligned with `groups`; a group's expected coordinator is the leader of its
    __consumer_offsets partition in the same pass's partition_state rows."""
    leaders = {r["partition"]: r["leader"] for r in rows["partition_state"]}
    count = (max(leaders) + 1) if leaders else 0
    parts = partitions_for(groups, count).tolist() if count else [None] * len(groups)
    out = {}
    for row, p in zip(rows["group_coordinators"], parts):
        v = verdict(row["coordinator_id"], row["error"], leaders.get(p))
        if v != OK:
            out[row["group"]] = v
    return out


def collect_until_settled(cluster: Cluster, kafka: KafkaCluster, zk: ZooKeeperCluster | None, root: DataRoot,
                          settle_seconds: float = 60.0, interval: float = 5.0,
                          log_each: Callable[[dict], None] | None = None,
                          started: float | None = None) -> list[dict]:
    """group_coordinators + __consumer_offsets partition_state, repeated every `interval` seconds
    while any group is not served (an error, or a coordinator that is not its partition's
    leader), for at most `settle_seconds`. Each pass is written (all or nothing) so the job sees
    the whole timeline: loading, then served again -- or still stuck. Returns one summary per
    pass ({observed_at, groups, not_ok, examples, problems}), each also given to `log_each`.
    `started` (a time.monotonic() value, default now) is when the settle time began: a caller that
    connects first passes when it started connecting."""
    passes: list[dict] = []
    t0 = time.monotonic() if started is None else started
    groups = groups_to_watch(cluster, kafka, root)
    while True:
        res = collect_coordinators(cluster, kafka, zk, groups=groups)
        write_collection(root, cluster.name, res.observed_at, res.rows)
        not_ok = not_served(res.rows, groups)
        summary = {"observed_at": res.observed_at.isoformat(), "groups": len(groups), "not_ok": len(not_ok),
                   "examples": dict(list(sorted(not_ok.items()))[:5]), "problems": res.problems[:10]}
        passes.append(summary)
        if log_each:
            log_each(summary)
        if not not_ok or time.monotonic() - t0 + interval > settle_seconds:
            return passes
        time.sleep(interval)

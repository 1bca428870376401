"""What an ownership check run collects besides fleetkit.collection (the group_coordinators and
partition_state datasets): which clusters it checks (``clusters_to_check``: those of the
leader-change events that started it, or its params), and those events' leader changes as the
leader_changes dataset (``record_changes``)."""

from __future__ import annotations

import datetime as dt

from fleetkit.core.datasets import DataRoot, write_collection
from fleetkit.ownership import rules


def clusters_to_check(params: dict, events: list[dict], fleet_names: list[str]) -> list[str]:
    if events:
        return sorted({e["cluster"] for e in events})
    wanted = params.get("cluster") or "all"
    if wanted == "all":
        return fleet_names
    if wanted not in fleet_names:
        raise ValueError(f"cluster {wanted!r} is not in the fleet file (clusters: {', '.join(fleet_names)})")
    return [wanted]


def record_changes(data_root: str, events: list[dict]) -> int:
    """Append the watch's leader changes ({"cluster", "changes", "observed_at"} payloads) to the
    leader_changes dataset (the job joins them with the collected partition states: the watch knows
    the state BEFORE the change and when it happened)."""
    root, n = DataRoot(data_root), 0
    for e in events:
        seen = dt.datetime.fromisoformat(e["observed_at"].replace("Z", "+00:00"))
        rows = [{"cluster": e["cluster"], "partition": c["partition"], "observed_at": seen,
                 "from_leader": c["from_leader"], "to_leader": c["to_leader"], "from_epoch": c["from_epoch"],
                 "to_epoch": c["to_epoch"], "isr": c["isr"], "source": "watch"} for c in e["changes"]]
        if rows:
            write_collection(root, e["cluster"], seen, {"leader_changes": rows})
            n += len(rows)
    return n


def who(kafka, zk, groups: list[str]) -> list[dict]:
    """Live answer for `fleetctl coordinator who`: per group its partition, that partition's leader,
    ISR and leader epoch (ZooKeeper when the cluster has one, else metadata), the coordinator the
    cluster names, what that broker answers, and the verdict."""
    from fleetkit.clients.offsets_leaders import offsets_topic_state
    from fleetkit.core.kafka_names import OFFSETS_TOPIC
    from fleetkit.core.partitioning import partition_for

    # ZooKeeper when the cluster has one; metadata when ZooKeeper has no state for the topic yet
    found = (offsets_topic_state(kafka, zk) if zk is not None else {}) or offsets_topic_state(kafka, None)
    states = {p: {"leader": s.leader, "isr": list(s.isr), "leader_epoch": s.leader_epoch} for p, s in found.items()}
    if not states:
        raise LookupError(f"cluster {kafka.name!r} has no {OFFSETS_TOPIC} topic yet (no group has committed)")
    count = max(states) + 1
    answers = kafka.coordinators(groups)
    if answers is None:
        descs = kafka.describe_groups(groups)
    out = []
    for g in groups:
        p = partition_for(g, count)
        st = states.get(p, {"leader": None, "isr": [], "leader_epoch": None})
        if answers is not None:
            a = answers[g]
            coord, error, state = a.coordinator_id, a.error, a.state
        else:
            d = descs[g]
            coord, error, state = d.coordinator_id, d.error, d.state
        out.append({"group": g, "partition": p, "partitions": count, **st, "coordinator_id": coord,
                    "error": error, "state": state, "verdict": rules.verdict(coord, error, st["leader"])})
    return out

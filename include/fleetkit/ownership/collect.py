"""What an ownership check run collects besides fleetkit.collection (the group_coordinators and
partition_state datasets): which clusters it checks (``clusters_to_check``: those of the
leader-change events that started it, or its params), and those events' leader changes as the
leader_changes dataset (``record_changes``)."""

from __future__ import annotations

import datetime as dt

from fleetkit.core.datasets import DataRoot, write_collection


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

"""The ownership check DAG's steps that are not Spark: which clusters a run checks (from the
leader-change events that scheduled it, or its params), and the report."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

from fleetkit.core.datasets import read_jsonl
from fleetkit.core.render import render

log = logging.getLogger(__name__)

WATCH_ASSET_PREFIX = "kafka_leader_change__"


def asset_name(cluster: str) -> str:
    return f"{WATCH_ASSET_PREFIX}{cluster}"


def asset_uri(cluster: str) -> str:
    from urllib.parse import quote

    return f"x-kafka-leader-change://{quote(cluster, safe='')}"


def events_from_context(context) -> list[dict]:
    """The watch payloads ({"cluster", "changes", "observed_at"}) of the asset events behind this run."""
    out = []
    events = context.get("triggering_asset_events") or {}
    for _asset, evs in events.items():
        for ev in evs:
            payload = (getattr(ev, "extra", None) or {}).get("payload")
            if isinstance(payload, dict) and payload.get("cluster"):
                out.append(payload)
    return out


def clusters_to_check(params: dict, events: list[dict], fleet_names: list[str]) -> list[str]:
    if events:
        return sorted({e["cluster"] for e in events})
    wanted = params.get("cluster") or "all"
    if wanted == "all":
        return fleet_names
    if wanted not in fleet_names:
        raise ValueError(f"cluster {wanted!r} is not in the fleet file (clusters: {', '.join(fleet_names)})")
    return [wanted]


def report(out_dir: str, data_root: str, events: list[dict], passes: dict, load_stuck: str) -> dict:
    """Render report.md from the job's groups.jsonl / partitions.jsonl, copy it to
    reports/coordinator/latest, and return a summary (what needs a person)."""
    out = Path(out_dir)
    groups = read_jsonl(out / "groups.jsonl")
    partitions = read_jsonl(out / "partitions.jsonl")
    # a leader change or a problem; 0.9's controller also bumps the epoch when it only shrinks the
    # ISR (a follower stopped): those partitions are counted, not listed
    moved = lambda p: any(c["from_leader"] != c["to_leader"] for c in p["changes"] or [])  # noqa: E731
    flagged = [p for p in partitions if p["verdict"] not in ("OK", "NO_GROUPS") or moved(p)]
    isr_only = sum(1 for p in partitions if p["changes_in_window"] and p not in flagged)
    flagged.sort(key=lambda p: (p["verdict"] == "OK", p["cluster"], p["partition"]))
    bad_groups = sorted((g for g in groups if g["verdict"] != "OK"), key=lambda g: (g["cluster"], g["partition"], g["group"]))
    text = render("coordinator_report.md.j2", partitions=flagged, groups=bad_groups[:500], total_groups=len(groups),
                  hidden_groups=max(0, len(bad_groups) - 500), events=events, passes=passes, load_stuck=load_stuck,
                  isr_only=isr_only)
    (out / "report.md").write_text(text, encoding="utf-8")
    latest = Path(data_root) / "reports" / "coordinator" / "latest"
    latest.mkdir(parents=True, exist_ok=True)
    for name in ("report.md", "groups.jsonl", "partitions.jsonl"):
        if (out / name).exists():
            shutil.copyfile(out / name, latest / name)
    stuck = [p for p in partitions if p["verdict"] in ("LOAD_STUCK", "MISMATCH")]
    return {"report": str(out / "report.md"), "groups": len(groups), "not_ok_groups": len(bad_groups),
            "partitions_flagged": [(p["cluster"], p["partition"], p["verdict"]) for p in flagged],
            "needs_recovery": [{"cluster": p["cluster"], "partition": p["partition"], "verdict": p["verdict"]}
                               for p in stuck]}


def record_changes(data_root: str, events: list[dict]) -> int:
    """Append the watch's leader changes to the leader_changes dataset (the job joins them with the
    collected partition states: the watch knows the state BEFORE the change and when it happened)."""
    import datetime as dt

    from fleetkit.core.datasets import DataRoot, write_collection

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

"""The trim plan from the rows the jobs compute: one assembly for spark_jobs/trim_plan.py and the
in-process engine (fleetkit.trim.inprocess). The rules it applies are fleetkit.trim.rules'.

A plan per cluster: per partition, per replica the segments to quarantine and to keep with the
bytes freed and the health verdict; the removed offsets to re-commit (groups Empty) or to list
(active groups); the groups whose metadata record goes; the groups with live offsets there.
"""

from __future__ import annotations

import json
from typing import Iterable

from fleetkit.trim import rules

#: the columns of a removed offset commit (`assemble`'s `commits`)
COMMIT_FIELDS = ("cluster", "partition", "group", "topic", "topic_partition", "committed_offset", "metadata",
                 "offset", "group_state", "metadata_live")


def mark_quarantine(replicas: dict[tuple, list[dict]]) -> dict[tuple, list[dict]]:
    """Sets "quarantine" (rules.quarantined) on each segment of {(cluster, broker, partition): its
    segments of the latest inventory, oldest first}; returns `replicas`."""
    for segs in replicas.values():
        moved = rules.quarantined((seg["base_offset"], seg["is_active"]) for seg in segs)
        for seg in segs:
            seg["quarantine"] = seg["base_offset"] in moved
    return replicas


def cutoffs_of(replicas: dict[tuple, list[dict]]) -> dict[tuple, int]:
    """{(cluster, partition): the offset below which a trimmed replica keeps no record}: a key is
    lost if any trimmed replica loses it (leadership may move), so the highest cutoff counts."""
    out: dict[tuple, int] = {}
    for (cluster, _broker, partition), segs in replicas.items():
        if any(seg["quarantine"] for seg in segs):
            kept = min(seg["base_offset"] for seg in segs if not seg["quarantine"])
            out[(cluster, partition)] = max(out.get((cluster, partition), kept), kept)
    return out


def _iso(t) -> str | None:
    if t is None:
        return None
    if getattr(t, "tzinfo", None) is not None:  # the Spark job's timestamps are naive UTC
        import datetime as dt

        t = t.astimezone(dt.timezone.utc).replace(tzinfo=None)
    return t.isoformat()


def assemble(replicas: dict[tuple, list[dict]], commits: Iterable[dict], live_groups: Iterable[dict],
             metadata_lost: Iterable[dict], health_rows: dict[tuple, dict]) -> dict[str, dict]:
    """{cluster: plan}. `replicas`: mark_quarantine's; `commits`: the removed offset commits
    (COMMIT_FIELDS) ordered by cluster, partition, group, topic, topic_partition; `live_groups`:
    (cluster, partition, group) with a live offset, ordered; `metadata_lost`: the removed
    group-metadata records (cluster, partition, group, generation, offset), ordered;
    `health_rows`: {(cluster, broker, partition): its health row}."""
    plans: dict[str, dict] = {}
    for r in (seg for key in sorted(replicas, key=lambda k: (k[0], k[2], k[1])) for seg in replicas[key]):
        c = plans.setdefault(r["cluster"], {"cluster": r["cluster"], "partitions": {}})
        p = c["partitions"].setdefault(r["partition"], {"partition": r["partition"], "replicas": {},
                                                        "recommit": [], "active_groups": [],
                                                        "group_metadata_lost": []})
        b = p["replicas"].setdefault(str(r["broker"]), {"broker": r["broker"], "log_dir": r["log_dir"],
                                                        "quarantine": [], "kept": [], "bytes_freed": 0})
        seg = {"base_offset": r["base_offset"], "size_bytes": r["size_bytes"], "is_active": r["is_active"],
               "modified_at": _iso(r["modified_at"])}
        if r["quarantine"]:
            b["quarantine"].append(seg)
            b["bytes_freed"] += r["size_bytes"]
        else:
            b["kept"].append(seg)
    for r in commits:
        p = plans[r["cluster"]]["partitions"].get(r["partition"])
        if p is None:
            continue
        state = rules.group_state(r["group_state"], r["metadata_live"])
        item = {"group": r["group"], "topic": r["topic"], "partition": r["topic_partition"],
                "offset": r["committed_offset"], "metadata": r["metadata"], "record_offset": r["offset"],
                "group_state": state}
        (p["recommit"] if rules.may_recommit(state) else p["active_groups"]).append(item)
    for r in live_groups:
        p = plans.get(r["cluster"], {}).get("partitions", {}).get(r["partition"])
        if p is not None:
            p.setdefault("groups", []).append(r["group"])
    for r in metadata_lost:
        p = plans[r["cluster"]]["partitions"].get(r["partition"])
        if p is not None:
            p["group_metadata_lost"].append({"group": r["group"], "generation": r["generation"],
                                             "record_offset": r["offset"]})
    for c in plans.values():
        for p in c["partitions"].values():
            for b in p["replicas"].values():
                h = health_rows.get((c["cluster"], b["broker"], p["partition"]), {})
                b["verdict"], b["reason"] = h.get("verdict"), h.get("reason")
                b["fix"] = json.loads(h["fix"]) if h.get("fix") else None
        c["partitions"] = [c["partitions"][k] for k in sorted(c["partitions"])]
        for p in c["partitions"]:
            p["replicas"] = [p["replicas"][k] for k in sorted(p["replicas"], key=int)]
    return plans


def plan_json(plans: dict[str, dict]) -> str:
    """trim_plan.json's text."""
    return json.dumps(list(plans.values()), indent=1, sort_keys=True, default=str)


def summary(plans: dict[str, dict]) -> dict:
    """The job's summary line per cluster."""
    return {c: {"partitions": len(p["partitions"]),
                "segments": sum(len(b["quarantine"]) for q in p["partitions"] for b in q["replicas"]),
                "bytes_freed": sum(b["bytes_freed"] for q in p["partitions"] for b in q["replicas"]),
                "recommit": sum(len(q["recommit"]) for q in p["partitions"]),
                "active_groups": sum(len(q["active_groups"]) for q in p["partitions"])}
            for c, p in plans.items()}

"""The ownership report: which partitions and groups need a person (``rank``), report.md rendered
from the ownership job's groups.jsonl / partitions.jsonl and copied with them to
reports/coordinator/latest (``report``), and the partitions the recovery runbook is started for."""

from __future__ import annotations

from fleetkit.core.datasets import as_path, publish_copy, read_jsonl
from fleetkit.core.settings import under_root
from fleetkit.core.render import render
from fleetkit.ownership.rules import LOAD_STUCK, MISMATCH, NO_GROUPS, OK

GROUPS_LIMIT = 500  # not-OK groups listed in a report; groups.jsonl has them all
NEEDS_RECOVERY = (LOAD_STUCK, MISMATCH)
LATEST_FILES = ("report.md", "groups.jsonl", "partitions.jsonl")


def moved(partition: dict) -> bool:
    """The partition's leader changed in the window (not only its ISR)."""
    return any(c["from_leader"] != c["to_leader"] for c in partition["changes"] or [])


def rank(partitions: list[dict], groups: list[dict]) -> tuple[list[dict], int, list[dict]]:
    """(the partitions to list, problems first then by cluster and partition; how many partitions
    only had ISR changes; the groups not OK, by cluster, partition and group).

    A partition is listed for a leader change or a problem; 0.9's controller also bumps the epoch
    when it only shrinks the ISR (a follower stopped): those partitions are counted, not listed."""
    flagged = [p for p in partitions if p["verdict"] not in (OK, NO_GROUPS) or moved(p)]
    isr_only = sum(1 for p in partitions if p["changes_in_window"] and p not in flagged)
    flagged.sort(key=lambda p: (p["verdict"] == OK, p["cluster"], p["partition"]))
    bad_groups = sorted((g for g in groups if g["verdict"] != OK), key=lambda g: (g["cluster"], g["partition"], g["group"]))
    return flagged, isr_only, bad_groups


def report(out_dir: str, data_root: str, events: list[dict], passes: dict, load_stuck: str) -> dict:
    """Render report.md from the job's groups.jsonl / partitions.jsonl, copy it to
    reports/coordinator/latest, and return a summary (what needs a person)."""
    out = as_path(out_dir)
    groups = read_jsonl(out / "groups.jsonl")
    partitions = read_jsonl(out / "partitions.jsonl")
    flagged, isr_only, bad_groups = rank(partitions, groups)
    text = render("coordinator_report.md.j2", partitions=flagged, groups=bad_groups[:GROUPS_LIMIT],
                  total_groups=len(groups), hidden_groups=max(0, len(bad_groups) - GROUPS_LIMIT), events=events,
                  passes=passes, load_stuck=load_stuck, isr_only=isr_only)
    (out / "report.md").write_text(text, encoding="utf-8")
    latest = as_path(under_root(data_root, "reports", "coordinator", "latest"))
    latest.mkdir(parents=True, exist_ok=True)
    for name in LATEST_FILES:
        if (out / name).exists():
            publish_copy(out / name, latest / name)
    stuck = [p for p in partitions if p["verdict"] in NEEDS_RECOVERY]
    return {"report": str(out / "report.md"), "groups": len(groups), "not_ok_groups": len(bad_groups),
            "partitions_flagged": [(p["cluster"], p["partition"], p["verdict"]) for p in flagged],
            "needs_recovery": [{"cluster": p["cluster"], "partition": p["partition"], "verdict": p["verdict"]}
                               for p in stuck]}

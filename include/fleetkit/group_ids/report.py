"""The group-id reconciliation report: the Spark job's findings and summary (``load_findings``)
rendered as report.md (``render_report``, every cluster-supplied value escaped)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from fleetkit.core.datasets import as_path, read_jsonl
from fleetkit.group_ids.rules import CLASSES


def load_findings(out_dir: str | os.PathLike) -> tuple[list[dict], dict]:
    """(findings, summary) written by the Spark job into out_dir."""
    out = as_path(out_dir)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {"clusters": {}}
    return read_jsonl(out / "findings.jsonl"), summary


def render_report(out_dir: str | os.PathLike, max_rows: int = 2000,
                  fleet_file: str | os.PathLike | None = None) -> Path:
    """report.md next to the job's output (every cluster-supplied value escaped); with `fleet_file`,
    the clusters that have no mappings to reconcile too (no section; KRaft: no ZooKeeper)."""
    from fleetkit.core.render import render

    unconfigured = []
    if fleet_file:
        from fleetkit.core.fleet import load_fleet
        from fleetkit.group_ids.collect import unconfigured as without_mappings

        unconfigured = without_mappings(load_fleet(fleet_file))
    findings, summary = load_findings(out_dir)
    clusters = [{"cluster": c, "counts": sorted(v.items(), key=lambda kv: CLASSES.index(kv[0]) if kv[0] in CLASSES else 99)}
                for c, v in sorted(summary.get("clusters", {}).items())]
    path = as_path(out_dir) / "report.md"
    path.write_text(render("group_ids.md.j2", clusters=clusters, findings=findings, shown=max_rows,
                           unconfigured=unconfigured,
                           truncated=len(findings) > max_rows), encoding="utf-8")
    return path

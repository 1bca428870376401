"""The `__consumer_offsets` health report: the trim_health job's verdicts (health.jsonl) and
the trim plans (trim_plan.json) of one run folder, rendered as offsets_health.md, and the lines
the alert notifier sends for the unhealthy replicas."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fleetkit.core.datasets import as_path, read_jsonl
from fleetkit.core.render import render, visible_controls


@dataclass
class HealthReport:
    health: list[dict]
    unhealthy: list[dict]
    plans: list[dict]
    path: Path

    def log_lines(self) -> list[str]:
        """One line per unhealthy replica, names made visible (for a task log)."""
        return [f"{visible_controls(h['cluster'])} broker {h['broker']} __consumer_offsets-{h['partition']} "
                f"{h['verdict']}: {visible_controls(h['reason'])}" for h in self.unhealthy]

    def alert_lines(self) -> list[str]:
        return [f"{h['verdict']} {h['cluster']} broker {h['broker']} partition {h['partition']}: {h['reason']}"
                for h in self.unhealthy]


def write_report(out_dir: str | Path) -> HealthReport:
    """Read a run folder's health.jsonl and trim_plan.json (absent: no plan) and write its
    offsets_health.md."""
    out = as_path(out_dir)
    health = read_jsonl(out / "health.jsonl")
    plans = json.loads((out / "trim_plan.json").read_text()) if (out / "trim_plan.json").exists() else []
    unhealthy = [h for h in health if h["verdict"] != "HEALTHY"]
    md = out / "offsets_health.md"
    md.write_text(render("offsets_health.md.j2", health=health, unhealthy=unhealthy, plans=plans), encoding="utf-8")
    return HealthReport(health, unhealthy, plans, md)

"""OffsetsHealthReportOperator: log and render the __consumer_offsets health and trim plans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from airflow.providers.common.compat.sdk import BaseOperator

from fleetkit.core.fleet import load_fleet
from fleetkit.core.render import render, visible_controls as v
from fleetkit.core.datasets import read_jsonl

from fleet_airflow.notifiers import FleetAlertNotifier


class OffsetsHealthReportOperator(BaseOperator):
    template_fields: Sequence[str] = ("out_dir", "fleet_file")

    def __init__(self, *, out_dir: str, fleet_file: str, **kwargs):
        super().__init__(**kwargs)
        self.out_dir, self.fleet_file = out_dir, fleet_file

    def execute(self, context) -> dict:
        out = Path(self.out_dir)
        health = read_jsonl(out / "health.jsonl")
        plans = json.loads((out / "trim_plan.json").read_text()) if (out / "trim_plan.json").exists() else []
        unhealthy = [h for h in health if h["verdict"] != "HEALTHY"]
        for h in unhealthy:
            self.log.warning("%s broker %s __consumer_offsets-%s %s: %s", v(h["cluster"]), h["broker"], h["partition"],
                             h["verdict"], v(h["reason"]))
        md = out / "offsets_health.md"
        md.write_text(render("offsets_health.md.j2", health=health, unhealthy=unhealthy, plans=plans), encoding="utf-8")
        self.log.info("__consumer_offsets health: %d replica(s), %d unhealthy; report %s", len(health), len(unhealthy), md)
        if unhealthy:
            FleetAlertNotifier(title=f"{len(unhealthy)} unhealthy __consumer_offsets replica(s)",
                               lines=[f"{h['verdict']} {h['cluster']} broker {h['broker']} partition {h['partition']}: "
                                      f"{h['reason']}" for h in unhealthy],
                               settings=load_fleet(self.fleet_file).alerts)(context)
        return {"replicas": len(health), "unhealthy": len(unhealthy), "report": str(md)}

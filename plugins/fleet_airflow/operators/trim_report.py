"""TrimHealthReportOperator: the __consumer_offsets health report of a run
(fleetkit.trim.report), logged, and the alert notifier for unhealthy replicas."""

from __future__ import annotations

from typing import Sequence

from airflow.providers.common.compat.sdk import BaseOperator

from fleetkit.core.fleet import load_fleet
from fleetkit.trim.report import write_report

from fleet_airflow.notifiers import FleetAlertNotifier


class TrimHealthReportOperator(BaseOperator):
    template_fields: Sequence[str] = ("out_dir", "fleet_file")

    def __init__(self, *, out_dir: str, fleet_file: str, **kwargs):
        super().__init__(**kwargs)
        self.out_dir, self.fleet_file = out_dir, fleet_file

    def execute(self, context) -> dict:
        report = write_report(self.out_dir)
        for line in report.log_lines():
            self.log.warning("%s", line)
        self.log.info("__consumer_offsets health: %d replica(s), %d unhealthy; report %s", len(report.health),
                      len(report.unhealthy), report.path)
        if report.unhealthy:
            FleetAlertNotifier(title=f"{len(report.unhealthy)} unhealthy __consumer_offsets replica(s)",
                               lines=report.alert_lines(), settings=load_fleet(self.fleet_file).alerts)(context)
        return {"replicas": len(report.health), "unhealthy": len(report.unhealthy), "report": str(report.path)}

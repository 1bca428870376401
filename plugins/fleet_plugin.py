"""Registers the toolkit with Airflow: the report link on tasks and the /fleet-reports pages
(the reports folder under the data root, served read-only by the api-server)."""

from __future__ import annotations

from pathlib import Path

from airflow.plugins_manager import AirflowPlugin

from fleet_airflow import settings
from fleet_airflow.operators.report import StuckReportLink


def _reports_app():
    from fastapi import FastAPI
    from fastapi.staticfiles import StaticFiles

    reports = Path(settings.data_root()) / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    app = FastAPI(title="Kafka fleet reports")
    app.mount("/", StaticFiles(directory=str(reports), html=True), name="reports")
    return app


class FleetPlugin(AirflowPlugin):
    name = "kafka_fleet_toolkit"
    operator_extra_links = [StuckReportLink()]
    fastapi_apps = [{"app": _reports_app(), "url_prefix": "/fleet-reports", "name": "Kafka fleet reports"}]
    external_views = [{"name": "Stuck offsets report", "href": "/fleet-reports/stuck/latest/report.html",
                       "destination": "nav",
                       "url_route": "fleet-reports"}]

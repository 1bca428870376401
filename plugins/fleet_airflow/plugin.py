"""The toolkit's Airflow plugin, registered by the installed package's `airflow.plugins` entry point
(no file in a plugins folder): the report link on tasks, the /fleet-reports pages (the reports
folder under the data root, served read-only by the api-server) and the fleet page /fleet/
(fleet_airflow.fleet_page), both in the UI's navigation; the fleet page's app also serves the
Prometheus scrape /fleet/metrics (docs/metrics.md).

The plugin loads whatever the deployment's settings are: a page asked for while a required setting
is missing answers 503 with the one line naming it (fleetkit.core.settings.MissingSetting).

The reports name clusters, hosts, client ids, broker paths and trim plans, so /fleet-reports
answers only logged-in users who may read DAGs: the api-server's own authentication (a Bearer
token, or the UI's `_token` cookie when the page is opened from the Airflow UI) and its auth
manager's DAG read check, against the DAG that writes the report's folder (REPORT_DAGS) or, for
any other folder, against all DAGs. 401 without or with an invalid token, 403 without the
permission, 400 for a path that leaves the reports folder.
"""

from __future__ import annotations

from pathlib import Path

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request, Response, status
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool

from fleet_airflow import settings
from fleet_airflow.fleet_page import LineFeedPaths, fleet_app
from fleet_airflow.operators.report import StuckReportLink
from fleet_airflow.web_auth import add_framing_headers, reader, require_dag_read

# the DAG that writes each folder under <data root>/reports; reading a report needs read access
# to that DAG (other folders: read access to all DAGs)
REPORT_DAGS = {
    "stuck": "fleet_maintenance",
    "offsets": "fleet_maintenance",
    "trim": "runbook_trim",
    "coordinator": "ownership",
    "group_ids": "group_ids",
}


def report_path_error(path: str) -> str | None:
    """Why a requested path (relative to the reports folder, already URL-decoded) is refused, or
    None: no `..` component, no absolute path, no backslash, no NUL."""
    if "\x00" in path:
        return "the path holds a NUL byte"
    if "\\" in path:
        return "the path holds a backslash"
    if path.startswith("/"):
        return "the path is absolute"
    if any(part == ".." for part in path.split("/")):
        return "the path leaves the reports folder (..)"
    return None


def _reports_app() -> FastAPI:
    statics: dict[str, StaticFiles] = {}

    def reports_root() -> str:
        """The reports folder of the deployment's data root, read when a report is asked for."""
        try:
            settings.require()
            return settings.under_root(settings.data_root(), "reports")
        except settings.MissingSetting as e:
            raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None

    def static_files(reports: str) -> StaticFiles:
        reports = Path(reports)
        if str(reports) not in statics:
            reports.mkdir(parents=True, exist_ok=True)
            # StaticFiles looks files up in a worker thread and streams them with anyio: the event
            # loop never waits on the disk. follow_symlink=False: a symlink out of the folder is not served.
            statics[str(reports)] = StaticFiles(directory=str(reports), html=True, follow_symlink=False)
        return statics[str(reports)]

    def may_read(path: str, user=Depends(reader)) -> None:
        require_dag_read(user, REPORT_DAGS.get(path.split("/", 1)[0]))

    app = FastAPI(title="Kafka fleet reports", docs_url=None, redoc_url=None, openapi_url=None)
    add_framing_headers(app)

    @app.api_route("/{path:path}", methods=["GET", "HEAD"], dependencies=[Depends(may_read)])
    async def report(path: str, request: Request):
        why = report_path_error(path)
        if why:
            raise HTTPException(status.HTTP_400_BAD_REQUEST, f"refused {path!r}: {why}")
        reports = reports_root()
        if "://" in reports:
            response = await run_in_threadpool(_object_store_report, reports, path, request.method == "HEAD")
        else:
            response = await static_files(reports).get_response(path or ".", request.scope)
        response.headers["Cache-Control"] = "private, no-cache"
        return response

    return app


def _object_store_report(reports: str, path: str, head: bool) -> Response:
    """A report file of a data root on an object store (a folder: its index.html), read through
    fleetkit.core.datasets.DataRoot; 404 when there is none, 503 naming the root when the store
    cannot be reached."""
    import mimetypes

    from fleetkit.core.datasets import DataRootError, data_path

    try:
        target = data_path(reports)
        for part in (p for p in path.split("/") if p):
            target = target / part
        if target.is_dir():
            target = target / "index.html"
        if not target.is_file():
            raise HTTPException(status.HTTP_404_NOT_FOUND, "Not Found")
        body = b"" if head else target.read_bytes()
    except DataRootError as e:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE, str(e)) from None
    kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind in ("application/json", "application/javascript"):
        kind += "; charset=utf-8"
    return Response(body, media_type=kind)


class FleetPlugin(AirflowPlugin):
    name = "kafka_fleet_toolkit"
    operator_extra_links = [StuckReportLink()]
    fastapi_apps = [{"app": _reports_app(), "url_prefix": "/fleet-reports", "name": "Kafka fleet reports"},
                    {"app": fleet_app(), "url_prefix": "/fleet", "name": "Kafka fleet"}]
    # a group name with a line feed reaches /fleet/burrow/ (Starlette's mounts stop matching at one)
    fastapi_root_middlewares = [{"middleware": LineFeedPaths, "kwargs": {"prefix": "/fleet/burrow/"},
                                 "name": "Kafka fleet: Burrow API names with line feeds"}]
    # the fleet page in the UI's navigation (an iframe onto /fleet/, served by the api-server behind
    # its login; reading it needs read access to the fleet_maintenance DAG)
    external_views = [{"name": "Kafka fleet", "href": "/fleet/", "destination": "nav", "url_route": "kafka-fleet"},
                      {"name": "Stuck offsets report", "href": "/fleet-reports/stuck/latest/report.html",
                       "destination": "nav",
                       "url_route": "fleet-reports"}]

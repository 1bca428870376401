"""The fleet page: /fleet/ on the api-server, in the Airflow UI's navigation ("Kafka fleet").

How it is built: an external view (an iframe in the UI) onto this FastAPI app, which the
api-server serves behind its own login (the UI's `_token` cookie, or a Bearer token) and the auth
manager's permission check. **Permission needed: read access to the DAG `fleet_maintenance`**
(the DAG whose runs write what the page shows). Starting a runbook from the page additionally
needs the permission to trigger that runbook DAG: the page posts the run to Airflow's REST API
with the user's own token, so Airflow checks it and records the user as the one who triggered.
The POST needs the same read permission as the page, and the form's anti-forgery value.

Where the run is posted: the configured API base URL, Airflow's `[api] base_url` (the URL the UI
and REST API are served at), else the api-server's own listening address (`[api] host` and
`port`, a wildcard host as loopback). Never anything from the request (its Host header or URL):
a user who could choose the host would have the api-server send their token there.

Pages (server-rendered, paged on the server, every name from a cluster escaped):
  /fleet/                 clusters (Kafka version, groups by verdict, newest collection, failures),
                          the groups worst first (?cluster= &status= &q= &page=), pending approvals
                          (links to their Required Action page), coordinator ownership,
                          __consumer_offsets health, the audit timeline of destructive runs
  /fleet/group            one group's partitions: lag in records and time, lag-over-time charts,
                          the verdict's reason and since when, a runbook button per flagged partition
  /fleet/runbook          the runbook's form, prefilled (dry run on); POST starts the run
  /fleet/metrics          the same state for Prometheus (fleetkit.metrics; OpenMetrics when the
                          Accept header asks for it), behind the same login and permission: a
                          scrape sends a Bearer token from Airflow's /auth/token
  /fleet/burrow/v3/...    the same state as Burrow's HTTP API (fleetkit.burrow: its read routes and
                          JSON shapes), behind the same login and permission
Handlers are plain functions: FastAPI runs them in worker threads, so file reads never block the
api-server's event loop. Data: fleetkit.fleetview (the jobs' outputs, cached per file version).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import urllib.parse

from fastapi import Depends, FastAPI, HTTPException, Query, Request, status
from fastapi.responses import HTMLResponse, Response

from fleet_airflow import settings
from fleet_airflow.settings import api_base_url
from fleet_airflow.web_auth import add_framing_headers, reader, require_dag_read, token_of

log = logging.getLogger(__name__)

#: read access to this DAG lets a user see the fleet page
FLEET_PAGE_DAG = "fleet_maintenance"


def _view():
    from fleetkit.fleetview import FleetView

    root = settings.data_root()
    return FleetView(root, settings.plans_root(root))


def _fleet():
    from fleetkit.core.fleet import load_fleet

    return load_fleet(settings.fleet_file())


def _csrf(token: str | None) -> str:
    """The form's anti-forgery value: bound to the user's session token, never the token itself."""
    return hmac.new((token or "").encode(), b"kafka-fleet-runbook-form", hashlib.sha256).hexdigest()


def _csrf_ok(sent: str | None, token: str | None) -> bool:
    """The posted anti-forgery value matches the session's. Compared as bytes: compare_digest
    refuses a str with characters outside ASCII (a TypeError, a 500), which a forged post may send."""
    if not sent:
        return False
    return hmac.compare_digest(sent.encode("utf-8", "surrogatepass"), _csrf(token).encode())


def _runbook_fields(dag_id: str):
    """The runbook form's fields (fleetview.form_fields) from the DAG's own Params, as the
    dag-processor serialized them: 400 for a DAG this page does not start, 503 before it is parsed."""
    from airflow.models.serialized_dag import SerializedDagModel

    from fleetkit.fleetview import RUNBOOK_FORMS, form_fields

    if dag_id not in RUNBOOK_FORMS:
        raise HTTPException(status.HTTP_400_BAD_REQUEST,
                            f"dag_id {dag_id!r}: not a runbook this page starts ({', '.join(RUNBOOK_FORMS)})")
    dag = SerializedDagModel.get_dag(dag_id)
    if dag is None:
        raise HTTPException(status.HTTP_503_SERVICE_UNAVAILABLE,
                            f"the DAG {dag_id!r} is not parsed yet (dag-processor): try again in a minute")
    params = {}
    for name in dag.params:
        p = dag.params.get_param(name)
        params[name] = {**(p.schema or {}), "description": p.description}
    try:
        return form_fields(dag_id, params)
    except ValueError as e:
        raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, str(e)) from None


def _page(template: str, **context) -> HTMLResponse:
    from fleetkit.core.render import render

    resp = HTMLResponse(render(template, **context))
    resp.headers["Cache-Control"] = "private, no-cache"
    resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp


def _int(value: str | None, name: str, default: int) -> int:
    if value in (None, ""):
        return default
    try:
        n = int(value)
    except ValueError:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"{name}: {value!r} is not a whole number") from None
    if n < 1:
        raise HTTPException(status.HTTP_400_BAD_REQUEST, f"{name}: {value!r} must be 1 or more")
    return n


def overview_context(view, fleet, cluster: str = "", status_: str = "", q: str = "", page: int = 1) -> dict:
    """What the overview page shows (bench/fleet_page.py times this and the rendering)."""
    from fleetkit.fleetview import PAGE_SIZE
    from fleetkit.stuck import rules

    idx = view.groups()
    rows, total = idx.page(page, cluster or None, status_ or None, q or None)
    health, _, health_run = view.trim_health()
    coordinators, coord_run = view.coordinators()
    clusters = view.clusters(fleet)
    return dict(clusters=clusters, groups=view.shown_groups(rows, clusters), total=total, page=page,
                pages=max(1, -(-total // PAGE_SIZE)), filters={"cluster": cluster, "status": status_, "q": q},
                statuses=list(rules.SHOWN_ORDER) + ["STORM"], words=rules.STATUS_WORDS, as_of=idx.as_of,
                approvals=view.pending_approvals(), timeline=view.audit_timeline(),
                health=health[:100], health_more=max(0, len(health) - 100), health_run=health_run,
                coordinators=coordinators[:100], coord_run=coord_run)


def warm_up() -> None:
    """Parse the newest stuck run once, off the request path: the first conversion into Arrow in a
    process imports pandas (about a second), which the first visitor would otherwise wait for."""
    try:
        _view().groups()
    except Exception as e:  # noqa: BLE001 - a page that cannot read its data says so on request
        log.warning("fleet page: warming up failed: %s", e)


_WARMING = {"started": False}


def _warm_up_once() -> None:
    """warm_up in a thread, the first time a page is asked for: never when the plugin is imported,
    because every Airflow process imports it (the scheduler among them, whose LocalExecutor forks
    workers: a fork taken while the warm-up thread imports pandas leaves the child waiting forever on
    the import lock it inherited)."""
    import threading

    if not _WARMING["started"]:
        _WARMING["started"] = True
        threading.Thread(target=warm_up, name="fleet-page-warm-up", daemon=True).start()


class LineFeedPaths:
    """ASGI middleware of the api-server's root app (the plugin's `fastapi_root_middlewares`):
    Starlette matches a mount's path only up to a line feed, so a Burrow request naming a group with
    one (sent as %0A) would never reach the fleet app. Under `prefix` the decoded path's line feeds
    are written back as %0A; the route reads the names from the path as sent (raw_path) anyway."""

    def __init__(self, app, prefix: str = "/fleet/burrow/"):
        self.app, self.prefix = app, prefix

    async def __call__(self, scope, receive, send):
        path = scope.get("path") or ""
        if scope["type"] == "http" and "\n" in path and path[len(scope.get("root_path") or ""):].startswith(self.prefix):
            scope = dict(scope, path=path.replace("\n", "%0A"))
        await self.app(scope, receive, send)


def fleet_app() -> FastAPI:
    from fastapi.responses import PlainTextResponse

    app = FastAPI(title="Kafka fleet", docs_url=None, redoc_url=None, openapi_url=None)
    add_framing_headers(app)

    @app.exception_handler(settings.MissingSetting)
    def missing_setting(request: Request, exc: settings.MissingSetting):
        """A deployment without a required setting: the one line naming it, never a stack trace."""
        log.error("fleet page: %s", exc)
        return PlainTextResponse(f"Kafka fleet: {exc}\n", status_code=status.HTTP_503_SERVICE_UNAVAILABLE)

    from fleetkit.core.datasets import DataRootError

    @app.exception_handler(DataRootError)
    def data_root_unavailable(request: Request, exc: DataRootError):
        """A data root on an object store that cannot be reached: the one line naming its URI and
        connection (never a key), 503."""
        log.error("fleet page: %s", exc)
        return PlainTextResponse(f"Kafka fleet: {exc}\n", status_code=status.HTTP_503_SERVICE_UNAVAILABLE)

    def may_read(user=Depends(reader)):
        require_dag_read(user, FLEET_PAGE_DAG)
        settings.require()  # a deployment without its required settings: 503, the line naming it
        _warm_up_once()
        return user

    @app.get("/", response_class=HTMLResponse)
    def overview(cluster: str = "", status_: str = Query("", alias="status"), q: str = "", page: str = "1",
                 user=Depends(may_read)):
        n = _int(page, "page", 1)
        return _page("fleet_page.html.j2", **overview_context(_view(), _fleet(), cluster, status_, q, n),
                     user=getattr(user, "get_name", lambda: None)())

    @app.get("/metrics")
    def metrics(request: Request, user=Depends(may_read)):
        """One Prometheus scrape: the collector reads the fleet file and the data root now."""
        from fleetkit.metrics import FleetCollector, scrape

        gzipped = "gzip" in request.headers.get("accept-encoding", "").lower()
        try:
            body, content_type = scrape(FleetCollector(_view(), _fleet, refresh_in_background=True),
                                        request.headers.get("accept"),
                                        compress=gzipped)
        except ValueError as e:  # a FLEET_METRICS_* setting set wrong in the deployment
            raise HTTPException(status.HTTP_500_INTERNAL_SERVER_ERROR, f"fleet metrics: {e}") from None
        headers = {"Cache-Control": "no-store", **({"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
                                                   if gzipped else {})}
        return Response(body, media_type=content_type, headers=headers)

    @app.get("/burrow/{path:path}")
    def burrow(request: Request, path: str, user=Depends(may_read)):
        """Burrow's v3 read API. Names are read from the path as sent, one segment at a time (a
        name with a "/" arrives as %2F); only where a proxy rewrote that path, from the decoded one."""
        from fleetkit.burrow import BurrowAPI, split_path

        prefix = f"{request.scope.get('root_path', '')}/burrow".encode()
        segments = split_path(request.scope.get("raw_path") or b"", prefix)
        answer = BurrowAPI(_view(), _fleet()).answer(path.split("/") if segments is None else segments,
                                                     request.scope["path"])
        return Response(answer.body, status_code=answer.status, media_type=answer.content_type,
                        headers={"Cache-Control": "no-store"})

    @app.get("/group", response_class=HTMLResponse)
    def group_page(cluster: str, group: str, user=Depends(may_read)):
        from fleetkit.fleetview import RUNBOOKS, runbook_conf
        from fleetkit.stuck import rules
        from fleetkit.stuck.report import behind, lag_chart, readable_time, storm_fix, storm_what

        view = _view()
        parts = view.partitions(cluster, group)
        g, blind_line = view.shown_group(cluster, group)
        if g is None and not parts:
            raise HTTPException(status.HTTP_404_NOT_FOUND,
                                f"no group {group!r} on cluster {cluster!r} in the newest stuck run")
        for p in parts:
            p["chart"] = lag_chart(p.get("points") or [], width=360, height=110)
            p["behind"] = behind(p)
            p["since"] = readable_time(p.get("stalled_since") or p.get("stopped_since"))
            rb = runbook_conf(p)
            p["runbook"] = None if rb is None else {"dag_id": rb[0], "what": RUNBOOKS[p["status"]][1],
                                                   "query": urllib.parse.urlencode({"dag_id": rb[0], **rb[1]})}
        storm = None
        if g and g.get("rebalance_storm"):
            storm = {"what": storm_what(g), "fix": storm_fix(g)}
        return _page("fleet_group.html.j2", cluster=cluster, group=group, g=g or {}, partitions=parts, storm=storm,
                     blind_line=blind_line, words=rules.STATUS_WORDS)

    @app.get("/runbook", response_class=HTMLResponse)
    def runbook_form(request: Request, dag_id: str, user=Depends(may_read)):
        fields = _runbook_fields(dag_id)
        values = {k: v for k, v in request.query_params.items() if k != "dag_id"}
        values.setdefault("dry_run", "true")
        return _page("fleet_runbook.html.j2", dag_id=dag_id, fields=fields, values=values,
                     csrf=_csrf(token_of(request)), result=None, error=None)

    @app.post("/runbook", response_class=HTMLResponse)
    async def runbook_start(request: Request, user=Depends(may_read)):
        """Start the runbook as the user: Airflow's REST API (at api_base_url(), never at the
        request's host) with the user's own token, so Airflow checks the trigger permission."""
        import httpx

        from fleetkit.fleetview import coerce_conf

        form = {k: str(v) for k, v in (await request.form()).items()}
        token = token_of(request)
        dag_id = form.pop("dag_id", "")
        if not _csrf_ok(form.pop("csrf", None), token):
            raise HTTPException(status.HTTP_403_FORBIDDEN, "the form is stale or not from this page: open it again")
        fields = _runbook_fields(dag_id)
        try:
            conf = coerce_conf(fields, form)
        except ValueError as e:
            return _page("fleet_runbook.html.j2", dag_id=dag_id, fields=fields, values=form, csrf=_csrf(token),
                         result=None, error=str(e))
        api = f"{api_base_url()}/api/v2/dags/{urllib.parse.quote(dag_id, safe='')}/dagRuns"
        try:
            async with httpx.AsyncClient(timeout=30) as client:
                r = await client.post(api, json={"logical_date": None, "conf": conf},
                                      headers={"Authorization": f"Bearer {token}"})
        except httpx.HTTPError as e:
            log.warning("fleet page: starting %s: Airflow's REST API at %s did not answer: %s", dag_id, api, e)
            return _page("fleet_runbook.html.j2", dag_id=dag_id, fields=fields, values=form, csrf=_csrf(token),
                         result=None, error=f"Airflow's REST API did not answer ({type(e).__name__}); "
                                            "check [api] base_url")
        if r.status_code >= 300:
            try:
                detail = r.json().get("detail")
            except ValueError:
                detail = r.text[:500]
            log.warning("fleet page: starting %s refused (%s): %s", dag_id, r.status_code, detail)
            return _page("fleet_runbook.html.j2", dag_id=dag_id, fields=fields,
                         values={k: ("true" if v is True else "" if v is False else str(v)) for k, v in conf.items()},
                         csrf=_csrf(token), result=None,
                         error=f"Airflow refused the run ({r.status_code}): {json.dumps(detail)[:500]}")
        run = r.json()
        log.info("fleet page: %s started %s run %s", getattr(user, "get_name", lambda: "?")(), dag_id, run["dag_run_id"])
        return _page("fleet_runbook.html.j2", dag_id=dag_id, fields=fields, values=form, csrf=_csrf(token),
                     result={"run_id": run["dag_run_id"], "conf": conf,
                             "url": f"/dags/{urllib.parse.quote(dag_id, safe='')}/runs/"
                                    f"{urllib.parse.quote(run['dag_run_id'], safe='')}"}, error=None)

    return app

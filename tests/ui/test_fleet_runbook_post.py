"""The fleet page's runbook POST under the real api-server: the run goes to the configured API base
URL (a forged Host header sends nothing elsewhere), the POST needs read access to fleet_maintenance
as the page does, the trigger itself is checked by Airflow against the user's own token, and a
missing, forged or non-ASCII anti-forgery value is refused (403), never a 500.

Tokens for users without a role or with the viewer role are signed with the api-server's own JWT
secret (as in test_reports_auth.py): the server takes them as valid logins with those roles.
"""

from __future__ import annotations

import http.client
import http.server
import os
import re
import threading
import urllib.error
import urllib.parse

import pytest

from tests.helpers import wait_until
from tests.ui.test_reports_auth import signed_token

pytestmark = pytest.mark.airflow

DAG = "runbook_stuck_skip"


def request(method: str, path: str, token: str | None, body: dict | str | None = None, host: str | None = None):
    """One request to the api-server; a form `body` as a dict (URL-encoded here) or as the raw encoded
    string."""
    conn = http.client.HTTPConnection("127.0.0.1", int(os.environ["FLEET_AIRFLOW_PORT"]), timeout=60)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if host is not None:
        headers["Host"] = host  # sent as given (http.client adds none of its own)
    data = None
    if body is not None:
        data = (body if isinstance(body, str) else urllib.parse.urlencode(body)).encode()
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace")
    finally:
        conn.close()


def form_csrf(token: str) -> str:
    """The anti-forgery value the form page gives this session."""
    status, body = request("GET", f"/fleet/runbook?dag_id={DAG}", token)
    assert status == 200, body
    return re.search(r'name="csrf" value="([0-9a-f]+)"', body).group(1)


def conf_form(group: str) -> dict:
    return {"dag_id": DAG, "cluster": "labtest", "group": group, "topic": "fleet-runbook-post", "partition": "0",
            "skip": "1", "dry_run": "true"}


@pytest.fixture(scope="module")
def runbook_dag(airflow_server):
    wait_until(lambda: airflow_server.api("GET", f"/api/v2/dags/{DAG}"), 180, f"{DAG} parsed", interval=1,
               retry_on=(urllib.error.HTTPError,))
    return airflow_server


@pytest.fixture
def listener():
    """A plain HTTP server on a free loopback port that records every request it gets."""
    got: list[tuple[str, str, dict]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            length = int(self.headers.get("Content-Length") or 0)
            got.append((self.command, self.path, dict(self.headers), self.rfile.read(length)))
            body = b'{"dag_run_id": "received-by-the-forged-host"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_PUT = do_PATCH = do_POST

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, name="forged-host-listener", daemon=True)
    thread.start()
    try:
        yield server.server_address[1], got
    finally:
        server.shutdown()
        server.server_close()


def _fail_run(services, run_id: str) -> None:
    try:  # a dry run plans and stops; these tests do not wait for it
        services.api("PATCH", f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}", {"state": "failed"})
    except Exception:  # noqa: BLE001 - it may already have finished
        pass


def test_a_forged_host_header_sends_nothing_there_and_the_run_goes_to_the_base_url(runbook_dag, listener, unique):
    services = runbook_dag
    port, got = listener
    token = services.api_token("admin")
    group = unique("forged-host")
    status, body = request("POST", "/fleet/runbook", token,
                           {**conf_form(group), "csrf": form_csrf(token)}, host=f"127.0.0.1:{port}")
    assert got == [], ("the api-server sent the user's request (with their token) to the host named in the Host "
                       f"header: {[(m, path, h.get('Host')) for m, path, h, _ in got]}")
    assert status == 200, body
    started = re.search(r'id="started">Started run (.+?) \(', body)
    assert started, body
    run_id = started.group(1)
    try:
        # the run is in the api-server's own database, started as the user
        run = services.api("GET", f"/api/v2/dags/{DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}")
        assert run["conf"]["group"] == group and run["conf"]["dry_run"] is True
        assert run.get("triggering_user_name") == "admin"
    finally:
        _fail_run(services, run_id)


def test_a_user_without_read_access_to_the_page_dag_gets_403_on_post(runbook_dag):
    from fleet_airflow.fleet_page import _csrf

    token = signed_token(None)
    assert request("GET", f"/fleet/runbook?dag_id={DAG}", token)[0] == 403  # as on the page
    status, body = request("POST", "/fleet/runbook", token, {**conf_form("no-read-access"), "csrf": _csrf(token)})
    assert status == 403, body
    assert "fleet_maintenance" in body and "Started run" not in body


def test_a_reader_who_may_not_trigger_is_refused_by_airflow(runbook_dag):
    """The viewer may read the page (and post its form), but the trigger is checked by Airflow
    against the user's own token: refused, shown on the form, no run."""
    token = signed_token("viewer")
    group = "viewer-may-not-trigger"
    status, body = request("POST", "/fleet/runbook", token, {**conf_form(group), "csrf": form_csrf(token)})
    assert status == 200, body
    assert "Airflow refused the run (403)" in body and "Started run" not in body
    runs = runbook_dag.api("GET", f"/api/v2/dags/{DAG}/dagRuns?limit=1000")["dag_runs"]
    assert not [r for r in runs if (r.get("conf") or {}).get("group") == group]


@pytest.mark.parametrize("csrf", [None, "", "not-the-value", "é", "\u202e" * 64, "\U0001F600", "%FF%FE"])
def test_a_missing_forged_or_non_ascii_csrf_is_403_not_500(runbook_dag, csrf):
    token = runbook_dag.api_token("admin")
    form = conf_form("csrf-refused")
    if csrf == "%FF%FE":  # bytes that are not UTF-8, sent as such
        status, body = request("POST", "/fleet/runbook", token, urllib.parse.urlencode(form) + "&csrf=%FF%FE")
    else:
        if csrf is not None:
            form["csrf"] = csrf
        status, body = request("POST", "/fleet/runbook", token, form)
    assert status == 403, body
    assert "stale or not from this page" in body


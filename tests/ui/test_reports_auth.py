"""/fleet-reports under the real api-server: only logged-in users who may read DAGs get a report
(Bearer token or the UI's `_token` cookie), and no path leaves the reports folder.

The tests' Airflow uses the simple auth manager, whose configured users all hold a role that may
read DAGs. The 403 case uses a token for a user without a role, signed by the test process with the
api-server's own JWT secret and settings (the auth manager's signer): the server treats it as a
valid login without permissions, as it would a real user whose role grants nothing.
"""

from __future__ import annotations

import http.client
import importlib
import os
import shutil
import urllib.parse
from pathlib import Path

import pytest

from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[2]


def fleet_plugin():
    """The plugin's module, found the way Airflow's plugin manager finds it: the installed
    distribution's `airflow.plugins` entry point."""
    from importlib.metadata import entry_points

    (ep,) = [e for e in entry_points(group="airflow.plugins") if e.name == "kafka_fleet_toolkit"]
    return importlib.import_module(ep.module)

pytestmark = pytest.mark.airflow

SECRET = "broker-0.example.internal /var/lib/kafka/data client-id=billing-7"


def get(path: str, token: str | None = None, cookie: str | None = None, method: str = "GET"):
    """One request with the path sent exactly as given (no client-side normalisation of `..`)."""
    conn = http.client.HTTPConnection("127.0.0.1", int(os.environ["FLEET_AIRFLOW_PORT"]), timeout=30)
    headers = {}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    if cookie is not None:
        headers["Cookie"] = f"_token={cookie}"
    try:
        conn.request(method, path, headers=headers)
        r = conn.getresponse()
        return r.status, r.read().decode("utf-8", "replace"), dict(r.getheaders())
    finally:
        conn.close()


def signed_token(role: str | None, valid_for: float | None = None) -> str:
    """A JWT signed with the api-server's secret and audience (the tests share its environment)."""
    from airflow.api_fastapi.auth.managers.simple.simple_auth_manager import SimpleAuthManager

    return SimpleAuthManager._get_token_signer().generate(
        {"sub": f"reports-test-{role or 'no-role'}", "role": role, "teams": []}, valid_for=valid_for)


@pytest.fixture
def report(airflow_server, unique):
    """A stuck report in the server's reports folder, a file beside that folder, and a symlink
    from inside the folder to that file."""
    data = Path(os.environ["FLEET_DATA_ROOT"])
    run = unique("auth-run")
    folder = data / "reports" / "stuck" / run
    folder.mkdir(parents=True)
    (folder / "report.html").write_text(f"<html><body>{SECRET}</body></html>")
    outside = data / f"{run}-outside.txt"
    outside.write_text(f"outside the reports folder {SECRET}")
    (folder / "link.txt").symlink_to(outside)
    url = f"/fleet-reports/stuck/{run}/report.html"
    try:
        yield {"url": url, "run": run, "outside": outside, "token": airflow_server.api_token("admin")}
    finally:
        shutil.rmtree(folder)
        outside.unlink()


def test_no_token_is_401_while_a_token_reads_the_report(report):
    status, body, headers = get(report["url"])
    assert status == 401, body
    assert SECRET not in body
    assert headers.get("www-authenticate") == "Bearer"
    assert get("/api/v2/dags")[0] == 401  # the same answer as the api-server's own routes

    status, body, headers = get(report["url"], token=report["token"])
    assert status == 200 and SECRET in body
    assert headers["cache-control"] == "private, no-cache"
    # only the Airflow UI (same origin) may frame a report
    assert headers["content-security-policy"] == "frame-ancestors 'self'" and headers["x-frame-options"] == "SAMEORIGIN"
    assert get(report["url"], token=report["token"], method="HEAD")[0] == 200


def test_the_ui_cookie_reads_the_report(report):
    """The 'Stuck report' link opens in the browser, which sends the UI's `_token` cookie."""
    status, body, _ = get(report["url"], cookie=report["token"])
    assert status == 200 and SECRET in body


@pytest.mark.parametrize("how", ["garbage", "wrong-secret", "expired"])
def test_an_invalid_token_is_401(report, how):
    import jwt

    token = {"garbage": "not.a.jwt",
             "wrong-secret": jwt.encode({"sub": "admin", "role": "admin", "aud": "apache-airflow"},
                                        "not-the-server-secret-" + "x" * 64, algorithm="HS512"),
             "expired": signed_token("admin", valid_for=-3600)}[how]
    for kwargs in ({"token": token}, {"cookie": token}):
        status, body, _ = get(report["url"], **kwargs)
        assert status == 401, (kwargs, body)
        assert SECRET not in body


def test_a_user_without_dag_read_access_is_403(report):
    token = signed_token(None)
    assert get("/api/v2/dags", token=token)[0] == 403  # the server takes the token, grants nothing
    status, body, _ = get(report["url"], token=token)
    assert status == 403, body
    assert SECRET not in body and "fleet_maintenance" in body
    # with a role that may read DAGs, the same kind of signed token reads the report
    status, body, _ = get(report["url"], token=signed_token("viewer"))
    assert status == 200 and SECRET in body


@pytest.mark.parametrize("tail", [
    "../{outside}",
    "..%2f{outside}",
    "%2e%2e/{outside}",
    "%2E%2E%2F{outside}",
    "stuck/{run}/../../../{outside}",
    "stuck/{run}/%2e%2e/%2e%2e/%2e%2e/{outside}",
    "stuck%2f{run}%2f..%2f..%2f..%2f{outside}",
])
def test_path_traversal_is_refused(report, tail):
    path = "/fleet-reports/" + tail.format(outside=report["outside"].name, run=report["run"])
    status, body, _ = get(path)
    assert status == 401  # nothing is looked up before the user is known
    status, body, _ = get(path, token=report["token"])
    assert status == 400, (path, body)
    assert "leaves the reports folder" in body and SECRET not in body


def test_absolute_paths_and_symlinks_out_of_the_folder_are_not_served(report):
    for path in (f"/fleet-reports//{report['outside']}", f"/fleet-reports/%2f{urllib.parse.quote(str(report['outside']))}",
                 f"/fleet-reports/stuck/{report['run']}/link.txt", "/fleet-reports/stuck/x%00y"):
        status, body, _ = get(path, token=report["token"])
        assert status in (400, 404), (path, status, body)
        assert SECRET not in body


def test_report_path_error():
    report_path_error = fleet_plugin().report_path_error
    assert report_path_error("stuck/latest/report.html") is None
    assert report_path_error("stuck/run..1/a..b") is None
    for bad in ("..", "../x", "a/../../x", "a/..", "/etc/passwd", "a\\..\\b", "a\x00b"):
        assert report_path_error(bad), bad


def test_every_report_folder_names_a_dag_of_the_server(airflow_server):
    import urllib.error

    for kind, dag_id in fleet_plugin().REPORT_DAGS.items():
        dag = wait_until(lambda: airflow_server.api("GET", f"/api/v2/dags/{dag_id}"), 120,
                         f"DAG {dag_id} (reports/{kind}) parsed by the dag-processor", interval=1,
                         retry_on=(urllib.error.HTTPError,))
        assert dag["dag_id"] == dag_id


def test_a_person_logged_in_to_the_ui_opens_the_report_in_the_browser(report, tmp_path):
    """What the 'Stuck report' button does: the browser follows the link with the cookie the UI's
    login set; a browser that never logged in gets 401."""
    from selenium.webdriver.common.by import By

    from tests.ui.browser import base_url, headless_chrome, log_in

    driver = headless_chrome(f"{tmp_path}/chrome-profile")
    base = base_url()
    try:
        driver.get(base + report["url"])
        assert SECRET not in driver.page_source and "Not authenticated" in driver.page_source

        log_in(driver, "admin")
        driver.get(base + report["url"])
        assert SECRET in driver.find_element(By.TAG_NAME, "body").text
    finally:
        driver.quit()

"""/fleet/metrics on the fleet page's FastAPI app: behind the page's own login (`web_auth.reader`,
stood in for here: a refusing stand-in must make it 401) and DAG read check, content negotiation,
a scrape of the deployment's data root. The real api-server with a Bearer token is a ui test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from fastapi import HTTPException
from fastapi.testclient import TestClient

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))

from fleet_airflow import fleet_page  # noqa: E402
from fleet_airflow.web_auth import reader  # noqa: E402

FLEET = """version: 1
clusters:
  - {name: lab, kafka_version: "3.9.2", kafka_conn_id: lab_kafka, approvers: [x]}
"""


@pytest.fixture
def client(tmp_path, monkeypatch):
    (tmp_path / "fleet.yaml").write_text(FLEET)
    monkeypatch.setenv("FLEET_FILE", str(tmp_path / "fleet.yaml"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.delenv("FLEET_PLANS_DIR", raising=False)
    checked = []

    def dag_read(user, dag_id):
        checked.append((user, dag_id))
        if user != "reader":
            raise HTTPException(403, "Forbidden")

    monkeypatch.setattr(fleet_page, "require_dag_read", dag_read)
    app = fleet_page.fleet_app()
    app.dependency_overrides[reader] = lambda: "reader"
    c = TestClient(app)
    c.checked = checked
    c.app_ = app
    return c


def test_a_scrape_is_the_fleet_in_the_text_format(client):
    r = client.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'fleet_cluster_state{cluster_name="lab",state="NEVER"} 1.0' in r.text
    assert r.headers["cache-control"] == "no-store"
    assert client.checked == [("reader", "fleet_maintenance")]  # the page's own permission


def test_openmetrics_when_asked(client):
    r = client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0; charset=utf-8"})
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")


def test_without_the_permission_is_403_and_a_wrong_limit_is_named(client, monkeypatch):
    client.app_.dependency_overrides[reader] = lambda: "nobody"
    assert client.get("/metrics").status_code == 403
    client.app_.dependency_overrides[reader] = lambda: "reader"
    monkeypatch.setenv("FLEET_METRICS_MAX_GROUP_SERIES", "-1")
    r = client.get("/metrics")
    assert r.status_code == 500 and "FLEET_METRICS_MAX_GROUP_SERIES='-1' must be 0 or more" in r.text


def test_without_a_login_is_401(tmp_path, monkeypatch):
    monkeypatch.setattr(fleet_page, "require_dag_read", lambda user, dag: None)
    app = fleet_page.fleet_app()

    async def refused():
        raise HTTPException(401, "Not authenticated", headers={"WWW-Authenticate": "Bearer"})
    app.dependency_overrides[reader] = refused
    r = TestClient(app).get("/metrics")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


def test_only_the_airflow_ui_may_frame_the_pages(client):
    """A prefilled runbook form framed by another site could be clicked through by a logged-in user:
    every answer says only the same origin (the Airflow UI) may frame it, errors included."""
    for path in ("/metrics", "/", "/no-such-page"):
        r = client.get(path)
        assert r.headers["content-security-policy"] == "frame-ancestors 'self'", path
        assert r.headers["x-frame-options"] == "SAMEORIGIN", path

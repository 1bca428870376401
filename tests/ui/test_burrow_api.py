"""/fleet/burrow/v3/... under the real api-server: the fleet page's login and permission (401 without
a token, 403 without read access to fleet_maintenance), and names sent path-encoded reaching the
route whole through the api-server's mount of the fleet app: a "/" (%2F) and a line feed (%0A, let
through by the plugin's root middleware) in a name that is not there answer Burrow's 404 with the
name exactly, never Airflow's own 404. The answers themselves: tests/unit/test_burrow.py and
tests/integration/test_burrow_compat.py (against a real Burrow)."""

from __future__ import annotations

import json

import pytest

from tests.ui.test_reports_auth import get, signed_token

pytestmark = pytest.mark.airflow


def test_burrows_routes_behind_the_fleet_pages_login_and_permission(airflow_server):
    token = airflow_server.api_token("admin")
    status, body, headers = get("/fleet/burrow/v3/kafka")
    assert status == 401 and headers.get("www-authenticate") == "Bearer", body
    status, body, _ = get("/fleet/burrow/v3/kafka", token=signed_token(None))
    assert status == 403 and "fleet_maintenance" in body
    status, body, headers = get("/fleet/burrow/v3/kafka", token=token)
    assert status == 200 and headers["content-type"] == "application/json", body
    doc = json.loads(body)
    assert doc["error"] is False and "labtest" in doc["clusters"] and doc["request"]["url"] == "/fleet/burrow/v3/kafka"

    # a name with a "/" and a line feed: one segment, Burrow's NOTFOUND with the name as sent
    status, body, _ = get("/fleet/burrow/v3/kafka/labtest/consumer/no%2Fsuch%0Agroup/status", token=token)
    assert status == 404, body
    assert json.loads(body)["status"] == {"cluster": "labtest", "group": "no/such\ngroup", "status": "NOTFOUND",
                                          "complete": 1.0, "partitions": [], "partition_count": 0, "maxlag": None,
                                          "totallag": 0}
    status, body, _ = get("/fleet/burrow/v3/kafka/labtest%0A/topic", token=token)
    assert status == 404 and json.loads(body)["message"] == "cluster not found", body
    status, body, _ = get("/fleet/burrow/v3/nothing", token=token)
    assert (status, body) == (404, '{"error":true,"message":"invalid request type","result":{}}\n')

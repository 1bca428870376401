"""fleetkit.burrow: Burrow's v3 read API over a data root written by the writers the jobs and tasks
use (publish_rows: the report task's reports/stuck/latest; record_status: the collect task), and its
route on the fleet page's FastAPI app (login and DAG read check stood in for, as in
test_metrics_endpoint). The shapes are Burrow 1.2.1's (docs/burrow.md); tests/integration/
test_burrow_compat.py compares them with a real Burrow's."""

from __future__ import annotations

import datetime as dt
import json
import sys
import urllib.parse
from pathlib import Path

import pytest
from fastapi import FastAPI, HTTPException
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings

from fleetkit.burrow import BurrowAPI, group_status, partition_status, split_path
from fleetkit.burrow.api import INVALID, Undecodable
from fleetkit.collection.groups import record_status
from fleetkit.core.datasets import DataRoot, publish_rows
from fleetkit.core.fleet import parse_fleet
from fleetkit.fleetview import FleetView
from fleetkit.stuck import rules

from tests.unit.test_hostile_names import hostile

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))

from fleet_airflow import fleet_page  # noqa: E402
from fleet_airflow.web_auth import reader  # noqa: E402

FLEET_TEXT = """version: 1
clusters:
  - {name: lab, kafka_version: "3.9.2", kafka_conn_id: lab_kafka, approvers: [x]}
  - {name: lab43, kafka_version: "4.3.1", kafka_conn_id: lab43_kafka, approvers: [x]}
"""
FLEET = parse_fleet(FLEET_TEXT, path="test")
T0 = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


def finding(cluster, group, topic, p, status, lag, committed=100, **kw):
    return {"cluster": cluster, "source": "kafka", "group": group, "topic": topic, "partition": p, "status": status,
            "lag": lag, "committed_offset": committed, "log_end_offset": None if committed is None else committed + lag,
            "window_end": iso(T0), "snapshots": 3, **kw}


@pytest.fixture
def root(tmp_path, monkeypatch):
    monkeypatch.setenv("FLEET_COLLECTION_INTERVAL", "5m")
    latest = tmp_path / "reports" / "stuck" / "latest"
    latest.mkdir(parents=True)
    groups = [{"cluster": "lab", "source": "kafka", "group": "calm", "status": "OK", "total_lag": 0},
              {"cluster": "lab", "source": "kafka", "group": "stuck", "status": "STALLED", "total_lag": 70},
              {"cluster": "lab", "source": "zookeeper", "group": "stuck", "status": "STOPPED", "total_lag": 9},
              {"cluster": "lab", "source": "kafka", "group": "never", "status": "NO_COMMIT", "total_lag": None},
              {"cluster": "lab", "source": "kafka", "group": "young", "status": "INSUFFICIENT_DATA", "total_lag": 4},
              {"cluster": "lab43", "source": "kafka", "group": "far", "status": "OUT_OF_RANGE", "total_lag": 0}]
    findings = [finding("lab", "calm", "orders", p, "OK", 0) for p in range(3)]
    findings += [finding("lab", "stuck", "orders", 0, "STALLED", 50, stalled_since=iso(T0)),
                 finding("lab", "stuck", "orders", 1, "LAGGING", 20),
                 finding("lab", "stuck", "orders", 2, "OK", 0),
                 dict(finding("lab", "stuck", "legacy", 0, "STOPPED", 9), source="zookeeper"),
                 # the same partition in both stores: the worse verdict is the one shown
                 dict(finding("lab", "stuck", "orders", 1, "OK", 0), source="zookeeper"),
                 finding("lab", "never", "orders", 0, "NO_COMMIT", None, committed=None),
                 finding("lab", "young", "orders", 0, "INSUFFICIENT_DATA", 4),
                 finding("lab", "young", "orders", 1, "OK", 0),
                 finding("lab43", "far", "events", 1, "OUT_OF_RANGE", -5)]
    series = [{"cluster": "lab", "source": "kafka", "group": "stuck", "topic": "orders", "partition": 0,
               "status": "STALLED", "points": [
                   {"t": iso(T0 - dt.timedelta(minutes=10 - i)), "committed_offset": 100,
                    "log_end_offset": 100 + 40 + i, "lag": 40 + i} for i in range(11)] + [
                   {"t": iso(T0), "committed_offset": None, "log_end_offset": 150, "lag": None}]}]
    publish_rows(groups, latest / "groups.jsonl")
    publish_rows(findings, latest / "findings.jsonl")
    publish_rows(series, latest / "series.jsonl")
    data = DataRoot(str(tmp_path))
    now = dt.datetime.now(dt.timezone.utc)
    record_status(data, "lab", ok={"observed_at": iso(now), "groups": 5, "problems": []})
    record_status(data, "lab43", ok={"observed_at": iso(now), "groups": 1, "problems": []})
    return tmp_path


def ask(root, *segments, fleet=FLEET):
    """(status, parsed body) of one route, with the request block checked."""
    url = "/v3/" + "/".join(segments)
    a = BurrowAPI(FleetView(root), fleet, host="api-host").answer(["v3", *segments], url)
    if a.content_type.startswith("text/plain"):
        return a.status, a.body.decode()
    body = json.loads(a.body)
    assert a.content_type == "application/json" and body["request"] == {"url": url, "host": "api-host"}
    return a.status, body


# -- the mapping -----------------------------------------------------------------------------------
@pytest.mark.parametrize("verdict,word", [
    ("OK", "OK"), ("LAGGING", "WARN"), ("STALLED", "STALL"), ("STOPPED", "STOP"), ("FROZEN", "STOP"),
    ("REWOUND", "REWIND"), ("OUT_OF_RANGE", "ERR"), ("INSUFFICIENT_DATA", "OK"), ("NO_COMMIT", "OK"),
    ("A_VERDICT_OF_TOMORROW", "ERR"), (None, "ERR")])
def test_each_verdict_has_its_burrow_word(verdict, word):
    assert partition_status(verdict) == word


def test_every_stuck_verdict_is_in_the_table():
    from fleetkit.burrow.status import PARTITION

    assert set(PARTITION) == set(rules.STATUSES)


def test_blind_is_never_ok_and_keeps_a_worse_word():
    assert partition_status("OK", blind=True) == "ERR"
    assert partition_status("INSUFFICIENT_DATA", blind=True) == "ERR"
    assert partition_status("STALLED", blind=True) == "STALL"
    assert partition_status("LAGGING", blind=True) == "WARN"


@pytest.mark.parametrize("parts,group", [
    ([], "NOTFOUND"), (["OK", "OK"], "OK"), (["OK", "WARN"], "WARN"), (["WARN", "STOP"], "ERR"),
    (["STALL"], "ERR"), (["REWIND", "OK"], "ERR"), (["ERR"], "ERR")])
def test_a_group_is_its_worst_partition_with_burrows_error_words_as_err(parts, group):
    assert group_status(parts) == group


# -- clusters --------------------------------------------------------------------------------------
def test_clusters_and_a_cluster_module(root):
    assert ask(root, "kafka") == (200, {"error": False, "message": "cluster list returned",
                                        "clusters": ["lab", "lab43"], "request": {"url": "/v3/kafka", "host": "api-host"}})
    status, body = ask(root, "kafka", "lab")
    assert status == 200 and body["message"] == "cluster module detail returned"
    assert body["module"] == {"class-name": "kafka", "servers": [],
                              "client-profile": {"name": "lab_kafka", "client-id": "", "kafka-version": "3.9.2",
                                                 "tls": None, "sasl": None},
                              "topic-refresh": 300, "offset-refresh": 300}
    assert list(body) == ["error", "message", "module", "request"]
    assert ask(root, "kafka", "elsewhere") == (404, {
        "error": True, "message": "cluster module not found",
        "request": {"url": "/v3/kafka/elsewhere", "host": "api-host"}})


# -- groups ----------------------------------------------------------------------------------------
def test_the_consumer_list_holds_the_groups_with_a_commit(root):
    status, body = ask(root, "kafka", "lab", "consumer")
    assert status == 200 and body["consumers"] == ["calm", "stuck", "young"]  # once each; `never` has no commit
    assert body["message"] == "consumer list returned"
    assert ask(root, "kafka", "lab43", "consumer")[1]["consumers"] == ["far"]
    status, body = ask(root, "kafka", "nowhere", "consumer")
    assert status == 404 and body["error"] is True and body["message"] == "cluster not found"


def test_a_consumers_detail_is_burrows_topics_partitions_and_offset_ring(root):
    status, body = ask(root, "kafka", "lab", "consumer", "stuck")
    assert status == 200 and body["message"] == "consumer detail returned"
    topics = body["topics"]
    assert sorted(topics) == ["legacy", "orders"]
    p0 = topics["orders"][0]
    assert list(p0) == ["offsets", "owner", "client_id", "current-lag"]
    assert p0["current-lag"] == 50 and p0["owner"] == "" and p0["client_id"] == ""
    # the lag series' snapshots with a commit, oldest first, the newest 10 (Burrow's ring)
    assert [o["lag"] for o in p0["offsets"]] == list(range(41, 51))
    assert p0["offsets"][-1] == {"offset": 100, "timestamp": int((T0 - dt.timedelta(minutes=0)).timestamp() * 1000),
                                 "lag": 50}
    # a partition without a series: its newest commit as of the run; the worse of two stores
    assert topics["orders"][1]["offsets"] == [{"offset": 100, "timestamp": int(T0.timestamp() * 1000), "lag": 20}]
    assert topics["orders"][1]["current-lag"] == 20
    assert [len(topics[t]) for t in ("legacy", "orders")] == [1, 3]


def test_a_partition_without_a_commit_is_burrows_empty_entry(root):
    status, body = ask(root, "kafka", "lab43", "consumer", "far")
    # partition 0 of `events` is no group's in the run: an entry without offsets, as Burrow lists it
    assert body["topics"]["events"][0] == {"offsets": [], "owner": "", "client_id": "", "current-lag": 0}
    assert body["topics"]["events"][1]["current-lag"] == 0  # an offset past the log end: lag 0, as Burrow
    assert ask(root, "kafka", "lab", "consumer", "never") == (404, {
        "error": True, "message": "cluster or consumer not found",
        "request": {"url": "/v3/kafka/lab/consumer/never", "host": "api-host"}})


def test_status_lists_the_partitions_worse_than_ok_and_lag_lists_all(root):
    status, body = ask(root, "kafka", "lab", "consumer", "stuck", "status")
    assert status == 200 and body["message"] == "consumer status returned"
    s = body["status"]
    assert list(s) == ["cluster", "group", "status", "complete", "partitions", "partition_count", "maxlag", "totallag"]
    assert (s["cluster"], s["group"], s["status"]) == ("lab", "stuck", "ERR")
    assert [(p["topic"], p["partition"], p["status"]) for p in s["partitions"]] == [
        ("legacy", 0, "STOP"), ("orders", 0, "STALL"), ("orders", 1, "WARN")]
    assert s["partition_count"] == 4 and s["totallag"] == 50 + 20 + 9 and s["complete"] == 1.0
    m = s["maxlag"]
    assert list(m) == ["topic", "partition", "owner", "client_id", "status", "start", "end", "current_lag", "complete"]
    assert (m["topic"], m["partition"], m["current_lag"], m["status"], m["complete"]) == ("orders", 0, 50, "STALL", 1.0)
    assert m["start"]["lag"] == 41 and m["end"]["lag"] == 50
    status, lag = ask(root, "kafka", "lab", "consumer", "stuck", "lag")
    assert status == 200 and [p["status"] for p in lag["status"]["partitions"]] == ["STOP", "STALL", "WARN", "OK"]
    assert {k: v for k, v in lag["status"].items() if k != "partitions"} == \
        {k: v for k, v in s.items() if k != "partitions"}


def test_a_group_not_judged_yet_is_burrows_incomplete_ok(root):
    s = ask(root, "kafka", "lab", "consumer", "young", "lag")[1]["status"]
    # (partition 2 of `orders`, which it never committed, counts as Burrow counts it: incomplete)
    assert s["status"] == "OK" and s["complete"] == pytest.approx(1 / 3)
    assert [(p["status"], p["complete"]) for p in s["partitions"]] == [("OK", 0.0), ("OK", 1.0), ("OK", 0.0)]
    assert s["maxlag"]["partition"] == 0 and s["maxlag"]["current_lag"] == 4
    s = ask(root, "kafka", "lab43", "consumer", "far", "lag")[1]["status"]
    assert s["status"] == "ERR" and [p["status"] for p in s["partitions"]] == ["OK", "ERR"]
    assert s["complete"] == 0.5  # the partition without a commit is incomplete, as in Burrow


def test_an_unknown_group_or_cluster_is_notfound_with_burrows_404(root):
    for cluster, group in (("lab", "nobody"), ("nowhere", "calm"), ("lab", "never")):
        status, body = ask(root, "kafka", cluster, "consumer", group, "status")
        assert status == 404 and body["error"] is False and body["message"] == "consumer status returned"
        assert body["status"] == {"cluster": cluster, "group": group, "status": "NOTFOUND", "complete": 1.0,
                                  "partitions": [], "partition_count": 0, "maxlag": None, "totallag": 0}


def test_a_group_its_newest_collection_did_not_see_is_never_ok(root):
    data = DataRoot(str(root))
    assert ask(root, "kafka", "lab", "consumer", "calm", "status")[1]["status"]["status"] == "OK"
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=2)
    record_status(data, "lab", failed={"at": iso(later), "error": "login refused"})
    status, body = ask(root, "kafka", "lab", "consumer", "calm", "status")
    assert status == 200 and body["status"]["status"] == "ERR"
    assert [p["status"] for p in body["status"]["partitions"]] == ["ERR"] * 3
    assert "did not see this group (FAILING)" in body["message"] and "login refused" not in body["message"]
    stuck = ask(root, "kafka", "lab", "consumer", "stuck", "lag")[1]["status"]
    assert [p["status"] for p in stuck["partitions"]] == ["STOP", "STALL", "WARN", "ERR"]
    # a blind collection: only the groups it did not see
    record_status(data, "lab", ok={"observed_at": iso(later), "groups": 5, "problems": [],
                                   "blind": ["1 group(s) not seen ('young')"], "blind_groups": ["young"],
                                   "blind_all": False}, failed={})
    assert ask(root, "kafka", "lab", "consumer", "calm", "status")[1]["status"]["status"] == "OK"
    young = ask(root, "kafka", "lab", "consumer", "young", "lag")[1]
    # (its third partition, never committed, has no offsets to be judged on: Burrow's OK entry)
    assert [p["status"] for p in young["status"]["partitions"]] == ["ERR", "ERR", "OK"]
    assert young["status"]["status"] == "ERR" and "(BLIND)" in young["message"]


# -- topics ----------------------------------------------------------------------------------------
def test_topics_their_log_end_offsets_and_consumers(root):
    status, body = ask(root, "kafka", "lab", "topic")
    assert status == 200 and body["topics"] == ["legacy", "orders"] and body["message"] == "topic list returned"
    status, body = ask(root, "kafka", "lab", "topic", "orders")
    assert status == 200 and body["offsets"] == [150, 120, 100] and body["message"] == "topic offsets returned"
    assert ask(root, "kafka", "lab43", "topic", "events")[1]["offsets"] == [-1, 95]  # no row for partition 0
    status, body = ask(root, "kafka", "lab", "topic", "orders", "consumers")
    assert status == 200 and body["consumers"] == ["calm", "stuck", "young"]
    assert body["message"] == "consumers of topic returned"
    assert ask(root, "kafka", "lab", "topic", "nothing")[1]["message"] == "cluster or topic not found"
    assert ask(root, "kafka", "nowhere", "topic") == (404, {
        "error": True, "message": "cluster not found", "request": {"url": "/v3/kafka/nowhere/topic", "host": "api-host"}})


def test_a_path_burrow_has_no_route_for_is_its_catch_all(root):
    for segments in (["v3"], ["v3", "kafka", "lab", "consumer", "calm", "offsets"], ["v2", "kafka"],
                     ["v3", "kafka", "lab", "group"], ["v3", "kafka", "lab", "consumer", "calm", "status", "x"]):
        a = BurrowAPI(FleetView(root), FLEET, host="h").answer(segments, "/x")
        assert (a.status, a.body.decode(), a.content_type) == (404, INVALID, "text/plain; charset=utf-8")


def test_an_empty_data_root_answers_every_route(tmp_path):
    for segments in (["kafka"], ["kafka", "lab"], ["kafka", "lab", "consumer"], ["kafka", "lab", "topic"],
                     ["kafka", "lab", "consumer", "g", "status"], ["kafka", "lab", "topic", "t"]):
        status, _ = ask(tmp_path, *segments)
        assert status in (200, 404)


# -- the path, hostile names -----------------------------------------------------------------------
def encoded(name: str) -> str:
    """A name as one path segment: every byte but letters, digits, "_" "-" "~" percent-encoded ("."
    too: a client normalizes a "." or ".." segment away); a lone surrogate as its three bytes."""
    return urllib.parse.quote(name.encode("utf-8", "surrogatepass"), safe="").replace(".", "%2E")


def test_a_path_is_split_before_it_is_decoded():
    assert split_path(b"/fleet/burrow/v3/kafka/a%2Fb/consumer/%F0%9F%98%80", b"/fleet/burrow") == \
        ["v3", "kafka", "a/b", "consumer", "\U0001F600"]
    assert split_path(b"/fleet/burrow/v3/kafka/%ED%A0%80", b"/fleet/burrow")[2] == "\ud800"
    odd = split_path(b"/fleet/burrow/v3/kafka/%FF", b"/fleet/burrow")[2]
    assert isinstance(odd, Undecodable)
    assert split_path(b"/elsewhere/v3", b"/fleet/burrow") is None
    assert split_path(b"/fleet/burrowing", b"/fleet/burrow") is None


@pytest.fixture
def client(root, monkeypatch):
    """The fleet app mounted at /fleet, as the api-server mounts it."""
    (root / "fleet.yaml").write_text(FLEET_TEXT)
    monkeypatch.setenv("FLEET_FILE", str(root / "fleet.yaml"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(root))
    monkeypatch.delenv("FLEET_PLANS_DIR", raising=False)
    monkeypatch.setattr(fleet_page, "require_dag_read",
                        lambda user, dag: None if user == "reader" and dag == "fleet_maintenance"
                        else (_ for _ in ()).throw(HTTPException(403, "Forbidden")))
    app = fleet_page.fleet_app()
    app.dependency_overrides[reader] = lambda: "reader"
    outer = FastAPI()
    outer.mount("/fleet", app)
    outer.add_middleware(fleet_page.LineFeedPaths, prefix="/fleet/burrow/")  # (plugin.py's root middleware)
    c = TestClient(outer, raise_server_exceptions=False)
    c.app_ = app
    return c


def test_the_route_serves_burrows_answers_behind_the_pages_permission(client):
    r = client.get("/fleet/burrow/v3/kafka/lab/consumer/stuck/status")
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    assert r.headers["cache-control"] == "no-store"
    body = r.json()
    assert body["status"]["status"] == "ERR" and body["request"]["url"] == "/fleet/burrow/v3/kafka/lab/consumer/stuck/status"
    r = client.get("/fleet/burrow/v3/kafka/lab/nothing")
    assert r.status_code == 404 and r.text == INVALID
    client.app_.dependency_overrides[reader] = lambda: "nobody"
    assert client.get("/fleet/burrow/v3/kafka").status_code == 403

    async def refused():
        raise HTTPException(401, "Not authenticated", headers={"WWW-Authenticate": "Bearer"})
    client.app_.dependency_overrides[reader] = refused
    r = client.get("/fleet/burrow/v3/kafka")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"


@pytest.mark.parametrize("name", ["a/b", "../../etc/passwd", "..", "%2F", "x?y#z", "two\nlines", "\U0001F600 $(id)"])
def test_a_hostile_group_of_the_run_is_found_by_its_encoded_name(root, client, name):
    latest = root / "reports" / "stuck" / "latest"
    rows = [json.loads(line) for line in (latest / "findings.jsonl").read_text().splitlines()]
    (latest / "findings.jsonl").write_text("".join(json.dumps(r) + "\n" for r in
                                                   rows + [finding("lab", name, name, 0, "STALLED", 7)]))
    r = client.get(f"/fleet/burrow/v3/kafka/lab/consumer/{encoded(name)}/status")
    assert r.status_code == 200, r.text
    s = r.json()["status"]
    assert s["group"] == name and s["partitions"][0]["topic"] == name and s["status"] == "ERR"
    r = client.get(f"/fleet/burrow/v3/kafka/lab/topic/{encoded(name)}/consumers")
    assert r.status_code == 200 and r.json()["consumers"] == [name]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=hostile)
def test_any_unknown_name_is_burrows_404_never_a_500(client, name):
    for path, code in ((f"kafka/{encoded(name)}", 404), (f"kafka/lab/consumer/{encoded(name)}/status", 404),
                       (f"kafka/{encoded(name)}/consumer/{encoded(name)}/lag", 404),
                       (f"kafka/lab/topic/{encoded(name)}", 404)):
        if name in ("calm", "stuck", "young", "lab", "orders", "legacy"):
            continue
        r = client.get(f"/fleet/burrow/v3/{path}")
        assert r.status_code == code, (path, r.text)
        body = r.json()
        if path.endswith(("status", "lag")):
            assert body["status"]["status"] == "NOTFOUND" and body["status"]["group"] == name
        else:
            assert body["error"] is True


def test_bytes_that_are_no_text_match_nothing(client):
    r = client.get("/fleet/burrow/v3/kafka/lab/consumer/%FF%FE/status")
    assert r.status_code == 404 and r.json()["status"]["status"] == "NOTFOUND"
    assert client.get("/fleet/burrow/v3/kafka/%C0%AE%C0%AE/topic").status_code == 404
    # a lone surrogate (which no UTF-8 file holds) is echoed as its JSON escape
    r = client.get("/fleet/burrow/v3/kafka/lab/consumer/%ED%A0%80/lag")
    assert r.status_code == 404 and '"group":"\\ud800"' in r.text and r.json()["status"]["group"] == "\ud800"

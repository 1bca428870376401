"""Blind is not OK (fleetkit.collection.blind): what a collection did not see, the cluster's state
from its collection_status.json, and the verdict a group shows. Each case says why its answer is right."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetkit.collection.blind import blind_lines, blind_status, cluster_state, shown_status
from fleetkit.collection.groups import CollectionResult
from fleetkit.core.errors import FleetConfigError, NotAuthorized
from fleetkit.stuck.report import StuckReport

NOW = dt.datetime(2026, 11, 26, 10, 0, tzinfo=dt.timezone.utc)
ROW = {"cluster": "lab39", "group": "billing", "topic": "t", "partition": 0}


def result(groups=("billing",), rows=(ROW,), refusals=(), unread=None) -> CollectionResult:
    return CollectionResult(cluster="lab39", observed_at=NOW, rows={"offsets_snapshots": list(rows)},
                            groups=list(groups), refusals=list(refusals), unread=dict(unread or {}))


def no_describe(group: str) -> NotAuthorized:
    return NotAuthorized("DESCRIBE", "group", group, "User:fleet", "lab39", "GROUP_AUTHORIZATION_FAILED")


def ok_doc(res: CollectionResult, at: str | None = None) -> dict:
    """A status file of a collection made `at` (default: just now)."""
    at = at or dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
    return {"ok": {"observed_at": at, **blind_status(res)}}


def test_a_collection_that_saw_everything_is_ok():
    # every group read, nothing refused: nothing to say, OK
    assert blind_lines(result()) == []
    assert cluster_state(ok_doc(result()))["state"] == "OK"


def test_a_refused_group_is_named_in_one_line_as_the_cli_says_it():
    # the principal may not DESCRIBE 'x': the same words as `fleetctl` (core.errors.blind_summary)
    res = result(groups=["billing", "x"], refusals=[no_describe("x")])
    state = cluster_state(ok_doc(res))
    assert state["state"] == "BLIND" and state["groups"] == ["x"] and not state["all"]
    assert state["line"] == ("blind: 1 group(s) not seen ('x'): not authorized: fleet may not DESCRIBE group 'x' "
                             "on lab39 (GROUP_AUTHORIZATION_FAILED)")
    assert "\n" not in state["line"]


def test_a_refused_listing_blinds_the_whole_cluster():
    # no Describe on the cluster: ListGroups answers what it likes; no group of it is judged OK
    refusal = NotAuthorized("DESCRIBE", "cluster", "kafka-cluster", "User:fleet", "lab39", "CLUSTER_AUTHORIZATION_FAILED")
    state = cluster_state(ok_doc(result(refusals=[refusal])))
    assert state["state"] == "BLIND" and state["all"]
    assert shown_status("OK", "any", state) == "BLIND"


def test_groups_whose_offsets_were_not_readable_are_blind():
    # a coordinator answering an error for OffsetFetch: those groups were not seen, whatever the cause
    state = cluster_state(ok_doc(result(groups=["billing", "b"], unread={"b": "COORDINATOR_NOT_AVAILABLE"})))
    assert state["state"] == "BLIND" and state["groups"] == ["b"]
    assert "1 group(s) not read ('b'): committed offsets not readable (COORDINATOR_NOT_AVAILABLE)" in state["line"]


def test_no_rows_for_a_cluster_with_groups_is_blind_not_empty():
    # a listing filtered by ACLs answers without an error: groups known, nothing read
    state = cluster_state(ok_doc(result(groups=["billing"], rows=[])))
    assert state["state"] == "BLIND" and state["all"]
    assert "no offsets_snapshots row read for 1 group(s) ('billing')" in state["line"]
    # a cluster without groups has nothing to read: OK
    assert cluster_state(ok_doc(result(groups=[], rows=[])))["state"] == "OK"


def test_a_failure_newer_than_the_last_collection_is_failing_in_one_line():
    doc = ok_doc(result(), "2026-11-26T10:00:00Z")
    doc["failed"] = {"at": "2026-11-26T10:05:00Z", "error": "authentication failed for fleet on lab39:\nSASL"}
    state = cluster_state(doc)
    assert state["state"] == "FAILING" and state["all"] and "\n" not in state["line"]
    assert state["line"].startswith("blind: authentication failed for fleet on lab39")
    # an older failure: the newest collection decides
    doc["failed"]["at"] = "2026-11-26T09:00:00Z"
    assert cluster_state(doc)["state"] == "OK"
    assert cluster_state({})["state"] == "NEVER"


@pytest.mark.parametrize("status, group, expected", [
    ("OK", "x", "BLIND"),          # not seen by the newest collection: never OK
    ("OK", "billing", "OK"),       # seen: its verdict stands
    ("STOPPED", "x", "STOPPED"),   # a problem seen before stays worth a look
])
def test_only_an_ok_the_collection_cannot_back_shows_blind(status, group, expected):
    state = cluster_state(ok_doc(result(groups=["billing", "x"], refusals=[no_describe("x")])))
    assert shown_status(status, group, state) == expected


def test_hostile_names_stay_on_one_line_and_are_escaped_in_the_report(tmp_path):
    evil = "evil\n<b>x</b>\u202e"
    state = cluster_state(ok_doc(result(groups=[evil], refusals=[no_describe(evil)])))
    assert "\n" not in state["line"] and "\u202e" not in state["line"]
    report = StuckReport(findings=[], groups=[])
    report.see_collections({"lab39": ok_doc(result(groups=[evil], refusals=[no_describe(evil)])),
                            "fine": ok_doc(result())})
    assert [b["cluster"] for b in report.blind] == ["lab39"]
    html = report.render(tmp_path)[0].read_text()
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt;" in html and 'class="BLIND"' in html


def test_a_blind_cluster_is_alerted_once_per_episode():
    from fleetkit.collection.blind import episode_alerts

    blind = cluster_state(ok_doc(result(groups=["billing", "x"], refusals=[no_describe("x")])))
    ok = cluster_state(ok_doc(result()))
    # first blind collection: one alert line naming the cluster and what was not seen
    lines, alerted = episode_alerts({"lab39": blind, "fine": ok}, [])
    assert lines == [f"BLIND lab39: {blind['line']}"] and alerted == ["lab39"]
    # still blind: the episode was alerted, nothing new
    assert episode_alerts({"lab39": blind, "fine": ok}, alerted) == ([], ["lab39"])
    # seen again: the episode ends; blind once more: a new episode, a new alert
    lines, alerted = episode_alerts({"lab39": ok, "fine": ok}, alerted)
    assert (lines, alerted) == ([], [])
    assert episode_alerts({"lab39": blind}, alerted)[0] == [f"BLIND lab39: {blind['line']}"]


def test_a_cluster_not_collected_for_two_intervals_is_stale_red_and_alerted_once(monkeypatch, tmp_path):
    from fleetkit.collection.blind import current_state, episode_alerts

    now = dt.datetime(2026, 11, 26, 10, 11, tzinfo=dt.timezone.utc)
    doc = ok_doc(result(groups=["billing"]), at="2026-11-26T10:00:00Z")  # 11 min old
    assert cluster_state(doc)["state"] == "OK"  # no clock, no interval: not judged stale
    assert cluster_state(doc, now, 360)["state"] == "OK"  # 11 min < 2 x 6 min
    stale = cluster_state(doc, now, 300)
    assert stale["state"] == "STALE" and stale["all"] is True
    assert stale["line"] == ("stale: the newest collection is 11 min old (2026-11-26T10:00:00Z), more than twice the "
                             "5 min collection interval: is fleet_maintenance running?")
    assert shown_status("OK", "billing", stale) == "BLIND" and shown_status("STOPPED", "billing", stale) == "STOPPED"
    lines, alerted = episode_alerts({"lab39": stale}, [])
    assert lines == [f"STALE lab39: {stale['line']}"] and alerted == ["lab39"]
    assert episode_alerts({"lab39": stale}, alerted) == ([], ["lab39"])  # once per episode
    # the deployment's interval, as the page and the report judge it now
    monkeypatch.setenv("FLEET_COLLECTION_INTERVAL", "1m")
    assert current_state(ok_doc(result()))["state"] == "OK"
    assert current_state(doc)["state"] == "STALE"
    report = StuckReport(findings=[], groups=[])
    report.see_collections({"lab39": doc, "fine": ok_doc(result())})
    assert [b["cluster"] for b in report.blind] == ["lab39"]
    assert "stale: the newest collection is" in report.render(tmp_path)[1].read_text().replace("\\", "")
    monkeypatch.setenv("FLEET_COLLECTION_INTERVAL", "soon")
    with pytest.raises(FleetConfigError, match="FLEET_COLLECTION_INTERVAL: 'soon' is not a duration"):
        current_state(doc)

"""The fleet page's read model (fleetkit.fleetview) and templates, on a generated data root."""

from __future__ import annotations

import datetime as dt

import json
from pathlib import Path

import pytest

from fleetkit.core.fleet import parse_fleet
from fleetkit.core.render import render
from fleetkit.fleetview import FleetView, coerce_conf, form_fields, runbook_conf
from fleetkit.stuck import rules

NOW = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
EVIL = 'pay<b>ments</b> "q" \'s\' $(id) ü\u202e'


def write_jsonl(path: Path, rows) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


@pytest.fixture
def root(tmp_path) -> Path:
    latest = tmp_path / "reports" / "stuck" / "latest"
    groups = [{"cluster": "lab", "group": f"g{i:03d}", "status": "OK", "total_lag": i, "counts": {"OK": 3}}
              for i in range(120)]
    groups += [{"cluster": "lab", "group": EVIL, "status": "STALLED", "total_lag": 7, "counts": {"STALLED": 1, "OK": 2}},
               {"cluster": "lab43", "group": "stormy", "status": "OK", "total_lag": 0, "rebalance_storm": True,
                "storm_kind": "restart", "counts": {"OK": 3}},
               {"cluster": "lab43", "group": "gone", "status": "STOPPED", "total_lag": 900, "counts": {"STOPPED": 3}}]
    write_jsonl(latest / "groups.jsonl", groups)
    write_jsonl(latest / "findings.jsonl", [
        {"cluster": "lab", "group": EVIL, "topic": "orders", "partition": p, "status": "STALLED" if p == 1 else "OK",
         "lag": 7 if p == 1 else 0, "committed_offset": 3, "log_end_offset": 10, "reason": "frozen <here>",
         "stalled_since": "2026-11-25T10:00:00Z" if p == 1 else None} for p in range(3)] + [
        {"cluster": "lab", "group": "g001", "topic": "orders", "partition": 0, "status": "OK", "lag": 1}])
    write_jsonl(latest / "series.jsonl", [{"cluster": "lab", "group": EVIL, "topic": "orders", "partition": 1,
                                           "points": [{"t": "2026-11-25T10:00:00Z", "lag": 3},
                                                      {"t": "2026-11-25T10:05:00Z", "lag": 7}]}])
    state = tmp_path / "_state" / "cluster=lab"
    state.mkdir(parents=True)
    (state / "collection_status.json").write_text(json.dumps({
        "ok": {"observed_at": "2026-11-25T10:05:00Z", "groups": 121, "problems": []},
        "failed": {"at": "2026-11-25T10:10:00Z", "error": "cluster 'lab' did not answer <x>"}}))
    plans = tmp_path / "plans" / "runbook_stuck_skip" / "manual__1"
    plans.mkdir(parents=True)
    (plans / "approval.json").write_text(json.dumps({"dag_id": "runbook_stuck_skip", "run_id": "manual__1",
                                                     "requested_at": "2026-11-25T10:11:00Z", "assigned": ["approver"],
                                                     "answer": None}))
    done = tmp_path / "plans" / "runbook_stuck_reset" / "manual__2"
    done.mkdir(parents=True)
    (done / "approval.json").write_text(json.dumps({"dag_id": "runbook_stuck_reset", "run_id": "manual__2",
                                                    "answer": {"chosen_options": ["Approve"]}}))
    write_jsonl(tmp_path / "reports" / "offsets" / "run1" / "health.jsonl", [
        {"cluster": "lab", "broker": 0, "partition": 17, "verdict": "BLOATED", "disk_bytes": 10**9, "live_keys": 5,
         "reason": "big"},
        {"cluster": "lab", "broker": 1, "partition": 17, "verdict": "HEALTHY"}])
    return tmp_path


FLEET = parse_fleet("""
version: 1
clusters:
  - {name: lab, kafka_version: "0.9.0.1", kafka_conn_id: a, zookeeper: {conn_id: z}, approvers: [x]}
  - {name: lab43, kafka_version: "4.3.1", kafka_conn_id: b, approvers: [x]}
""", path="test")


def test_groups_worst_first_paged_and_filtered(root):
    idx = FleetView(root).groups()
    first, total = idx.page(1)
    assert total == 123 and [g["group"] for g in first[:2]] == ["gone", EVIL]
    assert first[2]["group"] == "stormy"  # a storm before the OK groups
    assert len(first) == 50 and len(idx.page(3)[0]) == 23
    assert [g["group"] for g in idx.page(1, status="STORM")[0]] == ["stormy"]
    assert idx.page(1, cluster="lab43")[1] == 2 and idx.page(1, query="G11")[1] == 10


def test_clusters_show_counts_newest_collection_and_failures(root):
    lab, lab43 = FleetView(root).clusters(FLEET)
    assert lab["counts"] == {"STALLED": 1, "OK": 120} and lab["mode"] == "ZooKeeper"
    assert lab["collected_at"] == "2026-11-25T10:05:00Z" and lab["failing"] is True
    assert lab43["collected_at"] is None and lab43["storms"] == 1 and lab43["mode"] == "KRaft"


def test_a_groups_partitions_with_series_and_the_runbook(root):
    view = FleetView(root)
    parts = view.partitions("lab", EVIL)
    assert [p["partition"] for p in parts] == [1, 0, 2] and len(parts[0]["points"]) == 2
    assert view.partitions("lab43", EVIL) == [] and len(view.partitions("lab", "g001")) == 1
    dag, conf = runbook_conf(parts[0])
    assert dag == "runbook_stuck_skip" and conf == {"cluster": "lab", "group": EVIL, "topic": "orders",
                                                          "partition": 1, "skip": 1, "dry_run": True}
    assert runbook_conf(parts[1]) is None
    assert runbook_conf({"status": "OUT_OF_RANGE", "cluster": "c", "group": "g", "topic": "t", "partition": 2})[1][
        "target"] == "latest"


def test_pending_approvals_and_health(root):
    view = FleetView(root)
    assert [a["run_id"] for a in view.pending_approvals()] == ["manual__1"]
    bad, counts, run = view.trim_health()
    assert [r["verdict"] for r in bad] == ["BLOATED"] and counts[("lab", "HEALTHY")] == 1 and run == "run1"


#: the stuck runbook's params as the dag-processor serializes them (the real DAG's are checked in
#: tests/dags/test_dags.py)
STUCK_PARAMS = {"cluster": {"type": "string", "description": "cluster name from the fleet file"},
                "group": {"type": "string", "minLength": 1, "description": "consumer group id"},
                "topic": {"type": "string", "description": None}, "partition": {"type": "integer", "minimum": 0},
                "skip": {"type": ["null", "integer"], "minimum": 1, "description": "records to skip forward"},
                "window": {"type": "string"}, "dry_run": {"type": "boolean", "description": "plan and render only"}}


def test_form_fields_come_from_the_dags_params():
    fields = form_fields("runbook_stuck_skip", STUCK_PARAMS)
    assert [(f.name, f.kind, f.help, f.minimum) for f in fields] == [
        ("cluster", "string", "cluster name from the fleet file", None), ("group", "string", "consumer group id", None),
        ("topic", "string", "topic", None), ("partition", "integer", "partition", 0),
        ("skip", "integer", "records to skip forward", 1), ("dry_run", "boolean", "plan and render only", None)]
    with pytest.raises(ValueError, match="not a runbook"):
        form_fields("fleet_maintenance", STUCK_PARAMS)
    with pytest.raises(ValueError, match="has no param 'skip'"):
        form_fields("runbook_stuck_skip", {k: v for k, v in STUCK_PARAMS.items() if k != "skip"})


def test_form_values_are_typed_and_checked():
    fields = form_fields("runbook_stuck_skip", STUCK_PARAMS)
    form = {"cluster": "lab", "group": EVIL, "topic": "t", "partition": "2", "skip": "1", "dry_run": "true"}
    assert coerce_conf(fields, form) == {**form, "partition": 2, "skip": 1, "dry_run": True}
    assert coerce_conf(fields, {**form, "dry_run": None})["dry_run"] is False
    with pytest.raises(ValueError, match="partition: 'x' is not a whole number"):
        coerce_conf(fields, {**form, "partition": "x"})
    with pytest.raises(ValueError, match="group: a value is required"):
        coerce_conf(fields, {**form, "group": ""})
    with pytest.raises(ValueError, match="skip: '0' is below its minimum 1"):  # the DAG's minimum, before Airflow's
        coerce_conf(fields, {**form, "skip": "0"})


def test_pages_escape_names_and_keep_form_values_exact(root):
    view = FleetView(root)
    rows, total = view.groups().page(1)
    html = render("fleet_page.html.j2", clusters=view.clusters(FLEET), groups=rows, total=total, page=1, pages=3,
                  filters={"cluster": "", "status": "", "q": ""}, statuses=["STALLED"], as_of=None,
                  approvals=view.pending_approvals(), timeline=[], health=view.trim_health()[0], health_more=0,
                  health_run="run1", coordinators=[], coord_run=None, user="admin", words=rules.STATUS_WORDS)
    assert "<b>ments" not in html and "pay&lt;b&gt;ments&lt;/b&gt;" in html and "\\u202e" in html
    assert "did not answer &lt;x&gt;" in html and "tasks/approve/required_actions" in html
    assert "group?cluster=lab&amp;group=pay%3Cb%3Ements" in html  # the link carries the exact name
    form = render("fleet_runbook.html.j2", dag_id="runbook_stuck_skip",
                  fields=[("group", "string", "consumer group id", None), ("dry_run", "boolean", "plan only", None)],
                  values={"group": EVIL, "dry_run": "true"}, csrf="c", result=None, error=None)
    assert 'value="pay&lt;b&gt;ments&lt;/b&gt; &#34;q&#34; &#39;s&#39; $(id) ü\u202e"' in form  # exact, escaped
    assert 'name="dry_run" value="true" checked' in form


def test_a_name_with_a_line_break_goes_in_a_hidden_field_exactly():
    name = "two\nlines"
    form = render("fleet_runbook.html.j2", dag_id="runbook_stuck_skip",
                  fields=[("group", "string", "consumer group id", None)], values={"group": name}, csrf="c", result=None,
                  error=None)
    assert '<input type="hidden" id="f-group" name="group" value="two\nlines">' in form
    assert "<code>two\\nlines</code>" in form


def test_newest_skips_a_run_folder_removed_while_it_looks(tmp_path):
    from fleetkit.fleetview import newest

    folder = tmp_path / "reports" / "offsets"
    write_jsonl(folder / "run-b" / "health.jsonl", [{"a": 1}])
    (folder / "run-a").mkdir()
    # listed, gone by the time it is looked at (a dangling link stats like a removed file)
    (folder / "run-a" / "health.jsonl").symlink_to(tmp_path / "removed.jsonl")
    (folder / "run-c" / "health.jsonl").mkdir(parents=True)  # not a file
    assert newest(folder, "health.jsonl") == folder / "run-b" / "health.jsonl"
    assert newest(tmp_path / "nothing", "health.jsonl") is None


def test_a_blind_cluster_is_red_with_its_line_and_its_unseen_groups_never_ok(root):
    """lab43's newest collection was refused Describe on group 'stormy' (named with markup): the
    cluster row is red with the CLI's line, escaped; 'stormy' (OK in the stuck run) shows BLIND,
    'gone' (STOPPED, seen before) keeps its verdict."""
    state = root / "_state" / "cluster=lab43"
    state.mkdir(parents=True)
    line = ("1 group(s) not seen ('<i>stormy</i>'): not authorized: fleet may not DESCRIBE group "
            "'<i>stormy</i>' on lab43 (GROUP_AUTHORIZATION_FAILED)")
    (state / "collection_status.json").write_text(json.dumps({"ok": {
        "observed_at": NOW, "groups": 2, "problems": [], "blind": [line],
        "blind_groups": ["stormy"], "blind_all": False}}))
    view = FleetView(root)
    clusters = view.clusters(FLEET)
    assert [c["seen"]["state"] for c in clusters] == ["FAILING", "BLIND"]
    rows = view.shown_groups(view.groups().page(1, cluster="lab43")[0], clusters)
    assert {r["group"]: r["status"] for r in rows} == {"stormy": "BLIND", "gone": "STOPPED"}
    html = render("fleet_page.html.j2", clusters=clusters, groups=rows, total=len(rows), page=1, pages=1,
                  filters={"cluster": "", "status": "", "q": ""}, statuses=["STALLED"], as_of=None,
                  approvals=[], timeline=[], health=[], health_more=0, health_run=None, coordinators=[],
                  coord_run=None, user="admin", words=rules.STATUS_WORDS)
    assert "<i>stormy" not in html
    assert ('<span class="BLIND blind-line">blind: 1 group(s) not seen (\'&lt;i&gt;stormy&lt;/i&gt;\'): not '
            "authorized: fleet may not DESCRIBE group") in html.replace("&#39;", "'")
    assert '<td class="BLIND">BLIND</td><td>lab43</td>' in html


def test_a_group_page_never_shows_ok_what_the_collection_did_not_see(root):
    # lab's newest attempt failed (the fixture): its OK group shows BLIND with the failure's line
    g, line = FleetView(root).shown_group("lab", "g001")
    assert g["status"] == "BLIND" and line.startswith("blind: cluster 'lab' did not answer")
    html = render("fleet_group.html.j2", cluster="lab", group="g001", g=g, partitions=[], storm=None,
                  blind_line=line, words=rules.STATUS_WORDS)
    assert "blind: cluster &#39;lab&#39; did not answer &lt;x&gt;" in html
    # lab43 was collected (no status file: never): its verdicts stand
    assert FleetView(root).shown_group("lab43", "gone") == (FleetView(root).group("lab43", "gone"), None)


def test_a_group_nothing_could_be_judged_of_shows_not_judged_yet_before_the_ok_ones(root):
    latest = root / "reports" / "stuck" / "latest"
    rows = [json.loads(line) for line in (latest / "groups.jsonl").read_text().splitlines()]
    rows.append({"cluster": "lab43", "group": "new <b>", "status": "INSUFFICIENT_DATA", "total_lag": 0,
                 "judged_from": "2026-11-25T10:12:30Z", "counts": {"INSUFFICIENT_DATA": 3}})
    write_jsonl(latest / "groups.jsonl", rows)
    view = FleetView(root)
    first, _ = view.groups().page(1)
    # after the flagged groups, before every OK group (the OK one in a storm too)
    assert [g["group"] for g in first[:4]] == ["gone", EVIL, "new <b>", "stormy"]
    clusters = view.clusters(FLEET)
    assert list(clusters[1]["counts"]) == ["STOPPED", "INSUFFICIENT_DATA", "OK"]
    shown = view.shown_groups(view.groups().page(1, cluster="lab43", status="INSUFFICIENT_DATA")[0], clusters)
    html = render("fleet_page.html.j2", clusters=clusters, groups=shown, total=1, page=1, pages=1,
                  filters={"cluster": "lab43", "status": "INSUFFICIENT_DATA", "q": ""},
                  statuses=list(rules.SHOWN_ORDER), as_of=None, approvals=[], timeline=[], health=[], health_more=0,
                  health_run=None, coordinators=[], coord_run=None, user="admin", words=rules.STATUS_WORDS)
    assert ('<td class="INSUFFICIENT_DATA">not judged yet <span class="muted">(from 2026-11-25 10:12:30 UTC)</span>'
            '</td><td>lab43</td>') in html
    carried = dict(shown[0], status="STALLED", carried_as_of="2026-11-25 10:00:00 UTC")
    html = render("fleet_page.html.j2", clusters=clusters, groups=[carried], total=1, page=1, pages=1,
                  filters={"cluster": "", "status": "", "q": ""}, statuses=[], as_of=None, approvals=[], timeline=[],
                  health=[], health_more=0, health_run=None, coordinators=[], coord_run=None, user="admin",
                  words=rules.STATUS_WORDS)
    assert ('<td class="STALLED">STALLED <span class="muted">(judged 2026-11-25 10:00:00 UTC; not judged since)'
            '</span></td>') in html
    g, _ = view.shown_group("lab43", "new <b>")
    page = render("fleet_group.html.j2", cluster="lab43", group="new <b>", g=g, partitions=[], storm=None,
                  blind_line=None, words=rules.STATUS_WORDS)
    assert "not judged yet</span> (enough history from about 2026-11-25 10:12:30 UTC)" in page


def test_a_cluster_not_collected_for_two_intervals_shows_stale_in_red(root, monkeypatch):
    monkeypatch.setenv("FLEET_COLLECTION_INTERVAL", "5m")
    state = root / "_state" / "cluster=lab43"
    state.mkdir(parents=True)
    (state / "collection_status.json").write_text(json.dumps({"ok": {"observed_at": "2026-11-25T10:05:00Z",
                                                                     "groups": 2, "problems": []}}))
    view = FleetView(root)
    clusters = view.clusters(FLEET)
    assert clusters[1]["seen"]["state"] == "STALE"
    rows = view.shown_groups(view.groups().page(1, cluster="lab43")[0], clusters)
    assert {r["group"]: r["status"] for r in rows} == {"stormy": "BLIND", "gone": "STOPPED"}  # OK never shown
    html = render("fleet_page.html.j2", clusters=clusters, groups=rows, total=len(rows), page=1, pages=1,
                  filters={"cluster": "", "status": "", "q": ""}, statuses=["STALLED"], as_of=None,
                  approvals=[], timeline=[], health=[], health_more=0, health_run=None, coordinators=[],
                  coord_run=None, user="admin", words=rules.STATUS_WORDS)
    assert '<a class="BLIND" href="?cluster=lab43">lab43</a> <span class="BLIND">STALE</span>' in html
    assert ('<span class="BLIND blind-line">stale: the newest collection is ' in html
            and "(2026-11-25T10:05:00Z), more than twice the 5 min collection interval" in html)


def test_two_parses_of_one_file_are_cached_apart(root):
    """The metrics' flagged partitions and the Burrow API's topics both parse findings.jsonl: each
    keeps its own cache entry."""
    view = FleetView(root)
    assert view.flagged_partitions().total == 4
    topics = view.topics()
    assert topics.log_end == {"lab": {"orders": {0: 10, 1: 10, 2: 10}}}
    assert topics.groups == {"lab": {"orders": {EVIL, "g001"}}}
    assert view.flagged_partitions().total == 4 and view.topics() is topics

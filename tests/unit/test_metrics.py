"""fleetkit.metrics: the fleet's newest judged state as Prometheus metrics, over a data root written
by the writers the jobs and tasks use (publish_rows: the report task's reports/stuck/latest and the
jobs' JSON Lines; record_status: the collect task; write_approval: the approval task)."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
from prometheus_client.parser import text_string_to_metric_families as parse_text

from fleetkit.collection.groups import record_status
from fleetkit.core.datasets import DataRoot, publish_rows, write_collection
from fleetkit.core.fleet import parse_fleet
from fleetkit.core.runbook import write_approval
from fleetkit.fleetview import FleetView
from fleetkit.metrics import COMPAT, METRICS, FleetCollector, scrape
from fleetkit.metrics.names import KMINION, LAG_EXPORTER
from fleetkit.metrics.collector import label

NOW = dt.datetime.now(dt.timezone.utc)
PASSWORD = "hunter2-s3cr3t-pw"
HOSTILE = ['quo"te', "two\nlines", "back\\slash", "nul\x00byte", "ünï\u202ecode 🐘", "brace}{=,"]


def iso(t: dt.datetime) -> str:
    return t.isoformat(timespec="seconds").replace("+00:00", "Z")


FLEET = parse_fleet("""
version: 1
clusters:
  - {name: lab, kafka_version: "0.9.0.1", kafka_conn_id: lab_kafka, zookeeper: {conn_id: lab_zk}, approvers: [x]}
  - {name: lab43, kafka_version: "4.3.1", kafka_conn_id: lab43_kafka, approvers: [x]}
""", path="test")


def finding(cluster, group, topic, p, status, lag, **kw):
    return {"cluster": cluster, "source": "kafka", "group": group, "topic": topic, "partition": p, "status": status,
            "lag": lag, "committed_offset": 100, "log_end_offset": 100 + lag, "lag_seconds": 30.0 if lag else 0.0,
            "lag_seconds_kind": "interpolated" if lag else "exact", "lag_seconds_error": 2.0, "reason": "r", **kw}


def snapshot(group, topic, p, committed, end, start=0, member=None, source=None, state="Stable"):
    """An offsets_snapshots row of the collect task (member: (member id, client id, host) holding it)."""
    mid, cid, host = member or (None, None, None)
    return {"cluster": "lab", "group": group, "topic": topic, "partition": p, "observed_at": NOW,
            "committed_offset": committed, "log_start_offset": start, "log_end_offset": end,
            "group_state": state, "assigned": member is not None, "member_id": mid, "member_client_id": cid,
            "member_host": host, "source": source}


CONSUMER = ("consumer-1-2b1f0c1e-7d0a-4c8e-9f1e-0123456789ab", "consumer-1", "10.0.0.7")


@pytest.fixture
def root(tmp_path, monkeypatch):
    # the collector judges a collection's age against the real clock: each test's data is written
    # as of the test's own start (a module-level time would make a test run late in a long session
    # see every cluster STALE)
    monkeypatch.setitem(globals(), "NOW", dt.datetime.now(dt.timezone.utc))
    monkeypatch.setenv("FLEET_COLLECTION_INTERVAL", "5m")
    monkeypatch.delenv("FLEET_METRICS_MAX_PARTITION_SERIES", raising=False)
    monkeypatch.delenv("FLEET_METRICS_MAX_GROUP_SERIES", raising=False)
    monkeypatch.delenv("FLEET_METRICS_MAX_BODY_BYTES", raising=False)
    monkeypatch.delenv("FLEET_METRICS_NAMES", raising=False)
    latest = tmp_path / "reports" / "stuck" / "latest"
    latest.mkdir(parents=True)
    groups = [{"cluster": "lab", "source": "kafka", "group": f"ok-{i}", "status": "OK", "total_lag": 0,
               "counts": {"OK": 1}} for i in range(5)]
    groups += [{"cluster": "lab", "source": "kafka", "group": "stalled", "status": "STALLED", "total_lag": 70,
                "counts": {"STALLED": 1, "OK": 1}},
               {"cluster": "lab", "source": "zookeeper", "group": "stalled", "status": "STOPPED", "total_lag": 9,
                "counts": {"STOPPED": 1}},
               {"cluster": "lab43", "source": "kafka", "group": "stormy", "status": "OK", "total_lag": 0,
                "rebalance_storm": True, "counts": {"OK": 1}}]
    findings = [finding("lab", f"ok-{i}", "orders", 0, "OK", 0) for i in range(5)]
    findings += [finding("lab", "stalled", "orders", 0, "STALLED", 50, stalled_since=iso(NOW)),
                 finding("lab", "stalled", "orders", 1, "LAGGING", 20),
                 finding("lab", "stalled", "orders", 2, "OK", 0),
                 dict(finding("lab", "stalled", "legacy", 0, "STOPPED", 9), source="zookeeper",
                      lag_seconds=None, lag_seconds_kind="unknown"),
                 finding("lab43", "stormy", "events", 0, "OK", 0)]
    publish_rows(groups, latest / "groups.jsonl")
    publish_rows(findings, latest / "findings.jsonl")
    publish_rows([], latest / "series.jsonl")
    data = DataRoot(str(tmp_path))
    # lab's newest collection (after the stuck run: its offsets moved on); lab43 has none yet
    write_collection(data, "lab", NOW - dt.timedelta(seconds=60), {"offsets_snapshots": [
        *(snapshot(f"ok-{i}", "orders", 0, 130, 130, state="Empty") for i in range(5)),
        snapshot("stalled", "orders", 0, 120, 170, start=7, member=CONSUMER),
        snapshot("stalled", "orders", 1, 100, 120, start=3, member=CONSUMER),
        snapshot("stalled", "orders", 2, 170, 170, start=7, member=CONSUMER),
        snapshot("stalled", "legacy", 0, 100, 109, source="zookeeper", state="Unknown")]})
    record_status(data, "lab", ok={"observed_at": iso(NOW - dt.timedelta(seconds=60)), "groups": 7, "problems": []})
    record_status(data, "lab43", ok={"observed_at": iso(NOW - dt.timedelta(seconds=30)), "groups": 1,
                                     "problems": []})
    (tmp_path / "reports" / "offsets" / "run1").mkdir(parents=True)
    publish_rows([{"cluster": "lab", "broker": 0, "partition": 17, "verdict": "BLOATED", "disk_bytes": 5 * 10**9},
                  {"cluster": "lab", "broker": 1, "partition": 17, "verdict": "HEALTHY", "disk_bytes": 10**6}],
                 tmp_path / "reports" / "offsets" / "run1" / "health.jsonl")
    (tmp_path / "reports" / "coordinator" / "run1").mkdir(parents=True)
    publish_rows([{"cluster": "lab", "partition": 12, "verdict": "LOAD_STUCK", "mismatch": 0, "loading": 3,
                   "unavailable": 1, "not_ok_seconds": 900},
                  {"cluster": "lab", "partition": 13, "verdict": "OK", "mismatch": 0, "loading": 0, "unavailable": 0}],
                 tmp_path / "reports" / "coordinator" / "run1" / "partitions.jsonl")
    plans = str(tmp_path / "plans")
    write_approval(plans, "runbook_stuck_skip", "manual__1",
                   {"dag_id": "runbook_stuck_skip", "run_id": "manual__1", "answer": None,
                    "requested_at": iso(NOW - dt.timedelta(hours=2))})
    write_approval(plans, "runbook_stuck_reset", "manual__2",
                   {"dag_id": "runbook_stuck_reset", "run_id": "manual__2", "answer": None,
                    "requested_at": iso(NOW - dt.timedelta(minutes=5))})
    write_approval(plans, "runbook_stuck_reset", "manual__3",
                   {"dag_id": "runbook_stuck_reset", "run_id": "manual__3", "requested_at": iso(NOW),
                    "answer": {"chosen_options": ["Approve"]}})
    return tmp_path


def samples(body: bytes, openmetrics: bool = False) -> dict[str, list]:
    parse = parse_openmetrics if openmetrics else parse_text
    out: dict[str, list] = {}
    seen = set()
    for fam in parse(body.decode("utf-8")):
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in seen, f"a series twice in one scrape (Prometheus refuses the scrape): {key}"
            seen.add(key)
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def scraped(root, accept=None, **kw) -> tuple[bytes, str]:
    return scrape(FleetCollector(FleetView(root), FLEET, **kw), accept)


def value(found, name, **labels):
    hits = [v for lab, v in found.get(name, []) if all(lab.get(k) == x for k, x in labels.items())]
    assert len(hits) == 1, (name, labels, found.get(name))
    return hits[0]


def test_the_newest_judged_state_is_published_with_the_lag_exporters_names(root):
    body, ctype = scraped(root)
    assert ctype.startswith("text/plain")
    m = samples(body)
    # every partition of every group, from the newest collection, with the member holding it
    member = {"member_host": "/10.0.0.7", "consumer_id": CONSUMER[0], "client_id": "consumer-1"}  # as Kafka prints it
    part = {"cluster_name": "lab", "group": "stalled", "source": "kafka", "topic": "orders", "partition": "0"}
    assert value(m, "kafka_consumergroup_group_offset", **part, **member) == 120
    assert value(m, "kafka_consumergroup_group_lag", **part, **member) == 50
    # the time lag is the newest stuck run's
    assert value(m, "kafka_consumergroup_group_lag_seconds", **part, **member, kind="interpolated") == 30
    assert value(m, "kafka_partition_latest_offset", cluster_name="lab", topic="orders", partition="0") == 170
    assert value(m, "kafka_partition_earliest_offset", cluster_name="lab", topic="orders", partition="0") == 0
    assert value(m, "kafka_partition_earliest_offset", cluster_name="lab", topic="orders", partition="1") == 3
    # OK partitions too: a threshold alert sees a partition before the stuck job flags it
    assert value(m, "kafka_consumergroup_group_lag", cluster_name="lab", group="ok-3", topic="orders",
                 member_host="", consumer_id="", client_id="") == 0
    assert len(m["kafka_consumergroup_group_lag"]) == 10  # lab's 9 partitions, and lab43's judged one
    assert value(m, "kafka_consumergroup_group_lag", cluster_name="lab43", group="stormy") == 0
    assert value(m, "fleet_partition_verdict", **part) == 1
    assert value(m, "fleet_partition_verdict", **part, verdict="STALLED") == 1
    # verdicts for flagged partitions only
    assert {lab["partition"] for lab, _ in m["fleet_partition_verdict"] if lab["topic"] == "orders"} == {"0", "1"}
    assert not [lab for lab, _ in m["fleet_partition_verdict"] if lab["group"].startswith("ok-")]
    # a ZooKeeper-stored offset of the same group name is its own series; its unknown time lag has none
    zk = {"cluster_name": "lab", "group": "stalled", "source": "zookeeper", "topic": "legacy", "partition": "0"}
    assert value(m, "fleet_partition_verdict", **zk, verdict="STOPPED") == 1
    assert value(m, "kafka_consumergroup_group_lag", **zk) == 9
    assert not [lab for lab, _ in m["kafka_consumergroup_group_lag_seconds"] if lab["source"] == "zookeeper"]
    # groups: worst verdict, storm flag, lag in records and seconds over every partition
    assert value(m, "fleet_group_verdict", cluster_name="lab", group="stalled", source="kafka") == 1
    assert value(m, "fleet_group_verdict", cluster_name="lab", group="stalled", source="kafka",
                 verdict="STALLED") == 1
    assert value(m, "fleet_group_rebalance_storm", cluster_name="lab43", group="stormy") == 1
    assert value(m, "fleet_group_rebalance_storm", cluster_name="lab", group="stalled", source="kafka") == 0
    stalled = {"cluster_name": "lab", "group": "stalled", "source": "kafka"}
    assert value(m, "kafka_consumergroup_group_sum_lag", **stalled) == 70
    assert value(m, "kafka_consumergroup_group_max_lag", **stalled, is_simple_consumer="false") == 50
    assert value(m, "kafka_consumergroup_group_max_lag_seconds", **stalled) == 30
    assert value(m, "kafka_consumergroup_group_topic_sum_lag", **stalled, topic="orders") == 70
    # a group no member holds a partition of, Empty: kafka-lag-exporter's simple consumer
    assert value(m, "kafka_consumergroup_group_max_lag", cluster_name="lab", group="ok-0",
                 is_simple_consumer="true") == 0
    assert value(m, "fleet_cluster_groups", cluster_name="lab", verdict="OK") == 5
    assert value(m, "fleet_partitions_flagged", cluster_name="lab", verdict="LAGGING") == 1
    # KMinion's names only when asked for
    assert not set(m) & set(KMINION)
    # clusters, __consumer_offsets, coordinators, approvals
    assert value(m, "fleet_cluster_state", cluster_name="lab", state="OK") == 1
    assert value(m, "fleet_cluster_blind", cluster_name="lab") == 0
    assert 55 <= value(m, "fleet_cluster_collection_age_seconds", cluster_name="lab") < 600
    assert value(m, "fleet_collection_interval_seconds") == 300
    assert value(m, "fleet_offsets_partition_verdict", cluster_name="lab", broker="0", partition="17",
                 verdict="BLOATED") == 1
    assert value(m, "fleet_offsets_partition_size_bytes", cluster_name="lab", broker="0", partition="17") == 5e9
    assert value(m, "fleet_offsets_partition_verdict", broker="1", verdict="HEALTHY") == 1
    assert value(m, "fleet_coordinator_partition_verdict", cluster_name="lab", partition="12",
                 verdict="LOAD_STUCK") == 1
    assert "13" not in {lab["partition"] for lab, _ in m["fleet_coordinator_partition_verdict"]}
    assert value(m, "fleet_coordinator_partition_groups_affected", partition="12") == 4
    assert value(m, "fleet_coordinator_partition_not_ok_seconds", partition="12") == 900
    assert value(m, "fleet_pending_approvals") == 2
    assert 7190 < value(m, "fleet_pending_approval_oldest_age_seconds") < 7800
    assert value(m, "fleet_metrics_series_left_out", kind="partition") == 0
    assert {lab["source"]: v for lab, v in m["fleet_metrics_source_up"]} == {
        "clusters": 1, "stuck": 1, "collections": 1, "offsets": 1, "coordinator": 1, "approvals": 1, "reports": 1}
    assert {lab["report"] for lab, _ in m["fleet_report_age_seconds"]} == {"stuck", "coordinator", "offsets"}


def test_every_published_series_is_declared_with_its_labels(root):
    m = samples(scraped(root)[0])
    assert set(m) <= set(METRICS)
    for name, rows in m.items():
        for labels, _ in rows:
            assert tuple(labels) == METRICS[name][0] or set(labels) == set(METRICS[name][0]), name
    # kafka-lag-exporter's whole set (its README's metrics), with its labels first and in its order
    assert set(LAG_EXPORTER) == {
        "kafka_consumergroup_group_offset", "kafka_consumergroup_group_lag", "kafka_consumergroup_group_lag_seconds",
        "kafka_consumergroup_group_max_lag", "kafka_consumergroup_group_max_lag_seconds",
        "kafka_consumergroup_group_sum_lag", "kafka_consumergroup_group_topic_sum_lag",
        "kafka_partition_latest_offset", "kafka_partition_earliest_offset"}
    theirs = {"kafka_consumergroup_group_offset": ("cluster_name", "group", "topic", "partition", "member_host",
                                                   "consumer_id", "client_id"),
              "kafka_consumergroup_group_max_lag": ("cluster_name", "group", "is_simple_consumer"),
              "kafka_consumergroup_group_topic_sum_lag": ("cluster_name", "group", "topic"),
              "kafka_partition_earliest_offset": ("cluster_name", "topic", "partition")}
    for name, labels in theirs.items():
        assert METRICS[name][0][:len(labels)] == labels, name
    assert all(n.startswith("fleet_") for n in METRICS if n not in COMPAT)


def test_kminions_names_when_asked_for(root, monkeypatch):
    monkeypatch.setenv("FLEET_METRICS_NAMES", "kminion")
    m = samples(scraped(root)[0])
    assert not set(m) & set(LAG_EXPORTER)
    g = {"cluster_name": "lab", "group_id": "stalled", "topic_name": "orders"}
    assert value(m, "kminion_kafka_consumer_group_topic_partition_lag", **g, partition_id="0") == 50
    assert value(m, "kminion_kafka_consumer_group_topic_lag", **g) == 70
    assert value(m, "kminion_kafka_consumer_group_topic_offset_sum", **g) == 390
    assert value(m, "kminion_kafka_consumer_group_topic_assigned_partitions", **g) == 3
    assert value(m, "kminion_kafka_consumer_group_info", cluster_name="lab", group_id="stalled", state="Stable") == 1
    assert value(m, "kminion_kafka_consumer_group_info", cluster_name="lab", group_id="ok-1", state="Empty") == 0
    assert value(m, "kminion_kafka_topic_partition_high_water_mark", cluster_name="lab", topic_name="orders",
                 partition_id="1") == 120
    assert value(m, "kminion_kafka_topic_high_water_mark_sum", cluster_name="lab", topic_name="orders") == 460
    # offsets kept in ZooKeeper are not KMinion's (it reads Kafka's groups): no series, no clash
    assert not [lab for lab, _ in m["kminion_kafka_consumer_group_topic_lag"] if lab["topic_name"] == "legacy"]
    monkeypatch.setenv("FLEET_METRICS_NAMES", "kafka-lag-exporter, kminion")
    both = samples(scraped(root)[0])
    assert set(both) >= set(LAG_EXPORTER) | set(KMINION)
    monkeypatch.setenv("FLEET_METRICS_NAMES", "burrow")
    with pytest.raises(ValueError, match="FLEET_METRICS_NAMES='burrow': expected a comma-separated list of "
                                         "kafka-lag-exporter, kminion"):
        scraped(root)


#: what Prometheus 2.42 (Debian bookworm's) sends
PROMETHEUS_ACCEPT = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
                     "text/plain;version=0.0.4;q=0.5,*/*;q=0.1")


def test_openmetrics_when_the_scraper_asks_for_it(root):
    body, ctype = scraped(root, PROMETHEUS_ACCEPT)
    assert ctype.startswith("application/openmetrics-text; version=1.0.0") and body.endswith(b"# EOF\n")
    assert value(samples(body, openmetrics=True), "fleet_pending_approvals") == 2
    assert scraped(root, "text/plain;version=0.0.4")[1].startswith("text/plain; version=0.0.4")


@pytest.mark.parametrize("openmetrics", [False, True])
def test_hostile_group_names_are_escaped_and_parse_back_exactly(root, openmetrics):
    latest = root / "reports" / "stuck" / "latest"
    publish_rows([{"cluster": "lab", "source": "kafka", "group": g, "status": "STALLED", "total_lag": 3,
                   "counts": {"STALLED": 1}} for g in HOSTILE], latest / "groups.jsonl")
    publish_rows([finding("lab", g, f"t-{g}", 0, "STALLED", 3) for g in HOSTILE], latest / "findings.jsonl")
    write_collection(DataRoot(str(root)), "lab", NOW, {"offsets_snapshots": [
        snapshot(g, f"t-{g}", 0, 100, 103, member=(f"{g}-id", g, "10.0.0.7")) for g in HOSTILE]})
    body, _ = scraped(root, "application/openmetrics-text; version=1.0.0" if openmetrics else None)
    text = body.decode("utf-8")
    # every sample is one line: a line feed in a name is written \n, a quote \", a backslash \\
    assert 'group="quo\\"te"' in text and 'group="two\\nlines"' in text and 'group="back\\\\slash"' in text
    assert "two\nlines" not in text
    m = samples(body, openmetrics)
    expected = set(HOSTILE)
    assert {lab["group"] for lab, _ in m["fleet_group_verdict"]} == expected
    assert {lab["group"] for lab, _ in m["kafka_consumergroup_group_lag"]} == expected
    assert {lab["client_id"] for lab, _ in m["kafka_consumergroup_group_lag"]} == expected
    assert {lab["topic"] for lab, _ in m["kafka_partition_latest_offset"]} == {"t-" + g for g in expected}


def test_a_label_carries_a_name_exactly_but_what_utf8_cannot_carry():
    assert label("ünï\u202e\x00") == "ünï\u202e\x00" and label(None) == "" and label(7) == "7"
    assert label("a\ud800b") == "a\\ud800b"  # a lone surrogate (a JSON \ud800 escape) cannot be UTF-8


def test_a_long_name_is_cut_with_its_hash_so_a_scrape_stays_bounded(root, monkeypatch):
    """Names come from clusters: 20,000 groups with 32 KB names would be gigabytes per scrape. A name
    over MAX_LABEL_CHARS keeps its head and ends in ~ and 16 hex digits of its SHA-256 (two long
    names with the same head stay two series); the body has a limit of its own."""
    import hashlib

    from fleetkit.metrics.collector import MAX_LABEL_CHARS

    huge = ["g" * 32_768 + "-one", "g" * 32_768 + "-two"]
    latest = root / "reports" / "stuck" / "latest"
    publish_rows([{"cluster": "lab", "source": "kafka", "group": g, "status": "STALLED", "total_lag": 3,
                   "counts": {"STALLED": 1}} for g in huge], latest / "groups.jsonl")
    publish_rows([finding("lab", g, "orders", 0, "STALLED", 3) for g in huge], latest / "findings.jsonl")
    body, _ = scraped(root)
    m = samples(body)
    shown = {lab["group"] for lab, _ in m["fleet_group_verdict"] if lab["group"].startswith("ggg")}
    assert shown == {"g" * (MAX_LABEL_CHARS - 17) + "~" + hashlib.sha256(g.encode()).hexdigest()[:16] for g in huge}
    assert all(len(g) == MAX_LABEL_CHARS for g in shown)
    assert len(body) < 100_000
    monkeypatch.setenv("FLEET_METRICS_MAX_BODY_BYTES", "1000")
    with pytest.raises(ValueError, match="over FLEET_METRICS_MAX_BODY_BYTES=1,000"):
        scraped(root)


def test_the_limits_keep_the_worst_and_count_what_they_leave_out(root, monkeypatch):
    latest = root / "reports" / "stuck" / "latest"
    rows = [finding("lab", f"g{i}", "orders", i, "LAGGING", i) for i in range(50)]
    rows += [finding("lab", "worst", "orders", 99, "OUT_OF_RANGE", 1), finding("lab", "ok", "orders", 98, "OK", 0)]
    publish_rows(rows, latest / "findings.jsonl")
    write_collection(DataRoot(str(root)), "lab", NOW, {"offsets_snapshots": [
        snapshot(r["group"], "orders", r["partition"], 100, 100 + r["lag"]) for r in rows]})
    monkeypatch.setenv("FLEET_METRICS_MAX_PARTITION_SERIES", "3")
    monkeypatch.setenv("FLEET_METRICS_MAX_GROUP_SERIES", "2")
    m = samples(scraped(root)[0])
    shown = [(lab["group"], lab["verdict"]) for lab, _ in m["fleet_partition_verdict"]]
    assert shown == [("worst", "OUT_OF_RANGE"), ("g49", "LAGGING"), ("g48", "LAGGING")]  # worst, then most lag
    assert value(m, "fleet_metrics_series_left_out", kind="partition") == 49  # of the 52 collected
    assert [lab["group"] for lab, _ in m["kafka_consumergroup_group_lag"]] == ["worst", "g49", "g48"]
    assert len(m["kafka_consumergroup_group_sum_lag"]) == 2
    assert value(m, "fleet_metrics_series_left_out", kind="group_lag") == 50
    assert value(m, "fleet_partitions_flagged", cluster_name="lab", verdict="LAGGING") == 50  # counts are whole
    assert [(lab["group"], lab["verdict"]) for lab, _ in m["fleet_group_verdict"]] == [
        ("stalled", "STOPPED"), ("stalled", "STALLED")]
    assert value(m, "fleet_metrics_series_left_out", kind="group") == 6
    assert sum(v for _, v in m["fleet_cluster_groups"]) == 8
    monkeypatch.setenv("FLEET_METRICS_MAX_PARTITION_SERIES", "many")
    with pytest.raises(ValueError, match="FLEET_METRICS_MAX_PARTITION_SERIES='many' is not a whole number"):
        scraped(root)


def test_a_blind_a_stale_and_a_failing_cluster_never_show_ok(root):
    data = DataRoot(str(root))
    record_status(data, "lab43", ok={"observed_at": iso(NOW), "groups": 1, "problems": [],
                                     "blind": ["1 group(s) not seen ('stormy'): not authorized"],
                                     "blind_groups": ["stormy"], "blind_all": False})
    m = samples(scraped(root)[0])
    assert value(m, "fleet_cluster_state", cluster_name="lab43", state="BLIND") == 1
    assert value(m, "fleet_cluster_blind", cluster_name="lab43") == 1
    assert value(m, "fleet_group_verdict", cluster_name="lab43", group="stormy", verdict="BLIND") == 1
    assert value(m, "fleet_cluster_groups", cluster_name="lab43", verdict="BLIND") == 1
    assert not [v for lab, v in m["fleet_cluster_groups"] if lab["cluster_name"] == "lab43" and lab["verdict"] == "OK"]
    # stale: the newest collection is older than twice the interval
    record_status(data, "lab", ok={"observed_at": iso(NOW - dt.timedelta(hours=1)), "groups": 7, "problems": []})
    m = samples(scraped(root)[0])
    assert value(m, "fleet_cluster_state", cluster_name="lab", state="STALE") == 1
    assert value(m, "fleet_cluster_stale", cluster_name="lab") == 1
    assert value(m, "fleet_cluster_collection_age_seconds", cluster_name="lab") >= 3600
    assert value(m, "fleet_cluster_groups", cluster_name="lab", verdict="BLIND") == 5  # its OK groups
    assert value(m, "fleet_group_verdict", cluster_name="lab", group="stalled", source="kafka",
                 verdict="STALLED") == 1  # a flagged verdict stays
    # failing: the newest attempt did not complete
    record_status(data, "lab", failed={"at": iso(NOW), "error": "login failed"})
    m = samples(scraped(root)[0])
    assert value(m, "fleet_cluster_state", cluster_name="lab", state="FAILING") == 1
    assert value(m, "fleet_cluster_blind", cluster_name="lab") == 1


def test_no_secret_and_no_error_text_ever_appears(root, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_LAB_KAFKA", json.dumps({
        "conn_type": "kafka", "password": PASSWORD,
        "extra": {"bootstrap.servers": "127.0.0.1:1", "sasl.password": PASSWORD}}))
    data = DataRoot(str(root))
    record_status(data, "lab", failed={"at": iso(NOW), "error": f"SASL login failed (password {PASSWORD})"})
    record_status(data, "lab43", ok={"observed_at": iso(NOW), "groups": 1, "problems": [f"x {PASSWORD}"],
                                     "blind": [f"refused with sasl.password={PASSWORD}"], "blind_all": True})
    for accept in (None, "application/openmetrics-text; version=1.0.0"):
        body, _ = scraped(root, accept)
        assert PASSWORD.encode() not in body and b"SASL" not in body and b"refused" not in body
        assert b'fleet_cluster_state{cluster_name="lab",state="FAILING"} 1' in body


def test_a_part_that_cannot_be_read_says_so_and_the_rest_is_published(root):
    (root / "reports" / "coordinator" / "run1" / "partitions.jsonl").write_text("{not json\n")
    m = samples(scraped(root)[0])
    assert value(m, "fleet_metrics_source_up", source="coordinator") == 0
    assert value(m, "fleet_metrics_source_up", source="stuck") == 1
    assert value(m, "fleet_pending_approvals") == 2


def test_an_empty_data_root_is_a_valid_scrape(tmp_path):
    m = samples(scrape(FleetCollector(FleetView(tmp_path), FLEET))[0])
    assert value(m, "fleet_cluster_state", cluster_name="lab", state="NEVER") == 1
    assert value(m, "fleet_pending_approvals") == 0 and value(m, "fleet_pending_approval_oldest_age_seconds") == 0
    assert "fleet_group_verdict" not in m and "fleet_report_age_seconds" not in m


def test_the_partition_section_is_built_once_per_collection_and_follows_the_newest(root):
    """The per-partition series are encoded once per version of the read model: a second scrape
    reuses them, a newer collection (or stuck run) replaces them, in both formats."""
    from fleetkit.metrics import collector

    om = "application/openmetrics-text; version=1.0.0"
    first = samples(scraped(root)[0])
    section = collector._section
    assert value(first, "kafka_consumergroup_group_offset", group="stalled", topic="orders", partition="0") == 120
    assert samples(scraped(root, om)[0], openmetrics=True)["kafka_consumergroup_group_lag"]
    assert collector._section is section and len(section._encoded) == 2  # reused, once per format
    write_collection(DataRoot(str(root)), "lab", NOW, {"offsets_snapshots": [
        snapshot("stalled", "orders", 0, 165, 171, member=CONSUMER)]})
    for accept, om_ in ((None, False), (om, True)):
        m = samples(scraped(root, accept)[0], openmetrics=om_)
        assert value(m, "kafka_consumergroup_group_offset", group="stalled", topic="orders", partition="0") == 165
        assert not [lab for lab, _ in m["kafka_consumergroup_group_lag"] if lab["group"].startswith("ok-")]
    assert collector._section is not section


@pytest.mark.parametrize("accept", [None, "application/openmetrics-text; version=1.0.0"])
def test_a_compressed_scrape_is_one_gzip_stream_of_the_same_body(root, accept):
    """Asked with Accept-Encoding: gzip, the scrape is one gzip member (a reader that stops after the
    first member, as some do, still reads everything): the part compressed per scrape, then the
    cached compressed section, one trailer over both."""
    import gzip
    import zlib

    from fleetkit.metrics.exposition import crc32_combine

    at = NOW.timestamp()  # (the ages in both scrapes as of the same moment)
    plain, _ = scraped(root, accept, now=lambda: at)
    packed, _ = scrape(FleetCollector(FleetView(root), FLEET, now=lambda: at), accept, compress=True)
    one_member = zlib.decompressobj(16 + zlib.MAX_WBITS)
    assert one_member.decompress(packed) + one_member.flush() == plain and one_member.unused_data == b""
    assert gzip.decompress(packed) == plain
    assert samples(gzip.decompress(packed), openmetrics=accept is not None)["kafka_consumergroup_group_lag"]
    a, b = b"x" * 70_000 + b"head", b"tail" * 50_000
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_the_api_server_serves_the_partitions_before_while_it_builds_the_newest_ones(root):
    """With refresh_in_background (the api-server's scrape), a newer collection's partitions are
    built off the request path: the scrape that notices it gets the ones before, says so
    (fleet_metrics_partitions_behind 1), and a scrape after the build gets the new ones, encoded."""
    import time

    from fleetkit.metrics import collector

    def scrape_now():
        return samples(scrape(FleetCollector(FleetView(root), FLEET, refresh_in_background=True))[0])

    first = scrape_now()  # nothing built yet: built now
    assert value(first, "fleet_metrics_partitions_behind") == 0
    assert value(first, "kafka_consumergroup_group_offset", group="stalled", topic="orders", partition="0") == 120
    write_collection(DataRoot(str(root)), "lab", NOW, {"offsets_snapshots": [
        snapshot("stalled", "orders", 0, 165, 171, member=CONSUMER)]})
    noticed = scrape_now()
    assert value(noticed, "fleet_metrics_partitions_behind") == 1
    assert value(noticed, "kafka_consumergroup_group_offset", group="stalled", topic="orders", partition="0") == 120
    for _ in range(200):  # the build in its thread (a fraction of a second here)
        if not collector._building:
            break
        time.sleep(0.05)
    after = scrape_now()
    assert value(after, "fleet_metrics_partitions_behind") == 0
    assert value(after, "kafka_consumergroup_group_offset", group="stalled", topic="orders", partition="0") == 165
    assert collector._section._encoded  # encoded before it was asked for

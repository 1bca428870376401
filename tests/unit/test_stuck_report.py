"""The stuck report: rendering (escaped names, charts, expiry), alerts, the log notifier."""

import json

from fleetkit.stuck.report import StuckReport, behind, humanize, lag_chart

HOSTILE = "<script>alert(1)</script> [x](http://e) `t`"


def _write(tmp_path, findings, groups, series=()):
    for name, rows in (("findings", findings), ("groups", groups), ("series", series)):
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_report_renders_escaped_with_charts_and_expiry(tmp_path):
    f = [{"cluster": "c1", "group": HOSTILE, "topic": "t", "partition": 0, "status": "STOPPED", "lag": 40,
          "committed_offset": 10, "log_end_offset": 50, "reason": "No live member.", "expires_in_seconds": 3 * 3600 + 120,
          "offset_expires_at": "2026-01-02T00:00:00.000000Z", "stopped_since": "2026-01-01T00:58:00.000000Z",
          "window_end": "2026-01-01T01:00:30.000000Z", "confidence": "medium", "lag_seconds": 150.0,
          "lag_seconds_kind": "bounded"},
         {"cluster": "c1", "group": "ok", "topic": "t", "partition": 1, "status": "OK", "lag": 0,
          "committed_offset": 5, "log_end_offset": 5, "reason": "Caught up (lag 0)."}]
    g = [{"cluster": "c1", "group": HOSTILE, "status": "STOPPED", "total_lag": 40, "counts": {"STOPPED": 1},
          "rebalance_storm": True, "storm_kind": "poll_interval", "rebalances": 6, "rejoins": 3,
          "group_wide_stop": True, "storm_fix": "lower max.poll.records <b>now</b>"},
         {"cluster": "c1", "group": "old-rule", "status": "OK", "total_lag": 0, "counts": {"OK": 1},
          "rebalance_storm": True}]  # written before the storm fields: the state rule's words
    s = [{"cluster": "c1", "group": HOSTILE, "topic": "t", "partition": 0, "status": "STOPPED",
          "points": [{"t": "2026-01-01T00:58:00.000000Z", "lag": 10}, {"t": "2026-01-01T01:00:30.000000Z", "lag": 40}]}]
    _write(tmp_path, f, g, s)
    report = StuckReport.load(tmp_path, "2m")
    html_path, md_path = report.render(tmp_path)
    html = html_path.read_text()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "<svg" in html and "Committed offset expires in 3h 2m" in html
    md = md_path.read_text()
    assert "](http" not in md and "\\[x\\]" in md
    assert "since 2026\\-01\\-01 00\\:58\\:00 UTC (2m before the judgement) · confidence medium" in md
    assert "(2m before)<br>confidence medium" in html
    alerts = report.alerts()
    assert any(a.startswith("STOPPED c1 group") and "lag 40 records, at least 2m 30s behind (offset "
               "expires in 3h 2m) since 2026-01-01 00:58:00 UTC (medium "
               "confidence)" in a for a in alerts)
    assert f"REBALANCE_STORM c1 group {HOSTILE!r}: members evicted after max.poll.interval.ms while processing a " \
           "poll's records; 3 rejoin(s); 6 rebalance(s) in the window; each one stops the whole group. Fix: lower " \
           "max.poll.records <b>now</b>" in alerts
    assert any(a.startswith("REBALANCE_STORM c1 group 'old-rule': rebalancing in at least half") for a in alerts)
    assert len(alerts) == 3  # the OK partition does not alert
    assert "Rebalance storms (2)" in html and "lower max.poll.records &lt;b&gt;now&lt;/b&gt;" in html
    assert "each one stops the whole group" in md and "Fix: lower max\\.poll\\.records" in md


def test_helpers():
    assert lag_chart([{"t": "2026-01-01T00:00:00Z", "lag": 1}]) == ""
    svg = lag_chart([{"t": "2026-01-01T00:00:00.000000Z", "lag": 0}, {"t": "2026-01-01T00:01:00Z", "lag": 5},
                     {"t": "2026-01-01T00:01:30Z", "lag": None}, {"t": "2026-01-01T00:02:00Z", "lag": 3578}])
    assert svg.startswith("<svg") and "lag from 0 to 3,578 records between 00:00:00 and 00:02:00 UTC" in svg
    assert ">3,578</text>" in svg and ">records</text>" in svg and "time (UTC), 2m shown" in svg
    # points are placed by time: the 1-minute point sits in the middle of the x axis
    assert " 172.0," in svg
    assert behind({"lag": 3578, "lag_seconds": 420.0, "lag_seconds_kind": "interpolated",
                   "lag_seconds_error": 10.0}) == "3,578 records, about 7 min behind"
    assert behind({"lag": 1, "lag_seconds": 7500, "lag_seconds_kind": "bounded"}) == "1 record, at least 2h 5m behind"
    assert behind({"lag": 40}) == "40 records" and behind({"lag": None}) == "lag unknown"
    assert humanize(90061) == "1d 1h" and humanize(59) == "0m" and humanize(None) == "unknown"


def test_log_notifier_logs_every_line(caplog):
    from fleet_airflow.notifiers import FleetAlertNotifier

    n = FleetAlertNotifier(title="2 stuck", lines=["STALLED a", "STOPPED b"])
    n.notify({})
    assert n.sent == ["log"]


def test_groups_nothing_could_be_judged_of_are_listed_not_judged_never_ok(tmp_path):
    f = [{"cluster": "c1", "group": HOSTILE, "topic": "t", "partition": p, "status": "INSUFFICIENT_DATA", "lag": 3,
          "committed_offset": 1, "log_end_offset": 4, "reason": "Only 1 snapshot(s)."} for p in range(2)]
    g = [{"cluster": "c1", "group": HOSTILE, "status": "INSUFFICIENT_DATA", "total_lag": 6,
          "counts": {"INSUFFICIENT_DATA": 2}, "judged_from": "2026-01-01T01:07:30.000000Z"}]
    _write(tmp_path, f, g)
    html_path, md_path = StuckReport.load(tmp_path, "15m").render(tmp_path)
    md, html = md_path.read_text(), html_path.read_text()
    assert "## Groups not judged yet (1): too little history, never OK" in md
    assert "enough history from about 2026\\-01\\-01 01\\:07\\:30 UTC" in md
    assert "Nothing stuck among the groups judged." in md and "Nothing stuck among the groups judged." in html
    assert "<td>2026-01-01 01:07:30 UTC</td>" in html and "<script>" not in html


def test_a_run_with_too_little_history_does_not_replace_a_stuck_verdict(tmp_path):
    from fleetkit.stuck.report import carry_judged

    def finding(group, status, at, source=None):
        return {"cluster": "c1", "group": group, "topic": "t", "partition": 0, "status": status, "lag": 5,
                "committed_offset": 1, "log_end_offset": 6, "reason": "why", "window_end": at,
                **({"source": source} if source else {})}

    def group(name, status, **extra):
        return {"cluster": "c1", "group": name, "status": status, **extra}

    t1, t2 = "2026-01-01T00:00:00.000000Z", "2026-01-01T00:05:00.000000Z"
    latest = {"groups.jsonl": [group("stuck", "STALLED"), group("fine", "OK"), group("gone", "STOPPED"),
                               group("stuck", "STOPPED", source="zookeeper")],
              "findings.jsonl": [finding("stuck", "STALLED", t1), finding("fine", "OK", t1),
                                 finding("gone", "STOPPED", t1), finding("stuck", "STOPPED", t1, "zookeeper")],
              "series.jsonl": [{"cluster": "c1", "group": "stuck", "topic": "t", "partition": 0, "points": [1]}]}
    run = {"groups.jsonl": [group("stuck", "INSUFFICIENT_DATA", judged_from=t2), group("fine", "INSUFFICIENT_DATA"),
                            group("gone", "OK"), group("stuck", "OK", source="zookeeper"), group("new", "INSUFFICIENT_DATA")],
           "findings.jsonl": [finding("stuck", "INSUFFICIENT_DATA", t2), finding("fine", "INSUFFICIENT_DATA", t2),
                              finding("gone", "OK", t2), finding("stuck", "OK", t2, "zookeeper"),
                              finding("new", "INSUFFICIENT_DATA", t2)],
           "series.jsonl": []}
    rows, carried = carry_judged(latest, run)
    # the stuck group keeps its verdict, marked; the OK one is not carried (never OK unjudged); a
    # group judged again (gone: OK now, the ZooKeeper group of the same name) takes the new verdict
    assert carried == [("c1", "kafka", "stuck")]
    by = {(g["group"], g.get("source")): g for g in rows["groups.jsonl"]}
    assert by[("stuck", None)] == group("stuck", "STALLED", carried_as_of=t1, judged_from=t2)
    assert by[("fine", None)]["status"] == "INSUFFICIENT_DATA" and by[("gone", None)]["status"] == "OK"
    assert by[("stuck", "zookeeper")]["status"] == "OK" and by[("new", None)]["status"] == "INSUFFICIENT_DATA"
    stuck = [f for f in rows["findings.jsonl"] if f["group"] == "stuck" and not f.get("source")]
    assert stuck == [dict(finding("stuck", "STALLED", t1), carried_as_of=t1)]
    assert rows["series.jsonl"] == latest["series.jsonl"]
    # carried again by the next run: still the first judgement's time
    again, _ = carry_judged(rows, run)
    assert [g for g in again["groups.jsonl"] if g["group"] == "stuck" and not g.get("source")][0]["carried_as_of"] == t1
    # nothing to carry: the run's rows as they are
    assert carry_judged({}, run) == (run, [])
    _write(tmp_path, rows["findings.jsonl"], rows["groups.jsonl"])
    _, md_path = StuckReport.load(tmp_path, "15m").render(tmp_path)
    assert "**STALLED** (judged 2026\\-01\\-01T00\\:00\\:00\\.000000Z; not judged since) c1" in md_path.read_text()

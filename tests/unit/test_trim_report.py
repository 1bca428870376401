"""fleetkit.trim.report: the offsets health report of a run folder, its log and alert lines."""

from __future__ import annotations

import json

from fleetkit.trim.report import write_report


def _health(cluster: str, verdict: str, reason: str) -> dict:
    return {"cluster": cluster, "broker": 1, "partition": 7, "verdict": verdict, "reason": reason,
            "records": 10, "live_keys": 2, "disk_bytes": 2048, "largest_segment_messages": 10,
            "keys_per_pass": 78642, "fix": "log.cleaner.dedupe.buffer.size=134217728"}


def test_unhealthy_replicas_are_reported_logged_and_alerted(tmp_path):
    evil = "prod\x1b[31m"
    rows = [_health(evil, "BLOATED", "duplicates x40\nfix it"), _health("lab", "HEALTHY", "ok")]
    (tmp_path / "health.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    rep = write_report(tmp_path)
    assert [h["verdict"] for h in rep.unhealthy] == ["BLOATED"] and len(rep.health) == 2
    assert rep.plans == []  # no trim_plan.json: no plan
    md = rep.path.read_text()
    assert rep.path == tmp_path / "offsets_health.md" and "BLOATED" in md
    assert "\x1b" not in "".join(rep.log_lines())  # a cluster's name is hostile input
    assert rep.alert_lines() == [f"BLOATED {evil} broker 1 partition 7: duplicates x40\nfix it"]


def test_the_trim_plans_are_read_beside_the_health(tmp_path):
    (tmp_path / "health.jsonl").write_text(json.dumps(_health("lab", "HEALTHY", "ok")) + "\n")
    (tmp_path / "trim_plan.json").write_text("[]")
    rep = write_report(tmp_path)
    assert rep.unhealthy == [] and rep.plans == []
    assert "No plan: every partition is healthy." in rep.path.read_text()
    plan = {"cluster": "lab", "partitions": [{"partition": 7, "replicas": [{"broker": 1, "quarantine": [{}, {}],
                                                                            "bytes_freed": 4096}],
                                              "recommit": [{}], "active_groups": [], "group_metadata_lost": []}]}
    (tmp_path / "trim_plan.json").write_text(json.dumps([plan]))
    md = write_report(tmp_path).path.read_text()
    assert "lab partition 7: broker 1 quarantines 2 segment(s) (4096 bytes)" in md and "No plan" not in md

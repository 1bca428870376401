"""Trim execution pieces that need no broker: quarantine with checksums, restore, preconditions,
the offsets comparison, the gate plan (followers first, leader last), the health verdicts."""

import json
from pathlib import Path

import pytest

from fleetkit.trim import execute as trim
from fleetkit.core.fleet import parse_fleet
from fleetkit.trim.rules import HealthFacts, verdict
from fleetkit.clients.broker_files import LocalBrokerFiles, parse_checkpoint

FLEET = parse_fleet("""
version: 1
clusters:
  - {name: c1, kafka_conn_id: k, kafka_version: "0.9.0.1", cleaner: {dedupe_buffer_size: 2097152}}
""", path="f.yaml")


def make_partition(log_dir: Path, partition: int, bases: list[int]) -> None:
    folder = log_dir / f"__consumer_offsets-{partition}"
    folder.mkdir(parents=True)
    for b in bases:
        (folder / f"{b:020d}.log").write_bytes(b"L" * (100 + b))
        (folder / f"{b:020d}.index").write_bytes(b"I" * 10)
    (log_dir / "cleaner-offset-checkpoint").write_text(f"0\n1\n__consumer_offsets {partition} 0\n")


def test_inventory_quarantine_and_restore(tmp_path):
    make_partition(tmp_path / "d", 3, [0, 50, 90])
    segs = LocalBrokerFiles([str(tmp_path / "d")]).segments("__consumer_offsets", 3)
    assert [(s.base_offset, s.size_bytes, s.is_active) for s in segs] == [(0, 100, False), (50, 150, False),
                                                                          (90, 190, True)]
    assert LocalBrokerFiles([str(tmp_path / "d")]).cleaner_checkpoints() == {(str(tmp_path / "d"), "__consumer_offsets", 3): 0}
    planned = [{"base_offset": 0, "size_bytes": 100}]
    assert trim.check_segments(str(tmp_path / "d"), 3, planned) == []
    assert "changed size" in trim.check_segments(str(tmp_path / "d"), 3, [{"base_offset": 0, "size_bytes": 99}])[0]
    manifest = trim.quarantine(str(tmp_path / "d"), 3, planned, tmp_path / "q", "c1/b0/p3/run")
    assert sorted(Path(e["quarantined"]).name for e in manifest["files"]) == \
        ["00000000000000000000.index", "00000000000000000000.log"]
    assert not (tmp_path / "d" / "__consumer_offsets-3" / "00000000000000000000.log").exists()
    assert json.loads((tmp_path / "q" / "c1/b0/p3/run" / "manifest.json").read_text())["files"]
    assert "no longer exists" in trim.check_segments(str(tmp_path / "d"), 3, planned)[0]
    restored = trim.restore(manifest)
    assert len(restored) == 2 and (tmp_path / "d" / "__consumer_offsets-3" / "00000000000000000000.log").read_bytes() == b"L" * 100


def test_restore_refuses_a_changed_file(tmp_path):
    make_partition(tmp_path / "d", 1, [0, 10, 20])
    manifest = trim.quarantine(str(tmp_path / "d"), 1, [{"base_offset": 0, "size_bytes": 100}], tmp_path / "q", "x")
    Path(manifest["files"][0]["quarantined"]).write_bytes(b"tampered")
    with pytest.raises(trim.TrimError, match="does not match its recorded checksum"):
        trim.restore(manifest)


def test_checkpoint_parsing():
    assert parse_checkpoint("0\n2\n__consumer_offsets 3 17\nmy topic 0 5\n") == {("__consumer_offsets", 3): 17,
                                                                                  ("my topic", 0): 5}
    with pytest.raises(ValueError, match="unknown checkpoint version"):
        parse_checkpoint("9\n0\n")


def test_compare_offsets():
    before = {"idle": {("t", 0): 5}, "live": {("t", 0): 7}, "gone": {("t", 1): 3}}
    ok_after = {"idle": {("t", 0): 5}, "live": {("t", 0): 9}, "gone": {("t", 1): 3}}
    assert trim.compare_offsets(before, ok_after, {"idle", "gone"}) == []
    bad = trim.compare_offsets(before, {"idle": {("t", 0): 5}, "live": {("t", 0): 6}, "gone": {}}, {"idle", "gone"})
    assert bad == ["group 'live' t-0: 7 before the trim, 6 after", "group 'gone' t-1: 3 before the trim, None after"]


def test_gate_plan_orders_followers_first_and_leader_last():
    tp = {"cluster": "c1", "partitions": [{"partition": 3, "recommit": [
        {"group": "g1", "topic": "t", "partition": 0, "offset": 5, "metadata": "", "record_offset": 1}],
        "active_groups": [], "group_metadata_lost": [{"group": "g2", "generation": 1, "record_offset": 2}],
        "groups": ["g1"],
        "replicas": [{"broker": b, "log_dir": f"/d{b}", "quarantine": [{"base_offset": 0, "size_bytes": 10}],
                      "kept": [], "bytes_freed": 10, "verdict": "OVER_CAPACITY", "reason": "r",
                      "fix": {"log.cleaner.dedupe.buffer.size": 8388608}} for b in (0, 1, 2)]}]}
    plan = trim.gate_plan(FLEET.cluster("c1"), tp, leaders={3: 1}, isr={3: [0, 1, 2]}, quarantine_root="/q")
    assert plan["details"]["order"] == [0, 2, 1]  # the leader (1) last
    assert any(c["after"] == "re-committed 5" for c in plan["changes"])
    assert any(c["target"] == "broker 1 log.cleaner.dedupe.buffer.size" and c["after"] == "8388608"
               for c in plan["changes"])
    assert plan["details"]["bytes_freed"] == 30
    problems = trim.check(plan, {3: [0, 2]}, {"g1": "Stable"})
    assert any("broker 1 is not in the ISR" in p for p in problems)
    assert any("group 'g1' is Stable now" in p for p in problems)


def _facts(**kw):
    base = dict(records=1000, live_keys=1000, tombstones=0, record_bytes=68000, live_bytes=68000, disk_bytes=70000,
                segments=1, largest_segment_messages=1000, checkpoint_first=0, checkpoint_last=1000,
                dirty_bytes_first=0, dirty_bytes_last=0, observations=2)
    base.update(kw)
    return HealthFacts(**base)


def test_health_verdicts():
    assert verdict(_facts(), "0.9.0.1", 2 * 2**20)[0] == "HEALTHY"
    v, reason, fix = verdict(_facts(largest_segment_messages=1_550_080), "0.9.0.1", 2 * 2**20)
    assert v == "OVER_CAPACITY" and "78,642" in reason and fix["keys_per_pass_after"] >= 1_550_080
    # fixed in 0.10.1: a big segment is cleaned in several passes
    assert verdict(_facts(largest_segment_messages=1_550_080), "0.10.1.0", 2 * 2**20)[0] == "HEALTHY"
    assert verdict(_facts(checkpoint_first=5, checkpoint_last=5, dirty_bytes_first=10, dirty_bytes_last=99),
                   "2.8.0", 2 * 2**20)[0] == "CLEANER_STALLED"
    assert verdict(_facts(disk_bytes=500 * 2**20, live_bytes=2**20), "2.8.0", 128 * 2**20)[0] == "BLOATED"
    assert verdict(_facts(disk_bytes=500 * 2**20, live_bytes=2**20), "2.8.0", 128 * 2**20,
                   min_bloat_bytes=2**30)[0] == "HEALTHY"

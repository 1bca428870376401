"""Trim execution pieces that need no broker: quarantine with checksums, restore, preconditions,
the offsets comparison, the gate plan (followers first, leader last), the health verdicts, and the
broker control the fleet file describes (real commands, no shell)."""

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fleetkit.core.action import ClusterContext
from fleetkit.clients import broker_control
from fleetkit.trim import execute as trim
from fleetkit.trim import plan as trim_plan
from fleetkit.trim import verify as trim_verify
from fleetkit.core.fleet import load_fleet, parse_fleet
from fleetkit.trim import rules as trim_rules
from fleetkit.trim.rules import HealthFacts, verdict
from fleetkit.clients.broker_files import LocalBrokerFiles, parse_checkpoint
from fleetkit.core.settings import safe_component

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


def two_partition_plan(tmp_path: Path, run_id: str = "manual__2026-01-01T00:00:00+00:00") -> dict:
    """A gate plan quarantining segment 0 of __consumer_offsets-3 and -4 on broker 0 (same file
    names in both partitions)."""
    for p in (3, 4):
        make_partition(tmp_path / "d", p, [0, 50, 90]) if p == 3 else None
    folder = tmp_path / "d" / "__consumer_offsets-4"
    folder.mkdir(parents=True)
    for b in (0, 50, 90):
        (folder / f"{b:020d}.log").write_bytes(b"M" * (200 + b))
        (folder / f"{b:020d}.index").write_bytes(b"J" * 10)
    tp = {"cluster": "c1", "partitions": [
        {"partition": p, "recommit": [], "active_groups": [], "group_metadata_lost": [], "groups": [],
         "replicas": [{"broker": 0, "log_dir": str(tmp_path / "d"), "bytes_freed": 1, "kept": [],
                       "quarantine": [{"base_offset": 0, "size_bytes": 100 if p == 3 else 200}]}]}
        for p in (3, 4)]}
    plan = trim_plan.gate_plan(FLEET.cluster("c1"), tp, leaders={3: 0, 4: 0}, isr={3: [0], 4: [0]},
                               quarantine_root=str(tmp_path / "q"))
    plan["run_id"] = run_id
    return plan


def run_moves(plan: dict, journal_file: Path) -> list[str]:
    from fleetkit.core.journal import Journal, read_journal

    entries = read_journal(journal_file)
    with Journal(journal_file) as j:
        return [trim.apply_move(j, m, entries.get(m["seq"])) for m in trim.file_moves(plan)]


def test_inventory_and_preconditions(tmp_path):
    make_partition(tmp_path / "d", 3, [0, 50, 90])
    segs = LocalBrokerFiles([str(tmp_path / "d")]).segments("__consumer_offsets", 3)
    assert [(s.base_offset, s.size_bytes, s.is_active) for s in segs] == [(0, 100, False), (50, 150, False),
                                                                          (90, 190, True)]
    assert LocalBrokerFiles([str(tmp_path / "d")]).cleaner_checkpoints() == {(str(tmp_path / "d"), "__consumer_offsets", 3): 0}
    planned = [{"base_offset": 0, "size_bytes": 100}]
    assert trim.check_segments(str(tmp_path / "d"), 3, planned) == []
    assert "changed size" in trim.check_segments(str(tmp_path / "d"), 3, [{"base_offset": 0, "size_bytes": 99}])[0]
    (tmp_path / "d" / "__consumer_offsets-3" / "00000000000000000000.log").unlink()
    assert "no longer exists" in trim.check_segments(str(tmp_path / "d"), 3, planned)[0]


def test_same_named_segments_of_two_partitions_both_land_journaled(tmp_path):
    """Segment 0 of two partitions: each file lands in its partition's own quarantine folder; the
    journal has, per file, an intent (source, destination, size, sha256) before its outcome."""
    from fleetkit.core.journal import read_journal

    plan = two_partition_plan(tmp_path)
    before = {p: {f.name: f.read_bytes() for f in (tmp_path / "d" / f"__consumer_offsets-{p}").iterdir()}
              for p in (3, 4)}
    journal_file = tmp_path / "journal.jsonl"
    assert run_moves(plan, journal_file) == ["moved", "absent", "moved"] * 2  # .index, (.timeindex), .log
    run_root = tmp_path / "q" / safe_component("manual__2026-01-01T00:00:00+00:00") / "broker-0"
    for p in (3, 4):
        q = run_root / f"__consumer_offsets-{p}"
        assert sorted(f.name for f in q.iterdir()) == ["00000000000000000000.index", "00000000000000000000.log"]
        for name in ("00000000000000000000.index", "00000000000000000000.log"):
            assert (q / name).read_bytes() == before[p][name]
            assert not (tmp_path / "d" / f"__consumer_offsets-{p}" / name).exists()
    lines = [json.loads(ln) for ln in journal_file.read_text().splitlines()]
    assert [(ln["seq"], ln["status"]) for ln in lines] == [(0, "intent"), (0, "done"), (2, "intent"), (2, "done"),
                                                          (3, "intent"), (3, "done"), (5, "intent"), (5, "done")]
    log4 = read_journal(journal_file)[5]
    assert log4["source"] == str(tmp_path / "d" / "__consumer_offsets-4" / "00000000000000000000.log")
    assert log4["destination"] == str(run_root / "__consumer_offsets-4" / "00000000000000000000.log")
    assert log4["size"] == 200 and log4["sha256"] == hashlib.sha256(b"M" * 200).hexdigest()
    # run again (a resumed run): nothing moves, every quarantined file is checked against its checksum
    assert run_moves(plan, journal_file) == ["already", "absent", "already"] * 2
    (run_root / "__consumer_offsets-4" / "00000000000000000000.log").write_bytes(b"tampered")
    with pytest.raises(trim.TrimError, match="has SHA-256 .* the journal recorded"):
        run_moves(plan, journal_file)
    files, problems = trim.restorable(plan, read_journal(journal_file))
    assert len(files) == 4 and len(problems) == 1 and "__consumer_offsets-4/00000000000000000000.log" in problems[0]


def test_the_shell_runbook_puts_each_partition_in_its_own_folder(tmp_path):
    """The generated runbook, run by bash: segment 0 of both partitions lands, checksums verified."""
    plan = two_partition_plan(tmp_path)
    before = {p: (tmp_path / "d" / f"__consumer_offsets-{p}" / "00000000000000000000.log").read_bytes() for p in (3, 4)}
    script = tmp_path / "runbook-broker-0.sh"
    script.write_text(trim_plan.runbooks(plan, plan["run_id"])[0])
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    run_root = tmp_path / "q" / safe_component("manual__2026-01-01T00:00:00+00:00") / "broker-0"
    for p in (3, 4):
        assert (run_root / f"__consumer_offsets-{p}" / "00000000000000000000.log").read_bytes() == before[p]
        assert (run_root / f"__consumer_offsets-{p}" / "00000000000000000000.index").exists()
        assert not (tmp_path / "d" / f"__consumer_offsets-{p}" / "00000000000000000000.log").exists()
    # run twice: the files are gone from the log dir, so the runbook stops at the first one
    assert subprocess.run(["bash", str(script)], capture_output=True, text=True).returncode != 0


def test_a_second_file_of_the_same_name_stops_the_shell_runbook(tmp_path):
    plan = two_partition_plan(tmp_path)
    q = tmp_path / "q" / safe_component("manual__2026-01-01T00:00:00+00:00") / "broker-0" / "__consumer_offsets-4"
    q.mkdir(parents=True)
    (q / "00000000000000000000.index").write_bytes(b"already here")
    script = tmp_path / "runbook-broker-0.sh"
    script.write_text(trim_plan.runbooks(plan, plan["run_id"])[0])
    out = subprocess.run(["bash", str(script)], capture_output=True, text=True)
    assert out.returncode != 0 and "not moved" in out.stderr
    assert (tmp_path / "d" / "__consumer_offsets-4" / "00000000000000000000.index").read_bytes() == b"J" * 10
    assert (q / "00000000000000000000.index").read_bytes() == b"already here"


def other_filesystem(tmp_path: Path) -> Path:
    """/dev/shm is a tmpfs here: a real second filesystem, so rename fails with EXDEV."""
    shm = Path("/dev/shm") / f"fleet-trim-test-{os.getpid()}-{tmp_path.name}"
    shm.mkdir(parents=True)
    assert os.stat(shm).st_dev != os.stat(tmp_path).st_dev
    return shm


def test_cross_filesystem_move_verifies_the_copy_before_unlinking(tmp_path):
    shm = other_filesystem(tmp_path)
    try:
        src = tmp_path / "00000000000000000000.log"
        src.write_bytes(b"segment bytes" * 1000)
        digest = hashlib.sha256(src.read_bytes()).hexdigest()
        with pytest.raises(trim.TrimError, match="copy removed, the source is untouched"):
            trim.move_verified(src, shm / "a" / src.name, "0" * 64)  # a copy that does not match
        assert src.exists() and not list((shm / "a").iterdir())
        trim.move_verified(src, shm / "a" / src.name, digest)
        assert not src.exists() and hashlib.sha256((shm / "a" / src.name).read_bytes()).hexdigest() == digest
        with pytest.raises(trim.TrimError, match="refusing to overwrite"):
            src.write_bytes(b"other")
            trim.move_verified(src, shm / "a" / src.name, hashlib.sha256(b"other").hexdigest())
    finally:
        shutil.rmtree(shm)


def test_a_move_killed_halfway_is_settled_from_the_journal(tmp_path):
    """Killed after the intent: renamed but no outcome (settled, checksum checked), or a
    cross-filesystem copy in place with the source still there (source unlinked after the check)."""
    from fleetkit.core.journal import Journal, read_journal

    plan = two_partition_plan(tmp_path)
    moves = trim.file_moves(plan)
    journal_file = tmp_path / "journal.jsonl"
    with Journal(journal_file) as j:
        for m in (moves[0], moves[2]):
            src, dst = Path(m["source"]), Path(m["destination"])
            j.intent(m["seq"], source=m["source"], destination=m["destination"], size=src.stat().st_size,
                     sha256=hashlib.sha256(src.read_bytes()).hexdigest())
            dst.parent.mkdir(parents=True, exist_ok=True)
            if m is moves[0]:
                os.rename(src, dst)  # the rename happened, the outcome was never written
            else:
                shutil.copyfile(src, dst)  # the verified copy is in place, the source not yet unlinked
    entries = read_journal(journal_file)
    assert trim.settle(moves[0], entries[0]) == "done" and trim.settle(moves[2], entries[2]) == "copied"
    with Journal(journal_file) as j:
        assert trim.apply_move(j, moves[0], entries[0]) == "already"
        assert trim.apply_move(j, moves[2], entries[2]) == "moved"
    entries = read_journal(journal_file)
    assert entries[0]["status"] == entries[2]["status"] == "done"
    assert not Path(moves[2]["source"]).exists() and Path(moves[2]["destination"]).exists()
    # a quarantined file nobody journaled is never overwritten nor adopted
    stray = Path(moves[3]["destination"])
    stray.parent.mkdir(parents=True, exist_ok=True)
    stray.write_bytes(b"stray")
    with pytest.raises(trim.TrimError, match="not from this run's journal"):
        trim.settle(moves[3], None)


def test_teardown_puts_back_the_index_of_a_segment_whose_log_did_not_move(tmp_path):
    """Killed after a segment's .index moved and before its .log: before the broker starts, the
    .index goes back (Kafka would otherwise rebuild one beside the quarantined original); a
    resumed run then moves the segment again. A segment moved whole stays in the quarantine."""
    from fleetkit.core.journal import Journal, read_journal

    plan = two_partition_plan(tmp_path)
    moves = trim.file_moves(plan)
    journal_file = tmp_path / "journal.jsonl"
    with Journal(journal_file) as j:
        for m in moves[:4]:  # partition 3's segment whole, partition 4's .index
            trim.apply_move(j, m, None)
    segs = trim._segments_of(moves)
    with Journal(journal_file) as j:
        assert trim._repair_segment(j, read_journal(journal_file), segs[(0, 3, 0)]) == []
        did = trim._repair_segment(j, read_journal(journal_file), segs[(0, 4, 0)])
    assert len(did) == 1 and "__consumer_offsets-4/00000000000000000000.index back" in did[0]
    assert (tmp_path / "d" / "__consumer_offsets-4" / "00000000000000000000.index").read_bytes() == b"J" * 10
    assert not Path(moves[3]["destination"]).exists()
    assert not (tmp_path / "d" / "__consumer_offsets-3" / "00000000000000000000.log").exists()
    entries = read_journal(journal_file)
    assert entries[3]["status"] == "moved_back" and entries["3 back"]["status"] == "done"
    assert run_moves(plan, journal_file) == ["already", "absent", "already", "moved", "absent", "moved"]


def test_resumed_preconditions_only_check_what_is_left(tmp_path):
    from fleetkit.core.journal import Journal, read_journal

    plan = two_partition_plan(tmp_path)
    journal_file = tmp_path / "journal.jsonl"
    with Journal(journal_file) as j:
        for m in trim.file_moves(plan)[:3]:  # partition 3's segment 0 moved
            trim.apply_move(j, m, None)
    assert trim.check(plan, {3: [0], 4: [0]}, {}, read_journal(journal_file)) == []
    assert "no longer exists" in trim.check(plan, {3: [0], 4: [0]}, {})[0]  # a fresh run would refuse
    (tmp_path / "d" / "__consumer_offsets-4" / "00000000000000000000.log").write_bytes(b"grown" * 100)
    assert "changed size" in trim.check(plan, {3: [0], 4: [0]}, {}, read_journal(journal_file))[0]
    assert "broker 0 is not in the ISR" in trim.check(plan, {3: [0], 4: []}, {}, read_journal(journal_file))[-1]


def test_the_trim_moves_every_rolled_segment_but_the_newest_and_never_the_active_one():
    q = trim_rules.quarantined
    assert q([(0, False), (100, False), (200, False), (300, True)]) == {0, 100}
    assert q([(300, True), (0, False), (200, False), (100, False)]) == {0, 100}  # any order
    assert q([(0, False), (100, True)]) == set()  # one rolled segment: kept
    assert q([(0, True)]) == set() and q([]) == set()
    # an active segment below a rolled one (a log dir copied by hand) is still never moved
    assert q([(500, True), (0, False), (700, False), (900, False)]) == {0, 700}


def test_a_groups_state_in_the_plan():
    g = trim_rules.group_state
    assert g("PreparingRebalance", False) == "PreparingRebalance"  # the collected state wins
    assert g(None, True) == "Stable"  # members in its newest group-metadata record
    assert g(None, False) == "Empty" and g(None, None) == "Empty" and g("", None) == "Empty"
    assert [s for s in ("Empty", "Dead", "Stable", "PreparingRebalance", None) if trim_rules.may_recommit(s)] == \
        ["Empty", "Dead"]


def test_recommit_never_rewinds():
    d = trim_rules.recommit_decision
    assert d(5, 5, None, "Empty")[0] == "commit"  # the trim removed it: put back
    assert d(5, 5, 5, "Empty")[0] == "already"
    assert d(5, 5, 9, "Empty") == ("skip", "committed offset moved after the plan was read (plan 5, now 9): "
                                           "not set back")
    assert d(5, 9, None, "Empty")[0] == "skip"  # moved before execute started: never set back to 5
    assert d(5, None, None, "Dead")[0] == "skip"
    assert d(5, 5, None, "HasMembers:Stable")[0] == "skip"


def test_recommit_carries_the_metadata_a_librdkafka_client_wrote_byte_for_byte():
    m = trim_rules.recommit_metadata
    assert m(None) == (None, None) and m("") == (None, None)
    assert m("m1\x00") == ("m1", None)  # librdkafka adds the NUL back: stored exactly as before
    assert m("\x00") == ("", None)  # a librdkafka client's empty string
    assert m("{\"é\": 1}\x00") == ('{"é": 1}', None)
    # a Java client's (Kafka Streams' base64 timestamps): a NUL more could break its decoding
    for stored in ("AQAAAY0", "a\x00b\x00", "a\x00b"):
        carried, note = m(stored)
        assert carried is None and "not carried" in note and "trailing NUL" in note, stored


def test_checkpoint_parsing():
    assert parse_checkpoint("0\n2\n__consumer_offsets 3 17\nmy topic 0 5\n") == {("__consumer_offsets", 3): 17,
                                                                                  ("my topic", 0): 5}
    with pytest.raises(ValueError, match="unknown checkpoint version"):
        parse_checkpoint("9\n0\n")


def test_compare_offsets():
    before = {"idle": {("t", 0): 5}, "live": {("t", 0): 7}, "gone": {("t", 1): 3}}
    ok_after = {"idle": {("t", 0): 5}, "live": {("t", 0): 9}, "gone": {("t", 1): 3}}
    assert trim_verify.compare_offsets(before, ok_after, {"idle", "gone"}) == []
    bad = trim_verify.compare_offsets(before, {"idle": {("t", 0): 5}, "live": {("t", 0): 6}, "gone": {}}, {"idle", "gone"})
    assert bad == ["group 'live' t-0: 7 before the trim, 6 after", "group 'gone' t-1: 3 before the trim, None after"]


def test_gate_plan_orders_followers_first_and_leader_last():
    tp = {"cluster": "c1", "partitions": [{"partition": 3, "recommit": [
        {"group": "g1", "topic": "t", "partition": 0, "offset": 5, "metadata": "", "record_offset": 1}],
        "active_groups": [], "group_metadata_lost": [{"group": "g2", "generation": 1, "record_offset": 2}],
        "groups": ["g1"],
        "replicas": [{"broker": b, "log_dir": f"/d{b}", "quarantine": [{"base_offset": 0, "size_bytes": 10}],
                      "kept": [], "bytes_freed": 10, "verdict": "OVER_CAPACITY", "reason": "r",
                      "fix": {"log.cleaner.dedupe.buffer.size": 8388608}} for b in (0, 1, 2)]}]}
    plan = trim_plan.gate_plan(FLEET.cluster("c1"), tp, leaders={3: 1}, isr={3: [0, 1, 2]}, quarantine_root="/q")
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


# -- broker control from the fleet file ----------------------------------------------------------
RECORDER = "import json, sys; open(sys.argv[1], 'a').write(json.dumps(sys.argv[2:]) + chr(10))"


def control_cluster(tmp_path: Path, **control):
    """A cluster whose broker_control runs `python -c RECORDER <file> ...` (argv appended to calls.jsonl)."""
    calls = tmp_path / "calls.jsonl"
    rec = [sys.executable, "-c", RECORDER, str(calls)]
    doc = {"version": 1, "clusters": [{"name": "c1", "kafka_conn_id": "k", "broker_control": {
        "stop": rec + ["stop", "{broker}"], "start": rec + ["start", "--id={broker}"],
        "set_config": rec + ["config", "{broker}", "{key}={value}", "{{literal}}"], **control}}]}
    fleet_file = tmp_path / "fleet" / "fleet.yaml"
    fleet_file.parent.mkdir(parents=True, exist_ok=True)
    fleet_file.write_text(yaml.safe_dump(doc))
    return load_fleet(fleet_file).cluster("c1")


def recorded(tmp_path: Path) -> list[list[str]]:
    f = tmp_path / "calls.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def test_command_broker_control_fills_each_argv_element_without_a_shell(tmp_path):
    control = broker_control.control_for(control_cluster(tmp_path))
    assert isinstance(control, broker_control.CommandBrokerControl)
    control.stop(2)
    control.start(2)
    hostile_key = "log.cleaner dedupe; touch HACKED"
    hostile_value = "1 2; touch HACKED && echo $(id) `id` > HACKED {broker} \\ \"'"
    control.set_config(0, {hostile_key: hostile_value, "log.cleaner.threads": 2})
    assert recorded(tmp_path) == [
        ["stop", "2"],
        ["start", "--id=2"],
        ["config", "0", f"{hostile_key}={hostile_value}", "{literal}"],  # one argument, {broker} not expanded
        ["config", "0", "log.cleaner.threads=2", "{literal}"],
    ]
    # nothing was interpreted by a shell: no file made by the `;`, `&&` or the redirection
    assert not list(tmp_path.rglob("HACKED")) and not (Path.cwd() / "HACKED").exists()


def test_commands_run_in_the_fleet_file_folder(tmp_path):
    """Relative paths in broker_control (the program too) resolve against the fleet file's folder."""
    tools = tmp_path / "tools"
    tools.mkdir()
    ctl = tools / "ctl"
    ctl.write_text(f"#!{sys.executable}\nimport os, sys\nopen('out.txt', 'w').write(os.getcwd() + ' ' + sys.argv[1])\n")
    ctl.chmod(0o755)
    cluster = control_cluster(tmp_path, stop=["../tools/ctl", "{broker}"])
    broker_control.control_for(cluster).stop(7)
    assert (tmp_path / "fleet" / "out.txt").read_text() == f"{tmp_path / 'fleet'} 7"


def test_command_broker_control_failures_name_the_command(tmp_path):
    fail = [sys.executable, "-c", "import sys; sys.stderr.write('no such broker'); sys.exit(3)", "{broker}"]
    control = broker_control.control_for(control_cluster(tmp_path, stop=fail))
    with pytest.raises(broker_control.BrokerControlError, match=r"cluster 'c1' broker_control.stop failed with exit code 3: .*\n"
                                             r"no such broker"):
        control.stop(1)
    control = broker_control.control_for(control_cluster(tmp_path, start=[str(tmp_path / "missing-program"), "{broker}"]))
    with pytest.raises(broker_control.BrokerControlError, match="broker_control.start cannot run .*missing-program"):
        control.start(1)
    slow = [sys.executable, "-c", "import time; time.sleep(30)", "{broker}"]
    control = broker_control.control_for(control_cluster(tmp_path, stop=slow, timeout="1s"))
    with pytest.raises(broker_control.BrokerControlError, match="did not finish within 1 s"):
        control.stop(1)


def test_set_config_without_a_command_refuses_before_running_anything(tmp_path):
    cluster = control_cluster(tmp_path)
    doc = {"version": 1, "clusters": [{"name": "c1", "kafka_conn_id": "k", "broker_control": {
        "stop": list(cluster.broker_control.stop), "start": list(cluster.broker_control.start)}}]}
    control = broker_control.control_for(parse_fleet(yaml.safe_dump(doc), path="f.yaml").cluster("c1"))
    assert control.settings.set_config is None
    with pytest.raises(broker_control.BrokerControlError, match="broker_control has no set_config command"):
        control.set_config(0, {"log.cleaner.dedupe.buffer.size": 8388608})
    assert recorded(tmp_path) == []


def test_without_broker_control_the_runbook_refuses_to_execute():
    cluster = FLEET.cluster("c1")
    assert broker_control.control_for(cluster) is None
    plan = {"details": {"order": [0], "cleaner_fix": {}, "trim_plan": {"partitions": []}, "groups": []},
            "preconditions": [{"segments": []}]}
    with pytest.raises(trim.TrimError, match=r"has no broker_control in the fleet file: .*runbook-broker-N\.sh"):
        trim.run(ClusterContext(cluster=cluster, kafka=None, zk=None), plan)


def test_the_lab_broker_config_command_changes_the_lab_settings(tmp_path):
    """fleetlab broker-config (the lab's set_config): merged into lab.json and server.properties."""
    from fleetlab.cli import main
    from fleetlab.lab import LabSpec

    spec = LabSpec(lab_dir=str(tmp_path / "lab"), brokers=2, broker_overrides={"log.cleaner.backoff.ms": 2000})
    spec.save()
    assert main(["broker-config", "--lab-dir", spec.lab_dir, "1", "log.cleaner.dedupe.buffer.size=8388608"]) == 0
    saved = LabSpec.load(spec.lab_dir)
    assert saved.broker_overrides == {"log.cleaner.backoff.ms": 2000, "log.cleaner.dedupe.buffer.size": "8388608"}
    for b in (0, 1):
        assert "log.cleaner.dedupe.buffer.size=8388608\n" in (spec.broker_dir(b) / "server.properties").read_text()
    assert main(["broker-config", "--lab-dir", str(tmp_path / "nolab"), "0", "a=b"]) == 2
    assert not (tmp_path / "nolab").exists()
    assert main(["broker-config", "--lab-dir", spec.lab_dir, "5", "a=b"]) == 2
    assert main(["broker-config", "--lab-dir", spec.lab_dir, "0", "novalue"]) == 2


def _trim_run(tmp_path, monkeypatch, approvers=("alice", "bob")):
    """A stored trim plan of cluster c1 in a deployment of its own (fleet file, data root, locks)."""
    from fleetkit.core import plans
    from fleetkit.trim import resume

    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"clusters": [{"name": "c1", "kafka_conn_id": "c1_kafka",
                                                        "approvers": list(approvers)}]}))
    data = tmp_path / "data"
    for k, v in (("FLEET_FILE", fleet_file), ("FLEET_DATA_ROOT", data), ("FLEET_LOCK_DIR", tmp_path / "locks")):
        monkeypatch.setenv(k, str(v))
    monkeypatch.delenv("FLEET_PLANS_DIR", raising=False)
    run = "manual__2026-01-01T00:00:00+00:00"
    plan = two_partition_plan(tmp_path, run)
    plan["dag_id"] = resume.DAG_ID
    _, digest = plans.store(f"{data}/plans", resume.DAG_ID, run, plan)
    return run, digest


def _approve(rb, digest, approver="bob", requested_by=("carol",), chosen="Approve", audit_it=True):
    """The approval record as the gate writes it for a run `requested_by[0]` triggered (Airflow's
    triggering user, copied into the record: one approval is then enough)."""
    rb.write_approval({"dag_id": rb.dag_id, "run_id": rb.run_id, "ti_id": "ti", "digest": digest,
                       "requested_by": list(requested_by), "triggering_user": requested_by[0] if requested_by else None,
                       "answer": {"chosen_options": [chosen], "approver": approver}})
    if audit_it:
        rb.audit("approved", actor=approver, digest=digest, message=f"{chosen} by {approver}")


@pytest.mark.parametrize("case, message", [
    ("never approved", "was never approved"),
    ("self-approval", "self-approval: 'carol' requested this run"),
    ("not an approver", "'mallory' is not an approver of cluster 'c1'"),
    ("rejected", "did not answer Approve"),
    ("plan edited", "the stored plan changed after approval"),
    ("audit disagrees", "holds no 'approved' record"),
    ("refused later", "a refusal is final"),
    ("execute never started", "its execute step never started"),
])
def test_resume_acts_only_on_an_approved_never_refused_interrupted_run(tmp_path, monkeypatch, case, message):
    """The engine's eligibility, as `fleetctl trim resume` meets it: the approval record (an
    Approve by a listed approver who did not request the run, for the stored plan), the audit
    (that `approved` record, and no refusal after it: a refusal is final) and the journal (execute
    started and was interrupted). Before the engine, resume needed only an `approved` audit event
    with the digest: every case below but the first was carried out."""
    from fleetkit.core.errors import FleetError
    from fleetkit.core.journal import Journal
    from fleetkit.core.runbook import GATE_SEQ, Refused
    from fleetkit.trim import resume

    run, digest = _trim_run(tmp_path, monkeypatch, approvers=("alice", "bob", "carol"))
    rb = resume.runbook(run)
    if case == "self-approval":
        _approve(rb, digest, approver="carol")
    elif case == "not an approver":
        _approve(rb, digest, approver="mallory")
    elif case == "rejected":
        _approve(rb, digest, chosen="Reject")
    elif case == "plan edited":
        _approve(rb, "sha256:" + "0" * 64)
    elif case == "audit disagrees":
        _approve(rb, digest, audit_it=False)
    elif case != "never approved":
        _approve(rb, digest)
    if case == "refused later":  # e.g. the gate's execute refused it (a precondition no longer held)
        rb.audit("refused", actor="bob", digest=digest, message="preconditions no longer hold: ...")
    if case != "execute never started":
        with Journal(rb.journal) as j:
            j.intent(GATE_SEQ, step="execute", actor="bob", digest=digest)
    with pytest.raises(Refused, match=message):
        resume.approved_run(rb, "resume", actor="dave")
    # the command's own refusal is audited, and does not end the run (a resume asked too early)
    last = rb.history()[-1]
    assert last["event"] == "refused" and last["actor"] == "dave" and last["details"]["final"] is False
    with pytest.raises(FleetError, match="no stored plan"):
        resume.runbook("manual__never")


def test_resume_and_restore_of_an_approved_run_by_its_state(state_store, tmp_path, monkeypatch):
    """Resume and restore read the run's journal through the shared-state store (files, PostgreSQL)."""
    from fleetkit.core.journal import Journal
    from fleetkit.core.runbook import GATE_SEQ, Refused
    from fleetkit.trim import resume

    run, digest = _trim_run(tmp_path, monkeypatch)
    rb = resume.runbook(run)
    _approve(rb, digest)
    # a refusal of the command itself (asked before execute started) does not end the run
    with pytest.raises(Refused, match="never started"):
        resume.approved_run(rb, "resume", actor="dave")
    with Journal(rb.journal) as j:
        j.intent(GATE_SEQ, step="execute", actor="bob", digest=digest)
    got = resume.approved_run(rb, "resume", actor="dave")
    assert (got.digest, got.approver, got.cluster) == (digest, "bob", "c1")
    assert got.journal == rb.journal and got.journal.parts[-4] == "trim"  # one journal folder per capability
    assert safe_component(run) in str(got.journal)
    with Journal(rb.journal) as j:
        j.outcome(GATE_SEQ, "done")
    with pytest.raises(Refused, match="its execute step finished"):
        resume.approved_run(rb, "resume", actor="dave")
    assert resume.approved_run(rb, "restore", actor="dave").digest == digest


def test_fleetctl_trim_resume_refuses_a_run_the_gate_refused(state_store, tmp_path, monkeypatch, capsys):
    """Issue: `fleetctl trim resume --execute` carried out a trim the gate refused (the approved
    event was written before the approver checks)."""
    from fleetctl import cli
    from fleetkit.core.journal import Journal
    from fleetkit.core.runbook import GATE_SEQ
    from fleetkit.trim import resume

    run, digest = _trim_run(tmp_path, monkeypatch)
    rb = resume.runbook(run)
    _approve(rb, digest)
    with Journal(rb.journal) as j:
        j.intent(GATE_SEQ, step="execute", actor="bob", digest=digest)
    rb.audit("refused", actor="bob", digest=digest, message="self-approval: 'bob' requested this run")
    monkeypatch.setenv("FLEET_AIRFLOW_URL", "http://127.0.0.1:9")
    assert cli.main(["trim", "resume", run, "--execute", "--force"]) == 2
    err = capsys.readouterr().err
    assert "REFUSED, nothing done" in err and "a refusal is final" in err
    for p in (3, 4):  # nothing moved
        assert (tmp_path / "d" / f"__consumer_offsets-{p}" / f"{0:020d}.log").exists()


def test_kraft_quorum_keeps_a_majority_while_each_node_is_stopped():
    from fleetkit.clients.broker_control import quorum_problems

    assert quorum_problems({0: 100, 1: 100, 2: 99}, 100, [0, 1, 2]) == []
    # one voter far behind: stopping either of the two others leaves one of three
    problems = quorum_problems({0: 100, 1: 100, 2: -1}, 100, [1, 2])
    assert problems == ["stopping node 1 (a controller voter) leaves 1 of 3 voters running and caught up ([0]); "
                        "the metadata quorum needs 2 (voters not caught up: [2])"]
    assert quorum_problems({0: 5000, 1: 100, 2: 5000}, 5000, [0]) != []
    assert quorum_problems({0: 1, 1: 1, 2: 1}, 1, [7]) == []  # a broker that is not a voter
    # a voter stopped a second ago still has a recent log end: its last fetch says it is gone
    now = 1_800_000_000_000
    fetched = {0: now, 1: now - 300, 2: now - 12_000}
    assert quorum_problems({0: 100, 1: 100, 2: 100}, 100, [1], last_fetch=fetched) == [
        "stopping node 1 (a controller voter) leaves 1 of 3 voters running and caught up ([0]); the metadata "
        "quorum needs 2 (voters not fetching for over 5 s: [2])"]
    assert quorum_problems({0: 100, 1: 100, 2: 100}, 100, [2], last_fetch=fetched) == []  # 2 is down already
    assert quorum_problems({0: 100, 1: 100, 2: 100}, 100, [1], last_fetch={0: now, 1: now, 2: -1}) == []  # v0


def test_txnindex_and_snapshot_move_with_their_segment(tmp_path):
    from fleetkit.trim.execute import file_moves
    from fleetkit.trim.layout import FILE_ORDER, file_suffixes

    assert file_suffixes((0, 9, 0, 1)) == FILE_ORDER == (".index", ".timeindex", ".log")
    suffixes = file_suffixes((3, 9, 2))
    assert suffixes == file_suffixes((4, 3, 1)) and suffixes[-1] == ".log"
    plan = {"run_id": "r", "details": {"order": [1], "quarantine_root": str(tmp_path / "q"),
                                       "file_suffixes": list(suffixes)},
            "preconditions": [{"segments": [{"broker": 1, "log_dir": str(tmp_path / "d"), "partition": 3,
                                             "segments": [{"base_offset": 0, "size_bytes": 1}]}]}]}
    names = [m["source"].rsplit("/", 1)[1] for m in file_moves(plan)]
    assert names == ["00000000000000000000.index", "00000000000000000000.timeindex",
                     "00000000000000000000.txnindex", "00000000000000000000.snapshot", "00000000000000000000.log"]


def test_runbook_names_the_fix_each_generation_applies():
    """0.9/0.10 pick the cleaner buffer up from server.properties at the restart; from 1.1 it is a
    dynamic broker config applied live."""
    from fleetkit.core.render import environment

    def shell(apply):
        return environment().get_template("trim_runbook.sh.j2").render(
            plan={"cluster": "c"}, digest="d", broker=2, segments=[], quarantine="/q",
            fix={"log.cleaner.dedupe.buffer.size": 268435456, "apply": apply})

    live, restart = shell("live"), shell("restart")
    assert "--entity-name 2 --alter" in live and "log.cleaner.dedupe.buffer.size=268435456" in live
    assert "server.properties" not in live
    assert "In server.properties: log.cleaner.dedupe.buffer.size=268435456" in restart
    assert "kafka-configs.sh" not in restart


@pytest.mark.parametrize("version, apply, live", [("2.8.2", "live", True), ("2.8.2", None, True),
                                                  ("0.9.0.1", "restart", False), ("0.9.0.1", None, False)])
def test_the_broker_runbook_of_a_gate_plan_applies_the_fix_as_the_version_allows(version, apply, live):
    """The gate plan keeps the fix's `apply` (taken from the cluster's version when the trim plan
    has none): from Kafka 1.1 the shell runbook shows the dynamic config command, not server.properties."""
    fleet = parse_fleet(f"""
version: 1
clusters:
  - {{name: c1, kafka_conn_id: k, kafka_version: "{version}", cleaner: {{dedupe_buffer_size: 2097152}}}}
""", path="f.yaml")
    fix = {"log.cleaner.dedupe.buffer.size": 8388608, **({"apply": apply} if apply else {})}
    tp = {"cluster": "c1", "partitions": [{"partition": 3, "recommit": [], "active_groups": [],
                                           "group_metadata_lost": [], "groups": [],
                                           "replicas": [{"broker": 0, "log_dir": "/d0", "kept": [], "bytes_freed": 10,
                                                         "quarantine": [{"base_offset": 0, "size_bytes": 10}],
                                                         "verdict": "OVER_CAPACITY", "reason": "r", "fix": fix}]}]}
    plan = trim_plan.gate_plan(fleet.cluster("c1"), tp, leaders={3: 0}, isr={3: [0]}, quarantine_root="/q")
    assert plan["details"]["cleaner_fix"]["0"]["apply"] == ("live" if live else "restart")
    shell = trim_plan.runbooks(plan, "manual__2026-01-01T00:00:00+00:00")[0]
    if live:
        assert "kafka-configs.sh" in shell and "--add-config log.cleaner.dedupe.buffer.size=8388608" in shell
        assert "server.properties" not in shell
    else:
        assert "In server.properties: log.cleaner.dedupe.buffer.size=8388608" in shell
        assert "kafka-configs.sh" not in shell


def test_a_trim_of_brokers_over_ssh_needs_no_quarantine_folder_of_the_deployment(monkeypatch, tmp_path):
    """Every broker reached over SSH quarantines beside its log dir on its host: the plan is built on a
    data root where segment files cannot go (an object store) without FLEET_QUARANTINE_DIR; a broker
    on the worker's own disk still needs it (one line naming the setting)."""
    from types import SimpleNamespace

    from fleetkit.core.settings import MissingSetting

    def fleet(access: str):
        broker = ("{id: 0, log_dirs: [/kafka/d0], access: ssh, ssh_conn_id: b0_ssh}" if access == "ssh"
                  else "{id: 0, log_dirs: [d0], access: local}")
        return parse_fleet(f"""
version: 1
clusters:
  - {{name: c1, kafka_conn_id: k, kafka_version: "4.3.1", brokers: [{broker}]}}
""", path=str(tmp_path / "f.yaml"))

    tp = {"cluster": "c1", "partitions": [{"partition": 3, "recommit": [], "active_groups": [],
                                           "group_metadata_lost": [], "groups": [],
                                           "replicas": [{"broker": 0, "log_dir": "/kafka/d0", "kept": [], "bytes_freed": 10,
                                                         "quarantine": [{"base_offset": 0, "size_bytes": 10}],
                                                         "verdict": "OVER_CAPACITY", "reason": "r"}]}]}
    run = "manual__2026-01-01T00:00:00+00:00"
    folder = tmp_path / "reports"
    folder.mkdir()
    (folder / "trim_plan.json").write_text(json.dumps([tp]))
    monkeypatch.setattr(trim_plan, "run_folder", lambda params: folder)
    monkeypatch.setattr(trim_plan, "leaders_and_isr", lambda kafka, zk: ({3: 0}, {3: [0]}))
    monkeypatch.delenv("FLEET_QUARANTINE_DIR", raising=False)
    params = {"data_root": "s3://fleet/data", "_run_id": run}

    plan = trim_plan.build(SimpleNamespace(cluster=fleet("ssh").cluster("c1"), kafka=None, zk=None), params)
    assert plan["details"]["quarantine_root"] is None
    assert plan["preconditions"][0]["segments"][0]["quarantine_root"] == "/kafka/d0.fleet-quarantine"
    assert "beside each broker's log dir on its host" in plan["rollback"]["how"]
    assert "/kafka/d0.fleet-quarantine" in (folder / "runbook-broker-0.sh").read_text()

    with pytest.raises(MissingSetting, match="FLEET_QUARANTINE_DIR"):
        trim_plan.build(SimpleNamespace(cluster=fleet("local").cluster("c1"), kafka=None, zk=None), params)

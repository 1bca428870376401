"""A __consumer_offsets trim killed between two file moves, on a real broker of each ZooKeeper-mode
generation: teardown starts the broker, `fleetctl trim resume` finishes the approved plan without
losing or rewinding a committed offset, `fleetctl trim restore` puts the partition's files back
byte for byte.

A one-broker lab of its own (the trim stops its broker) with 16 KiB __consumer_offsets segments
and the cleaner off (the segments stay as written), once per generation, one after the other in
the same folder and ports: Kafka 0.9.0.1 (plaintext) and Kafka 3.9.2 secured as the lab fleet's
3.9 is (SASL_SSL with SCRAM and ACLs, a SASL ZooKeeper; fleetlab.lab SECURED_ACLS), where the
trim acts through the runbook connections (the re-commits as `fleet-runbook`) and the lab's
admin makes the traffic. Groups on one partition: `early` (hostile name) whose only commit sits
in the first segment (re-committed after the trim), `standalone` whose first commit also sits
there and which commits again after the plan was read (its re-commit must be skipped, never set
back), and `bulk` whose commits roll the segments.

The execute step runs in a child process (the action's execute over the runbook connections,
journaled as the gate's execute task does) with the test hook FLEET_TRIM_PAUSE_AFTER_MOVES: it
stops after the first file move of the second segment (every file of the first segment moved: its
.index and .log, and on 3.9 its .timeindex), half-way through that segment (its index moved, its
.log not), and the test SIGKILLs that process (not pytest).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from fleetkit.core import audit, plans
from fleetkit.core.datasets import DataRoot
from fleetkit.core.journal import read_journal
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.partitioning import partition_for
from fleetkit.clients.broker_files import LocalBrokerFiles
from fleetkit.trim import execute as trim
from fleetkit.trim import plan as trim_plan
from fleetlab.lab import Lab, LabSpec
from fleetlab.traffic import commit as commit_as_admin, producer, register_login, wait_topic

from tests.conftest import TEST_PORTS, state_dir
from tests.helpers import committed_offsets as offsets_of, fresh_lab, groups_on_partition, wait_until

REPO = Path(__file__).resolve().parents[2]
#: one lab per generation, the same name, folder and ports (one runs at a time: the module's test
#: runs on one, then on the other)
SPECS = {v: LabSpec(lab_dir=str(state_dir(".lab-trim")), name="trimlab", **TEST_PORTS.cluster("trimlab"), brokers=1,
                    kafka_version=v, broker_overrides={"log.cleaner.enable": "false"}, offsets_segment_bytes=16 * 1024,
                    **({} if v.startswith("0.") else {"security": "sasl_ssl", "zk_security": "sasl"}))
         for v in ("0.9.0.1", "3.9.2")}
DAG = "runbook_trim"
RUN = "manual__2026-11-23T10:00:00+00:00"
BULK_PARTITIONS = 40


@pytest.fixture(scope="module", params=list(SPECS), ids=lambda v: f"kafka-{v}")
def trim_lab(request):
    spec = SPECS[request.param]
    with fresh_lab(spec) as lab:
        register_login(spec.bootstrap, spec.security_config("admin"))  # the traffic: the lab's admin
        yield lab


def partition_files(folder: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}


def broker_running(lab: Lab) -> bool:
    return next(r for r in lab.status() if r["component"] == "broker-0")["answering"]


def fleetctl(env: dict, *args: str) -> subprocess.CompletedProcess:
    out = subprocess.run([str(REPO / ".venv" / "bin" / "fleetctl"), "trim", *args], capture_output=True, text=True,
                         env=env, timeout=600)
    print(f"$ fleetctl trim {' '.join(args)} -> {out.returncode}\n{out.stdout}{out.stderr[-3000:]}")
    return out


CHILD = textwrap.dedent("""
    # The trim's execute step as the gate's execute task runs it (over the runbook connections):
    # the gate's journal entry, the preconditions, then the action's execute with the run's journal.
    import json, sys
    from fleetkit.core import journal, plans
    from fleetkit.core.action import ClusterContext
    from fleetkit.core.fleet import load_fleet
    from fleetkit.trim.action import TRIM_OFFSETS
    from fleet_airflow import clusters

    plans_root, dag, run, fleet_file, journal_file = sys.argv[1:]
    plan, digest = plans.load(plans_root, dag, run)
    cluster = load_fleet(fleet_file).cluster(plan["cluster"])
    with clusters.connected(cluster, changes=True) as (kafka, zk):
        ctx = ClusterContext(cluster, kafka, zk, journal_path=journal_file)
        problems = TRIM_OFFSETS.check(ctx, plan)
        assert not problems, problems
        with journal.Journal(journal_file) as j:
            j.intent("gate", step="execute", actor="tester", digest=digest)
        TRIM_OFFSETS.execute(ctx, plan)
        with journal.Journal(journal_file) as j:
            j.outcome("gate", "done")
""")


def test_killed_trim_is_torn_down_resumed_and_restored(trim_lab, tmp_path, monkeypatch):
    lab = trim_lab
    spec, bootstrap = lab.spec, lab.spec.bootstrap
    version = spec.kafka_version

    def committed_offsets(group: str, topic: str, partitions: int) -> dict[int, int]:
        return offsets_of(bootstrap, group, topic, partitions, version)

    def commit(group: str, offsets: dict) -> None:
        commit_as_admin(bootstrap, group, offsets, version)

    for k, v in spec.connection_env().items():
        monkeypatch.setenv(k, v)
    P = partition_for("bulk-trim", 50)
    early = groups_on_partition(P, 50, 1, "early \"q\" $(id) {{{{ x }}}} ../{i}")[0]
    standalone = groups_on_partition(P, 50, 1, "standalone-{i}")[0]
    lab.create_topic("early-topic", 1, 1)
    lab.create_topic("bulk", BULK_PARTITIONS, 1)
    wait_topic(bootstrap, "early-topic", 1, kafka_version=version)
    wait_topic(bootstrap, "bulk", BULK_PARTITIONS, timeout=60, kafka_version=version)
    prod = producer(bootstrap, version)
    for i in range(5):
        prod.produce("early-topic", value=b"x%d" % i, partition=0)
    assert prod.flush(10) == 0
    # no client of this process stays connected while the trim stops and starts the broker: an
    # idle librdkafka client that reconnects through those restarts is not what is tested here
    del prod

    # the first segment: early's only commit and standalone's first one; bulk commits roll segments
    commit(early, {("early-topic", 0): 3})
    commit(standalone, {("early-topic", 0): 1})
    bulk_tps = {("bulk", p): 0 for p in range(BULK_PARTITIONS)}
    folder = spec.log_dir(0) / f"{OFFSETS_TOPIC}-{P}"
    for _ in range(200):
        commit("bulk-trim", bulk_tps)
        if len(list(folder.glob("*.log"))) >= 5:
            break
    segments = LocalBrokerFiles([str(spec.log_dir(0))]).segments(OFFSETS_TOPIC, P)
    rolled = [s for s in segments if not s.is_active]
    assert len(rolled) >= 4, [s.base_offset for s in segments]
    before_files = partition_files(folder)
    active = segments[-1].base_offset
    offsets_before = {early: committed_offsets(early, "early-topic", 1),
                      standalone: committed_offsets(standalone, "early-topic", 1),
                      "bulk-trim": committed_offsets("bulk-trim", "bulk", BULK_PARTITIONS)}
    assert offsets_before[early] == {0: 3} and offsets_before[standalone] == {0: 1}

    # the approved plan (as the gate stores it): every rolled segment but the newest; two re-commits
    fleet_file = tmp_path / "fleet.yaml"
    doc = spec.fleet_document()
    doc["clusters"][0]["approvers"] = ["admin", "approver"]
    fleet_file.write_text(yaml.safe_dump(doc))
    data = tmp_path / "data"
    quarantine = [{"base_offset": s.base_offset, "size_bytes": s.size_bytes} for s in rolled[:-1]]
    tp = {"cluster": spec.name, "partitions": [{
        "partition": P, "groups": [early, standalone, "bulk-trim"], "active_groups": [], "group_metadata_lost": [],
        "recommit": [{"group": g, "topic": "early-topic", "partition": 0, "offset": o, "metadata": "",
                      "record_offset": 0} for g, o in ((early, 3), (standalone, 1))],
        "replicas": [{"broker": 0, "log_dir": str(spec.log_dir(0)), "quarantine": quarantine,
                      "kept": [{"base_offset": s.base_offset} for s in segments[len(quarantine):]],
                      "bytes_freed": sum(s["size_bytes"] for s in quarantine), "verdict": "OVER_CAPACITY",
                      "reason": "test"}]}]}
    from fleetkit.core.fleet import load_fleet

    cluster = load_fleet(fleet_file).cluster(spec.name)
    plan = trim_plan.gate_plan(cluster, tp, leaders={P: 0}, isr={P: [0]}, quarantine_root=str(data / "quarantine"))
    plan.update(dag_id=DAG, run_id=RUN)
    plans_root = str(data / "plans")
    _, digest = plans.store(plans_root, DAG, RUN, plan)
    # the deployment's settings; no api-server here, so acting needs --force (the run was checked)
    env = dict(os.environ, FLEET_LOCK_DIR=str(tmp_path / "locks"), FLEET_DATA_ROOT=str(data),
               FLEET_FILE=str(fleet_file), FLEET_AIRFLOW_USER="tester", FLEET_AIRFLOW_URL="http://127.0.0.1:9")
    for k in ("FLEET_LOCK_DIR", "FLEET_DATA_ROOT", "FLEET_FILE"):
        monkeypatch.setenv(k, env[k])
    monkeypatch.delenv("FLEET_PLANS_DIR", raising=False)
    from fleetkit.trim import resume as trim_resume

    rb = trim_resume.runbook(RUN, DAG)
    journal_file = rb.journal
    assert journal_file.parts[-4] == "trim"
    cli = ["--force"]

    # not approved yet: resume refuses and changes nothing
    out = fleetctl(env, "resume", RUN, "--execute", *cli)
    assert out.returncode == 2 and "was never approved" in out.stderr
    assert partition_files(folder) == before_files
    # approved as the gate records it: the approval record (admin asked, approver approved), the audit
    rb.write_approval({"dag_id": DAG, "run_id": RUN, "ti_id": "t", "digest": digest, "requested_by": ["admin"],
                       "triggering_user": "admin", "answer": {"chosen_options": ["Approve"], "approver": "approver"}})
    rb.audit("approved", actor="approver", digest=digest, message="Approve by approver")
    # approved, but execute never started: nothing to resume
    out = fleetctl(env, "resume", RUN, "--execute", *cli)
    assert out.returncode == 2 and "its execute step never started" in out.stderr

    # execute in a child process, killed (SIGKILL) after the first file move of the second segment:
    # the plan's moves of the files that exist (0.9 writes no .timeindex, neither writes a .txnindex
    # without transactions), the first segment's all moved, the second's index moved, its .log not
    existing = [m for m in trim.file_moves(plan) if Path(m["source"]).exists()]
    pause = sum(1 for m in existing if m["base_offset"] == quarantine[0]["base_offset"]) + 1
    half_moved = existing[pause - 1]
    assert half_moved["base_offset"] == quarantine[1]["base_offset"] and half_moved["source"].endswith(".index")
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    stderr = tmp_path / "child.err"
    with open(stderr, "w") as err:
        child = subprocess.Popen([sys.executable, str(script), plans_root, DAG, RUN, str(fleet_file), str(journal_file)],
                                 stdout=err, stderr=err, env=dict(env, FLEET_TRIM_PAUSE_AFTER_MOVES=str(pause)))
    try:
        wait_until(lambda: f"paused after {pause} file move(s)" in stderr.read_text() or child.poll() is not None,
                   180, "the execute child paused between two moves")
        assert child.poll() is None, stderr.read_text()[-3000:]
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    entries = read_journal(journal_file)
    assert entries["gate"]["status"] == "intent" and entries["broker 0"]["status"] == "intent"
    done = [e["seq"] for e in entries.values() if isinstance(e["seq"], int) and e["status"] == "done"]
    assert done == [m["seq"] for m in existing[:pause]], done
    assert not broker_running(lab)  # killed while the broker was stopped for its moves

    # the gate's cleanup teardown: the half-moved segment's index goes back, the broker starts
    from fleet_airflow import clusters

    from fleetkit.core.action import ClusterContext
    from fleetkit.trim.action import TRIM_OFFSETS

    with clusters.connected(cluster, changes=True) as (kafka, zk):
        did = TRIM_OFFSETS.teardown(ClusterContext(cluster, kafka, zk, journal_path=journal_file), plan)
    print("teardown:", did)
    assert any("moved" in d and f"{quarantine[1]['base_offset']:020d}.index" in d for d in did)
    assert any("started broker 0" in d for d in did)
    assert broker_running(lab)
    assert (folder / f"{quarantine[1]['base_offset']:020d}.index").exists()
    assert not (folder / f"{quarantine[0]['base_offset']:020d}.log").exists()  # the whole first segment stays moved
    assert read_journal(journal_file)[half_moved["seq"]]["status"] == "moved_back"
    wait_until(lambda: committed_offsets("bulk-trim", "bulk", BULK_PARTITIONS) == offsets_before["bulk-trim"],
               120, "bulk offsets readable after the restart", retry_on=(Exception,))

    # after the plan was read, the standalone consumer commits a newer offset while its group is Empty
    commit(standalone, {("early-topic", 0): 2})

    files_now, journal_now = partition_files(folder), read_journal(journal_file)
    out = fleetctl(env, "resume", RUN)  # dry run
    assert out.returncode == 0 and "dry run: nothing changed" in out.stdout and " pending " in out.stdout
    assert partition_files(folder) == files_now and read_journal(journal_file) == journal_now

    # on a terminal: a progress bar of the brokers on stderr, the same report on stdout
    from tests.helpers import on_a_terminal

    rc, stdout, shown = on_a_terminal([str(REPO / ".venv" / "bin" / "fleetctl"), "trim", "resume", RUN, "--execute",
                                       *cli], 600, env)
    print(f"$ fleetctl trim resume {RUN} --execute (stderr on a terminal) -> {rc}\n{stdout}{shown[-3000:]!r}")
    assert rc == 0 and "resumed: finished and verified" in stdout
    assert b"trim resume of " + spec.name.encode() in shown and b"brokers" in shown
    assert broker_running(lab)
    entries = read_journal(journal_file)
    progress = trim.progress(plan, entries)
    assert set(progress["moves"]) <= {"done", "absent"}, {k: len(v) for k, v in progress["moves"].items()}
    assert progress["brokers_done"] == [0]
    assert {tuple(json.loads(k.split(" ", 1)[1]))[0]: e["status"] for k, e in entries.items()
            if str(k).startswith("recommit ")} == {early: "done", standalone: "skipped"}
    for s in quarantine:
        assert not (folder / f"{s['base_offset']:020d}.log").exists()
    # no committed offset lost, none set back
    assert committed_offsets(early, "early-topic", 1) == {0: 3}
    assert committed_offsets(standalone, "early-topic", 1) == {0: 2}
    assert committed_offsets("bulk-trim", "bulk", BULK_PARTITIONS) == offsets_before["bulk-trim"]
    events = [r["event"] for r in audit.records(DataRoot(str(data)), spec.name, RUN)]
    assert "dry_run" in events and events[-1] == "resumed"

    # restore: the resumed trim is finished, so putting it back is a change of its own: refused until
    # a listed approver other than who restores it approves it (as `fleetctl trim restore RUN
    # --approve` records it, logged in to Airflow; no api-server here, so recorded as it would be)
    out = fleetctl(env, "restore", RUN, "--execute", *cli)
    assert out.returncode == 2 and "needs its own approval" in out.stderr, out.stderr[-3000:]
    rb.audit("restore_approved", actor="approver", digest=digest, message="restore approved by approver")
    # every quarantined file back, byte for byte
    out = fleetctl(env, "restore", RUN, "--execute", *cli)
    assert out.returncode == 0, out.stderr[-3000:]
    assert broker_running(lab)
    after = partition_files(folder)
    # the files of every segment but the active one (which took the commits made since); not the
    # broker's own files (3.9: leader-epoch-checkpoint, partition.metadata, producer snapshots),
    # which it writes again at each start and stop
    unchanged = {k: v for k, v in before_files.items()
                 if k.endswith((".log", ".index", ".timeindex")) and not k.startswith(f"{active:020d}.")}
    assert {k: after.get(k) for k in unchanged} == unchanged
    assert not list((data / "quarantine").rglob("*.log"))
    assert audit.records(DataRoot(str(data)), spec.name, RUN)[-1]["event"] == "restored"
    wait_until(lambda: committed_offsets(early, "early-topic", 1) == {0: 3}, 120,
               "early's offset after the restore", retry_on=(Exception,))
    assert committed_offsets(standalone, "early-topic", 1) == {0: 2}
    assert committed_offsets("bulk-trim", "bulk", BULK_PARTITIONS) == offsets_before["bulk-trim"]

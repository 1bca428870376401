"""group_ids (scheduled) and runbook_group_ids (approval gate) with
dag.test() against the real lab: real consumers, real ZooKeeper. The mappings are seeded by
tests/kop_standin.py, a STAND-IN FOR KoP (KoP cannot run here)."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pytest
import yaml
from kazoo.client import KazooClient

from fleetkit.core import audit
from fleetkit.core import plans
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import ConsumerThread, wait_topic
from fleetkit.core.render import md

from fleetlab.hitl import Answerer
from tests.kop_standin import kop_write
from tests.conftest import GENERATIONS
from tests.helpers import admin_kafka, commit_when_led, mapped_task_states

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow
HOST = "127.0.0.1"
#: the generations whose cluster has a ZooKeeper to keep KoP's mappings in (3.9's requires SASL)
ZOOKEEPER_GENERATIONS = ["0.9", "3.9"]


@pytest.fixture(params=ZOOKEEPER_GENERATIONS, ids=[f"kafka-{g}" for g in ZOOKEEPER_GENERATIONS])
def zookeeper_lab(request, lab_fleet):
    return lab_fleet(GENERATIONS[request.param])


def test_scheduled_creates_missing_and_runbook_fixes_the_rest(dagbag, zookeeper_lab, tmp_path, unique,
                                                              monkeypatch):
    lab = zookeeper_lab
    name = lab.spec.name
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    root = f"/client_group_id_{uuid.uuid4().hex[:8]}"
    zk = lab.lab.zk_client()  # logged in where the ZooKeeper requires it (3.9)
    topic = unique("kopdag")
    version = lab.spec.kafka_version
    commit_when_led(lab.lab, topic, 3, {})  # created and led (the secured clusters auto-create nothing)
    group = unique("dag grp 'q' $(x) ünï")
    gone_group = unique("gone|grp")
    miss, mism = f"miss-{uuid.uuid4().hex[:6]}", f"mism `{uuid.uuid4().hex[:6]}`"
    kop_write(zk, root, HOST, mism, "wrong-group")
    kop_write(zk, root, HOST, "gone-1", gone_group)
    p = {name: f"{root}/{HOST}-{name}" for name in (miss, mism, "gone-1")}
    fleet = lab.own_fleet()
    fleet["clusters"][0]["group_id_mappings"] = {"root": root, "grace": "2s", "create_missing_unattended": True}
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet, allow_unicode=True))
    data = tmp_path / "data"
    # every DAG reads both from its deployment settings only
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    threads = [ConsumerThread(lab.bootstrap, group, [topic], client_id=c, kafka_version=version) for c in (miss, mism)]
    for t in threads:
        t.start()
    kafka = admin_kafka(lab.spec)
    try:
        deadline = time.monotonic() + 90
        while {m.client_id for m in kafka.describe_groups([group])[group].members} != {miss, mism}:
            assert time.monotonic() < deadline, "consumers never joined"
            time.sleep(0.5)
        time.sleep(2.5)  # gone-1 is now older than the 2 s grace

        # 1. the scheduled run: report everything, create only the MISSING mapping
        dr = dagbag.get_dag("group_ids").test()
        assert dr.state == "success", mapped_task_states(dr)
        assert mapped_task_states(dr) == {("list_clusters", -1): "success", ("collect", 0): "success", ("diff", -1): "success",
                               ("report", -1): "success", ("create_missing", -1): "success",
                               ("all_clusters_collected", -1): "success"}
        out = next((data / "reports" / "group_ids").iterdir())
        findings = {f["path"]: f for f in map(json.loads, (out / "findings.jsonl").read_text().splitlines())}
        assert (findings[p[miss]]["class"], findings[p[miss]]["group"]) == ("MISSING", group)
        assert (findings[p[mism]]["class"], findings[p[mism]]["znode_group"], findings[p[mism]]["znode_version"]) == \
            ("MISMATCHED", "wrong-group", 0)
        assert findings[p["gone-1"]]["class"] == "STALE"
        assert md(p[mism]) in (out / "report.md").read_text()
        assert zk.get(p[miss])[0].decode() == group          # created unattended
        assert zk.get(p[mism])[0].decode() == "wrong-group"  # destructive: untouched
        assert zk.exists(p["gone-1"]) is not None            # destructive: untouched
        created = [r for r in audit.records(DataRoot(data), name) if r["action"] == "create_missing_group_ids"]
        assert len(created) == 1
        changed = {c["path"]: (c["before"], c["after"]) for c in created[0]["details"]["result"]["changed_paths"]}
        assert changed[p[miss]] == (None, group)

        # 2. the runbook's dry run (the default) changes nothing
        rb = dagbag.get_dag("runbook_group_ids")
        rconf = {"cluster": name, "requested_by": "admin"}
        dr = rb.test(run_conf=rconf)
        st = mapped_task_states(dr)
        assert st[("plan", -1)] == "success" and st[("approve", -1)] == "skipped"
        plan, _ = plans.load(data / "plans", rb.dag_id, dr.run_id)
        mine = {c["target"]: (c["before"], c["after"]) for c in plan["changes"] if c["target"] in p.values()}
        assert mine == {p[mism]: ("wrong-group", group), p["gone-1"]: (gone_group, "(deleted)")}
        assert zk.get(p[mism])[0].decode() == "wrong-group" and zk.exists(p["gone-1"]) is not None

        # 3. approved: overwrite and delete, each conditional on the version read
        answer = Answerer(rb.dag_id, "Approve", user="approver")
        answer.start()
        dr = rb.test(run_conf=dict(rconf, dry_run=False))
        answer.join(5)
        assert answer.error is None and dr.state == "success", mapped_task_states(dr)
        assert md(p[mism]) in answer.body and md(group) in answer.body
        assert zk.get(p[mism])[0].decode() == group and zk.get(p[mism])[1].version == 1
        assert zk.exists(p["gone-1"]) is None
        assert zk.get(p[miss])[0].decode() == group
        recs = audit.records(DataRoot(data), name, dr.run_id)
        assert [r["event"] for r in recs] == ["planned", "approved", "executed", "verified"]
        done = {c["path"]: (c["op"], c["before"], c["after"]) for c in recs[2]["details"]["result"]["changed_paths"]}
        assert done[p[mism]] == ("set", "wrong-group", group) and done[p["gone-1"]] == ("delete", gone_group, None)

        # 4. roll back from the executed record (what fleetctl audit rollback triggers), approved
        rollback = recs[2]["details"]["rollback"]
        assert rollback["dag_id"] == rb.dag_id and rollback["conf"]["rollback_run"] == dr.run_id
        answer = Answerer(rb.dag_id, "Approve", user="approver")
        answer.start()
        dr = rb.test(run_conf=dict(rollback["conf"], dry_run=False, requested_by="admin"))
        answer.join(5)
        assert answer.error is None and dr.state == "success", mapped_task_states(dr)
        assert zk.get(p[mism])[0].decode() == "wrong-group" and zk.get(p["gone-1"])[0].decode() == gone_group
        assert zk.get(p[miss])[0].decode() == group  # the unattended create was another run: untouched
    finally:
        for t in threads:
            t.stop_event.set()
        for t in threads:
            t.join(15)
        kafka.close()
        zk.delete(root, recursive=True)
        zk.stop()


@pytest.mark.parametrize("key", ["data_root", "fleet_file"])
def test_the_conf_cannot_send_the_unattended_writes_elsewhere(dagbag, lab, tmp_path, unique, monkeypatch, capfd,
                                                               key):
    """A live consumer without a mapping, on a cluster whose mappings may be created unattended:
    a run whose conf names a data root (an audit chain outside the deployment's) or a fleet file
    (which decides create_missing_unattended) is refused. Nothing is written to ZooKeeper, under
    the conf's folder or under the deployment's data root."""
    root = f"/client_group_id_{uuid.uuid4().hex[:8]}"
    topic, group, client = unique("kopconf"), unique("conf-grp"), f"miss-{uuid.uuid4().hex[:6]}"
    wait_topic(lab.bootstrap, topic)
    fleet = lab.own_fleet()
    mappings = {"root": root, "create_missing_unattended": True}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    if key == "data_root":  # the deployment allows the unattended create: only the audit is redirected
        fleet["clusters"][0]["group_id_mappings"] = mappings
        value = str(elsewhere / "data")
    else:  # the deployment has no mappings section; the caller's fleet file allows the create
        mine = lab.own_fleet()
        mine["clusters"][0]["group_id_mappings"] = mappings
        value = str(elsewhere / "fleet.yaml")
        Path(value).write_text(yaml.safe_dump(mine))
    fleet_file, data = tmp_path / "fleet.yaml", tmp_path / "data"
    fleet_file.write_text(yaml.safe_dump(fleet))
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    consumer = ConsumerThread(lab.bootstrap, group, [topic], client_id=client)
    consumer.start()
    kafka = admin_kafka(lab.spec)
    zk = KazooClient(hosts=f"{lab.spec.zk_hosts}{lab.spec.chroot}", timeout=10)
    zk.start(timeout=15)
    try:
        deadline = time.monotonic() + 90
        while {m.client_id for m in kafka.describe_groups([group])[group].members} != {client}:
            assert time.monotonic() < deadline, "consumer never joined"
            time.sleep(0.5)
        capfd.readouterr()
        dr = dagbag.get_dag("group_ids").test(run_conf={key: value})
        states = mapped_task_states(dr)
        assert dr.state == "failed" and "success" not in states.values(), states
        assert states[("list_clusters", -1)] == "failed" and states[("create_missing", -1)] != "success", states
        out, err = capfd.readouterr()
        assert f"REFUSED, nothing read or written: the run conf names '{key}'" in out + err
        assert zk.exists(root) is None  # no mapping created, not even the root
        assert sorted(p.name for p in elsewhere.iterdir()) == (["fleet.yaml"] if key == "fleet_file" else [])
        assert not [p for p in data.rglob("*") if not p.is_dir()], sorted(data.rglob("*"))
    finally:
        consumer.stop_event.set()
        consumer.join(15)
        kafka.close()
        if zk.exists(root):
            zk.delete(root, recursive=True)
        zk.stop()


def test_the_unattended_creator_takes_the_clusters_lock(airflow_db, lab, tmp_path, monkeypatch):
    """CreateMissingGroupIdsOperator is a writer like the runbooks: it takes the cluster's lock. Held
    by a run that no longer exists, nothing is created and the task fails saying how to clear it;
    once cleared, the creator runs (and leaves the lock free)."""
    import datetime as dt

    from airflow.sdk import DAG

    from fleetctl import cli
    from fleetkit.core.locks import held_locks

    from fleet_airflow import clusters
    from fleet_airflow.operators.group_ids import CreateMissingGroupIdsOperator

    locks = tmp_path / "locks"
    monkeypatch.setenv("FLEET_LOCK_DIR", str(locks))
    root = f"/client_group_id_{uuid.uuid4().hex[:8]}"
    fleet = lab.own_fleet()
    fleet["clusters"][0]["group_id_mappings"] = {"root": root, "create_missing_unattended": True}
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet))
    out, data = tmp_path / "out", tmp_path / "data"
    out.mkdir()
    # the deployment's settings (never the operator's or the run's)
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    path = f"{root}/10.8.0.1-c1"
    (out / "findings.jsonl").write_text(json.dumps(
        {"cluster": "labtest", "path": path, "class": "MISSING", "reason": "r", "group": "g", "groups": ["g"],
         "client_host": "10.8.0.1", "client_id": "c1", "member_ids": ["m"], "znode_group": None,
         "znode_version": None, "ctime_ms": None, "mtime": None, "age_seconds": None}) + "\n")
    from fleetkit.core.fleet import load_fleet
    from fleetkit.core.locks import ClusterLock

    cluster = load_fleet(fleet_file).cluster("labtest")
    with clusters.connected(cluster) as (kafka, zk):
        held = ClusterLock.for_cluster(locks, cluster, kafka, zk)
    held.acquire("runbook_group_ids/manual__gone", "runbook_group_ids", "manual__gone")

    with DAG(f"test_create_missing_lock_{uuid.uuid4().hex[:6]}", schedule=None, catchup=False,
             start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)) as dag:
        CreateMissingGroupIdsOperator(task_id="create_missing", out_dir=str(out))
    # dag.test() serialises only DAGs of a bundle: this one is written to the metadata database here
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    bag = DagBag(dag_folder=str(tmp_path / "no_dags"))
    bag.bag_dag(dag)
    sync_bag_to_db(bag, "dags-folder", None)
    dr = dag.test()
    assert mapped_task_states(dr) == {("create_missing", -1): "failed"}
    assert held.holder()["run_id"] == "manual__gone"  # never stolen
    assert not any(r["action"] == "create_missing_group_ids" for r in audit.records(DataRoot(data), "labtest"))

    # no api-server here: whether the holder runs cannot be asked, so the operator says --force
    monkeypatch.setenv("FLEET_AIRFLOW_URL", "http://127.0.0.1:9")
    assert cli.main(["lock", "clear", "labtest", "--lock-dir", str(locks)]) == 2
    assert held.holder()["run_id"] == "manual__gone"
    assert cli.main(["lock", "clear", "labtest", "--lock-dir", str(locks), "--force"]) == 0
    (cleared,) = [r for r in audit.records(DataRoot(data), "labtest") if r["event"] == "lock_cleared"]
    assert cleared["run_id"] == "manual__gone"
    dr = dag.test()
    assert mapped_task_states(dr) == {("create_missing", -1): "success"}
    (rec,) = [r for r in audit.records(DataRoot(data), "labtest") if r["action"] == "create_missing_group_ids"]
    assert rec["run_id"] == dr.run_id and rec["details"]["result"]["skipped"] == 1  # no live member: rechecked
    assert held_locks(locks) == []  # taken and released


def test_the_scheduled_run_reports_a_kraft_cluster_without_mappings(dagbag, tmp_path, monkeypatch):
    """A fleet holding the 4.3 KRaft cluster (no ZooKeeper, so no KoP mappings): the hourly run
    succeeds, collects nothing there (it never connects to the cluster, so it need not run) and its
    report says the cluster has no mappings section."""
    from tests.conftest import TEST_FLEET, write_fleet_file

    fleet_file = write_fleet_file(TEST_FLEET["lab43test"], tmp_path / "fleet.yaml")
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    dr = dagbag.get_dag("group_ids").test(run_conf={"create_missing": False})
    assert dr.state == "success", mapped_task_states(dr)
    reports = list((tmp_path / "data" / "reports" / "group_ids").glob("*/report.md"))
    assert len(reports) == 1, reports
    text = reports[0].read_text()
    assert "## lab43test" in text
    assert md("no mappings section: the cluster has no ZooKeeper (KRaft)") in text

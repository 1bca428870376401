"""The runbooks' own principal, through the approval gate with dag.test() on the real 0.9 lab:
planning and verifying read with the read-only connections, execute changes the cluster with the
runbook ones (fleet file: runbook_kafka_conn_id, zookeeper.runbook_conn_id).

The ZooKeeper offsets are written owner-only (digest `fleet-runbook` all, the world read), as on a
ZooKeeper whose writers authenticate: only the runbook identity may reset them.

On the secured 3.9 lab (AclAuthorizer), a runbook principal granted less than the README's
Permissions list (READ on groups missing, an operator's mistake the read-only plan cannot see):
the run fails at execute, audited in one line naming the principal, the operation and the
resource, the lock released, every committed offset as before."""

from __future__ import annotations

import json

import pytest
from kazoo.client import KazooClient
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import commit, produce, wait_topic

from tests.conftest import GENERATIONS, TEST_LAB, write_fleet_file
from tests.helpers import commit_when_led, committed_offsets, runbook_kafka, wait_until
from fleetlab.hitl import Answerer
from fleetlab.hitl import run_dag as run
from fleetlab.hitl import task_states as states

DAG_ID = "runbook_stuck_reset"
pytestmark = pytest.mark.airflow
SECRET = "runbook-zk-S3cret"
RUNBOOK_ZK = f"{TEST_LAB.zk_conn_id}_runbook_t"


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


@pytest.fixture
def zk(lab):
    client = KazooClient(hosts=f"{lab.spec.zk_hosts}{lab.spec.chroot}", auth_data=[("digest", f"fleet-runbook:{SECRET}")])
    client.start()
    yield client
    client.stop()
    client.close()


@pytest.fixture
def setup(lab, zk, tmp_path, unique, monkeypatch):
    """Offsets of an old-consumer group in the lab's ZooKeeper that only `fleet-runbook` may write."""
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv(f"AIRFLOW_CONN_{RUNBOOK_ZK.upper()}", json.dumps(
        {"conn_type": "zookeeper", "host": "127.0.0.1", "port": lab.spec.zk_port, "login": "fleet-runbook",
         "password": SECRET}))
    topic, group = unique("principal"), unique("old grp")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    acl = [make_digest_acl("fleet-runbook", SECRET, all=True), *READ_ACL_UNSAFE]
    for p, o in {0: 3, 1: 5}.items():
        zk.create(f"/consumers/{group}/offsets/{topic}/{p}", str(o).encode(), makepath=True, acl=acl)
    conf = {"cluster": TEST_LAB.name, "source": "zookeeper", "group": group, "topic": topic, "partitions": "all",
            "target": "skip 1", "dry_run": False}

    def fleet(**zookeeper):
        path = write_fleet_file(TEST_LAB, tmp_path / "fleet.yaml",
                                zookeeper={"conn_id": TEST_LAB.zk_conn_id, "chroot": TEST_LAB.chroot, **zookeeper},
                                offset_stores=[{"kind": "zookeeper", "conn_id": TEST_LAB.zk_conn_id,
                                                "chroot": TEST_LAB.chroot, "root": "/consumers"}])
        monkeypatch.setenv("FLEET_FILE", str(path))

    return {"topic": topic, "group": group, "conf": conf, "root": DataRoot(tmp_path / "data"), "fleet": fleet}


def zk_offsets(zk, group, topic):
    return {int(p): int(zk.get(f"/consumers/{group}/offsets/{topic}/{p}")[0])
            for p in zk.get_children(f"/consumers/{group}/offsets/{topic}")}


def test_execute_writes_with_the_runbook_zookeeper_identity(dag, setup, zk):
    """The store is on the cluster's own ZooKeeper connection: its writes follow
    zookeeper.runbook_conn_id (digest fleet-runbook); planning read with the anonymous one."""
    setup["fleet"](runbook_conn_id=RUNBOOK_ZK)
    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve", user="approver"))
    assert dr.state == "success", states(dr)
    assert zk_offsets(zk, setup["group"], setup["topic"]) == {0: 4, 1: 6}
    recs = audit.records(setup["root"], TEST_LAB.name, dr.run_id)
    assert [r["event"] for r in recs] == ["planned", "approved", "executed", "verified"]
    assert SECRET not in json.dumps(recs, default=str)


def test_without_a_runbook_connection_the_refused_write_is_named_in_one_line(dag, setup, zk):
    setup["fleet"]()  # no runbook_conn_id: execute writes as the read-only (anonymous) connection
    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve", user="approver"))
    assert states(dr)["execute"] == "failed", states(dr)
    assert zk_offsets(zk, setup["group"], setup["topic"]) == {0: 3, 1: 5}
    failed = [r for r in audit.records(setup["root"], TEST_LAB.name, dr.run_id) if r["event"] == "failed"]
    line = (f"ZooKeeper refused set on znode /consumers/{setup['group']}/offsets/{setup['topic']}/0 (chroot "
            f"{TEST_LAB.chroot}) for anonymous (no ZooKeeper authentication) on cluster {TEST_LAB.name!r} "
            "(NoAuth: the znode's ACL does not grant it)")
    assert len(failed) == 1 and failed[0]["message"].endswith(f"ZooKeeperNotAuthorized: {line}"), failed


def test_execute_reaches_kafka_through_the_runbook_connection(dag, lab, setup, tmp_path, monkeypatch):
    """A Kafka-side reset: plan (the read-only connection) succeeds, execute goes to the runbook
    connection, here a listener nobody answers on: it fails naming it, nothing changes."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"127.0.0.1:{s.getsockname()[1]}"
    monkeypatch.setenv("AIRFLOW_CONN_LABTEST_KAFKA_RUNBOOK_T", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": dead, "socket.timeout.ms": 3000}}))
    monkeypatch.setenv("FLEET_FILE", str(write_fleet_file(TEST_LAB, tmp_path / "kfleet.yaml",
                                                          runbook_kafka_conn_id="labtest_kafka_runbook_t")))
    topic, group = setup["topic"], setup["group"] + "-kafka"
    commit(lab.bootstrap, group, {(topic, 0): 3, (topic, 1): 5})
    conf = {"cluster": TEST_LAB.name, "group": group, "topic": topic, "partitions": "0,1", "target": "skip 1",
            "dry_run": False}
    dr = run(dag, conf, Answerer(DAG_ID, "Approve", user="approver"))
    st = states(dr)
    # execute re-reads the group's offsets through the runbook connection first: _TIMED_OUT there
    assert st["plan"] == "success" and st["execute"] == "failed", st
    assert committed_offsets(lab.bootstrap, group, topic, partitions=2) == {0: 3, 1: 5}
    # the same run with the runbook connection pointing at the cluster executes
    monkeypatch.setenv("AIRFLOW_CONN_LABTEST_KAFKA_RUNBOOK_T", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": lab.bootstrap, **lab.spec.security_config("fleet-runbook")}}))
    dr = run(dag, conf, Answerer(DAG_ID, "Approve", user="approver"))
    assert dr.state == "success", states(dr)
    assert committed_offsets(lab.bootstrap, group, topic, partitions=2) == {0: 4, 1: 6}


def test_a_missing_acl_of_the_runbook_principal_fails_execute_and_changes_nothing(dag, lab_fleet, tmp_path, unique,
                                                                                 monkeypatch):
    from fleetkit.core.errors import NotAuthorized
    from fleetkit.core.locks import held_locks
    from fleetkit.core.partitioning import partition_for
    from fleetlab.arrange import groups_on_partition

    handle = lab_fleet(GENERATIONS["3.9"])
    spec = handle.spec
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("FLEET_FILE", str(write_fleet_file(spec, tmp_path / "fleet39.yaml")))
    topic, group = unique("acl-orders"), unique("acl grp é")
    # a group of the same __consumer_offsets partition (the same coordinator): what the runbook
    # principal may do there is what the broker that handles the reset allows
    probe = groups_on_partition(partition_for(group, 50), 50, 1, unique("acl-probe") + "-{i}")[0]
    commit_when_led(handle.lab, topic, 3, {group: {0: 3, 1: 5, 2: 10}})  # as the lab's admin
    produce(handle.bootstrap, topic, {0: 10, 1: 10, 2: 10}, kafka_version=spec.kafka_version)
    before = committed_offsets(handle.bootstrap, group, topic, kafka_version=spec.kafka_version)
    assert before == {0: 3, 1: 5, 2: 10}
    runbook = runbook_kafka(spec, timeout=15)

    def runbook_may_commit() -> bool:
        try:
            runbook.commit_offsets(probe, {(topic, 0): 0})
            return True
        except NotAuthorized:
            return False

    conf = {"cluster": spec.name, "group": group, "topic": topic, "partitions": "0,1", "target": "skip 1",
            "dry_run": False}
    try:
        with handle.lab.acl_revoked("fleet-runbook", ("group", "*", "READ")):
            wait_until(lambda: not runbook_may_commit(), 60, "the broker applying the revoked ACL")
            dr = run(dag, conf, Answerer(DAG_ID, "Approve", user="approver"))
        wait_until(runbook_may_commit, 60, "the broker applying the restored ACL")
    finally:
        runbook.close()
    st = states(dr)
    assert dr.state == "failed", st
    assert st["plan"] == "success" and st["approve"] == "success" and st["lock"] == "success", st
    assert st["execute"] == "failed" and st["verify"] == "upstream_failed", st
    assert st["cleanup"] == "success" and st["unlock"] == "success", st
    assert held_locks(tmp_path / "locks") == []  # the lock was taken and released
    assert committed_offsets(handle.bootstrap, group, topic, kafka_version=spec.kafka_version) == before
    recs = audit.records(DataRoot(tmp_path / "data"), spec.name, dr.run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin, dag_test"), ("approved", "approver"),
                                                       ("failed", "approver")], recs
    message = recs[-1]["message"]
    refusal = (f"not authorized: fleet-runbook may not READ group '{group}' on {spec.name} "
               "(GROUP_AUTHORIZATION_FAILED)")
    # one line: the refusal, and what the reset read back after it (nothing moved)
    assert "\n" not in message and f"({refusal})" in message, message
    assert message.startswith("execute failed after 0 change(s) made, 0 of unknown outcome: ResetFailed: "), message
    assert f"moved [], not moved [{topic}-0, {topic}-1], unknown []" in message, message

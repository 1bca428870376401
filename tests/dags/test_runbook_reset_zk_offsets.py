"""runbook_stuck_reset for offsets kept in ZooKeeper (source zookeeper / storm), through the
approval gate with dag.test() against the real 0.9 lab ZooKeeper.

The old-consumer layout and the storm-kafka JSON are written here with kazoo (the collection test
has a real 0.9 old consumer commit them; Storm cannot run here: the JSON is byte-for-byte what
storm-kafka's PartitionManager.commit() writes, see tests/integration/test_zk_offset_stores.py).
"""

from __future__ import annotations

import pytest
from kazoo.client import KazooClient

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import produce, wait_topic

from tests.conftest import TEST_LAB, write_fleet_file
from fleetlab.hitl import Answerer
from fleetlab.hitl import run_dag as run
from fleetlab.hitl import task_states as states
from tests.integration.test_zk_offset_stores import storm_json

DAG_ID = "runbook_stuck_reset"
pytestmark = pytest.mark.airflow
GROUP = "old 'grp' ü {{ x }}"


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


@pytest.fixture
def zk(lab):
    client = KazooClient(hosts=f"{lab.spec.zk_hosts}{lab.spec.chroot}")
    client.start()
    yield client
    client.stop()
    client.close()


@pytest.fixture
def setup(lab, zk, tmp_path, unique, monkeypatch):
    """A topic with 10 records per partition; an old-consumer group and a spout with offsets in the
    lab's ZooKeeper, declared as the test cluster's offset_stores."""
    storm_root = "/" + unique("storm")
    fleet = write_fleet_file(TEST_LAB, tmp_path / "fleet.yaml", offset_stores=[
        {"kind": "zookeeper", "conn_id": TEST_LAB.zk_conn_id, "chroot": TEST_LAB.chroot, "root": "/consumers"},
        {"kind": "storm", "conn_id": TEST_LAB.zk_conn_id, "chroot": TEST_LAB.chroot, "root": storm_root}])
    monkeypatch.setenv("FLEET_FILE", str(fleet))
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    topic = unique("zk-poison")
    group, spout = unique(GROUP), unique("spout é")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    for p, o in {0: 3, 1: 5}.items():
        zk.create(f"/consumers/{group}/offsets/{topic}/{p}", str(o).encode(), makepath=True)
    spout_paths = {}
    for p, o in {0: 2, 1: 4}.items():
        spout_paths[p] = f"{storm_root}/{spout}/partition_{p}"
        zk.create(spout_paths[p], storm_json("t-1-1700000000", "topo / é", o, p, topic, "127.0.0.1", 9092),
                  makepath=True)
    conf = {"cluster": TEST_LAB.name, "source": "zookeeper", "group": group, "topic": topic, "partitions": "all",
            "target": "skip 1", "dry_run": False}
    return {"topic": topic, "group": group, "spout": spout, "spout_paths": spout_paths, "conf": conf,
            "root": DataRoot(tmp_path / "data")}


def zk_offsets(zk, group, topic):
    return {int(p): int(zk.get(f"/consumers/{group}/offsets/{topic}/{p}")[0])
            for p in zk.get_children(f"/consumers/{group}/offsets/{topic}")}


def events(root, run_id):
    return [r["event"] for r in audit.records(root, TEST_LAB.name, run_id)]


def test_zookeeper_reset_approved_then_rolled_back(dag, setup, zk):
    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve", user="approver"))
    assert dr.state == "success", states(dr)
    assert zk_offsets(zk, setup["group"], setup["topic"]) == {0: 4, 1: 6}
    recs = audit.records(setup["root"], TEST_LAB.name, dr.run_id)
    assert [r["event"] for r in recs] == ["planned", "approved", "executed", "verified"]
    executed = recs[2]
    assert [(c["partition"], c["before"], c["after"]) for c in executed["details"]["result"]["changes"]] == [
        (0, 3, 4), (1, 5, 6)]
    rollback = executed["details"]["rollback"]["conf"]
    assert rollback["source"] == "zookeeper" and rollback["offsets"] == {"0": 3, "1": 5}
    dr2 = run(dag, dict(rollback, dry_run=False), Answerer(DAG_ID, "Approve"))
    assert dr2.state == "success", states(dr2)
    assert zk_offsets(zk, setup["group"], setup["topic"]) == {0: 3, 1: 5}


def test_a_znode_changed_between_plan_and_execute_is_refused(dag, setup, zk):
    path = f"/consumers/{setup['group']}/offsets/{setup['topic']}/1"

    def commit_meanwhile(body):  # the approver has answered; a consumer commits before execute
        zk.set(path, b"7")

    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve", before_commit=commit_meanwhile))
    st = states(dr)
    assert st["execute"] == "failed", st
    assert zk_offsets(zk, setup["group"], setup["topic"]) == {0: 3, 1: 7}  # nothing written over it
    messages = " ".join(r["message"] or "" for r in audit.records(setup["root"], TEST_LAB.name, dr.run_id))
    assert "changed since the plan (version 0 -> 1)" in messages


def test_storm_reset_needs_the_topology_deactivated_and_keeps_the_json(dag, setup, zk):
    conf = dict(setup["conf"], source="storm", group=setup["spout"], partitions="0", target="offset 9")
    before = {p: zk.get(path)[0] for p, path in setup["spout_paths"].items()}

    dr = run(dag, conf)  # no confirmation: the plan refuses
    assert states(dr)["plan"] == "failed"
    assert {p: zk.get(path)[0] for p, path in setup["spout_paths"].items()} == before

    dr = run(dag, dict(conf, topology_deactivated=True), Answerer(DAG_ID, "Approve", user="approver"))
    assert dr.state == "success", states(dr)
    after = zk.get(setup["spout_paths"][0])[0]
    assert after == before[0].replace(b'"offset":2,', b'"offset":9,')  # only the offset changed
    assert zk.get(setup["spout_paths"][1])[0] == before[1]

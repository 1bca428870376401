"""runbook_stuck_reset through the approval gate, with dag.test() against the real lab.

Approvals are answered the way the REST PATCH route does (fleetlab/hitl.py): dag.test() never
applies an approval's timeout, so something has to answer.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient

from fleetkit.core import audit
from fleetkit.core import plans
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import ConsumerThread, commit, produce, wait_topic
from fleetkit.core.locks import ClusterLock, zookeeper_identity

from fleetlab.hitl import Answerer
from fleetlab.hitl import run_dag as run
from fleetlab.hitl import task_states as states
from tests.helpers import committed_offsets

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "runbook_stuck_reset"
pytestmark = pytest.mark.airflow

HOSTILE = "x; rm -rf / # `code` [link](http://evil.example) <b>bold</b> | ünï 🧨"


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


@pytest.fixture
def setup(lab, tmp_path, unique, monkeypatch):
    """A topic with 10 records per partition and a group with no live members."""
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))  # a deployment setting, not a param
    topic = unique("poison")
    group = unique(HOSTILE)
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    commit(lab.bootstrap, group, {(topic, 0): 3, (topic, 1): 5, (topic, 2): 10})
    conf = {"cluster": "labtest", "group": group, "topic": topic, "partitions": "0,1", "target": "skip 1",
            "dry_run": False}
    return {"topic": topic, "group": group, "conf": conf, "root": DataRoot(tmp_path / "data"), "lab": lab,
            "data": tmp_path / "data", "locks": tmp_path / "locks"}


def offsets(lab, group, topic):
    return committed_offsets(lab.bootstrap, group, topic)



def events(root, run_id):
    return [r["event"] for r in audit.records(root, "labtest", run_id)]



def test_dry_run_is_the_default_and_changes_nothing(dag, setup):
    conf = dict(setup["conf"])
    del conf["dry_run"]
    dr = run(dag, conf)
    st = states(dr)
    assert st["plan"] == "success" and st["dry_run_stop"] == "success"
    assert st["approve"] == "skipped" and st["execute"] == "skipped"
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 3, 1: 5, 2: 10}
    assert events(setup["root"], dr.run_id) == ["planned", "dry_run"]


def test_approve_changes_offsets_exactly_as_planned_and_rollback_restores(dag, setup):
    answer = Answerer(DAG_ID, "Approve", user="approver")
    dr = run(dag, setup["conf"], answer)
    assert dr.state == "success", states(dr)
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 4, 1: 6, 2: 10}

    # what the approver saw: subject names action + cluster, body is the plan with its digest
    plan, digest = plans.load(setup["data"] / "plans", DAG_ID, dr.run_id)
    assert "reset_offsets on cluster labtest" in answer.subject
    assert digest in answer.body and "| 0 | 3 | 0 | 10 | 4 | 7 | 6 |" in answer.body
    assert plan["changes"] == [{"target": f"{setup['topic']}-0", "before": 3, "after": 4},
                               {"target": f"{setup['topic']}-1", "before": 5, "after": 6}]

    recs = audit.records(setup["root"], "labtest", dr.run_id)
    assert [r["event"] for r in recs] == ["planned", "approved", "executed", "verified"]
    approved, executed = recs[1], recs[2]
    # who asked, named on the planned record: run_dag's requester and the user dag.test() records
    assert recs[0]["actor"] == "admin, dag_test"
    assert approved["actor"] == "approver" and approved["digest"] == digest
    assert executed["details"]["result"]["changes"] == [{"partition": 0, "before": 3, "after": 4},
                                                       {"partition": 1, "before": 5, "after": 6}]

    # roll back from the audit record: the same runbook with the previous offsets
    rollback = executed["details"]["rollback"]["conf"]
    assert rollback["target"] == "restore" and rollback["offsets"] == {"0": 3, "1": 5}
    conf = dict(rollback, dry_run=False)
    dr2 = run(dag, conf, Answerer(DAG_ID, "Approve"))
    assert dr2.state == "success", states(dr2)
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 3, 1: 5, 2: 10}


def test_reject_changes_nothing_and_is_recorded(dag, setup):
    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Reject", user="approver"))
    st = states(dr)
    assert st["approve"] == "success" and st["execute"] == "skipped" and st["verify"] == "skipped"
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 3, 1: 5, 2: 10}
    recs = audit.records(setup["root"], "labtest", dr.run_id)
    assert [r["event"] for r in recs] == ["planned", "rejected"]
    assert recs[1]["actor"] == "approver"


def test_a_plan_edited_after_approval_is_refused(dag, setup):
    path = plans.plan_path(setup["data"] / "plans", DAG_ID, "x")

    def tamper(body):
        # the approver has answered; now someone edits the stored plan before execution
        stored = sorted(path.parent.parent.glob("*/plan.json"))[-1]
        plan = json.loads(stored.read_text())
        plan["details"]["partitions"][0]["new"] = 9
        stored.write_text(json.dumps(plan))

    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve", before_commit=tamper))
    st = states(dr)
    # judged when the answer arrives (the approval is for the digest shown): nothing after it runs
    assert st["approve"] == "failed" and st["execute"] == "upstream_failed" and st["verify"] == "upstream_failed", st
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 3, 1: 5, 2: 10}
    refused = [r for r in audit.records(setup["root"], "labtest", dr.run_id) if r["event"] == "refused"]
    assert len(refused) == 1 and "stored plan changed after approval" in refused[0]["message"]
    assert _lab_lock(setup["lab"], setup["locks"]).holder() is None  # released


def test_a_group_that_came_back_to_life_is_refused(dag, setup):
    member = {}

    def revive(body):
        t = ConsumerThread(setup["lab"].bootstrap, setup["group"], [setup["topic"]], client_id="revived-1",
                           handle=lambda m: False)  # alive, never commits
        t.start()
        member["t"] = t
        admin = AdminClient(setup["lab"].spec.client_config())  # the lab's admin login
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            d = admin.describe_consumer_groups([setup["group"]])[setup["group"]].result()
            if d.members:
                return
            time.sleep(0.3)
        raise AssertionError("the revived consumer never joined")

    try:
        dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve", before_commit=revive))
    finally:
        if "t" in member:
            member["t"].stop()
    assert states(dr)["execute"] == "failed"
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 3, 1: 5, 2: 10}
    refused = [r for r in audit.records(setup["root"], "labtest", dr.run_id) if r["event"] == "refused"]
    assert "live member(s) (clients: revived-1); it must be Empty or Dead" in refused[0]["message"]


def _lab_lock(lab, lock_dir) -> ClusterLock:
    """The lab cluster's lock: Kafka 0.9 has no cluster id, the lock is keyed by ZooKeeper and chroot."""
    return ClusterLock(lock_dir, zookeeper_identity(lab.spec.zk_hosts, lab.spec.chroot), "labtest")


def test_one_destructive_runbook_per_cluster(dag, setup, tmp_path):
    lock = _lab_lock(setup["lab"], tmp_path / "locks")
    lock.acquire("other_dag/other_run", "other_dag", "other_run")
    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve"))
    st = states(dr)
    assert st["lock"] == "failed" and st["execute"] in ("upstream_failed", "skipped")
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 3, 1: 5, 2: 10}
    refused = [r for r in audit.records(setup["root"], "labtest", dr.run_id) if r["event"] == "refused"]
    assert "holder run 'other_run' of DAG 'other_dag' is no longer running" in refused[0]["message"]
    assert lock.holder()["owner"] == "other_dag/other_run"  # not released by the refused run


def test_a_plan_of_a_group_with_live_members_says_it_would_be_refused_before_anyone_approves(dag, setup):
    """Kafka refuses an offset change of a group with live members: the plan says so on the
    approval page (and in the plan task's log) before anyone approves, with what to do first."""
    from fleetkit.core.render import render

    t = ConsumerThread(setup["lab"].bootstrap, setup["group"], [setup["topic"]], client_id="still-running-1",
                       handle=lambda m: False)  # alive, never commits
    t.start()
    try:
        admin = AdminClient(setup["lab"].spec.client_config())
        deadline = time.monotonic() + 60
        while not admin.describe_consumer_groups([setup["group"]])[setup["group"]].result().members:
            assert time.monotonic() < deadline, "the consumer never joined"
            time.sleep(0.3)
        dr = run(dag, {k: v for k, v in setup["conf"].items() if k != "dry_run"})  # a dry run: the plan only
    finally:
        t.stop()
    assert states(dr)["plan"] == "success"
    plan, digest = plans.load(setup["data"] / "plans", DAG_ID, dr.run_id)
    (line,) = plan["refused_now"]
    assert "live member(s) (clients: still-running-1)" in line and "Stop the group's consumers first" in line
    body = render("plan.md.j2", plan=plan, digest=digest, details_table=None, timeout="1 h")
    assert body.index("### Refused if approved now") < body.index("### What will change")
    assert "still\\-running\\-1" in body
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 3, 1: 5, 2: 10}


def test_the_gate_keeps_its_lock_journal_and_audit_heads_in_the_shared_state(dag, setup, pg_state, monkeypatch):
    """FLEET_STATE_CONN_ID set: the gate's tasks lock, journal and audit in the database (nothing in
    the lock folder, no journal file); a lock another host holds there refuses the run."""
    from fleetkit.core import journal
    from fleetkit.core.runbook import GATE_SEQ, Runbook

    db = pg_state.db
    monkeypatch.setenv("FLEET_STATE_CONN_ID", db.conn_id)
    monkeypatch.setenv(f"AIRFLOW_CONN_{db.conn_id.upper()}", json.dumps({
        "conn_type": "postgres", "host": db.host, "port": db.port, "login": db.user, "password": db.password,
        "schema": db.dbname, "extra": {"state_schema": db.schema}}))
    other_host = _lab_lock(setup["lab"], setup["locks"].parent / "another-host-locks")
    other_host.acquire("other_dag/other_run", "other_dag", "other_run")
    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve"))
    assert states(dr)["lock"] == "failed" and offsets(setup["lab"], setup["group"], setup["topic"])[0] == 3
    assert other_host.clear()["owner"] == "other_dag/other_run"

    dr = run(dag, setup["conf"], Answerer(DAG_ID, "Approve", user="approver"))
    assert dr.state == "success", states(dr)
    assert offsets(setup["lab"], setup["group"], setup["topic"]) == {0: 4, 1: 6, 2: 10}
    rb = Runbook(capability="stuck", action="reset_offsets", dag_id=DAG_ID, run_id=dr.run_id, cluster="labtest",
                 data_root=str(setup["data"]), lock_dir=str(setup["locks"]))
    entries = journal.read_journal(rb.journal)
    assert entries[GATE_SEQ]["status"] == "done" and not Path(rb.journal).exists()
    assert _lab_lock(setup["lab"], setup["locks"]).holder() is None and not setup["locks"].exists()
    assert [r["event"] for r in audit.records(setup["root"], "labtest", dr.run_id)] == \
        ["planned", "approved", "executed", "verified"]
    assert all(rep.ok for rep in audit.verify(setup["root"])) and not audit._root_folder(setup["root"]).exists()

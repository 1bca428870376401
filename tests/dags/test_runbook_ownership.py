"""runbook_ownership through the approval gate, with dag.test() against the real lab:
a live group's coordinator moves to another in-sync replica and the group is served again; dry run
changes nothing; a leader that moved between plan and approval makes the executor refuse; the
trim hand-over starts runbook_trim without touching the cluster."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetkit.core import audit
from fleetkit.clients import leadership
from fleetkit.core import plans
from fleetkit.core.partitioning import partition_for
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import ConsumerThread, produce, wait_topic

from fleetlab.hitl import Answerer
from fleetlab.hitl import run_dag as run
from fleetlab.hitl import task_states as states

REPO = Path(__file__).resolve().parents[2]
DAG_ID = "runbook_ownership"
OFFSETS = "__consumer_offsets"
pytestmark = [pytest.mark.airflow, pytest.mark.lab]


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


@pytest.fixture
def live_group(lab, tmp_path, unique, monkeypatch):
    """A group with a live member, leaders balanced, the group's partition and its state."""
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))  # a deployment setting, not a param
    with lab.zookeeper() as zk:
        leadership.elect_preferred_leaders(zk, OFFSETS)
    topic, group = unique("rec"), unique("recovery 'ü😀' $x")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 3, 1: 3, 2: 3})
    member = ConsumerThread(lab.bootstrap, group, [topic], client_id="recovery-1")
    member.start()
    time.sleep(3)
    p = partition_for(group, 50)
    with lab.zookeeper() as zk:
        st = leadership.state(zk, OFFSETS, p)
    conf = {"cluster": "labtest", "group": group, "partition": -1, "action": "move_leader", "target_broker": -1,
            "dry_run": False, "evidence_run": "", "replica_order": ""}
    yield {"group": group, "partition": p, "state": st, "conf": conf, "root": DataRoot(tmp_path / "data"),
           "data": tmp_path / "data"}
    member.stop()
    with lab.zookeeper() as zk:
        leadership.elect_preferred_leaders(zk, OFFSETS)




def test_dry_run_is_the_default_and_changes_nothing(dag, lab, live_group):
    """The default (dry run) with no dry_run in the conf (tests/conftest.py puts the DAG's params
    back after every test: dag.test() would otherwise keep a run's conf as the next default)."""
    conf = dict(live_group["conf"])
    del conf["dry_run"]
    dr = run(dag, conf)
    st = states(dr)
    assert st["plan"] == "success" and st["dry_run_stop"] == "success" and st["execute"] == "skipped"
    assert st["start_trim_runbook"] == "skipped"
    with lab.zookeeper() as zk:
        now = leadership.state(zk, OFFSETS, live_group["partition"])
    assert (now.leader, now.leader_epoch) == (live_group["state"].leader, live_group["state"].leader_epoch)


def test_move_leader_moves_the_coordinator_and_the_group_is_served(dag, lab, live_group):
    p, before = live_group["partition"], live_group["state"]
    with lab.zookeeper() as zk:
        original = leadership.assignment(zk, OFFSETS)[p]
    target = original[-1]  # the last replica: moving back to the first would not restore the order by itself
    answer = Answerer(DAG_ID, "Approve")
    dr = run(dag, dict(live_group["conf"], target_broker=target), answer)
    assert dr.state == "success", states(dr)
    plan, _ = plans.load(live_group["data"] / "plans", DAG_ID, dr.run_id)
    with lab.zookeeper() as zk:
        after = leadership.state(zk, OFFSETS, p)
        replicas = leadership.assignment(zk, OFFSETS)[p]
    assert after.leader == target and after.leader_epoch > before.leader_epoch
    assert replicas == plan["details"]["new_order"] == [target] + original[:-1]  # exactly the approved order
    # each step in the gate's execute journal, between the gate's own start and end
    from fleetkit.core.journal import journal_path, read_journal

    entries = read_journal(journal_path(live_group["data"], "ownership", DAG_ID, dr.run_id,
                                        "labtest"))
    assert [(e.get("step"), e["status"]) for e in entries.values()] == [
        ("execute", "done"), ("reorder_replicas", "done"), ("preferred_election", "done")]
    # the approver saw the evidence: expected vs named coordinator for the group, the partition
    shown = answer.body.replace("\\", "")  # the body is Markdown-escaped
    assert f"partition**: {OFFSETS}-{p} (of 50)" in shown
    assert f"expected coordinator {before.leader}, named {before.leader}, answers Stable: OK" in shown
    recs = audit.records(live_group["root"], "labtest", dr.run_id)
    assert [r["event"] for r in recs] == ["planned", "approved", "executed", "verified"]
    res = recs[2]["details"]["result"]
    assert res["leader_before"] == before.leader and res["leader_after"] == target
    rollback = recs[2]["details"]["rollback"]["conf"]
    assert (rollback["target_broker"], rollback["replica_order"]) == (before.leader, ",".join(map(str, original)))
    # the group is served by its new coordinator (verify waited for that; check it independently)
    from tests.helpers import admin_kafka

    k = admin_kafka(lab.spec)
    try:
        d = k.describe_groups([live_group["group"]])[live_group["group"]]
    finally:
        k.close()
    assert d.coordinator_id == target and d.error is None
    # the rollback (its conf from the executed record, behind an approval): leader and order from before
    back = run(dag, dict(live_group["conf"], **{k: v for k, v in rollback.items() if k != "cluster"}),
               Answerer(DAG_ID, "Approve"))
    assert back.state == "success", states(back)
    with lab.zookeeper() as zk:
        assert leadership.assignment(zk, OFFSETS)[p] == original
        assert leadership.state(zk, OFFSETS, p).leader == before.leader


def test_a_leader_change_after_the_plan_is_refused(dag, lab, live_group):
    p, before = live_group["partition"], live_group["state"]

    failures = []

    def move_meanwhile(_body):  # the approver answers; before the executor runs, the leader moves
        try:
            with lab.zookeeper() as zk:
                other = [b for b in before.isr if b != before.leader][-1]
                leadership.move_leader(zk, OFFSETS, p, other)
        except Exception as e:  # noqa: BLE001 - reported below (raising here would leave the run waiting)
            failures.append(repr(e))

    dr = run(dag, live_group["conf"], Answerer(DAG_ID, "Approve", before_commit=move_meanwhile))
    assert failures == []
    assert states(dr)["execute"] == "failed"
    recs = audit.records(live_group["root"], "labtest", dr.run_id)
    assert recs[-1]["event"] == "refused" and "changed since the plan" in recs[-1]["message"]


def test_group_and_partition_must_agree(dag, live_group):
    conf = dict(live_group["conf"], partition=(live_group["partition"] + 1) % 50)
    dr = run(dag, conf)
    assert states(dr)["plan"] == "failed"


def test_trim_handover_starts_the_trim_runbook_and_changes_nothing(dag, lab, live_group):
    conf = dict(live_group["conf"], action="trim_handover", dry_run=True)
    dr = run(dag, conf)
    st = states(dr)
    assert st["start_trim_runbook"] == "success" and st["dry_run_stop"] == "skipped", st
    plan, _ = plans.load(live_group["data"] / "plans", DAG_ID, dr.run_id)
    assert plan["changes"] == [] and plan["details"]["partition"] == live_group["partition"]
    # the trim run TriggerDagRunOperator started: the hand-over passed on who requested the
    # recovery, and no fleet file or data root
    from sqlalchemy import select

    from airflow.models.dagrun import DagRun
    from airflow.utils.session import create_session

    from fleetkit.core.runbook import requesters

    with create_session() as session:
        trim = session.scalars(select(DagRun).where(DagRun.dag_id == "runbook_trim",
                                                    DagRun.run_type == "operator_triggered")
                               .order_by(DagRun.id.desc())).first()
        trim_conf, trim_user = dict(trim.conf), trim.triggering_user_name
    assert trim_conf == {"cluster": "labtest", "partitions": str(live_group["partition"]), "dry_run": True,
                         "requested_by": "admin"}
    # a deployment's execution API gives the child its parent's triggering user; dag.test()'s in-process
    # API names no task instance in its token, so here the child has none: requested_by alone names
    # who asked, and without it any listed approver could approve the trim
    assert trim_user is None
    assert requesters(trim_conf, trim_user) == ("admin",)


def test_restart_broker_on_the_lab_brings_it_back_and_the_group_is_served(dag, lab, live_group):
    p, before = live_group["partition"], live_group["state"]
    conf = dict(live_group["conf"], action="restart_broker")
    dr = run(dag, conf, Answerer(DAG_ID, "Approve"))
    assert dr.state == "success", states(dr)
    recs = audit.records(live_group["root"], "labtest", dr.run_id)
    assert [r["event"] for r in recs] == ["planned", "approved", "executed", "verified"]
    assert recs[2]["details"]["result"]["restarted"] == before.leader
    with lab.zookeeper() as zk:
        now = leadership.state(zk, OFFSETS, p)
        assert before.leader in zk.broker_ids() and before.leader in now.isr
    # the controller moved leadership away while the broker was down (no automatic rebalance back)
    assert now.leader_epoch > before.leader_epoch


def test_the_lock_is_the_clusters_and_a_gone_holder_is_reported_not_stolen(dag, lab, live_group, tmp_path, monkeypatch):
    """Two fleet-file names of one cluster share its lock (0.9: keyed by ZooKeeper ensemble and
    chroot); a holder run that does not exist any more is reported with how to clear the lock."""
    import copy

    import yaml

    from fleetctl import cli
    from fleetkit.core.locks import ClusterLock

    from fleet_airflow import clusters

    doc = lab.own_fleet()
    alias = copy.deepcopy(doc["clusters"][0])
    alias["name"] = "labtest-alias"
    doc["clusters"].append(alias)
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(doc))
    from fleetkit.core.fleet import load_fleet

    locks = tmp_path / "locks"
    with clusters.connected(load_fleet(fleet_file).cluster("labtest-alias")) as (kafka, zk):
        held = ClusterLock.for_cluster(locks, load_fleet(fleet_file).cluster("labtest-alias"), kafka, zk)
    assert held.identity.startswith("zookeeper:") and held.identity.endswith("/kafka")
    held.acquire(f"{DAG_ID}/manual__gone", DAG_ID, "manual__gone")
    with lab.zookeeper() as zk:
        order_before = leadership.assignment(zk, OFFSETS)[live_group["partition"]]

    monkeypatch.setenv("FLEET_FILE", str(fleet_file))  # a deployment setting, not a param
    dr = run(dag, live_group["conf"], Answerer(DAG_ID, "Approve"))
    st = states(dr)
    assert st["lock"] == "failed" and st["execute"] in ("upstream_failed", "skipped"), st
    with lab.zookeeper() as zk:
        now = leadership.state(zk, OFFSETS, live_group["partition"])
        assert leadership.assignment(zk, OFFSETS)[live_group["partition"]] == order_before
    assert (now.leader, now.leader_epoch) == (live_group["state"].leader, live_group["state"].leader_epoch)
    refused = [r for r in audit.records(live_group["root"], "labtest", dr.run_id) if r["event"] == "refused"]
    assert "holder run 'manual__gone' of DAG 'runbook_ownership' is no longer running (state no such " \
           "run)" in refused[0]["message"]
    assert "clear it with fleetctl lock clear labtest-alias" in refused[0]["message"]
    assert held.holder()["run_id"] == "manual__gone"  # never stolen, not released by the refused run
    monkeypatch.setenv("FLEET_AIRFLOW_URL", "http://127.0.0.1:9")  # no api-server here: --force after checking
    assert cli.main(["lock", "clear", "labtest-alias", "--lock-dir", str(locks), "--force"]) == 0
    assert held.holder() is None


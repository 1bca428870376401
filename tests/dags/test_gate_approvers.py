"""Who may approve a destructive runbook, with dag.test() of runbook_stuck_reset against the real
lab: the approvers are the fleet file's (none: no plan), the requester never approves their own run,
the decision is the one Airflow's HITL record gave the approval task (never XCom alone), and the
fleet file and data root come from the deployment, never from the trigger conf.

dag.test() records every run as triggered by "dag_test"; fleetlab.hitl.run_dag names "admin" as the
requester (conf `requested_by`) unless told otherwise.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import commit, produce, wait_topic

from tests.helpers import committed_offsets
from fleetlab.hitl import Answerer, MarkSuccess
from fleetlab.hitl import run_dag as run
from fleetlab.hitl import task_states as states

DAG_ID = "runbook_stuck_reset"
pytestmark = [pytest.mark.airflow, pytest.mark.lab]
BEFORE = {0: 3, 1: 5, 2: 10}


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag(DAG_ID)


@pytest.fixture
def case(lab, tmp_path, unique, monkeypatch):
    """A stopped group on a fresh topic; the data root and locks of this test (deployment settings)."""
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    topic, group = unique("appr"), unique("approvers 'q' $(x) ünï")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    commit(lab.bootstrap, group, {(topic, 0): 3, (topic, 1): 5, (topic, 2): 10})
    conf = {"cluster": "labtest", "group": group, "topic": topic, "partitions": "0,1", "target": "skip 1",
            "dry_run": False}
    return {"lab": lab, "topic": topic, "group": group, "conf": conf, "root": DataRoot(tmp_path / "data"),
            "tmp": tmp_path, "monkeypatch": monkeypatch}


def offsets(case) -> dict:
    return committed_offsets(case["lab"].bootstrap, case["group"], case["topic"])


def records(case, run_id) -> list[dict]:
    return audit.records(case["root"], "labtest", run_id)


def fleet_file_with(case, **cluster) -> Path:
    """A copy of the test fleet file with the cluster's fields changed, made the deployment's."""
    doc = yaml.safe_load(case["lab"].fleet_file.read_text())
    doc["clusters"][0].update(cluster)
    for k, v in list(doc["clusters"][0].items()):
        if v is None:
            del doc["clusters"][0][k]
    path = case["tmp"] / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True))
    case["monkeypatch"].setenv("FLEET_FILE", str(path))
    return path


def refused(case, dr) -> dict:
    recs = [r for r in records(case, dr.run_id) if r["event"] == "refused"]
    assert len(recs) == 1, records(case, dr.run_id)
    return recs[0]


def test_another_listed_approver_executes(dag, case):
    dr = run(dag, case["conf"], Answerer(DAG_ID, "Approve", user="approver"))
    assert dr.state == "success", states(dr)
    assert offsets(case) == {0: 4, 1: 6, 2: 10}
    recs = records(case, dr.run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [
        # planned: who asked (run_dag's requester, then the user dag.test() records: dag_test)
        ("planned", "admin, dag_test"), ("approved", "approver"), ("executed", "approver"), ("verified", None)]


def test_self_approval_is_refused(dag, case):
    # admin asked for the run (conf requested_by), admin answers: a listed approver, but the requester
    dr = run(dag, case["conf"], Answerer(DAG_ID, "Approve", user="admin"), requested_by="admin")
    st = states(dr)
    # the answer is judged when it arrives: never recorded as "approved" (what a resume outside
    # Airflow once trusted), the approval task fails, nothing after it runs
    assert st["approve"] == "failed" and st["execute"] == "upstream_failed", st
    assert offsets(case) == BEFORE
    rec = refused(case, dr)
    assert rec["actor"] == "admin" and "self-approval: 'admin' requested this run" in rec["message"]
    assert [r["event"] for r in records(case, dr.run_id)] == ["planned", "refused"]


def test_the_triggering_user_cannot_approve_even_when_the_conf_names_another(dag, case):
    # dag.test() records the run as triggered by "dag_test": list it as an approver, name someone
    # else in requested_by, and let dag_test answer: the triggering user still counts as a requester
    fleet_file_with(case, approvers=["dag_test", "approver", "admin"])
    answer = Answerer(DAG_ID, "Approve", user="dag_test")  # written to the database: no assignee check
    dr = run(dag, case["conf"], answer, requested_by="approver")
    assert answer.assignees == [{"id": "admin", "name": "admin"}]  # Airflow would let only admin answer
    assert states(dr)["approve"] == "failed" and states(dr)["execute"] == "upstream_failed"
    assert offsets(case) == BEFORE
    rec = refused(case, dr)
    assert rec["actor"] == "dag_test" and "self-approval: 'dag_test' requested this run" in rec["message"]
    assert rec["details"]["requested_by"] == ["approver", "dag_test"]


def test_an_approver_not_listed_is_refused(dag, case):
    dr = run(dag, case["conf"], Answerer(DAG_ID, "Approve", user="mallory"))
    assert states(dr)["approve"] == "failed" and states(dr)["execute"] == "upstream_failed"
    assert offsets(case) == BEFORE
    rec = refused(case, dr)
    assert rec["actor"] == "mallory"
    assert "'mallory' is not an approver of cluster 'labtest'" in rec["message"]
    assert "clusters[labtest].approvers: admin, approver" in rec["message"]


def test_an_approval_marked_success_by_hand_with_a_forged_xcom_executes_nothing(dag, case):
    forged = {"chosen_options": ["Approve"], "params_input": {},
              "responded_by_user": {"id": "approver", "name": "approver"}, "responded_at": "2026-01-01T00:00:00+00:00"}
    marker = MarkSuccess(DAG_ID, forged)
    marker.start()
    dr = dag.test(run_conf=dict(case["conf"], requested_by="admin"))
    marker.join(5)
    assert marker.error is None and marker.done.is_set()
    st = states(dr)
    assert st["approve"] == "success" and st["execute"] == "failed", st
    assert offsets(case) == BEFORE
    rec = refused(case, dr)
    assert rec["actor"] == "unknown"
    assert "recorded no answer from Airflow's HITL record" in rec["message"]
    assert rec["details"]["xcom_claimed"]["responded_by_user"]["name"] == "approver"  # what XCom claimed
    assert [r["event"] for r in records(case, dr.run_id)] == ["planned", "refused"]


def test_no_approvers_no_plan_even_in_a_dry_run(dag, case):
    path = fleet_file_with(case, approvers=None)
    dr = run(dag, dict(case["conf"], dry_run=True))
    assert states(dr)["plan"] == "failed" and states(dr)["approve"] != "success"
    rec = refused(case, dr)
    assert f"{path}: clusters[labtest].approvers" in rec["message"]
    assert "'approvers'" in rec["message"] and "required for destructive runbooks" in rec["message"]
    assert rec["actor"] == "admin, dag_test"
    assert not list((case["tmp"] / "data" / "plans").rglob("plan.json"))


def test_when_every_approver_requested_the_run_nobody_is_asked(dag, case):
    fleet_file_with(case, approvers=["admin"])
    dr = run(dag, case["conf"], requested_by="admin")
    st = states(dr)
    assert st["plan"] == "success" and st["approve"] == "failed" and st["execute"] != "success", st
    assert offsets(case) == BEFORE
    rec = refused(case, dr)
    assert "every approver of cluster 'labtest' requested this run (admin, dag_test)" in rec["message"]


@pytest.mark.parametrize("key", ["fleet_file", "data_root"])
def test_the_conf_cannot_choose_the_fleet_file_or_the_data_root(dag, case, key):
    # a fleet file of the trigger's own, listing the trigger as the only approver: never read
    evil = case["tmp"] / "evil.yaml"
    doc = yaml.safe_load(case["lab"].fleet_file.read_text())
    doc["clusters"][0]["approvers"] = ["mallory"]
    evil.write_text(yaml.safe_dump(doc))
    value = str(evil) if key == "fleet_file" else str(case["tmp"] / "elsewhere")
    dr = run(dag, dict(case["conf"], **{key: value}))
    assert states(dr)["plan"] == "failed"
    assert offsets(case) == BEFORE
    rec = refused(case, dr)  # in the deployment's data root
    assert f"the run conf names '{key}'" in rec["message"] and "deployment setting" in rec["message"]
    assert not Path(case["tmp"] / "elsewhere").exists()


def test_a_cli_rollback_names_no_requester_the_trigger_is_the_requester(dag, case, capsys):
    """The rollback conf carries no `requested_by` (a name anyone could write): whoever triggers
    it is the requester (the CLI triggers as the caller's own Airflow user: tests/ui). Here the
    dag.test() stand-in for that caller is the conf's requested_by="approver"."""
    from fleetctl.cli import main

    dr = run(dag, case["conf"], Answerer(DAG_ID, "Approve", user="approver"))
    assert dr.state == "success", states(dr)
    executed = next(r for r in records(case, dr.run_id) if r["event"] == "executed")

    assert main(["audit", "rollback", executed["record_id"], "--execute", "--print-only"]) == 0
    conf = json.loads(capsys.readouterr().out.split(" conf ", 1)[1])
    assert "requested_by" not in conf and conf["dry_run"] is False
    assert "fleet_file" not in conf and "data_root" not in conf
    # the one who asked for the rollback answers it: refused, offsets stay where the run left them
    dr2 = run(dag, conf, Answerer(DAG_ID, "Approve", user="approver"), requested_by="approver")
    assert states(dr2)["approve"] == "failed" and states(dr2)["execute"] == "upstream_failed"
    assert "self-approval: 'approver' requested this run" in refused(case, dr2)["message"]
    assert offsets(case) == {0: 4, 1: 6, 2: 10}
    # another listed approver answers: the rollback restores the offsets
    dr3 = run(dag, conf, Answerer(DAG_ID, "Approve", user="admin"), requested_by="approver")
    assert dr3.state == "success", states(dr3)
    assert offsets(case) == BEFORE
    assert [(r["event"], r["actor"]) for r in records(case, dr3.run_id)][1:3] == [
        ("approved", "admin"), ("executed", "admin")]

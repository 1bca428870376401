"""The approval gate under a real Airflow: REST approval (no database write), the timeout under the
real scheduler, and a person clicking Approve in headless Chromium. Runs are triggered as "admin"
and approved as "approver" (both listed approvers of the test fleet file); the services read the
fleet file and the data root from their environment (tests/conftest.py), never from the conf."""

from __future__ import annotations

import os
import urllib.error

import pytest

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import commit, produce, wait_topic
from tests.helpers import committed_offsets
from tests.ui.approvals import (answer, approve_in_browser, cli_rollback, finished, pending_approval, q, settle, task_states,
                                trigger, unpause, wait_for)

DAG_ID = "runbook_stuck_reset"
pytestmark = pytest.mark.airflow


@pytest.fixture
def case(lab, airflow_server, unique):
    topic, group = unique("ui"), unique("ui-group")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    commit(lab.bootstrap, group, {(topic, 0): 2, (topic, 1): 2, (topic, 2): 2})
    conf = {"cluster": "labtest", "group": group, "topic": topic, "partitions": "0", "target": "offset 7",
            "dry_run": False}
    case = {"api": airflow_server.api, "dag_id": DAG_ID, "topic": topic, "group": group, "conf": conf, "lab": lab,
            "airflow": airflow_server, "root": DataRoot(os.environ["FLEET_DATA_ROOT"])}
    unpause(case)
    return case


def test_approve_through_the_rest_api(case):
    run_id = trigger(case)
    detail = wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    assert "reset_offsets on cluster labtest" in detail["subject"]
    assert "Plan digest: `sha256:" in detail["body"] and "| 0 | 2 | 0 | 10 | 7 | 8 | 3 |" in detail["body"]
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 2, 1: 2, 2: 2}

    assert [u["name"] for u in detail["assigned_users"]] == ["approver"]  # admin triggered the run

    settle(case, run_id)
    with pytest.raises(urllib.error.HTTPError) as own:  # the requester is not asked: Airflow refuses the answer
        answer(case, run_id, "Approve", user="admin")
    assert own.value.code == 403
    answer(case, run_id, "Approve", user="approver")
    with pytest.raises(urllib.error.HTTPError) as again:  # an answered request cannot be answered twice
        answer(case, run_id, "Reject", user="approver")
    assert again.value.code == 409
    assert wait_for(lambda: finished(case, run_id), 180, "the run to finish") == "success"
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 7, 1: 2, 2: 2}
    events = [(r["event"], r["actor"]) for r in audit.records(case["root"], "labtest", run_id)]
    assert events == [("planned", "admin"), ("approved", "approver"), ("executed", "approver"), ("verified", None)]


def test_an_approval_marked_success_through_the_rest_api_executes_nothing(case):
    """A user who may not approve marks the waiting approval task success and writes the XCom an
    answer would have left: the executor reads the approval record, finds no answer, refuses."""
    run_id = trigger(case)
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    settle(case, run_id)
    base = f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances/approve"
    forged = {"chosen_options": ["Approve"], "params_input": {},
              "responded_by_user": {"id": "approver", "name": "approver"}}
    case["api"]("POST", f"{base}/xcomEntries", {"key": "return_value", "value": forged}, user="admin")
    case["api"]("PATCH", base, {"new_state": "success"}, user="admin")
    assert wait_for(lambda: finished(case, run_id), 180, "the run to finish") == "failed"
    tis = task_states(case, run_id)
    assert tis["approve"] == "success" and tis["execute"] == "failed", tis
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 2, 1: 2, 2: 2}
    recs = audit.records(case["root"], "labtest", run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("refused", "unknown")]
    assert "recorded no answer from Airflow's HITL record" in recs[1]["message"]


def test_a_cli_rollback_is_triggered_as_the_caller_who_then_cannot_approve_it(case, capsys, monkeypatch):
    """`fleetctl audit rollback` triggers the rollback with the caller's own Airflow identity (here
    "approver", who approved the run it rolls back), so Airflow records them as the triggering
    user: the gate asks only the other approver, and Airflow refuses the caller's own answer."""
    run_id = trigger(case)
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    settle(case, run_id)
    answer(case, run_id, "Approve", user="approver")
    assert wait_for(lambda: finished(case, run_id), 180, "the run to finish") == "success"
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 7, 1: 2, 2: 2}
    executed = next(r for r in audit.records(case["root"], "labtest", run_id) if r["event"] == "executed")

    rollback_id = cli_rollback(case, executed["record_id"], monkeypatch, capsys, "approver")
    run = case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(rollback_id)}")
    assert "requested_by" not in run["conf"] and "data_root" not in run["conf"]
    assert run["triggering_user_name"] == "approver"  # the caller, not a shared account
    detail = wait_for(lambda: pending_approval(case, rollback_id), 180, "the rollback's approval request")
    assert [u["name"] for u in detail["assigned_users"]] == ["admin"]
    settle(case, rollback_id)
    with pytest.raises(urllib.error.HTTPError) as own:  # the caller may not approve their own rollback
        answer(case, rollback_id, "Approve", user="approver")
    assert own.value.code == 403
    answer(case, rollback_id, "Approve", user="admin")
    assert wait_for(lambda: finished(case, rollback_id), 180, "the rollback to finish") == "success"
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 2, 1: 2, 2: 2}
    events = [(r["event"], r["actor"]) for r in audit.records(case["root"], "labtest", rollback_id)]
    assert events[1:3] == [("approved", "admin"), ("executed", "admin")]


def test_a_lock_held_by_a_running_run_is_never_cleared(case, capsys, monkeypatch, tmp_path):
    """`fleetctl lock clear --force` asks Airflow (as the caller) whether the holder run still runs:
    a run waiting for its approval is running, so its lock stays, and nothing is audited."""
    from fleetctl.cli import main
    from fleetkit.core.locks import ClusterLock, held_locks
    from fleetlab.airflow_services import passwords

    run_id = trigger(case)
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    locks = tmp_path / "locks"
    ClusterLock(locks, "fleet-name:labtest", "labtest").acquire(f"{DAG_ID}/{run_id}", DAG_ID, run_id)
    monkeypatch.setenv("FLEET_AIRFLOW_USER", "admin")
    monkeypatch.setenv("FLEET_AIRFLOW_PASSWORD", passwords()["admin"])
    capsys.readouterr()
    assert main(["lock", "clear", "labtest", "--lock-dir", str(locks), "--force"]) == 2
    assert "its Airflow run is still running" in capsys.readouterr().err
    assert len(held_locks(locks)) == 1
    assert not [r for r in audit.records(case["root"], "labtest", run_id) if r["event"] == "lock_cleared"]
    settle(case, run_id)  # leave nothing waiting: reject it, the run ends
    answer(case, run_id, "Reject", user="approver")
    assert wait_for(lambda: finished(case, run_id), 180, "the run to finish") == "success"
    assert main(["lock", "clear", "labtest", "--lock-dir", str(locks), "--force"]) == 0
    assert held_locks(locks) == []


def test_no_answer_resolves_to_reject_under_the_real_scheduler(case):
    run_id = trigger(case, approval_timeout=15)
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    assert wait_for(lambda: finished(case, run_id), 120, "the timeout to resolve the run") == "success"
    tis = task_states(case, run_id)
    assert tis["approve"] == "success" and tis["execute"] == "skipped"
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 2, 1: 2, 2: 2}
    recs = audit.records(case["root"], "labtest", run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("rejected", "timeout")]


def test_a_person_approves_in_the_browser(case):
    run_id = trigger(case, target="skip 3")
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    settle(case, run_id)
    # admin triggered the run; another approver approves
    page = approve_in_browser(case, run_id, "approver", ["What will change", f"{case['topic']}-0"],
                              screenshot="approval-page.png")
    assert "Plan digest" in page
    assert wait_for(lambda: finished(case, run_id), 180, "the run to finish") == "success"
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 5, 1: 2, 2: 2}
    recs = audit.records(case["root"], "labtest", run_id)
    assert [(r["event"], r["actor"]) for r in recs][:3] == [("planned", "admin"), ("approved", "approver"),
                                                           ("executed", "approver")]


def test_an_approval_given_the_moment_the_request_appears_executes_the_plan_once(case, unique):
    """Approve, the moment the approval task parks: the run executes its plan once, whether or not
    the scheduler failed the resumed try (then the retry takes the answer Airflow held). Each run
    resets a group of its own; runs go on until one was retried (at most five: the race struck 13 and
    14 of 20 runs in the measured runs), and every run is checked: it succeeds, moves its group's
    offset as planned, and its audit holds one approval and one execution."""
    import time

    retried = 0
    for attempt in range(5):
        group = unique("ui-fast")
        commit(case["lab"].bootstrap, group, {(case["topic"], 0): 2, (case["topic"], 1): 2, (case["topic"], 2): 2})
        run_id = trigger(case, group=group)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            ti = case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances/approve")
            if ti["state"] in ("awaiting_input", "deferred") and pending_approval(case, run_id):
                answer(case, run_id, "Approve", user="approver")  # the moment it parks: no settle()
                break
            time.sleep(0.2)
        else:
            pytest.fail(f"{run_id}: the approval request never appeared")
        assert wait_for(lambda: finished(case, run_id), 300, "the run to finish") == "success", \
            task_states(case, run_id)
        assert committed_offsets(case["lab"].bootstrap, group, case["topic"]) == {0: 7, 1: 2, 2: 2}
        events = [(r["event"], r["actor"]) for r in audit.records(case["root"], "labtest", run_id)]
        assert events == [("planned", "admin"), ("approved", "approver"), ("executed", "approver"),
                          ("verified", None)], events
        tries = case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances/approve")["try_number"]
        print(f"run {attempt + 1}: approval task tries {tries}")
        if tries > 1:
            retried += 1
            break
    print(f"runs retried after the scheduler's race: {retried} (the race is Airflow's timing, not asserted)")


def test_an_answer_given_the_moment_the_request_appears_never_fails_the_run(case):
    """A person with the approval page open may answer within a second. Airflow's scheduler may
    fail an approval task resumed before it processed the executor event of the run that parked it;
    the approval task then retries and takes the answer Airflow holds for the earlier request (read
    by the gate's trigger in the triggerer), or asks again. Twenty runs, each answered (Reject: the run ends right after, nothing changes) the moment
    its approval task parks, four at a time as the runbook allows: none fails, each is decided by
    the approver's own answer (never the timeout), given once, and each decision is audited once."""
    import time

    runs: list[str] = []
    answered: dict[str, int] = {}  # run -> how many requests of it were answered
    pending: list[str] = []
    deadline = time.monotonic() + 1500
    while (len(runs) < 20 or pending) and time.monotonic() < deadline:
        while len(runs) < 20 and len(pending) < 4:
            run_id = trigger(case)
            runs.append(run_id)
            pending.append(run_id)
        for run_id in list(pending):
            if finished(case, run_id):
                pending.remove(run_id)
                continue
            ti = case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances/approve")
            if ti["state"] in ("awaiting_input", "deferred") and pending_approval(case, run_id):
                try:
                    answer(case, run_id, "Reject", user="approver")  # the moment it parks: no settle()
                    answered[run_id] = answered.get(run_id, 0) + 1
                except urllib.error.HTTPError as e:  # answered between the two reads: not again
                    assert e.code == 409, e
        time.sleep(0.3)
    assert len(runs) == 20 and not pending, f"{len(pending)} of 20 runs still running after 25 minutes"
    states = {r: finished(case, r) for r in runs}
    failed = {r: task_states(case, r) for r, state in states.items() if state != "success"}
    tries = {r: case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(r)}/taskInstances/approve")["try_number"]
             for r in runs}
    assert not failed, f"{len(failed)} of 20 runs failed: {failed} (approval tries: {tries})"
    assert all(task_states(case, r)["approve"] == "success" for r in runs)
    for r in runs:
        decisions = [(x["event"], x["actor"]) for x in audit.records(case["root"], "labtest", r)
                     if x["event"] in ("approved", "rejected", "refused")]
        assert decisions == [("rejected", "approver")], (r, decisions, tries[r])
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 2, 1: 2, 2: 2}
    # a retried try took the answer Airflow held for the earlier request: nobody was asked twice
    assert all(answered[r] == 1 for r in runs), {r: answered[r] for r in runs if answered[r] != 1}
    retried = {r: (tries[r], answered[r]) for r in runs if tries[r] > 1}
    print(f"runs whose approval task the scheduler failed and retried (tries, answers): {retried or 'none'}")

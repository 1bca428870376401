"""The approval gate under a real Airflow: REST approval (no database write), the timeout under the
real scheduler, and a person clicking Approve in headless Chromium. Runs are triggered as "admin"
and approved as "approver" (both listed approvers of the test fleet file); the services read the
fleet file and the data root from their environment (tests/conftest.py), never from the conf."""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.parse
from pathlib import Path

import pytest

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import commit, produce, wait_topic
from tests.helpers import committed_offsets, wait_until

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts"
DAG_ID = "runbook_reset_offsets"
pytestmark = pytest.mark.airflow


def q(s: str) -> str:
    return urllib.parse.quote(s, safe="")



def wait_for(fn, timeout, what):
    return wait_until(fn, timeout, what, interval=1, retry_on=(urllib.error.HTTPError,))


@pytest.fixture
def case(lab, airflow_server, unique):
    topic, group = unique("ui"), unique("ui-group")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    commit(lab.bootstrap, group, {(topic, 0): 2, (topic, 1): 2, (topic, 2): 2})
    api = airflow_server.api
    wait_for(lambda: api("GET", f"/api/v2/dags/{DAG_ID}"), 120, "the DAG parsed by the dag-processor")
    api("PATCH", f"/api/v2/dags/{DAG_ID}", {"is_paused": False})
    conf = {"cluster": "labtest", "group": group, "topic": topic, "partitions": "0", "target": "offset 7",
            "dry_run": False}
    return {"api": api, "topic": topic, "group": group, "conf": conf, "lab": lab, "airflow": airflow_server,
            "root": DataRoot(os.environ["FLEET_DATA_ROOT"])}


def trigger(case, user: str = "admin", **overrides) -> str:
    run = case["api"]("POST", f"/api/v2/dags/{DAG_ID}/dagRuns",
                      {"logical_date": None, "conf": dict(case["conf"], **overrides)}, user=user)
    return run["dag_run_id"]


def answer(case, run_id, option: str, user: str):
    return case["api"]("PATCH", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances/approve/-1/hitlDetails",
                       {"chosen_options": [option], "params_input": {}}, user=user)


def pending_approval(case, run_id):
    res = case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/hitlDetails?response_received=false")
    return res["hitl_details"][0] if res.get("hitl_details") else None


def settle(case, run_id):
    """Wait until the approval task is parked in awaiting_input and the scheduler has processed the
    executor event of the parking run (its log says so): Airflow 3.3.2's scheduler marks the task
    failed if an answer resumes it before that (the event then finds the task queued again). A
    person never answers that fast; a script must wait like this. Under load the event can come
    more than 6 s after the task parked."""
    wait_for(lambda: case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances/approve")
             ["state"] == "awaiting_input", 60, "the approval task to park")
    log = Path(case["airflow"].airflow_home()) / "logs" / "scheduler.out"
    event = f"task_id='approve', run_id='{run_id}', try_number=1"

    def processed():
        text = log.read_text(errors="replace") if log.exists() else ""
        return any("Received executor event" in line and event in line for line in text.splitlines())

    wait_for(processed, 90, f"the scheduler to process the parking run's executor event (in {log})")
    time.sleep(1)


def finished(case, run_id):
    state = case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}")["state"]
    return state if state in ("success", "failed") else None


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
    assert events == [("planned", None), ("approved", "approver"), ("executed", "approver"), ("verified", None)]


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
    tis = {t["task_id"]: t["state"] for t in
           case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances")["task_instances"]}
    assert tis["approve"] == "success" and tis["execute"] == "failed", tis
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 2, 1: 2, 2: 2}
    recs = audit.records(case["root"], "labtest", run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", None), ("refused", "unknown")]
    assert "recorded no answer from Airflow's HITL record" in recs[1]["message"]


def test_a_cli_rollback_is_triggered_as_the_caller_who_then_cannot_approve_it(case, capsys, monkeypatch):
    """`fleetctl audit rollback` triggers the rollback with the caller's own Airflow identity (here
    "approver", who approved the run it rolls back), so Airflow records them as the triggering
    user: the gate asks only the other approver, and Airflow refuses the caller's own answer."""
    from fleetctl.cli import main
    from fleetlab.airflow_services import passwords

    run_id = trigger(case)
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    settle(case, run_id)
    answer(case, run_id, "Approve", user="approver")
    assert wait_for(lambda: finished(case, run_id), 180, "the run to finish") == "success"
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 7, 1: 2, 2: 2}
    executed = next(r for r in audit.records(case["root"], "labtest", run_id) if r["event"] == "executed")

    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "server")  # what the CLI sets, undone after the test
    monkeypatch.setenv("FLEET_AIRFLOW_USER", "approver")
    monkeypatch.setenv("FLEET_AIRFLOW_PASSWORD", passwords()["approver"])
    capsys.readouterr()
    assert main(["audit", "rollback", executed["record_id"], "--execute"]) == 0
    out = capsys.readouterr().out
    assert passwords()["approver"] not in out
    rollback_id = out.split("triggered runbook_reset_offsets run ", 1)[1].split(" as ", 1)[0]
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
    tis = {t["task_id"]: t["state"] for t in
           case["api"]("GET", f"/api/v2/dags/{DAG_ID}/dagRuns/{q(run_id)}/taskInstances")["task_instances"]}
    assert tis["approve"] == "success" and tis["execute"] == "skipped"
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 2, 1: 2, 2: 2}
    recs = audit.records(case["root"], "labtest", run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", None), ("rejected", "timeout")]


def test_a_person_approves_in_the_browser(case):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC

    from tests.ui.browser import base_url, headless_chrome, log_in

    run_id = trigger(case, target="skip 3")
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    settle(case, run_id)

    driver = headless_chrome(f"{case['root'].path}/chrome-profile")
    ARTIFACTS.mkdir(exist_ok=True)
    base = base_url()
    try:
        wait = log_in(driver, "approver")  # admin triggered the run; another approver approves

        driver.get(f"{base}/dags/{DAG_ID}/runs/{q(run_id)}/tasks/approve/required_actions")
        wait.until(EC.presence_of_element_located((By.XPATH, "//*[contains(., 'Plan digest')]")))
        page = driver.find_element(By.TAG_NAME, "body").text
        assert "What will change" in page and f"{case['topic']}-0" in page
        driver.save_screenshot(str(ARTIFACTS / "approval-page.png"))
        button = wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space(.)='Approve']")))
        button.click()
        assert wait_for(lambda: finished(case, run_id), 180, "the run to finish") == "success"
        driver.save_screenshot(str(ARTIFACTS / "approval-done.png"))
    finally:
        driver.quit()
    assert committed_offsets(case["lab"].bootstrap, case["group"], case["topic"]) == {0: 5, 1: 2, 2: 2}
    recs = audit.records(case["root"], "labtest", run_id)
    assert [(r["event"], r["actor"]) for r in recs][:3] == [("planned", None), ("approved", "approver"),
                                                           ("executed", "approver")]

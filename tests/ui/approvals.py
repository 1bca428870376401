"""A runbook run under the real Airflow, driven as people drive it: triggered through the REST API
by one user, its approval request read and answered by another (REST or the browser). The
helpers take a `case`: a dict with "api" (the server's REST caller), "airflow" (the services
module) and "dag_id"."""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
from pathlib import Path

from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = REPO / "artifacts"


def q(s: str) -> str:
    return urllib.parse.quote(s, safe="")


def wait_for(fn, timeout, what):
    return wait_until(fn, timeout, what, interval=1, retry_on=(urllib.error.HTTPError,))


def unpause(case) -> None:
    api, dag_id = case["api"], case["dag_id"]
    wait_for(lambda: api("GET", f"/api/v2/dags/{dag_id}"), 120, "the DAG parsed by the dag-processor")
    api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})


def fail_runs_in_progress(api, dag_id: str, keep: str | None = None) -> bool:
    """Mark the DAG's queued and running runs failed, but `keep` (the run of a scheduled DAG its
    unpausing queued, say, which would otherwise go first); True when none is left."""
    runs = [r for r in api("GET", f"/api/v2/dags/{dag_id}/dagRuns?state=queued&state=running")["dag_runs"]
            if r["dag_run_id"] != keep]
    for r in runs:
        try:
            api("PATCH", f"/api/v2/dags/{dag_id}/dagRuns/{q(r['dag_run_id'])}", {"state": "failed"})
        except urllib.error.HTTPError:
            pass  # the scheduler may be updating the same row: tried again
    return not runs


def trigger(case, user: str = "admin", **overrides) -> str:
    run = case["api"]("POST", f"/api/v2/dags/{case['dag_id']}/dagRuns",
                      {"logical_date": None, "conf": dict(case["conf"], **overrides)}, user=user)
    return run["dag_run_id"]


def answer(case, run_id, option: str, user: str):
    return case["api"]("PATCH", f"/api/v2/dags/{case['dag_id']}/dagRuns/{q(run_id)}/taskInstances/approve/-1/"
                                "hitlDetails", {"chosen_options": [option], "params_input": {}}, user=user)


def pending_approval(case, run_id):
    res = case["api"]("GET", f"/api/v2/dags/{case['dag_id']}/dagRuns/{q(run_id)}/hitlDetails?response_received=false")
    return res["hitl_details"][0] if res.get("hitl_details") else None


def settle(case, run_id):
    """Wait until the approval task is parked in awaiting_input and the scheduler has processed the
    executor event of the parking run (its log says so): Airflow 3.3.2's scheduler fails the try
    an answer resumes before that (the event then finds the task queued again). The gate survives
    it (the approval task retries: test_an_answer_given_the_moment_the_request_appears_never_fails_the_run),
    but the tests that wait here check what one try answers (403, 409, the audit's exact rows).
    Under load the event can come more than 6 s after the task parked."""
    dag_id = case["dag_id"]
    wait_for(lambda: case["api"]("GET", f"/api/v2/dags/{dag_id}/dagRuns/{q(run_id)}/taskInstances/approve")
             ["state"] == "awaiting_input", 60, "the approval task to park")
    log = Path(case["airflow"].airflow_home()) / "logs" / "scheduler.out"
    event = f"task_id='approve', run_id='{run_id}', try_number=1"

    def processed():
        text = log.read_text(errors="replace") if log.exists() else ""
        return any("Received executor event" in line and event in line for line in text.splitlines())

    wait_for(processed, 90, f"the scheduler to process the parking run's executor event (in {log})")
    time.sleep(1)


def task_log(airflow_server, dag_id: str, run_id: str, task_id: str, try_number: int = 1) -> str:
    """A task's log through the REST API, as the UI shows it (one event per record)."""
    import json
    import os
    import urllib.request

    port = os.environ["FLEET_AIRFLOW_PORT"]
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/v2/dags/{dag_id}/dagRuns/{q(run_id)}/taskInstances/{task_id}/logs/"
        f"{try_number}?full_content=true",
        headers={"Accept": "application/json", "Authorization": f"Bearer {airflow_server.api_token()}"})
    with urllib.request.urlopen(req, timeout=30) as r:
        doc = json.loads(r.read())
    content = doc.get("content")
    if isinstance(content, str):
        return content
    return "\n".join(e.get("event", "") if isinstance(e, dict) else str(e) for e in content or [])


def finished(case, run_id):
    state = case["api"]("GET", f"/api/v2/dags/{case['dag_id']}/dagRuns/{q(run_id)}")["state"]
    return state if state in ("success", "failed") else None


def task_states(case, run_id) -> dict:
    return {t["task_id"]: t["state"] for t in
            case["api"]("GET", f"/api/v2/dags/{case['dag_id']}/dagRuns/{q(run_id)}/taskInstances")["task_instances"]}


def approve_in_browser(case, run_id, user: str, shows: list[str], screenshot: str | None = None) -> str:
    """`user` logs in to Airflow in headless Chromium, opens the run's Required Actions page, checks
    that it shows each text of `shows` and clicks Approve; returns the page's text."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC

    from tests.ui.browser import base_url, headless_chrome, log_in

    driver = headless_chrome(f"{case.get('browser_dir') or case['root'].path}/chrome-profile-{user}")
    try:
        # case["base_url"] / case["passwords"]: another Airflow than the tests' own (the hosts profile's)
        wait = log_in(driver, user, base=case.get("base_url"), password=(case.get("passwords") or {}).get(user))
        driver.get(f"{case.get('base_url') or base_url()}/dags/{case['dag_id']}/runs/{q(run_id)}/tasks/approve/required_actions")
        wait.until(EC.presence_of_element_located((By.XPATH, "//*[contains(., 'Plan digest')]")))
        page = driver.find_element(By.TAG_NAME, "body").text
        missing = [s for s in shows if s not in page]
        assert not missing, f"the approval page does not show {missing}:\n{page[:3000]}"
        if screenshot:
            ARTIFACTS.mkdir(exist_ok=True)
            driver.save_screenshot(str(ARTIFACTS / screenshot))
        wait.until(EC.element_to_be_clickable((By.XPATH, "//button[normalize-space(.)='Approve']"))).click()
        wait_for(lambda: case["api"]("GET", f"/api/v2/dags/{case['dag_id']}/dagRuns/{q(run_id)}/hitlDetails"
                                            "?response_received=true").get("hitl_details"),
                 60, "the browser's answer recorded")
        return page
    finally:
        driver.quit()


def cli_rollback(case, record_id: str, monkeypatch, capsys, user: str = "approver", *flags: str) -> str:
    """`fleetctl audit rollback RECORD --execute` in this process as `user` (their own Airflow
    login, as an operator runs it); returns the rollback's run id. The password never shows."""
    from fleetctl.cli import main
    from fleetlab.airflow_services import passwords

    monkeypatch.setenv("_AIRFLOW_PROCESS_CONTEXT", "server")  # what the CLI sets, undone after the test
    monkeypatch.setenv("FLEET_AIRFLOW_USER", user)
    monkeypatch.setenv("FLEET_AIRFLOW_PASSWORD", passwords()[user])
    capsys.readouterr()
    assert main(["audit", "rollback", record_id, "--execute", *flags]) == 0
    out = capsys.readouterr().out
    assert passwords()[user] not in out
    assert "\n  plan " in out and "refused if approved now" not in out, out  # the plan, said before any approval
    return out.split(f"triggered {case['dag_id']} run ", 1)[1].split(" as ", 1)[0]


def rolled_back_by_the_other_approver(case, record_id: str, monkeypatch, capsys, *flags: str) -> str:
    """`fleetctl audit rollback RECORD --execute` as "approver" (cli_rollback), its approval
    assigned to the other approver ("admin"), who approves it; returns the rollback's run id once it
    finished in success."""
    rollback_id = cli_rollback(case, record_id, monkeypatch, capsys, "approver", *flags)
    detail = wait_for(lambda: pending_approval(case, rollback_id), 180, "the rollback's approval request")
    assert [u["name"] for u in detail["assigned_users"]] == ["admin"]
    settle(case, rollback_id)
    answer(case, rollback_id, "Approve", user="admin")
    assert wait_for(lambda: finished(case, rollback_id), 240, "the rollback to finish") == "success", \
        task_states(case, rollback_id)
    return rollback_id

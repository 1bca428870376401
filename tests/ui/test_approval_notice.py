"""The approvers are told that a runbook waits for them, under the real Airflow: a real
runbook_stuck_reset run (triggered by admin through the REST API) parks its approval task, and the
approval notice reaches Slack and PagerDuty through the providers' notifiers, once, with the link to
the approval page; a hostile group name is escaped; the webhook URL and the routing key appear in
no log, no XCom, no rendered template.

What stands in for Slack and PagerDuty (tests/alert_standins.py; nothing leaves the machine, and
only the package registries are reachable from it anyway): Slack's notifier posts to the URL in its
connection, so the connection points at a recording receiver on 127.0.0.1. PagerDuty's client posts
to the fixed https://events.pagerduty.com/v2/enqueue (no base URL to change), so the scheduler
(whose LocalExecutor workers run the approval task) is restarted for this module with HTTPS_PROXY
and SSL_CERT_FILE pointing at a proxy on 127.0.0.1 that terminates TLS for events.pagerduty.com
with a certificate of a CA made here, as a deployment behind an egress proxy would be; it is
restarted without them afterwards. The connections are created as docs/operating.md says: `airflow
connections import` of a file (the secrets never on a command line)."""

from __future__ import annotations

import json
import os
import subprocess
import urllib.parse
from pathlib import Path

import pytest
import yaml

from fleetlab.traffic import commit, produce, wait_topic
from tests.alert_standins import PagerDutyProxy, Receiver
from tests.conftest import TEST_AIRFLOW_HOME, TEST_FLEET_FILE
from tests.ui.approvals import answer, finished, pending_approval, q, settle, trigger, unpause, wait_for

DAG_ID = "runbook_stuck_reset"
pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]
SLACK_CONN, PAGERDUTY_CONN = "fleet_notice_slack", "fleet_notice_pagerduty"
SLACK_PATH = "/services/T0NOTICE/B0NOTICE/webhookSecret0c4e9a71b2"
ROUTING_KEY = "R0utingKeySecret0d5f8e2c9b4a7316"


def _restart_scheduler(services) -> None:
    from fleetlab import procs

    print("scheduler:", procs.stop(services._pid_file("scheduler"), services._marker(), group=True))
    services.up(write_env_file=False)


@pytest.fixture(scope="module")
def channels(lab, airflow_server, tmp_path_factory):
    """The stand-ins, the two connections, the fleet file's alerts, and a scheduler that reaches
    PagerDuty through the proxy; everything put back afterwards."""
    services = airflow_server
    folder = tmp_path_factory.mktemp("notice")
    with Receiver() as slack, PagerDutyProxy(folder / "pki") as pagerduty:
        conns = folder / "connections.json"
        conns.touch(mode=0o600)
        conns.write_text(json.dumps({
            SLACK_CONN: {"conn_type": "slackwebhook", "password": slack.url(SLACK_PATH)},
            PAGERDUTY_CONN: {"conn_type": "pagerduty_events", "password": ROUTING_KEY}}))
        airflow = str(Path(services.__file__).resolve().parents[2] / ".venv" / "bin" / "airflow")
        out = subprocess.run([airflow, "connections", "import", "--overwrite", str(conns)], capture_output=True,
                             text=True, env=services._env(), timeout=300)
        assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
        conns.unlink()
        fleet_text = TEST_FLEET_FILE.read_text()
        doc = yaml.safe_load(fleet_text)
        doc["alerts"] = {"slack_webhook_conn_id": SLACK_CONN, "pagerduty_conn_id": PAGERDUTY_CONN,
                         "pagerduty_severity": "error"}
        TEST_FLEET_FILE.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
        saved = {k: os.environ.get(k) for k in pagerduty.env()}
        os.environ.update(pagerduty.env())
        try:
            _restart_scheduler(services)
            yield {"slack": slack, "pagerduty": pagerduty}
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            _restart_scheduler(services)
            TEST_FLEET_FILE.write_text(fleet_text)
            for conn_id in (SLACK_CONN, PAGERDUTY_CONN):
                try:
                    services.api("DELETE", f"/api/v2/connections/{conn_id}")
                except Exception as e:  # noqa: BLE001 - reported, the others still deleted
                    print(f"connection {conn_id}: {e}")


def test_the_approvers_are_told_once_with_the_link_and_nothing_secret_is_left(lab, airflow_server, channels, unique):
    slack, pagerduty = channels["slack"], channels["pagerduty"]
    topic = unique("notice")
    group = f"notice <http://evil.example|click> <!here> @channel & {unique('g')}"
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    commit(lab.bootstrap, group, {(topic, 0): 2, (topic, 1): 2, (topic, 2): 2})
    case = {"api": airflow_server.api, "dag_id": DAG_ID, "airflow": airflow_server,
            "conf": {"cluster": "labtest", "group": group, "topic": topic, "partitions": "0", "target": "offset 7",
                     "dry_run": False}}
    unpause(case)
    run_id = trigger(case)
    wait_for(lambda: pending_approval(case, run_id), 240, "the approval request")
    wait_for(lambda: slack.requests and pagerduty.events(), 60, "the approval notice")
    link = (f"{airflow_server.api_url()}/dags/{DAG_ID}/runs/{urllib.parse.quote(run_id, safe='')}"
            "/tasks/approve/required_actions")

    (post,) = slack.requests
    assert post["path"] == SLACK_PATH
    text = post["json"]["text"]
    print(text)
    head, *lines, last = text.split("\n")
    assert head.startswith("*[kafka-fleet] approval waiting: reset_offsets on cluster labtest: ")
    assert "notice &lt;http://evil.example|click&gt; &lt;!here&gt; @channel &amp; " in head
    assert lines == ["• May approve: approver", "• Requested by: admin", *lines[2:]]
    assert lines[2].startswith("• Plan digest: sha256:") and lines[3] == "• No answer within 4 h rejects the plan."
    assert last == f"<{link}|Approve or reject in Airflow>"
    assert "<" not in "\n".join([head, *lines])  # the only link is the approval page

    (event,) = pagerduty.events()
    assert event["routing_key"] == ROUTING_KEY and event["event_action"] == "trigger"
    assert event["payload"]["severity"] == "info"  # an approval waiting is not an error
    assert event["payload"]["summary"].startswith("[kafka-fleet] approval waiting: reset_offsets on cluster labtest")
    assert "<http://evil.example|click> <!here> @channel &" in event["payload"]["summary"]
    assert event["links"] == [{"href": link, "text": "Approve or reject in Airflow"}]
    assert event["dedup_key"] == f"kafka-fleet/approval/{DAG_ID}/{run_id}/approve"
    assert event["payload"]["custom_details"]["cluster"] == "labtest"

    # the answer resumes the task: nobody is told again
    settle(case, run_id)
    answer(case, run_id, "Reject", user="approver")
    assert wait_for(lambda: finished(case, run_id), 240, "the run to finish") == "success"
    assert len(slack.requests) == 1 and len(pagerduty.events()) == 1

    # the secrets: in no log of the run or of Airflow's processes, no XCom, no rendered template
    from tests.dags.test_secrets_canary import database_text

    secrets = [SLACK_PATH, SLACK_PATH.rsplit("/", 1)[1], ROUTING_KEY]
    logs = Path(TEST_AIRFLOW_HOME) / "logs"
    run_logs = [p for p in logs.rglob("*") if p.is_file() and f"run_id={run_id}" in str(p)]
    approve_log = "\n".join(p.read_text(errors="replace") for p in run_logs if "task_id=approve" in str(p))
    assert "alert sent to slack (connection fleet_notice_slack)" in approve_log, approve_log[-3000:]
    assert "alert sent to pagerduty (connection fleet_notice_pagerduty)" in approve_log
    leaks = [f"{p}: {s[:12]}..." for p in [*run_logs, *logs.glob("*.out")] for s in secrets
             if s in p.read_text(errors="replace")]
    db = database_text()
    leaks += [f"metadata database: {s[:12]}..." for s in secrets if s in db]
    assert leaks == []
    from fleet_airflow import settings
    from fleetkit.core.runbook import read_approval

    assert read_approval(settings.plans_root(), DAG_ID, run_id)["notice"]["channels"] == ["slack", "pagerduty"]

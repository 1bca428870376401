"""Alerts to Slack and PagerDuty: the fleet file's `alerts:` keys, what each channel is sent
(fleetkit.core.alerts: a hostile group name opens no link and mentions nobody), and
FleetAlertNotifier sending through the providers' own notifiers to stand-ins on 127.0.0.1
(tests/alert_standins.py: a recording receiver as the Slack webhook, an HTTPS proxy terminating
TLS for events.pagerduty.com as PagerDuty), each channel tried, a failing one logged without its
connection's secrets."""

from __future__ import annotations

import json
import logging
import re

import pytest
import structlog

from fleetkit.core import alerts
from fleetkit.core.errors import FleetConfigError
from fleetkit.core.fleet import AlertSettings, parse_fleet
from tests.alert_standins import PagerDutyProxy, Receiver

FLEET = """
version: 1
clusters: [{name: prod, kafka_version: "3.9.2", kafka_conn_id: prod_kafka}]
"""
#: a group name that tries every Slack injection (a disguised link, special mentions, a user
#: mention, an entity) and hides characters (a newline, a right-to-left override)
HOSTILE = "pay <http://evil.example|click> <!here> @channel <!channel> <@U024BE7LH> &amp; \u202etxt.exe\nnext"


def alerts_of(text: str) -> AlertSettings:
    return parse_fleet(FLEET + text, path="fleet.yaml").alerts


# -- the fleet file ---------------------------------------------------------------------------
def test_the_alert_keys_are_read():
    s = alerts_of("""
alerts:
  smtp_conn_id: smtp_default
  to: [oncall@example.com]
  slack_webhook_conn_id: fleet_slack
  pagerduty_conn_id: fleet_pagerduty
  pagerduty_severity: critical
  approval_channels: [slack]
""")
    assert (s.slack_webhook_conn_id, s.pagerduty_conn_id, s.pagerduty_severity) == ("fleet_slack", "fleet_pagerduty",
                                                                                    "critical")
    assert s.channels == ("smtp", "slack", "pagerduty") and s.approval_notice_channels == ("slack",)
    # defaults: severity warning, approvals to every configured channel; none configured: the task log only
    s = alerts_of("alerts: {slack_webhook_conn_id: fleet_slack}")
    assert s.pagerduty_severity == "warning" and s.approval_notice_channels == ("slack",)
    assert alerts_of("alerts: {slack_webhook_conn_id: s, approval_channels: []}").approval_notice_channels == ()
    assert parse_fleet(FLEET).alerts.channels == ()


@pytest.mark.parametrize("text, error", [
    ("alerts: {slack_webhook_conn_id: 'https://hooks.slack.com/services/T0/B0/x'}",
     "fleet.yaml: alerts.slack_webhook_conn_id: expected the id of an Airflow connection, got a URL"),
    ("alerts: {pagerduty_conn_id: 'my key'}", "fleet.yaml: alerts.pagerduty_conn_id: 'my key' is not a valid connection id"),
    ("alerts: {pagerduty_conn_id: pd, pagerduty_severity: high}",
     "fleet.yaml: alerts.pagerduty_severity: expected one of info, warning, error, critical, got 'high'"),
    ("alerts: {slack_webhook_conn_id: s, approval_channels: [teams]}",
     "fleet.yaml: alerts.approval_channels[0]: unknown channel 'teams' (channels: smtp, slack, pagerduty)"),
    ("alerts: {slack_webhook_conn_id: s, approval_channels: [slack, pagerduty]}",
     "fleet.yaml: alerts.approval_channels[1]: 'pagerduty' is not configured (set alerts.pagerduty_conn_id)"),
    ("alerts: {slack_webhook_conn_id: s, approval_channels: [slack, slack]}",
     "fleet.yaml: alerts.approval_channels[1]: 'slack' appears twice"),
    ("alerts: {slack_webhook_conn_id: s, approval_channels: slack}",
     "fleet.yaml: alerts.approval_channels: expected a list of strings, got str"),
    ("alerts: {slack_webhook_conn_id: s, approval_channels: }",
     "fleet.yaml: alerts.approval_channels: expected a list of channels ([] for none), got null"),
    ("alerts: {slack_webhook: s}", "fleet.yaml: alerts: unknown field(s) slack_webhook (allowed: approval_channels, "),
    ("alerts: {smtp_conn_id: smtp_default}", "fleet.yaml: alerts.to: an smtp_conn_id needs at least one recipient"),
])
def test_alert_settings_errors_name_the_field(text, error):
    with pytest.raises(FleetConfigError) as e:
        alerts_of(text)
    assert str(e.value).startswith(error), str(e.value)


# -- what each channel is sent ------------------------------------------------------------------
def test_slack_text_escapes_what_a_name_could_make_a_link_or_a_mention():
    link = "http://airflow.example/dags/runbook_stuck_reset/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00/tasks/approve/required_actions"
    text = alerts.slack_text("[kafka-fleet]", f"approval waiting: group {HOSTILE}", [f"STALLED prod group {HOSTILE!r}"],
                             link=link, link_text="Approve or reject in Airflow")
    body, last = text.rsplit("\n", 1)
    # the only link, and the only `<` and `>`, are the toolkit's own
    assert last == f"<{link}|Approve or reject in Airflow>"
    assert "<" not in body and ">" not in body
    assert "&lt;http://evil.example|click&gt;" in body and "&lt;!here&gt;" in body and "&lt;!channel&gt;" in body
    assert "&lt;@U024BE7LH&gt;" in body
    assert "&amp;amp;" in body  # a name's own entity is shown, not decoded
    assert "@channel" in body  # text: Slack makes it a mention only with link_names, never asked for
    # one line per alert line, nothing hidden
    assert "\\u202etxt.exe\\nnext" in body and "\u202e" not in text
    assert body.split("\n")[0] == "*[kafka-fleet] approval waiting: group pay &lt;http://evil.example|click&gt; " \
                                  "&lt;!here&gt; @channel &lt;!channel&gt; &lt;@U024BE7LH&gt; &amp;amp; \\u202etxt.exe\\nnext*"
    assert len(body.split("\n")) == 2


def test_slack_text_is_bounded_and_says_what_it_left_out():
    text = alerts.slack_text("[p]", "many", [f"STALLED prod group g{i} " + "x" * 2000 for i in range(120)])
    assert len(text) <= alerts.SLACK_MAX_TEXT
    assert text.endswith("see the task log")
    assert "&" not in text.replace("&amp;", "").replace("&lt;", "").replace("&gt;", "")  # no entity cut in half


def test_pagerduty_event_is_plain_data_with_a_stable_key():
    key = alerts.dedup_key("fleet_maintenance", "report_stuck")
    ev = alerts.pagerduty_event("[kafka-fleet]", "1 stuck partition(s)", [f"STALLED prod group {HOSTILE!r}"],
                                severity="error", key=key, component="fleet_maintenance.report_stuck",
                                details={"run_id": "scheduled__x"})
    assert key == "kafka-fleet/fleet_maintenance/report_stuck"
    assert ev["summary"] == "[kafka-fleet] 1 stuck partition(s)" and ev["severity"] == "error"
    assert ev["dedup_key"] == key and ev["source"] == alerts.PAGERDUTY_SOURCE and ev["class_type"] == "alert"
    (line,) = ev["custom_details"]["lines"]
    assert "\n" not in line and "\u202e" not in line and "<http://evil.example|click>" in line  # JSON: no markup
    assert ev["custom_details"]["run_id"] == "scheduled__x" and "links" not in ev
    long = alerts.dedup_key("approval", "runbook_stuck_reset", "manual__" + "x" * 300, "approve")
    assert len(long) == alerts.PAGERDUTY_MAX_DEDUP_KEY and long.startswith("kafka-fleet/approval/runbook_stuck_reset/")
    assert alerts.dedup_key("approval", "d", "manual__" + "x" * 300, "approve") != alerts.dedup_key(
        "approval", "d", "manual__" + "x" * 301, "approve")


def test_scrub_removes_secrets_and_the_pieces_of_a_secret_url():
    url = "https://hooks.slack.com/services/T0001/B0002/XXXXsecretXXXX"
    msg = f"posting to {url} failed; path /services/T0001/B0002/XXXXsecretXXXX; token XXXXsecretXXXX; key R0UTINGKEY42"
    out = alerts.scrub(msg, [url, "R0UTINGKEY42", None, "ab"])
    assert "XXXXsecretXXXX" not in out and "R0UTINGKEY42" not in out and "/services/T0001" not in out
    assert out.startswith("posting to *** failed")


# -- the notifier, through the providers' notifiers, to the stand-ins ---------------------------------
class _TI:
    dag_id, run_id, task_id, map_index = "fleet_maintenance", "scheduled__2026-01-01T00:00:00+00:00", "report_stuck", -1


def context() -> dict:
    """A task's context as far as the notifier reads it (the DAG: BaseNotifier renders with its
    template environment)."""
    import datetime as dt

    from airflow.sdk import DAG

    dag = DAG("fleet_maintenance", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc))
    return {"dag": dag, "ti": _TI(), "task_instance": _TI(), "run_id": _TI.run_id}

SLACK_TOKEN = "T0FLEET/B0FLEET/slackSecretToken9f3c"
ROUTING_KEY = "R0uting0Key0Secret0e1f2a3b4c5d6e7f"


@pytest.fixture
def standins(tmp_path, monkeypatch):
    """The Slack receiver, the PagerDuty proxy (in this process's environment) and the connections."""
    with Receiver() as slack, PagerDutyProxy(tmp_path / "pki") as pagerduty:
        for k, v in pagerduty.env().items():
            monkeypatch.setenv(k, v)
        monkeypatch.setenv("AIRFLOW_CONN_FLEET_SLACK", json.dumps(
            {"conn_type": "slackwebhook", "password": slack.url(f"/services/{SLACK_TOKEN}")}))
        monkeypatch.setenv("AIRFLOW_CONN_FLEET_SLACK_BROKEN", json.dumps(
            {"conn_type": "slackwebhook", "password": slack.url(f"/fail/{SLACK_TOKEN}")}))
        monkeypatch.setenv("AIRFLOW_CONN_FLEET_PAGERDUTY", json.dumps(
            {"conn_type": "pagerduty_events", "password": ROUTING_KEY}))
        yield slack, pagerduty


def _logged(caplog, logs) -> str:
    return "\n".join([r.getMessage() for r in caplog.records] + [json.dumps(e, default=str) for e in logs])


def test_an_alert_goes_to_slack_and_pagerduty_escaped(standins, caplog):
    ctx = context()
    from fleet_airflow.notifiers import FleetAlertNotifier

    slack, pagerduty = standins
    settings = AlertSettings(slack_webhook_conn_id="fleet_slack", pagerduty_conn_id="fleet_pagerduty",
                             pagerduty_severity="error")
    lines = [f"STALLED prod group {HOSTILE!r} t-0 lag 3: stuck", "STOPPED prod group '{{ conn.fleet_slack.password }}' t-1"]
    n = FleetAlertNotifier(title="2 stuck partition(s)", lines=lines, settings=settings)
    caplog.set_level(logging.INFO)
    with structlog.testing.capture_logs() as logs:
        n(ctx)  # as an operator calls it: BaseNotifier renders (nothing), then notify()
    assert n.sent == ["log", "slack", "pagerduty"] and n.failed == {}

    (post,) = slack.requests
    # (urllib under slack_sdk honours NO_PROXY: 127.0.0.1 is posted to directly)
    assert post["path"] == f"/services/{SLACK_TOKEN}" and post["via"] == "direct"
    text = post["json"]["text"]
    assert text.startswith("*[kafka-fleet] 2 stuck partition(s)*\n• STALLED prod group 'pay &lt;http://evil.example|click&gt;")
    assert "<" not in text and "{{ conn.fleet_slack.password }}" in text  # shown, never evaluated
    assert post["json"]["unfurl_links"] is False and "link_names" not in post["json"]

    (event,) = pagerduty.events()
    assert event["routing_key"] == ROUTING_KEY and event["event_action"] == "trigger"
    assert event["dedup_key"] == "kafka-fleet/fleet_maintenance/report_stuck"
    assert event["payload"]["summary"] == "[kafka-fleet] 2 stuck partition(s)" and event["payload"]["severity"] == "error"
    assert event["payload"]["custom_details"]["lines"][0].startswith("STALLED prod group 'pay <http://evil.example|click>")
    assert "\\n" in event["payload"]["custom_details"]["lines"][0]
    assert event["payload"]["component"] == "fleet_maintenance.report_stuck"

    logged = _logged(caplog, logs)
    assert "alert sent to slack (connection fleet_slack)" in logged and "alert sent to pagerduty" in logged
    assert SLACK_TOKEN not in logged and ROUTING_KEY not in logged and "slackSecretToken" not in logged


def test_a_failing_channel_is_logged_without_secrets_and_the_others_still_get_it(standins, caplog):
    ctx = context()
    from airflow.providers.common.compat.sdk import AirflowException

    from fleet_airflow.notifiers import FleetAlertNotifier

    slack, pagerduty = standins
    settings = AlertSettings(slack_webhook_conn_id="fleet_slack_broken", pagerduty_conn_id="fleet_pagerduty")
    n = FleetAlertNotifier(title="1 stuck partition(s)", lines=["STALLED prod group 'g' t-0 lag 3"], settings=settings)
    caplog.set_level(logging.INFO)
    with structlog.testing.capture_logs() as logs, pytest.raises(AirflowException) as raised:
        n.notify(ctx)
    # Slack answered 500 quoting the webhook's path: the failure is logged, the secret is not
    assert [r["path"] for r in slack.requests] == [f"/fail/{SLACK_TOKEN}"]
    assert len(pagerduty.events()) == 1 and n.sent == ["log", "pagerduty"]
    assert "Status Code: 500" in n.failed["slack"] and "***" in n.failed["slack"]
    logged = _logged(caplog, logs) + "\n" + str(raised.value)
    assert "alert not sent to slack (connection fleet_slack_broken)" in logged
    assert "alert not delivered to slack (fleet_slack_broken)" in str(raised.value)
    assert "(delivered to log, pagerduty)" in str(raised.value)
    assert SLACK_TOKEN not in logged and "slackSecretToken" not in logged and ROUTING_KEY not in logged


def test_a_missing_connection_is_one_line_and_an_approval_notice_never_raises(standins, caplog):
    ctx = context()
    from fleet_airflow.notifiers import FleetAlertNotifier

    slack, _ = standins
    settings = AlertSettings(slack_webhook_conn_id="fleet_slack", pagerduty_conn_id="no_such_connection")
    n = FleetAlertNotifier(title="approval waiting", lines=["May approve: bob"], settings=settings, approval=True,
                           link="http://airflow.example/dags/d/runs/r/tasks/approve/required_actions")
    caplog.set_level(logging.INFO)
    with structlog.testing.capture_logs() as logs:
        n.notify(ctx)
    assert n.sent == ["log", "slack"] and list(n.failed) == ["pagerduty"]
    assert re.search(r"no_such_connection.*(isn't defined|not found|not defined)", n.failed["pagerduty"], re.I), n.failed
    assert "APPROVAL WAITING approval waiting (1)" in _logged(caplog, logs)
    assert slack.requests[0]["json"]["text"].endswith(
        "\n<http://airflow.example/dags/d/runs/r/tasks/approve/required_actions|Open in Airflow>")


def test_approval_notice_lines():
    title, lines = alerts.approval_notice("reset_offsets", "prod", "reset group 'g' on t", "sha256:ab", ["bob", "carol"],
                                          ["alice"], "4 h")
    assert title == "approval waiting: reset_offsets on cluster prod: reset group 'g' on t"
    assert lines == ["May approve: bob, carol", "Requested by: alice", "Plan digest: sha256:ab",
                     "No answer within 4 h rejects the plan."]
    title, lines = alerts.approval_notice("reset_offsets", "prod", "t", "sha256:ab", ["bob"], [], "10 min", second=True,
                                          asked_again=True)
    assert title.startswith("second approval waiting") and lines[0].startswith("Asked again")
    assert "nobody (no person triggered this run" in lines[2]


def test_the_approval_link_is_built_from_the_configured_base_url(monkeypatch):
    from fleet_airflow.notifiers import approval_page_url

    monkeypatch.setenv("AIRFLOW__API__BASE_URL", "https://airflow.example/team-a/")
    assert approval_page_url("runbook_stuck_reset", "manual__2026-01-01T00:00:00+00:00", "approve") == (
        "https://airflow.example/team-a/dags/runbook_stuck_reset/runs/manual__2026-01-01T00%3A00%3A00%2B00%3A00"
        "/tasks/approve/required_actions")

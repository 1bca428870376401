"""FleetAlertNotifier: the toolkit's alerts through Airflow's notifier mechanism.

Always logs (the default); the fleet file's `alerts:` section adds channels, each through its
Airflow provider's own notifier and configured by an Airflow connection:

* ``smtp_conn_id`` + ``to``: e-mail (the SMTP provider's SmtpNotifier);
* ``slack_webhook_conn_id``: a Slack incoming webhook (the Slack provider's SlackWebhookNotifier;
  connection type ``slackwebhook``, the webhook URL in its password);
* ``pagerduty_conn_id``: a PagerDuty service (the PagerDuty provider's PagerdutyNotifier, Events
  API v2; connection type ``pagerduty_events``, the routing key in its password).

Each channel is tried whatever happened to the others: a channel that fails is logged, one line
naming the channel and its connection id, with every secret of its connection (the password,
the pieces of a webhook URL) replaced by ``***``. An alert of a report task then fails the task
once every channel was tried (``fail_on_error``: an undelivered alert is never silent); the
approval gate's notice never fails the gate.

The title and the lines are data, never Airflow templates: they carry cluster-supplied names
(groups, topics, client ids), and a group named ``{{ conn.x.password }}`` must be shown, not
evaluated. So the notifier has no template fields, and the providers' notifiers are sent with
``notify()`` (which renders nothing it is given). Every line is logged, mailed and posted through
fleetkit.core.render.visible_controls: one line each, bidi and zero-width characters shown; what
Slack and PagerDuty are sent is built by fleetkit.core.alerts (Slack's escaping of ``& < >``, so a
name opens no link and mentions nobody).
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Sequence

from airflow.sdk.bases.notifier import BaseNotifier

from fleetkit.core import alerts as fmt
from fleetkit.core.fleet import AlertSettings
from fleetkit.core.render import html, visible_controls

log = logging.getLogger(__name__)

#: seconds a channel may take to answer (a slow channel delays the task that alerts, the gate's
#: approval task included)
SEND_TIMEOUT = 15


def approval_page_url(dag_id: str, run_id: str, task_id: str) -> str:
    """The approval task's Required Action page in the Airflow UI, at the deployment's API base URL
    (``[api] base_url``), never at an address a request named."""
    from fleet_airflow.settings import api_base_url

    q = lambda s: urllib.parse.quote(str(s), safe="")  # noqa: E731
    return f"{api_base_url()}/dags/{q(dag_id)}/runs/{q(run_id)}/tasks/{q(task_id)}/required_actions"


def _mask(secret: str) -> None:
    """Tell Airflow's secrets masker about a value: task logs show it as ***."""
    try:
        from airflow.sdk.log import mask_secret
    except ImportError:  # pragma: no cover - older task SDKs
        try:
            from airflow.sdk.execution_time.secrets_masker import mask_secret
        except ImportError:
            return
    try:
        mask_secret(secret)
    except Exception:  # noqa: BLE001 - masking is a second line of defence, scrub() the first
        pass


class FleetAlertNotifier(BaseNotifier):
    # nothing is templated: title and lines hold cluster-supplied names
    template_fields: Sequence[str] = ()

    def __init__(self, *, title: str, lines: list[str], settings: AlertSettings | None = None,
                 link: str | None = None, link_text: str = "Open in Airflow", approval: bool = False,
                 key: str | None = None, details: dict | None = None, fail_on_error: bool | None = None):
        """`approval`: a notice that an approval waits (the fleet file's approval_channels, PagerDuty
        severity info, never fails its task). `key`: PagerDuty's dedup key (default: the DAG and
        task, so an alert repeated run after run stays one incident). `link`: the toolkit's own
        link (the approval page), the only link a message carries."""
        super().__init__()
        self.title = title
        self.lines = list(lines)
        self.settings = settings or AlertSettings()
        self.link, self.link_text = link, link_text
        self.approval = approval
        self.key = key
        self.details = dict(details or {})
        self.fail_on_error = (not approval) if fail_on_error is None else fail_on_error
        self.sent: list[str] = []
        self.failed: dict[str, str] = {}

    def log_message(self) -> str:
        """The logged alert: a header line, then one `  - ` line per alert line (never more), then
        the link when there is one."""
        head = "APPROVAL WAITING" if self.approval else "ALERT"
        return "\n".join([f"{head} {visible_controls(self.title)} ({len(self.lines)})",
                          *(f"  - {visible_controls(x)}" for x in self.lines),
                          *([f"  link: {visible_controls(self.link)}"] if self.link else [])])

    def channels(self) -> tuple[str, ...]:
        return self.settings.approval_notice_channels if self.approval else self.settings.channels

    def notify(self, context) -> None:
        (self.log.info if self.approval else self.log.warning)("%s", self.log_message())
        self.sent.append("log")
        for channel in self.channels():
            conn_id = self._conn_id(channel)
            secrets: list[str] = []
            try:
                secrets = self._secrets(conn_id)
                getattr(self, f"_send_{channel}")(context or {}, conn_id)
            except Exception as e:  # noqa: BLE001 - one channel's failure never stops the others
                why = fmt.scrub(f"{type(e).__name__}: {e}", secrets).strip()
                self.failed[channel] = visible_controls(why)[:500]
                self.log.error("alert not sent to %s (connection %s): %s", channel, conn_id, self.failed[channel])
            else:
                self.sent.append(channel)
                self.log.info("alert sent to %s (connection %s)", channel, conn_id)
        if self.failed and self.fail_on_error:
            from airflow.providers.common.compat.sdk import AirflowException

            raise AirflowException("alert not delivered to " + "; ".join(f"{c} ({self._conn_id(c)}): {why}"
                                                                           for c, why in self.failed.items())
                                   + (f" (delivered to {', '.join(self.sent)})" if self.sent else ""))

    # -- the channels --------------------------------------------------------------------------
    def _conn_id(self, channel: str) -> str | None:
        s = self.settings
        return {"smtp": s.smtp_conn_id, "slack": s.slack_webhook_conn_id, "pagerduty": s.pagerduty_conn_id}[channel]

    @staticmethod
    def _secrets(conn_id: str | None) -> list[str]:
        """The connection's secrets (its password: the webhook URL, the routing key), masked in the
        task log and scrubbed from every error this notifier logs or raises."""
        if not conn_id:
            return []
        from airflow.providers.common.compat.sdk import BaseHook

        conn = BaseHook.get_connection(conn_id)
        secrets = [conn.password] if conn.password else []
        host = conn.host or ""
        if conn.password and "://" not in conn.password and host:
            # a webhook URL built from the host and the token in the password
            secrets.append(f"{host.rstrip('/')}/{conn.password.strip().lstrip('/')}")
        for s in secrets:
            _mask(s.strip())
        return secrets

    def _names(self, context) -> tuple[str | None, str | None, str | None]:
        dag = context.get("dag")
        ti = context.get("ti") or context.get("task_instance")
        dag_id = getattr(dag, "dag_id", None) or getattr(ti, "dag_id", None)
        return dag_id, context.get("run_id") or getattr(ti, "run_id", None), getattr(ti, "task_id", None)

    def _send_smtp(self, context, conn_id: str) -> None:
        from airflow.providers.smtp.notifications.smtp import SmtpNotifier

        body = "<br>".join(str(html(x)) for x in self.lines)
        if self.link:
            body += f'<br><a href="{html(self.link)}">{html(self.link_text)}</a>'
        SmtpNotifier(to=list(self.settings.to), smtp_conn_id=conn_id,
                     subject=visible_controls(f"{self.settings.subject_prefix} {self.title}"),
                     html_content=body).notify(context)

    def _send_slack(self, context, conn_id: str) -> None:
        from airflow.providers.slack.notifications.slack_webhook import SlackWebhookNotifier

        text = fmt.slack_text(self.settings.subject_prefix, self.title, self.lines, self.link, self.link_text)
        SlackWebhookNotifier(slack_webhook_conn_id=conn_id, text=text, unfurl_links=False, unfurl_media=False,
                             timeout=SEND_TIMEOUT).notify(context)

    def _send_pagerduty(self, context, conn_id: str) -> None:
        from airflow.providers.pagerduty.notifications.pagerduty import PagerdutyNotifier

        dag_id, run_id, task_id = self._names(context)
        key = self.key or fmt.dedup_key(dag_id or "", task_id or "")
        event = fmt.pagerduty_event(self.settings.subject_prefix, self.title, self.lines,
                                    severity="info" if self.approval else self.settings.pagerduty_severity,
                                    key=key, kind="approval" if self.approval else "alert",
                                    component=".".join(x for x in (dag_id, task_id) if x) or None,
                                    link=self.link, link_text=self.link_text,
                                    details={"dag_id": dag_id, "run_id": run_id, "task_id": task_id, **self.details})
        PagerdutyNotifier(pagerduty_events_conn_id=conn_id, **event).notify(context)

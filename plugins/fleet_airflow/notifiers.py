"""FleetAlertNotifier: the toolkit's alerts through Airflow's notifier mechanism.

Always logs (the default); when the fleet file has an `alerts:` section with an SMTP connection,
also e-mails the recipients through the SMTP provider's notifier.

The title and the lines are data, never Airflow templates: they carry cluster-supplied names
(groups, topics, client ids), and a group named ``{{ conn.x.password }}`` must be shown, not
evaluated. So the notifier has no template fields, and the SMTP notifier is sent with
``notify()`` (which renders nothing it is given). Every line is logged and mailed through
fleetkit.core.render.visible_controls: one line each, bidi and zero-width characters shown.
"""

from __future__ import annotations

import logging
from typing import Sequence

from airflow.sdk.bases.notifier import BaseNotifier

from fleetkit.core.fleet import AlertSettings
from fleetkit.core.render import html, visible_controls

log = logging.getLogger(__name__)


class FleetAlertNotifier(BaseNotifier):
    # nothing is templated: title and lines hold cluster-supplied names
    template_fields: Sequence[str] = ()

    def __init__(self, *, title: str, lines: list[str], settings: AlertSettings | None = None):
        super().__init__()
        self.title = title
        self.lines = list(lines)
        self.settings = settings or AlertSettings()
        self.sent: list[str] = []

    def log_message(self) -> str:
        """The logged alert: a header line, then one `  - ` line per alert line (never more)."""
        return "\n".join([f"ALERT {visible_controls(self.title)} ({len(self.lines)})",
                          *(f"  - {visible_controls(x)}" for x in self.lines)])

    def notify(self, context) -> None:
        self.log.warning("%s", self.log_message())
        self.sent.append("log")
        if self.settings.smtp_conn_id:
            from airflow.providers.smtp.notifications.smtp import SmtpNotifier

            body = "<br>".join(str(html(x)) for x in self.lines)
            SmtpNotifier(to=list(self.settings.to), smtp_conn_id=self.settings.smtp_conn_id,
                         subject=visible_controls(f"{self.settings.subject_prefix} {self.title}"),
                         html_content=body).notify(context)
            self.sent.append("smtp")

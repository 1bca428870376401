"""FleetAlertNotifier: the toolkit's alerts through Airflow's notifier mechanism.

Always logs (the default); when the fleet file has an `alerts:` section with an SMTP connection,
also e-mails the recipients through the SMTP provider's notifier.
"""

from __future__ import annotations

import logging
from typing import Sequence

from airflow.sdk.bases.notifier import BaseNotifier

from fleetkit.core.fleet import AlertSettings

log = logging.getLogger(__name__)


class FleetAlertNotifier(BaseNotifier):
    template_fields: Sequence[str] = ("title", "lines")

    def __init__(self, *, title: str, lines: list[str], settings: AlertSettings | None = None):
        super().__init__()
        self.title = title
        self.lines = lines
        self.settings = settings or AlertSettings()
        self.sent: list[str] = []

    def notify(self, context) -> None:
        self.log.warning("ALERT %s (%d)\n%s", self.title, len(self.lines), "\n".join(f"  - {x}" for x in self.lines))
        self.sent.append("log")
        if self.settings.smtp_conn_id:
            from airflow.providers.smtp.notifications.smtp import SmtpNotifier

            body = "<br>".join(_html_escape(x) for x in self.lines)
            SmtpNotifier(to=list(self.settings.to), smtp_conn_id=self.settings.smtp_conn_id,
                         subject=f"{self.settings.subject_prefix} {self.title}", html_content=body).notify(context)
            self.sent.append("smtp")


def _html_escape(text: str) -> str:
    from markupsafe import escape

    return str(escape(text))

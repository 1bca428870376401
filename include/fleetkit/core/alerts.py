"""What an alert says on each channel: the Slack message, the PagerDuty event, the approval notice.

Pure functions over data (no Airflow, no network): the Airflow adapter
(plugins/fleet_airflow/notifiers.py) sends what these build through the providers' notifiers.

The rule: a title and its lines carry cluster-supplied names (groups, topics, client ids). They
are data, never markup and never a template:

* every line is put on one line with control, bidi and zero-width characters shown as escapes
  (``render.visible_controls``);
* on Slack, whose mrkdwn turns ``<...>`` into links and mentions (``<http://evil|click>``,
  ``<!here>``, ``<!channel>``, ``<@U123>``), ``&``, ``<`` and ``>`` are written ``&amp;``,
  ``&lt;`` and ``&gt;`` (Slack's own escaping), so a name can open no link and mention nobody; the
  only link of a message is the toolkit's own (the approval page). A bare ``@channel`` or
  ``@here`` stays text: Slack makes it a mention only when a message asks for ``link_names``,
  which these messages never do; links are not unfurled;
* on PagerDuty the summary and the details are plain JSON strings;
* lengths are bounded (Slack's and PagerDuty's limits): past them a message says how many lines
  it left out, and the task log has them all.
"""

from __future__ import annotations

import hashlib

from fleetkit.core.render import visible_controls

#: lines a Slack message or a PagerDuty event carries (the task log carries every line)
MAX_LINES = 50
#: a line's characters on Slack and PagerDuty (a reason can be long; the task log has it whole)
MAX_LINE_CHARS = 600
#: Slack's limit on a message's text is 40,000 characters: stay well below it
SLACK_MAX_TEXT = 12000
#: PagerDuty's limits: summary 1024 characters, dedup_key 255
PAGERDUTY_MAX_SUMMARY = 1024
PAGERDUTY_MAX_DEDUP_KEY = 255
#: the event's source field: which system speaks
PAGERDUTY_SOURCE = "kafka-fleet-toolkit"


def slack_escape(text) -> str:
    """A value as Slack mrkdwn text that is shown as it is: one line, control characters as escapes,
    and Slack's three control characters ``&`` ``<`` ``>`` as entities."""
    return visible_controls(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _shown(lines: list[str]) -> tuple[list[str], int]:
    """(the lines a channel carries, each on one line and clipped; how many were left out)."""
    kept = [_clip(visible_controls(x), MAX_LINE_CHARS) for x in lines[:MAX_LINES]]
    return kept, max(0, len(lines) - MAX_LINES)


def headline(prefix: str, title: str) -> str:
    """The alert's one-line title, prefix first (``[kafka-fleet] 2 stuck partition(s)``)."""
    return visible_controls(f"{prefix} {title}".strip())


def slack_text(prefix: str, title: str, lines: list[str], link: str | None = None,
               link_text: str = "Open in Airflow") -> str:
    """The Slack message (mrkdwn): the title in bold, a bullet per line, then the link."""
    kept, more = _shown(lines)
    out = [f"*{slack_escape(headline(prefix, title))}*"]
    out += [f"• {slack_escape(x)}" for x in kept]
    if more:
        out.append(f"… and {more} more line(s): see the task log")
    tail = f"<{slack_escape(link)}|{slack_escape(link_text)}>" if link else ""
    text = "\n".join(out)
    if len(text) + len(tail) + 1 > SLACK_MAX_TEXT:
        # never cut inside an entity or the link: whole lines only
        while out and len("\n".join(out)) + len(tail) + 60 > SLACK_MAX_TEXT:
            out.pop()
        out.append("… more line(s): see the task log")
        text = "\n".join(out)
    return f"{text}\n{tail}" if tail else text


def dedup_key(*parts: str) -> str:
    """A PagerDuty dedup key from the toolkit's own identifiers (DAG, run, task): one open incident per
    key, so an alert repeated run after run is one incident, not one page per run. Hashed when too
    long for PagerDuty."""
    key = "kafka-fleet/" + "/".join(p for p in parts if p)
    if len(key) <= PAGERDUTY_MAX_DEDUP_KEY:
        return key
    return key[:PAGERDUTY_MAX_DEDUP_KEY - 65] + "~" + hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def pagerduty_event(prefix: str, title: str, lines: list[str], *, severity: str, key: str,
                    kind: str = "alert", component: str | None = None, link: str | None = None,
                    link_text: str = "Open in Airflow", details: dict | None = None) -> dict:
    """The keyword arguments of the PagerDuty notifier (Events API v2, action trigger)."""
    kept, more = _shown(lines)
    custom = {"lines": kept}
    if more:
        custom["more_lines"] = f"{more} more line(s): see the task log"
    if link:
        custom["link"] = link
    custom.update({k: visible_controls(v) for k, v in (details or {}).items() if v is not None})
    event = {"summary": _clip(headline(prefix, title), PAGERDUTY_MAX_SUMMARY), "severity": severity,
             "source": PAGERDUTY_SOURCE, "dedup_key": key, "custom_details": custom, "class_type": kind,
             "group": "kafka-fleet"}
    if component:
        event["component"] = visible_controls(component)
    if link:
        event["links"] = [{"href": link, "text": link_text}]
    return event


def approval_notice(action: str, cluster: str, plan_title: str, digest: str, approvers: list[str],
                    requested_by: list[str], timeout: str, second: bool = False,
                    asked_again: bool = False) -> tuple[str, list[str]]:
    """(title, lines) of the notice that a runbook waits for an approver."""
    what = "second approval" if second else "approval"
    title = f"{what} waiting: {action} on cluster {cluster}: {plan_title}"
    lines = [f"May approve: {', '.join(approvers)}",
             f"Requested by: {', '.join(requested_by) or 'nobody (no person triggered this run: two approvers needed)'}",
             f"Plan digest: {digest}",
             f"No answer within {timeout} rejects the plan."]
    if asked_again:
        lines.insert(0, "Asked again: an earlier request of this run got no answer.")
    return title, lines


def scrub(text: str, secrets: list[str]) -> str:
    """`text` with every secret (and every long piece of a secret URL) replaced by ***: an error a
    channel raises may quote what it was given (a webhook URL's path, a routing key)."""
    from urllib.parse import urlsplit

    pieces: set[str] = set()
    for secret in secrets:
        secret = (secret or "").strip()
        if len(secret) < 4:
            continue
        pieces.add(secret)
        if "://" in secret:
            parts = urlsplit(secret)
            if len(parts.path) > 1:
                pieces.add(parts.path)
                pieces.update(seg for seg in parts.path.split("/") if len(seg) >= 8)
            if parts.query:
                pieces.add(parts.query)
        else:
            pieces.update(seg for seg in secret.split("/") if len(seg) >= 8)
    for piece in sorted(pieces, key=len, reverse=True):
        text = text.replace(piece, "***")
    return text

"""Property tests: cluster-supplied names (groups, topics, client ids, hosts, znode paths, record
keys) are data. They never reach Airflow's templating, never forge a log or audit line, and every
page and runbook shows bidi and zero-width characters as visible escapes.

Paths covered: fleetkit.core.render.visible_controls (the one escaping helper), the alert
notifier (called with an Airflow context, the way an operator calls it), the stuck report
(HTML, Markdown, alert lines and the report_stuck operator's log), the plan Markdown of the
approval page, the approval's subject and body, the trim runbook's shell words, the audit log line.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import subprocess
import sys
import os
import tempfile
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from unittest import mock

import pytest
import structlog
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from fleetkit.core.render import UnsafeForShell, environment, md, sh, visible_controls

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))

BIDI = ["\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f"]
ZERO_WIDTH = ["\u200b", "\u200c", "\u200d", "\u2060", "\ufeff"]
CONTROLS = ["\n", "\r\n", "\r", "\t", "\x00", "\x1b[31m", "\x7f", "\x85", "\u2028", "\u2029"]
PIECES = [
    # Airflow / Jinja template syntax, and what a template could reach
    "{{ 7*7 }}", "{{", "}}", "{%", "%}", "{#", "{% raw %}", "{% for i in range(3) %}x{% endfor %}",
    "{{ conn.fleet_smtp.password }}", "{{ var.value.secret }}", "{{ macros.datetime.now() }}",
    "{{ ti.xcom_pull(task_ids='x') }}", "${{ x }}", "{{ params }}",
    # quotes, shell metacharacters, paths
    "'", '"', "`id`", "$(id)", "; rm -rf / #", "|", "&&", "*", "~", "\\", "..", "/", "../../etc/passwd",
    # Markdown / HTML
    "<script>alert(1)</script>", "[x](http://evil)", "# h", "|---|", "&amp;",
    # forged log lines
    "\nERROR forged", "\r\n[2026-01-01T00:00:00Z] {report.py:1} WARNING - forged", "\n  - STALLED x group 'y'",
    # 4-byte characters
    "\U0001F600", "\U0001D518", "\U00010348", "\U0010FFFD",
    *BIDI, *ZERO_WIDTH, *CONTROLS,
]
text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=20)
pieces = st.sampled_from(PIECES)
hostile = st.one_of(
    st.lists(pieces, min_size=1, max_size=6).map("".join),
    st.tuples(text, pieces, text, pieces).map("".join),
    text,
)
# a blank name renders as an empty cell or paragraph: a different shape, not a hostile one
nonblank = hostile.filter(lambda s: s.strip() != "")
# names that also survive a Kafka/shell round trip need no control character
no_control = hostile.filter(lambda s: not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in s))

HIDDEN = ("Cc", "Cf", "Zl", "Zp")


def hidden(s: str, allow: str = "") -> list[str]:
    """The characters of `s` that a reader cannot see (control, format, line separators)."""
    return [c for c in s if unicodedata.category(c) in HIDDEN and c not in allow]


def unescape(shown: str) -> str:
    """The inverse of visible_controls for a text that held no backslash."""
    named = {"n": "\n", "r": "\r", "t": "\t"}
    return re.sub(r"\\(?:([nrt])|x([0-9a-f]{2})|u([0-9a-f]{4})|U([0-9a-f]{8}))",
                  lambda m: named[m.group(1)] if m.group(1) else chr(int(m.group(2) or m.group(3) or m.group(4), 16)),
                  shown)


# -- the one escaping helper ---------------------------------------------------------------------
def test_every_invisible_character_is_escaped():
    """Every code point of Unicode categories Cc, Cf, Zl, Zp (this Python's Unicode database)."""
    for cp in range(sys.maxunicode + 1):
        c = chr(cp)
        if unicodedata.category(c) in HIDDEN:
            shown = visible_controls(c)
            assert shown != c and not hidden(shown) and unescape(shown) == c, (hex(cp), shown)


@pytest.mark.parametrize("c", BIDI + ZERO_WIDTH)
def test_bidi_and_zero_width_shown(c):
    assert visible_controls(f"a{c}b") == f"a\\u{ord(c):04x}b"


@settings(max_examples=500, deadline=None)
@given(hostile)
def test_visible_controls_one_line_nothing_hidden_idempotent(name):
    shown = visible_controls(name)
    assert not hidden(shown)
    assert visible_controls(shown) == shown
    if "\\" not in name:
        assert unescape(shown) == name  # nothing lost: the name shown is the name


# -- the notifier: title and lines are data ------------------------------------------------------
def _airflow_context():
    """An Airflow task context as far as one exists outside a task: the DAG (its template
    environment and filters), params, dates and the var / conn / macros accessors."""
    from airflow.sdk import DAG
    from airflow.sdk.execution_time.context import ConnectionAccessor, MacrosAccessor, VariableAccessor

    from fleet_airflow import settings as fleet_settings

    dag = DAG("hostile_names", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc),
              user_defined_filters=fleet_settings.TEMPLATE_FILTERS)
    return {"dag": dag, "params": {"secret": "s3cr3t"}, "ds": "2026-01-01", "run_id": "manual__x",
            "var": {"value": VariableAccessor(deserialize_json=False), "json": VariableAccessor(deserialize_json=True)},
            "conn": ConnectionAccessor(), "macros": MacrosAccessor()}


@settings(max_examples=300, deadline=None)
@given(hostile, st.lists(hostile, min_size=1, max_size=4))
def test_notifier_renders_nothing_and_logs_one_line_per_alert(title, lines):
    from fleet_airflow.notifiers import FleetAlertNotifier

    n = FleetAlertNotifier(title=title, lines=list(lines))
    ctx = _airflow_context()
    n.render_template_fields(ctx)
    assert (n.title, n.lines) == (title, lines)  # byte-identical: nothing was evaluated
    with structlog.testing.capture_logs() as logs:
        n(ctx)  # what an operator does: BaseNotifier.__call__ renders, then notify()
    assert (n.title, n.lines) == (title, lines)
    assert n.sent == ["log"]
    alert = [e["event"] for e in logs if e["event"].startswith("ALERT ")]
    assert len(alert) == 1
    assert alert[0].split("\n") == [f"ALERT {visible_controls(title)} ({len(lines)})",
                                    *(f"  - {visible_controls(x)}" for x in lines)]
    assert not hidden(alert[0], allow="\n")


def test_notifier_keeps_a_group_named_like_a_secret():
    """The verified case: a group named `{{ 7*7 }}-hostile` was alerted as `49-hostile`."""
    from fleet_airflow.notifiers import FleetAlertNotifier

    lines = ["STALLED lab group '{{ 7*7 }}-hostile' t-0 lag 3", "STOPPED lab group '{{ var.value.secret }}' t-1",
             "STOPPED lab group '{{' t-2"]
    n = FleetAlertNotifier(title="{{ conn.fleet_smtp.password }}", lines=lines)
    with structlog.testing.capture_logs() as logs:
        n(_airflow_context())
    event = next(e["event"] for e in logs if e["event"].startswith("ALERT "))
    assert "group '{{ 7*7 }}-hostile'" in event and "49-hostile" not in event
    assert "'{{ var.value.secret }}'" in event and "ALERT {{ conn.fleet_smtp.password }} (3)" in event


# -- the stuck report --------------------------------------------------------------------------
class _Collect(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.cells: list[str] = []
        self._cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        if tag == "td":
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.cells.append("".join(self._cell))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


MD = MarkdownIt("commonmark").enable("table")


def _md_structure(markdown: str) -> list[str]:
    return re.findall(r"<(\w+)", MD.render(markdown))


def _stuck_case(out: Path, group: str, topic: str, reason: str, storm: str) -> None:
    f = [{"cluster": "lab", "group": group, "topic": topic, "partition": 0, "status": "STALLED", "lag": 3,
          "committed_offset": 2, "log_end_offset": 5, "reason": reason},
         {"cluster": "lab", "group": group, "topic": topic, "partition": 1, "status": "STOPPED", "lag": 3,
          "committed_offset": 2, "log_end_offset": 5, "reason": reason, "expires_in_seconds": 600,
          "offset_expires_at": "2026-01-02T00:00:00Z"}]
    g = [{"cluster": "lab", "group": group, "status": "STALLED", "rebalance_storm": False},
         {"cluster": "lab", "group": storm, "status": "OK", "rebalance_storm": True}]
    s = [{"cluster": "lab", "group": group, "topic": topic, "partition": 0, "points": [{"lag": 1}, {"lag": 3}]}]
    for name, rows in (("findings", f), ("groups", g), ("series", s)):
        (out / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(nonblank, nonblank, nonblank, nonblank)
def test_stuck_report_shows_names_as_they_are(group, topic, reason, storm):
    from fleetkit.stuck.report import StuckReport

    with tempfile.TemporaryDirectory() as hostile_dir, tempfile.TemporaryDirectory() as plain_dir:
        _stuck_case(Path(hostile_dir), group, topic, reason, storm)
        _stuck_case(Path(plain_dir), "g", "t", "r", "s")
        report = StuckReport.load(hostile_dir, "2m")
        html_path, md_path = report.render(hostile_dir)
        plain_html, plain_md = StuckReport.load(plain_dir, "2m").render(plain_dir)
        html, markdown = html_path.read_text(encoding="utf-8"), md_path.read_text(encoding="utf-8")
        # no raw invisible character, no extra line, no extra element
        assert not hidden(html, allow="\n") and not hidden(markdown, allow="\n")
        assert html.count("\n") == plain_html.read_text().count("\n")
        assert markdown.count("\n") == plain_md.read_text().count("\n")
        parsed, plain = _Collect(), _Collect()
        parsed.feed(html)
        plain.feed(plain_html.read_text())
        assert parsed.tags == plain.tags and len(parsed.cells) == len(plain.cells)
        assert visible_controls(group) in parsed.cells
        assert f"{visible_controls(topic)}-0" in parsed.cells
        assert visible_controls(storm) in parsed.cells
        assert _md_structure(markdown) == _md_structure(plain_md.read_text())
        # alert lines: the notifier logs them one line each
        for line in report.alerts():
            assert "\n" not in visible_controls(line) and not hidden(visible_controls(line))


class _TI:
    """The task instance's XCom push, the only part of a task context the operator writes to."""

    def __init__(self):
        self.xcom: dict = {}
        self.id, self.try_number = "00000000-0000-0000-0000-000000000000", 1

    def xcom_push(self, key, value):
        self.xcom[key] = value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile, hostile, hostile)
def test_report_stuck_task_log_cannot_be_forged(group, topic, reason):
    from fleet_airflow.operators.report import StuckReportOperator

    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "reports" / "stuck" / "run"
        out.mkdir(parents=True)
        _stuck_case(out, group, topic, reason, group)
        op = StuckReportOperator(task_id="report_stuck", out_dir=str(out), fleet_file=str(REPO / "lab/fleets/lab.yaml"),
                                 data_root=tmp, window="2m")
        ctx = {**_airflow_context(), "ti": _TI(), "task": op}
        op.render_template_fields(ctx)
        with structlog.testing.capture_logs() as logs:
            res = op.execute(ctx)
    assert res["alerts"] == 3 and res["flagged"] == 2  # two partitions and the group's rebalance storm
    events = [e["event"] for e in logs]
    alert = [e for e in events if e.startswith("ALERT ")]
    assert len(alert) == 1 and len(alert[0].split("\n")) == 4
    for e in events:
        assert not hidden(e, allow="\n" if e.startswith("ALERT ") else ""), e
    flagged = [e for e in events if e.startswith(("STALLED lab group", "STOPPED lab group"))]
    assert len(flagged) == 2
    assert all(f"group {group!r} {visible_controls(topic)}-" in e for e in flagged)
    assert all(e.endswith(visible_controls(reason)) for e in flagged)


# -- the approval page: plan Markdown, subject and body ---------------------------------------------
def _plan(name: str) -> dict:
    return {"action": "reset_offsets", "cluster": "lab", "title": f"Reset offsets of group {name} on {name}",
            "created_at": "2026-01-01T00:00:00Z",
            "evidence": [{"label": name, "value": name}],
            "preconditions": [{"check": "group_empty", "what": f"group {name} has no live members"}],
            "changes": [{"target": f"{name}-0", "before": 2, "after": 5}],
            "risks": [name],
            "rollback": {"how": name, "dag_id": "runbook_stuck_reset", "conf": {"group": name}},
            "details": {"partitions": [{"partition": 0, "committed": 2, "log_start": 0, "log_end": 5, "new": 5,
                                        "lag_before": 3, "lag_after": 0}]}}


@settings(max_examples=200, deadline=None)
@given(nonblank)
def test_plan_markdown_shows_the_name_acted_on(name):
    from fleetkit.stuck.action import RESET_OFFSETS

    def body(n):
        return environment().get_template("plan.md.j2").render(
            plan=_plan(n), digest="sha256:abc", details_table=RESET_OFFSETS.details_table(_plan(n)), timeout="4 h")

    hostile_body, plain_body = body(name), body("g")
    assert not hidden(hostile_body, allow="\n")
    assert hostile_body.count("\n") == plain_body.count("\n")
    assert _md_structure(hostile_body) == _md_structure(plain_body)
    assert md(name) in hostile_body


def _approval(tmp: Path, name: str):
    """PlanApprovalOperator.execute on a stored plan holding `name`: the subject and body it hands
    to Airflow. The write to the API server (upsert_hitl_detail) is the one stand-in: it needs a
    running task supervisor (tests/ui check the real one)."""
    from airflow.sdk import DAG

    from fleet_airflow import settings as fleet_settings
    from fleet_airflow.gate import PlanApprovalOperator
    from fleetkit.core import plans
    from fleetkit.stuck.action import RESET_OFFSETS

    with DAG("runbook_stuck_reset", schedule=None, start_date=dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)) as dag:
        op = PlanApprovalOperator(task_id="approve", action=RESET_OFFSETS)
    params = {"cluster": "lab", "approval_timeout": 60}
    # the fleet file and data root are deployment settings (environment), never params
    env = {"FLEET_FILE": str(REPO / "lab/fleets/lab.yaml"), "FLEET_DATA_ROOT": str(tmp)}
    plans.store(fleet_settings.plans_root(str(tmp)), "runbook_stuck_reset", "manual__x", _plan(name))
    ctx = {**_airflow_context(), "dag": dag, "params": params, "run_id": "manual__x", "ti": _TI(),
           "dag_run": mock.Mock(conf={}, triggering_user_name="admin"),
           "task_instance": mock.Mock(id="00000000-0000-0000-0000-000000000000")}
    op.render_template_fields(ctx)
    sent = {}
    with mock.patch.dict(os.environ, env), \
            mock.patch("airflow.providers.standard.operators.hitl.upsert_hitl_detail", lambda **kw: sent.update(kw)):
        try:
            op.execute(ctx)
        except BaseException as e:  # noqa: BLE001 - the task parks itself (TaskAwaitingInput)
            if type(e).__name__ not in ("TaskAwaitingInput", "TaskDeferred"):
                raise
    return sent


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile)
def test_approval_body_shows_the_name_acted_on(name):
    with tempfile.TemporaryDirectory() as tmp:
        sent = _approval(Path(tmp), name)
    assert not hidden(sent["body"], allow="\n")
    assert md(name) in sent["body"]  # never evaluated as a template, never hidden


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile)
@example("{{ 7*7 }}-hostile \u202egnp.exe\u200b\nFORGED")
def test_approval_subject_is_one_line_nothing_hidden(name):
    with tempfile.TemporaryDirectory() as tmp:
        sent = _approval(Path(tmp), name)
    assert not hidden(sent["subject"])
    assert sent["subject"] == visible_controls(f"reset_offsets on cluster lab: Reset offsets of group {name} on {name}")[:250]


# -- the trim runbook (shell) ------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(no_control)
def test_runbook_shell_word_is_the_name_and_shows_invisibles(name):
    word = sh(name)
    assert not hidden(word)
    out = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True)
    assert out.returncode == 0 and out.stdout.decode("utf-8", "surrogateescape") == name


@pytest.mark.parametrize("bad", CONTROLS)
def test_runbook_refuses_control_characters(bad):
    with pytest.raises(UnsafeForShell):
        sh(f"/data/x{bad}y")


def test_trim_runbook_shows_bidi_paths():
    path = "/data/\u202eevil\u200b/00000000000000000000.log"
    shell = environment().get_template("trim_runbook.sh.j2").render(
        plan={"cluster": "lab\u202e"}, digest="sha256:abc", broker=1, segments=[{"files": [path]}],
        quarantine="/q", fix=None)
    assert not hidden(shell, allow="\n")
    mv = [ln for ln in shell.splitlines() if ln.startswith("mv -n ")][0]
    out = subprocess.run(["bash", "-c", "printf %s " + mv.split(" ", 2)[2].rsplit(" ", 1)[0]], capture_output=True)
    assert out.stdout.decode() == path


# -- the audit log line ------------------------------------------------------------------------
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile, hostile)
def test_audit_line_is_one_line_and_the_record_keeps_the_name(name, actor):
    import logging

    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Keep()
    logger = logging.getLogger("fleetkit.core.audit")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            root = DataRoot(tmp)
            audit.record(root, cluster="lab", dag_id="runbook_stuck_reset", run_id="manual__x",
                         action="reset_offsets", event="refused", actor=actor, message=f"group {name} is not empty")
            [row] = audit.records(root, "lab")
            described = audit.describe(row)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)
    assert row["message"] == f"group {name} is not empty" and row["actor"] == actor  # data kept as is
    [line] = seen
    assert not hidden(line)
    assert line.endswith(f"actor={visible_controls(actor or '-')} digest=-: group {visible_controls(name)} is not empty")
    assert not hidden(described, allow="\n") and described.count("\n") == 1

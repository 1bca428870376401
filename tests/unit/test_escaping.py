"""Property tests: arbitrary cluster names never break out of Markdown, HTML or shell."""

from __future__ import annotations

import shlex
import subprocess
from html.parser import HTMLParser

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from fleetkit.core.render import UnsafeForShell, environment, html, md, sh, visible_controls

names = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
nasty = st.sampled_from([
    "x; rm -rf / #", "`code`", "[link](http://evil)", "<script>alert(1)</script>", "a|b|c", "line1\nline2",
    "# heading", "- item", "1. item", "> quote", "***", "![img](x.png)", "&amp;", "\\", "<http://auto.link>",
    "http://bare.example", "*emph*", "__bold__", "~~strike~~", "{{ 7*7 }}", "$(reboot)", "'quoted'", '"dq"',
    "\u202eevil", "tab\there", "\r\n", "|---|", "<!-- c -->", "[x]: http://ref", "www.example.com",
])
hostile = st.one_of(names, nasty, st.lists(nasty, min_size=1, max_size=4).map("".join),
                    st.tuples(names, nasty, names).map("".join))


class _Collect(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def _parse(html_text: str) -> _Collect:
    p = _Collect()
    p.feed(html_text)
    p.close()
    return p


MD = MarkdownIt("commonmark").enable("table")


@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(hostile)
def test_markdown_paragraph_shows_exactly_the_name(name):
    out = MD.render(f"Group: {md(name)}\n")
    parsed = _parse(out)
    assert parsed.tags == ["p"], out  # no link, code, emphasis, heading, list, html...
    assert "".join(parsed.text).strip() == f"Group: {visible_controls(name)}".strip()


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(hostile, hostile)
def test_markdown_table_cells_stay_cells(a, b):
    out = MD.render(f"| group | topic |\n|---|---|\n| {md(a)} | {md(b)} |\n")
    parsed = _parse(out)
    assert parsed.tags.count("td") == 2 and parsed.tags.count("tr") == 2, out
    assert not {"a", "code", "em", "strong", "img", "script"} & set(parsed.tags)


@settings(max_examples=300, deadline=None)
@given(hostile)
def test_html_is_inert(name):
    parsed = _parse(f"<td>{html(name)}</td>")
    assert parsed.tags == ["td"]
    assert "".join(parsed.text) == visible_controls(name)


shell_safe = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Zl", "Zp")), max_size=60)
# shlex knows POSIX quoting only; format characters (bash's $'...') go through a real bash below
posix_safe = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc", "Cf", "Zl", "Zp")), max_size=60)


@settings(max_examples=300, deadline=None)
@given(st.one_of(posix_safe, nasty.filter(lambda s: "\n" not in s and "\t" not in s and "\r" not in s
                                          and "\u202e" not in s)))
def test_shell_word_round_trips(name):
    assert shlex.split(f"echo {sh(name)}") == ["echo", name]


@settings(max_examples=40, deadline=None)
@given(shell_safe)
def test_shell_word_through_a_real_shell(name):
    out = subprocess.run(["bash", "-c", f"printf %s {sh(name)}"], capture_output=True)
    assert out.stdout.decode("utf-8", "surrogateescape") == name


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "nul\x00", "esc\x1b[31m"])
def test_shell_refuses_control_characters(bad):
    with pytest.raises(UnsafeForShell):
        sh(bad)


def test_plan_template_renders_hostile_names_inert():
    name = "x; rm -rf / # `tick` [link](http://evil)\n# not a heading <b>x</b>"
    plan = {"title": f"Reset offsets of group {name}", "cluster": "lab", "action": "reset_offsets",
            "created_at": "2026-01-01T00:00:00Z",
            "changes": [{"target": f"{name}-0", "before": 1, "after": 2}],
            "preconditions": [{"what": f"group {name} is empty"}], "risks": [name],
            "rollback": {"how": name, "dag_id": "runbook_stuck_reset", "conf": {"group": name}}}
    body = environment().get_template("plan.md.j2").render(plan=plan, digest="sha256:abc", details_table=None,
                                                           timeout="4 h")
    out = MD.render(body)
    parsed = _parse(out)
    assert not {"a", "b", "script", "img"} & set(parsed.tags)
    assert parsed.tags.count("h1") == 0 and parsed.tags.count("h2") == 1  # only the template's own title
    assert "code" in parsed.tags  # the digest only
    assert out.count("<code>") == 1 and "<code>sha256:abc</code>" in out


def test_trim_runbook_quotes_hostile_paths():
    """The shell runbook of a trim: every path reaches the shell as one literal word."""
    bad = "/data/x; rm -rf / #`tick`$(id) 'q\" sp"
    plan = {"cluster": "lab\n# forged", "title": "t"}
    files = [f"{bad}/00000000000000000000.log", f"{bad}/00000000000000000000.index"]
    shell = environment().get_template("trim_runbook.sh.j2").render(
        plan=plan, digest="sha256:abc", broker=1, segments=[{"files": files}], quarantine=bad + "/q", fix=None)
    assert "\n# forged" not in shell  # the cluster name cannot start a new line
    mv = [shlex.split(ln) for ln in shell.splitlines() if ln.startswith("mv -n ")]
    assert [m[2] for m in mv] == files
    q = [ln for ln in shell.splitlines() if ln.startswith("QUARANTINE=")][0]
    assert shlex.split(q.split("=", 1)[1]) == [bad + "/q"]

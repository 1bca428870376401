"""Rendering for people: Jinja2 with one escaping filter per medium.

Names from clusters (groups, topics, client ids) are hostile input. Whatever a template shows
goes through the filter of its medium:

* ``md``   Markdown (the approval page): every Markdown/HTML-special character is
  backslash-escaped or turned into an entity, control characters (newlines included) are shown
  as visible escapes, so a name can never open a link, a code span, a table cell or a new block;
* ``html`` HTML (reports): markupsafe escaping (autoescape is on for .html templates too);
* ``sh``   shell (runbooks a person pastes): POSIX single quoting (shlex.quote), control
  characters refused.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import jinja2
from markupsafe import Markup, escape

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"

# Every ASCII punctuation character may be backslash-escaped in CommonMark.
_MD_PUNCT = re.compile(r"([!\"#$%'()*+,\-./:;=?@\[\\\]^_`{|}~])")
_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")


def visible_controls(text) -> str:
    """Control characters as visible escapes: a newline becomes the two characters \\n."""
    text = "" if text is None else str(text)
    def rep(m: re.Match) -> str:
        c = m.group(0)
        return {"\n": "\\n", "\r": "\\r", "\t": "\\t"}.get(c, f"\\x{ord(c):02x}" if ord(c) < 256 else f"\\u{ord(c):04x}")
    return _CONTROL.sub(rep, text)


def md(value) -> str:
    """Escape any value for inline Markdown text (safe in paragraphs, lists and table cells)."""
    if value is None:
        return "—"
    text = visible_controls(str(value))
    text = _MD_PUNCT.sub(r"\\\1", text)
    # HTML-significant characters: entities (CommonMark decodes them back to the literal char)
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def md_code(value) -> str:
    """Show a value as inline code when it is safe to (digests, numbers); else escaped text."""
    text = "" if value is None else str(value)
    if re.fullmatch(r"[A-Za-z0-9:._-]+", text):
        return f"`{text}`"
    return md(text)


def html(value) -> Markup:
    return escape("" if value is None else visible_controls(str(value)))


class UnsafeForShell(ValueError):
    pass


def sh(value) -> str:
    """POSIX-quote one shell word. Control characters (newlines included) are refused: a runbook
    line must stay one line."""
    text = "" if value is None else str(value)
    if "\x00" in text or _CONTROL.search(text):
        raise UnsafeForShell(f"refusing to put a value with control characters into a shell command: {text!r}")
    return shlex.quote(text)


def tojson_compact(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=jinja2.select_autoescape(enabled_extensions=("html", "html.j2"), default_for_string=False),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters.update(md=md, md_code=md_code, html=html, sh=sh, tojson_compact=tojson_compact,
                       visible=visible_controls)
    return env


def render(template: str, **context) -> str:
    return environment().get_template(template).render(**context)

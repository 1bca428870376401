"""Rendering for people: Jinja2 with one escaping filter per medium.

Names from clusters (groups, topics, client ids) are hostile input. Whatever a template shows
goes through the filter of its medium:

* ``md``   Markdown (the approval page): every Markdown/HTML-special character is
  backslash-escaped or turned into an entity, invisible characters (see below) are shown as
  visible escapes, so a name can never open a link, a code span, a table cell or a new block;
* ``html`` HTML (reports): markupsafe escaping (autoescape is on for .html templates too), and the
  same visible escapes;
* ``sh``   shell (runbooks a person pastes): POSIX single quoting (shlex.quote); a value with
  format characters (bidi, zero-width) is written in bash's ``$'...'`` quoting with those
  characters as ``\\xHH`` bytes; control characters (newlines included) are refused.

``visible_controls`` is the one escaping helper for logs, alerts and audit lines too: control
characters (C0, DEL, C1), line/paragraph separators and format characters (bidi embeddings,
overrides and isolates U+202A-202E / U+2066-2069, marks U+200E/F, zero-width U+200B-200D,
U+2060, U+FEFF, soft hyphen, tag characters, ...) become ``\\n``, ``\\r``, ``\\t``, ``\\xHH``,
``\\uHHHH`` or ``\\UHHHHHHHH``, the way Python's repr() writes them. A name shown through it is
one line, in logical order, with nothing hidden: the name shown is the name acted on. It is
idempotent (escaping twice changes nothing), so every sink may apply it; a backslash is kept as
it is, so a name that already holds the text ``\\u202e`` looks like one holding U+202E (both are
shown, neither is hidden).
"""

from __future__ import annotations

import json
import re
import shlex

import jinja2
from markupsafe import Markup, escape

#: the templates ship inside the package (fleetkit/templates), read through importlib.resources
TEMPLATE_PACKAGE = ("fleetkit", "templates")

# Every ASCII punctuation character may be backslash-escaped in CommonMark.
_MD_PUNCT = re.compile(r"([!\"#$%'()*+,\-./:;=?@\[\\\]^_`{|}~])")
# Characters that end a line or are not printable: Unicode categories Cc and Zl/Zp. Refused in a
# shell word (a runbook line must stay one line).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")
# Format characters (Unicode category Cf, Unicode 15): invisible, or reordering what follows
# (bidi overrides and isolates), or joining (zero-width); a name holding one looks like another.
_FORMAT_CLASS = ("\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
                 "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
                 "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f")
_FORMAT = re.compile(f"[{_FORMAT_CLASS}]")
_INVISIBLE = re.compile(f"[\\x00-\\x1f\\x7f-\\x9f\\u2028\\u2029{_FORMAT_CLASS}]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_EDGE_SPACE = re.compile(r"^\s+|\s+$")


def _escape_one(c: str) -> str:
    n = ord(c)
    return _NAMED.get(c) or (f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")


def visible_controls(text) -> str:
    """The text on one line with nothing hidden: control, line-separator and format characters
    (bidi, zero-width, ...) as visible escapes (a newline becomes the two characters \\n, U+202E
    becomes \\u202e). Idempotent; everything else is kept as it is."""
    text = "" if text is None else str(text)
    return _INVISIBLE.sub(lambda m: _escape_one(m.group(0)), text)


def md(value) -> str:
    """Escape any value for inline Markdown text (safe in paragraphs, lists and table cells)."""
    if value is None:
        return "—"
    text = visible_controls(str(value))
    text = _MD_PUNCT.sub(r"\\\1", text)
    # HTML-significant characters: entities (CommonMark decodes them back to the literal char)
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    # leading / trailing spaces as entities: kept in cells and headings, and a name ending in a
    # space cannot undo the template's own **emphasis** around it
    return _EDGE_SPACE.sub(lambda m: "".join(f"&#{ord(c)};" for c in m.group(0)), text)


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
    """Quote one shell word. Control characters (newlines included) are refused: a runbook line must
    stay one line. A value with format characters (bidi, zero-width) is written as bash's $'...'
    with each of them as its UTF-8 bytes (\\xe2\\x80\\xae), so the runbook shows them and bash
    still acts on the exact name; anything else is POSIX single-quoted (shlex.quote)."""
    text = "" if value is None else str(value)
    if _CONTROL.search(text):
        raise UnsafeForShell(f"refusing to put a value with control characters into a shell command: {text!r}")
    if _FORMAT.search(text):
        def one(c: str) -> str:
            if c in "\\'":
                return "\\" + c
            if _FORMAT.fullmatch(c):
                return "".join(f"\\x{b:02x}" for b in c.encode("utf-8"))
            return c
        return "$'" + "".join(one(c) for c in text) + "'"
    return shlex.quote(text)


def tojson_compact(value) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.PackageLoader(*TEMPLATE_PACKAGE),
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

"""What every fleetctl verb says the same way: the exit codes scripts read, red lines on a
terminal, the one line for what could not be seen or judged, padded tables."""

from __future__ import annotations

import sys

#: the exit codes of every fleetctl command, one table (README.md and each command's --help)
OK = 0
#: the command could not do its work: a change refused or failed, a read-back that differs
FAILED = 1
#: bad input: usage, a file, a name, a setting (the line names it)
BAD_INPUT = 2
#: found what it looks for: stuck partitions, corrupt entries, a group not OK, a broken audit
#: chain, a held lock, DAG files out of date
FLAGGED = 3
#: could not see: the cluster unreachable, a refused login or TLS handshake, a missing ACL
BLIND = 4
#: nothing flagged, but partitions with lag could not be judged yet (too little history)
NOT_JUDGED = 5
#: interrupted (Ctrl-C)
INTERRUPTED = 130
EXIT_CODES = ((OK, "done; nothing flagged"), (FAILED, "the command could not do its work (a change refused or "
              "failed, a read-back that differs)"), (BAD_INPUT, "bad input: usage, a file, a name, a setting"),
              (FLAGGED, "found what it looks for (stuck partitions, corrupt entries, a group not OK, a broken "
               "audit chain, a held lock, DAG files out of date)"),
              (BLIND, "could not see: the cluster unreachable, a refused login or TLS handshake, a missing ACL"),
              (NOT_JUDGED, "nothing flagged, but partitions with lag not judged yet (too little history)"),
              (INTERRUPTED, "interrupted"))


def exit_codes_text() -> str:
    """The exit-code table as --help prints it."""
    return "exit codes:\n" + "\n".join(f"  {code:<3} {what}" for code, what in EXIT_CODES)


_stdout_gone = False


def stdout_closed() -> bool:
    """Whether stdout's reader went away (`fleetctl ... | head`); then stdout points at /dev/null, so
    the interpreter's own flush at exit does not fail again (and the answer stays True)."""
    import os
    import select

    global _stdout_gone
    if _stdout_gone:
        return True
    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        closed = any(ev & select.POLLERR for _, ev in poller.poll(0))  # a pipe without a reader
    except (OSError, ValueError):
        return False
    if closed:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
        _stdout_gone = True
    return closed


def red(text: str, stream=None) -> str:
    """`text` in red where `stream` (stderr) is a terminal (and NO_COLOR is not set)."""
    import os

    stream = stream or sys.stderr
    if os.environ.get("NO_COLOR") or not getattr(stream, "isatty", lambda: False)():
        return text
    return f"\033[31m{text}\033[0m"


def say_blind(lines: list[str]) -> int:
    """What could not be seen, one red "error: ..." line on stderr; BLIND (exit 4)."""
    from fleetkit.core.render import visible_controls

    print(red("error: " + "; ".join(visible_controls(line) for line in lines)), file=sys.stderr)
    return BLIND


def say_not_judged(judged: list[dict]) -> int:
    """Nothing flagged but partitions with lag not judged yet (too little history): one red
    "not judged yet: ..." line on stderr naming how many and from when; NOT_JUDGED (exit 5). 0
    when every partition was judged."""
    from fleetkit.stuck.incident import since_text

    waiting = [j for j in judged if j["verdict"].status == "INSUFFICIENT_DATA"]
    if not waiting:
        return 0
    groups = {j["group"] for j in waiting}
    soon = min((j["verdict"].judged_from for j in waiting if j["verdict"].judged_from is not None), default=None)
    print(red(f"not judged yet: {len(waiting)} partition(s) of {len(groups)} group(s) have too little history "
              "(the scheduled collections fill --data-root)"
              + (f"; enough history from about {since_text(soon)}" if soon else "")), file=sys.stderr)
    return NOT_JUDGED


def print_table(headers, rows, out=None) -> None:
    """Columns padded to their widest cell, names made visible (control characters escaped)."""
    from fleetkit.core.render import visible_controls

    out = out or sys.stdout
    cells = [[visible_controls(c) for c in r] for r in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    for r in [list(headers)] + cells:
        print(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)


class ProgressBar:
    """Progress of long work on stderr: on a terminal a bar (done / total, rate, time left), redrawn
    at most ten times a second and gone when the work ends; elsewhere (a log, a pipe, NO_COLOR or
    TERM=dumb) nothing, and the caller's summary line says it all."""

    def __init__(self, what: str, total: int | None, unit: str = ""):
        import os

        self._bar = None
        if not getattr(sys.stderr, "isatty", lambda: False)() or os.environ.get("NO_COLOR") \
                or os.environ.get("TERM") == "dumb":
            return
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskProgressColumn, TextColumn, \
            TimeRemainingColumn

        self._bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             TextColumn(unit), TaskProgressColumn(), TimeRemainingColumn(),
                             console=Console(stderr=True), transient=True, refresh_per_second=10,
                             redirect_stdout=False)  # stdout is the command's answer: never touched
        self._bar.start()
        self._task = self._bar.add_task(what, total=total)

    @property
    def shown(self) -> bool:
        return self._bar is not None

    def update(self, completed: int, total: int | None = None) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, **({} if total is None else {"total": total}))

    def close(self) -> None:
        if self._bar is not None:
            self._bar.stop()
            self._bar = None


def print_json(doc) -> None:
    """A command's --json answer: one JSON document on stdout (names as they are, times as text)."""
    import json

    print(json.dumps(doc, indent=1, ensure_ascii=False, default=str))


def add_json(parser) -> None:
    parser.add_argument("--json", action="store_true", help="one JSON document instead of the text")


def wrapped(text: str) -> str:
    """A --help description, wrapped at 100 columns."""
    import textwrap

    return textwrap.fill(text, 100)


def with_examples(parser, epilog: str) -> None:
    """Give a command's --help its examples (kept as written: one per line)."""
    import argparse

    parser.epilog = epilog
    parser.formatter_class = argparse.RawDescriptionHelpFormatter

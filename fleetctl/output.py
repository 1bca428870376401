"""What every fleetctl verb says the same way: the exit codes scripts read, red lines on a
terminal, the one line for what could not be seen or judged, padded tables."""

from __future__ import annotations

import sys

FLAGGED = 3
#: the cluster could not be reached, or not seen (a refused login, a missing ACL)
BLIND = 4
#: nothing flagged, but partitions with lag could not be judged yet (too little history)
NOT_JUDGED = 5


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


def with_examples(parser, epilog: str) -> None:
    """Give a command's --help its examples (kept as written: one per line)."""
    import argparse

    parser.epilog = epilog
    parser.formatter_class = argparse.RawDescriptionHelpFormatter

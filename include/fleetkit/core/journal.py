"""The execution journal of a destructive step: what it is about to change, then what happened.

Append-only JSON Lines, one file per (capability, DAG, run, cluster) under
<data root>/journals/. Each change writes an `intent` line that is durable (fsync) before the
change is made, and its outcome after, so a step that fails or is killed halfway leaves an exact
account of what it changed: the gate puts it into the `failed` / `interrupted` audit record, and
resume / rollback read it. Entries carry a `seq` (the change's number in the plan) and a `status`.

A writer killed mid-line leaves a torn last line. Opening the journal again recovers it before
anything is appended: the partial line is cut off (its bytes kept beside the journal in
`<name>.torn-<UTC time>`, and logged), so the next line starts on a line of its own instead of
being glued onto the torn one. A journal file created by `Journal` has its folder fsynced, so the
file itself survives a crash, not only its contents.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
from pathlib import Path
from contextlib import contextmanager
from typing import Callable, Iterable

from fleetkit.core.durable import fsync_dir

log = logging.getLogger(__name__)

DONE_STATUSES = frozenset({"done"})
_TAIL_CHUNK = 64 * 1024


def recover_torn_tail(path: str | os.PathLike) -> Path | None:
    """If the file does not end with a newline, cut its partial last line off (the bytes after the
    last newline), keeping them in `<name>.torn-<UTC time>` beside it. Returns that file, or None
    when the tail was whole."""
    path = Path(path)
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return None
        cut, end = 0, size
        while end > 0:  # the last newline, read backwards a chunk at a time
            start = max(0, end - _TAIL_CHUNK)
            f.seek(start)
            at = f.read(end - start).rfind(b"\n")
            if at >= 0:
                cut = start + at + 1
                break
            end = start
        f.seek(cut)
        torn = f.read()
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        sidecar = path.with_name(f"{path.name}.torn-{stamp}")
        with open(sidecar, "xb") as side:
            side.write(torn)
            side.flush()
            os.fsync(side.fileno())
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(path.parent)
    log.warning("journal %s ended with a torn line (%d bytes, a writer killed mid-write): cut off before appending, "
                "kept in %s", path, len(torn), sidecar.name)
    return sidecar


#: journal path -> the check every intent of that journal runs first (`guarded`)
_GUARDS: dict[str, Callable[[], None]] = {}


@contextmanager
def guarded(path: str | os.PathLike | None, check: Callable[[], None]):
    """While the block runs, every `intent` written to the journal at `path` first calls `check`
    (e.g. that the run still holds the cluster's lock): when it raises, the intent is not written and
    the change it announced is not made. The one place every change of every capability passes."""
    if path is None:
        yield
        return
    key = str(Path(path))
    _GUARDS[key] = check
    try:
        yield
    finally:
        _GUARDS.pop(key, None)


class Journal:
    """Append-only JSON Lines: `write([...], sync=True)` returns once the lines are on disk."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self._f = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
            try:
                fd = os.open(self.path, flags | os.O_EXCL, 0o644)
                created = True
            except FileExistsError:
                recover_torn_tail(self.path)
                fd = os.open(self.path, flags, 0o644)
                created = False
            self._f = os.fdopen(fd, "a", encoding="utf-8")
            if created:
                fsync_dir(self.path.parent)

    def write(self, entries: Iterable[dict], sync: bool = True) -> None:
        """Append `entries`; an `intent` among them first passes the journal's guard (`guarded`)."""
        if not self._f:
            return
        entries = list(entries)
        guard = _GUARDS.get(str(self.path))
        if guard is not None and any(e.get("status") == "intent" for e in entries):
            guard()
        stamp = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
        for e in entries:
            self._f.write(json.dumps({"at": stamp, **e}, ensure_ascii=False, sort_keys=True) + "\n")
        self._f.flush()
        if sync:
            os.fsync(self._f.fileno())

    def intent(self, seq: int, **fields) -> None:
        """Durably record that change `seq` is about to be made (after the journal's guard, if any:
        `guarded`)."""
        self.write([{"seq": seq, "status": "intent", **fields}])

    def outcome(self, seq: int, status: str = "done", **fields) -> None:
        """Durably record what became of change `seq` (done, skipped, failed, ...)."""
        self.write([{"seq": seq, "status": status, **fields}])

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None

    def __enter__(self) -> "Journal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def read_journal(path: str | os.PathLike) -> dict[int, dict]:
    """seq -> each change's lines merged, the later ones winning (so an outcome keeps its intent's
    fields; status `intent`: made or about to be, outcome unknown). A torn last line (the writer was
    killed mid-write) is ignored: its change had no outcome yet. A line that is not JSON is skipped;
    when an earlier version glued a whole line onto a torn one, that whole line is read."""
    out: dict[int, dict] = {}
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        return out
    with f:
        for line in f:
            if not line.strip():
                continue
            e = _entry(line)
            if e is None:
                continue
            out[e["seq"]] = {**out.get(e["seq"], {}), **e}
    return out


def _entry(line: str) -> dict | None:
    """One journal line's entry; for a torn line with a whole one glued after it, the whole one."""
    try:
        e = json.loads(line)
    except ValueError:
        e = None
        at = line.find('{"', 1)
        while at > 0:
            try:
                e = json.loads(line[at:])
            except ValueError:
                at = line.find('{"', at + 1)
                continue
            if not (isinstance(e, dict) and {"at", "seq", "status"} <= e.keys()):
                e = None  # a value inside the torn line, not a line of its own
            break
    return e if isinstance(e, dict) and isinstance(e.get("seq"), (int, str)) else None


def summary(path: str | os.PathLike) -> dict:
    """What a journal says was done: counts per status, the changes done, those whose outcome is
    unknown (intent only) and every other outcome (failed, skipped, ...) with its fields."""
    entries = read_journal(path)
    counts: dict[str, int] = {}
    for e in entries.values():
        counts[e["status"]] = counts.get(e["status"], 0) + 1
    return {"journal": str(path), "counts": counts,
            "done": [e for e in entries.values() if e["status"] in DONE_STATUSES],
            "unknown": [e for e in entries.values() if e["status"] == "intent"],
            "other": [e for e in entries.values() if e["status"] not in DONE_STATUSES | {"intent"}]}


def journal_path(data_root: str | os.PathLike, capability: str, dag_id: str, run_id: str, cluster: str) -> Path:
    """<data root>/journals/<capability>/<dag>/<run>/<cluster>.jsonl (each part made a safe folder name)."""
    from fleetkit.core.settings import safe_component

    return (Path(data_root) / "journals" / safe_component(capability) / safe_component(dag_id) /
            safe_component(run_id) / f"{safe_component(cluster)}.jsonl")

"""The execution journal of a destructive step: what it is about to change, then what happened.

Append-only JSON entries, one journal per (capability, DAG, run, cluster), kept by the process's
shared-state store (fleetkit.core.state): a JSON Lines file under <data root>/journals/, or rows
of the deployment's PostgreSQL keyed by that path (FLEET_STATE_CONN_ID), which every host reads.
Each change writes an `intent` entry that is durable (fsync, or a synchronous commit) before the
change is made, and its outcome after, so a step that fails or is killed halfway leaves an exact
account of what it changed: the gate puts it into the `failed` / `interrupted` audit record, and
resume / rollback read it. Entries carry a `seq` (the change's number in the plan) and a `status`.

In a file, a writer killed mid-line leaves a torn last line (a database row is whole or absent).
Opening the journal again recovers it before anything is appended: the partial line is cut off
(its bytes kept beside the journal in `<name>.torn-<UTC time>`, and logged), so the next line
starts on a line of its own instead of being glued onto the torn one. A journal file created by `Journal` has its folder fsynced, so the
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

from fleetkit.core import state
from fleetkit.core.errors import FleetConfigError
from fleetkit.core.state import recover_torn_tail  # noqa: F401 (the file store's repair, kept where it was)

log = logging.getLogger(__name__)

DONE_STATUSES = frozenset({"done"})


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
    """Append-only entries: `write([...], sync=True)` returns once the entries are durable (in the
    process's shared-state store: fsynced lines of a file, or committed rows)."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self._f = state.current().journal_writer(self.path) if self.path else None

    def write(self, entries: Iterable[dict], sync: bool = True) -> None:
        """Append `entries`; an `intent` among them first passes the journal's guard (`guarded`)."""
        if not self._f:
            return
        entries = list(entries)
        guard = _GUARDS.get(str(self.path))
        if guard is not None and any(e.get("status") == "intent" for e in entries):
            guard()
        stamp = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
        self._f.write([json.dumps({"at": stamp, **e}, ensure_ascii=False, sort_keys=True) for e in entries], sync)

    def intent(self, seq: int, **fields) -> None:
        """Durably record that change `seq` is about to be made (after the journal's guard, if any:
        `guarded`)."""
        self.write([{"seq": seq, "status": "intent", **fields}])

    def outcome(self, seq: int, status: str = "done", **fields) -> None:
        """Durably record what became of change `seq` (done, skipped, failed, ...)."""
        self.write([{"seq": seq, "status": status, **fields}])

    def step(self, seq, fn: Callable[[], object], *, failures: tuple[type[BaseException], ...] = (Exception,),
             on_error: Callable[[BaseException], dict] | None = None, **fields):
        """Make change `seq`: its intent (`fields`) durable first, then `fn()`, then its outcome `done`
        (with fn's result when that is a dict). When fn raises one of `failures`, the outcome is
        `failed` with the error (and what `on_error(e)` returns, which may replace it); any other
        error, or `failures=()`, leaves the intent without an outcome: a change of unknown result,
        which a resume checks on the cluster itself. The error is re-raised either way. Returns fn's
        result."""
        self.intent(seq, **fields)
        try:
            out = fn()
        except failures as e:
            self.outcome(seq, "failed", **{"error": f"{type(e).__name__}: {e}", **(on_error(e) if on_error else {})})
            raise
        self.outcome(seq, "done", **(out if isinstance(out, dict) else {}))
        return out

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
    for line in state.current().journal_lines(path):
        if not line.strip():
            continue
        e = _entry(line)
        if e is None:
            continue
        out[e["seq"]] = {**out.get(e["seq"], {}), **e}
    return out


def exists(path: str | os.PathLike) -> bool:
    """Whether the journal at `path` holds anything (or its file exists)."""
    return state.current().journal_exists(path)


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
    """<data root>/journals/<capability>/<dag>/<run>/<cluster>.jsonl (each part made a safe folder name):
    the journal's file, or its key in a shared-state database. A data root on an object store
    (a URI) holds no journal (no append, no fsync): FleetConfigError unless the shared run state
    is a database (FLEET_STATE_CONN_ID)."""
    from fleetkit.core.settings import safe_component

    if "://" in str(data_root) and not state.current().shared:
        raise FleetConfigError(f"FLEET_DATA_ROOT {str(data_root)!r} is an object store: an execution journal cannot be "
                               "appended and flushed there; set FLEET_STATE_CONN_ID (the shared run state in "
                               "PostgreSQL, docs/deploy.md) to keep the journals in the database")
    return (Path(data_root) / "journals" / safe_component(capability) / safe_component(dag_id) /
            safe_component(run_id) / f"{safe_component(cluster)}.jsonl")

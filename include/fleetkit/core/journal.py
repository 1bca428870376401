"""The execution journal of a destructive step: what it is about to change, then what happened.

Append-only JSON Lines, one file per (capability, DAG, run, cluster) under
<data root>/journals/. Each change writes an `intent` line that is durable (fsync) before the
change is made, and its outcome after, so a step that fails or is killed halfway leaves an exact
account of what it changed: the gate puts it into the `failed` / `interrupted` audit record, and
resume / rollback read it. Entries carry a `seq` (the change's number in the plan) and a `status`.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path
from typing import Iterable

DONE_STATUSES = frozenset({"done"})


class Journal:
    """Append-only JSON Lines: `write([...], sync=True)` returns once the lines are on disk."""

    def __init__(self, path: str | os.PathLike | None):
        self.path = Path(path) if path else None
        self._f = None
        if self.path:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a", encoding="utf-8")

    def write(self, entries: Iterable[dict], sync: bool = True) -> None:
        if not self._f:
            return
        stamp = dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")
        for e in entries:
            self._f.write(json.dumps({"at": stamp, **e}, ensure_ascii=False, sort_keys=True) + "\n")
        self._f.flush()
        if sync:
            os.fsync(self._f.fileno())

    def intent(self, seq: int, **fields) -> None:
        """Durably record that change `seq` is about to be made."""
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
    fields; status `intent`: made or about to be, outcome unknown). A torn last line (the writer was killed mid-write) is ignored: its change had no outcome yet."""
    out: dict[int, dict] = {}
    try:
        f = open(path, encoding="utf-8")
    except FileNotFoundError:
        return out
    with f:
        for line in f:
            if not line.strip():
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            out[e["seq"]] = {**out.get(e["seq"], {}), **e}
    return out


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

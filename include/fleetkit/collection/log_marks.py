"""Which log the saved positions of __consumer_offsets were read from.

The collection reads each partition on from where it stopped. A cluster re-created under the same
name (or its __consumer_offsets topic re-created) can have a log as long as the old one: the saved
position then looks valid while every record behind it is another log's. So, per partition, the
collection keeps a mark: the offset and a fingerprint (SHA-256 of the key and value bytes) of the
last record it read. Before reading on, it reads the record at that offset again:

  same bytes               the same log: read on from the saved position
  other bytes              another log (offsets are never reused within one log; compaction only
                           removes records): read again from the log start, and the rows collected
                           before are superseded
  log end below the mark   the log was truncated (an unclean leader election) or re-created: the
                           same
  no record there          compacted away, below the log start, a transaction marker: not
                           verifiable; the position stands (the log-start check still applies)

`superseded_before(root, cluster)` gives, per partition, the collection time from which the
dataset's rows are of the current log; the health and trim jobs read only those.
"""

from __future__ import annotations

import datetime as dt
import hashlib

from fleetkit.core.datasets import DataRoot

STATE_FILE = "offsets_topic_log_marks.json"


def fingerprint(key: bytes | None, value: bytes | None) -> str:
    """SHA-256 of a record's key and value bytes (lengths first: no two records share one text)."""
    h = hashlib.sha256()
    for part in (key, value):
        h.update(b"-" if part is None else len(part).to_bytes(8, "big") + part)
    return h.hexdigest()


def path(root: DataRoot, cluster: str) -> str:
    return root.join("_state", f"cluster={cluster}", STATE_FILE)


def load(root: DataRoot, cluster: str) -> dict:
    """{"marks": {partition: {"offset", "sha256"}}, "superseded_before": {partition: ISO time}}
    (partitions as ints; empty for a cluster collected before marks were kept)."""
    doc = root.read_json(path(root, cluster), default=None) or {}
    marks = {int(p): {"offset": int(m["offset"]), "sha256": str(m["sha256"])}
             for p, m in (doc.get("marks") or {}).items()}
    return {"marks": marks, "superseded_before": {int(p): str(t) for p, t in (doc.get("superseded_before") or {}).items()}}


def save(root: DataRoot, cluster: str, state: dict) -> None:
    root.write_json_atomic(path(root, cluster), {
        "marks": {str(p): m for p, m in sorted(state["marks"].items())},
        "superseded_before": {str(p): t for p, t in sorted(state["superseded_before"].items())}})


def superseded_before(root: DataRoot, cluster: str) -> dict[int, str]:
    """Per partition whose log changed under the collection: the collection time (ISO) from which
    the dataset's rows are of the current log."""
    return load(root, cluster)["superseded_before"]


def superseded_since(root: DataRoot, clusters) -> list[tuple[str, int, dt.datetime]]:
    """(cluster, partition, collection time) of every partition of `clusters` whose log changed
    under the collection: the readers of offsets_topic_records keep only its rows collected since.
    Names each on stdout (the jobs' logs)."""
    since = [(c, p, dt.datetime.fromisoformat(t)) for c in clusters for p, t in superseded_before(root, c).items()]
    for c, p, t in since:
        print(f"offsets_topic_records: {c} partition {p}: only the rows collected since {t.isoformat()} (the log "
              "was replaced under the collection)", flush=True)
    return since


def changed(marks: dict[int, dict], saved: dict[int, int], log_ends: dict[int, int | None],
            found: dict[int, str]) -> dict[int, str]:
    """The partitions whose saved position is of another log, with why. `found`: the fingerprint
    of the record now at each mark's offset (absent: none could be read there)."""
    out = {}
    for p, m in marks.items():
        if saved.get(p) is None or m["offset"] >= saved[p]:
            continue  # a mark of an older position than the one saved: not used
        end = log_ends.get(p)
        if end is not None and end <= m["offset"]:
            out[p] = (f"its log end {end} is at or below the last record read before (offset {m['offset']}): "
                      "the log was truncated or re-created")
        elif p in found and found[p] != m["sha256"]:
            out[p] = (f"the record at offset {m['offset']} is not the one read before: the cluster or the topic "
                      "was re-created under this name")
    return out

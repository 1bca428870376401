"""The audit dataset: who did what to which cluster, when, with which plan, before -> after.

Events: planned, dry_run, approved, rejected, refused, executed, failed (execute raised: details
hold the journal's account of what was changed), interrupted (execute was killed or ended without
a record: the same account, written by the gate's teardown), teardown, verified, verify_failed,
rollback_requested, resumed (an interrupted run finished from its journal), restored (its changes
put back from the journal). `details` is JSON (before/after values, refusal reasons, the rollback conf).

Append-only and tamper-evident: each cluster's records form one hash chain. A record carries
`prev_hash` (the `hash` of the cluster's record before it; GENESIS for the first) and `hash`
(SHA-256 over the canonical JSON of the record's fields, prev_hash included). The newest hash of
each chain (its head) is kept outside the data root, in the heads folder (FLEET_AUDIT_HEADS_DIR,
default <FLEET_LOCK_DIR>/audit-heads), one file per (data root, cluster), so a truncated tail is
caught too. `verify` reports modified, removed, inserted and re-ordered records and a tail that
no longer ends at the head. Records written before the chain existed (no hash) are counted as
"before the chain". What this does not catch: someone who rewrites the whole chain after a point
and the head file as well (the hash is not keyed).

Appends to one cluster's chain are serialized by an exclusive fcntl.flock on a lock file in the
heads folder, held for the few milliseconds of the append. The heads folder must therefore be on
one machine's filesystem, or on a shared filesystem whose locks work across hosts (not every NFS
setup does): every worker that can write audit records must use the same one.
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import logging
import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fleetkit.core.datasets import DataRoot, iso_z, read_dataset, utcnow, write_collection
from fleetkit.core.errors import FleetError
from fleetkit.core.render import visible_controls as v

log = logging.getLogger(__name__)

EVENTS = ("planned", "dry_run", "approved", "rejected", "refused", "executed", "failed", "interrupted",
          "teardown", "verified", "verify_failed", "rollback_requested", "resumed", "restored",
          "lock_cleared")

GENESIS = "0" * 64  # prev_hash of a chain's first record
HASHED_FIELDS = ("cluster", "observed_at", "record_id", "dag_id", "run_id", "action", "event", "actor",
                 "digest", "message", "details", "prev_hash")
LOCK_TIMEOUT_S = 60.0


# -- the chain's hash ------------------------------------------------------------------------------
def _utc(ts: dt.datetime) -> dt.datetime:
    return ts.replace(tzinfo=dt.timezone.utc) if ts.tzinfo is None else ts.astimezone(dt.timezone.utc)


def canonical(row: dict) -> bytes:
    """The bytes a record's hash covers: its fields (prev_hash included) as sorted, compact JSON,
    observed_at as ISO-8601 UTC with microseconds."""
    doc = {k: row.get(k) for k in HASHED_FIELDS}
    doc["observed_at"] = _utc(row["observed_at"]).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    doc["chain"] = 1
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def record_hash(row: dict) -> str:
    return hashlib.sha256(canonical(row)).hexdigest()


# -- where the heads live ----------------------------------------------------------------------------
def heads_dir() -> Path:
    """FLEET_AUDIT_HEADS_DIR, default <lock dir>/audit-heads (outside the data root)."""
    from fleetkit.core.settings import lock_dir

    return Path(os.environ.get("FLEET_AUDIT_HEADS_DIR") or Path(lock_dir()) / "audit-heads")


def _short(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def _name(value: str) -> str:
    from fleetkit.core.settings import safe_component

    try:
        readable = safe_component(value)[:60]
    except ValueError:
        readable = "x"
    return f"{readable}-{_short(value)}"


def root_id(root: DataRoot) -> str:
    """The data root as one string (a local folder resolved, a URI's filesystem and path)."""
    if root.fs.type_name == "local":
        return os.path.realpath(root.path)
    return f"{root.fs.type_name}://{root.path.rstrip('/')}"


def _root_folder(root: DataRoot) -> Path:
    """<heads dir>/<last part of the data root>-<hash of the whole root>/"""
    from fleetkit.core.settings import safe_component

    rid = root_id(root)
    try:
        readable = safe_component(rid.rstrip("/").rsplit("/", 1)[-1])[:60]
    except ValueError:
        readable = "root"
    return heads_dir() / f"{readable}-{_short(rid)}"


class Chain:
    """One cluster's chain in one data root: its head file and its append lock."""

    def __init__(self, root: DataRoot, cluster: str):
        self.root, self.cluster = root, cluster
        folder = _root_folder(root)
        self.head_path = folder / f"{_name(cluster)}.head.json"
        self.lock_path = folder / f"{_name(cluster)}.lock"
        self._fd: int | None = None

    # the lock
    def __enter__(self) -> "Chain":
        self.lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.lock_path, os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise FleetError(f"audit of cluster {self.cluster!r}: the append lock {self.lock_path} was "
                                     f"held for more than {LOCK_TIMEOUT_S:.0f}s by another process") from None
                time.sleep(0.005)
        self._fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    # the head
    def read_head(self) -> dict | None:
        try:
            return json.loads(self.head_path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise FleetError(f"audit head file {self.head_path} is not valid JSON ({e}); "
                             "check the audit with `fleetctl audit verify`") from None

    def write_head(self, doc: dict) -> None:
        self.head_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.head_path.with_name(f".tmp-{uuid.uuid4().hex}-{self.head_path.name}")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(doc, f, sort_keys=True, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.head_path)

    def head_doc(self, row: dict, **extra) -> dict:
        return {"cluster": self.cluster, "data_root": root_id(self.root), "hash": row["hash"],
                "record_id": row["record_id"], "observed_at": iso_z(row["observed_at"]), **extra}

    def rows(self, since: dt.date | None = None) -> list[dict]:
        return read_dataset(self.root, "audit", self.cluster, since=since).to_pylist()

    def tip(self, head: dict | None) -> tuple[str, dict]:
        """The hash the next record chains to, and the head fields to carry over. A head left
        `pending` by a writer that died mid-append is resolved by looking for its record; a head
        that is missing while the dataset holds a chain is rebuilt from the dataset (and says so)."""
        carry = {k: head[k] for k in ("reanchored",) if head and k in head}
        if head and head.get("pending"):
            p = head["pending"]
            day = dt.date.fromisoformat(p["observed_at"][:10])
            if any(r["hash"] == p["hash"] for r in self.rows(since=day)):
                return p["hash"], carry
            return head["hash"], carry
        if head:
            return head["hash"], carry
        chained = [r for r in self.rows() if r.get("hash")]
        if not chained:
            return GENESIS, carry
        referenced = {r["prev_hash"] for r in chained}
        tips = [r for r in chained if r["hash"] not in referenced] or chained
        newest = max(tips, key=lambda r: r["observed_at"])
        log.error("AUDIT head file %s of cluster %r is missing although the audit holds %d chained record(s): "
                  "continuing the chain from record %s (%s); `fleetctl audit verify` reports this",
                  self.head_path, self.cluster, len(chained), newest["record_id"], iso_z(newest["observed_at"]))
        carry["reanchored"] = [{"at": iso_z(utcnow()), "record_id": newest["record_id"], "hash": newest["hash"]}]
        return newest["hash"], carry


# -- writing -----------------------------------------------------------------------------------------
def record(root: DataRoot, *, cluster: str, dag_id: str, run_id: str, action: str, event: str,
           actor: str | None = None, digest: str | None = None, message: str = "",
           details: dict | None = None, now: dt.datetime | None = None) -> dict:
    """Append one record to the cluster's chain (under the chain's lock; reads only the head file)."""
    if event not in EVENTS:
        raise ValueError(f"unknown audit event {event!r} (known: {', '.join(EVENTS)})")
    now = _utc(now or utcnow())
    row = {"cluster": cluster, "observed_at": now, "record_id": uuid.uuid4().hex, "dag_id": dag_id,
           "run_id": run_id, "action": action, "event": event, "actor": actor, "digest": digest,
           "message": message, "details": json.dumps(details or {}, sort_keys=True, default=str)}
    with Chain(root, cluster) as chain:
        head = chain.read_head()
        row["prev_hash"], carry = chain.tip(head)
        row["hash"] = record_hash(row)
        # the head names the record about to land, so a writer killed between the two writes
        # leaves a head the next append (and verify) can resolve
        chain.write_head({**(head or {"cluster": cluster, "data_root": root_id(root), "hash": GENESIS}), **carry,
                          "pending": {"hash": row["hash"], "record_id": row["record_id"],
                                      "observed_at": iso_z(row["observed_at"])}})
        try:
            write_collection(root, cluster, now, {"audit": [row]})
        except BaseException:
            if head is None:
                chain.head_path.unlink(missing_ok=True)
            else:
                chain.write_head(head)
            raise
        chain.write_head(chain.head_doc(row, **carry))
    # one line, whatever a name in the message holds (newlines, bidi, zero-width: shown escaped)
    log.info("AUDIT %s %s cluster=%s run=%s actor=%s digest=%s: %s", action, event, v(cluster), v(run_id),
             v(actor or "-"), v(digest or "-"), v(message))
    return row


# -- reading -----------------------------------------------------------------------------------------
def records(root: DataRoot, cluster: str | None = None, run_id: str | None = None) -> list[dict]:
    rows = read_dataset(root, "audit", cluster).to_pylist()
    if run_id is not None:
        rows = [r for r in rows if r["run_id"] == run_id]
    for r in rows:
        r["details"] = json.loads(r["details"] or "{}")
    return sorted(rows, key=lambda r: r["observed_at"])


def find(root: DataRoot, record_id: str) -> dict:
    for r in records(root):
        if r["record_id"] == record_id:
            return r
    raise FleetError(f"no audit record {record_id!r} under {root.uri}")


def describe(r: dict) -> str:
    return (f"{iso_z(r['observed_at'])} {v(r['cluster'])} {v(r['action'])} {r['event']:<13} "
            f"by {v(r['actor'] or '-')} run {v(r['run_id'])} {v(r['digest'] or '')} {r['record_id']}\n    "
            f"{v(r['message'])}")


# -- verifying ---------------------------------------------------------------------------------------
@dataclass
class ChainReport:
    cluster: str
    chained: int = 0            # records on the chain (from the head back to the first record)
    before_chain: int = 0       # records written before the chain existed (no hash)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (record id, what is wrong)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _label(r: dict) -> str:
    return f"{r['event']} of run {r['run_id']!r} at {iso_z(r['observed_at'])}"


def audit_clusters(root: DataRoot) -> list[str]:
    """Clusters with audit records under the data root or a head in the heads folder."""
    from pyarrow import fs as pafs

    names = set()
    base = root.join("audit")
    if root.exists(base):
        for info in root.fs.get_file_info(pafs.FileSelector(base)):
            name = info.path.rstrip("/").rsplit("/", 1)[-1]
            if info.type == pafs.FileType.Directory and name.startswith("cluster="):
                names.add(name[len("cluster="):])
    folder = _root_folder(root)
    if folder.is_dir():
        for p in folder.glob("*.head.json"):
            try:
                names.add(json.loads(p.read_text(encoding="utf-8"))["cluster"])
            except (ValueError, KeyError, OSError):
                names.add(p.name)
    return sorted(names)


def verify_chain(root: DataRoot, cluster: str) -> ChainReport:
    """Check one cluster's chain: every record's hash, every link, the tail against the head."""
    chain = Chain(root, cluster)
    rep = ChainReport(cluster)
    rows = chain.rows()
    chained = [r for r in rows if r.get("hash")]
    legacy = [r for r in rows if not r.get("hash")]
    rep.before_chain = len(legacy)

    by_hash: dict[str, dict] = {}
    for r in sorted(chained, key=lambda r: r["observed_at"]):
        if record_hash(r) != r["hash"]:
            rep.problems.append((r["record_id"], f"modified: the record ({_label(r)}) no longer matches its hash"))
        if r["hash"] in by_hash:
            rep.problems.append((r["record_id"], f"duplicated: the same record ({_label(r)}) is stored twice"))
            continue
        by_hash[r["hash"]] = r
    if chained:
        start = min(r["observed_at"] for r in chained)
        for r in legacy:
            if r["observed_at"] > start:
                rep.problems.append((r["record_id"], f"inserted: a record without hash ({_label(r)}) dated after "
                                                     "the chain began"))

    head = chain.read_head()
    tip: dict | None = None
    if head is None:
        if chained:
            newest = max(chained, key=lambda r: r["observed_at"])
            rep.problems.append((newest["record_id"], f"no head file {chain.head_path}: the end of the chain cannot "
                                                      "be checked (was the heads folder lost or moved?)"))
    else:
        for note in head.get("reanchored") or []:
            rep.warnings.append(f"the head was lost and rebuilt from the audit itself at {note.get('at')} "
                                f"(after record {note.get('record_id')}): a tail removed before then is not detectable")
        tip_hash = head.get("hash")
        pending = head.get("pending") or {}
        p = by_hash.get(pending.get("hash"))
        if p is not None and p["prev_hash"] == tip_hash:
            tip_hash = p["hash"]  # the writer died after writing the record, before updating the head
        if tip_hash != GENESIS:
            tip = by_hash.get(tip_hash)
            if tip is None:
                rep.problems.append((head.get("record_id") or "?",
                                     f"truncated: the newest record (per the head file, at {head.get('observed_at')}) "
                                     "is not in the audit: the tail was removed, or that record was altered"))
        elif chained:
            rep.problems.append((min(chained, key=lambda r: r["observed_at"])["record_id"],
                                 "inserted: records exist although the head file says the chain is empty"))
    if tip is None and chained and not (head and head.get("hash") == GENESIS):
        referenced = {r["prev_hash"] for r in chained}
        tips = [r for r in by_hash.values() if r["hash"] not in referenced] or list(by_hash.values())
        tip = max(tips, key=lambda r: r["observed_at"])

    # walk back from the tip; everything the walk does not reach is not on the chain
    visited: set[str] = set()
    bottom = None
    cur = tip
    while cur is not None and cur["hash"] not in visited:
        visited.add(cur["hash"])
        if cur["prev_hash"] == GENESIS:
            break
        nxt = by_hash.get(cur["prev_hash"])
        if nxt is None:
            bottom = cur
        cur = nxt
    rep.chained = len(visited)

    rest = {h: r for h, r in by_hash.items() if h not in visited}
    # the records off the chain, as segments (each followed from its newest record back)
    referenced = {r["prev_hash"] for r in rest.values()}
    for top in sorted((r for r in rest.values() if r["hash"] not in referenced), key=lambda r: r["observed_at"]):
        seg = [top]
        while seg[-1]["prev_hash"] in rest and rest[seg[-1]["prev_hash"]] not in seg:
            seg.append(rest[seg[-1]["prev_hash"]])
        reaches_genesis = seg[-1]["prev_hash"] == GENESIS
        if bottom is not None and reaches_genesis:
            rep.problems.append((bottom["record_id"], f"chain broken before this record ({_label(bottom)}): the record "
                                 f"it follows is missing; the last intact record before the break is {top['record_id']} "
                                 f"({_label(top)}): a record was removed, inserted or re-ordered"))
            bottom = None
        else:
            where = (f"it follows record {by_hash[seg[-1]['prev_hash']]['record_id']}"
                     if seg[-1]["prev_hash"] in by_hash else "the record it follows is missing")
            rep.problems.append((top["record_id"], f"off the chain: {len(seg)} record(s) ending with this one "
                                 f"({_label(top)}) are not on the chain that ends at the head ({where}): "
                                 "inserted, re-ordered, or the record after it was removed"))
    if bottom is not None:
        rep.problems.append((bottom["record_id"], f"chain broken before this record ({_label(bottom)}): the record it "
                             "follows is missing: a record was removed, inserted or re-ordered"))
    return rep


def verify(root: DataRoot, cluster: str | None = None) -> list[ChainReport]:
    """Every cluster's chain (or one cluster's)."""
    clusters = [cluster] if cluster is not None else audit_clusters(root)
    return [verify_chain(root, c) for c in clusters]

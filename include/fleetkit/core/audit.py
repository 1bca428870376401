"""The audit dataset: who did what to which cluster, when, with which plan, before -> after.

Events: planned, dry_run, approved, rejected, refused, executed, failed (execute raised: details
hold the journal's account of what was changed), interrupted (execute was killed or ended without
a record: the same account, written by the gate's teardown), teardown, verified, verify_failed,
rollback_requested, resumed (an interrupted run finished from its journal), restored (its changes
put back from the journal). `details` is JSON (before/after values, refusal reasons, the rollback conf).

Append-only and tamper-evident: each cluster's records form one keyed hash chain. A record carries
`prev_hash` (the `hash` of the cluster's record before it; GENESIS for the first), `key_id` (which
audit key signed it) and `hash` (HMAC-SHA256, with that key, over the canonical JSON of the
record's fields, prev_hash and key_id included). The newest hash of each chain (its head) is kept
outside the data root, itself signed with the key, so a truncated tail is caught too: by the
process's shared-state store (fleetkit.core.state), in the heads folder (FLEET_AUDIT_HEADS_DIR,
default <FLEET_LOCK_DIR>/audit-heads, one file per (data root, cluster)) or as rows of the
deployment's PostgreSQL (FLEET_STATE_CONN_ID). `verify` reports modified, removed, inserted and re-ordered records,
a tail that no longer ends at the head, a head whose signature does not verify, and a head that
was lost and rebuilt from the audit (`reanchored`): that one stays a failure for good, it is the
trace of a deleted head file.

The audit key (see "The audit key" in docs/runbooks.md) lives in the deployment's secrets, never beside
the data: the environment variable AIRFLOW_VAR_FLEET_AUDIT_KEY (the Airflow Variable
`fleet_audit_key`), `[KEY_ID:]SECRET`; keys retired by a rotation stay readable through
AIRFLOW_VAR_FLEET_AUDIT_KEYS_PREVIOUS (comma-separated entries of the same form). Writing a record
without a key fails. Records written before the chain existed (no hash) are counted as "before
the chain", records chained with the unkeyed SHA-256 of earlier versions as "before the key"; a
chain of those only gets a signed head through `seal` (`fleetctl audit seal`), an operator's step
after the upgrade. What this does not catch: someone who holds the key and rewrites the chain and
its head.

Appends to one cluster's chain are serialized, held for the few milliseconds of the append: by an
exclusive fcntl.flock on a lock file in the heads folder (which must therefore be on one machine's
filesystem, or a shared filesystem whose locks work across hosts: not every NFS setup does), or by
a PostgreSQL advisory lock of the (data root, cluster) when the state is shared there. Every
worker that can write audit records must use the same store.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import logging
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fleetkit.core import state
from fleetkit.core.datasets import DataRoot, iso_z, read_dataset, utcnow, write_collection
from fleetkit.core.errors import FleetError
from fleetkit.core.render import visible_controls as v

log = logging.getLogger(__name__)

EVENTS = ("planned", "dry_run", "approved", "rejected", "refused", "executed", "failed", "interrupted",
          "teardown", "verified", "verify_failed", "rollback_requested", "resumed", "restored",
          "lock_cleared", "restore_approved")

GENESIS = "0" * 64  # prev_hash of a chain's first record
HASHED_FIELDS = ("cluster", "observed_at", "record_id", "dag_id", "run_id", "action", "event", "actor",
                 "digest", "message", "details", "prev_hash")
LOCK_TIMEOUT_S = state.CHAIN_LOCK_TIMEOUT_S


# -- the audit key ----------------------------------------------------------------------------------
KEY_VAR = "AIRFLOW_VAR_FLEET_AUDIT_KEY"                      # the Airflow Variable fleet_audit_key
PREVIOUS_KEYS_VAR = "AIRFLOW_VAR_FLEET_AUDIT_KEYS_PREVIOUS"  # the Airflow Variable fleet_audit_keys_previous
MIN_SECRET_CHARS = 32
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,32}")


class AuditKey:
    """One HMAC key and its id. The secret is never shown (repr, str, messages)."""

    __slots__ = ("key_id", "_secret")

    def __init__(self, key_id: str, secret: bytes):
        self.key_id = key_id
        self._secret = secret

    def mac(self, data: bytes) -> str:
        return hmac.new(self._secret, data, hashlib.sha256).hexdigest()

    def same_secret(self, other: "AuditKey") -> bool:
        return hmac.compare_digest(self._secret, other._secret)

    def __repr__(self) -> str:
        return f"AuditKey(key_id={self.key_id!r})"

    __str__ = __repr__


@dataclass(frozen=True)
class AuditKeys:
    """The key new records are signed with (None: not configured) and every key verify accepts."""
    current: AuditKey | None
    by_id: dict[str, AuditKey]

    def require_current(self) -> AuditKey:
        if self.current is None:
            raise FleetError(f"no audit key: set the environment variable {KEY_VAR} (the Airflow Variable "
                             "fleet_audit_key) in the environment of every Airflow worker and of fleetctl; "
                             "the audit refuses to write unsigned records (docs/runbooks.md: \"The audit key\")")
        return self.current


def parse_key(entry: str, where: str = KEY_VAR) -> AuditKey:
    """`[KEY_ID:]SECRET` -> AuditKey. Without KEY_ID the id is the first 8 hex digits of the
    SHA-256 of SECRET. Errors name `where`, never the secret."""
    entry = entry.strip()
    key_id, sep, secret = entry.partition(":")
    if not sep:
        key_id, secret = hashlib.sha256(entry.encode("utf-8")).hexdigest()[:8], entry
    elif not _KEY_ID.fullmatch(key_id):
        raise FleetError(f"{where}: the key id before ':' must be 1 to 32 letters, digits, '_', '.' or '-'")
    if len(secret) < MIN_SECRET_CHARS:
        raise FleetError(f"{where}: the audit key{' ' + repr(key_id) if sep else ''} is shorter than "
                         f"{MIN_SECRET_CHARS} characters; make one with "
                         "python -c 'import secrets; print(secrets.token_hex(32))'")
    return AuditKey(key_id, secret.encode("utf-8"))


def load_keys(environ: dict | None = None) -> AuditKeys:
    """The audit keys from the environment: KEY_VAR (current) and PREVIOUS_KEYS_VAR (retired keys,
    comma-separated). Two different secrets under one key id are an error."""
    env = os.environ if environ is None else environ
    current = parse_key(env[KEY_VAR], KEY_VAR) if (env.get(KEY_VAR) or "").strip() else None
    by_id: dict[str, AuditKey] = {}
    entries = [e for e in (env.get(PREVIOUS_KEYS_VAR) or "").split(",") if e.strip()]
    keys = [parse_key(e, f"{PREVIOUS_KEYS_VAR} (entry {i + 1})") for i, e in enumerate(entries)]
    for k in ([current] if current else []) + keys:
        known = by_id.get(k.key_id)
        if known is not None and not known.same_secret(k):
            raise FleetError(f"audit key id {k.key_id!r} is given twice with different secrets "
                             f"({KEY_VAR}, {PREVIOUS_KEYS_VAR}): give each key its own id")
        by_id.setdefault(k.key_id, k)
    return AuditKeys(current, by_id)


class UnknownKey(FleetError):
    """A record or head signed with a key that is not configured."""

    def __init__(self, key_id: str):
        super().__init__(f"signed with audit key id {key_id!r}, which is not configured "
                         f"(neither {KEY_VAR} nor {PREVIOUS_KEYS_VAR} holds it)")
        self.key_id = key_id


# -- the chain's hash ------------------------------------------------------------------------------
def _utc(ts: dt.datetime) -> dt.datetime:
    return ts.replace(tzinfo=dt.timezone.utc) if ts.tzinfo is None else ts.astimezone(dt.timezone.utc)


def canonical(row: dict) -> bytes:
    """The bytes a record's hash covers: its fields (prev_hash included, and key_id for a keyed
    record) as sorted, compact JSON, observed_at as ISO-8601 UTC with microseconds."""
    doc = {k: row.get(k) for k in HASHED_FIELDS}
    doc["observed_at"] = _utc(row["observed_at"]).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    if row.get("key_id"):
        doc["key_id"] = row["key_id"]
        doc["chain"] = 2
    else:
        doc["chain"] = 1
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def record_hash(row: dict, keys: AuditKeys | None = None) -> str:
    """A record's hash: HMAC-SHA256 with the key its key_id names (UnknownKey when that key is not
    configured), or the unkeyed SHA-256 of a record written before the key (no key_id)."""
    if row.get("key_id"):
        key = (keys or load_keys()).by_id.get(row["key_id"])
        if key is None:
            raise UnknownKey(row["key_id"])
        return key.mac(canonical(row))
    return hashlib.sha256(canonical(row)).hexdigest()


def _head_bytes(doc: dict) -> bytes:
    body = {k: v for k, v in doc.items() if k != "mac"}
    return b"fleet-audit-head:" + json.dumps(body, sort_keys=True, separators=(",", ":"),
                                             ensure_ascii=False).encode("utf-8")


def sign_head(doc: dict, key: AuditKey) -> dict:
    doc = {**{k: v for k, v in doc.items() if k != "mac"}, "key_id": key.key_id}
    return {**doc, "mac": key.mac(_head_bytes(doc))}


def head_signature(head: dict, keys: AuditKeys) -> str:
    """'ok', 'unsigned' (a head of an earlier version), 'bad' (does not verify) or 'unknown-key'."""
    if "mac" not in head and "key_id" not in head:
        return "unsigned"
    key = keys.by_id.get(head.get("key_id") or "")
    if key is None:
        return "unknown-key"
    return "ok" if hmac.compare_digest(str(head.get("mac") or ""), key.mac(_head_bytes(head))) else "bad"


# -- where the heads live ----------------------------------------------------------------------------
def heads_dir() -> Path:
    """FLEET_AUDIT_HEADS_DIR, default <lock dir>/audit-heads (outside the data root): the heads of
    the local-files store (fleetkit.core.state)."""
    return state.FILES.heads_dir()


def root_id(root: DataRoot) -> str:
    """The data root as one string (a local folder resolved, a URI's filesystem and path)."""
    if root.fs.type_name == "local":
        return os.path.realpath(root.path)
    return f"{root.fs.type_name}://{root.path.rstrip('/')}"


def _root_folder(root: DataRoot) -> Path:
    """<heads dir>/<last part of the data root>-<hash of the whole root>/ (the local-files store)"""
    return state.FILES.root_folder(root_id(root))


# -- the registry of a data root's chains ---------------------------------------------------------
#: <root folder>/chains.json: every chain of the data root and its newest record (hash, id, time),
#: signed with the audit key, rewritten by each append. A chain deleted whole (its rows and its head)
#: or rolled back (newer rows deleted, an older signed head put back) no longer holds the record the
#: registry names: verify reports it. It lives beside the heads, outside the data root; someone who
#: may also rewrite that folder can roll the registry back too, so it belongs in a store the data
#: root's writers cannot reach (docs/security.md).
REGISTRY = "chains.json"


def _registry_path(root: DataRoot) -> Path:
    return state.FILES.registry_where(root_id(root))


def read_registry(root: DataRoot) -> dict | None:
    return state.current().registry_read(root_id(root))


def _register(root: DataRoot, cluster: str, row: dict, key: AuditKey, resumed_from: str | None = None) -> None:
    """Name `row` the newest record of `cluster`'s chain in the registry (under its own lock).
    `resumed_from`: the tip the head named when `row` continues after a record a killed writer left
    pending (the registry then still names that earlier tip: no break)."""
    def update(doc: dict | None) -> dict:
        doc = doc or {}
        clusters = dict(doc.get("clusters") or {}) if not doc.get("unreadable") else {}
        before = clusters.get(cluster) or {}
        breaks = list(before.get("breaks") or [])
        if before and before.get("hash") not in (row["prev_hash"], resumed_from):
            # the chain went on from another record than the newest it had: records were deleted (the
            # chain re-anchored or started again); kept in the registry for verify to report for good
            breaks.append({"at": iso_z(row["observed_at"]), "newest_was": before.get("record_id"),
                           "newest_was_at": before.get("observed_at"), "continued_after": row["prev_hash"]})
        clusters[cluster] = {"hash": row["hash"], "record_id": row["record_id"], "observed_at": iso_z(row["observed_at"]),
                             **({"breaks": breaks} if breaks else {})}
        return sign_head({"data_root": root_id(root), "clusters": clusters}, key)

    state.current().registry_update(root_id(root), update)


def _registry_problems(root: DataRoot, cluster: str, by_hash: dict, keys: AuditKeys) -> list[tuple[str, str]]:
    doc = read_registry(root)
    if doc is None:
        return []
    where = state.current().registry_where(root_id(root))
    if doc.get("unreadable"):
        return [("?", f"registry {where} is not valid JSON: whole chains deleted or rolled back cannot be told")]
    sig = head_signature(doc, keys)
    if sig != "ok":
        return [("?", f"forged registry: {where} is {'not signed' if sig == 'unsigned' else 'not signed with a configured key'}"
                      " (rewritten without the audit key)")]
    entry = (doc.get("clusters") or {}).get(cluster)
    if entry is None:
        return []
    out = [(b.get("newest_was") or "?", f"records deleted: at {b.get('at')} this chain went on from another record than "
            f"its newest ({b.get('newest_was')} at {b.get('newest_was_at')}), as the registry {where} recorded: the "
            "chain was deleted or rolled back before (this stays reported)") for b in entry.get("breaks") or []]
    if entry.get("hash") in by_hash:
        return out
    if not by_hash:
        return out + [(entry.get("record_id") or "?", f"deleted: the registry {where} lists this chain, its newest "
                       f"record {entry.get('record_id')} at {entry.get('observed_at')}, but the audit holds none of "
                       "its records")]
    return out + [(entry.get("record_id") or "?", f"rolled back: the registry {where} names record "
                   f"{entry.get('record_id')} at {entry.get('observed_at')} the newest of this chain, and the audit does "
                   "not hold it (newer records deleted and an older head put back, or the chain started again)")]


class Chain:
    """One cluster's chain in one data root: its head and its append lock, kept by the process's
    shared-state store (fleetkit.core.state: files in the heads folder, or database rows)."""

    def __init__(self, root: DataRoot, cluster: str):
        self.root, self.cluster = root, cluster
        self.store = state.current()
        self.rid = root_id(root)
        #: where the head is (a file, or a row), for messages
        self.head_path = self.store.head_where(self.rid, cluster)
        #: written once by `seal`, never removed by the toolkit: a chain sealed once is never sealed again
        self.sealed_path = self.store.sealed_where(self.rid, cluster)
        self._held = None

    # the lock
    def __enter__(self) -> "Chain":
        held = self.store.chain_lock(self.rid, self.cluster)
        held.__enter__()
        self._held = held
        return self

    def __exit__(self, *exc) -> None:
        if self._held is not None:
            held, self._held = self._held, None
            held.__exit__(*exc)

    # the head
    def read_head(self) -> dict | None:
        return self.store.head_read(self.rid, self.cluster)

    def write_head(self, doc: dict, key: AuditKey | None = None) -> None:
        """Replace the head atomically; signed with `key` when given (without: written as is,
        e.g. a previous head put back)."""
        if key is not None:
            doc = sign_head(doc, key)
        self.store.head_write(self.rid, self.cluster, doc)

    def delete_head(self) -> None:
        self.store.head_delete(self.rid, self.cluster)

    def sealed(self) -> bool:
        return self.store.sealed_exists(self.rid, self.cluster)

    def head_doc(self, row: dict, **extra) -> dict:
        return {"cluster": self.cluster, "data_root": root_id(self.root), "hash": row["hash"],
                "record_id": row["record_id"], "observed_at": iso_z(row["observed_at"]), **extra}

    def rows(self, since: dt.date | None = None) -> list[dict]:
        return read_dataset(self.root, "audit", self.cluster, since=since).to_pylist()

    def tip(self, head: dict | None, keys: AuditKeys | None = None) -> tuple[str, dict]:
        """The hash the next record chains to, and the head fields to carry over. A head left
        `pending` by a writer that died mid-append is resolved by looking for its record. A head
        that is missing while the dataset holds a chain, or whose signature does not verify
        (`keys` given), is rebuilt from the dataset and marked `reanchored`, which verify reports
        as a failure from then on."""
        reason = None
        if head is not None and keys is not None:
            sig = head_signature(head, keys)
            if sig == "unknown-key":
                raise UnknownKey(str(head.get("key_id")))
            if sig != "ok":
                reason = ("the head file was not signed with the audit key" if sig == "unsigned"
                          else "the head file's signature did not verify")
        carry = {k: head[k] for k in (("reanchored", "sealed") if reason is None else ("reanchored",))
                 if head and k in head}
        if head and reason is None:
            if head.get("pending"):
                p = head["pending"]
                day = dt.date.fromisoformat(p["observed_at"][:10])
                if any(r["hash"] == p["hash"] for r in self.rows(since=day)):
                    return p["hash"], carry
            return head["hash"], carry
        chained = [r for r in self.rows() if r.get("hash")]
        if not chained and reason is None:
            return GENESIS, carry  # a new chain
        reason = reason or "the head file was missing"
        if chained:
            referenced = {r["prev_hash"] for r in chained}
            tips = [r for r in chained if r["hash"] not in referenced] or chained
            newest = max(tips, key=lambda r: r["observed_at"])
            anchor = {"record_id": newest["record_id"], "hash": newest["hash"]}
        else:
            anchor = {"record_id": None, "hash": GENESIS}
        log.error("AUDIT head file %s of cluster %r: %s; the audit holds %d chained record(s): continuing the chain "
                  "from record %s; `fleetctl audit verify` reports this as a failure from now on",
                  self.head_path, v(self.cluster), reason, len(chained), anchor["record_id"] or "(none)")
        carry["reanchored"] = [*(carry.get("reanchored") or []), {"at": iso_z(utcnow()), **anchor, "reason": reason}]
        return anchor["hash"], carry


# -- writing -----------------------------------------------------------------------------------------
def record(root: DataRoot, *, cluster: str, dag_id: str, run_id: str, action: str, event: str,
           actor: str | None = None, digest: str | None = None, message: str = "",
           details: dict | None = None, now: dt.datetime | None = None, keys: AuditKeys | None = None) -> dict:
    """Append one record to the cluster's chain (under the chain's lock; reads only the head file),
    signed with the current audit key (`keys`, default: load_keys(); none configured: FleetError)."""
    if event not in EVENTS:
        raise ValueError(f"unknown audit event {event!r} (known: {', '.join(EVENTS)})")
    keys = keys or load_keys()
    key = keys.require_current()
    now = _utc(now or utcnow())
    row = {"cluster": cluster, "observed_at": now, "record_id": uuid.uuid4().hex, "dag_id": dag_id,
           "run_id": run_id, "action": action, "event": event, "actor": actor, "digest": digest,
           "message": message, "details": json.dumps(details or {}, sort_keys=True, default=str),
           "key_id": key.key_id}
    with Chain(root, cluster) as chain:
        head = chain.read_head()
        row["prev_hash"], carry = chain.tip(head, keys)
        row["hash"] = key.mac(canonical(row))
        trusted = head is not None and head_signature(head, keys) == "ok"
        base = head if trusted else {"cluster": cluster, "data_root": root_id(root), "hash": row["prev_hash"]}
        # the head names the record about to land, so a writer killed between the two writes
        # leaves a head the next append (and verify) can resolve
        chain.write_head({**base, **carry, "pending": {"hash": row["hash"], "record_id": row["record_id"],
                                                       "observed_at": iso_z(row["observed_at"])}}, key)
        try:
            write_collection(root, cluster, now, {"audit": [row]})
        except BaseException:
            if head is None:
                chain.delete_head()
            else:
                chain.write_head(head)
            raise
        chain.write_head(chain.head_doc(row, **carry), key)
        pending = (head or {}).get("pending") or {}
        _register(root, cluster, row, key,
                  resumed_from=head.get("hash") if head and pending.get("hash") == row["prev_hash"] else None)
    # one line, whatever a name in the message holds (newlines, bidi, zero-width: shown escaped)
    log.info("AUDIT %s %s cluster=%s run=%s actor=%s digest=%s: %s", action, event, v(cluster), v(run_id),
             v(actor or "-"), v(digest or "-"), v(message))
    return row


def seal(root: DataRoot, cluster: str, keys: AuditKeys | None = None) -> dict:
    """Sign the head of a chain written before the audit key existed (unsigned head, records with
    the unkeyed hash), once the chain verifies: the one-time step after configuring the key. A
    head that is already signed is returned as is; a head whose signature does not verify, or a
    chain with any other problem, is refused (FleetError)."""
    keys = keys or load_keys()
    key = keys.require_current()
    with Chain(root, cluster) as chain:
        head = chain.read_head()
        if head is None:
            raise FleetError(f"audit of cluster {v(cluster)!r}: no head file {chain.head_path} to seal")
        sig = head_signature(head, keys)
        if sig == "ok":
            return head
        if sig != "unsigned":
            raise FleetError(f"audit of cluster {v(cluster)!r}: the head file {chain.head_path} carries a signature "
                             "that does not verify with the configured keys: not sealed (see `fleetctl audit verify`)")
        if chain.sealed():
            raise FleetError(f"audit of cluster {v(cluster)!r}: this chain was sealed before ({chain.sealed_path}): "
                             "a chain is sealed once, so an unsigned head now means the chain was rewritten without "
                             "the key; not sealed (see `fleetctl audit verify`)")
        rep = _verify_chain(root, cluster, keys, unsigned_head_ok=True)
        if not rep.ok:
            raise FleetError(f"audit of cluster {v(cluster)!r}: {len(rep.problems)} problem(s) "
                             "(see `fleetctl audit verify`): not sealed")
        if rep.chained != rep.before_key:  # keyed records behind an unsigned head: it was rewritten
            raise FleetError(f"audit of cluster {v(cluster)!r}: the chain holds {rep.chained - rep.before_key} keyed "
                             "record(s) but its head is not signed: the head was rewritten without the key; "
                             "not sealed")
        doc = {**head, "sealed": {"at": iso_z(utcnow()), "records_before_the_key": rep.before_key}}
        marker = sign_head({"cluster": cluster, "data_root": root_id(root), "sealed": doc["sealed"],
                            "hash": head.get("hash"), "record_id": head.get("record_id")}, key)
        chain.store.sealed_write(chain.rid, cluster, marker)
        chain.write_head(doc, key)
    log.warning("AUDIT head of cluster %s sealed with audit key %s (%d record(s) before the key)", v(cluster),
                key.key_id, rep.before_key)
    return sign_head(doc, key)


def copy_heads(root: DataRoot, to, source=None) -> list[str]:
    """Copy the data root's chain heads, sealed markers and registry from `source` (default: the
    local files, FLEET_AUDIT_HEADS_DIR) into the store `to` (a deployment moving its run state to
    the database, FLEET_STATE_CONN_ID), each document as signed: the chains verify there without
    re-anchoring. Refused (FleetError, nothing copied) when `to` already holds a head or the
    registry of this data root. Returns the clusters whose heads were copied."""
    source = source or state.FILES
    rid = root_id(root)
    clusters = sorted(source.head_clusters(rid))
    heads = {c: source.head_read(rid, c) for c in clusters}
    held = [c for c in clusters if to.head_read(rid, c) is not None]
    if held or to.registry_read(rid) is not None:
        raise FleetError(f"the audit heads of data root {rid} are already in {to.describe()} "
                         f"({', '.join(map(repr, held)) or 'its registry'}): nothing copied")
    for c in clusters:
        with to.chain_lock(rid, c):
            to.head_write(rid, c, heads[c])
            sealed = source.sealed_read(rid, c)
            if sealed is not None:
                to.sealed_write(rid, c, sealed)
    registry = source.registry_read(rid)
    if registry is not None:
        to.registry_update(rid, lambda now: registry)
    log.warning("AUDIT heads of %d chain(s) of data root %s copied into %s", len(clusters), rid, to.describe())
    return clusters


# -- reading -----------------------------------------------------------------------------------------
def authentic(r: dict, keys: AuditKeys) -> bool:
    """Whether a record is one the toolkit wrote: keyed (a key id verify has) and its HMAC over the
    record matches. A row without a hash or a key, or one rewritten without the key, is not: it may
    be shown, it never authorises a change."""
    if not r.get("hash") or not r.get("key_id"):
        return False
    try:
        return hmac.compare_digest(record_hash(r, keys), r["hash"])
    except (UnknownKey, FleetError):
        return False


def authentic_records(root: DataRoot, cluster: str, run_id: str | None = None,
                      keys: AuditKeys | None = None) -> list[dict]:
    """records() of a cluster (and run) that are `authentic`: what may decide whether a change is
    approved, refused or done."""
    keys = keys or load_keys()
    return records(root, cluster, run_id, keep=lambda r: authentic(r, keys))


def records(root: DataRoot, cluster: str | None = None, run_id: str | None = None, keep=None) -> list[dict]:
    """The audit's rows (of a cluster, of a run), oldest first, `details` parsed; `keep` filters the
    rows as stored (before parsing: what their hash covers)."""
    rows = read_dataset(root, "audit", cluster).to_pylist()
    if run_id is not None:
        rows = [r for r in rows if r["run_id"] == run_id]
    if keep is not None:
        rows = [r for r in rows if keep(r)]
    for r in rows:
        r["details"] = json.loads(r["details"] or "{}")
    return sorted(rows, key=lambda r: r["observed_at"])


def find(root: DataRoot, record_id: str, authentic_only: bool = False, keys: AuditKeys | None = None) -> dict:
    """The record `record_id`; with `authentic_only` (a record that is to authorise or plan a
    change) FleetError unless the toolkit signed it (`authentic`)."""
    keep = None
    if authentic_only:
        keys = keys or load_keys()
        keep = lambda r: r["record_id"] != record_id or authentic(r, keys)  # noqa: E731
    for r in records(root, keep=keep):
        if r["record_id"] == record_id:
            return r
    if authentic_only and any(r["record_id"] == record_id for r in records(root)):
        raise FleetError(f"audit record {record_id!r} is not signed with the audit key (no hash, no key, or a hash "
                         "made without the key): it authorises nothing; `fleetctl audit verify` says more")
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
    before_key: int = 0         # records on the chain with the unkeyed SHA-256 of earlier versions
    problems: list[tuple[str, str]] = field(default_factory=list)  # (record id, what is wrong)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _label(r: dict) -> str:
    return f"{r['event']} of run {r['run_id']!r} at {iso_z(r['observed_at'])}"


def audit_clusters(root: DataRoot) -> list[str]:
    """Clusters with audit records under the data root, a head in the heads folder, or a chain the
    registry lists (a chain deleted whole is still verified, and reported)."""
    from pyarrow import fs as pafs

    names = set()
    base = root.join("audit")
    if root.exists(base):
        for info in root.fs.get_file_info(pafs.FileSelector(base)):
            name = info.path.rstrip("/").rsplit("/", 1)[-1]
            if info.type == pafs.FileType.Directory and name.startswith("cluster="):
                names.add(name[len("cluster="):])
    doc = read_registry(root)
    names.update((doc or {}).get("clusters") or {})
    names.update(state.current().head_clusters(root_id(root)))
    return sorted(names)


def verify_chain(root: DataRoot, cluster: str, keys: AuditKeys | None = None) -> ChainReport:
    """Check one cluster's chain: every record's hash (HMAC with the key its key_id names: the
    current key or one of the previous keys), every link, the tail against the head, the head's
    signature and whether the head was ever rebuilt (re-anchored)."""
    return _verify_chain(root, cluster, keys or load_keys())


def _verify_chain(root: DataRoot, cluster: str, keys: AuditKeys, unsigned_head_ok: bool = False) -> ChainReport:
    chain = Chain(root, cluster)
    rep = ChainReport(cluster)
    rows = chain.rows()
    chained = [r for r in rows if r.get("hash")]
    legacy = [r for r in rows if not r.get("hash")]
    rep.before_chain = len(legacy)

    by_hash: dict[str, dict] = {}
    unknown: dict[str, list[dict]] = {}  # key id -> its records, when verify does not have that key
    for r in sorted(chained, key=lambda r: r["observed_at"]):
        try:
            ok = hmac.compare_digest(record_hash(r, keys), r["hash"])
        except UnknownKey:
            unknown.setdefault(r["key_id"], []).append(r)
            ok = True  # cannot be checked: reported once per key id below
        if not ok:
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
    for key_id, signed in unknown.items():
        rep.problems.append((signed[-1]["record_id"], f"unknown key: {len(signed)} record(s) signed with audit key id "
                             f"{key_id!r}, which verify does not have (add it to {PREVIOUS_KEYS_VAR} if it was "
                             "rotated out): they cannot be checked"))

    head = chain.read_head()
    tip: dict | None = None
    if head is None:
        if chained:
            newest = max(chained, key=lambda r: r["observed_at"])
            rep.problems.append((newest["record_id"], f"no head file {chain.head_path}: the end of the chain cannot "
                                                      "be checked (was the heads folder lost or moved?)"))
    else:
        sig = head_signature(head, keys)
        if sig == "bad":
            rep.problems.append((head.get("record_id") or "?", f"forged head: the signature of the head file "
                                 f"{chain.head_path} does not verify: it was rewritten without the audit key"))
        elif sig == "unknown-key":
            rep.problems.append((head.get("record_id") or "?", f"unknown key: the head file {chain.head_path} is "
                                 f"signed with audit key id {head.get('key_id')!r}, which verify does not have "
                                 f"(add it to {PREVIOUS_KEYS_VAR} if it was rotated out)"))
        elif sig == "unsigned" and chained and not unsigned_head_ok:
            if chain.sealed():
                rep.problems.append((head.get("record_id") or "?", f"rewritten: the head file {chain.head_path} is not "
                                     f"signed, although this chain was sealed before ({chain.sealed_path}): the chain "
                                     "or its head was rewritten without the key (do not seal it again)"))
            else:
                rep.problems.append((head.get("record_id") or "?", f"unsigned head: the head file {chain.head_path} is "
                                     "not signed with the audit key: a chain written before the key existed needs "
                                     "`fleetctl audit seal` once; otherwise it was rewritten without the key"))
        for note in head.get("reanchored") or []:
            rep.problems.append((note.get("record_id") or "?", f"re-anchored: the head was rebuilt from the audit "
                                 f"itself at {note.get('at')} ({note.get('reason') or 'the head file was missing'}), "
                                 f"continuing after record {note.get('record_id')}: records removed before then "
                                 "cannot be detected; someone deleted or replaced the head file (this stays "
                                 "reported)"))
        if head.get("sealed"):
            rep.warnings.append(f"sealed at {head['sealed'].get('at')}: the records before the audit key are "
                                "protected by the unkeyed hash only")
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
    walk: list[dict] = []  # the chain's records, newest first
    bottom = None
    cur = tip
    while cur is not None and cur["hash"] not in visited:
        visited.add(cur["hash"])
        walk.append(cur)
        if cur["prev_hash"] == GENESIS:
            break
        nxt = by_hash.get(cur["prev_hash"])
        if nxt is None:
            bottom = cur
        cur = nxt
    rep.chained = len(visited)
    # the unkeyed records on the chain must all come before the first keyed one
    keyed_at = [i for i, r in enumerate(walk) if r.get("key_id")]
    oldest_keyed = keyed_at[-1] if keyed_at else -1
    for i, r in enumerate(walk):
        if r.get("key_id"):
            continue
        if i < oldest_keyed:
            rep.problems.append((r["record_id"], f"unsigned: the record ({_label(r)}) carries the unkeyed hash of "
                                 "earlier versions although records before it are keyed: rewritten without the key"))
        else:
            rep.before_key += 1

    # a retired key verifies only what it signed before its successor's first record: once the chain
    # moved on to another key, a record signed with an earlier one is a forgery with a leaked old key
    retired: set[str] = set()
    last_key = None
    for r in reversed(walk):  # oldest first
        k = r.get("key_id")
        if not k:
            continue
        if k in retired:
            rep.problems.append((r["record_id"], f"retired key: the record ({_label(r)}) is signed with audit key id "
                                 f"{k!r}, which the chain had already moved on from: a key that was rotated out "
                                 "signed it afterwards (leaked?)"))
        elif last_key is not None and k != last_key:
            retired.add(last_key)
        last_key = k
    if head is not None and head.get("key_id") and head.get("key_id") in retired:
        rep.problems.append((head.get("record_id") or "?", f"retired key: the head file {chain.head_path} is signed "
                             f"with audit key id {head.get('key_id')!r}, which the chain had already moved on from"))

    rep.problems.extend(_registry_problems(root, cluster, by_hash, keys))

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


def verify(root: DataRoot, cluster: str | None = None, keys: AuditKeys | None = None) -> list[ChainReport]:
    """Every cluster's chain (or one cluster's)."""
    keys = keys or load_keys()
    clusters = [cluster] if cluster is not None else audit_clusters(root)
    return [verify_chain(root, c, keys) for c in clusters]

"""The audit dataset: who did what to which cluster, when, with which plan, before -> after.

Events: planned, dry_run, approved, rejected, refused, executed, failed (execute raised: details
hold the journal's account of what was changed), interrupted (execute was killed or ended without
a record: the same account, written by the gate's teardown), teardown, verified, verify_failed,
rollback_requested, resumed (an interrupted run finished from its journal), restored (its changes
put back from the journal). `details` is JSON (before/after values, refusal reasons, the rollback conf).
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import uuid

from fleetkit.core.datasets import DataRoot, iso_z, read_dataset, utcnow, write_collection
from fleetkit.core.errors import FleetError

log = logging.getLogger(__name__)

EVENTS = ("planned", "dry_run", "approved", "rejected", "refused", "executed", "failed", "interrupted",
          "teardown", "verified", "verify_failed", "rollback_requested", "resumed", "restored")


def record(root: DataRoot, *, cluster: str, dag_id: str, run_id: str, action: str, event: str,
           actor: str | None = None, digest: str | None = None, message: str = "",
           details: dict | None = None, now: dt.datetime | None = None) -> dict:
    if event not in EVENTS:
        raise ValueError(f"unknown audit event {event!r} (known: {', '.join(EVENTS)})")
    now = now or utcnow()
    row = {"cluster": cluster, "observed_at": now, "record_id": uuid.uuid4().hex, "dag_id": dag_id,
           "run_id": run_id, "action": action, "event": event, "actor": actor, "digest": digest,
           "message": message, "details": json.dumps(details or {}, sort_keys=True, default=str)}
    write_collection(root, cluster, now, {"audit": [row]})
    log.info("AUDIT %s %s cluster=%s run=%s actor=%s digest=%s: %s", action, event, cluster, run_id,
             actor or "-", digest or "-", message)
    return row


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
    return (f"{iso_z(r['observed_at'])} {r['cluster']} {r['action']} {r['event']:<13} "
            f"by {r['actor'] or '-'} run {r['run_id']} {r['digest'] or ''} {r['record_id']}\n    {r['message']}")

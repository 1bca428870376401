"""Executing group-id mapping writes: the members re-checked right before acting
(``recheck_members``), then every write conditional (``apply``: create fails if the node
appeared, set/delete pass the version read and the znode's creation time is compared first), a
lost race skipped and reported, every operation journaled (intent before it is sent, outcome
after) so that a session lost mid-apply leaves an exact record of what was done
(``record_interrupted``). Writes are confined to the znodes directly below the mapping root
(``outside_root``). Every znode created (a mapping, a missing root) gets the toolkit's one ACL
rule (fleetkit.clients.zookeeper.new_znode_acl: creator-all + world-read when the session
authenticates, the parent's ACL when not); a write ZooKeeper refuses is reported in one line
naming the operation, the znode and the ZooKeeper identity.

``execute_ops`` is that sequence, the one both writers run: the runbook's approved execute
(``run``) and the scheduled MISSING-mapping writer (plugins/fleet_airflow/operators/group_ids.py).
``rules.rollback_ops`` turns an apply's changes into the conditional writes that undo them.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from kazoo.exceptions import (
    BadArgumentsError, BadVersionError, ConnectionLoss, NoAuthError, NodeExistsError, NoNodeError,
    NotEmptyError, OperationTimeoutError, SessionExpiredError,
)

from fleetkit.clients.zookeeper import create_znode, new_znode_acl, not_authorized
from fleetkit.core import journal as core_journal
from fleetkit.core.action import ClusterContext
from fleetkit.core.journal import Journal
from fleetkit.group_ids.collect import read_members
from fleetkit.group_ids.rules import (
    ACTION, ALL_GROUPS, ReconcileError, is_unknown_marker, name_problem, unknown_groups, znode_name,
)


@dataclass
class ApplyResult:
    changed: list[dict] = field(default_factory=list)   # done: before/after, versions
    skipped: list[dict] = field(default_factory=list)   # lost races and rechecks, with reasons
    errors: list[dict] = field(default_factory=list)    # refused by the server (ACL, bad path)
    unknown: list[dict] = field(default_factory=list)   # sent, outcome unknown (connection lost)
    not_started: list[dict] = field(default_factory=list)
    journal: str | None = None
    interrupted: str | None = None
    seconds: float = 0.0

    def summary(self) -> dict:
        return {"changed": len(self.changed), "skipped": len(self.skipped), "errors": len(self.errors),
                "unknown": len(self.unknown), "not_started": len(self.not_started), "journal": self.journal,
                "interrupted": self.interrupted, "seconds": round(self.seconds, 2)}

    def to_dict(self) -> dict:
        return {**self.summary(), "changed_paths": self.changed, "skipped_paths": self.skipped,
                "error_paths": self.errors, "unknown_paths": self.unknown, "not_started_paths": self.not_started}


class ApplyInterrupted(ReconcileError):
    """The ZooKeeper session or connection was lost mid-apply. ``result`` says exactly what was done."""

    def __init__(self, msg: str, result: "ApplyResult"):
        super().__init__(msg)
        self.result = result


_LOST = (ConnectionLoss, SessionExpiredError, OperationTimeoutError)
_RACE = {NodeExistsError: "the node appeared meanwhile (create is never forced)",
         BadVersionError: "the znode changed since it was read (version differs): not overwritten",
         NoNodeError: "the znode disappeared since it was read",
         NotEmptyError: "the znode has children"}


def _send(client, op: dict, acl):
    path = op["path"]
    if op["op"] == "create":
        return client.create_async(path, op["after"].encode("utf-8"), acl=acl)
    if op["op"] == "set":
        return client.set_async(path, op["after"].encode("utf-8"), version=op["version"])
    if op["op"] == "delete":
        return client.delete_async(path, version=op["version"])
    raise ReconcileError(f"unknown operation {op['op']!r}")


def outside_root(path, root: str) -> str | None:
    """Why `path` is not a mapping znode directly below `root` (None: it is). Every write is
    confined there: an empty component (`//`), `.` or `..`, the root itself or any other place is
    refused before anything is sent."""
    root = root.rstrip("/")
    if not isinstance(path, str) or not path.startswith("/"):
        return f"path {path!r} is not an absolute znode path"
    parts = path.split("/")[1:]
    if any(x in ("", ".", "..") for x in parts):
        return f"path {path!r} has an empty, '.' or '..' component"
    parent, _, name = path.rpartition("/")
    if parent != root or not name:
        return f"path {path!r} is not directly below the mapping root {root or '/'}"
    return None


def apply(client, ops: list[dict], root: str, journal_path: str | os.PathLike | None = None,
          window: int = 256, timeout: float = 30.0,
          on_progress: Callable[[int], None] | None = None,
          on_sent: Callable[[int], None] | None = None) -> ApplyResult:
    """Run conditional writes, `window` in flight. An op whose path is not directly below `root`
    is refused (an error, never sent). Raises ApplyInterrupted (with the exact result)
    when the connection or session is lost: nothing more is sent, in-flight writes end up in
    `unknown` (the next collection sees what really happened)."""
    t0 = time.monotonic()
    res = ApplyResult(journal=str(journal_path) if journal_path else None)
    journal = Journal(journal_path)
    ops = [dict(op, seq=i) for i, op in enumerate(ops)]
    refused = []
    for o in ops:
        why = outside_root(o.get("path"), root)
        if why:
            refused.append({**o, "status": "error", "reason": f"refused, never sent: {why}"})
    if refused:
        res.errors.extend(refused)
        journal.write(refused)
        bad = {o["seq"] for o in refused}
        ops = [o for o in ops if o["seq"] not in bad]
    try:
        acl = _root_acl(client, root, journal) if any(o["op"] == "create" for o in ops) else None
        done_count = 0
        for i in range(0, len(ops), window):
            if res.interrupted:
                res.not_started.extend(ops[i:])
                break
            try:
                chunk, stale = _same_incarnation(client, ops[i:i + window], timeout)
            except _LOST as e:
                res.interrupted = f"{type(e).__name__} {e}".strip()
                res.not_started.extend(ops[i:])
                journal.write([{**o, "status": "not_sent"} for o in ops[i:]])
                break
            for s_ in stale:
                res.skipped.append(s_)
            journal.write(stale, sync=False)
            journal.write([{**o, "status": "intent"} for o in chunk])
            futs = []
            stats: dict[int, object] = {}
            for o in chunk:
                try:
                    futs.append((o, _send(client, o, acl)))
                    if o["op"] == "create":  # the new znode's creation time, read right behind the create
                        stats[o["seq"]] = client.exists_async(o["path"])
                except _LOST as e:  # the client refuses to send once the connection is gone
                    res.interrupted = res.interrupted or f"{type(e).__name__} {e}".strip()
                    if not any(f[0] is o for f in futs):
                        futs.append((o, None))
            if on_sent:
                on_sent(done_count + len(futs))
            outcomes = []
            for o, fut in futs:
                if fut is None:
                    res.not_started.append(o)
                    outcomes.append({**o, "status": "not_sent"})
                    continue
                try:
                    value = fut.get(timeout=timeout)
                except _LOST as e:
                    res.interrupted = res.interrupted or f"{type(e).__name__} {e}".strip()
                    res.unknown.append(o)
                    outcomes.append({**o, "status": "unknown", "reason": f"{type(e).__name__}: outcome unknown"})
                    continue
                except tuple(_RACE) as e:
                    s = {**o, "status": "skipped", "reason": _RACE[type(e)]}
                    res.skipped.append(s)
                    outcomes.append(s)
                    continue
                except NoAuthError:
                    s = {**o, "status": "error", "reason": str(not_authorized(client, o["op"], o["path"]))}
                    res.errors.append(s)
                    outcomes.append(s)
                    continue
                except BadArgumentsError as e:
                    s = {**o, "status": "error", "reason": f"{type(e).__name__}: refused by ZooKeeper"}
                    res.errors.append(s)
                    outcomes.append(s)
                    continue
                new_version, extra = None, {}
                if o["op"] == "create":
                    new_version = 0
                    extra["ctime_ms"] = _created_ctime(stats.get(o["seq"]), timeout)
                elif o["op"] == "set":
                    new_version = value.version
                s = {**o, "status": "done", "new_version": new_version, **extra}
                res.changed.append(s)
                outcomes.append(s)
            journal.write(outcomes)
            done_count += len(chunk)
            if on_progress:
                on_progress(done_count)
    finally:
        journal.close()
        res.seconds = time.monotonic() - t0
    if res.interrupted:
        raise ApplyInterrupted(f"ZooKeeper connection lost mid-apply ({res.interrupted}): {len(res.changed)} "
                               f"write(s) done, {len(res.unknown)} with unknown outcome, {len(res.not_started)} "
                               f"not sent; the journal {res.journal} records each", res)
    return res


def _created_ctime(fut, timeout: float) -> int | None:
    """The creation time of a znode we just created, from the exists read pipelined behind the
    create; None when it cannot be told (then a rollback leaves the znode alone)."""
    if fut is None:
        return None
    try:
        stat = fut.get(timeout=timeout)
    except Exception:  # noqa: BLE001 - the write is done; only its rollback condition is unknown
        return None
    return stat.ctime if stat is not None and stat.version == 0 else None


def _same_incarnation(client, ops: list[dict], timeout: float) -> tuple[list[dict], list[dict]]:
    """Split set/delete ops into (still the znode that was read, skipped): ZooKeeper's version check
    alone cannot tell a znode from one deleted and re-created since (both at version 0), its ctime
    can. Read right before the conditional write, in the same pipeline. A set or delete without
    the znode's ctime is never sent."""
    gone: dict[int, str] = {}
    for o in ops:
        if o["op"] in ("set", "delete") and o.get("ctime_ms") is None:
            gone[o["seq"]] = ("the znode's creation time is not known: it cannot be told from one re-created "
                              "since, not touched")
    checks = [(o, client.exists_async(o["path"])) for o in ops
              if o["op"] in ("set", "delete") and o["seq"] not in gone]
    for o, fut in checks:
        stat = fut.get(timeout=timeout)
        if stat is None:
            gone[o["seq"]] = _RACE[NoNodeError]
        elif stat.ctime != o["ctime_ms"]:
            gone[o["seq"]] = "the znode was deleted and re-created since it was read: not touched"
        elif stat.version != o["version"]:
            gone[o["seq"]] = _RACE[BadVersionError]
    keep = [o for o in ops if o["seq"] not in gone]
    skipped = [{**o, "status": "skipped", "reason": gone[o["seq"]]} for o in ops if o["seq"] in gone]
    return keep, skipped


def _root_acl(client, root: str, journal: Journal):
    """The ACL of the mapping znodes this apply creates: the toolkit's one rule
    (fleetkit.clients.zookeeper.new_znode_acl: creator-all + world-read when the session
    authenticates, else the root's own ACL). A missing root (and any missing folder above it) is
    created by the same rule (each creation journaled), never with an open ACL. NotAuthorized when
    ZooKeeper refuses to create it."""
    missing = []
    node = root.rstrip("/")
    while node:
        try:
            client.get_acls(node)
            break
        except NoNodeError:
            missing.append(node)
            node = node.rpartition("/")[0]
        except NoAuthError:
            raise not_authorized(client, "read ACL", node) from None
    if missing:
        acl = new_znode_acl(client, root)
        for i, node in enumerate(reversed(missing)):
            try:
                create_znode(client, node, b"", acl=acl)
                journal.write([{"seq": -1 - i, "op": "create_root", "path": node, "status": "done", "acl": str(acl)}])
            except NodeExistsError:
                pass
    return new_znode_acl(client, f"{root.rstrip('/')}/child")


def recheck_members(ops: list[dict], members: Iterable[dict]) -> tuple[list[dict], list[dict]]:
    """(ops still justified, ops dropped with a reason) against a fresh member list, right before
    acting: a STALE path whose client came back, or a MISSING/MISMATCHED path whose member left or
    moved to another group, is not written; nor is any overwrite or delete when the listing of the
    groups was partial (rules.ALL_GROUPS)."""
    now: dict[str, set] = {}
    members = list(members)
    unknown = unknown_groups(members)
    for m in members:
        if is_unknown_marker(m):
            continue
        if name_problem(m.get("client_host"), m.get("client_id")) is None:
            now.setdefault(znode_name(m["client_host"], m["client_id"]), set()).add(m["group"])
    every_group_unknown = ALL_GROUPS in unknown
    keep, dropped = [], []
    for op in ops:
        groups = now.get(op["path"].rsplit("/", 1)[-1], set())
        if ({op.get("before"), op.get("after")} - {None}) & unknown:
            dropped.append(dict(op, status="skipped", reason="the group could not be described now (members unknown)"))
        elif every_group_unknown and op["op"] in ("delete", "set"):
            dropped.append(dict(op, status="skipped", reason="listing the groups partly failed now: the client may be "
                                                             "a member of a group not listed (members unknown)"))
        elif op["op"] == "delete" and groups:
            dropped.append(dict(op, status="skipped", reason=f"a live member appeared (groups {sorted(groups)})"))
        elif op["op"] in ("create", "set") and groups != {op["after"]}:
            dropped.append(dict(op, status="skipped",
                                reason=f"live member groups are now {sorted(groups) or 'none'}, not {op['after']!r}"))
        else:
            keep.append(op)
    return keep, dropped


def journal_path(data_root: str | os.PathLike, dag_id: str, run_id: str, cluster: str) -> Path:
    """Where a run's apply journal lives: <data root>/journals/group_ids/<dag>/<run>/<cluster>.jsonl."""
    return core_journal.journal_path(data_root, "group_ids", dag_id, run_id, cluster)


def record_interrupted(data_root: str, cluster: str, dag_id: str, run_id: str, action: str, exc: ApplyInterrupted,
                       actor: str | None = None) -> None:
    """An interrupted apply still leaves an audit record (event `failed`) of exactly what it did."""
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    audit.record(DataRoot(data_root), cluster=cluster, dag_id=dag_id, run_id=run_id, action=action, event="failed",
                 actor=actor, message=f"INTERRUPTED: {exc}", details={"result": exc.result.to_dict(), "partial": True})


def execute_ops(zk_client, kafka, cluster: str, ops: list[dict], root: str, *, data_root: str | os.PathLike,
                dag_id: str, run_id: str, action: str, actor: str | None = None,
                recheck: bool = True, journal: str | os.PathLike | None = None,
                record_failure: bool = True) -> ApplyResult:
    """The one execution sequence of mapping writes, whoever runs them: re-read the live members and
    drop the ops they no longer justify (`recheck`; off for a rollback, which restores what was there
    whatever the members say), apply the rest conditionally, journaled at `journal` (default
    journal_path(data_root, dag_id, run_id, cluster)). An interrupted apply leaves a `failed` audit
    record of `action` (by `actor`) of exactly what it did (unless `record_failure` is off: the
    approval gate records it from the journal), then ApplyInterrupted is raised again. The result's
    `skipped` ends with the ops the recheck dropped."""
    dropped: list[dict] = []
    if recheck:
        members, _ = read_members(kafka, cluster, None)
        ops, dropped = recheck_members(ops, members)
    journal = journal or journal_path(data_root, dag_id, run_id, cluster)
    try:
        res = apply(zk_client, ops, root, journal)
    except ApplyInterrupted as e:
        if record_failure:
            record_interrupted(str(data_root), cluster, dag_id, run_id, action, e, actor=actor)
        raise
    res.skipped.extend(dropped)
    return res


# -- the runbook's stage (fleetkit.group_ids.action) -------------------------------------------
def preconditions(ctx: ClusterContext, plan: dict) -> list[str]:
    """What no longer holds before executing (the per-path conditions are checked by each write)."""
    return [] if ctx.zk is not None else ["the cluster has no ZooKeeper connection"]


def run(ctx: ClusterContext, plan: dict) -> dict:
    """The approved plan's writes (re-checked against the members unless it is a rollback),
    journaled in the gate's execute journal (ctx.journal_path) when there is one, so the gate's
    `failed` / `interrupted` record accounts for every write."""
    d = plan["details"]
    res = execute_ops(ctx.zk.client, ctx.kafka, ctx.cluster.name, d["ops"], d["root"], data_root=d["data_root"],
                      dag_id=plan["dag_id"], run_id=plan["run_id"], action=ACTION,
                      recheck=not d.get("rollback_of"), journal=ctx.journal_path,
                      record_failure=ctx.journal_path is None)
    return res.to_dict()

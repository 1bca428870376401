"""Reconciliation of KoP-style client-to-group mappings in ZooKeeper (issue 7).

KoP (Kafka-on-Pulsar) keeps one znode per consumer client under a root (groupIdZooKeeperPath,
default /client_group_id): ``<root>/<ip>-<clientId>`` holding the group id in UTF-8. It writes it
when a client sends FindCoordinator and deletes it when the connection closes, so a broker restart
or a delete racing a newer write leaves live consumers without a mapping and stale znodes behind.
The group coordinator's member list (client id, client host) is the truth.

This module is the one definition of:

* the znode name of a member (``znode_name``) and when a member cannot have one
  (``name_problem``: a client id holding ``/`` cannot be a path component, and ZooKeeper refuses
  control characters, U+D800-U+F8FF, U+FFF0-U+FFFF and every character outside the BMP: such a
  member is reported UNREPRESENTABLE with the reason, never written);
* the classes (``classify``), first match wins: UNREPRESENTABLE, CONFLICT, MISMATCHED, MISSING,
  STALE, OK. The Spark job (spark_jobs/group_id_reconciliation.py) applies the same rules with
  column expressions; tests run one case table through both;
* collecting (``read_mappings``: every child read concurrently with kazoo's async API;
  ``read_members``), planning (``ops_for``) and applying (``apply``): every write conditional
  (create fails if the node appeared, set/delete pass the version read), a lost race skipped and
  reported, every operation journaled (intent before it is sent, outcome after) so that a session
  lost mid-apply leaves an exact record of what was done.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from kazoo.exceptions import (
    BadArgumentsError, BadVersionError, ConnectionLoss, NoAuthError, NodeExistsError, NoNodeError,
    NotEmptyError, OperationTimeoutError, SessionExpiredError,
)

from fleetkit.core.errors import FleetError

log = logging.getLogger(__name__)

ACTION = "reconcile_group_ids"
CLASSES = ("UNREPRESENTABLE", "CONFLICT", "MISMATCHED", "MISSING", "STALE", "OK")
#: classes whose repair is destructive (approval gate) and the one that is a plain repair
DESTRUCTIVE = ("MISMATCHED", "STALE")
REPAIR = ("MISSING",)
OP_OF = {"MISSING": "create", "MISMATCHED": "set", "STALE": "delete"}

#: Characters ZooKeeper's PathUtils.validatePath refuses (Java UTF-16 code units; every character
#: outside the BMP is a surrogate pair there, so it is refused too), plus the path separator.
_FORBIDDEN_RANGES = ((0x00, 0x1F), (0x7F, 0x9F), (0xD800, 0xF8FF), (0xFFF0, 0x10FFFF))
#: The same set as a Java regex character class (Spark's rlike), kept next to the Python rule.
FORBIDDEN_JAVA_REGEX = r"[\x{0}-\x{1F}\x{7F}-\x{9F}\x{D800}-\x{F8FF}\x{FFF0}-\x{10FFFF}/]"


class ReconcileError(FleetError):
    pass


class ApplyInterrupted(ReconcileError):
    """The ZooKeeper session or connection was lost mid-apply. ``result`` says exactly what was done."""

    def __init__(self, msg: str, result: "ApplyResult"):
        super().__init__(msg)
        self.result = result


# -- names -------------------------------------------------------------------------------------
def _forbidden(c: str) -> bool:
    o = ord(c)
    return any(lo <= o <= hi for lo, hi in _FORBIDDEN_RANGES)


def name_problem(client_host: str | None, client_id: str | None) -> str | None:
    """Why a member cannot have a mapping znode, or None when it can."""
    if not client_host:
        return "the coordinator reports no client host for this member"
    if client_id is None:
        return "the coordinator reports no client id for this member"
    name = f"{client_host}-{client_id}"
    if "/" in name:
        return "the client id holds '/', which cannot be part of a znode name (KoP cannot write it either)"
    bad = sorted({f"U+{ord(c):04X}" for c in name if _forbidden(c)})
    if bad:
        return f"ZooKeeper refuses the character(s) {', '.join(bad[:5])} in a znode name"
    return None


def znode_name(client_host: str, client_id: str) -> str:
    """<ip>-<clientId>, the name KoP gives the member's mapping znode."""
    return f"{client_host}-{client_id}"


def join_path(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def split_name(name: str) -> tuple[str, str]:
    """(client host, client id) from a znode name: an IP holds no '-', so the first '-' splits."""
    host, sep, cid = name.partition("-")
    return (host, cid) if sep else (name, "")


# -- the rules ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class PathFacts:
    """What is known about one mapping path (or one member without a path)."""

    member_groups: frozenset[str] = frozenset()  # groups with a live member of this ip-clientId
    znode_group: str | None = None               # the znode's data; None: no znode
    age_seconds: float | None = None             # observed_at - mtime of the znode
    problem: str | None = None                   # name_problem of the member, when it has one
    group_unknown: bool = False                  # the znode's group could not be described (members unknown)


def classify(f: PathFacts, grace_seconds: float) -> tuple[str, str]:
    """(class, reason); first match wins."""
    if f.problem:
        return "UNREPRESENTABLE", f.problem
    if len(f.member_groups) > 1:
        return "CONFLICT", (f"one client id on one host is a live member of {len(f.member_groups)} groups: "
                            "report only, never written")
    if f.member_groups:
        (group,) = f.member_groups
        if f.znode_group is None:
            return "MISSING", "a live member has no mapping znode"
        if f.znode_group != group:
            return "MISMATCHED", "the znode holds another group than the live member's"
        return "OK", "mapping matches the live member"
    if f.znode_group is not None:
        if f.group_unknown:
            return "OK", "its group could not be described: its members are unknown, nothing is judged stale"
        if f.age_seconds is not None and f.age_seconds > grace_seconds:
            return "STALE", f"no live member and not modified for {f.age_seconds:.0f} s (grace {grace_seconds:.0f} s)"
        return "OK", "no live member, but modified within the grace period"
    return "OK", "nothing to do"


def diff(mappings: Iterable[dict], members: Iterable[dict], root: str, grace_seconds: float,
         as_of: dt.datetime | None = None) -> list[dict]:
    """Findings (one per path, plus one per unrepresentable member) from collected rows, in Python:
    the reference the Spark job is tested against, and what the runbook plans with (one cluster)."""
    by_name: dict[str, dict] = {}
    unrepresentable: list[dict] = []
    members = list(members)
    unknown = unknown_groups(members)
    for m in members:
        if is_unknown_marker(m):
            continue
        problem = name_problem(m.get("client_host"), m.get("client_id"))
        if problem:
            unrepresentable.append({"path": None, "class": "UNREPRESENTABLE", "reason": problem,
                                    "group": m["group"], "groups": [m["group"]], "client_host": m.get("client_host"),
                                    "client_id": m.get("client_id"), "member_ids": [m.get("member_id")],
                                    "znode_group": None, "znode_version": None, "ctime_ms": None, "mtime": None,
                                    "age_seconds": None})
            continue
        name = znode_name(m["client_host"], m["client_id"])
        e = by_name.setdefault(name, {"groups": set(), "member_ids": [], "client_host": m["client_host"],
                                      "client_id": m["client_id"]})
        e["groups"].add(m["group"])
        e["member_ids"].append(m.get("member_id"))
    znodes: dict[str, dict] = {}
    for z in mappings:
        znodes[z["path"].rsplit("/", 1)[-1]] = z
    out = []
    for name in sorted(set(by_name) | set(znodes)):
        mem, z = by_name.get(name), znodes.get(name)
        age = None
        if z is not None and z.get("mtime") is not None:
            ref = as_of or z["observed_at"]
            age = (ref - z["mtime"]).total_seconds()
        facts = PathFacts(member_groups=frozenset(mem["groups"]) if mem else frozenset(),
                          znode_group=z["group"] if z else None, age_seconds=age,
                          group_unknown=bool(z) and z["group"] in unknown)
        cls, reason = classify(facts, grace_seconds)
        host, cid = (mem["client_host"], mem["client_id"]) if mem else split_name(name)
        groups = sorted(mem["groups"]) if mem else []
        out.append({"path": z["path"] if z else join_path(root, name), "class": cls, "reason": reason,
                    "group": groups[0] if len(groups) == 1 else None, "groups": groups,
                    "client_host": host, "client_id": cid, "member_ids": sorted(x for x in (mem or {}).get("member_ids", []) if x),
                    "znode_group": z["group"] if z else None,
                    "znode_version": z["znode_version"] if z else None,
                    "ctime_ms": _ms(z["ctime"]) if z and z.get("ctime") is not None else None,
                    "mtime": z["mtime"] if z else None, "age_seconds": age})
    return out + unrepresentable


def _ms(ts: dt.datetime) -> int:
    return round(ts.timestamp() * 1000)


def is_unknown_marker(m: dict) -> bool:
    """A group_members row without member id and client id: the group could not be described."""
    return m.get("member_id") is None and m.get("client_id") is None and m.get("client_host") is None


def unknown_groups(members: Iterable[dict]) -> set[str]:
    return {m["group"] for m in members if is_unknown_marker(m)}


def ops_for(findings: Iterable[dict], classes: Iterable[str]) -> list[dict]:
    """The conditional writes that repair the findings of `classes` (CONFLICT, UNREPRESENTABLE and
    OK are never written). before/after are the znode's data (None: absent)."""
    wanted = set(classes)
    bad = wanted - set(OP_OF)
    if bad:
        raise ReconcileError(f"classes {sorted(bad)} are never written (writable: {', '.join(OP_OF)})")
    ops = []
    for f in findings:
        if f["class"] not in wanted or not f.get("path"):
            continue
        op = {"op": OP_OF[f["class"]], "class": f["class"], "path": f["path"], "group": f.get("group"),
              "client_host": f.get("client_host"), "client_id": f.get("client_id")}
        if f["class"] == "MISSING":
            op.update(before=None, after=f["group"], version=None)
        elif f["class"] == "MISMATCHED":
            op.update(before=f["znode_group"], after=f["group"], version=int(f["znode_version"]),
                      ctime_ms=f.get("ctime_ms"))
        else:
            op.update(before=f["znode_group"], after=None, version=int(f["znode_version"]), ctime_ms=f.get("ctime_ms"))
        ops.append(op)
    return sorted(ops, key=lambda o: (o["op"], o["path"]))


def recheck_members(ops: list[dict], members: Iterable[dict]) -> tuple[list[dict], list[dict]]:
    """(ops still justified, ops dropped with a reason) against a fresh member list, right before
    acting: a STALE path whose client came back, or a MISSING/MISMATCHED path whose member left or
    moved to another group, is not written."""
    now: dict[str, set] = {}
    members = list(members)
    unknown = unknown_groups(members)
    for m in members:
        if is_unknown_marker(m):
            continue
        if name_problem(m.get("client_host"), m.get("client_id")) is None:
            now.setdefault(znode_name(m["client_host"], m["client_id"]), set()).add(m["group"])
    keep, dropped = [], []
    for op in ops:
        groups = now.get(op["path"].rsplit("/", 1)[-1], set())
        if ({op.get("before"), op.get("after")} - {None}) & unknown:
            dropped.append(dict(op, status="skipped", reason="the group could not be described now (members unknown)"))
        elif op["op"] == "delete" and groups:
            dropped.append(dict(op, status="skipped", reason=f"a live member appeared (groups {sorted(groups)})"))
        elif op["op"] in ("create", "set") and groups != {op["after"]}:
            dropped.append(dict(op, status="skipped",
                                reason=f"live member groups are now {sorted(groups) or 'none'}, not {op['after']!r}"))
        else:
            keep.append(op)
    return keep, dropped


def rollback_ops(changed: Iterable[dict]) -> list[dict]:
    """Conditional writes that undo applied ops (from an apply result's `changed`), each
    conditional on the version the apply left: a create is deleted, a set is set back, a delete is
    re-created with its previous data. A path someone changed since is skipped, like any lost race."""
    out = []
    for c in changed:
        if c["op"] == "create":
            out.append({"op": "delete", "class": "ROLLBACK", "path": c["path"], "before": c["after"], "after": None,
                        "version": c["new_version"]})
        elif c["op"] == "set":
            out.append({"op": "set", "class": "ROLLBACK", "path": c["path"], "before": c["after"], "after": c["before"],
                        "version": c["new_version"]})
        elif c["op"] == "delete":
            out.append({"op": "create", "class": "ROLLBACK", "path": c["path"], "before": None, "after": c["before"],
                        "version": None})
    return out


# -- collect -----------------------------------------------------------------------------------
def _ts(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.timezone.utc)


def read_mappings(client, root: str, cluster: str, observed_at: dt.datetime, window: int = 5000,
                  timeout: float = 30.0) -> tuple[list[dict], list[str]]:
    """Every child of `root` with its data, version, ctime and mtime (group_id_mappings rows), read
    with `window` asynchronous gets in flight. A missing root gives no rows and a problem; a child
    deleted between the listing and its read is left out (it no longer exists)."""
    problems: list[str] = []
    try:
        children = client.get_children(root)
    except NoNodeError:
        return [], [f"mapping root {root} does not exist (no KoP mapping was ever written, or another root is used)"]
    except NoAuthError:
        raise ReconcileError(f"not authorised to list {root}: configure digest auth on the ZooKeeper connection") from None
    rows: list[dict] = []
    children = sorted(children)
    for i in range(0, len(children), window):
        chunk = children[i:i + window]
        futs = [(name, client.get_async(join_path(root, name))) for name in chunk]
        for name, fut in futs:
            try:
                data, stat = fut.get(timeout=timeout)
            except NoNodeError:
                continue
            except NoAuthError:
                problems.append(f"not authorised to read {join_path(root, name)}")
                continue
            host, cid = split_name(name)
            rows.append({"cluster": cluster, "observed_at": observed_at, "path": join_path(root, name),
                         "client_host": host, "client_id": cid,
                         "group": (data or b"").decode("utf-8", errors="replace"),
                         "znode_version": stat.version, "ctime": _ts(stat.ctime / 1000), "mtime": _ts(stat.mtime / 1000)})
    return rows, problems


def read_members(kafka, cluster: str, observed_at: dt.datetime) -> tuple[list[dict], list[str]]:
    """Live members of every group the cluster lists (group_members rows): client id and client host
    (Kafka's leading slash and any port stripped: the mapping path uses the bare IP). A group that
    cannot be described (e.g. its coordinator is loading) gets one row with member id, client id and
    host null: its members are unknown, so no mapping of it is judged stale."""
    problems: list[str] = []
    groups = [g for g, _ in kafka.list_groups()]
    rows = []
    for g, d in sorted(kafka.describe_groups(groups).items()):
        if d.error:
            problems.append(f"group {g!r} could not be described: {d.error}")
            rows.append({"cluster": cluster, "observed_at": observed_at, "group": g, "client_id": None,
                         "client_host": None, "member_id": None})
            continue
        for m in d.members:
            rows.append({"cluster": cluster, "observed_at": observed_at, "group": g, "client_id": m.client_id,
                         "client_host": m.host, "member_id": m.member_id})
    return rows, problems


# -- apply -------------------------------------------------------------------------------------
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


class Journal:
    """Append-only JSON Lines: an `intent` line is durable (fsync) before its operation is sent,
    its outcome follows. Replaying it tells exactly which writes happened."""

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

    def close(self) -> None:
        if self._f:
            self._f.close()


def read_journal(path: str | os.PathLike) -> dict[int, dict]:
    """seq -> the last line of each operation (status intent = sent or about to be, outcome unknown)."""
    out: dict[int, dict] = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                e = json.loads(line)
                out[e["seq"]] = e
    return out


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


def apply(client, ops: list[dict], root: str, journal_path: str | os.PathLike | None = None,
          window: int = 256, timeout: float = 30.0,
          on_progress: Callable[[int], None] | None = None,
          on_sent: Callable[[int], None] | None = None) -> ApplyResult:
    """Run conditional writes, `window` in flight. Raises ApplyInterrupted (with the exact result)
    when the connection or session is lost: nothing more is sent, in-flight writes end up in
    `unknown` (the next collection sees what really happened)."""
    t0 = time.monotonic()
    res = ApplyResult(journal=str(journal_path) if journal_path else None)
    journal = Journal(journal_path)
    ops = [dict(op, seq=i) for i, op in enumerate(ops)]
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
            for o in chunk:
                try:
                    futs.append((o, _send(client, o, acl)))
                except _LOST as e:  # the client refuses to send once the connection is gone
                    res.interrupted = res.interrupted or f"{type(e).__name__} {e}".strip()
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
                except (NoAuthError, BadArgumentsError) as e:
                    s = {**o, "status": "error", "reason": f"{type(e).__name__}: refused by ZooKeeper"}
                    res.errors.append(s)
                    outcomes.append(s)
                    continue
                new_version = None
                if o["op"] == "create":
                    new_version = 0
                elif o["op"] == "set":
                    new_version = value.version
                s = {**o, "status": "done", "new_version": new_version}
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


def _same_incarnation(client, ops: list[dict], timeout: float) -> tuple[list[dict], list[dict]]:
    """Split set/delete ops into (still the znode that was read, skipped): ZooKeeper's version check
    alone cannot tell a znode from one deleted and re-created since (both at version 0), its ctime
    can. Read right before the conditional write, in the same pipeline."""
    checks = [(o, client.exists_async(o["path"])) for o in ops if o["op"] in ("set", "delete") and o.get("ctime_ms")]
    gone: dict[int, str] = {}
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
    """The root's ACL (children get the same: a digest-protected root keeps them protected); the
    root is created when missing (journaled)."""
    try:
        acl, _ = client.get_acls(root)
        return acl
    except NoNodeError:
        pass
    try:
        client.create(root, b"", makepath=True)
        journal.write([{"seq": -1, "op": "create_root", "path": root, "status": "done"}])
    except NodeExistsError:
        pass
    acl, _ = client.get_acls(root)
    return acl


def read_back(client, paths: Iterable[str]) -> dict[str, tuple[str, int] | None]:
    """path -> (data, version) or None (absent), read concurrently (verification, tests)."""
    futs = {p: client.get_async(p) for p in paths}
    out = {}
    for p, fut in futs.items():
        try:
            data, stat = fut.get(timeout=30)
            out[p] = (data.decode("utf-8", errors="replace"), stat.version)
        except NoNodeError:
            out[p] = None
    return out


def verify(client, result_changed: list[dict]) -> tuple[list[str], list[str]]:
    """(problems, notes). A changed path reading back its planned state is fine; one at a newer
    version was written by someone else since (a note, not a problem: it is theirs)."""
    now = read_back(client, [c["path"] for c in result_changed])
    problems, notes = [], []
    for c in result_changed:
        cur = now[c["path"]]
        if c["op"] == "delete":
            if cur is not None:
                notes.append(f"{c['path']} exists again (re-created since, version {cur[1]})")
        elif cur is None:
            notes.append(f"{c['path']} was deleted since the write")
        elif cur[1] == c["new_version"] and cur[0] != c["after"]:
            problems.append(f"{c['path']} holds {cur[0]!r} at version {cur[1]}, expected {c['after']!r}")
        elif cur[1] != c["new_version"]:
            notes.append(f"{c['path']} was written since (version {cur[1]}, ours {c['new_version']})")
    return problems, notes


# -- one collection, written all or nothing ----------------------------------------------------
@dataclass
class MappingCollection:
    cluster: str
    observed_at: dt.datetime
    mappings: list[dict]
    members: list[dict]
    problems: list[str]
    seconds: float

    def summary(self) -> str:
        return (f"cluster {self.cluster}: {len(self.mappings)} mapping znode(s), {len(self.members)} live member(s), "
                f"{len(self.problems)} problem(s), {self.seconds:.1f}s")


def collect(cluster, kafka, zk_client, now: dt.datetime | None = None) -> MappingCollection:
    """Read one cluster's mappings (its fleet-file root, below the chroot) and live members."""
    if cluster.group_id_mappings is None:
        raise ReconcileError(f"cluster {cluster.name!r} has no group_id_mappings section in the fleet file")
    t0 = time.monotonic()
    now = now or dt.datetime.now(dt.timezone.utc)
    root = cluster.group_id_mappings.root
    mappings, p1 = read_mappings(zk_client, root, cluster.name, now)
    members, p2 = read_members(kafka, cluster.name, now)
    return MappingCollection(cluster.name, now, mappings, members, p1 + p2, time.monotonic() - t0)


def collect_and_write(cluster, kafka, zk_client, data_root) -> MappingCollection:
    from fleetkit.core.datasets import write_collection

    c = collect(cluster, kafka, zk_client)
    write_collection(data_root, cluster.name, c.observed_at, {"group_id_mappings": c.mappings,
                                                              "group_members": c.members})
    return c


# -- the report -------------------------------------------------------------------------------
def load_findings(out_dir: str | os.PathLike) -> tuple[list[dict], dict]:
    """(findings, summary) written by the Spark job into out_dir."""
    out = Path(out_dir)
    summary = json.loads((out / "summary.json").read_text()) if (out / "summary.json").exists() else {"clusters": {}}
    findings = []
    if (out / "findings.jsonl").exists():
        with open(out / "findings.jsonl", encoding="utf-8") as f:
            findings = [json.loads(line) for line in f if line.strip()]
    return findings, summary


def render_report(out_dir: str | os.PathLike, max_rows: int = 2000) -> Path:
    """report.md next to the job's output (every cluster-supplied value escaped)."""
    from fleetkit.core.render import render

    findings, summary = load_findings(out_dir)
    clusters = [{"cluster": c, "counts": sorted(v.items(), key=lambda kv: CLASSES.index(kv[0]) if kv[0] in CLASSES else 99)}
                for c, v in sorted(summary.get("clusters", {}).items())]
    path = Path(out_dir) / "report.md"
    path.write_text(render("group_ids.md.j2", clusters=clusters, findings=findings, shown=max_rows,
                           truncated=len(findings) > max_rows), encoding="utf-8")
    return path


def journal_path(data_root: str | os.PathLike, dag_id: str, run_id: str, cluster: str) -> Path:
    """Where a run's apply journal lives: <data root>/journals/group_ids/<dag>/<run>/<cluster>.jsonl."""
    from fleetkit.core.plans import safe_component

    return (Path(data_root) / "journals" / "group_ids" / safe_component(dag_id) / safe_component(run_id) /
            f"{safe_component(cluster)}.jsonl")


def record_interrupted(data_root: str, cluster: str, dag_id: str, run_id: str, action: str, exc: ApplyInterrupted,
                       actor: str | None = None) -> None:
    """An interrupted apply still leaves an audit record of exactly what it did."""
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    audit.record(DataRoot(data_root), cluster=cluster, dag_id=dag_id, run_id=run_id, action=action, event="executed",
                 actor=actor, message=f"INTERRUPTED: {exc}", details={"result": exc.result.to_dict(), "partial": True})

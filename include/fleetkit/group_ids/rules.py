"""Group-id reconciliation rules: the one definition, used by the runbook, fleetctl and the Spark job.

KoP (Kafka-on-Pulsar) keeps one znode per consumer client under a root (groupIdZooKeeperPath,
default /client_group_id) in the broker's local metadata store: ``<root>/<ip>-<clientId>`` holding
the group id in UTF-8. With kopEnableGroupLevelConsumerMetrics on, it writes it (unconditionally)
when a client sends FindCoordinator for a group and deletes it (unconditionally) when that
connection closes, so a broker restart or a delete racing a newer write leaves live consumers
without a mapping and stale znodes behind. The group coordinator's member list (client id, client
host) is the truth. docs/group-ids.md ("Real KoP") cites KoP's source for every part of the format.

This module is the one definition of:

* the znode name of a member (``znode_name``) and when a member cannot have one
  (``name_problem``: a client id holding ``/`` is no direct child of the root, and ZooKeeper refuses
  control characters, U+D800-U+F8FF, U+FFF0-U+FFFF and every character outside the BMP: such a
  member is reported UNREPRESENTABLE with the reason, never written);
* the classes (``classify``), first match wins: UNREPRESENTABLE, CONFLICT, MISMATCHED, MISSING,
  STALE, OK;
* the aggregation of the collected rows into each path's facts (``PathFacts``) and findings
  (``diff``): the runbook calls it on one cluster's rows, the Spark job
  (spark_jobs/group_ids.py) on slices of the paths; tests run one case table
  through both;
* the conditional writes that repair the findings (``ops_for``).

Collecting lives in collect.py, planning in plan.py, applying in execute.py.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Iterable

from fleetkit.core.errors import FleetError

ACTION = "reconcile_group_ids"
CLASSES = ("UNREPRESENTABLE", "CONFLICT", "MISMATCHED", "MISSING", "STALE", "OK")
#: classes whose repair is destructive (approval gate) and the one that is a plain repair
DESTRUCTIVE = ("MISMATCHED", "STALE")
REPAIR = ("MISSING",)
OP_OF = {"MISSING": "create", "MISMATCHED": "set", "STALE": "delete"}

#: Characters ZooKeeper's PathUtils.validatePath refuses (Java UTF-16 code units; every character
#: outside the BMP is a surrogate pair there, so it is refused too), plus the path separator.
_FORBIDDEN_RANGES = ((0x00, 0x1F), (0x7F, 0x9F), (0xD800, 0xF8FF), (0xFFF0, 0x10FFFF))


class ReconcileError(FleetError):
    pass


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
    name = znode_name(client_host, client_id)
    if "/" in name:
        return ("the client id holds '/': KoP writes such a mapping as a nested znode below the root, "
                "which the toolkit neither reads nor writes")
    bad = sorted({f"U+{ord(c):04X}" for c in name if _forbidden(c)})
    if bad:
        return f"ZooKeeper refuses the character(s) {', '.join(bad[:5])} in a znode name"
    return None


def kop_host(client_host: str) -> str:
    """The host part KoP puts in a mapping's name, from the member's bare IP.

    KoP (GroupIdUtils.groupIdPathFormat) takes Java's InetSocketAddress.toString() of the
    connection ('/10.0.0.7:53211') and keeps what stands before the first ':'. An IPv4 address
    stays whole. An IPv6 address keeps only its first group: Java 14 and later print it in brackets
    ('/[2001:db8:0:0:0:0:0:1]:53211' -> '[2001'), older Java without ('/2001:db8:...:1:53211' ->
    '2001'; the member's host then still carries the port, nine groups). Java prints each group in
    lower-case hex without leading zeros, so '::1' is '[0'."""
    if ":" not in client_host:
        return client_host
    groups = client_host.split(":")
    try:
        first = format(int(groups[0] or "0", 16), "x")
    except ValueError:
        return groups[0]
    return first if len(groups) == 9 else f"[{first}"


def znode_name(client_host: str, client_id: str) -> str:
    """<ip>-<clientId>, the name KoP gives the member's mapping znode (``kop_host`` renders the ip).
    KoP concatenates, so a client id with '-' is kept whole after the first '-'."""
    return f"{kop_host(client_host)}-{client_id}"


def join_path(root: str, name: str) -> str:
    return f"{root.rstrip('/')}/{name}"


def split_name(name: str) -> tuple[str, str]:
    """(client host, client id) from a znode name: KoP's host part ('10.0.0.7', '[2001') holds no '-',
    so the first '-' splits."""
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
    group_unknown: bool = False                  # the znode's group could not be listed or described (members
                                                 # unknown), or the cluster's listing was partial


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
            return "OK", ("its group could not be listed or described: its members are unknown, nothing is "
                          "judged stale")
        if f.age_seconds is not None and f.age_seconds > grace_seconds:
            return "STALE", f"no live member and not modified for {f.age_seconds:.0f} s (grace {grace_seconds:.0f} s)"
        return "OK", "no live member, but modified within the grace period"
    return "OK", "nothing to do"


def diff(mappings: Iterable[dict], members: Iterable[dict], root: str, grace_seconds: float,
         as_of: dt.datetime | None = None, unknown: set[str | None] | None = None) -> list[dict]:
    """Findings (one per path, plus one per unrepresentable member) of one cluster's collected rows:
    the one aggregation of the facts. The runbook plans with it; the Spark job runs it on each
    slice of the paths (every row of one ip-clientId name lands in one slice), giving `unknown`,
    the cluster's unknown_groups, which a slice cannot see (None: read from `members`)."""
    by_name: dict[str, dict] = {}
    unrepresentable: list[dict] = []
    members = list(members)
    if unknown is None:
        unknown = unknown_groups(members)
    every_group_unknown = ALL_GROUPS in unknown
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
                          group_unknown=bool(z) and (every_group_unknown or z["group"] in unknown))
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


#: the group of the unknown marker that stands for every group of the cluster: listing the groups
#: failed on some broker, so the groups it did not list (their members) are unknown
ALL_GROUPS = None


def is_unknown_marker(m: dict) -> bool:
    """A group_members row without member id, client id and host: its group could not be described
    (or, with group ALL_GROUPS, the cluster's groups could not all be listed)."""
    return m.get("member_id") is None and m.get("client_id") is None and m.get("client_host") is None


def unknown_marker(cluster: str, observed_at, group: str | None) -> dict:
    """The group_members row saying `group`'s members are unknown (ALL_GROUPS: every group's)."""
    return {"cluster": cluster, "observed_at": observed_at, "group": group, "client_id": None,
            "client_host": None, "member_id": None}


def unknown_groups(members: Iterable[dict]) -> set[str | None]:
    """The groups whose members are unknown; holds ALL_GROUPS when the listing was partial."""
    return {m.get("group") for m in members if is_unknown_marker(m)}


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


def rollback_ops(changed: Iterable[dict]) -> list[dict]:
    """Conditional writes that undo applied ops (from an apply result's `changed`, or the done
    entries of its journal), each conditional on the version the apply left and on the znode's
    creation time, like every set and delete: a create is deleted, a set is set back, a delete is
    re-created with its previous data. A path someone changed, or deleted and re-created, since
    is skipped, like any lost race (so is one whose creation time was not recorded)."""
    out = []
    for c in changed:
        if c.get("op") == "create":
            out.append({"op": "delete", "class": "ROLLBACK", "path": c["path"], "before": c["after"], "after": None,
                        "version": c["new_version"], "ctime_ms": c.get("ctime_ms")})
        elif c.get("op") == "set":
            out.append({"op": "set", "class": "ROLLBACK", "path": c["path"], "before": c["after"], "after": c["before"],
                        "version": c["new_version"], "ctime_ms": c.get("ctime_ms")})
        elif c.get("op") == "delete":
            out.append({"op": "create", "class": "ROLLBACK", "path": c["path"], "before": None, "after": c["before"],
                        "version": None})
    return out

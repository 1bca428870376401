"""Resetting offsets kept in ZooKeeper (the fleet file's offset_stores): one version-checked znode
write per partition, behind the same approval gate as the Kafka reset (fleetkit.stuck.action
dispatches here when the run's `source` is zookeeper or storm).

* zookeeper (old high-level consumer): <root>/<group>/offsets/<topic>/<p> holds the offset as
  decimal text. Precondition: no live member under <root>/<group>/ids.
* storm (storm-kafka spout): <root>/<spout id>/partition_<N> holds JSON; only the top-level
  "offset" value is rewritten, every other byte stays as the spout wrote it. A live topology
  overwrites the reset at its next commit, so the topology must not run: when Storm's own znodes
  (the store's storm_root, fleetkit.collection.storm_state) say whether the topology named in the
  JSON runs, that is the precondition, checked at plan time and re-read right before writing; when
  they cannot say (no Storm state there, or not readable), the plan refuses unless the run
  confirms `topology_deactivated`.

Every write is `set(path, data, version=<the version the plan read>)`: a znode changed since the
plan (a consumer committed) is refused by ZooKeeper itself, and the re-check before acting reads
each version again and refuses first. Each write is journaled (intent before, outcome after). A
reset only rewrites existing znodes (it creates none, so no ACL is chosen here); a write the
znode's ACL refuses stops the run with NotAuthorized (operation, znode, ZooKeeper identity). The
writes go through the store's runbook connection (fleetkit.core.fleet: runbook_conn_id).
"""

from __future__ import annotations

import json
import logging
import os
from contextlib import contextmanager

from kazoo.exceptions import BadVersionError, NoAuthError, NoNodeError

from fleetkit.clients.zookeeper import not_authorized

from fleetkit.collection import storm_state, zk_offsets
from fleetkit.core.datasets import iso_z, utcnow
from fleetkit.core.journal import Journal
from fleetkit.stuck.plan import (ACTION, DAG_ID, ResetError, new_offset, offsets_at_time, parse_partitions,
                                 parse_target)

log = logging.getLogger(__name__)

SOURCES = ("zookeeper", "storm")


def _truthy(value) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() in ("true", "yes", "1"))


# -- the storm JSON: the top-level "offset" replaced in place ----------------------------------------
def _skip_ws(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _top_level_span(text: str, key: str) -> tuple[int, int]:
    """(start, end) of the top-level value of `key` in a JSON object's text."""
    dec = json.JSONDecoder()
    i = _skip_ws(text, 0)
    if text[i:i + 1] != "{":
        raise ValueError("not a JSON object")
    i += 1
    while True:
        i = _skip_ws(text, i)
        if text[i:i + 1] == "}":
            raise ValueError(f"no top-level {key!r}")
        if text[i:i + 1] != '"':
            raise ValueError(f"expected a key at character {i}")
        name, i = json.decoder.scanstring(text, i + 1)
        i = _skip_ws(text, i)
        if text[i:i + 1] != ":":
            raise ValueError(f"expected ':' at character {i}")
        i = _skip_ws(text, i + 1)
        _, end = dec.raw_decode(text, i)
        if name == key:
            return i, end
        i = _skip_ws(text, end)
        if text[i:i + 1] == ",":
            i += 1


def replace_storm_offset(data: bytes, offset: int) -> bytes:
    """The spout's JSON with its top-level "offset" set to `offset`, every other byte unchanged."""
    text = data.decode("utf-8")
    start, end = _top_level_span(text, "offset")
    return (text[:start] + str(int(offset)) + text[end:]).encode("utf-8")


def encode_offset(source: str, current: bytes, offset: int) -> bytes:
    return replace_storm_offset(current, offset) if source == "storm" else str(int(offset)).encode("ascii")


# -- which store, and a client of it ------------------------------------------------------------------
def find_store(cluster, source: str, root: str | None = None):
    stores = [s for s in cluster.offset_stores if s.kind == source and (not root or s.root == root)]
    if not stores:
        declared = ", ".join(f"{s.kind} {s.conn_id}{s.chroot}{s.root}" for s in cluster.offset_stores) or "none"
        raise ResetError(f"cluster {cluster.name!r} declares no {source} offset store"
                         f"{f' with root {root!r}' if root else ''} in the fleet file (offset_stores: {declared})")
    if len(stores) > 1:
        raise ResetError(f"cluster {cluster.name!r} has {len(stores)} {source} offset stores: name one with the "
                         f"store_root param ({', '.join(s.root for s in stores)})")
    return stores[0]


def store_of(cluster, plan: dict):
    s = plan["details"]["store"]
    for store in cluster.offset_stores:
        if (store.kind, store.conn_id, store.chroot, store.root) == (s["kind"], s["conn_id"], s["chroot"], s["root"]):
            return store
    raise ResetError(f"the plan's {s['kind']} store {s['conn_id']}{s['chroot']}{s['root']} is no longer in the "
                     f"fleet file of cluster {cluster.name!r}")


@contextmanager
def store_client(ctx, store):
    """A started kazoo client of the store (ctx.open_zookeeper(store) gives a ZooKeeperCluster)."""
    opener = getattr(ctx, "open_zookeeper", None)
    if opener is None:
        raise ResetError("no way to reach the offset store's ZooKeeper in this context")
    zk = opener(store)
    zk.start()
    try:
        yield zk.client
    finally:
        zk.stop()


# -- plan -------------------------------------------------------------------------------------------------
def build_plan(ctx, params: dict) -> dict:
    source = params.get("source")
    cluster = ctx.cluster
    group, topic = params.get("group"), params.get("topic")
    if source not in SOURCES:
        raise ResetError(f"source {source!r} is not one of {', '.join(SOURCES)}")
    if not group or not topic:
        raise ResetError("a group (for storm: the spout id) and a topic are required")
    what = "spout" if source == "storm" else "group"
    try:
        zk_offsets.child_path("/", group)
    except zk_offsets.UnsafeZnodeName as e:
        raise ResetError(f"{what} {group!r}: {e}") from None
    confirmed = _truthy(params.get("topology_deactivated"))
    tgt = parse_target(params.get("target"), params.get("offsets") or None)
    store = find_store(cluster, source, params.get("store_root") or None)
    with store_client(ctx, store) as client:
        read = (zk_offsets.read_storm_store(client, store, [group]) if source == "storm"
                else zk_offsets.read_zookeeper_store(client, store, [group]))
        members = zk_offsets.live_members(client, store.root, group) if source == "zookeeper" else []
    found = {o.partition: o for o in read.offsets if o.topic == topic}
    if not found:
        raise ResetError(f"{source} store {store.conn_id}{store.chroot}{store.root}: {what} {group!r} has no "
                         f"committed offset for topic {topic!r}")
    topologies = {o.topology_id or "": read.liveness[o.topology_id or ""] for o in found.values()} \
        if source == "storm" else {}
    unknown = {t: v.reason for t, v in topologies.items() if v.state == storm_state.UNKNOWN}
    if unknown and not confirmed:
        raise ResetError(
            f"spout {group!r} keeps its offsets in ZooKeeper and Storm's state there does not say whether its "
            f"topology runs ({'; '.join(unknown.values())}): deactivate the topology first (storm deactivate "
            "<topology>; a live topology overwrites the reset at its next commit), then trigger again with "
            "topology_deactivated = true")
    wanted = parse_partitions(params.get("partitions"))
    if tgt.kind == "restore" and wanted is None:
        wanted = sorted(tgt.offsets)
    parts = sorted(found) if wanted is None else wanted
    missing = [p for p in parts if p not in found]
    if missing:
        raise ResetError(f"{what} {group!r} has no committed offset in the store for {topic} partition(s) {missing}")
    logs = ctx.kafka.log_offsets([(topic, p) for p in parts])
    by_time = offsets_at_time(ctx.kafka, cluster.name, tgt, [(topic, p) for p in parts])
    rows, changes = [], []
    for p in parts:
        o = found[p]
        start, end, err = logs[(topic, p)]
        if err or start is None or end is None:
            raise ResetError(f"partition {topic}-{p}: log offsets not readable ({err})")
        after = new_offset(tgt, p, o.offset, start, end, by_time.get((topic, p)))
        rows.append({"partition": p, "committed": o.offset, "log_start": start, "log_end": end, "new": after,
                     "lag_before": end - o.offset, "lag_after": end - after, "znode": o.path, "version": o.version})
        changes.append({"target": o.path, "before": o.offset, "after": after})
    previous = {str(r["partition"]): r["committed"] for r in rows}
    rollback_conf = {"cluster": cluster.name, "source": source, "store_root": store.root, "group": group,
                     "topic": topic, "partitions": ",".join(previous), "target": "restore", "offsets": previous,
                     "topology_deactivated": False, "dry_run": True}
    preconditions = []
    refused_now = []
    if source == "zookeeper" and members:
        refused_now.append(f"{len(members)} consumer(s) registered under "
                           f"{zk_offsets.child_path(store.root, group, 'ids')}: the execution refuses to write while "
                           "the group has live consumers (they would commit over the reset). Stop them first, then "
                           "approve; or reject and plan again later.")
    running = sorted(t for t, v in topologies.items() if v.state == storm_state.RUNNING)
    if running:
        refused_now.append(f"Storm shows topology {', '.join(running)} running (below {store.storm_root}): the "
                           "execution refuses to write while it runs (it would commit over the reset). Kill or "
                           "deactivate it first, then approve; or reject and plan again later.")
    if source == "zookeeper":
        preconditions.append({"check": "no_live_members", "what": f"no consumer registered under "
                                                                  f"{zk_offsets.child_path(store.root, group, 'ids')}",
                              "observed": {"members": members}})
    elif not unknown:
        preconditions.append({"check": "topology_not_running", "what": f"Storm's znodes below {store.storm_root} "
                              "show the spout's topology not running (read again right before writing)",
                              "observed": {t or "(none)": v.reason for t, v in topologies.items()}})
    else:
        preconditions.append({"check": "topology_deactivated", "what": "the requester confirmed the topology is "
                              "deactivated (Storm's state in that ZooKeeper cannot tell; a live topology "
                              "overwrites the reset)",
                              "observed": {"confirmed": True}})
    preconditions.append({"check": "znode_versions_unchanged", "what": "every offset znode still has the version "
                          "the plan read (re-read right before writing; the write is conditional on it)",
                          "expected": {r["znode"]: r["version"] for r in rows}})
    risks = ["Records between the old and the new offset are skipped when moving forward, or processed again "
             "when moving back."]
    if source == "storm":
        risks.append("A topology activated before the write overwrites it at its next commit; one activated after "
                     "starts from the new offsets." + (" Storm's state did not say whether the topology runs: the "
                                                       "requester's confirmation stands for it." if unknown else ""))
    else:
        risks.append("A consumer of this group that starts before the write commits over it (the execution re-checks "
                     "the ids and each znode's version right before writing).")
    return {
        "action": ACTION,
        "cluster": cluster.name,
        "title": f"Reset offsets of {source} {what} {group} on {topic} ({tgt.describe()})",
        "created_at": iso_z(utcnow()),
        "preconditions": preconditions,
        "changes": changes,
        "risks": risks,
        "rollback": {"how": "Trigger runbook_stuck_reset with target 'restore', the same source and the previous "
                            "offsets (for storm, confirm topology_deactivated again if Storm's state cannot tell whether "
                            "the topology runs); or fleetctl audit rollback "
                            "RECORD_ID.",
                     "dag_id": DAG_ID, "conf": rollback_conf},
        "details": {"source": source, "group": group, "topic": topic, "target": tgt.describe(), "partitions": rows,
                    "store": {"kind": store.kind, "conn_id": store.conn_id, "chroot": store.chroot,
                              "root": store.root},
                    "members": len(members), "group_state": _group_state(source, members, topologies),
                    "topologies": {t: {"state": v.state, "reason": v.reason} for t, v in topologies.items()},
                    "liveness_from": "" if source == "zookeeper" else
                    ("confirmation" if unknown else "storm")},
        # what the execution's precondition check would refuse if approved as things are now
        "refused_now": refused_now,
    }


def _group_state(source: str, members: list, topologies: dict) -> str:
    if source == "zookeeper":
        return "Stable" if members else "Empty"
    states = {v.state for v in topologies.values()}
    if storm_state.UNKNOWN in states or not states:
        return "Unknown"
    return "Stable" if storm_state.RUNNING in states else "Empty"


# -- check, execute, verify ---------------------------------------------------------------------------------
def _problems(client, store, plan: dict) -> list[str]:
    d = plan["details"]
    problems = []
    if d["source"] == "storm" and d.get("liveness_from") == "storm":
        for tid in d.get("topologies") or {}:
            live = storm_state.topology_liveness(client, store.storm_root, tid or None)
            if live.state != storm_state.NOT_RUNNING:
                problems.append(f"topology {tid!r} no longer shows as not running in Storm's state below "
                                f"{store.storm_root} ({live.reason}); stop it first")
    if d["source"] == "zookeeper":
        members = zk_offsets.live_members(client, store.root, d["group"])
        if members:
            problems.append(f"group {d['group']!r} has {len(members)} live member(s) in ZooKeeper "
                            f"({', '.join(members)}); stop its consumers first")
    for r in d["partitions"]:
        try:
            _, stat = client.get(r["znode"])
        except NoNodeError:
            problems.append(f"znode {r['znode']!r} no longer exists")
            continue
        if stat.version != r["version"]:
            problems.append(f"znode {r['znode']!r} changed since the plan (version {r['version']} -> {stat.version}): "
                            "a consumer committed; plan again")
    return problems


def check_preconditions(ctx, plan: dict) -> list[str]:
    """What no longer holds (empty: safe to write)."""
    store = store_of(ctx.cluster, plan)
    with store_client(ctx, store) as client:
        return _problems(client, store, plan)


class ZnodeResetFailed(ResetError):
    """A version-checked write was refused or failed; the message names the znode."""


def execute(ctx, plan: dict, journal_path: str | os.PathLike | None = None) -> dict:
    """Write each planned offset with set(version=planned), journaled per znode. Stops at the first
    refused write (the ones before it are in the journal and the result)."""
    d = plan["details"]
    store = store_of(ctx.cluster, plan)
    done = []
    with store_client(ctx, store) as client, Journal(journal_path) as j:
        problems = _problems(client, store, plan)
        if problems:
            raise ZnodeResetFailed("refusing to write: " + "; ".join(problems))
        for seq, r in enumerate(d["partitions"]):
            path = r["znode"]
            current, stat = client.get(path)

            def write(path=path, current=current, stat=stat, r=r) -> None:
                if stat.version != r["version"]:
                    raise BadVersionError()
                client.set(path, encode_offset(d["source"], current, r["new"]), version=r["version"])

            refused: list = []

            def failure(e: BaseException, path=path) -> dict:
                if isinstance(e, NoAuthError):
                    refused.append(not_authorized(client, "set", path, ctx.cluster.name))
                    return {"error": str(refused[0])}
                return {"error": "BadVersion"} if isinstance(e, BadVersionError) else {}

            try:
                j.step(seq, write, on_error=failure, op="set_znode", path=path, version=r["version"],
                       before=r["committed"], after=r["new"], data_before=current.decode("utf-8", "replace"))
            except NoAuthError:
                raise refused[0] from None
            except BadVersionError:
                raise ZnodeResetFailed(
                    f"znode {path!r} changed between the re-check and the write (a consumer committed); written "
                    f"before it: {[c['znode'] for c in done]}" + (f"; journal {journal_path}" if journal_path else "")
                ) from None
            log.info("wrote %s: %s -> %s", path, r["committed"], r["new"])
            done.append({"znode": path, "partition": r["partition"], "before": r["committed"], "after": r["new"]})
    return {"source": d["source"], "group": d["group"], "topic": d["topic"], "changes": done}


def verify(ctx, plan: dict) -> list[str]:
    d = plan["details"]
    store = store_of(ctx.cluster, plan)
    with store_client(ctx, store) as client:
        read = (zk_offsets.read_storm_store(client, store, [d["group"]]) if d["source"] == "storm"
                else zk_offsets.read_zookeeper_store(client, store, [d["group"]]))
    now = {o.partition: o.offset for o in read.offsets if o.topic == d["topic"]}
    return [f"{r['znode']}: expected {r['new']}, reads back {now.get(r['partition'])}"
            for r in d["partitions"] if now.get(r["partition"]) != r["new"]]

"""Collect consumer offsets kept in ZooKeeper (the fleet file's `offset_stores`) into
offsets_snapshots rows with `source` zookeeper or storm.

Layouts, below the store's chroot:

* kind ``zookeeper`` (Kafka's old high-level consumer, Kafka 0.8-2.x clients)::

      <root>/<group>/offsets/<topic>/<partition>   the committed offset as decimal text
      <root>/<group>/ids/<consumer id>              ephemeral: one per live member
      <root>/<group>/owners/<topic>/<partition>     ephemeral: the consumer id that owns it

* kind ``storm`` (storm-kafka's KafkaSpout, PartitionManager.commit() through ZkState.writeJSON)::

      <root>/<spout id>/partition_<N>   {"topology":{"id":..,"name":..},"offset":N,"partition":N,
                                         "broker":{"host":..,"port":..},"topic":..}

  A spout's liveness is its topology's, read from Storm's own znodes below the store's
  `storm_root` for the "topology":{"id":..} of the JSON (fleetkit.collection.storm_state):
  running -> `assigned` true, `group_state` Stable; not running (killed, deactivated, its
  supervisors gone) -> false, Empty; unknown (Storm's state absent or unreadable) -> null,
  Unknown, the reason among the collection's problems. `group` is the spout id,
  `member_client_id` the topology name from the JSON.

Names read from ZooKeeper are hostile: a child name is one path component (ZooKeeper cannot
return one holding "/"), and every path is built with `child_path` (fleetkit.collection.znodes),
which refuses ".", ".." and "/" in a name instead of letting it climb out of its parent.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from kazoo.exceptions import NoNodeError

from fleetkit.collection import storm_state
from fleetkit.collection.znodes import UnsafeZnodeName, child_path
from fleetkit.core.fleet import Cluster, OffsetStoreSettings

log = logging.getLogger(__name__)

STORM_PARTITION_PREFIX = "partition_"
#: a spout's partition JSON is a few hundred bytes; a larger znode is not read as one
MAX_STORM_STATE_BYTES = 64 << 10


@dataclass
class StoreOffset:
    """One committed offset read from a store."""

    source: str
    group: str            # consumer group, or the spout id
    topic: str
    partition: int
    offset: int
    path: str             # the znode it was read from
    version: int          # its znode version (the reset's conditional write)
    topology: str | None = None  # storm: the topology name
    topology_id: str | None = None  # storm: the topology instance (Storm's storm id) that committed it
    owner: str | None = None     # zookeeper: the consumer id in <root>/<group>/owners/<topic>/<partition>


@dataclass
class StoreRead:
    offsets: list[StoreOffset] = field(default_factory=list)
    members: dict[str, list[str]] = field(default_factory=dict)  # zookeeper: group -> live consumer ids
    liveness: dict = field(default_factory=dict)  # storm: topology id -> storm_state.Liveness
    problems: list[str] = field(default_factory=list)


def _children(client, path: str) -> list[str]:
    try:
        return sorted(client.get_children(path))
    except NoNodeError:
        return []


def _owner(client, path: str) -> str | None:
    try:
        data, _ = client.get(path)
        return data.decode("utf-8", "replace")
    except NoNodeError:
        return None


def live_members(client, root: str, group: str) -> list[str]:
    """Consumer ids registered under <root>/<group>/ids (ephemeral: one per live member)."""
    return _children(client, child_path(root, group, "ids"))


def read_zookeeper_store(client, store: OffsetStoreSettings, groups: list[str] | None = None) -> StoreRead:
    """Offsets and live members of the old high-level consumer's groups."""
    out = StoreRead()
    names = groups if groups is not None else (list(store.groups) or _children(client, store.root))
    for g in names:
        try:
            base = child_path(store.root, g)
        except UnsafeZnodeName as e:
            out.problems.append(f"{store.kind} store {store.root}: group skipped: {e}")
            continue
        out.members[g] = live_members(client, store.root, g)
        for topic in _children(client, child_path(base, "offsets")):
            for p in _children(client, child_path(base, "offsets", topic)):
                path = child_path(base, "offsets", topic, p)
                try:
                    data, stat = client.get(path)
                    out.offsets.append(StoreOffset("zookeeper", g, topic, int(p), int(data.decode("ascii").strip()),
                                                   path, stat.version,
                                                   owner=_owner(client, child_path(base, "owners", topic, p))))
                except NoNodeError:
                    continue  # deleted between the listing and the read
                except (ValueError, UnicodeDecodeError):
                    out.problems.append(f"zookeeper store: {path!r} is not a partition number holding a decimal "
                                        f"offset; skipped")
    return out


def parse_storm_state(data: bytes, path: str) -> dict:
    """The JSON storm-kafka's PartitionManager writes; ValueError naming the znode otherwise."""
    if len(data) > MAX_STORM_STATE_BYTES:
        raise ValueError(f"storm store: {path!r} holds {len(data)} bytes, more than spout state does")
    try:
        doc = json.loads(data.decode("utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        offset, partition, topic = doc["offset"], doc["partition"], doc["topic"]
        if isinstance(offset, bool) or not isinstance(offset, int) or isinstance(partition, bool) \
                or not isinstance(partition, int) or not isinstance(topic, str):
            raise ValueError("offset / partition must be integers and topic a string")
        topology = doc.get("topology") if isinstance(doc.get("topology"), dict) else {}
        return {"offset": offset, "partition": partition, "topic": topic,
                "topology": topology.get("name") if isinstance(topology.get("name"), str) else None,
                "topology_id": topology.get("id") if isinstance(topology.get("id"), str) else None}
    except (ValueError, KeyError, UnicodeDecodeError) as e:
        raise ValueError(f"storm store: {path!r} is not storm-kafka spout state ({e})") from None


def read_storm_store(client, store: OffsetStoreSettings, spouts: list[str] | None = None) -> StoreRead:
    """Offsets of storm-kafka spouts (<root>/<spout id>/partition_<N> JSON) and the liveness of
    the topologies that committed them (Storm's znodes below store.storm_root)."""
    out = StoreRead()
    names = spouts if spouts is not None else (list(store.spouts) or _children(client, store.root))
    for spout in names:
        try:
            base = child_path(store.root, spout)
        except UnsafeZnodeName as e:
            out.problems.append(f"storm store {store.root}: spout skipped: {e}")
            continue
        for child in _children(client, base):
            if not child.startswith(STORM_PARTITION_PREFIX):
                continue
            path = child_path(base, child)
            try:
                data, stat = client.get(path)
                state = parse_storm_state(data, path)
            except NoNodeError:
                continue
            except ValueError as e:
                out.problems.append(str(e))
                continue
            out.offsets.append(StoreOffset("storm", spout, state["topic"], state["partition"], state["offset"],
                                           path, stat.version, topology=state["topology"],
                                           topology_id=state["topology_id"]))
    for tid in sorted({o.topology_id or "" for o in out.offsets}):
        out.liveness[tid] = live = storm_state.topology_liveness(client, store.storm_root, tid or None)
        if live.state == storm_state.UNKNOWN:
            out.problems.append(f"storm store {store.root}: liveness of topology {tid or '(none)'!r} unknown: "
                                f"{live.reason}")
    return out


def read_store(client, store: OffsetStoreSettings) -> StoreRead:
    return read_storm_store(client, store) if store.kind == "storm" else read_zookeeper_store(client, store)


def snapshot_rows(cluster: str, read: StoreRead, log_offsets: dict, observed_at: dt.datetime) -> list[dict]:
    """offsets_snapshots rows of one store's read. zookeeper: Stable with live members (a
    partition is assigned when its owners znode names a consumer), Empty without; storm: its
    topology's liveness (Stable / assigned when it runs, Empty / unassigned when it does not,
    Unknown / null when Storm's state does not say)."""
    rows = []
    for o in read.offsets:
        start, end, _ = log_offsets.get((o.topic, o.partition), (None, None, None))
        if o.source == "storm":
            live = read.liveness.get(o.topology_id or "")
            assigned = None if live is None else live.assigned
            state = {True: "Stable", False: "Empty"}.get(assigned, "Unknown")
            client_id = o.topology
        else:
            members = read.members.get(o.group) or []
            if members:
                state, assigned, client_id = "Stable", o.owner is not None, o.owner
            else:
                state, assigned, client_id = "Empty", False, None
        rows.append({"cluster": cluster, "group": o.group, "topic": o.topic, "partition": o.partition,
                     "observed_at": observed_at, "committed_offset": o.offset, "log_start_offset": start,
                     "log_end_offset": end, "group_state": state, "assigned": assigned,
                     "member_client_id": client_id, "member_host": None, "source": o.source})
    return rows


def collect_stores(cluster: Cluster, kafka, clients: dict, observed_at: dt.datetime,
                   problems: list[str]) -> list[dict]:
    """offsets_snapshots rows of every store of the cluster; `clients` maps each store (its
    OffsetStoreSettings) to a started kazoo client, or to the text of the error that kept it from
    connecting. Log offsets come from the Kafka cluster."""
    reads = []
    for store in cluster.offset_stores:
        client = clients.get(store)
        if client is None or isinstance(client, str):
            problems.append(f"{store.kind} store {store.conn_id}{store.chroot}{store.root}: "
                            f"{client or 'no connection'}; skipped")
            continue
        read = read_store(client, store)
        problems.extend(read.problems)
        log.info("cluster %s: %s store %s%s%s: %d offsets", cluster.name, store.kind, store.conn_id, store.chroot,
                 store.root, len(read.offsets))
        reads.append(read)
    parts = sorted({(o.topic, o.partition) for r in reads for o in r.offsets})
    log_offsets = kafka.log_offsets(parts) if parts else {}
    for tp, (_, _, err) in log_offsets.items():
        if err:
            problems.append(f"partition {tp[0]}-{tp[1]}: log offsets not readable ({err}); log_start/log_end left null")
    rows = []
    for read in reads:
        rows.extend(snapshot_rows(cluster.name, read, log_offsets, observed_at))
    return rows


@contextmanager
def started_store_clients(cluster: Cluster, client_for) -> Iterator[dict]:
    """Started kazoo clients of the cluster's offset_stores, keyed by store; `client_for(store)`
    gives a not yet started ZooKeeperCluster. A store whose ZooKeeper does not answer maps to the
    error text instead (collect_stores reports it and skips that store: the Kafka side of the
    cluster is still collected)."""
    from fleetkit.core.errors import ClusterUnreachable

    opened = []
    clients: dict = {}
    try:
        for store in cluster.offset_stores:
            zk = client_for(store)
            try:
                zk.start()
            except ClusterUnreachable as e:
                log.warning("cluster %s: %s offset store not collected: %s", cluster.name, store.kind, e)
                clients[store] = str(e)
                continue
            opened.append(zk)
            clients[store] = zk.client
        yield clients
    finally:
        for zk in opened:
            zk.stop()


def add_store_rows(cluster: Cluster, kafka, clients: dict | None, rows: dict, observed_at: dt.datetime,
                   problems: list[str]) -> None:
    """Mark a collection's Kafka rows `source` kafka and append the stores' rows (the collect
    stage's hook; nothing happens for a cluster without offset_stores)."""
    snapshots = rows.setdefault("offsets_snapshots", [])
    for r in snapshots:
        r.setdefault("source", "kafka")
    if cluster.offset_stores and clients is not None:
        snapshots.extend(collect_stores(cluster, kafka, clients, observed_at, problems))

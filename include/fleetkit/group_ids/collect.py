"""Collecting one cluster's KoP client-to-group mappings (ZooKeeper) and live members (Kafka):
``read_mappings`` reads every child of the root concurrently with kazoo's async API,
``read_members`` the coordinators' member lists; ``collect`` reads both, ``collect_and_write``
appends them to the datasets group_id_mappings / group_members, all or nothing."""

from __future__ import annotations

import datetime as dt
import time
from dataclasses import dataclass

from kazoo.exceptions import NoAuthError, NoNodeError

from fleetkit.group_ids.rules import ALL_GROUPS, ReconcileError, join_path, split_name, unknown_marker


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
    host null: its members are unknown, so no mapping of it is judged stale. When listing failed on
    some broker, the groups it coordinates are missing from the list: one such row with group null
    (rules.ALL_GROUPS) makes every group of the cluster unknown."""
    problems: list[str] = []
    list_errors: list[str] = []
    groups = [g for g, _ in kafka.list_groups(errors=list_errors)]
    rows = []
    if list_errors:
        problems.append(f"listing the groups partly failed ({len(list_errors)} broker(s) did not answer, first: "
                        f"{list_errors[0]}): the groups they coordinate are unknown, so no mapping is judged "
                        "stale on this cluster")
        rows.append(unknown_marker(cluster, observed_at, ALL_GROUPS))
    for g, d in sorted(kafka.describe_groups(groups).items()):
        if d.error:
            problems.append(f"group {g!r} could not be described: {d.error}")
            rows.append(unknown_marker(cluster, observed_at, g))
            continue
        for m in d.members:
            rows.append({"cluster": cluster, "observed_at": observed_at, "group": g, "client_id": m.client_id,
                         "client_host": m.host, "member_id": m.member_id})
    return rows, problems


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


def no_mappings(cluster) -> str | None:
    """Why a fleet-file cluster has no KoP mappings to reconcile; None when it has a
    group_id_mappings section. A cluster without ZooKeeper (KRaft) cannot have one: KoP keeps its
    mappings in ZooKeeper."""
    if cluster.group_id_mappings is not None:
        return None
    if cluster.zookeeper is None:
        return ("no mappings section: the cluster has no ZooKeeper (KRaft), where KoP's client-to-group "
                "mappings live; nothing to reconcile")
    return "no mappings section (group_id_mappings) in the fleet file: nothing to reconcile"


def unconfigured(fleet) -> list[tuple[str, str]]:
    """(cluster, why) of every fleet-file cluster without KoP mappings to reconcile."""
    return [(c.name, why) for c in fleet.clusters if (why := no_mappings(c)) is not None]


def collect(cluster, kafka, zk_client, now: dt.datetime | None = None) -> MappingCollection:
    """Read one cluster's mappings (its fleet-file root, below the chroot) and live members."""
    if cluster.group_id_mappings is None:
        raise ReconcileError(f"cluster {cluster.name!r}: {no_mappings(cluster)}")
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

"""One destructive runbook at a time per cluster: an exclusive lock per cluster.

The lock is keyed by the cluster's identity, not its fleet-file name, so two fleet-file names for
the same cluster share one lock (``lock_identity``): the cluster id its brokers report in metadata
(Kafka 0.10.1 and later), else its ZooKeeper ensemble and chroot (hosts sorted, default port
added), else (no cluster id, no zookeeper section) its fleet-file name.

The lock lives in the process's shared-state store (fleetkit.core.state): a file in the lock folder
(FLEET_LOCK_DIR, one host's disk: the LocalExecutor), or a row of the deployment's PostgreSQL
(FLEET_STATE_CONN_ID: workers on several hosts and fleetctl share it). A lock names its holder (DAG, run,
the cluster's name, the identity) and is released only by that holder. A lock whose holder run is
no longer running is reported with how to clear it (``fleetctl lock clear CLUSTER``), never
taken over silently: the cluster may be half-changed.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import shlex
import socket
from pathlib import Path
from typing import Callable

from fleetkit.core import state
from fleetkit.core.errors import FleetError
from fleetkit.core.state import lock_file_name  # noqa: F401 (the lock files' names, kept where they were)

log = logging.getLogger(__name__)

#: states of an Airflow DAG run that still runs
RUNNING_STATES = frozenset({"queued", "running"})


class LockLost(FleetError):
    """The lock a run acts under is no longer held by it (cleared by an operator, taken by another):
    raised before the next change, so nothing more is changed."""


class ClusterLocked(FleetError):
    """The cluster is locked by another run: `holder` (the lock file's content) and `holder_running`
    (True, False: its run no longer runs and the lock needs an operator, None: unknown)."""

    def __init__(self, msg: str, holder: dict | None = None, holder_running: bool | None = None):
        super().__init__(msg)
        self.holder = holder or {}
        self.holder_running = holder_running


# -- identity ------------------------------------------------------------------------------------
def zookeeper_identity(hosts: str, chroot: str = "") -> str:
    """'zookeeper:<host:port,...><chroot>' with the hosts lower-cased, given the default port
    2181, de-duplicated and sorted; a chroot given as a suffix of `hosts` counts too."""
    hosts = (hosts or "").strip()
    host_part, slash, host_chroot = hosts.partition("/")
    full_chroot = "/" + "/".join(x for x in f"{host_chroot if slash else ''}/{chroot or ''}".split("/") if x)
    norm = set()
    for h in host_part.split(","):
        h = h.strip().lower()
        if not h:
            continue
        if h.startswith("["):  # [IPv6] or [IPv6]:port
            h = h if "]:" in h else f"{h}:2181"
        elif h.count(":") == 0:
            h = f"{h}:2181"
        norm.add(h)
    if not norm:
        raise FleetError(f"ZooKeeper connect string {hosts!r} names no host")
    return f"zookeeper:{','.join(sorted(norm))}{full_chroot if full_chroot != '/' else ''}"


def lock_identity(cluster, kafka, zk=None) -> str:
    """The identity a cluster is locked by: 'kafka-cluster-id:<id>' when the brokers report one
    (0.10.1+, `kafka.cluster_id()`), else the ZooKeeper ensemble and chroot of `zk` (a
    ZooKeeperCluster: `hosts`, `chroot`), else 'fleet-name:<name>' (logged: another fleet-file
    name for the same cluster would not share the lock)."""
    cluster_id = kafka.cluster_id() if kafka is not None and hasattr(kafka, "cluster_id") else None
    if cluster_id:
        return f"kafka-cluster-id:{cluster_id}"
    if zk is not None:
        return zookeeper_identity(zk.hosts, getattr(zk, "chroot", "") or "")
    log.warning("cluster %r reports no cluster id (Kafka before 0.10.1) and has no zookeeper section: locked by "
                "its fleet-file name only", cluster.name)
    return f"fleet-name:{cluster.name}"


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z")


def _running(holder_running, dag_id: str, run_id: str) -> tuple[bool | None, str | None]:
    """(running?, state) from the callback: it returns a bool, None (unknown) or (bool, state)."""
    try:
        ans = holder_running(dag_id, run_id)
    except Exception as e:  # noqa: BLE001 - cannot tell: the lock stands, the message says so
        log.warning("could not tell whether run %r of DAG %r still runs: %s", run_id, dag_id, e)
        return None, None
    if isinstance(ans, tuple):
        return ans[0], ans[1]
    return ans, None


class ClusterLock:
    """The lock of one cluster identity (`cluster`: the fleet-file name, for messages), kept by the
    process's shared-state store (fleetkit.core.state: a file in `lock_dir`, or a database row)."""

    def __init__(self, lock_dir: str | os.PathLike, identity: str, cluster: str | None = None):
        self.store = state.current()
        self.lock_dir = Path(lock_dir)
        self.identity = identity
        self.cluster = cluster or identity
        #: where the store keeps it: the lock file (files) or the identity (a database row)
        self.path = self.store.lock_ref(lock_dir, identity)

    @property
    def where(self) -> str:
        return self.store.lock_where(self.path)

    @classmethod
    def for_cluster(cls, lock_dir: str | os.PathLike, cluster, kafka, zk=None) -> "ClusterLock":
        """The lock of a fleet-file cluster, keyed by its identity (lock_identity)."""
        return cls(lock_dir, lock_identity(cluster, kafka, zk), cluster.name)

    def holder(self) -> dict | None:
        return self.store.lock_read(self.path)

    def acquire(self, owner: str, dag_id: str = "", run_id: str = "",
                holder_running: Callable[[str, str], bool | None | tuple] | None = None, kind: str = "airflow") -> None:
        """Take the lock for `owner` (re-entrant for the same owner: a retried task), atomically
        (one holder whoever races). Held by another:
        ClusterLocked naming the holder; `holder_running(dag_id, run_id)` tells whether the holder
        run still runs (True, False, None unknown, or (bool, state)): one that does not is reported
        with how to clear its lock, never taken over. `kind`: "airflow" (a task of the run holds it)
        or "cli" (a fleetctl process acting on a finished run: its host and pid say whether it runs)."""
        doc = {"owner": owner, "dag_id": dag_id, "run_id": run_id, "cluster": self.cluster,
               "identity": self.identity, "since": _now(), "pid": os.getpid(), "host": socket.gethostname(),
               "kind": kind}
        if self.store.lock_create(self.path, doc):
            return
        h = self.holder() or {}
        if h.get("owner") == owner:
            return  # re-entrant for the same run (a retried task)
        running, state_ = None, None
        if holder_running is not None and h.get("dag_id") and h.get("run_id"):
            running, state_ = _running(holder_running, h["dag_id"], h["run_id"])
        raise ClusterLocked(self._held_message(h, holder_running is not None, running, state_), h, running)

    def _held_message(self, h: dict, asked: bool, running: bool | None, state: str | None) -> str:
        held_by = (f"DAG {h.get('dag_id')!r} run {h.get('run_id')!r} since {h.get('since')} (cluster "
                   f"{h.get('cluster', self.cluster)!r}, {self.identity}; {self.where})")
        clear = f"fleetctl lock clear {shlex.quote(str(h.get('cluster') or self.cluster))} --force"
        if running is False:
            return (f"cluster {self.cluster!r} is locked by a destructive runbook whose holder run "
                    f"{h.get('run_id')!r} of DAG {h.get('dag_id')!r} is no longer running (state {state or 'unknown'}): "
                    f"it may have left the cluster half-changed (see its audit records and journal). After checking "
                    f"the cluster, clear it with {clear}. Held by {held_by}.")
        tail = "" if running else " (whether that run still runs could not be told)" if asked else ""
        return (f"cluster {self.cluster!r} is locked by another destructive runbook: {held_by}{tail}. Wait for it "
                f"to finish; if that run is gone for good, check the cluster and clear the lock with {clear}.")

    def check_held(self, owner: str) -> None:
        """LockLost unless `owner` still holds the lock: what a run checks before each change."""
        h = self.holder()
        if h is None or h.get("owner") != owner:
            by = f"held by {h.get('owner')!r} since {h.get('since')}" if h else "held by nobody"
            raise LockLost(f"the lock of cluster {self.cluster!r} ({self.identity}) is no longer held by {owner!r} "
                           f"(now {by}; cleared by an operator?): stopped before the next change")

    def release(self, owner: str) -> bool:
        """Release the lock if `owner` holds it (only its holder releases it)."""
        return self.store.lock_release(self.path, owner)

    def clear(self) -> dict | None:
        """Remove the lock whoever holds it (an operator's decision, after checking the cluster):
        kept as a record (files: moved to <lock dir>/cleared/; a database: the cleared_locks table,
        `cleared_where`). Returns its holder."""
        h, self.cleared_where = self.store.lock_clear(self.path)
        return h


def held_locks(lock_dir: str | os.PathLike) -> list[tuple[Path | str, dict]]:
    """Every held lock (its file in `lock_dir`, or its identity in the database) with its holder,
    oldest first."""
    out = state.current().locks_held(lock_dir)
    return sorted(out, key=lambda x: str(x[1].get("since") or ""))


def locks_where(lock_dir: str | os.PathLike) -> str:
    """Where the held locks are looked up (for messages)."""
    return state.current().locks_where(lock_dir)


def find_locks(lock_dir: str | os.PathLike, cluster_or_identity: str) -> list[ClusterLock]:
    """The held locks whose holder recorded this cluster name or identity."""
    out = []
    for p, doc in held_locks(lock_dir):
        if cluster_or_identity in (doc.get("cluster"), doc.get("identity")):
            lock = ClusterLock(lock_dir, doc.get("identity") or cluster_or_identity, doc.get("cluster"))
            lock.path = p
            out.append(lock)
    return out


def cli_holder_alive(holder: dict) -> bool | None:
    """For a lock a fleetctl process holds (kind "cli"): True while that process runs, False when it
    is gone, None when it runs on another host (this one cannot tell) or the lock is not the CLI's."""
    if holder.get("kind") != "cli":
        return None
    if holder.get("host") != socket.gethostname():
        return None
    try:
        pid = int(holder.get("pid"))
    except (TypeError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # it exists, owned by another user
    return True

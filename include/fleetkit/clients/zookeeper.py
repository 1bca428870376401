"""Reads the ZooKeeper side of a ZooKeeper-mode Kafka cluster (0.9 to 3.x) with kazoo.

Layout (Kafka's ZkData), below an optional chroot:
  /brokers/ids/<id>                               broker registration
  /brokers/topics/<topic>/partitions/<p>/state    leader, leader_epoch, controller_epoch, isr
  /controller                                     current controller
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import Iterable

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from fleetkit.core.errors import ClusterUnreachable

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionState:
    topic: str
    partition: int
    leader: int
    leader_epoch: int
    controller_epoch: int
    isr: tuple[int, ...]
    version: int  # znode version, for conditional writes


def join_chroot(hosts: str, chroot: str) -> str:
    """kazoo takes the chroot as a suffix of the host list: 'h1:2181,h2:2181/kafka'."""
    return f"{hosts}{chroot}" if chroot else hosts


def parse_state(topic: str, partition: int, data: bytes, version: int) -> PartitionState:
    try:
        doc = json.loads(data.decode("utf-8"))
        return PartitionState(
            topic=topic, partition=partition,
            leader=int(doc["leader"]), leader_epoch=int(doc["leader_epoch"]),
            controller_epoch=int(doc["controller_epoch"]),
            isr=tuple(int(b) for b in doc.get("isr", [])), version=version,
        )
    except (ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise ValueError(f"partition state of {topic}-{partition} is not valid JSON state: {e}") from None


class ZooKeeperCluster:
    """A kazoo client for one cluster's ZooKeeper, chroot applied."""

    def __init__(self, name: str, hosts: str, chroot: str = "", auth_data: list | None = None,
                 timeout: float = 10.0, client: KazooClient | None = None, persistent: bool = False):
        """persistent: keep reconnecting forever (a long-lived watcher) instead of giving up after
        three connection attempts (a collection, which must fail fast and say so)."""
        self.name = name
        self.hosts = hosts
        self.chroot = chroot
        self.timeout = timeout
        self.auth_data = auth_data
        self._own_client = client is None
        retry = ({"max_tries": -1, "delay": 0.2, "max_delay": 5} if persistent
                 else {"max_tries": 3, "delay": 0.2})
        self.client = client or KazooClient(hosts=join_chroot(hosts, chroot), timeout=timeout,
                                            auth_data=auth_data or None, connection_retry=retry,
                                            command_retry={"max_tries": 3, "delay": 0.2})

    def persistent(self) -> "ZooKeeperCluster":
        """A new, not yet started client to the same ZooKeeper that never stops reconnecting."""
        return ZooKeeperCluster(self.name, self.hosts, self.chroot, self.auth_data, self.timeout, persistent=True)

    def __enter__(self) -> "ZooKeeperCluster":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        """Connect, or raise ClusterUnreachable naming the cluster: after `timeout` seconds, or as soon
        as kazoo's connection retries give up (a refused connection fails in about a second; kazoo's
        own start() would still wait out the whole timeout)."""
        if self.client.connected:
            return
        try:
            event = self.client.start_async()
            routine = getattr(getattr(self.client, "_connection", None), "_connection_routine", None)
            deadline = time.monotonic() + self.timeout
            while not event.wait(0.1):
                if time.monotonic() >= deadline:
                    raise KazooTimeoutError("Connection time-out")
                if routine is not None and hasattr(routine, "is_alive") and not routine.is_alive():
                    raise KazooTimeoutError("no server answered within the connection retry policy "
                                            "(connection refused?)")
            if not self.client.connected:
                raise KazooTimeoutError("Connection time-out")
        except (KazooTimeoutError, KazooException) as e:
            self.stop()
            raise ClusterUnreachable(
                f"ZooKeeper of cluster {self.name!r} ({self.hosts}{self.chroot}) did not answer: {e}") from None

    def stop(self) -> None:
        if self._own_client:
            try:
                self.client.stop()
                self.client.close()
            except Exception:  # noqa: BLE001 - closing a dead session must not hide the real error
                pass

    def broker_ids(self) -> list[int]:
        try:
            return sorted(int(c) for c in self.client.get_children("/brokers/ids"))
        except NoNodeError:
            return []

    def controller_id(self) -> int | None:
        try:
            data, _ = self.client.get("/controller")
            return int(json.loads(data)["brokerid"])
        except NoNodeError:
            return None

    def topic_partitions(self, topic: str) -> list[int]:
        try:
            return sorted(int(p) for p in self.client.get_children(f"/brokers/topics/{topic}/partitions"))
        except NoNodeError:
            return []

    def partition_states(self, topics: Iterable[str]) -> tuple[list[PartitionState], list[str]]:
        """State znodes of every partition of `topics`, read concurrently.

        Returns (states, problems); a topic or partition without a state znode is a problem, not
        an exception (a topic being created or deleted, say).
        """
        problems: list[str] = []
        wanted: list[tuple[str, int]] = []
        topics = sorted(set(topics))
        child_futs = {t: self.client.get_children_async(f"/brokers/topics/{t}/partitions") for t in topics}
        for t, fut in child_futs.items():
            try:
                wanted.extend((t, int(p)) for p in fut.get(timeout=self.timeout))
            except NoNodeError:
                problems.append(f"topic {t!r} has no partitions in ZooKeeper")
        futs = {(t, p): self.client.get_async(f"/brokers/topics/{t}/partitions/{p}/state") for t, p in wanted}
        states: list[PartitionState] = []
        for (t, p), fut in futs.items():
            try:
                data, stat = fut.get(timeout=self.timeout)
            except NoNodeError:
                problems.append(f"partition {t}-{p} has no state znode (no leader elected yet)")
                continue
            try:
                states.append(parse_state(t, p, data, stat.version))
            except ValueError as e:
                problems.append(str(e))
        return states, problems


def connection_settings(conn_id: str, host: str | None, port: int | None, login: str | None,
                        password: str | None, extra: dict | None, chroot: str | None = None) -> dict:
    """A ZooKeeper connection's fields -> the ZooKeeperCluster arguments: host and port, or extra
    {"hosts": "zk1:2181,zk2:2181"}; login/password become digest auth; extra "chroot" is the default
    chroot (`chroot`, the fleet file's, wins when given); extra "timeout" in seconds."""
    extra = extra or {}
    hosts = extra.get("hosts")
    if not hosts:
        if not host:
            raise ValueError(f"ZooKeeper connection {conn_id!r} has neither host nor extra.hosts")
        hosts = f"{host}:{port or 2181}"
    chroot = chroot if chroot is not None else extra.get("chroot", "")
    auth = [("digest", f"{login}:{password or ''}")] if login else None
    return {"hosts": hosts, "chroot": chroot or "", "auth_data": auth, "timeout": float(extra.get("timeout", 10))}

"""A STAND-IN FOR KoP (Kafka-on-Pulsar), for tests only.

KoP itself cannot run here (it is a Pulsar broker plugin). This code writes client-to-group
mappings the way KoP does: one znode per client, <root>/<ip>-<clientId>, data =
the group id in UTF-8, written when the client sends FindCoordinator (unconditionally, failures only
logged) and deleted when its connection closes. Tests use it to seed ZooKeeper with the states a
real KoP fleet ends up in (a mapping lost on a broker restart, a delete racing a newer write, a
stale znode of a client long gone), and as a concurrent writer racing the reconciliation.
"""

from __future__ import annotations

import random
import threading
import time

from kazoo.exceptions import NodeExistsError, NoNodeError

from fleetkit.group_ids.rules import join_path, znode_name


def kop_write(zk, root: str, client_host: str, client_id: str, group: str) -> str:
    """What KoP does on FindCoordinator: create the mapping, or overwrite it (no version check)."""
    path = join_path(root, znode_name(client_host, client_id))
    while True:
        try:
            zk.create(path, group.encode("utf-8"), makepath=True)
            return path
        except NodeExistsError:
            try:
                zk.set(path, group.encode("utf-8"))
                return path
            except NoNodeError:
                continue


def kop_delete(zk, root: str, client_host: str, client_id: str) -> None:
    """What KoP does when the client's connection closes."""
    try:
        zk.delete(join_path(root, znode_name(client_host, client_id)))
    except NoNodeError:
        pass


class ConcurrentKoP(threading.Thread):
    """Creates, rewrites and deletes mappings of `paths` at random while the reconciliation runs,
    unconditionally, like KoP. `last[path]` is the state its own last write left (data or None)."""

    def __init__(self, zk, paths: list[str], seed: int = 7, pause: float = 0.0):
        super().__init__(daemon=True, name="concurrent-kop")
        self.zk, self.paths = zk, list(paths)
        self.rng = random.Random(seed)
        self.pause = pause
        self.stop_event = threading.Event()
        self.last: dict[str, str | None] = {}
        self.writes = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stop_event.is_set():
                path = self.rng.choice(self.paths)
                kind = self.rng.choice(("create", "rewrite", "delete"))
                if kind == "delete":
                    try:
                        self.zk.delete(path)
                    except NoNodeError:
                        pass
                    self.last[path] = None
                else:
                    data = f"kop-{kind}-{self.writes}"
                    while True:  # create or overwrite, whatever the reconciliation does meanwhile
                        try:
                            self.zk.create(path, data.encode(), makepath=True)
                            break
                        except NodeExistsError:
                            try:
                                self.zk.set(path, data.encode())
                                break
                            except NoNodeError:
                                continue
                    self.last[path] = data
                self.writes += 1
                if self.pause:
                    time.sleep(self.pause)
        except BaseException as e:  # noqa: BLE001 - reported by the test
            self.error = e

    def stop(self) -> None:
        self.stop_event.set()
        self.join(10)

"""A STAND-IN FOR KoP (Kafka-on-Pulsar), for tests only.

KoP itself does not run here (it is a Pulsar broker plugin; docs/group-ids.md, "Real KoP", says what
was tried). This code writes client-to-group mappings the way KoP's source does (streamnative/kop,
KafkaRequestHandler.findSingleCoordinator / storeGroupId / close, GroupIdUtils.groupIdPathFormat,
through Pulsar's ZKMetadataStore):

* one znode per client, ``<root>/<ip>-<clientId>`` (``rules.znode_name``: KoP keeps what stands
  before the first ':' of the connection's address, so an IPv4 whole and an IPv6 as '[<first group>'),
  data = the group id in UTF-8, a persistent znode with the open ACL;
* written when the client sends FindCoordinator for a group (only with
  kopEnableGroupLevelConsumerMetrics=true; default false), with no version: Pulsar's put sets the
  data with version -1 and, when the znode is missing, creates it; when that create finds the znode
  already there (someone created it in between) the write fails, KoP only logs it and answers the
  FindCoordinator anyway (``kop_write`` returns None then);
* deleted with no version when the connection that sent the FindCoordinator closes.

Not reproduced: Pulsar creates a missing root as a CONTAINER znode (ZooKeeper removes it once its
last child is gone); the stand-in makes a persistent one (kazoo cannot create containers).

Tests use it to seed ZooKeeper with the states a real KoP fleet ends up in (a mapping lost on a
broker restart, a delete racing a newer write, a stale znode of a client long gone), and as a
concurrent writer racing the reconciliation.
"""

from __future__ import annotations

import random
import threading
import time

from kazoo.exceptions import NodeExistsError, NoNodeError

from fleetkit.group_ids.rules import join_path, znode_name


def kop_write(zk, root: str, client_host: str, client_id: str, group: str) -> str | None:
    """What KoP does on FindCoordinator (Pulsar's put with no expected version): set the data with
    version -1; when the znode is missing, create it (with the missing parents). None when that
    create lost to a concurrent one: KoP does not retry, the znode keeps the other writer's data."""
    path = join_path(root, znode_name(client_host, client_id))
    data = group.encode("utf-8")
    try:
        zk.set(path, data, -1)
        return path
    except NoNodeError:
        pass
    try:
        zk.create(path, data, makepath=True)
    except NodeExistsError:
        return None
    return path


def kop_delete(zk, root: str, client_host: str, client_id: str) -> None:
    """What KoP does when the connection that sent the FindCoordinator closes: delete with no
    version (-1); a missing znode is only logged."""
    try:
        zk.delete(join_path(root, znode_name(client_host, client_id)))
    except NoNodeError:
        pass


class ConcurrentKoP(threading.Thread):
    """Creates, rewrites and deletes mappings of `paths` at random while the reconciliation runs,
    unconditionally, like KoP. `last[path]` is the state its own last write left (data or None).
    Unlike KoP (``kop_write``), a create that finds the znode already there is retried as a set, so
    every write of this racer lands: the harder case for 'the reconciliation never overwrites KoP'."""

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

"""One handle per generation of the lab fleet for tests that run on each: the cluster from the
fleet file, its bootstrap servers and version, and the traffic helpers speaking that version."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from fleetlab import traffic

from tests.helpers import committed_offsets

#: every generation of the lab fleet
GENERATIONS = ["lab"]
#: those with a ZooKeeper (faults of the ZooKeeper session exist only there)
ZOOKEEPER_GENERATIONS = ["lab"]


@dataclass
class Target:
    handle: Any  # the conftest's lab handle of this cluster

    @property
    def cluster(self):
        return self.handle.cluster

    @property
    def bootstrap(self) -> str:
        return self.handle.bootstrap

    @property
    def version(self) -> str:
        return self.cluster.kafka_version

    @property
    def memberless_state(self) -> str:
        """What the broker calls a group without members: 0.9 forgets it (Dead), 0.10.1+ keeps it (Empty)."""
        return "Dead" if self.cluster.version_tuple < (0, 10, 1) else "Empty"

    def wait_topic(self, topic: str) -> None:
        traffic.wait_topic(self.bootstrap, topic)

    def produce(self, topic: str, per_partition: dict[int, int]) -> None:
        traffic.produce(self.bootstrap, topic, per_partition)

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        traffic.commit(self.bootstrap, group, offsets)

    def consumer_thread(self, group: str, topics: list[str], client_id: str):
        return traffic.ConsumerThread(self.bootstrap, group, topics, client_id=client_id)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        return committed_offsets(self.bootstrap, group, topic, kafka_version=self.version)


def target_fixture(names: list[str]):
    """A fixture parametrized over `names`, giving a Target of each."""

    @pytest.fixture(params=names)
    def fixture(request):
        assert request.param == "lab"
        return Target(request.getfixturevalue("lab"))

    return fixture

"""One handle per generation of the lab fleet for tests that run on each: the cluster from the
fleet file, its bootstrap servers and version, and the traffic helpers speaking that version (on
the secured 3.9 and 4.3 clusters they log in as the lab's admin user: the lab's producers and
committers; the toolkit itself goes through its connection, the read-only `fleet` user)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from fleetlab import traffic

from tests.helpers import committed_offsets

#: every generation of the test fleet: Kafka generation -> cluster (fleetlab.harness.GENERATIONS)
GENERATIONS = {"0.9": "labtest", "3.9": "lab39test", "4.3": "lab43test"}
#: those with a ZooKeeper (faults of the ZooKeeper session exist only there; 4.3 runs KRaft)
ZOOKEEPER_GENERATIONS = {"0.9": "labtest", "3.9": "lab39test"}


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
    def admin_login(self) -> dict:
        """librdkafka settings of the lab's admin user ({} on the open 0.9 cluster)."""
        return self.handle.spec.security_config("admin")

    @property
    def memberless_state(self) -> str:
        """What the broker calls a group without members: 0.9 forgets it (Dead), 0.10.1+ keeps it (Empty)."""
        return "Dead" if self.cluster.version_tuple < (0, 10, 1) else "Empty"

    def producer(self, **extra):
        """A producer of the lab's (admin where secured)."""
        return traffic.producer(self.bootstrap, self.version, self.admin_login, **extra)

    def admin_client(self):
        """An AdminClient of the lab's (admin where secured), for checks of what the toolkit reports."""
        from confluent_kafka.admin import AdminClient

        return AdminClient(self.handle.spec.client_config())

    @property
    def wire_security(self):
        """The toolkit's wire-protocol login (the read-only fleet user where secured; None: open)."""
        from tests.helpers import fleet_wire_security

        return fleet_wire_security(self.handle.spec)

    def wait_topic(self, topic: str) -> None:
        """Create a 3-partition topic and wait for its leaders."""
        self.handle.lab.create_topic(topic, 3)
        traffic.wait_topic(self.bootstrap, topic, kafka_version=self.version, security=self.admin_login)

    def produce(self, topic: str, per_partition: dict[int, int]) -> None:
        traffic.produce(self.bootstrap, topic, per_partition, kafka_version=self.version, security=self.admin_login)

    def commit(self, group: str, offsets: dict[tuple[str, int], int]) -> None:
        traffic.commit(self.bootstrap, group, offsets, kafka_version=self.version, security=self.admin_login)

    def consumer_thread(self, group: str, topics: list[str], client_id: str):
        return traffic.ConsumerThread(self.bootstrap, group, topics, client_id=client_id, kafka_version=self.version,
                                      security=self.admin_login)

    def committed(self, group: str, topic: str) -> dict[int, int]:
        return committed_offsets(self.bootstrap, group, topic, kafka_version=self.version, security=self.admin_login)


def target_fixture(generations: dict[str, str]):
    """A fixture parametrized over `generations` (Kafka generation -> test-fleet cluster), giving a
    Target of each (started through the conftest's lab_fleet)."""

    @pytest.fixture(params=list(generations), ids=[f"kafka-{g}" for g in generations])
    def fixture(request, lab_fleet):
        return Target(lab_fleet(generations[request.param]))

    return fixture

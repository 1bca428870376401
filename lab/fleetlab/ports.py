"""The port plan: every port a lab process listens on, for the demo and for the tests.

The demo lives in 2xxxx, the tests in 1xxxx (shifted by FLEET_TEST_PORT_OFFSET, so two checkouts
can run their suites side by side). Everything binds 127.0.0.1. Nothing here uses a default port
of its product (2181, 9092, 5432, 6379, 7077, 8080, 8081, 8793, 9090, 9093), so a real service on
the machine never collides with the lab.

    what                                demo            tests (+ offset)
    Airflow api-server                  28080           18080
    api-servers of installed wheels     -               18090, 18091 (tests/install)
    PostgreSQL (Airflow metadata)       25432           15432
    Redis (Celery broker)               26379           16379
    Celery workers' log servers         28793, 28794    18793, 18794
    Spark master / master UI            27077 / 28180   17077 / 18180
    Spark workers / worker UIs          27078+i / 28181+i  17078+i / 18181+i
    Prometheus / Alertmanager           24090 / 24093   14090 / 14093 (Alertmanager unclustered)
    Burrow / its own ZooKeeper          -               14095 / 14096 (tests/integration/test_burrow_compat)
    cluster `lab` (Kafka 0.9.0.1)       ZK 22181, brokers 29092-29094    ZK 12181, brokers 19092-
    cluster `lab39` (Kafka 3.9.2, ZK)   ZK 22281, brokers 29192-29194    ZK 12281, brokers 19192-
    cluster `lab43` (Kafka 4.3.1 KRaft) brokers 29292-29294,             brokers 19292-
                                        controllers 29342-29344          controllers 19342-
    single-purpose labs (slot 3, 4..)   ZK 2x181+100*slot, brokers 2x092+100*slot (tests: 1x...);
                                        slot 3: secerrlab, ssl09lab; slot 6: trimlab, trimgen (one at a time)
    secured labs (lab, lab39, lab43, ...)  INTERNAL (inter-broker, PLAINTEXT) listeners at brokers + 25:
                                        lab 29117-29119, lab39 29217-29219, lab43 29317-29319
                                        (tests: 1x117-, 1x217-, 1x317-)

Every port is below 32768, outside Linux's default ephemeral range (32768-60999, see
/proc/sys/net/ipv4/ip_local_port_range): a port in that range can be handed by the kernel to any
client socket as its local port, and a broker restarted at that moment fails to bind it.
FLEET_TEST_PORT_OFFSET values that keep suites apart and off the demo's ports: 0, 1000, 2000, 3000.
ZooKeeper 3.8's admin server is switched off (admin.enableServer=false), so it takes no port.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: the clusters of the lab fleet, in the order they start: name -> (Kafka version, mode, slot)
CLUSTERS: dict[str, tuple[str, str, int]] = {
    "lab": ("0.9.0.1", "zookeeper", 0),
    "lab39": ("3.9.2", "zookeeper", 1),
    "lab43": ("4.3.1", "kraft", 2),
}


#: labs a single test module or benchmark starts for itself (0.9, ZooKeeper mode unless said): name -> slot
SINGLE_PURPOSE: dict[str, int] = {"incident": 4, "bench": 5, "trimlab": 6, "bindlab": 8,
                                  # a ZooKeeper alone, its clients over TLS only (test_zookeeper_tls): its ZooKeeper
                                  # port is the bench lab's (benchmarks never run inside the test suite)
                                  "zktls": 5,
                                  # the secured KRaft lab (4.3.1, SASL_SSL; INTERNAL listeners at brokers + 25)
                                  "securelab": 9,
                                  # a second secured KRaft lab: wrong logins and missing ACLs (test_secured_errors)
                                  "secerrlab": 3,
                                  # a 0.9 lab with mutual TLS and ACLs (test_ssl09): it shares slot 3 with
                                  # secerrlab (module-scoped labs of different test modules, stopped before the
                                  # next module starts); its PLAINTEXT loopback listeners at brokers + 25
                                  "ssl09lab": 3,
                                  # __consumer_offsets trims on 3.9 (one broker) and 4.3 (three KRaft nodes),
                                  # secured, one after the other (tests/ui/test_trim_per_generation): it shares slot 6
                                  # with trimlab (module-scoped labs of different modules)
                                  "trimgen": 6}
#: single-purpose labs that share a slot (never running at the same time): name -> the other lab
SHARED_SLOTS: dict[str, str] = {"ssl09lab": "secerrlab", "trimgen": "trimlab", "zktls": "bench"}


#: the tests' plan before FLEET_TEST_PORT_OFFSET
TEST_BASE = 10000


def ephemeral_range() -> tuple[int, int]:
    """The ports the kernel hands to client sockets (Linux's setting; its default elsewhere)."""
    try:
        low, high = open("/proc/sys/net/ipv4/ip_local_port_range").read().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def test_offset() -> int:
    return int(os.environ.get("FLEET_TEST_PORT_OFFSET", "0"))


@dataclass(frozen=True)
class PortPlan:
    base: int  # 20000 for the demo, TEST_BASE + offset for the tests

    @property
    def airflow_api(self) -> int:
        return self.base + 8080

    @property
    def postgres(self) -> int:
        return self.base + 5432

    def installed_api(self, i: int) -> int:
        """The api-server of an Airflow the toolkit's wheel is installed into (tests/install), one per
        supported Airflow version."""
        return self.base + 8090 + i

    @property
    def redis(self) -> int:
        return self.base + 6379

    def celery_log_server(self, worker: int) -> int:
        return self.base + 8793 + worker

    @property
    def spark_master(self) -> int:
        return self.base + 7077

    @property
    def spark_master_ui(self) -> int:
        return self.base + 8180

    def spark_worker(self, worker: int) -> int:
        return self.base + 7078 + worker

    def spark_worker_ui(self, worker: int) -> int:
        return self.base + 8181 + worker

    @property
    def object_store(self) -> int:
        """The lab's S3-compatible object store (fleetlab.objectstore)."""
        return self.base + 4190

    @property
    def prometheus(self) -> int:
        return self.base + 4090

    @property
    def alertmanager(self) -> int:
        return self.base + 4093

    @property
    def burrow(self) -> int:
        """Burrow's HTTP server (Debian's Burrow 1.2.1, the Burrow API comparison test)."""
        return self.base + 4095

    @property
    def burrow_zookeeper(self) -> int:
        """The ZooKeeper Burrow keeps its own state in (the lab's 3.9 ZooKeeper requires a SASL login)."""
        return self.base + 4096

    def zookeeper(self, slot: int) -> int:
        return self.base + 2181 + 100 * slot

    def broker_base(self, slot: int) -> int:
        return self.base + 9092 + 100 * slot

    def controller_base(self, slot: int) -> int:
        return self.broker_base(slot) + 50

    def cluster(self, name: str) -> dict:
        """zk_port / broker_base_port / controller_base_port of a lab-fleet cluster."""
        slot = CLUSTERS[name][2] if name in CLUSTERS else SINGLE_PURPOSE[name]
        return {"zk_port": self.zookeeper(slot), "broker_base_port": self.broker_base(slot),
                "controller_base_port": self.controller_base(slot)}


DEMO = PortPlan(20000)


def tests() -> PortPlan:
    return PortPlan(TEST_BASE + test_offset())

"""The hosts profile: the lab's Airflow, Spark and a secured Kafka cluster spread over lab hosts
(fleetlab.hosts network namespaces on the lab's own bridge), the way a team that outgrew one
machine runs them. Which host runs what:

    airflow            api-server, scheduler, dag-processor, triggerer, PostgreSQL, Redis
    worker0, worker1   a Celery worker each (and its log server); spark-submit runs there, so the
                       Spark driver (client mode) listens on the worker's own address
    sparkm             the Spark standalone master
    sparkw0, sparkw1   a Spark worker each (the executors)
    store              the object store (s3proxy): the data root is s3://fleet/data on it
    kafka0..kafka2     one node each of the secured KRaft cluster `hosts43` (Kafka 4.3.1, SASL_SSL
                       for clients, mutual TLS between the nodes) and an sshd: the fleet file says
                       `access: ssh`, so the trim's file work and broker_control run over SSH

Every process binds its host's address; nothing of it listens on this machine's loopback. The
machine itself (fleetlab, fleetctl, the tests, a browser) reaches the hosts through the bridge.
The data root is on the object store host (FLEET_DATA_ROOT=s3://fleet/data, its keys in the aws
connection FLEET_DATA_ROOT_CONN_ID names); the locks, journals and audit heads in the PostgreSQL of
the Airflow host (FLEET_STATE_CONN_ID). The hosts share this machine's file system for what a
deployment keeps on each host or ships with its code: the installed toolkit, the Airflow home and
its task logs, the broker hosts' log dirs (each reached over its own SSH).

The network belongs to the Airflow home (<AIRFLOW_HOME>/hosts): `fleetlab airflow up --profile
hosts` creates it, `fleetlab airflow down` (and `make stop`) removes it with every process in it.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fleetlab.hosts import Hosts
from fleetlab.paths import airflow_home

AIRFLOW = "airflow"
WORKERS = ("worker0", "worker1")
SPARK_MASTER = "sparkm"
SPARK_WORKERS = ("sparkw0", "sparkw1")
STORE = "store"
BROKERS = ("kafka0", "kafka1", "kafka2")
HOST_NAMES = (AIRFLOW, *WORKERS, SPARK_MASTER, *SPARK_WORKERS, STORE, *BROKERS)
#: the data root on the store host, and the connection of its keys
BUCKET = "fleet"
DATA_ROOT = f"s3://{BUCKET}/data"
STORE_CONN_ID = "fleet_store"
KAFKA_CLUSTER = "hosts43"
KAFKA_VERSION = "4.3.1"


def network(home: Path | None = None) -> Hosts:
    """The lab hosts of the Airflow home `home` (default: the one in use)."""
    return Hosts(folder(home))


def placed(home: Path | None = None) -> bool:
    """True when the Airflow home's services live on lab hosts (its network is up)."""
    return bool(network(home).state().get("hosts"))


def place(host: str, home: Path | None = None) -> tuple[str, str | None]:
    """(address, network namespace) of lab host `host` when the profile is placed, else this
    machine's loopback and no namespace."""
    net = network(home)
    if not net.state().get("hosts"):
        return "127.0.0.1", None
    return net.address(host), net.netns(host)


def up(home: Path | None = None) -> dict[str, str]:
    """Create the network (every host of HOST_NAMES) unless it is up. Returns host -> address."""
    net = network(home)
    state = net.state().get("hosts") or {}
    if set(state) >= set(HOST_NAMES):
        return {n: h["address"] for n, h in state.items()}
    return net.up(list(HOST_NAMES))


def down(home: Path | None = None) -> list[str]:
    return network(home).down()


def folder(home: Path | None = None) -> Path:
    return (home or airflow_home()) / "hosts"


def fleet_file(home: Path | None = None) -> Path:
    """The fleet file the hosts profile's Airflow reads (FLEET_FILE)."""
    return folder(home) / "fleet.yaml"


def kafka_up(plan, home: Path | None = None, timeout: float = 180):
    """Start the secured cluster on the broker hosts (unless it runs) and write the fleet file."""
    from fleetlab.lab import Lab

    spec = kafka_spec(folder(home), plan, home)
    Lab(spec).up(timeout=timeout)
    write_fleet_file(spec, fleet_file(home))
    return spec


def kafka_down(plan, home: Path | None = None) -> list[str]:
    from fleetlab.lab import Lab

    if not placed(home):
        return []
    lab = Lab(kafka_spec(folder(home), plan, home))
    return [f"traffic: {lab.stop_traffic()}", *lab.down()]  # the demo's traffic on it first


def store_spec(plan, home: Path | None = None):
    """The object store on the store host (fleetlab.objectstore)."""
    from fleetlab.objectstore import ObjectStoreSpec

    address, netns = place(STORE, home)
    return ObjectStoreSpec(home=folder(home) / "objectstore", port=plan.object_store, host=address, netns=netns)


def store_up(plan, home: Path | None = None):
    from fleetlab import objectstore

    spec = store_spec(plan, home)
    objectstore.up(spec)
    objectstore.create_bucket(spec, BUCKET)
    return spec


def store_down(plan, home: Path | None = None) -> list[str]:
    from fleetlab import objectstore

    if not placed(home):
        return []
    return [f"object store: {objectstore.down(store_spec(plan, home))}"]


def kafka_spec(root: Path, plan, home: Path | None = None):
    """The secured KRaft cluster with a node per broker host (fleetlab.lab.LabSpec.broker_hosts)."""
    from fleetlab.lab import LabSpec

    net = network(home)
    nodes = [{"address": net.address(h), "netns": net.netns(h)} for h in BROKERS]
    ports = plan.cluster("lab43")
    return LabSpec(lab_dir=str(root / KAFKA_CLUSTER), name=KAFKA_CLUSTER, zk_port=0,
                   broker_base_port=ports["broker_base_port"], controller_base_port=ports["controller_base_port"],
                   brokers=len(BROKERS), kafka_version=KAFKA_VERSION, security="sasl_ssl", broker_hosts=nodes,
                   broker_ssh=True,
                   # the incident's cluster: a __consumer_offsets the cleaner never compacts, in small
                   # segments (Kafka 4's minimum), so a trim has old segments to quarantine
                   broker_overrides={"log.cleaner.enable": "false"}, offsets_segment_bytes=1024 * 1024)


def fleet_document(spec, approvers=("admin", "approver")) -> dict:
    """The fleet file of the hosts profile: the one cluster (the lab's own entry: connections, broker
    log dirs reached over SSH, broker_control) and who may approve its runbooks."""
    doc = spec.fleet_document()
    doc["clusters"][0]["approvers"] = list(approvers)
    return doc


def write_fleet_file(spec, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text("# written by fleetlab (the hosts profile): the secured cluster on the lab's broker hosts\n"
                   + yaml.safe_dump(fleet_document(spec), sort_keys=False))
    tmp.replace(path)
    return path

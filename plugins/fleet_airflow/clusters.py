"""From a fleet-file cluster to connected readers, through the cluster's Airflow connections.

The one place that turns a `fleetkit.core.fleet.Cluster` into hooks: operators and fleetctl both use
it, so a connection id resolves the same way everywhere (AIRFLOW_CONN_<ID> variables, the
metadata database, or any configured secrets backend).

Which principal: every function takes `changes` (default False). A step that changes the cluster
(a runbook's execute and teardown, the unattended mapping writer, fleetctl trim resume/restore)
passes changes=True and gets the runbook connections (the fleet file's runbook_kafka_conn_id,
zookeeper.runbook_conn_id, a store's runbook_conn_id; each defaults to the read-only one); every
other step reads with the read-only connections (kafka_conn_id, zookeeper.conn_id, conn_id).

Brokers with `access: ssh` are reached through their `ssh_conn_id`, a connection of type ssh
(`ssh_settings`, `broker_hosts`): their files (the collection's segment inventory, the trim's
checks, quarantine and restore) and their broker_control commands go over SSH to their host.

The shared run state (locks, execution journals, audit heads) is a connection too: `install_state`
resolves FLEET_STATE_CONN_ID here and installs its store for the process (fleetkit.core.state);
the gate, the operators and fleetctl call it before they lock, journal or audit.
"""

from __future__ import annotations

import logging
from contextlib import contextmanager
from typing import Iterator

from fleetkit.collection.groups import CollectionResult
from fleetkit.core.datasets import DataRoot
from fleetkit.core.errors import ClusterUnreachable, FleetConfigError
from fleetkit.core.fleet import Cluster
from fleetkit.core.state import StateDB
from fleetkit.clients.broker_hosts import BrokerHosts
from fleetkit.clients.kafka import KafkaCluster
from fleetkit.clients.ssh import SshSettings
from fleetkit.clients.zookeeper import ZooKeeperCluster

log = logging.getLogger(__name__)


def _missing_connection(conn_id: str, cluster: Cluster, what: str, exc: Exception,
                        changes: bool = False) -> FleetConfigError:
    role = "runbook " if changes else ""
    return FleetConfigError(
        f"cluster {cluster.name!r}: {role}{what} connection {conn_id!r} is not defined ({exc}). Define it as "
        f"AIRFLOW_CONN_{conn_id.upper()} or in Airflow (Admin > Connections)")


def kafka_for(cluster: Cluster, timeout: float = 15.0, *, changes: bool = False) -> KafkaCluster:
    """The cluster's KafkaCluster through its read-only connection, or its runbook one (`changes`)."""
    from airflow.exceptions import AirflowNotFoundException

    from fleet_airflow.hooks.kafka_cluster import KafkaClusterHook

    conn_id = cluster.kafka_conn_id_for(changes)
    hook = KafkaClusterHook(conn_id, cluster_name=cluster.name, kafka_version=cluster.kafka_version, timeout=timeout)
    try:
        return hook.get_conn
    except AirflowNotFoundException as e:
        raise _missing_connection(conn_id, cluster, "Kafka", e, changes) from None


def zookeeper_for(cluster: Cluster, *, changes: bool = False) -> ZooKeeperCluster | None:
    """The cluster's ZooKeeperCluster (not started) through its read-only or runbook (`changes`) connection."""
    if cluster.zookeeper is None:
        return None
    from airflow.exceptions import AirflowNotFoundException

    from fleet_airflow.hooks.zookeeper import ZooKeeperHook

    conn_id = cluster.zookeeper.conn_id_for(changes)
    hook = ZooKeeperHook(conn_id, chroot=cluster.zookeeper.chroot, cluster_name=cluster.name)
    try:
        return hook.get_conn()
    except AirflowNotFoundException as e:
        raise _missing_connection(conn_id, cluster, "ZooKeeper", e, changes) from None


def ssh_settings(conn_id: str) -> SshSettings:
    """The SSH settings of a broker host from its connection (type ssh: host, port, login; extra
    private_key or key_file, private_key_passphrase, host_key; key only, the host key always
    checked: fleetkit.clients.ssh.connection_settings): its AIRFLOW_CONN_<ID> variable in JSON
    form, else through Airflow (secrets backends, the metadata database)."""
    from fleetkit.clients.ssh import connection_settings
    from fleetkit.core.connections import from_env

    conn = from_env(conn_id)
    if conn is not None:
        return connection_settings(conn_id, conn.host, conn.port, conn.login, conn.password, conn.extra,
                                   conn.conn_type)
    from airflow.exceptions import AirflowNotFoundException

    from fleet_airflow.hooks import connection

    try:
        c = connection(conn_id)
    except AirflowNotFoundException:
        raise FleetConfigError(f"ssh connection {conn_id!r} is not defined. Define it as "
                               f"AIRFLOW_CONN_{conn_id.upper()} or in Airflow (Admin > Connections), type ssh") from None
    return connection_settings(conn_id, c.host, c.port, c.login, c.password, c.extra_dejson, c.conn_type)


def broker_hosts(cluster: Cluster) -> BrokerHosts:
    """Where the cluster's brokers are (this machine, or their hosts over SSH through their
    ssh_conn_id); close it when done (a context manager)."""
    return BrokerHosts(cluster, ssh_settings)


def files_for(hosts: BrokerHosts):
    """The collection's files_for: a broker's files where they can be read (its host over SSH for
    access: ssh; this machine's folder when it exists), else None (sizes from DescribeLogDirs)."""
    from fleetkit.collection.offsets_topic import local_files

    def one(broker):
        return hosts.files(broker.id) if broker.access == "ssh" else local_files(broker)

    return one


@contextmanager
def connected(cluster: Cluster, timeout: float = 15.0, *,
              changes: bool = False) -> Iterator[tuple[KafkaCluster, ZooKeeperCluster | None]]:
    """(kafka, zk or None), started, closed on exit: the runbook connections when `changes`."""
    kafka = kafka_for(cluster, timeout=timeout, changes=changes)
    zk = zookeeper_for(cluster, changes=changes)
    try:
        if zk is not None:
            zk.start()
        yield kafka, zk
    finally:
        if zk is not None:
            zk.stop()
        kafka.close()


def offset_store_zookeeper(cluster: Cluster, store, *, changes: bool = False) -> ZooKeeperCluster:
    """A (not yet started) client of one offset store's ZooKeeper, chroot applied (the store's
    runbook connection when `changes`)."""
    from airflow.exceptions import AirflowNotFoundException

    from fleet_airflow.hooks.zookeeper import ZooKeeperHook

    conn_id = store.conn_id_for(changes)
    # no chroot in the fleet file: the connection's own (extra.chroot), if any
    hook = ZooKeeperHook(conn_id, chroot=store.chroot or None,
                         cluster_name=f"{cluster.name} {store.kind} store")
    try:
        return hook.get_conn()
    except AirflowNotFoundException as e:
        raise _missing_connection(conn_id, cluster, f"{store.kind} offset store ZooKeeper", e, changes) from None


def offset_store_clients(cluster: Cluster):
    """Started kazoo clients of the cluster's offset_stores, keyed by store (a context manager;
    fleetkit.collection.zk_offsets.started_store_clients)."""
    from fleetkit.collection.zk_offsets import started_store_clients

    return started_store_clients(cluster, lambda store: offset_store_zookeeper(cluster, store))


def collect(cluster: Cluster, data_root: str, retention_days: int = 30, timeout: float = 15.0) -> CollectionResult:
    """Collect one cluster into the datasets under data_root (all or nothing), with its
    offset_stores, through the Airflow connections (fleetkit.collection.groups.collect_recorded)."""
    from fleetkit.collection.groups import collect_recorded

    @contextmanager
    def opened():
        with connected(cluster, timeout=timeout) as (kafka, zk), offset_store_clients(cluster) as stores:
            yield kafka, zk, stores

    return collect_recorded(cluster, DataRoot(data_root), opened, retention_days)


def collect_offsets_topic(cluster: Cluster, data_root: str, partitions: list[int] | None = None,
                          timeout: float = 15.0):
    """Read new __consumer_offsets records and the segment inventory of one cluster (all or nothing)."""
    from fleetkit.collection.offsets_topic import collect_offsets_topic as collect_records

    kafka = kafka_for(cluster, timeout=timeout)
    hosts = broker_hosts(cluster)
    try:
        return collect_records(cluster, kafka, DataRoot(data_root), partitions, files_for=files_for(hosts))
    except (ClusterUnreachable, FleetConfigError):
        raise
    except Exception as e:
        raise ClusterUnreachable(f"__consumer_offsets collection of cluster {cluster.name!r} failed, nothing "
                                 f"written: {type(e).__name__}: {e}") from e
    finally:
        hosts.close()
        kafka.close()


def collect_until_settled(cluster: Cluster, data_root: str, settle_seconds: float = 60.0, interval: float = 5.0,
                          timeout: float = 15.0, log_each=None) -> list[dict]:
    """The ownership check's collection (fleetkit.collection.coordinators.collect_until_settled)
    over the cluster's connections: repeated while any group is not served, for at most
    `settle_seconds`, each pass written. Returns one summary per pass."""
    import time

    from fleetkit.collection.coordinators import collect_until_settled as collect_passes

    started = time.monotonic()
    with connected(cluster, timeout=timeout) as (kafka, zk):
        return collect_passes(cluster, kafka, zk, DataRoot(data_root), settle_seconds=settle_seconds,
                              interval=interval, log_each=log_each, started=started)


def collect_group_ids(cluster: Cluster, data_root: str, timeout: float = 15.0):
    """Read one cluster's KoP client-to-group mappings and live members into the datasets
    group_id_mappings / group_members (all or nothing)."""
    from fleetkit.group_ids.collect import collect_and_write
    from fleetkit.group_ids.rules import ReconcileError

    try:
        with connected(cluster, timeout=timeout) as (kafka, zk):
            if zk is None:
                raise FleetConfigError(f"cluster {cluster.name!r} has no zookeeper section: no mappings to read")
            return collect_and_write(cluster, kafka, zk.client, DataRoot(data_root))
    except (ClusterUnreachable, FleetConfigError, ReconcileError):
        raise
    except Exception as e:
        raise ClusterUnreachable(f"group-id mapping collection of cluster {cluster.name!r} failed, nothing written: "
                                 f"{type(e).__name__}: {e}") from e


def state_db(conn_id: str) -> StateDB:
    """The database of the shared run state: connection `conn_id` (type postgres; its schema field
    is the database, extra state_schema the toolkit's schema, default fleet_state), from its
    AIRFLOW_CONN_<ID> variable in JSON form, else through Airflow (secrets backends, the metadata
    database). FleetConfigError naming it when it is not defined."""
    from fleetkit.core.connections import from_env
    from fleetkit.core.state import db_from_connection

    conn = from_env(conn_id)
    if conn is not None:
        return db_from_connection(conn_id, conn.conn_type, conn.host, conn.port, conn.login, conn.password,
                                  conn.schema, conn.extra)
    from airflow.exceptions import AirflowNotFoundException

    from fleet_airflow.hooks import connection

    try:
        c = connection(conn_id)
    except AirflowNotFoundException:
        raise FleetConfigError(f"FLEET_STATE_CONN_ID: connection {conn_id!r} (the shared run state) is not defined. "
                               f"Define it as AIRFLOW_CONN_{conn_id.upper()} or in Airflow (Admin > Connections), "
                               "type postgres") from None
    return db_from_connection(conn_id, c.conn_type, c.host, c.port, c.login, c.password, c.schema, c.extra_dejson)


def install_state():
    """Install the deployment's shared run state for this process (FLEET_STATE_CONN_ID; unset: the
    local files) and return its store. The one place the gate, the operators and fleetctl choose it;
    a database that cannot be reached is a one-line StateUnreachable naming the connection, never a
    fall-back to local files."""
    from fleetkit.core import settings, state

    conn_id = settings.state_conn_id()
    if conn_id is None:
        return state.current()
    store = state.installed()
    if getattr(getattr(store, "db", None), "conn_id", None) != conn_id:
        store = state.open_store(state_db(conn_id))
        state.install(store)
    return store


def data_root_store_options(conn_id: str | None = None):
    """The object store options of the data root (fleetkit.core.datasets.ObjectStoreOptions) from the
    connection FLEET_DATA_ROOT_CONN_ID names (type aws, as the Amazon provider has it: login = access
    key id, password = secret access key, extra endpoint_url and region_name), or None when no
    connection is named (the AWS SDK's own credentials). FleetConfigError naming the connection when
    it is not defined or not of type aws; the keys are never in a message."""
    from fleetkit.core import settings
    from fleetkit.core.connections import from_env
    from fleetkit.core.datasets import ObjectStoreOptions

    conn_id = conn_id or settings.data_root_conn_id()
    if conn_id is None:
        return None
    conn = from_env(conn_id)
    if conn is None:
        from airflow.exceptions import AirflowNotFoundException

        from fleet_airflow.hooks import connection

        try:
            conn = connection(conn_id)
        except AirflowNotFoundException:
            raise FleetConfigError(f"FLEET_DATA_ROOT_CONN_ID: connection {conn_id!r} (the object store of the data "
                                   f"root) is not defined. Define it as AIRFLOW_CONN_{conn_id.upper()} or in Airflow "
                                   "(Admin > Connections), type aws") from None
        extra = conn.extra_dejson
    else:
        extra = conn.extra
    if conn.conn_type not in (None, "", "aws"):
        raise FleetConfigError(f"FLEET_DATA_ROOT_CONN_ID: connection {conn_id!r} is of type {conn.conn_type!r}, "
                               "not aws (login = access key id, password = secret access key, extra endpoint_url, "
                               "region_name)")
    return ObjectStoreOptions(endpoint_url=extra.get("endpoint_url") or None,
                              region=extra.get("region_name") or None,
                              access_key_id=conn.login or None, secret_access_key=conn.password or None,
                              source=f"connection {conn_id!r}")


def install_data_root_store() -> None:
    """Install, for this process, how an object store data root is reached: the connection
    FLEET_DATA_ROOT_CONN_ID names, looked up when an s3:// root is first used (nothing is looked up
    for a local data root)."""
    from fleetkit.core.datasets import install_object_store

    install_object_store(lambda: data_root_store_options())

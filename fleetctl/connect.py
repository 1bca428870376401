"""How fleetctl reaches a cluster and Airflow: the deployment's settings, the fleet-file cluster,
its Kafka and ZooKeeper clients from AIRFLOW_CONN_<ID> variables in JSON form (no Airflow import),
else through Airflow (fleet_airflow.clusters), and who acts, for the audit. Every command reaches
clusters here: the read-only connections, or the runbook ones for a command that changes the
cluster (`changes`)."""

from __future__ import annotations

import os
from contextlib import contextmanager

from fleetkit.core.errors import FleetError


#: seconds a command waits for a cluster's answer where it takes no --timeout
CONNECT_TIMEOUT = 15.0


def airflow_context() -> None:
    """Before a command that needs Airflow: the deployment's required settings are there (one line
    naming the first that is not). Airflow itself is configured as for its own CLI: AIRFLOW_HOME,
    AIRFLOW_CONFIG and AIRFLOW__* variables of the caller's environment; connections resolve through
    environment variables, the secrets backends, then the metadata database (fleet_airflow.hooks)."""
    from fleetkit.core import settings

    settings.require()


def state_store():
    """The deployment's shared run state for this command (locks, journals, audit heads:
    FLEET_STATE_CONN_ID, fleetkit.core.state), installed for the process: a connection in a JSON
    AIRFLOW_CONN_<ID> variable is read without Airflow (a quick `fleetctl lock status`), any other
    through Airflow (fleet_airflow.clusters.install_state). Unset: the local files."""
    from fleetkit.core import settings, state
    from fleetkit.core.connections import from_env

    conn_id = settings.state_conn_id()
    if conn_id is None or from_env(conn_id) is not None:
        return state.current()
    return airflow_clusters().install_state()


def os_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        return f"uid-{os.getuid()}"


def actor(prompt: bool = True) -> str:
    """Who acts, for the audit: the caller's Airflow user as the api-server verified it (their token,
    or their user and password); when Airflow cannot verify anyone (not reachable, no login given),
    `unverified:<OS login>@<host>`, so the audit never records a self-declared name as a user."""
    import socket

    from fleetctl.airflow_api import verified_user

    user, _why = verified_user(prompt=prompt)
    return user if user else f"unverified:{os_user()}@{socket.gethostname()}"


def load_cluster(args):
    """The fleet-file cluster named by --cluster (--fleet, else the deployment's FLEET_FILE)."""
    from fleetkit.core.fleet import load_fleet
    from fleetkit.core.settings import fleet_file

    return load_fleet(args.fleet or fleet_file()).cluster(args.cluster)


def airflow_clusters():
    """fleet_airflow.clusters, with the Airflow context set up first."""
    airflow_context()
    from fleet_airflow import clusters

    return clusters


def kafka_client(cluster, timeout: float, changes: bool = False):
    """The cluster's KafkaCluster: from its AIRFLOW_CONN_ variable when that is JSON, else Airflow.
    `changes`: the runbook connection (the fleet file's runbook_kafka_conn_id), for a command that
    changes the cluster."""
    from fleetkit.clients.kafka import KafkaCluster, client_config
    from fleetkit.core.connections import from_env, kafka_config

    conn = from_env(cluster.kafka_conn_id_for(changes))
    config = kafka_config(conn) if conn is not None else None
    if config is None:
        return airflow_clusters().kafka_for(cluster, timeout=timeout, changes=changes)
    return KafkaCluster(cluster.name, client_config(config, cluster.kafka_version), timeout=timeout)


def zookeeper_client(cluster, conn_id: str, chroot: str | None, name: str, changes: bool = False):
    """A not yet started ZooKeeperCluster for a connection id (JSON variable, else Airflow; `changes`:
    the id is a runbook connection)."""
    from fleetkit.clients.zookeeper import ZooKeeperCluster, connection_settings
    from fleetkit.core.connections import from_env

    conn = from_env(conn_id)
    if conn is None:
        clusters = airflow_clusters()
        zk = cluster.zookeeper
        if zk is not None and conn_id == zk.conn_id_for(changes) and chroot == zk.chroot:
            return clusters.zookeeper_for(cluster, changes=changes)
        store = next(s for s in cluster.offset_stores if s.conn_id_for(changes) == conn_id)
        return clusters.offset_store_zookeeper(cluster, store, changes=changes)
    s = connection_settings(conn_id, conn.host, conn.port, conn.login, conn.password, conn.extra, chroot)
    return ZooKeeperCluster.from_settings(name, s)


@contextmanager
def connected(cluster, timeout: float, zookeeper: bool = True, stores: bool = True, changes: bool = False):
    """(kafka, zk or None, store clients or None), closed on exit. `changes`: through the runbook
    connections, for a command that changes the cluster (whose own errors are then raised as they
    are: a failed change is not a verdict on the cluster's reachability)."""
    from fleetkit.collection.zk_offsets import started_store_clients

    from fleetkit.core.errors import ClusterUnreachable

    kafka = kafka_client(cluster, timeout, changes)
    zk = None
    try:
        if zookeeper and cluster.zookeeper is not None:
            zk = zookeeper_client(cluster, cluster.zookeeper.conn_id_for(changes), cluster.zookeeper.chroot,
                                  cluster.name, changes)
            zk.start()
        if stores and cluster.offset_stores:
            with started_store_clients(cluster, lambda s: zookeeper_client(
                    cluster, s.conn_id_for(changes), s.chroot or None, f"{cluster.name} {s.kind} store",
                    changes)) as clients:
                yield kafka, zk, clients
        else:
            yield kafka, zk, None
    except FleetError:
        raise
    except Exception as e:
        from fleetctl.output import stdout_closed

        if changes or (isinstance(e, BrokenPipeError) and stdout_closed()):
            raise  # a change's own error; the reader of stdout gone (`| head`): not the cluster's fault
        # a broker dropping mid-request, a kazoo session lost: name the cluster, keep the cause
        raise ClusterUnreachable(f"cluster {cluster.name!r} ({kafka.bootstrap}): {type(e).__name__}: {e}") from e
    finally:
        if zk is not None:
            zk.stop()
        kafka.close()


def install_data_root_store() -> None:
    """An s3:// data root is reached through the connection FLEET_DATA_ROOT_CONN_ID names: a JSON
    AIRFLOW_CONN_<ID> variable without Airflow, any other through Airflow
    (fleet_airflow.clusters.data_root_store_options), looked up when such a root is first used. Nothing
    is imported for a local data root (the incident commands start in about a second)."""
    if "://" not in os.environ.get("FLEET_DATA_ROOT", ""):
        return
    from fleetkit.core.datasets import install_object_store

    def resolve():
        from fleetkit.core import settings

        if settings.data_root_conn_id() is None:
            return None
        return airflow_clusters().data_root_store_options()

    install_object_store(resolve)

"""Where the principal is chosen: fleet_airflow.clusters gives the read-only connections unless a
step changes the cluster (changes=True), then the fleet file's runbook ones (no server needed:
the clients are built, not started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetkit.core.errors import FleetConfigError
from fleetkit.core.fleet import parse_fleet

FLEET = """
version: 1
clusters:
  - name: prod
    kafka_conn_id: t_ro_kafka
    runbook_kafka_conn_id: t_rb_kafka
    zookeeper: {conn_id: t_ro_zk, runbook_conn_id: t_rb_zk, chroot: /kafka}
    offset_stores:
      - {kind: zookeeper, conn_id: t_ro_zk, chroot: /kafka}
      - {kind: storm, conn_id: t_storm_zk, runbook_conn_id: t_storm_rb_zk, root: /spouts}
  - name: missing
    kafka_conn_id: t_ro_kafka
    runbook_kafka_conn_id: t_nowhere
"""


@pytest.fixture
def fleet(monkeypatch):
    def conn(conn_id, doc):
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(doc))

    conn("t_ro_kafka", {"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1001"}})
    conn("t_rb_kafka", {"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1002"}})
    conn("t_ro_zk", {"conn_type": "zookeeper", "host": "127.0.0.1", "port": 2001, "login": "fleet",
                     "password": "ro-secret"})
    conn("t_rb_zk", {"conn_type": "zookeeper", "host": "127.0.0.1", "port": 2002, "login": "fleet-runbook",
                     "password": "rb-secret", "extra": {"auth": "sasl"}})
    conn("t_storm_zk", {"conn_type": "zookeeper", "host": "127.0.0.1", "port": 2003})
    conn("t_storm_rb_zk", {"conn_type": "zookeeper", "host": "127.0.0.1", "port": 2004, "login": "storm-runbook",
                           "password": "x"})
    return parse_fleet(FLEET, path="fleet.yaml", base_dir=Path("/"))


def test_read_steps_get_the_read_only_connections_changing_steps_the_runbook_ones(fleet):
    from fleet_airflow import clusters

    c = fleet.cluster("prod")
    assert clusters.kafka_for(c).bootstrap == "127.0.0.1:1001"
    assert clusters.kafka_for(c, changes=True).bootstrap == "127.0.0.1:1002"
    ro, rb = clusters.zookeeper_for(c), clusters.zookeeper_for(c, changes=True)
    assert (ro.hosts, ro.chroot, ro.identity) == ("127.0.0.1:2001", "/kafka", "digest:fleet")
    assert (rb.hosts, rb.chroot, rb.identity) == ("127.0.0.1:2002", "/kafka", "sasl:fleet-runbook")
    own, storm = c.offset_stores
    assert clusters.offset_store_zookeeper(c, own).identity == "digest:fleet"
    assert clusters.offset_store_zookeeper(c, own, changes=True).identity == "sasl:fleet-runbook"
    assert clusters.offset_store_zookeeper(c, storm).hosts == "127.0.0.1:2003"
    assert clusters.offset_store_zookeeper(c, storm, changes=True).identity == "digest:storm-runbook"


def test_a_missing_runbook_connection_is_named_as_the_runbook_one(fleet):
    from fleet_airflow import clusters

    c = fleet.cluster("missing")
    assert clusters.kafka_for(c).bootstrap == "127.0.0.1:1001"  # reading does not need it
    with pytest.raises(FleetConfigError, match="cluster 'missing': runbook Kafka connection 't_nowhere' is not "
                                               "defined .*AIRFLOW_CONN_T_NOWHERE"):
        clusters.kafka_for(c, changes=True)


def test_the_gate_connects_execute_and_cleanup_as_the_runbook_principal(fleet, monkeypatch):
    """The gate's one helper passes `changes` through to the connections and to the offset-store
    opener of the action's context."""
    from contextlib import contextmanager

    from fleet_airflow import clusters, gate

    seen = []

    @contextmanager
    def connected(cluster, timeout=15.0, *, changes=False):
        seen.append(("connected", changes))
        yield "kafka", "zk"

    monkeypatch.setattr(clusters, "connected", connected)
    monkeypatch.setattr(gate, "_cluster", lambda params: fleet.cluster("prod"))
    for changes in (False, True):
        zk = gate._with_cluster({"cluster": "prod"}, lambda ctx: ctx.open_zookeeper(ctx.cluster.offset_stores[0]),
                                changes=changes)
        seen.append(("store", zk.identity))
    assert seen == [("connected", False), ("store", "digest:fleet"),
                    ("connected", True), ("store", "sasl:fleet-runbook")]


def test_fleetctl_reaches_the_cluster_with_the_same_principals_without_airflow(fleet):
    """fleetctl's own connection module (JSON AIRFLOW_CONN_ variables, no Airflow import): the
    read-only connections, and the runbook ones for a command that changes the cluster (fleetctl
    trim resume / restore)."""
    from fleetctl import connect

    c = fleet.cluster("prod")
    assert connect.kafka_client(c, 5).bootstrap == "127.0.0.1:1001"
    assert connect.kafka_client(c, 5, changes=True).bootstrap == "127.0.0.1:1002"
    for changes, want in ((False, ("127.0.0.1:2001", "digest:fleet")), (True, ("127.0.0.1:2002", "sasl:fleet-runbook"))):
        zk = connect.zookeeper_client(c, c.zookeeper.conn_id_for(changes), c.zookeeper.chroot, c.name, changes)
        assert (zk.hosts, zk.chroot, zk.identity) == (*want[:1], "/kafka", want[1])
    storm = c.offset_stores[1]
    assert connect.zookeeper_client(c, storm.conn_id_for(True), None, "storm", True).identity == "digest:storm-runbook"

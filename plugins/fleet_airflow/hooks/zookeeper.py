"""Airflow hook for a Kafka cluster's ZooKeeper (kazoo).

Connection type "zookeeper": host and port, or extra {"hosts": "zk1:2181,zk2:2181"} for an
ensemble; login/password, when set, authenticate: digest auth ("login:password", the default) or,
with extra {"auth": "sasl"}, SASL DIGEST-MD5 (fleetkit.clients.zookeeper.connection_settings);
extra "chroot" is the default chroot (the fleet file's chroot wins when given); extra "timeout" in
seconds; extra "ssl" ({"ca", "certfile", "keyfile", "check_hostname"}) connects over TLS to the
servers' secureClientPort.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.providers.common.compat.sdk import BaseHook

from fleetkit.clients.zookeeper import ConnectionSettings, ZooKeeperCluster, connection_settings

from fleet_airflow.hooks import ConnectionLookup


class ZooKeeperHook(ConnectionLookup, BaseHook):
    conn_name_attr = "zookeeper_conn_id"
    default_conn_name = "zookeeper_default"
    conn_type = "zookeeper"
    hook_name = "ZooKeeper"

    def __init__(self, zookeeper_conn_id: str = default_conn_name, *, chroot: str | None = None,
                 cluster_name: str | None = None, **kwargs):
        super().__init__(**kwargs)
        self.zookeeper_conn_id = zookeeper_conn_id
        self.chroot = chroot
        self.cluster_name = cluster_name or zookeeper_conn_id

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["schema"],
            "relabeling": {"login": "User (digest or SASL)", "password": "Password"},
            "placeholders": {"host": "127.0.0.1", "port": "2181",
                             "extra": '{"hosts": "zk1:2281,zk2:2281", "chroot": "/kafka", "timeout": 10, '
                                      '"auth": "digest or sasl", "ssl": {"ca": "/etc/fleet/zk-ca.pem", '
                                      '"certfile": "/etc/fleet/zk-client.pem", "keyfile": "/etc/fleet/zk-client.key"}}'},
        }

    def connection_settings(self) -> ConnectionSettings:
        conn = self.get_connection(self.zookeeper_conn_id)
        return connection_settings(self.zookeeper_conn_id, conn.host, conn.port, conn.login, conn.password,
                                   conn.extra_dejson, self.chroot)

    def get_conn(self) -> ZooKeeperCluster:
        return ZooKeeperCluster.from_settings(self.cluster_name, self.connection_settings())

    @cached_property
    def cluster(self) -> ZooKeeperCluster:
        return self.get_conn()

    def test_connection(self) -> tuple[bool, str]:
        try:
            with self.get_conn() as zk:
                ids = zk.broker_ids()
            return True, f"Connection successful: brokers registered: {ids or 'none'}"
        except Exception as e:  # noqa: BLE001 - the UI shows the message
            return False, str(e)

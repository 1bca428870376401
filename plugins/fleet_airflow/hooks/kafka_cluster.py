"""Airflow hook for one Kafka cluster of the fleet.

Reuses the apache-kafka provider's connection type ("kafka"): the connection's extra is the
librdkafka config dict ({"bootstrap.servers": "...", "security.protocol": ..., ...}). On top of
the provider's KafkaBaseHook it knows the cluster's version from the fleet file and adds what old
brokers need (0.9 cannot answer ApiVersions: api.version.request=false and
broker.version.fallback), and it returns the toolkit's typed reader instead of a bare client.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any

from airflow.providers.apache.kafka.hooks.base import KafkaBaseHook

from fleetkit.clients.kafka import KafkaCluster, client_config

from fleet_airflow.hooks import ConnectionLookup


class KafkaClusterHook(ConnectionLookup, KafkaBaseHook):
    hook_name = "Kafka cluster (fleet toolkit)"

    def __init__(self, kafka_config_id: str = KafkaBaseHook.default_conn_name, *,
                 cluster_name: str | None = None, kafka_version: str | None = None,
                 timeout: float = 15.0, **kwargs):
        super().__init__(kafka_config_id=kafka_config_id, **kwargs)
        self.cluster_name = cluster_name or kafka_config_id
        self.kafka_version = kafka_version
        self.timeout = timeout

    def librdkafka_config(self) -> dict[str, Any]:
        return client_config(self._build_config(), self.kafka_version)

    def _get_client(self, config) -> KafkaCluster:
        return KafkaCluster(self.cluster_name, client_config(config, self.kafka_version), timeout=self.timeout)

    @cached_property
    def cluster(self) -> KafkaCluster:
        return self.get_conn

    def test_connection(self) -> tuple[bool, str]:
        try:
            md = self._get_client(self._build_config()).metadata()
            return True, f"Connection successful: {len(md.brokers)} broker(s) answered."
        except Exception as e:  # noqa: BLE001 - the UI shows the message
            return False, str(e)

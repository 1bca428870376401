"""Client settings chosen from the fleet file's kafka_version: the library's client_config and the
Airflow hook that every operator and fleetctl reach the clusters through."""

from __future__ import annotations

import json

import pytest

from fleetkit.clients.kafka import KafkaCluster, client_config

FALLBACKS = ("api.version.request", "broker.version.fallback")


def test_09_gets_the_protocol_fallbacks():
    cfg = client_config({"bootstrap.servers": "a:1"}, "0.9.0.1")
    assert cfg["api.version.request"] is False and cfg["broker.version.fallback"] == "0.9.0"
    assert KafkaCluster("lab", cfg).asks_api_versions is False


@pytest.mark.parametrize("version", ["3.9.2", "4.3.1", "0.10.0.1", "4.3"])
def test_brokers_answering_api_versions_get_no_fallbacks(version):
    cfg = client_config({"bootstrap.servers": "a:1"}, version)
    assert not set(FALLBACKS) & set(cfg)
    assert KafkaCluster("lab", cfg).asks_api_versions is True


@pytest.mark.parametrize("version", ["3.9.2", "4.3.1"])
@pytest.mark.parametrize("value", [False, "false", "False"])
def test_a_connection_turning_api_versions_off_for_a_modern_cluster_is_refused(version, value):
    with pytest.raises(ValueError, match=rf"api.version.request={value} but the cluster runs Kafka {version}"):
        client_config({"bootstrap.servers": "a:1", "api.version.request": value}, version)


def test_bad_version_names_the_value():
    with pytest.raises(ValueError, match=r"kafka_version 'four' is not a version"):
        client_config({"bootstrap.servers": "a:1"}, "four")


@pytest.mark.parametrize("version, fallbacks", [("0.9.0.1", True), ("3.9.2", False), ("4.3.1", False)])
def test_the_airflow_hook_chooses_from_the_fleet_files_version(version, fallbacks, monkeypatch):
    from fleet_airflow.hooks.kafka_cluster import KafkaClusterHook

    monkeypatch.setenv("AIRFLOW_CONN_UNIT_KAFKA", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:1"}}))
    hook = KafkaClusterHook("unit_kafka", cluster_name="unit", kafka_version=version)
    cfg = hook.librdkafka_config()
    assert (set(FALLBACKS) <= set(cfg)) is fallbacks
    assert not fallbacks or (cfg["api.version.request"], cfg["broker.version.fallback"]) == (False, "0.9.0")
    assert set(FALLBACKS) & set(hook.get_conn.config) == set(cfg) & set(FALLBACKS)

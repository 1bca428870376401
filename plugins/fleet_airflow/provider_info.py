"""Registers the toolkit with Airflow's providers manager, as a provider package does: its hooks,
operators, triggers, notifier, the extra link and the connection type it adds (ZooKeeper; Kafka
clusters use the apache-kafka provider's `kafka` type, Spark the apache-spark provider's `spark`).

Read through the `apache_airflow_provider` entry point of the installed distribution; nothing here
imports Airflow or the modules it names (the providers manager imports them when it needs them).
"""

from __future__ import annotations

from importlib import metadata

DISTRIBUTION = "kafka-fleet-toolkit"


def _version() -> str:
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:  # imported from a source tree that is not installed
        return "0+unknown"


def get_provider_info() -> dict:
    return {
        "package-name": DISTRIBUTION,
        "name": "Kafka fleet toolkit",
        "description": "Hooks, operators, triggers and an approval gate that keep a fleet of Kafka clusters "
                       "(ZooKeeper mode 0.9 to 3.x, KRaft 4.x) healthy.",
        "versions": [_version()],
        "integrations": [
            {"integration-name": "Kafka fleet toolkit", "tags": ["software"],
             "external-doc-url": "https://kafka.apache.org/documentation/"},
        ],
        "hooks": [
            {"integration-name": "Kafka fleet toolkit",
             "python-modules": ["fleet_airflow.hooks.kafka_cluster", "fleet_airflow.hooks.zookeeper"]},
        ],
        "operators": [
            {"integration-name": "Kafka fleet toolkit",
             "python-modules": ["fleet_airflow.operators.collect", "fleet_airflow.operators.group_ids",
                                "fleet_airflow.operators.trim_report", "fleet_airflow.operators.report",
                                "fleet_airflow.operators.spark", "fleet_airflow.gate"]},
        ],
        "triggers": [
            {"integration-name": "Kafka fleet toolkit",
             "python-modules": ["fleet_airflow.triggers.leader_change", "fleet_airflow.triggers.earlier_answer"]},
        ],
        "notifications": ["fleet_airflow.notifiers.FleetAlertNotifier"],
        "extra-links": ["fleet_airflow.operators.report.StuckReportLink"],
        "connection-types": [
            {"hook-class-name": "fleet_airflow.hooks.zookeeper.ZooKeeperHook", "connection-type": "zookeeper"},
        ],
    }

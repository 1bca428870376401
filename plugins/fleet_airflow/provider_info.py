"""Registers the toolkit with Airflow's providers manager (connection types for the UI)."""


def get_provider_info() -> dict:
    return {
        "package-name": "kafka-fleet-toolkit",
        "name": "Kafka fleet toolkit",
        "description": "Hooks and operators for maintaining fleets of Kafka clusters.",
        "versions": ["0.1.0"],
        "connection-types": [
            {"hook-class-name": "fleet_airflow.hooks.zookeeper.ZooKeeperHook", "connection-type": "zookeeper"},
        ],
    }

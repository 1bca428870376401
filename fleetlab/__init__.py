"""The lab: the project's own servers for the demo and the tests (Kafka brokers, ZooKeeper,
PostgreSQL for Airflow's metadata, the Airflow services). Never imported by include/ or plugins/.
"""

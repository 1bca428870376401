"""The lab: the project's own servers for the demo and the tests (Kafka brokers, ZooKeeper,
PostgreSQL for Airflow's metadata, the Airflow services), and its command `fleetlab` (cli.py).
Never imported by include/, plugins/ or fleetctl/.
"""

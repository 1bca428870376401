"""The toolkit's hooks: one Kafka cluster (extends the apache-kafka provider's hook) and its
ZooKeeper (kazoo). Both look their connection up the way Airflow resolves it where they run
(`connection`)."""

from __future__ import annotations


def connection(conn_id: str):
    """The Airflow connection `conn_id`. In a task or the triggerer, through the Task SDK (environment
    variables, secrets backends, the execution API). Outside them (fleetctl on an operator's shell),
    where the Task SDK reads environment variables and secrets backends only, it falls back to
    airflow-core's lookup, which reads the metadata database too, as `airflow connections get` does.
    AirflowNotFoundException when neither knows it."""
    from airflow.exceptions import AirflowNotFoundException
    from airflow.providers.common.compat.sdk import BaseHook

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        try:
            from airflow.models.connection import Connection
        except ImportError:  # a worker installed with the Task SDK alone: nothing else to ask
            raise
        return Connection.get_connection_from_secrets(conn_id)


class ConnectionLookup:
    """Mixin of the toolkit's hooks: get_connection through `connection`."""

    @classmethod
    def get_connection(cls, conn_id: str):
        return connection(conn_id)

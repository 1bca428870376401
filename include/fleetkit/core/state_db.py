"""The shared run state's database settings: which PostgreSQL (from an Airflow connection's
fields, checked), the schema of its tables, how long an audit append waits, and the error of a
database that does not answer. Imported by the store chooser (fleetkit.core.state) and the
PostgreSQL store (fleetkit.core.state_postgres), which import nothing of each other's but this.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleetkit.core.errors import FleetConfigError, FleetError

#: seconds an audit append waits for another writer of the same chain
CHAIN_LOCK_TIMEOUT_S = 60.0


class StateUnreachable(FleetError):
    """The shared state's database cannot be reached (or failed mid-operation): one line naming the
    connection id, never its password."""


# -- the database of the shared state: plain connection parameters ----------------------------------
DEFAULT_SCHEMA = "fleet_state"
_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")
#: extra fields of the connection passed on to libpq
LIBPQ_EXTRA = ("sslmode", "sslrootcert", "sslcert", "sslkey", "sslcrl", "target_session_attrs")


@dataclass(frozen=True)
class StateDB:
    """Where the shared state lives: a PostgreSQL database (the fields of an Airflow connection of
    type postgres; its `schema` field is the database) and the schema of the toolkit's tables
    (extra `state_schema`, default fleet_state). The password is never shown (repr, describe)."""

    conn_id: str
    host: str
    port: int = 5432
    dbname: str = "postgres"
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    schema: str = DEFAULT_SCHEMA
    connect_timeout: int = 10
    options: tuple[tuple[str, str], ...] = ()  # libpq settings (sslmode, ...)

    def describe(self) -> str:
        return (f"PostgreSQL connection {self.conn_id!r} ({self.host}:{self.port}, database {self.dbname}, "
                f"schema {self.schema})")

    def connect_kwargs(self) -> dict:
        """psycopg2.connect's keyword arguments (never a DSN string a log could show). Every commit
        waits for the server's flush (synchronous_commit on, whatever the server's default)."""
        kw = {"host": self.host, "port": self.port, "dbname": self.dbname, "connect_timeout": self.connect_timeout,
              "application_name": "fleetkit-state", "options": "-c synchronous_commit=on"}
        if self.user:
            kw["user"] = self.user
        if self.password is not None:
            kw["password"] = self.password
        kw.update(dict(self.options))
        return kw


def db_from_connection(conn_id: str, conn_type: str | None, host: str | None, port: int | None,
                       login: str | None, password: str | None, database: str | None, extra: dict | None) -> StateDB:
    """A StateDB from an Airflow connection's fields; FleetConfigError naming the connection when it
    is not a PostgreSQL one or lacks a host."""
    where = f"FLEET_STATE_CONN_ID: connection {conn_id!r}"
    if (conn_type or "").lower() not in ("postgres", "postgresql"):
        raise FleetConfigError(f"{where} is of type {conn_type!r}; the shared run state needs a connection of "
                               "type postgres")
    if not host:
        raise FleetConfigError(f"{where} names no host")
    extra = dict(extra or {})
    schema = str(extra.get("state_schema") or DEFAULT_SCHEMA)
    if not _SCHEMA_NAME.fullmatch(schema):
        raise FleetConfigError(f"{where}: extra state_schema {schema!r} must be 1 to 63 lower-case letters, digits "
                               "or '_' (not starting with a digit)")
    try:
        timeout = int(extra.get("connect_timeout") or 10)
    except (TypeError, ValueError):
        raise FleetConfigError(f"{where}: extra connect_timeout {extra.get('connect_timeout')!r} is not a whole "
                               "number of seconds") from None
    options = tuple((k, str(extra[k])) for k in LIBPQ_EXTRA if extra.get(k) not in (None, ""))
    return StateDB(conn_id=conn_id, host=host, port=int(port or 5432), dbname=database or "postgres", user=login,
                   password=password, schema=schema, connect_timeout=timeout, options=options)

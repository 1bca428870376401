"""Connections read straight from AIRFLOW_CONN_<ID> variables, without importing Airflow.

The incident commands of fleetctl (`lag`, `stuck`, `offsets ...`) must answer in about a second;
importing Airflow alone takes longer. When a connection is given as an environment variable in
Airflow's JSON form (what `make setup` and `fleetlab env` write), it is read here; anything
else (the URI form, the metadata database, a secrets backend, callbacks given as dotted paths,
managed OAuth) is left to Airflow: `from_env` answers None and the caller goes through the hooks
(fleet_airflow.clusters), so a connection never resolves two different ways.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from fleetkit.core.errors import FleetConfigError

#: librdkafka settings whose value Airflow's Kafka hook turns into a Python callable
CALLBACK_KEYS = ("error_cb", "throttle_cb", "stats_cb", "oauth_cb", "logger")


@dataclass(frozen=True)
class EnvConnection:
    conn_id: str
    conn_type: str | None
    host: str | None = None
    port: int | None = None
    login: str | None = None
    password: str | None = None
    extra: dict = field(default_factory=dict)
    schema: str | None = None  # a database connection's database (Airflow's "schema" field)


def env_name(conn_id: str) -> str:
    return f"AIRFLOW_CONN_{conn_id.upper()}"


def from_env(conn_id: str, environ: dict | None = None) -> EnvConnection | None:
    """The connection `conn_id` from its AIRFLOW_CONN_<ID> variable in JSON form, or None (not
    set, or in URI form: Airflow parses that). A JSON value that does not parse is an error naming
    the variable."""
    env = os.environ if environ is None else environ
    raw = env.get(env_name(conn_id))
    if raw is None or not raw.lstrip().startswith("{"):
        return None
    try:
        doc = json.loads(raw)
        extra = doc.get("extra") or {}
        if isinstance(extra, str):
            extra = json.loads(extra) if extra.strip() else {}
        port = doc.get("port")
        return EnvConnection(conn_id, doc.get("conn_type"), doc.get("host"), int(port) if port not in (None, "") else None,
                             doc.get("login"), doc.get("password"), dict(extra), doc.get("schema"))
    except (ValueError, TypeError, AttributeError) as e:
        raise FleetConfigError(f"{env_name(conn_id)} is not a valid JSON connection: {e}") from None


def kafka_config(conn: EnvConnection) -> dict | None:
    """The librdkafka config of a Kafka connection (its extra), or None when only Airflow's hook can
    build it (callbacks to resolve, managed OAuth)."""
    extra = dict(conn.extra)
    if not extra.get("bootstrap.servers"):
        raise FleetConfigError(f"{env_name(conn.conn_id)}: extra['bootstrap.servers'] must be provided")
    if any(k in extra for k in CALLBACK_KEYS) or "oauthbearer" in str(extra.get("sasl.mechanism", "")).lower():
        return None
    return extra

"""The shared run state in PostgreSQL (FLEET_STATE_CONN_ID): the per-cluster locks, the execution
journals and the audit chains' signed heads in the deployment's own database, reached from every
Airflow host and from fleetctl (fleetkit.core.state explains the choice).

The tables live in their own schema (default ``fleet_state``; the connection's extra
``state_schema``), created on first use (CREATE SCHEMA / TABLE IF NOT EXISTS, under a transaction
advisory lock so two first users do not race), never among Airflow's tables:

* ``locks``: one row per locked cluster identity (``identity`` primary key, ``owner``, ``doc`` the
  holder as JSON text, ``since``). Taken by INSERT ... ON CONFLICT DO NOTHING: one holder, atomically.
  A holder that dies leaves its row (as a lock file stays); only its owner deletes it
  (DELETE ... WHERE owner = it); a clear moves the row to ``cleared_locks`` in one statement.
* ``journal_entries``: one row per journal line (``journal`` its path as text, ``id`` a bigserial
  giving the order, ``line`` the JSON text: text, not jsonb, so a name holding NUL is kept as
  written). Each write is one transaction committed with synchronous_commit on before it returns:
  an intent is durable before the change, and a row is whole or absent (no torn line).
* ``audit_heads``, ``audit_sealed``, ``audit_registry``: the signed head, sealed marker and
  registry documents of each (data root, cluster) (as text, signed as the files were). Appends to
  one chain are serialized by a session advisory lock of the (data root, cluster) pair, taken on a
  connection of its own and released by closing it (also when the process dies).

psycopg2 is imported lazily (the optional extra ``shared-state``); connections get keyword
parameters, never a DSN string, so no password reaches a log or a message.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from fleetkit.core.errors import FleetConfigError, FleetError
from fleetkit.core.state_db import _SCHEMA_NAME, CHAIN_LOCK_TIMEOUT_S, StateDB, StateUnreachable

log = logging.getLogger(__name__)

#: the advisory-lock namespace of the toolkit (the two-key form: apart from Airflow's one-key locks)
LOCK_CLASS = 0x466C5374  # "FlSt"
_DDL_KEY = 1

DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.locks (
    identity text PRIMARY KEY,
    owner text NOT NULL,
    doc text NOT NULL,
    since timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS {s}.cleared_locks (
    id bigserial PRIMARY KEY,
    identity text NOT NULL,
    doc text NOT NULL,
    cleared_at timestamptz NOT NULL DEFAULT now());
CREATE TABLE IF NOT EXISTS {s}.journal_entries (
    id bigserial PRIMARY KEY,
    journal text NOT NULL,
    line text NOT NULL,
    written_at timestamptz NOT NULL DEFAULT now());
CREATE INDEX IF NOT EXISTS journal_entries_journal ON {s}.journal_entries (journal, id);
CREATE TABLE IF NOT EXISTS {s}.audit_heads (
    data_root text NOT NULL,
    cluster text NOT NULL,
    doc text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (data_root, cluster));
CREATE TABLE IF NOT EXISTS {s}.audit_sealed (
    data_root text NOT NULL,
    cluster text NOT NULL,
    doc text NOT NULL,
    sealed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (data_root, cluster));
CREATE TABLE IF NOT EXISTS {s}.audit_registry (
    data_root text PRIMARY KEY,
    doc text NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now());
"""


def _psycopg2():
    try:
        import psycopg2
        import psycopg2.extras  # noqa: F401
    except ImportError:
        raise FleetConfigError("FLEET_STATE_CONN_ID is set but psycopg2 is not installed: install the toolkit with "
                               "its shared-state extra (pip install 'kafka-fleet-toolkit[shared-state]')") from None
    return psycopg2


def _first_line(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())[:300]


def _chain_key(rid: str, cluster: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{rid}\0{cluster}".encode("utf-8")).digest()[:4], "big", signed=True)


class _PgJournalWriter:
    def __init__(self, store: "PostgresState", key: str):
        self.store, self.key = store, key

    def write(self, lines: list[str], sync: bool = True) -> None:
        """One transaction per write, committed (synchronous_commit on) before it returns."""
        if not lines:
            return
        with self.store.transaction() as cur:
            self.store._extras().execute_values(
                cur, f"INSERT INTO {self.store.s}.journal_entries (journal, line) VALUES %s",
                [(self.key, line) for line in lines])

    def close(self) -> None:
        pass


class PostgresState:
    """The store of one database (fleetkit.core.state describes the interface)."""

    shared = True
    name = "postgres"

    def __init__(self, db: StateDB):
        if not _SCHEMA_NAME.fullmatch(db.schema):
            raise FleetConfigError(f"{db.describe()}: schema {db.schema!r} is not a plain lower-case identifier")
        self.db = db
        self.s = db.schema  # a plain identifier: written into the statements as is
        self._conn = None
        self._pid = None
        self._ready = False

    def describe(self) -> str:
        return self.db.describe()

    # -- connections
    def _extras(self):
        return _psycopg2().extras

    def _unreachable(self, e: Exception, doing: str) -> StateUnreachable:
        return StateUnreachable(f"shared run state: {doing} {self.db.describe()} failed: {_first_line(e)} "
                                "(FLEET_STATE_CONN_ID; local files are never used instead)")

    def connect(self):
        """A new connection (autocommit off), the schema created on first use."""
        psycopg2 = _psycopg2()
        try:
            conn = psycopg2.connect(**self.db.connect_kwargs())
        except psycopg2.Error as e:
            raise self._unreachable(e, "connecting to") from None
        if not self._ready:
            try:
                with conn, conn.cursor() as cur:
                    cur.execute("SELECT pg_advisory_xact_lock(%s, %s)", (LOCK_CLASS, _DDL_KEY))
                    cur.execute(DDL.format(s=self.s))
            except psycopg2.Error as e:
                conn.close()
                raise self._unreachable(e, "creating the tables of") from None
            self._ready = True
        return conn

    def _shared_conn(self):
        if self._conn is None or self._conn.closed or self._pid != os.getpid():
            self._conn = self.connect()
            self._pid = os.getpid()
        return self._conn

    @contextmanager
    def transaction(self):
        """A cursor in one transaction on the process's connection: committed when the block ends,
        rolled back when it raises. A lost connection is StateUnreachable (and is not reused)."""
        psycopg2 = _psycopg2()
        conn = self._shared_conn()
        try:
            with conn, conn.cursor() as cur:
                yield cur
        except (psycopg2.OperationalError, psycopg2.InterfaceError) as e:
            try:
                conn.close()
            finally:
                self._conn = None
            raise self._unreachable(e, "a statement on") from None

    def close(self) -> None:
        if self._conn is not None and not self._conn.closed:
            self._conn.close()
        self._conn = None

    # -- locks: one row per identity
    def lock_ref(self, lock_dir, identity: str) -> str:
        return identity

    def lock_where(self, ref: str) -> str:
        return f"row {ref!r} of {self.s}.locks in {self.db.describe()}"

    def locks_where(self, lock_dir=None) -> str:
        return f"table {self.s}.locks of {self.db.describe()}"

    def lock_create(self, ref: str, doc: dict) -> bool:
        with self.transaction() as cur:
            cur.execute(f"INSERT INTO {self.s}.locks (identity, owner, doc) VALUES (%s, %s, %s) "
                        "ON CONFLICT (identity) DO NOTHING RETURNING identity",
                        (ref, doc["owner"], json.dumps(doc)))
            return cur.fetchone() is not None

    def lock_read(self, ref: str) -> dict | None:
        with self.transaction() as cur:
            cur.execute(f"SELECT doc FROM {self.s}.locks WHERE identity = %s", (ref,))
            row = cur.fetchone()
        return _doc(row[0], "unreadable lock row") if row else None

    def lock_release(self, ref: str, owner: str) -> bool:
        with self.transaction() as cur:
            cur.execute(f"DELETE FROM {self.s}.locks WHERE identity = %s AND owner = %s", (ref, owner))
            return cur.rowcount == 1

    def lock_clear(self, ref: str) -> tuple[dict | None, str]:
        with self.transaction() as cur:
            cur.execute(f"WITH gone AS (DELETE FROM {self.s}.locks WHERE identity = %s RETURNING identity, doc) "
                        f"INSERT INTO {self.s}.cleared_locks (identity, doc) SELECT identity, doc FROM gone "
                        "RETURNING doc", (ref,))
            row = cur.fetchone()
        return (_doc(row[0], "unreadable lock row") if row else None), f"table {self.s}.cleared_locks"

    def locks_held(self, lock_dir=None) -> list[tuple[str, dict]]:
        with self.transaction() as cur:
            cur.execute(f"SELECT identity, doc FROM {self.s}.locks ORDER BY since, identity")
            rows = cur.fetchall()
        return [(identity, _doc(doc, "unreadable lock row")) for identity, doc in rows]

    # -- journals: one row per line
    def journal_writer(self, path) -> _PgJournalWriter:
        return _PgJournalWriter(self, _jkey(path))

    def journal_lines(self, path) -> Iterator[str]:
        with self.transaction() as cur:
            cur.execute(f"SELECT line FROM {self.s}.journal_entries WHERE journal = %s ORDER BY id", (_jkey(path),))
            rows = cur.fetchall()
        return iter([r[0] for r in rows])

    def journal_exists(self, path) -> bool:
        with self.transaction() as cur:
            cur.execute(f"SELECT 1 FROM {self.s}.journal_entries WHERE journal = %s LIMIT 1", (_jkey(path),))
            return cur.fetchone() is not None

    # -- audit heads
    def head_where(self, rid: str, cluster: str) -> str:
        return f"row ({rid!r}, {cluster!r}) of {self.s}.audit_heads"

    def sealed_where(self, rid: str, cluster: str) -> str:
        return f"row ({rid!r}, {cluster!r}) of {self.s}.audit_sealed"

    def registry_where(self, rid: str) -> str:
        return f"row {rid!r} of {self.s}.audit_registry"

    @contextmanager
    def chain_lock(self, rid: str, cluster: str):
        """A session advisory lock of (data root, cluster) on a connection of its own, for the
        append; waits at most CHAIN_LOCK_TIMEOUT_S (lock_timeout)."""
        psycopg2 = _psycopg2()
        conn = self.connect()
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute(f"SET lock_timeout = '{int(CHAIN_LOCK_TIMEOUT_S * 1000)}ms'")
                try:
                    cur.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, _chain_key(rid, cluster)))
                except psycopg2.errors.LockNotAvailable:
                    raise FleetError(f"audit of cluster {cluster!r}: the append lock (advisory lock of the chain in "
                                     f"{self.db.describe()}) was held for more than {CHAIN_LOCK_TIMEOUT_S:.0f}s by "
                                     "another process") from None
                except psycopg2.Error as e:
                    raise self._unreachable(e, "locking an audit chain in") from None
            yield
        finally:
            conn.close()  # ends the session: the advisory lock goes with it

    def head_read(self, rid: str, cluster: str) -> dict | None:
        with self.transaction() as cur:
            cur.execute(f"SELECT doc FROM {self.s}.audit_heads WHERE data_root = %s AND cluster = %s", (rid, cluster))
            row = cur.fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError as e:
            raise FleetError(f"audit head {self.head_where(rid, cluster)} is not valid JSON ({e}); "
                             "check the audit with `fleetctl audit verify`") from None

    def head_write(self, rid: str, cluster: str, doc: dict) -> None:
        with self.transaction() as cur:
            cur.execute(f"INSERT INTO {self.s}.audit_heads (data_root, cluster, doc) VALUES (%s, %s, %s) "
                        "ON CONFLICT (data_root, cluster) DO UPDATE SET doc = EXCLUDED.doc, updated_at = now()",
                        (rid, cluster, json.dumps(doc, sort_keys=True)))

    def head_delete(self, rid: str, cluster: str) -> None:
        with self.transaction() as cur:
            cur.execute(f"DELETE FROM {self.s}.audit_heads WHERE data_root = %s AND cluster = %s", (rid, cluster))

    def sealed_exists(self, rid: str, cluster: str) -> bool:
        with self.transaction() as cur:
            cur.execute(f"SELECT 1 FROM {self.s}.audit_sealed WHERE data_root = %s AND cluster = %s", (rid, cluster))
            return cur.fetchone() is not None

    def sealed_read(self, rid: str, cluster: str) -> dict | None:
        with self.transaction() as cur:
            cur.execute(f"SELECT doc FROM {self.s}.audit_sealed WHERE data_root = %s AND cluster = %s", (rid, cluster))
            row = cur.fetchone()
        return None if row is None else _doc(row[0], None)

    def sealed_write(self, rid: str, cluster: str, doc: dict) -> None:
        with self.transaction() as cur:
            cur.execute(f"INSERT INTO {self.s}.audit_sealed (data_root, cluster, doc) VALUES (%s, %s, %s) "
                        "ON CONFLICT (data_root, cluster) DO UPDATE SET doc = EXCLUDED.doc",
                        (rid, cluster, json.dumps(doc, sort_keys=True)))

    def registry_read(self, rid: str) -> dict | None:
        with self.transaction() as cur:
            cur.execute(f"SELECT doc FROM {self.s}.audit_registry WHERE data_root = %s", (rid,))
            row = cur.fetchone()
        return None if row is None else _doc(row[0], None) or {"clusters": {}, "unreadable": True}

    def registry_update(self, rid: str, update: Callable[[dict | None], dict]) -> None:
        """update(registry now) written in one transaction holding the registry's row lock."""
        with self.transaction() as cur:
            cur.execute(f"INSERT INTO {self.s}.audit_registry (data_root, doc) VALUES (%s, '') "
                        "ON CONFLICT (data_root) DO NOTHING", (rid,))
            cur.execute(f"SELECT doc FROM {self.s}.audit_registry WHERE data_root = %s FOR UPDATE", (rid,))
            (text,) = cur.fetchone()
            now = None if text == "" else (_doc(text, None) or {"clusters": {}, "unreadable": True})
            doc = update(now)
            cur.execute(f"UPDATE {self.s}.audit_registry SET doc = %s, updated_at = now() WHERE data_root = %s",
                        (json.dumps(doc, sort_keys=True), rid))

    def head_clusters(self, rid: str) -> set[str]:
        with self.transaction() as cur:
            cur.execute(f"SELECT cluster FROM {self.s}.audit_heads WHERE data_root = %s", (rid,))
            return {r[0] for r in cur.fetchall()}


def _doc(text: str, unreadable: str | None) -> dict | None:
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        return doc
    return {"owner": unreadable} if unreadable else None


def _jkey(path) -> str:
    """A journal's key: its path as text, written the way pathlib writes it (the same whoever built it)."""
    return str(Path(path))

"""The shared run state in PostgreSQL (FLEET_STATE_CONN_ID), against the tests' real PostgreSQL:
the lock taken by one of several racing processes, kept when its holder is killed, seen by
fleetctl in another process; a journal intent committed and readable from another connection
before the change; the audit heads in the database, verified, a tampered head row caught; a
database that cannot be reached named in one line, never replaced by local files. Each test has
a schema of its own (the `pg_state` fixture); the processes below reach it as a deployment does,
through FLEET_STATE_CONN_ID and the connection's AIRFLOW_CONN_<ID> variable."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fleetkit.core import state
from fleetkit.core.state import StateUnreachable
from fleetkit.core.state_postgres import PostgresState

REPO = Path(__file__).resolve().parents[2]
CONN_ID = "fleet_state"


def _deployment_env(db, **extra) -> dict:
    """The environment of a process of a deployment whose shared state is `db` (the password in the
    connection variable, never in argv)."""
    env = dict(os.environ, FLEET_STATE_CONN_ID=CONN_ID, PYTHONPATH=str(REPO), **extra)
    env[f"AIRFLOW_CONN_{CONN_ID.upper()}"] = json.dumps({
        "conn_type": "postgres", "host": db.host, "port": db.port, "login": db.user, "password": db.password,
        "schema": db.dbname, "extra": {"state_schema": db.schema}})
    return env


def _python(code: str, env: dict, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code, *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=str(REPO))


def _kill(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGKILL)
    p.wait(timeout=30)


@pytest.fixture
def chosen_from_settings():
    """No store installed while the test runs (the process chooses it from FLEET_STATE_CONN_ID, as
    fleetctl and the gate do); whatever was installed is put back after it."""
    before = state.installed()
    state.install(None)
    yield
    installed = state.installed()
    if installed is not None and installed is not before and hasattr(installed, "close"):
        installed.close()
    state.install(before)


RACER = """
import os, sys, time
from fleetkit.core.locks import ClusterLock, ClusterLocked
go, me, lock_dir = sys.argv[1:4]
lock = ClusterLock(lock_dir, "kafka-cluster-id:race", "race")
lock.store.connect().close()  # connected (and the tables made) before the start
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.0005)
try:
    lock.acquire(me, "d", me)
    print("won", flush=True)
except ClusterLocked as e:
    print("locked", flush=True)
"""


def test_racing_processes_exactly_one_takes_the_lock(pg_state, tmp_path):
    """Three processes of three "hosts" (no shared lock folder: each its own) race for one cluster's
    lock in the database: one holds it, the others are told who does."""
    env = _deployment_env(pg_state.db)
    go = tmp_path / "go"
    racers = {f"d/r{i}": _python(RACER, env, str(go), f"d/r{i}", str(tmp_path / f"host{i}" / "locks"))
              for i in range(3)}
    try:
        for p in racers.values():
            assert p.stdout.readline().strip() == "ready", p.stderr.read()
        go.touch()
        said = {owner: p.communicate(timeout=60)[0].strip() for owner, p in racers.items()}
    finally:
        for p in racers.values():
            _kill(p)
    assert sorted(said.values()) == ["locked", "locked", "won"], said
    (winner,) = [owner for owner, out in said.items() if out == "won"]
    from fleetkit.core.locks import held_locks

    ((ref, holder),) = held_locks(tmp_path / "anywhere")
    assert (ref, holder["owner"]) == ("kafka-cluster-id:race", winner)
    assert not any((tmp_path / f"host{i}" / "locks").exists() for i in range(3))  # no lock file anywhere


HOLDER = """
import sys, time
from fleetkit.core.locks import ClusterLock
ClusterLock(sys.argv[1], "kafka-cluster-id:held", "prod").acquire(
    "fleetctl trim resume/runbook_trim/r1", "runbook_trim", "r1", kind="cli")
print("held", flush=True)
time.sleep(600)
"""


def test_a_holder_killed_keeps_the_lock_and_fleetctl_elsewhere_sees_and_clears_it(pg_state, tmp_path):
    """A holder killed with SIGKILL leaves its row, reported as a lock file was: a run that no
    longer runs, never taken over; `fleetctl lock status` in another process with
    FLEET_STATE_CONN_ID sees it; `fleetctl lock clear --force` (the holder process gone) clears it,
    audited, and keeps it in cleared_locks."""
    from fleetkit.core.locks import ClusterLock, ClusterLocked, cli_holder_alive

    env = _deployment_env(pg_state.db, FLEET_LOCK_DIR=str(tmp_path / "other-host-locks"),
                          FLEET_DATA_ROOT=str(tmp_path / "data"), FLEET_AIRFLOW_URL="http://127.0.0.1:9",
                          FLEET_AIRFLOW_USER="alice", FLEET_AIRFLOW_PASSWORD="pw-not-shown")
    holder = _python(HOLDER, env, str(tmp_path / "locks"))
    try:
        assert holder.stdout.readline().strip() == "held", holder.stderr.read()
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
    lock = ClusterLock(tmp_path / "locks", "kafka-cluster-id:held", "prod")
    h = lock.holder()
    assert (h["owner"], h["pid"], h["kind"]) == ("fleetctl trim resume/runbook_trim/r1", holder.pid, "cli")
    assert cli_holder_alive(h) is False  # its process is gone: the row stays all the same
    with pytest.raises(ClusterLocked) as e:
        lock.acquire("runbook_trim/r2", "runbook_trim", "r2",
                     holder_running=lambda d, r: (False, "failed"))
    assert "is no longer running (state failed)" in str(e.value) and e.value.holder_running is False
    assert "fleetctl lock clear prod --force" in str(e.value)
    assert not lock.release("runbook_trim/r2")  # only its holder releases it

    fleetctl = [sys.executable, "-m", "fleetctl.cli"]
    out = subprocess.run([*fleetctl, "lock", "status"], env=env, capture_output=True, text=True, cwd=str(REPO))
    assert out.returncode == 3, out.stderr
    (line,) = out.stdout.splitlines()
    assert line.split("\t")[:3] == ["prod", "dag=runbook_trim", "run=r1"]
    assert f"pid={holder.pid}" in line and f"{pg_state.db.schema}.locks" in line and "pw" not in line.split("\t")[-1]
    out = subprocess.run([*fleetctl, "lock", "clear", "prod", "--force"], env=env, capture_output=True, text=True,
                         cwd=str(REPO))
    assert out.returncode == 0, out.stderr
    assert "cleared the lock of cluster 'prod'" in out.stdout and f"{pg_state.db.schema}.cleared_locks" in out.stdout
    assert lock.holder() is None
    with pg_state.transaction() as cur:
        cur.execute(f"SELECT identity, doc FROM {pg_state.s}.cleared_locks")
        ((identity, doc),) = cur.fetchall()
    assert identity == "kafka-cluster-id:held" and json.loads(doc)["pid"] == holder.pid
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    (rec,) = audit.records(DataRoot(str(tmp_path / "data")), "prod")
    assert rec["event"] == "lock_cleared" and audit.verify(DataRoot(str(tmp_path / "data")))[0].ok


def test_a_lock_cleared_under_a_run_stops_it_before_its_next_change(pg_state, tmp_path):
    from fleetkit.core.journal import Journal, guarded, read_journal
    from fleetkit.core.locks import ClusterLock, LockLost

    lock = ClusterLock(tmp_path, "kafka-cluster-id:c", "c")
    lock.acquire("d/r1", "d", "r1")
    path = tmp_path / "journals" / "j.jsonl"
    with guarded(path, lambda: lock.check_held("d/r1")), Journal(path) as j:
        j.intent(1, step="a")
        j.outcome(1)
        ClusterLock(tmp_path / "elsewhere", "kafka-cluster-id:c", "c").clear()  # an operator, on another host
        with pytest.raises(LockLost, match="held by nobody"):
            j.intent(2, step="b")
    assert sorted(read_journal(path)) == [1]


WRITER = """
import sys, time
from fleetkit.core.journal import Journal
with Journal(sys.argv[1]) as j:
    j.intent(7, step="move", source="/a")
    print("intent", flush=True)
    time.sleep(600)  # the change would be made here
"""


def test_an_intent_is_committed_and_read_from_another_connection_before_the_change(pg_state, tmp_path):
    """The writer returns from `intent` once the row is committed (synchronous_commit on, although
    the lab's server runs with it off): another connection ("another host") reads it while the
    change has not been made, and it stays when the writer is killed."""
    from fleetkit.core.journal import exists, read_journal, summary

    path = tmp_path / "data" / "journals" / "trim" / "d" / "r" / "c1.jsonl"
    writer = _python(WRITER, _deployment_env(pg_state.db), str(path))
    try:
        assert writer.stdout.readline().strip() == "intent", writer.stderr.read()
        other_host = PostgresState(pg_state.db)  # its own connection
        state.install(other_host)
        try:
            assert read_journal(path)[7] == {**read_journal(path)[7], "status": "intent", "source": "/a"}
        finally:
            state.install(pg_state)
            other_host.close()
    finally:
        _kill(writer)
    assert summary(path)["unknown"][0]["step"] == "move" and exists(path)
    assert not path.exists()  # nothing on this host's disk
    with pg_state.transaction() as cur:
        cur.execute("SHOW synchronous_commit")
        assert cur.fetchone()[0] == "on"
    import psycopg2

    kw = {k: v for k, v in pg_state.db.connect_kwargs().items() if k != "options"}
    with psycopg2.connect(**kw) as plain, plain.cursor() as cur:  # the server's own default
        cur.execute("SHOW synchronous_commit")
        server_default = cur.fetchone()[0]
    plain.close()
    assert server_default == "off"  # so the store's "on" is its own doing


def test_audit_heads_in_the_database_verify_and_a_tampered_head_row_is_caught(pg_state, tmp_path):
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    root = DataRoot(str(tmp_path / "data"))
    rows = [audit.record(root, cluster="c1", dag_id="d", run_id=f"r{i}", action="a", event="planned",
                         message=f"plan {i}") for i in range(3)]
    (rep,) = audit.verify(root)
    assert rep.ok and rep.chained == 3, rep.problems
    assert not audit._root_folder(root).exists()  # no head file: the heads are rows
    assert audit.audit_clusters(root) == ["c1"]
    with pg_state.transaction() as cur:
        cur.execute(f"SELECT doc FROM {pg_state.s}.audit_heads WHERE cluster = 'c1'")
        (doc,) = cur.fetchone()
    head = json.loads(doc)
    assert head["hash"] == rows[-1]["hash"] and head["mac"]
    # the newest record removed from the head's view: the head row rewritten without the key
    with pg_state.transaction() as cur:
        cur.execute(f"UPDATE {pg_state.s}.audit_heads SET doc = %s WHERE cluster = 'c1'",
                    (json.dumps(dict(head, hash=rows[1]["hash"], record_id=rows[1]["record_id"])),))
    problems = [what for _, what in audit.verify_chain(root, "c1").problems]
    assert any(p.startswith("forged head") and f"{pg_state.s}.audit_heads" in p for p in problems), problems
    # the head row deleted: the end of the chain cannot be checked
    with pg_state.transaction() as cur:
        cur.execute(f"DELETE FROM {pg_state.s}.audit_heads WHERE cluster = 'c1'")
    problems = [what for _, what in audit.verify_chain(root, "c1").problems]
    assert any(p.startswith("no head") for p in problems), problems


APPENDER = """
import sys
from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
for i in range(int(sys.argv[3])):
    audit.record(DataRoot(sys.argv[1]), cluster="c1", dag_id="d", run_id=f"{sys.argv[2]}-{i}", action="a",
                 event="planned")
print("done", flush=True)
"""


def test_appends_from_two_processes_make_one_chain(pg_state, tmp_path):
    """Two writers append to one cluster's chain at once: the chain's advisory lock serializes
    them, the chain verifies whole."""
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    env = _deployment_env(pg_state.db)
    writers = [_python(APPENDER, env, str(tmp_path / "data"), name, "6") for name in ("a", "b")]
    try:
        for w in writers:
            out, err = w.communicate(timeout=120)
            assert out.strip() == "done", err
    finally:
        for w in writers:
            _kill(w)
    (rep,) = audit.verify(DataRoot(str(tmp_path / "data")))
    assert rep.ok and rep.chained == 12, rep.problems


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_database_is_one_line_naming_the_connection(state_pg, chosen_from_settings, tmp_path,
                                                                    monkeypatch, capsys):
    """Never a fall-back to local files: the store says which connection it could not reach, in one
    line without the password, and fleetctl exits non-zero with it."""
    db = dataclasses.replace(state_pg, conn_id="fleet_state_down", port=_closed_port(), password="pw-never-shown",
                             connect_timeout=2)
    assert "pw-never-shown" not in repr(db) and "pw-never-shown" not in db.describe()
    with pytest.raises(StateUnreachable) as e:
        PostgresState(db).lock_read("x")
    msg = str(e.value)
    assert "'fleet_state_down'" in msg and "\n" not in msg and "pw-never-shown" not in msg
    assert "local files are never used instead" in msg

    from fleetctl import cli

    for k, v in _deployment_env(db).items():
        if k.startswith(("FLEET_STATE", "AIRFLOW_CONN_FLEET_STATE")):
            monkeypatch.setenv(k, v)
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    (tmp_path / "locks").mkdir()
    state.FILES.lock_create(state.FILES.lock_ref(tmp_path / "locks", "fleet-name:x"), {"owner": "a local lock"})
    assert cli.main(["lock", "status"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "'fleet_state'" in err and "pw-never-shown" not in err


def test_a_connection_only_airflow_can_resolve_is_refused_without_the_adapter(chosen_from_settings, monkeypatch):
    from fleetkit.core.errors import FleetConfigError

    monkeypatch.setenv("FLEET_STATE_CONN_ID", "state_uri")
    monkeypatch.setenv("AIRFLOW_CONN_STATE_URI", "postgres://fleet:pw-never-shown@db.example:5432/airflow")
    with pytest.raises(FleetConfigError, match="FLEET_STATE_CONN_ID='state_uri'") as e:
        state.current()
    assert "pw-never-shown" not in str(e.value)
    monkeypatch.setenv("AIRFLOW_CONN_STATE_URI", json.dumps({"conn_type": "mysql", "host": "db.example"}))
    with pytest.raises(FleetConfigError, match="type 'mysql'.*type postgres"):
        state.current()


def test_the_adapter_installs_the_store_of_an_airflow_connection_for_the_gate(pg_state, chosen_from_settings,
                                                                               tmp_path, monkeypatch):
    """fleet_airflow.clusters resolves FLEET_STATE_CONN_ID through Airflow (here the URI form, which
    only Airflow parses) and installs its store; the gate's runbook (every gate task starts there)
    then locks and journals in the database."""
    from urllib.parse import quote

    from fleet_airflow import clusters, gate
    from types import SimpleNamespace as NS

    db = pg_state.db
    monkeypatch.setenv("FLEET_STATE_CONN_ID", "state_uri")
    monkeypatch.setenv("AIRFLOW_CONN_STATE_URI", f"postgres://{db.user}:{quote(db.password, safe='')}@{db.host}:"
                                                 f"{db.port}/{db.dbname}?state_schema={db.schema}")
    resolved = clusters.state_db("state_uri")
    assert (resolved.host, resolved.port, resolved.dbname, resolved.schema) == (db.host, db.port, db.dbname, db.schema)
    assert db.password not in repr(resolved)
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    rb = gate.runbook({"cluster": "c1"}, NS(capability="trim", name="trim_offsets"),
                      {"dag": NS(dag_id="runbook_trim"), "run_id": "r1"})
    store = state.installed()
    assert isinstance(store, PostgresState) and store.db.conn_id == "state_uri"
    assert clusters.install_state() is store  # one store per process
    from fleetkit.core.locks import ClusterLock

    ClusterLock(rb.lock_dir, "kafka-cluster-id:c1", "c1").acquire("runbook_trim/r1", "runbook_trim", "r1")
    with rb.open_journal() as j:
        j.intent(0, step="x")
    assert rb.execute_state() is None and not (tmp_path / "locks").exists() and not (tmp_path / "data").exists()
    state.install(pg_state)  # the test's own connection reads what the gate's wrote
    assert ClusterLock(tmp_path, "kafka-cluster-id:c1").holder()["owner"] == "runbook_trim/r1"
    from fleetkit.core.journal import read_journal

    assert read_journal(rb.journal)[0]["status"] == "intent"


def test_deploy_check_reaches_the_shared_state(pg_state, chosen_from_settings, tmp_path, monkeypatch, capsys):
    """`fleetctl deploy check` on a host of a deployment with FLEET_STATE_CONN_ID: the database
    answers, in place of the lock folder's check; one that does not is the check's error."""
    import yaml

    from fleetctl import cli

    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump({"clusters": [{"name": "c1", "kafka_conn_id": "c1_kafka", "approvers": ["a"]}]}))
    (tmp_path / "data").mkdir()
    for k, v in _deployment_env(pg_state.db, FLEET_FILE=str(fleet), FLEET_DATA_ROOT=str(tmp_path / "data"),
                                FLEET_LOCK_DIR=str(tmp_path / "no-such-folder")).items():
        if k.startswith(("FLEET_", "AIRFLOW_CONN_FLEET_STATE")):
            monkeypatch.setenv(k, v)
    assert cli.main(["deploy", "check"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"shared run state: PostgreSQL connection 'fleet_state' ({pg_state.db.host}:{pg_state.db.port}" in out
    assert pg_state.db.password not in out
    state.install(None)
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps({"conn_type": "postgres", "host": "127.0.0.1",
                                                                      "port": _closed_port(), "password": "pw-x"}))
    assert cli.main(["deploy", "check"]) == 2
    err = capsys.readouterr().err
    assert "'fleet_state'" in err and "pw-x" not in err


def test_heads_written_as_files_are_copied_into_the_database_and_verify_there(pg_state, tmp_path, monkeypatch,
                                                                              capsys):
    """A deployment moving its run state to the database: `fleetctl audit copy-heads` copies the
    signed heads and registry as they are, the chains verify there (without it: no head); a second
    copy is refused."""
    from fleetctl import cli
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    root = DataRoot(str(tmp_path / "data"))
    monkeypatch.setenv("FLEET_AUDIT_HEADS_DIR", str(tmp_path / "heads"))
    state.install(None)  # the files, as before the move
    for c in ("c1", "c2"):
        audit.record(root, cluster=c, dag_id="d", run_id="r", action="a", event="planned")
    state.install(pg_state)
    assert any(what.startswith("no head") for rep in audit.verify(root) for _, what in rep.problems)
    for k, v in _deployment_env(pg_state.db, FLEET_DATA_ROOT=str(tmp_path / "data")).items():
        if k.startswith(("FLEET_", "AIRFLOW_CONN_FLEET_STATE")):
            monkeypatch.setenv(k, v)
    assert cli.main(["audit", "copy-heads"]) == 0
    assert "COPIED\tcluster=c1\nCOPIED\tcluster=c2\n" in capsys.readouterr().out
    assert [(rep.cluster, rep.ok, rep.chained) for rep in audit.verify(root)] == [("c1", True, 1), ("c2", True, 1)]
    audit.record(root, cluster="c1", dag_id="d", run_id="r2", action="a", event="planned")
    assert all(rep.ok for rep in audit.verify(root))
    assert cli.main(["audit", "copy-heads"]) == 2
    assert "already in" in capsys.readouterr().err

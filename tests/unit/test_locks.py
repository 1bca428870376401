"""The per-cluster lock: keyed by the cluster's identity, never stolen, cleared by an operator; the
tests taking `state_store` run against each shared-state store (local files, PostgreSQL)."""

from __future__ import annotations

import json
from types import SimpleNamespace as NS

import pytest

from fleetkit.core.locks import (
    ClusterLock, ClusterLocked, find_locks, held_locks, lock_identity, zookeeper_identity,
)


class _Kafka:
    """The one call lock_identity makes (the cluster id from a metadata response)."""

    def __init__(self, cluster_id):
        self.id = cluster_id

    def cluster_id(self):
        return self.id


def _zk(hosts, chroot=""):
    return NS(hosts=hosts, chroot=chroot)


@pytest.mark.parametrize("hosts, chroot", [
    ("zk1:2181,zk2:2181", "/kafka"), ("zk2:2181,zk1:2181", "/kafka"), ("ZK2,zk1", "/kafka"),
    (" zk1:2181 , zk2:2181,zk1:2181", "/kafka/"), ("zk2:2181,zk1:2181/kafka", ""), ("zk1,zk2/kafka", ""),
])
def test_zookeeper_identity_is_normalised(hosts, chroot):
    assert zookeeper_identity(hosts, chroot) == "zookeeper:zk1:2181,zk2:2181/kafka"


def test_zookeeper_identity_tells_chroots_ports_and_ensembles_apart():
    ids = {zookeeper_identity("zk1:2181", ""), zookeeper_identity("zk1:2181", "/kafka"),
           zookeeper_identity("zk1:2182", "/kafka"), zookeeper_identity("zk1,zk3", "/kafka"),
           zookeeper_identity("[::1]", "/kafka"), zookeeper_identity("[::1]:2182", "/kafka")}
    assert len(ids) == 6
    assert zookeeper_identity("[::1]", "") == "zookeeper:[::1]:2181"


def test_identity_prefers_the_cluster_id_then_zookeeper_then_the_name():
    c = NS(name="prod-a")
    assert lock_identity(c, _Kafka("Xy-3_9"), _zk("zk1")) == "kafka-cluster-id:Xy-3_9"
    assert lock_identity(c, _Kafka(None), _zk("zk2,zk1", "/kafka")) == "zookeeper:zk1:2181,zk2:2181/kafka"
    assert lock_identity(c, _Kafka(None), None) == "fleet-name:prod-a"


def test_two_fleet_names_for_one_cluster_share_one_lock(state_store, tmp_path):
    a = ClusterLock.for_cluster(tmp_path, NS(name="prod"), _Kafka(None), _zk("zk1:2181,zk2:2181", "/kafka"))
    b = ClusterLock.for_cluster(tmp_path, NS(name="prod-alias"), _Kafka(None), _zk("zk2,zk1/kafka"))
    assert a.path == b.path
    a.acquire("dag/run1", "dag", "run1")
    with pytest.raises(ClusterLocked) as e:
        b.acquire("dag2/run2", "dag2", "run2")
    assert "DAG 'dag' run 'run1'" in str(e.value) and "cluster 'prod'" in str(e.value)
    other = ClusterLock.for_cluster(tmp_path, NS(name="prod"), _Kafka(None), _zk("zk1:2181,zk2:2181", "/other"))
    other.acquire("dag2/run2", "dag2", "run2")  # another chroot: another cluster


def test_hostile_identities_make_safe_distinct_file_names(tmp_path):
    names = ["kafka-cluster-id:../../etc", "fleet-name:a/b", "fleet-name:a_b", "fleet-name:{{ x }}\n'$(rm)'"]
    paths = {ClusterLock(tmp_path, n).path for n in names}
    assert len(paths) == 4 and all(p.parent == tmp_path and "/" not in p.name for p in paths)


def test_a_holder_that_no_longer_runs_is_reported_with_how_to_clear_it_never_stolen(state_store, tmp_path):
    lock = ClusterLock(tmp_path, "zookeeper:zk1:2181/kafka", "prod a")
    lock.acquire("d/r1", "d", "r1")
    asked = []

    def gone(dag_id, run_id):
        asked.append((dag_id, run_id))
        return False, "failed"

    with pytest.raises(ClusterLocked) as e:
        ClusterLock(tmp_path, "zookeeper:zk1:2181/kafka", "prod b").acquire("d/r2", "d", "r2", holder_running=gone)
    assert asked == [("d", "r1")]
    msg = str(e.value)
    assert "holder run 'r1' of DAG 'd' is no longer running (state failed)" in msg
    assert "after checking the cluster, clear it with fleetctl lock clear 'prod a'" in msg.replace("After", "after")
    assert lock.holder()["owner"] == "d/r1"  # still held by the gone run


@pytest.mark.parametrize("answer, expect", [
    (True, "Wait for it to finish"), ((True, "running"), "Wait for it to finish"),
    (None, "could not be told"), (False, "is no longer running (state unknown)"),
])
def test_holder_running_answers(state_store, tmp_path, answer, expect):
    ClusterLock(tmp_path, "i").acquire("d/r1", "d", "r1")
    with pytest.raises(ClusterLocked, match=expect.replace("(", r"\(").replace(")", r"\)")):
        ClusterLock(tmp_path, "i").acquire("d/r2", "d", "r2", holder_running=lambda d, r: answer)


def test_a_failing_running_check_keeps_the_lock(state_store, tmp_path):
    ClusterLock(tmp_path, "i").acquire("d/r1", "d", "r1")

    def broken(dag_id, run_id):
        raise RuntimeError("api down")

    with pytest.raises(ClusterLocked, match="could not be told"):
        ClusterLock(tmp_path, "i").acquire("d/r2", "d", "r2", holder_running=broken)
    assert ClusterLock(tmp_path, "i").holder()["owner"] == "d/r1"


def test_the_same_run_reenters_without_asking(state_store, tmp_path):
    lock = ClusterLock(tmp_path, "i")
    lock.acquire("d/r1", "d", "r1")
    lock.acquire("d/r1", "d", "r1", holder_running=lambda d, r: pytest.fail("asked"))


def test_clear_moves_the_lock_aside_and_find_by_name_or_identity(state_store, tmp_path):
    lock = ClusterLock(tmp_path, "zookeeper:zk1:2181/kafka", "prod")
    lock.acquire("d/r1", "d", "r1")
    (held,) = held_locks(tmp_path)
    assert held[1]["identity"] == "zookeeper:zk1:2181/kafka" and held[1]["cluster"] == "prod"
    assert [x.path for x in find_locks(tmp_path, "prod")] == [lock.path]
    assert [x.path for x in find_locks(tmp_path, "zookeeper:zk1:2181/kafka")] == [lock.path]
    assert find_locks(tmp_path, "other") == []
    (found,) = find_locks(tmp_path, "prod")
    assert found.clear()["owner"] == "d/r1"
    assert lock.holder() is None and held_locks(tmp_path) == []
    assert _kept(state_store, tmp_path)["run_id"] == "r1"  # kept as a record
    ClusterLock(tmp_path, "zookeeper:zk1:2181/kafka", "prod").acquire("d/r2", "d", "r2")


def _kept(store, lock_dir) -> dict:
    """The one cleared lock the store kept: a file in <lock dir>/cleared, or a row of cleared_locks."""
    if store.shared:
        with store.transaction() as cur:
            cur.execute(f"SELECT doc FROM {store.s}.cleared_locks")
            (row,) = cur.fetchall()
        return json.loads(row[0])
    (kept,) = (lock_dir / "cleared").iterdir()
    return json.loads(kept.read_text())


def test_fleetctl_lock_status_and_clear(state_store, tmp_path, capsys, monkeypatch):
    from fleetctl import cli

    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path))
    assert cli.main(["lock", "status"]) == 0
    assert "no cluster is locked" in capsys.readouterr().out
    ClusterLock(tmp_path, "zookeeper:zk1:2181/kafka", "prod 'a'").acquire("d/r1", "d", "r1")
    assert cli.main(["lock", "status"]) == 3
    line = capsys.readouterr().out.strip()
    assert line.split("\t")[:3] == ["prod 'a'", "dag=d", "run=r1"] and "identity=zookeeper:zk1:2181/kafka" in line
    assert cli.main(["lock", "clear", "nope"]) == 2
    assert "no lock held for cluster 'nope'" in capsys.readouterr().err
    # no api-server answers here: whether run r1 still runs cannot be told, so nothing is cleared
    # without --force, and the clearing is audited on the holder run
    monkeypatch.setenv("FLEET_AIRFLOW_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("FLEET_AIRFLOW_USER", "alice")
    monkeypatch.setenv("FLEET_AIRFLOW_PASSWORD", "pw-not-shown")
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    assert cli.main(["lock", "clear", "prod 'a'"]) == 2
    err = capsys.readouterr().err
    assert "could not be told" in err and "--force" in err and "pw-not-shown" not in err
    assert len(held_locks(tmp_path)) == 1
    assert cli.main(["lock", "clear", "prod 'a'", "--force"]) == 0
    assert "cleared the lock of cluster \"prod 'a'\"" in capsys.readouterr().out
    assert held_locks(tmp_path) == []
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    (rec,) = audit.records(DataRoot(str(tmp_path / "data")), "prod 'a'")
    assert (rec["event"], rec["dag_id"], rec["run_id"]) == ("lock_cleared", "d", "r1")
    # no api-server verified anyone: the audit says so rather than trusting FLEET_AIRFLOW_USER
    assert rec["actor"].startswith("unverified:") and "alice" not in rec["actor"]
    assert cli.needs_airflow(cli.build_parser().parse_args(["lock", "clear", "x"])) is False


def test_taking_releasing_and_clearing_a_lock_fsyncs_the_lock_folder(tmp_path, monkeypatch):
    from tests.helpers import fsync_spy

    synced = fsync_spy(monkeypatch)
    lock = ClusterLock(tmp_path, "fleet-name:lab", "lab")
    lock.acquire("run-1", "d", "r1")
    assert str(tmp_path) in synced
    synced.clear()
    assert lock.release("run-1")
    assert str(tmp_path) in synced
    lock.acquire("run-2", "d", "r2")
    synced.clear()
    lock.clear()
    assert str(tmp_path) in synced and str(tmp_path / "cleared") in synced


def test_a_lock_a_running_fleetctl_holds_is_never_cleared_even_with_force(tmp_path, capsys, monkeypatch):
    """`fleetctl trim resume` holds the lock while it moves files; its Airflow run reads as finished.
    `lock clear --force` must not free the cluster for a second runbook while that process runs."""
    import socket
    import subprocess
    import sys

    from fleetctl import cli

    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("FLEET_AIRFLOW_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("FLEET_AIRFLOW_USER", "alice")
    monkeypatch.setenv("FLEET_AIRFLOW_PASSWORD", "pw")
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    lock = ClusterLock(tmp_path, "zookeeper:zk1:2181/kafka", "prod")
    lock.acquire("fleetctl trim resume/runbook_trim/r1", "runbook_trim", "r1", kind="cli")
    assert cli.main(["lock", "clear", "prod", "--force"]) == 2  # this very process holds it
    assert "held by a running fleetctl" in capsys.readouterr().err and len(held_locks(tmp_path)) == 1
    # a holder on another host cannot be checked from here: --force (after checking that host) clears it
    doc = json.loads(lock.path.read_text())
    lock.path.write_text(json.dumps(dict(doc, host="another-host.example")))
    assert cli.main(["lock", "clear", "prod"]) == 2
    assert "on another host" in capsys.readouterr().err
    # a holder process that is gone: cleared (with --force: its run ended), after the audit says so
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    lock.path.write_text(json.dumps(dict(doc, host=socket.gethostname(), pid=gone.pid)))
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    real_clear = ClusterLock.clear

    def clear_after_audit(self):
        assert [r["event"] for r in audit.records(DataRoot(str(tmp_path / "data")), "prod")] == ["lock_cleared"]
        return real_clear(self)

    monkeypatch.setattr(ClusterLock, "clear", clear_after_audit)
    assert cli.main(["lock", "clear", "prod", "--force"]) == 0
    assert held_locks(tmp_path) == []


def test_a_run_whose_lock_was_cleared_stops_before_its_next_change(state_store, tmp_path):
    """Every change journals its intent first; under the lock, the intent first checks the lock is
    still the run's: cleared meanwhile, nothing more is changed and no intent is written."""
    from fleetkit.core.journal import Journal, guarded, read_journal
    from fleetkit.core.locks import LockLost

    lock = ClusterLock(tmp_path / "locks", "zookeeper:zk1:2181/kafka", "prod")
    lock.acquire("d/r1", "d", "r1")
    journal_path = tmp_path / "journal.jsonl"
    made = []
    with guarded(journal_path, lambda: lock.check_held("d/r1")):
        with Journal(journal_path) as j:
            j.intent(1, step="move a")
            made.append("a")
            j.outcome(1)
            lock.clear()  # an operator clears it between two changes
            with pytest.raises(LockLost, match="no longer held by 'd/r1'"):
                j.intent(2, step="move b")
                made.append("b")
    assert made == ["a"] and sorted(read_journal(journal_path)) == [1]
    with Journal(journal_path) as j:  # outside the guarded block the journal is unguarded
        j.intent(3, step="after")

"""The audit's hash chain: every kind of tampering is reported with the record's id; intact chains,
records from before the chain and a writer killed mid-append are not errors."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from fleetkit.core import audit
from fleetkit.core.datasets import SCHEMAS, DataRoot, write_collection

HOSTILE = 'lab "x"; rm -rf * {{ y }} é'
#: a test that runs with the heads in each shared-state store in turn (files, PostgreSQL)
both_stores = pytest.mark.usefixtures("state_store")


@pytest.fixture
def heads(tmp_path, monkeypatch):
    d = tmp_path / "heads"
    monkeypatch.setenv("FLEET_AUDIT_HEADS_DIR", str(d))
    return d


@pytest.fixture
def root(tmp_path, heads):
    return DataRoot(tmp_path / "data")


def _append(root, cluster="lab", n=5, start=None):
    start = start or dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)
    return [audit.record(root, cluster=cluster, dag_id="runbook_stuck_reset", run_id=f"r{i}",
                         action="reset_offsets", event="planned", actor="alice", digest=f"sha256:{i}",
                         message=f"step {i}", details={"i": i}, now=start + dt.timedelta(seconds=i))
            for i in range(n)]


def _file_of(root, record_id):
    for f in root.files("audit"):
        if record_id in pq.read_table(f).column("record_id").to_pylist():
            return f
    raise AssertionError(record_id)


def _rewrite(path, change):
    rows = pq.read_table(path).to_pylist()
    rows = [change(dict(r)) for r in rows]
    pq.write_table(pa.Table.from_pylist(rows, schema=SCHEMAS["audit"]), path)


def _problems(root, cluster="lab"):
    (rep,) = audit.verify(root, cluster)
    problems: dict[str, str] = {}
    for rid, what in rep.problems:
        problems[rid] = f"{problems[rid]}; {what}" if rid in problems else what
    return rep, problems


@both_stores
def test_intact_chain_links_each_record_to_the_one_before(root):
    rows = _append(root, n=4)
    assert rows[0]["prev_hash"] == audit.GENESIS
    assert [r["prev_hash"] for r in rows[1:]] == [r["hash"] for r in rows[:-1]]
    assert all(audit.record_hash(r) == r["hash"] for r in rows)
    rep, problems = _problems(root)
    assert rep.ok and problems == {} and rep.chained == 4 and rep.before_chain == 0
    stored = {r["record_id"]: r for r in audit.records(root, "lab")}
    assert stored[rows[2]["record_id"]]["hash"] == rows[2]["hash"]


@both_stores
def test_modified_record_is_reported(root):
    rows = _append(root)
    _rewrite(_file_of(root, rows[2]["record_id"]), lambda r: {**r, "actor": "mallory"})
    rep, problems = _problems(root)
    assert not rep.ok
    assert "modified" in problems[rows[2]["record_id"]]


@both_stores
def test_modified_record_with_its_hash_recomputed_is_reported(root):
    rows = _append(root)

    def forge(r):
        r = {**r, "details": json.dumps({"i": 99})}
        return {**r, "hash": audit.record_hash(r)}

    _rewrite(_file_of(root, rows[2]["record_id"]), forge)
    rep, problems = _problems(root)
    assert not rep.ok
    assert "chain broken" in problems[rows[3]["record_id"]]


@both_stores
def test_removed_record_is_reported(root):
    rows = _append(root)
    os.remove(_file_of(root, rows[2]["record_id"]))
    rep, problems = _problems(root)
    assert not rep.ok
    assert "chain broken" in problems[rows[3]["record_id"]]
    assert rows[1]["record_id"] in problems[rows[3]["record_id"]]  # the last intact record before the gap


@both_stores
def test_removed_first_record_is_reported(root):
    rows = _append(root)
    os.remove(_file_of(root, rows[0]["record_id"]))
    rep, problems = _problems(root)
    assert "chain broken" in problems[rows[1]["record_id"]]


@both_stores
def test_inserted_record_is_reported(root):
    rows = _append(root)
    forged = {**rows[1], "record_id": "f" * 32, "message": "nothing happened here",
              "observed_at": rows[1]["observed_at"] + dt.timedelta(milliseconds=500), "prev_hash": rows[1]["hash"]}
    forged["hash"] = audit.record_hash(forged)
    write_collection(root, "lab", forged["observed_at"], {"audit": [forged]})
    rep, problems = _problems(root)
    assert not rep.ok
    assert "off the chain" in problems["f" * 32]
    assert rep.chained == 5


@both_stores
def test_reordered_records_are_reported(root):
    a, b, c, d, e = _append(root)
    # c moved before b, each rewritten with a consistent hash of its own
    c2 = {**c, "prev_hash": a["hash"]}
    c2["hash"] = audit.record_hash(c2)
    b2 = {**b, "prev_hash": c2["hash"]}
    b2["hash"] = audit.record_hash(b2)
    _rewrite(_file_of(root, c["record_id"]), lambda r: c2)
    _rewrite(_file_of(root, b["record_id"]), lambda r: b2)
    rep, problems = _problems(root)
    assert not rep.ok
    assert "chain broken" in problems[d["record_id"]]


@both_stores
def test_swapped_timestamps_are_reported(root):
    rows = _append(root)
    t1, t2 = rows[1]["observed_at"], rows[2]["observed_at"]
    _rewrite(_file_of(root, rows[1]["record_id"]), lambda r: {**r, "observed_at": t2})
    _rewrite(_file_of(root, rows[2]["record_id"]), lambda r: {**r, "observed_at": t1})
    rep, problems = _problems(root)
    assert "modified" in problems[rows[1]["record_id"]] and "modified" in problems[rows[2]["record_id"]]


@both_stores
def test_truncated_tail_is_reported(root):
    rows = _append(root)
    os.remove(_file_of(root, rows[-1]["record_id"]))
    rep, problems = _problems(root)
    assert not rep.ok
    assert "truncated" in problems[rows[-1]["record_id"]]


@both_stores
def test_whole_audit_removed_is_reported(root):
    rows = _append(root, n=2)
    for f in root.files("audit"):
        os.remove(f)
    (rep,) = audit.verify(root)  # the cluster is still found through its head and the registry
    said = [what for rid, what in rep.problems if rid == rows[-1]["record_id"]]
    assert rep.cluster == "lab" and any("truncated" in w for w in said) and any("deleted" in w for w in said)


def test_lost_head_is_reported(root, heads):
    _append(root, n=2)
    for p in heads.rglob("*.head.json"):
        p.unlink()
    rep, problems = _problems(root)
    assert not rep.ok and "no head file" in " ".join(problems.values())


def test_lost_head_is_rebuilt_by_the_next_append_and_stays_a_failure(root, heads):
    rows = _append(root, n=2)
    for p in heads.rglob("*.head.json"):
        p.unlink()
    nxt = audit.record(root, cluster="lab", dag_id="d", run_id="r9", action="a", event="verified")
    assert nxt["prev_hash"] == rows[-1]["hash"]  # nothing lost: the chain goes on from the newest record
    rep, problems = _problems(root)
    assert not rep.ok and rep.chained == 3
    assert "re-anchored" in problems[rows[-1]["record_id"]]
    audit.record(root, cluster="lab", dag_id="d", run_id="r10", action="a", event="verified")
    rep, problems = _problems(root)
    assert not rep.ok and "re-anchored" in problems[rows[-1]["record_id"]]  # for good


def test_head_and_newest_record_deleted_then_a_routine_append_fails_verify(root, heads):
    """The cut of the filing: delete the head file and the newest record, let the next routine
    append rebuild the head: verify must fail (it only warned)."""
    rows = _append(root, n=4)
    for p in heads.rglob("*.head.json"):
        p.unlink()
    os.remove(_file_of(root, rows[-1]["record_id"]))
    audit.record(root, cluster="lab", dag_id="d", run_id="r9", action="a", event="verified")
    rep, problems = _problems(root)
    assert not rep.ok
    assert "re-anchored" in problems[rows[-2]["record_id"]]


def test_head_rewritten_without_the_key_is_reported_and_not_laundered_by_the_next_append(root, heads):
    rows = _append(root, n=4)
    (head_file,) = heads.rglob("*.head.json")
    os.remove(_file_of(root, rows[-1]["record_id"]))
    head = json.loads(head_file.read_text())
    # the head moved back to the record before, signature kept (the forger has no key)
    head.update(hash=rows[-2]["hash"], record_id=rows[-2]["record_id"])
    head_file.write_text(json.dumps(head))
    rep, problems = _problems(root)
    assert not rep.ok and "forged head" in problems[rows[-2]["record_id"]]
    audit.record(root, cluster="lab", dag_id="d", run_id="r9", action="a", event="verified")
    rep, problems = _problems(root)
    assert not rep.ok and "re-anchored" in problems[rows[-2]["record_id"]]


def _rechain_unkeyed(root, rows, heads, change, legacy=False):
    """What someone without the key can do: change a record, then recompute the chain's plain
    SHA-256 hashes (and the head) so every link and the head agree again. `legacy`: what an earlier
    version wrote instead (before the audit key, and so before the chains' registry)."""
    if legacy:
        audit._registry_path(root).unlink(missing_ok=True)
    prev = audit.GENESIS
    forged = []
    for r in rows:
        r = {**change(dict(r)), "key_id": None, "prev_hash": prev}
        r["hash"] = audit.record_hash(r)
        forged.append(r)
        prev = r["hash"]
    for old, new in zip(rows, forged):
        _rewrite(_file_of(root, old["record_id"]), lambda r, new=new: new)
    (head_file,) = heads.rglob("*.head.json")
    head = {"cluster": "lab", "data_root": audit.root_id(root), "hash": forged[-1]["hash"],
            "record_id": forged[-1]["record_id"], "observed_at": forged[-1]["observed_at"].isoformat()}
    head_file.write_text(json.dumps(head))
    return forged


def test_chain_rewritten_with_recomputed_unkeyed_hashes_is_reported(root, heads):
    rows = _append(root, n=4)
    forged = _rechain_unkeyed(root, rows, heads,
                              lambda r: {**r, "actor": "mallory"} if r["run_id"] == "r2" else r)
    rep, problems = _problems(root)
    assert not rep.ok
    assert "unsigned head" in " ".join(problems.values())
    # the next routine append does not make it pass: it re-anchors on the unsigned head
    _append(root, n=1, start=dt.datetime(2026, 3, 2, tzinfo=dt.timezone.utc))
    rep, problems = _problems(root)
    assert not rep.ok and "re-anchored" in problems[forged[-1]["record_id"]]


def test_records_rewritten_from_one_point_with_unkeyed_hashes_are_reported(root, heads):
    rows = _append(root, n=4)
    prev = rows[1]["hash"]
    forged = []
    for r in rows[2:]:
        r = {**r, "actor": "mallory", "key_id": None, "prev_hash": prev}
        r["hash"] = audit.record_hash(r)
        forged.append(r)
        prev = r["hash"]
    for old, new in zip(rows[2:], forged):
        _rewrite(_file_of(root, old["record_id"]), lambda r, new=new: new)
    (head_file,) = heads.rglob("*.head.json")
    head = json.loads(head_file.read_text())
    head.update(hash=forged[-1]["hash"])
    head_file.write_text(json.dumps(head))
    rep, problems = _problems(root)
    assert not rep.ok
    assert "unsigned" in problems[rows[2]["record_id"]] and "unsigned" in problems[rows[3]["record_id"]]
    assert "forged head" in " ".join(problems.values())


KEY_A = "a:" + "1" * 64
KEY_B = "b:" + "2" * 64


@both_stores
def test_rotated_keys_verify_with_the_previous_keys_listed(root, monkeypatch):
    monkeypatch.setenv(audit.KEY_VAR, KEY_A)
    monkeypatch.delenv(audit.PREVIOUS_KEYS_VAR, raising=False)
    old = _append(root, n=2)
    monkeypatch.setenv(audit.KEY_VAR, KEY_B)
    monkeypatch.setenv(audit.PREVIOUS_KEYS_VAR, KEY_A)
    new = _append(root, n=2, start=dt.datetime(2026, 3, 2, tzinfo=dt.timezone.utc))
    assert {r["key_id"] for r in old} == {"a"} and {r["key_id"] for r in new} == {"b"}
    assert new[0]["prev_hash"] == old[-1]["hash"]
    rep, problems = _problems(root)
    assert rep.ok and rep.chained == 4, problems

    monkeypatch.delenv(audit.PREVIOUS_KEYS_VAR)
    rep, problems = _problems(root)
    assert not rep.ok
    assert "'a'" in problems[old[-1]["record_id"]] and "unknown key" in problems[old[-1]["record_id"]]
    monkeypatch.setenv(audit.KEY_VAR, KEY_A)  # the old key alone does not know the new records either
    rep, problems = _problems(root)
    assert not rep.ok and "'b'" in " ".join(problems.values())


def test_key_without_an_id_is_named_by_its_hash():
    import hashlib

    secret = "3" * 64
    key = audit.parse_key(secret)
    assert key.key_id == hashlib.sha256(secret.encode()).hexdigest()[:8]
    assert secret not in repr(key) and secret not in str(audit.load_keys({audit.KEY_VAR: secret}))


def test_no_key_refuses_to_write_and_names_the_variable(root, monkeypatch, caplog):
    monkeypatch.delenv(audit.KEY_VAR, raising=False)
    with pytest.raises(audit.FleetError) as e:
        audit.record(root, cluster="lab", dag_id="d", run_id="r", action="a", event="planned")
    assert "AIRFLOW_VAR_FLEET_AUDIT_KEY" in str(e.value)
    assert audit.records(root, "lab") == []


@pytest.mark.parametrize("value", ["tiny-secret", "x y:" + "4" * 64, "id:tooshort"])
def test_bad_key_is_refused_without_showing_it(root, monkeypatch, value):
    monkeypatch.setenv(audit.KEY_VAR, value)
    with pytest.raises(audit.FleetError) as e:
        audit.record(root, cluster="lab", dag_id="d", run_id="r", action="a", event="planned")
    assert "AIRFLOW_VAR_FLEET_AUDIT_KEY" in str(e.value)
    assert value.rpartition(":")[2] not in str(e.value)


def test_the_key_is_in_no_record_head_or_log(root, heads, caplog):
    import logging

    secret = audit.load_keys().current._secret.decode()
    with caplog.at_level(logging.DEBUG):
        rows = _append(root, n=2)
        for p in heads.rglob("*.head.json"):
            p.unlink()
        _append(root, n=1, start=dt.datetime(2026, 3, 2, tzinfo=dt.timezone.utc))
    assert secret not in caplog.text
    assert all(secret not in json.dumps(r, default=str) for r in audit.records(root, "lab"))
    assert all(secret not in p.read_text() for p in heads.rglob("*.json"))
    assert rows


def test_a_chain_from_before_the_key_is_sealed_once_and_goes_on_keyed(root, heads):
    """Records chained with the plain SHA-256 of earlier versions: counted `before the key`; the
    unsigned head fails verify until `seal`, and the keyed chain continues from them."""
    rows = _append(root, n=3)
    legacy = _rechain_unkeyed(root, rows, heads, lambda r: r, legacy=True)  # what an earlier version wrote
    rep, problems = _problems(root)
    assert not rep.ok and "unsigned head" in " ".join(problems.values())
    audit.seal(root, "lab")
    rep, problems = _problems(root)
    assert rep.ok and rep.before_key == 3 and "sealed" in rep.warnings[0], problems
    nxt = audit.record(root, cluster="lab", dag_id="d", run_id="r9", action="a", event="verified")
    assert nxt["prev_hash"] == legacy[-1]["hash"] and nxt["key_id"] == "tests"
    rep, problems = _problems(root)
    assert rep.ok and rep.chained == 4 and rep.before_key == 3, problems


def test_seal_refuses_a_chain_with_a_problem(root, heads):
    rows = _append(root, n=3)
    _rechain_unkeyed(root, rows, heads, lambda r: r)
    os.remove(_file_of(root, rows[1]["record_id"]))
    with pytest.raises(audit.FleetError, match="not sealed"):
        audit.seal(root, "lab")


@both_stores
def test_records_before_the_chain_are_counted_not_errors(root):
    old_schema = pa.schema([f for f in SCHEMAS["audit"] if f.name not in ("prev_hash", "hash")])
    when = dt.datetime(2026, 2, 1, tzinfo=dt.timezone.utc)
    folder = Path(root.partition_dir("audit", "lab", when.date()))
    folder.mkdir(parents=True)
    old = {"cluster": "lab", "observed_at": when, "record_id": "0" * 32, "dag_id": "d", "run_id": "old",
           "action": "a", "event": "planned", "actor": None, "digest": None, "message": "", "details": "{}"}
    pq.write_table(pa.Table.from_pylist([old], schema=old_schema), folder / "part-old.parquet")
    _append(root, n=3)
    rep, problems = _problems(root)
    assert rep.ok and rep.chained == 3 and rep.before_chain == 1
    assert [r["run_id"] for r in audit.records(root, "lab")][0] == "old"


@both_stores
def test_record_without_hash_after_the_chain_began_is_reported(root):
    rows = _append(root, n=3)
    _rewrite(_file_of(root, rows[2]["record_id"]), lambda r: {**r, "hash": None, "prev_hash": None})
    rep, problems = _problems(root)
    assert "inserted" in problems[rows[2]["record_id"]]


def test_writer_killed_between_record_and_head_is_not_tampering(root, heads):
    rows = _append(root, n=2)
    (head_file,) = heads.rglob("*.head.json")
    head = json.loads(head_file.read_text())
    # what a writer killed after writing the record and before updating the head leaves behind
    nxt = {**rows[1], "record_id": "a" * 32, "observed_at": rows[1]["observed_at"] + dt.timedelta(seconds=1),
           "prev_hash": rows[1]["hash"]}
    nxt["hash"] = audit.record_hash(nxt)
    write_collection(root, "lab", nxt["observed_at"], {"audit": [nxt]})
    head_file.write_text(json.dumps(audit.sign_head(
        {**head, "pending": {"hash": nxt["hash"], "record_id": nxt["record_id"],
                             "observed_at": nxt["observed_at"].isoformat()}}, audit.load_keys().current)))
    rep, _ = _problems(root)
    assert rep.ok and rep.chained == 3
    after = audit.record(root, cluster="lab", dag_id="d", run_id="r9", action="a", event="verified")
    assert after["prev_hash"] == nxt["hash"]
    rep, _ = _problems(root)
    assert rep.ok and rep.chained == 4


def test_failed_write_leaves_the_head_as_it_was(root, heads, monkeypatch):
    rows = _append(root, n=2)

    def broken(*a, **k):
        raise OSError("disk full")

    with monkeypatch.context() as m:
        m.setattr(audit, "write_collection", broken)
        with pytest.raises(OSError):
            audit.record(root, cluster="lab", dag_id="d", run_id="r9", action="a", event="verified")
    (head_file,) = heads.rglob("*.head.json")
    assert json.loads(head_file.read_text())["hash"] == rows[-1]["hash"]
    assert "pending" not in json.loads(head_file.read_text())
    rep, _ = _problems(root)
    assert rep.ok and rep.chained == 2


@both_stores
def test_append_reads_only_the_head_not_the_dataset(root, monkeypatch):
    _append(root, n=3)

    def no_reading(*a, **k):
        raise AssertionError("record() read the audit dataset")

    monkeypatch.setattr(audit, "read_dataset", no_reading)
    audit.record(root, cluster="lab", dag_id="d", run_id="r9", action="a", event="verified")


def test_chains_are_per_cluster_and_per_data_root(tmp_path, heads):
    a, b = DataRoot(tmp_path / "a"), DataRoot(tmp_path / "b")
    _append(a, cluster="lab", n=2)
    _append(b, cluster="lab", n=3)
    _append(a, cluster=HOSTILE, n=2)
    reps = {r.cluster: r for r in audit.verify(a)}
    assert set(reps) == {"lab", HOSTILE}
    assert all(r.ok for r in reps.values()) and reps["lab"].chained == 2 and reps[HOSTILE].chained == 2
    (rb,) = audit.verify(b)
    assert rb.ok and rb.chained == 3


_APPEND_MANY = """
import sys
from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
root, worker = DataRoot(sys.argv[1]), sys.argv[2]
for i in range(10):
    audit.record(root, cluster="lab", dag_id="d", run_id=f"w{worker}-{i}", action="a", event="planned")
"""


def test_concurrent_appends_from_several_processes_keep_one_chain(root, heads):
    """Four separate interpreters append at once (fresh processes, not forks: a fork of the test
    process would inherit Spark's py4j threads and their locks)."""
    env = dict(os.environ, FLEET_AUDIT_HEADS_DIR=str(heads))
    procs = [subprocess.Popen([sys.executable, "-c", _APPEND_MANY, str(root.path), str(w)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for w in range(4)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outs
    rep, problems = _problems(root)
    assert problems == {} and rep.chained == 40


def test_cli_audit_verify(root, heads):
    """`fleetctl audit verify` as a process: OK per cluster and exit 0, then the tampered record's id
    and exit 1."""
    _append(root, cluster="lab", n=3)
    rows = _append(root, cluster="other", n=2)
    fleetctl = Path(sys.executable).with_name("fleetctl")
    env = dict(os.environ, FLEET_AUDIT_HEADS_DIR=str(heads))

    def run(*args):
        return subprocess.run([str(fleetctl), "audit", "verify", "--data-root", root.path, *args],
                              capture_output=True, text=True, env=env, timeout=120)

    out = run()
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.splitlines() == ["OK\tcluster=lab\t3 records chained", "OK\tcluster=other\t2 records chained"]

    os.remove(_file_of(root, rows[-1]["record_id"]))
    out = run()
    assert out.returncode == 3, out.stdout + out.stderr
    assert "OK\tcluster=lab\t3 records chained" in out.stdout
    assert f"FAIL\tcluster=other\trecord={rows[-1]['record_id']}\ttruncated" in out.stdout



@both_stores
def test_cli_audit_verify_one_cluster(root, capsys):
    from fleetctl.cli import main

    _append(root, cluster="lab", n=3)
    rows = _append(root, cluster="other", n=2)
    os.remove(_file_of(root, rows[0]["record_id"]))
    assert main(["audit", "verify", "--cluster", "lab", "--data-root", root.path]) == 0
    assert capsys.readouterr().out == "OK\tcluster=lab\t3 records chained\n"
    assert main(["audit", "verify", "--cluster", "other", "--data-root", root.path]) == 3  # a broken chain: found
    out = capsys.readouterr().out
    assert f"FAIL\tcluster=other\trecord={rows[1]['record_id']}\tchain broken" in out


def test_the_lab_env_file_gets_an_audit_key_once_and_keeps_the_retired_ones(tmp_path, monkeypatch):
    from fleetlab import airflow_services as services

    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "airflow"))
    env_file = services.ensure_env_file(labs=[])

    def values():
        return dict(line.split("=", 1) for line in env_file.read_text().splitlines() if not line.startswith("#"))

    key = values()[audit.KEY_VAR].strip("'")
    assert audit.load_keys({audit.KEY_VAR: key}).current.key_id
    with open(env_file, "a") as f:
        f.write(f"{audit.PREVIOUS_KEYS_VAR}='old:{'5' * 64}'\n")
    services.ensure_env_file(labs=[])
    assert values()[audit.KEY_VAR].strip("'") == key
    assert values()[audit.PREVIOUS_KEYS_VAR] == f"'old:{'5' * 64}'"


def test_cli_audit_seal_then_verify(root, heads, capsys):
    from fleetctl.cli import main

    rows = _append(root, n=3)
    _rechain_unkeyed(root, rows, heads, lambda r: r, legacy=True)
    assert main(["audit", "verify", "--data-root", root.path]) == 3
    assert "unsigned head" in capsys.readouterr().out
    assert main(["audit", "seal", "--data-root", root.path]) == 0
    assert capsys.readouterr().out == "SEALED\tcluster=lab\tkey_id=tests\n"
    assert main(["audit", "verify", "--data-root", root.path]) == 0
    out = capsys.readouterr().out
    assert "OK\tcluster=lab\t3 records chained, 3 before the key" in out and "WARNING" in out


def test_seal_refuses_an_unsigned_head_in_front_of_keyed_records(root, heads):
    rows = _append(root, n=2)
    (head_file,) = heads.rglob("*.head.json")
    head = json.loads(head_file.read_text())
    head_file.write_text(json.dumps({k: v for k, v in head.items() if k not in ("mac", "key_id")}))
    with pytest.raises(audit.FleetError, match="rewritten without the key"):
        audit.seal(root, "lab")
    rep, problems = _problems(root)
    assert not rep.ok and "unsigned head" in problems[rows[-1]["record_id"]]


def test_a_retired_key_verifies_only_what_it_signed_before_its_successor(root, heads, monkeypatch):
    """A key rotated out (kept in ..._KEYS_PREVIOUS to verify the old records) that leaked must not
    sign new records or heads: once the chain moved on to the new key, a record or head signed with
    the old one is reported."""
    monkeypatch.setenv(audit.KEY_VAR, KEY_A)
    monkeypatch.delenv(audit.PREVIOUS_KEYS_VAR, raising=False)
    _append(root, n=2)
    monkeypatch.setenv(audit.KEY_VAR, KEY_B)
    monkeypatch.setenv(audit.PREVIOUS_KEYS_VAR, KEY_A)
    new = _append(root, n=2, start=dt.datetime(2026, 3, 2, tzinfo=dt.timezone.utc))
    assert _problems(root)[0].ok
    # whoever holds the leaked old key appends a record the way the writer does, and signs the head
    leaked = audit.parse_key(KEY_A)
    forged = {**new[-1], "record_id": "f" * 32, "observed_at": new[-1]["observed_at"] + dt.timedelta(seconds=1),
              "actor": "mallory", "event": "approved", "key_id": "a", "prev_hash": new[-1]["hash"]}
    forged["hash"] = leaked.mac(audit.canonical(forged))
    write_collection(root, "lab", forged["observed_at"], {"audit": [forged]})
    (head_file,) = heads.rglob("*.head.json")
    head = json.loads(head_file.read_text())
    head_file.write_text(json.dumps(audit.sign_head({**head, "hash": forged["hash"], "record_id": forged["record_id"],
                                                     "observed_at": forged["observed_at"].isoformat(),
                                                     "pending": None}, leaked)))
    rep, problems = _problems(root)
    assert not rep.ok
    assert "retired key" in problems["f" * 32]
    assert "retired key: the head file" in " ".join(problems.values())


def test_a_chain_sealed_once_is_never_sealed_again(root, heads):
    """`seal` is the one-time step after configuring the key. Someone without the key who rewrites
    a sealed chain as unkeyed rows with an unsigned head is reported as a rewrite (verify no longer
    suggests sealing it), and seal refuses it."""
    rows = _append(root, n=3)
    _rechain_unkeyed(root, rows, heads, lambda r: r, legacy=True)  # what an earlier version wrote
    audit.seal(root, "lab")
    assert _problems(root)[0].ok
    sealed = list(heads.rglob("*.sealed.json"))
    assert len(sealed) == 1
    # rewritten without the key: an actor changed, hashes and an unsigned head recomputed
    _rechain_unkeyed(root, audit.Chain(root, "lab").rows(), heads,
                     lambda r: {**r, "actor": "mallory"} if r["run_id"] == "r1" else r)
    rep, problems = _problems(root)
    text = " ".join(problems.values())
    assert not rep.ok and "rewritten" in text and "sealed before" in text and "fleetctl audit seal` once" not in text
    with pytest.raises(audit.FleetError, match="sealed before"):
        audit.seal(root, "lab")


def test_a_chain_deleted_whole_or_rolled_back_is_reported_through_the_registry(root, heads):
    """Deleting a cluster's rows and its head used to start a fresh chain with no note, and an older
    signed head put back after deleting the newer rows verified clean. The registry of the data
    root's chains (signed, beside the heads) names each chain's newest record."""
    import shutil

    rows = _append(root, n=4)
    (head_file,) = heads.rglob("*.head.json")
    old_head = head_file.read_text()  # a signed head from when r1 was the newest
    # rolled back: the newest records deleted (they are in their own files) and an older head put back
    _append(root, n=2, start=dt.datetime(2026, 3, 5, tzinfo=dt.timezone.utc))
    newest = audit.Chain(root, "lab").rows()
    for r in newest:
        if r["observed_at"] >= dt.datetime(2026, 3, 5, tzinfo=dt.timezone.utc):
            os.remove(_file_of(root, r["record_id"]))
    head_file.write_text(old_head)
    rep, problems = _problems(root)
    assert not rep.ok and "rolled back" in " ".join(problems.values())
    # deleted whole: every row and the head gone, a fresh chain started under the same name
    for f in root.files("audit"):
        os.remove(f)
    head_file.unlink()
    _append(root, n=1, start=dt.datetime(2026, 3, 9, tzinfo=dt.timezone.utc))
    rep, problems = _problems(root)
    assert not rep.ok and "records deleted" in " ".join(problems.values())  # for good, in the registry
    # and with nothing at all left of the chain, verify still finds and reports it
    for f in root.files("audit"):
        os.remove(f)
    shutil.rmtree(head_file.parent.joinpath("x"), ignore_errors=True)
    head_file.unlink()
    (rep,) = audit.verify(root)
    assert rep.cluster == "lab" and any("deleted" in w for _, w in rep.problems)
    assert rows  # (the first chain's records are long gone)


def test_a_registry_rewritten_without_the_key_is_reported(root, heads):
    _append(root, n=2)
    path = audit._registry_path(root)
    doc = json.loads(path.read_text())
    doc["clusters"]["lab"]["hash"] = "0" * 64
    path.write_text(json.dumps(doc))
    rep, problems = _problems(root)
    assert not rep.ok and "forged registry" in " ".join(problems.values())

"""runbook_offsets_trim executed on Kafka 3.9 (ZooKeeper mode, one broker) and 4.3 (KRaft, three
combined broker+controller nodes, the partition replicated on all three), both secured (SASL_SSL,
ACLs: the plan reads as `fleet`, the runbook acts as `fleet-runbook`), then `fleetctl trim
restore`.

A lab of its own per generation (the trim stops its brokers), one after the other in the
"trimgen" port slot, with the log cleaner off (`log.cleaner.enable=false`: a partition the cleaner
never compacts, the state the incident left) and small __consumer_offsets segments. Groups on one
partition: `early`, whose only commit sits in the first segment (the trim re-commits it),
`stopped`, which commits once in the middle of the log, and `bulk`, whose commits roll the
segments. After the approved trim (dag.test, the gate's tasks and the Spark health job): the
partition is smaller on every replica, the coordinator loads it and no group lost a committed
offset; the restore then puts every file back byte for byte on every replica.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.partitioning import partition_for
from fleetlab.lab import LabSpec
from fleetlab.traffic import bulk_commits

from tests.conftest import TEST_PORTS, write_fleet_file
from tests.helpers import commit_when_led, committed_offsets, fresh_lab, groups_on_partition, wait_until
from tests.hitl import Answerer

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.lab, pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1500)]
DAG = "runbook_offsets_trim"
BULK_PARTITIONS, BULK_COMMITS = 100, 600  # twice: 120,000 records on one partition, about 9 MB


def spec_for(version: str) -> LabSpec:
    short = version.replace(".", "")[:2]
    return LabSpec(lab_dir=str(REPO / f".lab-trimgen-{short}"), name=f"trim{short}", **TEST_PORTS.cluster("trimgen"),
                   brokers=1 if version.startswith("3.") else 3, kafka_version=version, security="sasl_ssl",
                   broker_overrides={"log.cleaner.enable": "false"},
                   offsets_segment_bytes=1024 * 1024)  # Kafka 4's minimum


@pytest.fixture(scope="module", params=["3.9.2", "4.3.1"], ids=["kafka-3.9", "kafka-4.3-kraft"])
def trim_gen(request):
    with fresh_lab(spec_for(request.param)) as lab:
        yield lab


def replica_files(spec: LabSpec, partition: int) -> dict[int, dict[str, str]]:
    """{broker: {file name: sha256}} of the partition's folder on each broker that holds it."""
    out = {}
    for b in range(spec.brokers):
        folder = spec.log_dir(b) / f"{OFFSETS_TOPIC}-{partition}"
        if folder.is_dir():
            out[b] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir())
                      if f.is_file()}
    return out


def log_bytes(spec: LabSpec, partition: int) -> dict[int, int]:
    return {b: sum(f.stat().st_size for f in (spec.log_dir(b) / f"{OFFSETS_TOPIC}-{partition}").glob("*.log"))
            for b in range(spec.brokers) if (spec.log_dir(b) / f"{OFFSETS_TOPIC}-{partition}").is_dir()}


def commit_bulk(spec: LabSpec, group: str) -> None:
    """BULK_COMMITS commits of BULK_PARTITIONS partitions of "bulk" (offsets 1..BULK_COMMITS)."""
    bulk_commits(spec.client_config(), group, "bulk", BULK_COMMITS * BULK_PARTITIONS, BULK_PARTITIONS)


def test_trim_executes_and_restores_on_a_modern_generation(trim_gen, airflow_db, tmp_path, monkeypatch):
    lab = trim_gen
    spec = lab.spec
    for k, v in spec.connection_env().items():
        monkeypatch.setenv(k, v)
    bulk = "bulk-writer"
    P = partition_for(bulk, 50)
    early, stopped = groups_on_partition(P, 50, 2, "early bird é {i}")[0], groups_on_partition(P, 50, 1, "stopped-{i}")[0]
    commit_when_led(lab, "early-topic", 1, {early: {0: 0}})  # its only commit: the first segment
    commit_when_led(lab, "bulk", BULK_PARTITIONS, {})
    t0 = time.monotonic()
    commit_bulk(spec, bulk)
    commit_when_led(lab, "stopped-topic", 1, {stopped: {0: 0}})  # in the middle of the log
    commit_bulk(spec, bulk)
    print(f"{2 * BULK_COMMITS * BULK_PARTITIONS:,} commits in {time.monotonic() - t0:.1f}s")
    expected = {early: ("early-topic", {0: 0}), stopped: ("stopped-topic", {0: 0}),
                bulk: ("bulk", {p: BULK_COMMITS for p in range(BULK_PARTITIONS)})}

    def offsets_intact() -> dict:
        return {g: committed_offsets(spec.bootstrap, g, t, len(want), spec.kafka_version,
                                     spec.security_config("admin")) == want
                for g, (t, want) in expected.items()}

    assert all(offsets_intact().values())
    before_bytes, before_files = log_bytes(spec, P), replica_files(spec, P)
    replicas = sorted(before_files)
    assert replicas == list(range(spec.brokers)), before_files  # every broker holds a replica
    assert all(sum(n.endswith(".log") for n in files) >= 4 for files in before_files.values()), before_files

    fleet_file = write_fleet_file(spec, tmp_path / "fleet.yaml")
    data = tmp_path / "data"
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    from airflow.dag_processing.dagbag import DagBag

    dag = DagBag(dag_folder=str(REPO / "dags")).get_dag(DAG)
    answer = Answerer(DAG, "Approve", timeout=900)
    answer.start()
    t0 = time.monotonic()
    dr = dag.test(run_conf={"cluster": spec.name, "partitions": str(P), "dry_run": False, "min_bloat_bytes": 0,
                            "requested_by": "admin"})
    answer.join(5)
    assert answer.error is None, answer.error
    states = {ti.task_id: ti.state for ti in dr.get_task_instances()}
    print(f"trim run {dr.state} in {time.monotonic() - t0:.1f}s: {states}")
    assert dr.state == "success", states

    after_bytes = log_bytes(spec, P)
    print(f"{OFFSETS_TOPIC}-{P} per replica: {before_bytes} bytes before, {after_bytes} after")
    assert set(after_bytes) == set(before_bytes) and all(after_bytes[b] < before_bytes[b] for b in before_bytes)
    # the coordinator loaded the partition and no group lost its committed offset (the early group's
    # record was in a quarantined segment: re-committed)
    assert wait_until(lambda: all(offsets_intact().values()) or None, 120, "every group's offsets after the trim",
                      retry_on=(Exception,))

    # what the trim quarantined, per replica (its manifests): old segments only, never the active one
    manifests = [json.loads(m.read_text()) for m in (data / "quarantine").rglob("manifest.json")]
    moved = {(m["broker"], Path(f["source"]).name) for m in manifests for f in m["files"]}
    assert {b for b, _ in moved} == set(replicas), moved
    for b in replicas:
        active = max(n for n in before_files[b] if n.endswith(".log"))
        assert (b, active) not in moved and any(n.endswith(".log") for bb, n in moved if bb == b)
        assert all((spec.log_dir(b) / f"{OFFSETS_TOPIC}-{P}" / n).exists() is False for bb, n in moved if bb == b)

    # restore: every quarantined file back, byte for byte, on every replica
    # the deployment's settings; no api-server here (dag.test), so acting needs --force (the run ended)
    env = dict(os.environ, FLEET_FILE=str(fleet_file), FLEET_DATA_ROOT=str(data), FLEET_LOCK_DIR=str(tmp_path / "locks"),
               FLEET_AIRFLOW_USER="tester", FLEET_AIRFLOW_URL="http://127.0.0.1:9")
    out = subprocess.run([str(REPO / ".venv" / "bin" / "fleetctl"), "trim", "restore", dr.run_id, "--execute",
                          "--force"],
                         capture_output=True, text=True, env=env, timeout=900)
    print(f"fleetctl trim restore -> {out.returncode}\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    assert out.returncode == 0, out.stderr[-3000:]
    restored = replica_files(spec, P)
    differ = sorted((b, n) for b, n in moved if restored[b].get(n) != before_files[b][n])
    assert not differ, f"not restored byte for byte: {differ}"
    assert wait_until(lambda: all(offsets_intact().values()) or None, 120, "every group's offsets after the restore",
                      retry_on=(Exception,))

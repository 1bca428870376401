"""runbook_trim under the real scheduler on Kafka 0.9 (one broker, mutual TLS and ACLs), 3.9
(ZooKeeper mode, one broker) and 4.3 (KRaft, three combined broker+controller nodes, the partition
replicated on all three), the last two SASL_SSL with ACLs (the plan reads as `fleet`, the runbook
acts as `fleet-runbook`): triggered through the REST API by one user, approved in the browser by
the other, then `fleetctl trim restore` run by an operator against the live api-server (which
answers that the run ended).

The cluster joins the deployment as a user adds one: its entry in the deployment's fleet file and
its connections created in Airflow's metadata database through the REST API (not AIRFLOW_CONN_
variables: the scheduler started before this lab existed); both removed after the test. Each run
follows the previous generation's in the deployment's data root, where that cluster's records stay
after it left the fleet file: the health job judges only the clusters the fleet file lists.

A lab of its own per generation (the trim stops its brokers), one after the other in the
"trimgen" port slot, with the log cleaner off (`log.cleaner.enable=false`: a partition the cleaner
never compacts, the state the incident left) and small __consumer_offsets segments. Groups on one
partition: `early`, whose only commit sits in the first segment (the trim re-commits it, with its
commit metadata), `stopped`, which commits once in the middle of the log, and `bulk`, whose
commits roll the segments. After the approved trim (the gate's tasks and the Spark health job, run by the
scheduler): the partition is smaller on every replica, the coordinator loads it and no group lost
a committed offset; the restore then puts every file back byte for byte on every replica.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time
from pathlib import Path

import pytest

import yaml

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.partitioning import partition_for
from fleetkit.core.settings import quarantine_root
from fleetkit.trim.layout import quarantine_folder
from fleetlab.lab import LabSpec
from fleetlab.traffic import bulk_commits

from tests.conftest import TEST_APPROVERS, TEST_PORTS, state_dir
from tests.helpers import commit_when_led, committed, committed_offsets, fresh_lab, groups_on_partition, wait_until
from tests.ui.approvals import approve_in_browser, finished, pending_approval, settle, task_states, trigger, unpause, wait_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.lab, pytest.mark.airflow, pytest.mark.spark, pytest.mark.timeout(1500)]
DAG = "runbook_trim"
BULK_PARTITIONS, BULK_COMMITS = 100, 600  # twice: 120,000 records on one partition, about 9 MB


def spec_for(version: str) -> LabSpec:
    """0.9: one broker, mutual TLS; 3.9: one broker, SASL_SSL; 4.3: three KRaft nodes, SASL_SSL."""
    short = version.replace(".", "")[:2]
    return LabSpec(lab_dir=str(state_dir(f".lab-trimgen-{short}")), name=f"trim{short}", **TEST_PORTS.cluster("trimgen"),
                   brokers=3 if version.startswith("4.") else 1, kafka_version=version,
                   security="ssl" if version.startswith("0.") else "sasl_ssl",
                   broker_overrides={"log.cleaner.enable": "false"},
                   offsets_segment_bytes=1024 * 1024)  # Kafka 4's minimum


@pytest.fixture(scope="module", params=["0.9.0.1", "3.9.2", "4.3.1"], ids=["kafka-0.9", "kafka-3.9", "kafka-4.3-kraft"])
def trim_gen(request):
    with fresh_lab(spec_for(request.param)) as lab:
        yield lab


def rest_connection(conn_id: str, env_json: str) -> dict:
    """The REST API's body for a connection given as an AIRFLOW_CONN_ JSON value."""
    doc = json.loads(env_json)
    body = {"connection_id": conn_id, "conn_type": doc["conn_type"]}
    for key in ("host", "port", "login", "password"):
        if key in doc:
            body[key] = doc[key]
    if "extra" in doc:
        body["extra"] = json.dumps(doc["extra"])
    return body


@pytest.fixture
def deployed(trim_gen, lab_fleet, airflow_server):
    """The trim lab in the running deployment: its fleet-file entry (the test approvers) beside the
    shared clusters', its connections in Airflow's database (as the admin user); removed after."""
    spec = trim_gen.spec
    lab_fleet("labtest")  # the deployment's fleet file exists (the server's own cluster)
    from tests.conftest import TEST_FLEET_FILE

    before = TEST_FLEET_FILE.read_text()
    doc = yaml.safe_load(before)
    entry = spec.fleet_cluster()
    entry["approvers"] = list(TEST_APPROVERS)
    doc["clusters"].append(entry)
    TEST_FLEET_FILE.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    made = []
    try:
        for var, value in spec.connection_env().items():
            conn_id = var.removeprefix("AIRFLOW_CONN_").lower()
            airflow_server.api("POST", "/api/v2/connections", rest_connection(conn_id, value))
            made.append(conn_id)
        yield airflow_server
    finally:
        for conn_id in made:
            airflow_server.api("DELETE", f"/api/v2/connections/{conn_id}")
        TEST_FLEET_FILE.write_text(before)


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


#: the early group's commit metadata (a client's JSON, non-ASCII included)
EARLY_METADATA = '{"app": "early é", "ts": 1}'


def commit_bulk(spec: LabSpec, group: str) -> None:
    """BULK_COMMITS commits of BULK_PARTITIONS partitions of "bulk" (offsets 1..BULK_COMMITS)."""
    bulk_commits(spec.client_config(), group, "bulk", BULK_COMMITS * BULK_PARTITIONS, BULK_PARTITIONS)


def test_trim_approved_in_the_browser_then_restored(trim_gen, deployed):
    lab = trim_gen
    spec = lab.spec
    bulk = "bulk-writer"
    P = partition_for(bulk, 50)
    early, stopped = groups_on_partition(P, 50, 2, "early bird é {i}")[0], groups_on_partition(P, 50, 1, "stopped-{i}")[0]
    # its only commit (the first segment), with a librdkafka client's commit metadata
    commit_when_led(lab, "early-topic", 1, {early: {0: 0}}, metadata=EARLY_METADATA)
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

    data = DataRoot(os.environ["FLEET_DATA_ROOT"])  # the deployment's (the services read it from their env)
    case = {"api": deployed.api, "dag_id": DAG, "airflow": deployed, "root": data,
            "conf": {"cluster": spec.name, "partitions": str(P), "dry_run": False, "min_bloat_bytes": 0}}
    unpause(case)
    t0 = time.monotonic()
    run_id = trigger(case, user="admin")
    detail = wait_for(lambda: pending_approval(case, run_id), 300, "the approval request")
    assert [u["name"] for u in detail["assigned_users"]] == ["approver"]  # not the requester
    assert log_bytes(spec, P) == before_bytes  # nothing moved before the approval
    settle(case, run_id)
    approve_in_browser(case, run_id, "approver", ["What will change", f"{OFFSETS_TOPIC}-{P}"],
                       screenshot=f"approval-trim-{spec.name}.png")
    state = wait_for(lambda: finished(case, run_id), 900, "the trim run to finish")
    print(f"trim run {state} in {time.monotonic() - t0:.1f}s: {task_states(case, run_id)}")
    assert state == "success", task_states(case, run_id)
    recs = audit.records(data, spec.name, run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("approved", "approver"),
                                                       ("executed", "approver"), ("verified", None)]

    after_bytes = log_bytes(spec, P)
    print(f"{OFFSETS_TOPIC}-{P} per replica: {before_bytes} bytes before, {after_bytes} after")
    assert set(after_bytes) == set(before_bytes) and all(after_bytes[b] < before_bytes[b] for b in before_bytes)
    # the coordinator loaded the partition and no group lost its committed offset (the early group's
    # record was in a quarantined segment: re-committed)
    assert wait_until(lambda: all(offsets_intact().values()) or None, 120, "every group's offsets after the trim",
                      retry_on=(Exception,))
    # ... with its commit metadata (the re-commit carries what the quarantined record held)
    [back] = committed(spec.bootstrap, early, "early-topic", 1, spec.kafka_version, spec.security_config("admin"))
    assert (back.offset, back.metadata) == (0, EARLY_METADATA)

    # what the trim quarantined, per replica (its manifests): old segments only, never the active one
    manifests = [json.loads((quarantine_folder(quarantine_root(data.path), run_id, b, P) / "manifest.json").read_text())
                 for b in replicas]
    moved = {(m["broker"], Path(f["source"]).name) for m in manifests for f in m["files"]}
    assert {b for b, _ in moved} == set(replicas), moved
    for b in replicas:
        active = max(n for n in before_files[b] if n.endswith(".log"))
        assert (b, active) not in moved and any(n.endswith(".log") for bb, n in moved if bb == b)
        assert all((spec.log_dir(b) / f"{OFFSETS_TOPIC}-{P}" / n).exists() is False for bb, n in moved if bb == b)

    # restore: every quarantined file back, byte for byte, on every replica, by an operator with the
    # CLI as their own Airflow user (the api-server answers that the run ended: no --force)
    from fleetlab.airflow_services import API_HOST, API_PORT, passwords

    # its connections from Airflow's database, as the deployment's (none in this process' environment)
    env = {k: v for k, v in os.environ.items() if not k.startswith(f"AIRFLOW_CONN_{spec.conn_prefix.upper()}_")}
    env.update(FLEET_AIRFLOW_USER="approver", FLEET_AIRFLOW_PASSWORD=passwords()["approver"],
               FLEET_AIRFLOW_URL=f"http://{API_HOST}:{API_PORT}")
    fleetctl = [str(REPO / ".venv" / "bin" / "fleetctl"), "trim", "restore", run_id]
    # the trim finished: its restore is a change of its own, approved by another listed approver first
    out = subprocess.run(fleetctl + ["--execute"], capture_output=True, text=True, env=env, timeout=900)
    assert out.returncode == 2 and "needs its own approval" in out.stderr, out.stderr[-3000:]
    admin = dict(env, FLEET_AIRFLOW_USER="admin", FLEET_AIRFLOW_PASSWORD=passwords()["admin"])
    out = subprocess.run(fleetctl + ["--approve"], capture_output=True, text=True, env=admin, timeout=300)
    assert out.returncode == 0 and "restore approved by admin" in out.stdout, out.stderr[-3000:]
    out = subprocess.run(fleetctl + ["--execute"], capture_output=True, text=True, env=env, timeout=900)
    print(f"fleetctl trim restore -> {out.returncode}\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    assert out.returncode == 0, out.stderr[-3000:]
    assert passwords()["approver"] not in out.stdout + out.stderr
    restored = replica_files(spec, P)
    differ = sorted((b, n) for b, n in moved if restored[b].get(n) != before_files[b][n])
    assert not differ, f"not restored byte for byte: {differ}"
    assert wait_until(lambda: all(offsets_intact().values()) or None, 120, "every group's offsets after the restore",
                      retry_on=(Exception,))

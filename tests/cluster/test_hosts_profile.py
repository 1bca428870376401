"""fleet_maintenance under the real scheduler on the hosts profile: Airflow's api-server,
scheduler, dag-processor, triggerer, PostgreSQL and Redis on one lab host, a Celery worker on each
of two more, a Spark standalone master and two workers on three others, and a secured Kafka 4.3.1
cluster with a node on each of three broker hosts (fleetlab.hosts_profile). The lab is started the
way `make demo PROFILE=hosts` starts it (`fleetlab airflow up --profile hosts`), in an Airflow home
of this module's own, and removed afterwards (processes by PID, namespaces, bridge).

Asserted: the run's tasks ran on both Celery worker hosts; the Spark jobs ran as applications of the
standalone master on the Spark host, their executors on the two Spark worker hosts, connected to a
driver on a Celery worker host's address; the stuck verdict of the collected group is on the fleet
page served by the api-server on the Airflow host, read from the data root on the object store host;
nothing of it listens on this machine's loopback.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from fleetlab import hosts_profile, ports, spark_cluster
from fleetlab.lab import Lab
from fleetlab.paths import read_env_file
from fleetlab.traffic import produce
from tests.helpers import commit_when_led

REPO = Path(__file__).resolve().parents[2]
FLEETLAB = str(REPO / ".venv" / "bin" / "fleetlab")
pytestmark = [pytest.mark.airflow, pytest.mark.spark,
              pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root (CI runs as root)")]

#: the environment of the lab's own Airflow home: nothing of the tests' Airflow, fleet or database
DROP = ("AIRFLOW_", "FLEET_", "SPARK_")


class Rest:
    """The REST API of the hosts profile's api-server, as user `user`."""

    def __init__(self, base: str, passwords: dict):
        self.base, self.passwords, self.tokens = base, passwords, {}

    def token(self, user: str = "admin") -> str:
        if user not in self.tokens:
            body = json.dumps({"username": user, "password": self.passwords[user]}).encode()
            req = urllib.request.Request(f"{self.base}/auth/token", data=body, method="POST",
                                         headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=60) as r:
                self.tokens[user] = json.loads(r.read())["access_token"]
        return self.tokens[user]

    def __call__(self, method: str, path: str, body: dict | None = None, raw: bool = False, user: str = "admin"):
        req = urllib.request.Request(f"{self.base}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {self.token(user)}"})
        with urllib.request.urlopen(req, timeout=60) as r:
            data = r.read()
        return data.decode() if raw else (json.loads(data) if data else {})


@pytest.fixture(scope="module")
def hosts_lab(tmp_path_factory):
    home = tmp_path_factory.mktemp("hosts-airflow")
    plan = ports.tests()
    env = {k: v for k, v in os.environ.items() if not k.startswith(DROP)}
    env.update({
        "AIRFLOW_HOME": str(home), "AIRFLOW_CONFIG": str(REPO / "airflow.cfg"),
        # ports of this module's own (each process binds its lab host's address, never loopback)
        "FLEET_AIRFLOW_PORT": str(plan.base + 8070), "FLEET_PG_PORT": str(plan.postgres),
        "FLEET_PG_DATABASE": "airflow_hosts", "FLEET_DATA_ROOT": str(home / "data"),
        "FLEET_LOCK_DIR": str(home / "locks"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
        "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False", "FLEET_COLLECTION_INTERVAL": "1h",
        # the trim's execute sleeps after its third file move (the test kills its worker host there);
        # the scheduler fails a task whose worker stopped heartbeating after 45 s, not 5 min
        "FLEET_TRIM_PAUSE_AFTER_MOVES": "3", "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "45",
        "SPARK_SUBMIT_OPTS": "-XX:TieredStopAtLevel=1",
        # `make test`: the analyses of its small inputs run in process, so s3a's jars are not fetched
        "FLEET_LAB_SPARK_S3A": "0",
    })
    if os.environ.get("FLEET_TEST_HOSTS_SPARK"):  # `make test-hosts`: every analysis on the standalone master,
        # however small its input, reading and writing the object store through s3a (its jars fetched once)
        env.update({"FLEET_STUCK_INPROCESS_MAX_ROWS": "0", "FLEET_TRIM_INPROCESS_MAX_ROWS": "0",
                    "FLEET_LAB_SPARK_S3A": "1"})
    try:
        out = subprocess.run([FLEETLAB, "airflow", "up", "--profile", "hosts"], env=env, capture_output=True,
                             text=True, timeout=1200)
        print(out.stdout[-3000:])
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        deployment = read_env_file(home / "airflow.env")
        passwords = json.loads((home / "simple_auth_manager_passwords.json.generated").read_text())
        # this process reads the data root on the store host with the deployment's connection
        from fleetkit.core.datasets import ObjectStoreOptions, install_object_store

        store = json.loads(deployment[f"AIRFLOW_CONN_{hosts_profile.STORE_CONN_ID.upper()}"])
        install_object_store(ObjectStoreOptions(endpoint_url=store["extra"]["endpoint_url"],
                                                region=store["extra"]["region_name"], access_key_id=store["login"],
                                                secret_access_key=store["password"], source="the hosts profile's store"))
        yield {"home": home, "env": env, "deployment": deployment, "plan": plan,
               "api": Rest(deployment["FLEET_AIRFLOW_URL"], passwords)}
    finally:
        from fleetkit.core.datasets import install_object_store

        install_object_store(None)
        down = subprocess.run([FLEETLAB, "airflow", "down"], env=env, capture_output=True, text=True, timeout=600)
        print(down.stdout[-3000:], down.stderr[-2000:])
        assert not hosts_profile.network(home).state(), "the lab hosts were not removed"
        from fleetlab import postgres

        print(f"postgresql: {postgres.remove_relocated(home / 'postgres')}")  # not left behind in its user's home


def run_fleet_maintenance(api) -> tuple[str, list[dict]]:
    dag_id = "fleet_maintenance"
    deadline = time.monotonic() + 300
    while True:  # the dag-processor on the Airflow host parses the DAG first
        try:
            api("GET", f"/api/v2/dags/{dag_id}")
            break
        except urllib.error.HTTPError:
            assert time.monotonic() < deadline, "fleet_maintenance was never parsed"
            time.sleep(3)
    api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    run = api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {"window": "2m"}})
    run_id = urllib.parse.quote(run["dag_run_id"])
    deadline = time.monotonic() + 900
    while (state := api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]) not in ("success", "failed"):
        assert time.monotonic() < deadline, f"fleet_maintenance {run_id} still {state}"
        time.sleep(5)
    tis = api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
    return state, tis


@pytest.mark.hosts  # `make test-hosts` (the trim below runs in `make test`)
@pytest.mark.timeout(2400)
def test_fleet_maintenance_runs_across_the_hosts(hosts_lab):
    assert os.environ.get("FLEET_TEST_HOSTS_SPARK"), "run it with `make test-hosts` (every analysis on Spark)"
    home, api, plan = hosts_lab["home"], hosts_lab["api"], hosts_lab["plan"]
    lab_plan = ports.DEMO  # the profile's Redis, Spark and Kafka ports (each on its own host's address)
    net = hosts_profile.network(home)
    addr = {h: net.address(h) for h in hosts_profile.HOST_NAMES}
    spec = hosts_profile.kafka_spec(hosts_profile.folder(home), lab_plan, home)
    lab = Lab(spec)
    # a group with members gone and lag on one partition: what the stuck job must judge
    commit_when_led(lab, "orders", 3, {"billing": {0: 0, 1: 0, 2: 0}})
    produce(spec.bootstrap, "orders", {0: 5}, kafka_version=spec.kafka_version, security=spec.security_config("admin"))

    # the api-server answers on the Airflow host's address only
    assert hosts_lab["deployment"]["FLEET_AIRFLOW_URL"] == f"http://{addr['airflow']}:{plan.base + 8070}"
    since_ms = int(time.time() * 1000) - 5000
    workers_seen: set[str] = set()
    for attempt in range(3):  # Celery hands tasks to whichever worker is free: until both ran some
        state, tis = run_fleet_maintenance(api)
        assert state == "success", [(t["task_id"], t["map_index"], t["state"]) for t in tis]
        ran = [t for t in tis if t["operator"] != "EmptyOperator"]
        workers_seen |= {t["hostname"] for t in ran}
        assert workers_seen <= {"fleet-worker-0@worker0", "fleet-worker-1@worker1"}, workers_seen
        if len(workers_seen) == 2:
            break
    assert workers_seen == {"fleet-worker-0@worker0", "fleet-worker-1@worker1"}

    # the Spark jobs: applications of the master on the Spark host, executors on the Spark worker
    # hosts, each connected to a driver on a Celery worker host
    sspec = spark_cluster.SparkClusterSpec.from_plan(home / "cluster" / "spark", lab_plan, workers=2, placement=(
        ("master", addr["sparkm"], net.netns("sparkm")), ("worker-0", addr["sparkw0"], net.netns("sparkw0")),
        ("worker-1", addr["sparkw1"], net.netns("sparkw1"))))
    apps = [a for a in spark_cluster.applications(sspec) if a["starttime"] >= since_ms]
    assert {"stuck", "trim_health"} <= {a["name"] for a in apps if a["state"] == "FINISHED"}, apps
    executor_hosts, driver_hosts = set(), set()
    for i, host in enumerate(spark_cluster.SparkClusterSpec.names(sspec)[1:]):
        with urllib.request.urlopen(f"http://{sspec.address(host)}:{sspec.worker_ui_ports[i]}/json/", timeout=10) as r:
            ws = json.loads(r.read())
        mine = [e for e in ws.get("executors", []) + ws.get("finishedexecutors", [])
                if e.get("appid") in {a["id"] for a in apps}]
        if mine:
            executor_hosts.add(sspec.address(host))
        for e in mine:
            stderr = (sspec.home / host / "work" / e["appid"] / str(e["id"]) / "stderr").read_text()
            driver_hosts |= {a for a in (addr["worker0"], addr["worker1"], "127.0.0.1")
                             if f"CoarseGrainedScheduler@{a}:" in stderr}
    assert executor_hosts == {addr["sparkw0"], addr["sparkw1"]}
    assert driver_hosts and driver_hosts <= {addr["worker0"], addr["worker1"]}, driver_hosts

    # the fleet page, served from the Airflow host, shows the stuck job's verdict of the group
    page = api("GET", "/fleet/", raw=True)
    assert "hosts43" in page and "billing" in page
    group = api("GET", "/fleet/group?cluster=hosts43&group=billing", raw=True)
    assert "orders" in group

    # nothing of the profile listens on this machine's loopback
    listening = subprocess.run(["ss", "-ltnH"], capture_output=True, text=True, check=True).stdout
    for port in (plan.base + 8070, plan.postgres, lab_plan.redis, lab_plan.spark_master, *spec_ports(spec)):
        assert f"127.0.0.1:{port} " not in listening, port


def spec_ports(spec) -> list[int]:
    return [spec.broker_port(i) for i in range(spec.brokers)]


# -- the trim whose worker host dies ----------------------------------------------------------------
TRIM_DAG = "runbook_trim"
BULK_PARTITIONS, BULK_COMMITS = 100, 600  # twice: 120,000 records on one partition, about 9 MB
EARLY_METADATA = '{"app": "early é", "ts": 1}'


class Home:
    """What tests.ui.approvals.settle reads of an Airflow: its home (the scheduler's log)."""

    def __init__(self, home: Path):
        self.home = home

    def airflow_home(self) -> Path:
        return self.home


def replica_files(spec, partition: int) -> dict[int, dict[str, str]]:
    """{broker: {file name: sha256}} of the partition's folder on each broker host (its log dir)."""
    import hashlib

    out = {}
    for b in range(spec.brokers):
        folder = spec.log_dir(b) / f"__consumer_offsets-{partition}"
        if folder.is_dir():
            out[b] = {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(folder.iterdir()) if f.is_file()}
    return out


def log_bytes(spec, partition: int) -> dict[int, int]:
    return {b: sum(f.stat().st_size for f in (spec.log_dir(b) / f"__consumer_offsets-{partition}").glob("*.log"))
            for b in range(spec.brokers)}


def fleetctl_on(net, host: str, env: dict, *args: str) -> subprocess.CompletedProcess:
    """fleetctl run on lab host `host` (another machine of the deployment) with `env`."""
    argv = [str(REPO / ".venv" / "bin" / "fleetctl"), *args]
    proc = net.run(host, argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=900)
    print(f"[{host}] fleetctl {' '.join(args)} -> {proc.returncode}\n{out[-3000:]}{err[-3000:]}")
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.mark.timeout(2400)
def test_a_trim_whose_worker_host_dies_is_resumed_from_another_host_and_restored(hosts_lab):
    """runbook_trim on the broker hosts' cluster, its data root on the object store host: approved in the browser by the second user,
    executed over SSH on the broker hosts; its worker host dies (every process of it SIGKILLed)
    between two file moves. The scheduler fails the task, the cleanup teardown runs on the other
    worker, and `fleetctl trim resume` on the other worker's host finishes the trim under the shared
    lock, reading the journal from the deployment's PostgreSQL: every group's offsets intact, the
    partition smaller on every replica. `fleetctl trim restore` then puts every file back byte for
    byte."""
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot
    from fleetkit.core.partitioning import partition_for
    from fleetkit.core.kafka_names import DEFAULT_OFFSETS_PARTITIONS as OFFSETS_PARTITIONS
    from fleetlab.traffic import bulk_commits
    from tests.helpers import committed, committed_offsets, groups_on_partition, wait_until
    from tests.ui.approvals import approve_in_browser, finished, pending_approval, settle, task_states, trigger, unpause, wait_for

    home, api, deployment = hosts_lab["home"], hosts_lab["api"], hosts_lab["deployment"]
    assert deployment["FLEET_STATE_CONN_ID"]  # the lock, the journal and the audit heads in PostgreSQL
    net = hosts_profile.network(home)
    spec = hosts_profile.kafka_spec(hosts_profile.folder(home), ports.DEMO, home)
    lab = Lab(spec)
    bulk = "bulk-writer"
    P = partition_for(bulk, OFFSETS_PARTITIONS)
    early = groups_on_partition(P, OFFSETS_PARTITIONS, 1, "early é {i}")[0]
    commit_when_led(lab, "early-topic", 1, {early: {0: 0}}, metadata=EARLY_METADATA)
    commit_when_led(lab, "bulk", BULK_PARTITIONS, {})
    for _ in range(2):
        bulk_commits(spec.client_config(), bulk, "bulk", BULK_COMMITS * BULK_PARTITIONS, BULK_PARTITIONS)
    expected = {early: ("early-topic", {0: 0}), bulk: ("bulk", {p: BULK_COMMITS for p in range(BULK_PARTITIONS)})}
    security = spec.security_config("admin")

    def offsets_intact() -> bool:
        return all(committed_offsets(spec.bootstrap, g, t, len(want), spec.kafka_version, security) == want
                   for g, (t, want) in expected.items())

    assert offsets_intact()
    before_bytes, before_files = log_bytes(spec, P), replica_files(spec, P)
    assert sorted(before_files) == [0, 1, 2] and all(sum(n.endswith(".log") for n in f) >= 4
                                                     for f in before_files.values()), before_files

    passwords = api.passwords
    assert deployment["FLEET_DATA_ROOT"] == hosts_profile.DATA_ROOT  # on the object store host
    case = {"api": api, "dag_id": TRIM_DAG, "airflow": Home(home), "root": DataRoot(hosts_profile.DATA_ROOT),
            "browser_dir": str(home),
            "base_url": deployment["FLEET_AIRFLOW_URL"], "passwords": passwords,
            "conf": {"cluster": spec.name, "partitions": str(P), "dry_run": False, "min_bloat_bytes": 0}}
    unpause(case)
    run_id = trigger(case, user="admin")
    wait_for(lambda: pending_approval(case, run_id), 600, "the approval request")
    assert log_bytes(spec, P) == before_bytes  # nothing moved before the approval
    settle(case, run_id)
    approve_in_browser(case, run_id, "approver", ["What will change", f"__consumer_offsets-{P}"],
                       screenshot="approval-trim-hosts.png")

    # execute runs on a worker host and moves files on the broker hosts over SSH; it sleeps after its
    # third move (FLEET_TRIM_PAUSE_AFTER_MOVES), its broker stopped: its worker host dies there
    def paused_on():
        ti = api("GET", f"/api/v2/dags/{TRIM_DAG}/dagRuns/{urllib.parse.quote(run_id, safe='')}/taskInstances/execute")
        logs = [p for p in home.glob(f"logs/dag_id={TRIM_DAG}/run_id=*/task_id=execute/attempt=1.log")
                if run_id in str(p)]
        if ti["state"] == "running" and logs and "paused after 3 file move(s)" in logs[0].read_text(errors="replace"):
            return ti["hostname"]
        assert ti["state"] in (None, "scheduled", "queued", "running"), ti["state"]
        return None

    hostname = wait_for(paused_on, 900, "execute paused after its third file move")
    dead = hostname.rsplit("@", 1)[1]
    other = next(w for w in hosts_profile.WORKERS if w != dead)
    moved_before_kill = {b: f for b, f in replica_files(spec, P).items()}
    assert moved_before_kill != before_files  # files left a replica's folder
    killed = net.kill_host(dead)
    assert killed, f"no process on {dead}"
    print(f"worker host {dead} killed ({len(killed)} processes) mid-execute; {other} lives on")

    # the scheduler fails the dead worker's task; the gate's cleanup teardown runs on the other worker
    state = wait_for(lambda: finished(case, run_id), 900, "the run to end after its worker died")
    tasks = task_states(case, run_id)
    print(f"trim run {state}: {tasks}")
    assert state == "failed" and tasks["execute"] == "failed" and tasks["cleanup"] == "success", tasks

    # an operator on the other worker's host resumes it: same lock, the journal from PostgreSQL
    env = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/root"), **deployment,
           "FLEET_AIRFLOW_USER": "approver", "FLEET_AIRFLOW_PASSWORD": passwords["approver"]}
    out = fleetctl_on(net, other, env, "trim", "resume", run_id, "--execute")
    assert out.returncode == 0 and "resumed: finished and verified" in out.stdout, out.stderr[-3000:]
    assert passwords["approver"] not in out.stdout + out.stderr
    assert wait_until(lambda: offsets_intact() or None, 180, "every group's offsets after the resumed trim",
                      retry_on=(Exception,))
    [back] = committed(spec.bootstrap, early, "early-topic", 1, spec.kafka_version, security)
    assert (back.offset, back.metadata) == (0, EARLY_METADATA)
    after_bytes = log_bytes(spec, P)
    assert all(after_bytes[b] < before_bytes[b] for b in before_bytes), (before_bytes, after_bytes)

    # restore: a change of its own, approved by another listed approver first, then every file back
    admin = dict(env, FLEET_AIRFLOW_USER="admin", FLEET_AIRFLOW_PASSWORD=passwords["admin"])
    out = fleetctl_on(net, other, admin, "trim", "restore", run_id, "--approve")
    assert out.returncode == 0 and "restore approved by admin" in out.stdout, out.stderr[-3000:]
    # what the trim moved, per replica: its manifests in the quarantine beside each broker's log dir
    moved = {}
    for b in range(spec.brokers):
        [manifest] = (spec.log_dir(b).parent / f"{spec.log_dir(b).name}.fleet-quarantine").glob(
            f"*/broker-{b}/__consumer_offsets-{P}/manifest.json")
        moved[b] = [Path(f["source"]).name for f in json.loads(manifest.read_text())["files"]]
        assert any(n.endswith(".log") for n in moved[b]), moved[b]
    out = fleetctl_on(net, other, env, "trim", "restore", run_id, "--execute")
    assert out.returncode == 0, out.stderr[-3000:]
    restored = replica_files(spec, P)
    differ = sorted((b, n) for b, names in moved.items() for n in names if restored[b].get(n) != before_files[b][n])
    assert not differ, f"not restored byte for byte: {differ}"
    assert audit.records(case["root"], spec.name, run_id)[-1]["event"] == "restored"
    assert wait_until(lambda: offsets_intact() or None, 180, "every group's offsets after the restore",
                      retry_on=(Exception,))

    # the dead worker host comes back (the module's other test needs both)
    up = subprocess.run([FLEETLAB, "airflow", "up", "--profile", "hosts"], env=hosts_lab["env"], capture_output=True,
                        text=True, timeout=600)
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]


@pytest.mark.hosts  # `make test-hosts`
@pytest.mark.timeout(1800)
def test_two_runbooks_on_one_cluster_never_change_it_at_once(hosts_lab):
    """Two approved runbook_stuck_reset runs for two groups of the same cluster, triggered and
    approved at the same moment, their tasks on the Celery worker hosts: the shared lock (a row in
    the deployment's PostgreSQL) lets one execute at a time. The other is refused at its lock task
    (nothing of its group changed) or executes after the first released the lock; never both at once."""
    import datetime as dt

    from tests.helpers import committed_offsets
    from tests.ui.approvals import answer, finished, pending_approval, settle, trigger, unpause, wait_for

    home, api = hosts_lab["home"], hosts_lab["api"]
    spec = hosts_profile.kafka_spec(hosts_profile.folder(home), ports.DEMO, home)
    lab, security = Lab(spec), spec.security_config("admin")
    groups = {"reset-a": "topic-a", "reset-b": "topic-b"}
    for group, topic in groups.items():
        commit_when_led(lab, topic, 1, {group: {0: 2}})
        produce(spec.bootstrap, topic, {0: 10}, kafka_version=spec.kafka_version, security=security)
    dag_id = "runbook_stuck_reset"
    cases = {g: {"api": api, "airflow": Home(home), "dag_id": dag_id,
                 "conf": {"cluster": spec.name, "group": g, "topic": t, "partitions": "0", "target": "offset 7",
                          "dry_run": False}} for g, t in groups.items()}
    unpause(next(iter(cases.values())))
    runs = {g: trigger(c) for g, c in cases.items()}  # as admin, one right after the other
    for g, c in cases.items():
        wait_for(lambda: pending_approval(c, runs[g]), 600, f"the approval request of {g}")
    for g, c in cases.items():
        settle(c, runs[g])
    for g, c in cases.items():  # approved together
        answer(c, runs[g], "Approve", user="approver")
    states = {g: wait_for(lambda: finished(c, runs[g]), 900, f"the run of {g}") for g, c in cases.items()}

    def tis(g):
        return {t["task_id"]: t for t in api("GET", f"/api/v2/dags/{dag_id}/dagRuns/"
                                                     f"{urllib.parse.quote(runs[g], safe='')}/taskInstances")["task_instances"]}

    ran = {g: tis(g) for g in groups}
    print({g: (states[g], {k: (v["state"], v["hostname"]) for k, v in t.items()}) for g, t in ran.items()})
    print("lock tasks ran on", {g: t["lock"]["hostname"] for g, t in ran.items()})
    executed = [g for g in groups if ran[g]["execute"]["state"] == "success"]
    assert executed, states
    for g in groups:
        got = committed_offsets(spec.bootstrap, g, groups[g], 1, spec.kafka_version, security)
        assert got == ({0: 7} if g in executed else {0: 2}), (g, got)
    if len(executed) == 2:  # the second waited for the lock: the executes never overlap
        (a0, a1), (b0, b1) = ((dt.datetime.fromisoformat(ran[g]["execute"]["start_date"]),
                               dt.datetime.fromisoformat(ran[g]["execute"]["end_date"])) for g in executed)
        assert a1 <= b0 or b1 <= a0, (executed, (a0, a1), (b0, b1))
    else:  # the other was refused at its lock, holder named, nothing of its group changed
        [refused] = [g for g in groups if g not in executed]
        assert ran[refused]["lock"]["state"] == "failed", ran[refused]["lock"]


@pytest.mark.hosts  # `make test-hosts`
@pytest.mark.timeout(2400)
def test_the_object_store_gone_for_30s_fails_a_run_clearly_and_the_next_one_succeeds(hosts_lab):
    """The object store host's server stops for 30 s while fleet_maintenance runs: the run fails
    (or its tasks retry) with a line naming the data root and its connection, nothing half-written
    is taken for a result (the stuck job's runs are marked _SUCCESS last and read only when marked),
    and the next run, with the store back, succeeds and reports."""
    from fleetlab import objectstore

    assert os.environ.get("FLEET_TEST_HOSTS_SPARK"), "run it with `make test-hosts`"
    home, api = hosts_lab["home"], hosts_lab["api"]
    store = hosts_profile.store_spec(ports.DEMO, home)
    dag_id = "fleet_maintenance"
    api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    run = api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {"window": "2m"}})
    run_id = urllib.parse.quote(run["dag_run_id"], safe="")
    deadline = time.monotonic() + 600

    def collect_state():  # the mapped collect exists once list_clusters ran
        try:
            return api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/collect/0")["state"]
        except urllib.error.HTTPError as e:
            if e.code == 404:
                return None
            raise

    while collect_state() not in ("running", "success", "failed"):
        assert time.monotonic() < deadline
        time.sleep(1)
    print(f"object store: {objectstore.down(store)}")
    try:
        time.sleep(30)
    finally:
        objectstore.up(store)
    while (state := api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]) not in ("success", "failed"):
        assert time.monotonic() < deadline + 900
        time.sleep(5)
    tis = api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
    failed = [t["task_id"] for t in tis if t["state"] == "failed"]
    print(f"run during the outage: {state}, failed tasks {failed}")
    if state == "failed":  # its failed tasks say what they could not reach
        logs = "\n".join(p.read_text(errors="replace") for t in failed
                         for p in home.glob(f"logs/dag_id={dag_id}/run_id=*/task_id={t}/**/*.log")
                         if urllib.parse.unquote(run_id) in str(p))
        assert hosts_profile.DATA_ROOT in logs and hosts_profile.STORE_CONN_ID in logs, logs[-3000:]
    state, tis = run_fleet_maintenance(api)
    assert state == "success", [(t["task_id"], t["state"]) for t in tis]

"""Shared fixtures. The environment is set here, before anything imports Airflow:
the tests use their own Airflow home (.airflow-test, with its own PostgreSQL on 35432, database
airflow_test) and their own lab fleet
(.lab-test, ZooKeeper 32181, brokers 39092-39094), so they never touch the demo's.
FLEET_TEST_PORT_OFFSET (default 0) shifts every test port, so two checkouts can run their suites
side by side.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TEST_AIRFLOW_HOME = REPO / ".airflow-test"

os.environ["FLEET_HOME"] = str(REPO)
os.environ["AIRFLOW_HOME"] = str(TEST_AIRFLOW_HOME)
os.environ["AIRFLOW_CONFIG"] = str(REPO / "airflow.cfg")
os.environ.setdefault("AIRFLOW__CORE__FERNET_KEY", "3pP9cXqGzv0E2p3d7bq2m8XZr8s2uQ3k4y0JrJ5H1xk=")
os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "test-only-jwt-secret-not-for-production")
os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
os.environ["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "False"
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
PORT_OFFSET = int(os.environ.get("FLEET_TEST_PORT_OFFSET", "0"))
os.environ["FLEET_AIRFLOW_PORT"] = str(38080 + PORT_OFFSET)  # the tests' own api-server (the demo uses 28080)
os.environ["PATH"] = f"{REPO / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"
os.environ["FLEET_PG_PORT"] = str(35432 + PORT_OFFSET)
os.environ["FLEET_PG_DATABASE"] = "airflow_test"

from fleetlab import postgres  # noqa: E402

TEST_PG = postgres.PgSpec(home=TEST_AIRFLOW_HOME / "postgres", port=int(os.environ["FLEET_PG_PORT"]),
                          database=os.environ["FLEET_PG_DATABASE"])
# the URL is known (its password generated) before the server starts, so Airflow's settings,
# read when something first imports airflow, already point at it
os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = TEST_PG.url()

from fleetlab.lab import Lab, LabSpec  # noqa: E402

TEST_LAB = LabSpec(lab_dir=str(REPO / ".lab-test"), name="labtest", zk_port=32181 + PORT_OFFSET,
                   broker_base_port=39092 + PORT_OFFSET)
os.environ.update(TEST_LAB.connection_env())
os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
TEST_FLEET_FILE = Path(TEST_LAB.lab_dir) / "fleet.yaml"
os.environ["FLEET_FILE"] = str(TEST_FLEET_FILE)
# runs that take the default data root (e.g. started by an asset watcher) never write the demo's ./data
os.environ["FLEET_DATA_ROOT"] = str(TEST_AIRFLOW_HOME / "data")


class LabHandle:
    def __init__(self, lab: Lab, fleet_file: Path):
        self.lab = lab
        self.spec = lab.spec
        self.fleet_file = fleet_file
        self.bootstrap = lab.spec.bootstrap

    def zookeeper(self):
        """A (not yet started) ZooKeeperCluster for the lab, chroot applied; use as a context manager."""
        from fleetkit.clients.zookeeper import ZooKeeperCluster

        return ZooKeeperCluster(self.spec.name, self.spec.zk_hosts, self.spec.chroot)

    @property
    def fleet(self):
        from fleetkit.core.fleet import load_fleet

        return load_fleet(self.fleet_file)

    @property
    def cluster(self):
        return self.fleet.cluster(self.spec.name)


# Who may approve a destructive runbook on the test cluster: the two users of airflow.cfg's
# simple_auth_manager_users (tests trigger as one and approve as the other)
TEST_APPROVERS = ["admin", "approver"]


def write_fleet_file(spec: LabSpec, path: Path, **cluster_overrides) -> Path:
    doc = spec.fleet_document()
    doc["clusters"][0]["approvers"] = list(TEST_APPROVERS)
    doc["clusters"][0].update(cluster_overrides)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="session")
def lab():
    """The real lab fleet (3 x Kafka 0.9.0.1 + ZooKeeper), started for the session and stopped
    after it (unless it was already running, e.g. kept by FLEET_KEEP_LAB=1)."""
    lab = Lab(TEST_LAB)
    was_running = lab.running()
    lab.up()
    write_fleet_file(TEST_LAB, TEST_FLEET_FILE)
    yield LabHandle(lab, TEST_FLEET_FILE)
    if not was_running and not os.environ.get("FLEET_KEEP_LAB"):
        lab.stop_traffic()
        lab.down()


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated metadata database for DAG tests: the tests' PostgreSQL (started here, stopped by
    PID at the end of the session unless it was already running), database airflow_test."""
    TEST_AIRFLOW_HOME.mkdir(exist_ok=True)
    was_running = postgres.running(TEST_PG) is not None
    postgres.up(TEST_PG)
    try:
        out = subprocess.run([str(REPO / ".venv" / "bin" / "airflow"), "db", "migrate"],
                             capture_output=True, text=True, env=dict(os.environ))
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
        yield TEST_AIRFLOW_HOME
    finally:
        if not was_running:
            _close_airflow_sessions()  # before the server goes: no rollback on a closed socket at exit
            print(f"postgresql: {postgres.down(TEST_PG)}")


def _close_airflow_sessions() -> None:
    import sys as _sys

    if "airflow.settings" in _sys.modules:
        try:
            _sys.modules["airflow.settings"].dispose_orm()
        except Exception as e:  # noqa: BLE001 - best effort at the end of the session
            print(f"closing Airflow's database sessions: {e}")


@pytest.fixture(scope="session")
def airflow_server(airflow_db, lab, tmp_path_factory):
    """A real Airflow (api-server, scheduler, dag-processor, triggerer) on 127.0.0.1:38080 using the
    tests' home and lab; stopped by PID at the end of the session."""
    from fleetlab import airflow_services as services

    locks = tmp_path_factory.mktemp("locks")
    os.environ["FLEET_LOCK_DIR"] = str(locks)
    os.environ["AIRFLOW__SCHEDULER__TRIGGER_TIMEOUT_CHECK_INTERVAL"] = "3"
    try:
        services.up(write_env_file=False)
        yield services
    finally:
        for line in services.down(database=False):
            print(line)


@pytest.fixture(scope="session")
def dagbag(airflow_db):
    """The repository's DAGs, parsed once for the whole test run (every DAG test shares it)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(REPO / "dags"))


@pytest.fixture(autouse=True)
def _dag_params_restored(request):
    """dag.test() runs tasks in this process, and resolving a run's conf sets the value of the DAG's
    and its tasks' own Param objects (a run with dry_run false would make the next run's default false). Every
    test that uses the shared DagBag gets the params' values put back after it."""
    if "dagbag" not in request.fixturenames:
        yield
        return
    bag = request.getfixturevalue("dagbag")
    params = {id(p): p for dag in bag.dags.values()
              for holder in (dag, *dag.tasks) for p in (holder.params.get_param(k) for k in holder.params.keys())}
    saved = [(p, copy.deepcopy(p.value)) for p in params.values()]
    yield
    for param, value in saved:
        param.value = value


@pytest.fixture(scope="session")
def spark():
    """A local[2] Spark session for DataFrame-level tests."""
    sys.path.insert(0, str(REPO / "spark_jobs"))
    from jobs_common import session

    s = session("tests", "local[2]")
    yield s
    s.stop()


@pytest.fixture
def data_root(tmp_path) -> str:
    return str(tmp_path / "data")


@pytest.fixture
def unique(request):
    """A name unique to the test (topics and groups must not collide across tests)."""
    import uuid

    def make(prefix: str) -> str:
        return f"{prefix}-{request.node.name[:20].replace('[', '-').replace(']', '')}-{uuid.uuid4().hex[:6]}"

    return make


# -- markers follow the fixtures -----------------------------------------------------------------
# A test is marked by what its fixtures start, directly or through the fixtures they depend on
# (airflow_server needs lab and airflow_db), so `pytest -m "not lab"` never starts a lab:
#   lab      the `lab` fixture, or a fixture named *_lab (a lab of its own, e.g. incident_lab)
#   airflow  airflow_db, airflow_server or dagbag
#   spark    spark
AIRFLOW_FIXTURES = {"airflow_db", "airflow_server", "dagbag"}


def fixture_markers(fixturenames) -> set[str]:
    names = set(fixturenames)
    marks = set()
    if any(n == "lab" or n.endswith("_lab") for n in names):
        marks.add("lab")
    if names & AIRFLOW_FIXTURES:
        marks.add("airflow")
    if "spark" in names:
        marks.add("spark")
    return marks


def pytest_collection_modifyitems(config, items):
    for item in items:
        present = {m.name for m in item.iter_markers()}
        for mark in sorted(fixture_markers(getattr(item, "fixturenames", ())) - present):
            item.add_marker(mark)

"""Shared fixtures. The environment is fleetlab.harness's, set here before anything imports
Airflow: the tests' own Airflow home, PostgreSQL and lab fleet, so they never touch the demo's. A
test starts only the clusters it asks for (fixtures `lab`, `lab_fleet`, `generation_lab`).
FLEET_TEST_PORT_OFFSET (default 0; multiples of 1000 up to 5000) shifts every test port, so two
checkouts can run their suites side by side.

`make test` runs two pytest processes (pytest-xdist, `-n 2`). Each has its own state and ports: the
first (gw0) the ones above, the second (gw1) FLEET_TEST_PORT_OFFSET + 1000 and folders suffixed -gw1
(.airflow-test-gw1, .lab-test-gw1, ...). Every test file runs whole in one process, the files
under the real scheduler (tests/ui) all in the same one (they share its Airflow), and the files on
the lab's network namespaces (HOSTS_UNIT) one after the other.
"""

from __future__ import annotations

import copy
import os
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
from fleetlab import harness  # noqa: E402

# the labs the tests start, stop and restart many times: the serial GC and the quick JIT only
# (fleetlab.procs.jvm_flags: brokers, ZooKeeper, the Spark cluster). The benchmarks and the demo keep
# the defaults.
os.environ.setdefault("FLEET_LAB_JVM_OPTS", "-XX:+UseSerialGC -XX:TieredStopAtLevel=1")
#: the environment, set before anything imports Airflow (fleetlab.harness: the benchmarks use it too)
HARNESS = harness.setup(REPO, os.environ.get("PYTEST_XDIST_WORKER", ""))
WORKER, SHARD = HARNESS.worker, HARNESS.shard
state_dir = HARNESS.state_dir
TEST_AIRFLOW_HOME = HARNESS.airflow_home
PORT_OFFSET, TEST_PORTS, TEST_PG = HARNESS.port_offset, HARNESS.ports, HARNESS.pg
#: the test fleet: cluster name -> LabSpec (.lab-test/<name>)
TEST_FLEET = HARNESS.fleet
TEST_LAB = TEST_FLEET["labtest"]
#: the cluster of each Kafka generation, for tests parametrized over generations
GENERATIONS = harness.GENERATIONS
TEST_FLEET_FILE, DAGS_FOLDER = HARNESS.fleet_file, HARNESS.dags_folder

from fleetlab import postgres, traffic  # noqa: E402
from fleetlab.lab import Lab  # noqa: E402


class LabHandle:
    def __init__(self, lab: Lab, fleet_file: Path):
        self.lab = lab
        self.spec = lab.spec
        self.fleet_file = fleet_file
        self.bootstrap = lab.spec.bootstrap
        # fleetlab.traffic's helpers given only this bootstrap log in as the lab's admin
        # (the 0.9 cluster's admin certificate; 3.9 / 4.3: the admin SCRAM user)
        traffic.register_login(self.bootstrap, lab.spec.security_config("admin"))

    def zookeeper(self, user: str | None = None):
        """A (not yet started) ZooKeeperCluster for the lab, chroot applied; use as a context manager.
        Where the lab's ZooKeeper requires SASL (3.9) it logs in as `user` (default: the brokers' own
        ZK_USER, as the runbooks' connection does: it may write /admin)."""
        from fleetkit.clients.zookeeper import ZooKeeperAuth, ZooKeeperCluster
        from fleetlab.lab_security import ZK_USER

        auth = None
        if self.spec.zk_sasl:
            user = user or ZK_USER
            auth = ZooKeeperAuth("sasl", user, self.spec.passwords()[f"zookeeper:{user}"])
        return ZooKeeperCluster(self.spec.name, self.spec.zk_hosts, self.spec.chroot, auth=auth)

    def own_fleet(self) -> dict:
        """The shared fleet file's document with this cluster alone (the file lists every cluster
        started so far, in the fleet's order: which ones depends on the tests that ran before)."""
        doc = yaml.safe_load(self.fleet_file.read_text())
        doc["clusters"] = [c for c in doc["clusters"] if c["name"] == self.spec.name]
        return doc

    @property
    def fleet(self):
        from fleetkit.core.fleet import load_fleet

        return load_fleet(self.fleet_file)

    @property
    def cluster(self):
        return self.fleet.cluster(self.spec.name)


# Who may approve a destructive runbook on the test cluster: the two users of airflow.cfg's
# simple_auth_manager_users (tests trigger as one and approve as the other)
TEST_APPROVERS = harness.APPROVERS
write_fleet_file = harness.write_fleet_file


@pytest.fixture(scope="session")
def lab_fleet():
    """Starts clusters of the test fleet on demand: `lab_fleet("lab39test")` returns its LabHandle.
    The shared fleet file (FLEET_FILE) lists every cluster started so far. Clusters are stopped
    at the end of the session (unless they were already running, or FLEET_KEEP_LAB=1)."""
    handles: dict[str, LabHandle] = {}
    started: list[Lab] = []

    def get(name: str) -> LabHandle:
        if name not in handles:
            lab = Lab(TEST_FLEET[name])
            if not lab.running():
                started.append(lab)
            lab.up()
            handles[name] = LabHandle(lab, TEST_FLEET_FILE)
            write_fleet_file([TEST_FLEET[n] for n in TEST_FLEET if n in handles], TEST_FLEET_FILE)
        return handles[name]

    yield get
    if not os.environ.get("FLEET_KEEP_LAB"):
        for lab in reversed(started):
            try:
                lab.stop_traffic()
                print(f"{lab.spec.name}: {'; '.join(lab.down())}")
            except Exception as e:  # noqa: BLE001 - stop the other clusters all the same
                print(f"{lab.spec.name}: stopping failed: {e}")


@pytest.fixture(scope="session")
def lab(lab_fleet):
    """The Kafka 0.9.0.1 cluster of the test fleet (3 brokers + ZooKeeper 3.4.6), started for the
    session and stopped after it (unless it was already running, e.g. kept by FLEET_KEEP_LAB=1)."""
    return lab_fleet("labtest")


@pytest.fixture(params=list(GENERATIONS), ids=[f"kafka-{g}" for g in GENERATIONS])
def generation_lab(request, lab_fleet):
    """The test-fleet cluster of each Kafka generation (0.9 ZooKeeper, 3.9 ZooKeeper, 4.3 KRaft):
    a test using it runs once per generation."""
    return lab_fleet(GENERATIONS[request.param])


@pytest.fixture(scope="session")
def airflow_db():
    """A migrated metadata database for DAG tests: the tests' PostgreSQL (started here, stopped by
    PID at the end of the session unless it was already running), database airflow_test."""
    started = harness.airflow_db_up(HARNESS)
    try:
        yield TEST_AIRFLOW_HOME
    finally:
        if started:
            print(harness.airflow_db_down(HARNESS))


_close_airflow_sessions = harness.close_airflow_sessions


@pytest.fixture(scope="session")
def state_pg():
    """The shared run state's database (FLEET_STATE_CONN_ID) for the tests: database
    fleet_state_test of the tests' PostgreSQL (the one airflow_db uses: started here when it is not
    running, stopped by PID at the end of the session if started here). Yields its StateDB; each
    test takes a schema of its own (`pg_state`)."""
    import dataclasses

    from fleetkit.core.state import StateDB

    TEST_AIRFLOW_HOME.mkdir(exist_ok=True)
    was_running = postgres.running(TEST_PG) is not None
    spec = dataclasses.replace(TEST_PG, database="fleet_state_test")
    postgres.up(spec)
    try:
        yield StateDB(conn_id="fleet_state_test", host=getattr(spec, "host", "127.0.0.1"), port=spec.port,
                      dbname=spec.database, user=postgres.SUPERUSER, password=spec.password())
    finally:
        if not was_running:
            _close_airflow_sessions()
            print(f"postgresql: {postgres.down(TEST_PG)}")


@pytest.fixture
def pg_state(state_pg):
    """A PostgresState in a schema of this test's own (dropped after it), installed as the process's
    store while the test runs."""
    import dataclasses
    import uuid

    from fleetkit.core import state
    from fleetkit.core.state_postgres import PostgresState

    db = dataclasses.replace(state_pg, schema=f"t_{uuid.uuid4().hex[:12]}")
    store = PostgresState(db)
    before = state.installed()
    state.install(store)
    try:
        yield store
    finally:
        state.install(before)
        store.close()
        conn = store.connect() if store._ready else None
        if conn is not None:
            try:
                with conn, conn.cursor() as cur:
                    cur.execute(f"DROP SCHEMA IF EXISTS {db.schema} CASCADE")
            finally:
                conn.close()


@pytest.fixture(params=["files", "postgres"])
def state_store(request):
    """Each shared-state store in turn, installed for the test: the local files, then PostgreSQL."""
    from fleetkit.core import state

    if request.param == "postgres":
        return request.getfixturevalue("pg_state")
    before = state.installed()
    state.install(None)
    request.addfinalizer(lambda: state.install(before))
    return state.FILES


@pytest.fixture(scope="session")
def airflow_server(airflow_db, lab, tmp_path_factory):
    """A real Airflow (api-server, scheduler, dag-processor, triggerer) on 127.0.0.1:18080 using the
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
    """The toolkit's DAGs as a deployment loads them (the loaders in DAGS_FOLDER), parsed once for
    the whole test run (every DAG test shares it)."""
    from airflow.dag_processing.dagbag import DagBag

    return DagBag(dag_folder=str(DAGS_FOLDER))


@pytest.fixture(autouse=True)
def _dag_test_isolated(request):
    """What a test that uses the shared DagBag (dag.test(), tasks run in this process) needs apart:
    - the Params put back after it: resolving a run's conf sets the value of the DAG's and its
      tasks' own Param objects (a run with dry_run false would make the next run's default false);
    - every DAG paused before it: a real scheduler of the same database (the session's
      airflow_server, when a test under it ran before in this process) also runs the tasks of
      unpaused DAGs' runs, with its own settings (data root, fleet file). The tests under the
      scheduler unpause what they run."""
    if "dagbag" not in request.fixturenames:
        yield
        return
    bag = request.getfixturevalue("dagbag")
    params = {id(p): p for dag in bag.dags.values()
              for holder in (dag, *dag.tasks) for p in (holder.params.get_param(k) for k in holder.params.keys())}
    saved = [(p, copy.deepcopy(p.value)) for p in params.values()]
    from sqlalchemy import update

    from airflow.models.dag import DagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        session.execute(update(DagModel).values(is_paused=True))
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
def live(spark):
    """The shared Spark session, or a new one when a job's main() has stopped it (every job stops
    its own session at the end, and tests call main() in the same process)."""
    from jobs_common import session

    return session("tests", "local[2]")


@pytest.fixture(scope="session")
def object_store():
    """The lab's S3-compatible object store (fleetlab.objectstore: s3proxy, its filesystem backend)
    on the tests' port, bucket `fleet`, for a data root s3://fleet/<prefix>: started once for the
    session (a JVM of a 192 MB heap, up in a few seconds), stopped and its folder removed after it
    unless it was already running. Yields its ObjectStoreSpec (spec.connection(): the aws connection)."""
    from fleetlab import objectstore

    spec = objectstore.ObjectStoreSpec(state_dir(".lab-test") / "objectstore", TEST_PORTS.object_store)
    was_running = objectstore.running(spec) is not None
    objectstore.up(spec)
    objectstore.create_bucket(spec, "fleet")
    yield spec
    if not was_running:
        objectstore.remove(spec)


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
#   postgres state_pg, pg_state (the shared run state in the tests' PostgreSQL)
AIRFLOW_FIXTURES = {"airflow_db", "airflow_server", "dagbag"}
#: the fixtures of the tests' PostgreSQL as the shared run state
POSTGRES_FIXTURES = {"state_pg", "pg_state"}


def fixture_markers(fixturenames) -> set[str]:
    names = set(fixturenames)
    marks = set()
    if any(n == "lab" or n.endswith("_lab") for n in names):
        marks.add("lab")
    if names & AIRFLOW_FIXTURES:
        marks.add("airflow")
    if "spark" in names:
        marks.add("spark")
    if names & POSTGRES_FIXTURES:
        marks.add("postgres")
    return marks


def pytest_collection_modifyitems(config, items):
    for item in items:
        present = {m.name for m in item.iter_markers()}
        for mark in sorted(fixture_markers(getattr(item, "fixturenames", ())) - present):
            item.add_marker(mark)
    # the order work is handed out in under -n (every process collects the same list): the longest
    # unit first, the tests under the real scheduler; then the folders from the slowest per file
    # (the small files of tests/unit fill in at the end). Stable: a file's tests keep their order.
    # (the workers collect: they do not see -n, but run under PYTEST_XDIST_WORKER)
    if WORKER or getattr(config.option, "numprocesses", None):
        items.sort(key=_handed_out_rank)


# -- two pytest processes (pytest-xdist) ------------------------------------------------------
#: the folder whose tests drive the session's real Airflow (airflow_server): one unit of work, so
#: they all run in the process that owns it
SCHEDULER_FOLDERS = ("tests/ui/",)
#: the files that create network namespaces and compare the machine's links before and after
#: (fleetlab.hosts): one unit, so two of them never run at once. They bring their own Airflow,
#: Spark and Kafka, so they run in whichever process is free, as tests/cluster/test_cluster_profile.py
#: does (it starts the process's Airflow in the cluster profile, or switches the running one and back).
HOSTS_UNIT = ("tests/cluster/test_hosts_profile.py", "tests/cluster/test_lab_hosts.py",
              "tests/cluster/test_spark_hosts.py")
#: the order units are handed out in after those two (the longest first; tests/unit, not listed,
#: comes last, its small files filling in)
_THEN = ("tests/cluster/", "tests/install/", "tests/integration/", "tests/dags/", "tests/spark/")


def _handed_out_rank(item) -> int:
    if item.nodeid.startswith(SCHEDULER_FOLDERS):
        return 0
    if item.nodeid.startswith(HOSTS_UNIT):
        return 1
    return next((i for i, folder in enumerate(_THEN, 2) if item.nodeid.startswith(folder)), len(_THEN) + 2)


def _work_unit(nodeid: str) -> str:
    """What one process runs whole: the tests under the real scheduler together, the tests on the
    lab's network namespaces together, any other file alone."""
    if nodeid.startswith(SCHEDULER_FOLDERS):
        return "tests/ui"
    if nodeid.startswith(HOSTS_UNIT):
        return "tests/cluster (network namespaces)"
    return nodeid.split("::", 1)[0]


@pytest.hookimpl(tryfirst=True)
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the scheduler folders as one unit and the collection's order kept."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FleetScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return _work_unit(nodeid)

    config.option.loadscopereorder = False  # the order set in pytest_collection_modifyitems
    return FleetScheduling(config, log)


# -- where the time goes: seconds per test file and per folder, at the end of every run ----------
_SECONDS_PER_FILE: dict[str, float] = {}


def pytest_runtest_logreport(report):
    path = report.nodeid.split("::", 1)[0]
    _SECONDS_PER_FILE[path] = _SECONDS_PER_FILE.get(path, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if len(_SECONDS_PER_FILE) < 2:
        return
    per_folder: dict[str, float] = {}
    for path, secs in _SECONDS_PER_FILE.items():
        folder = path.rsplit("/", 1)[0]
        per_folder[folder] = per_folder.get(folder, 0.0) + secs
    tr = terminalreporter
    tr.section("time per folder and slowest files (setup + call + teardown)")
    for folder, secs in sorted(per_folder.items(), key=lambda kv: -kv[1]):
        tr.write_line(f"{secs / 60:7.1f} min  {folder}")
    for path, secs in sorted(_SECONDS_PER_FILE.items(), key=lambda kv: -kv[1])[:20]:
        tr.write_line(f"{secs:7.0f} s    {path}")


# -- a clean exit ----------------------------------------------------------------------------
_EXIT_STATUS: list[int] = []


def pytest_sessionfinish(session, exitstatus):
    _EXIT_STATUS.append(int(exitstatus))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    """After the summary and every fixture's teardown (labs stopped by PID), leave at once: a
    non-daemon thread or an unjoined child left by a library (py4j, a multiprocessing pool) must not
    hold a finished run open until CI's time limit. FLEET_TEST_SOFT_EXIT=1 keeps the normal exit. A
    pytest-xdist worker is left to its controller, which must hear that it finished."""
    if _EXIT_STATUS and os.environ.get("FLEET_TEST_SOFT_EXIT") != "1" and not WORKER:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_EXIT_STATUS[-1])

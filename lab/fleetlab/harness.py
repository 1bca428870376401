"""The environment the tests and the benchmarks that drive the product run in, set in one place:
their own Airflow home (.airflow-test, with its own PostgreSQL, database airflow_test), their own
lab fleet (.lab-test: clusters labtest, lab39test, lab43test, Kafka 0.9.0.1, 3.9.2 and 4.3.1 on the
tests' ports of fleetlab/ports.py), the DAG files as `fleetctl deploy dags` writes them, and the
fleet files they write (listing two approvers, so one can ask and the other approve). Nothing of
the demo's is touched.

`setup` must run before anything imports Airflow (it sets Airflow's environment). A second
pytest-xdist worker (`gw1`) gets FLEET_TEST_PORT_OFFSET + 1000 and folders suffixed -gw1.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

#: simple_auth_manager_users: a run is triggered as one and approved as the other
APPROVERS = ["admin", "approver"]
#: the test fleet's cluster of each Kafka generation
GENERATIONS = {"0.9": "labtest", "3.9": "lab39test", "4.3": "lab43test"}


@dataclass
class Harness:
    repo: Path
    worker: str          # the pytest-xdist worker ("gw0", "gw1", ...; "" without -n)
    shard: int           # its number
    airflow_home: Path
    port_offset: int
    ports: object        # fleetlab.ports' plan of the tests' ports
    pg: object           # fleetlab.postgres.PgSpec of the Airflow database
    fleet: dict          # cluster name -> LabSpec
    fleet_file: Path     # FLEET_FILE: the clusters started so far
    dags_folder: Path

    def state_dir(self, name: str) -> Path:
        """The folder `name` of the repository that holds this process's servers and data
        (`name-gwN` for the second and later pytest-xdist workers)."""
        return state_dir(self.repo, self.worker, self.shard, name)


def state_dir(repo: Path, worker: str, shard: int, name: str) -> Path:
    return repo / (f"{name}-{worker}" if shard else name)


def setup(repo: Path, worker: str = "") -> Harness:
    """Sets the process's environment for the tests' Airflow, PostgreSQL, lab fleet, Spark and data
    root, installs the DAG files, and returns where everything is."""
    shard = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else 0
    if shard:  # set before anything reads the port plan (fleetlab.ports) or starts a server
        os.environ["FLEET_TEST_PORT_OFFSET"] = str(int(os.environ.get("FLEET_TEST_PORT_OFFSET", "0")) + 1000 * shard)
    home = state_dir(repo, worker, shard, ".airflow-test")
    os.environ["AIRFLOW_HOME"] = str(home)
    os.environ["AIRFLOW_CONFIG"] = str(repo / "airflow.cfg")
    os.environ.setdefault("AIRFLOW__CORE__FERNET_KEY", "3pP9cXqGzv0E2p3d7bq2m8XZr8s2uQ3k4y0JrJ5H1xk=")
    os.environ.setdefault("AIRFLOW__API_AUTH__JWT_SECRET", "test-only-jwt-secret-not-for-production")
    # the audit key (HMAC of the audit chain): a fixed test key, `id:secret`
    os.environ.setdefault("AIRFLOW_VAR_FLEET_AUDIT_KEY", "tests:test-only-audit-key-not-for-production-0123456789")
    os.environ["AIRFLOW__CORE__LOAD_EXAMPLES"] = "False"
    # paused (as in production): no scheduled run competes with the tests for the machine or writes
    # into the data root under a test; a test that needs a DAG's runs unpauses it and triggers them
    os.environ["AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION"] = "True"
    # the DAG files do not change under a test run: the tests' dag-processor parses each file when it
    # starts, not every 15 s as airflow.cfg says (those parses took a quarter of a core all along)
    os.environ["AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL"] = "3600"
    os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    from fleetlab import ports

    offset, plan = ports.test_offset(), ports.tests()
    os.environ["FLEET_AIRFLOW_PORT"] = str(plan.airflow_api)  # the tests' own api-server (the demo uses 28080)
    os.environ["PATH"] = f"{repo / '.venv' / 'bin'}:{os.environ.get('PATH', '')}"
    os.environ["FLEET_PG_PORT"] = str(plan.postgres)
    os.environ["FLEET_PG_DATABASE"] = "airflow_test"
    from fleetlab import postgres

    pg = postgres.PgSpec(home=home / "postgres", port=int(os.environ["FLEET_PG_PORT"]),
                         database=os.environ["FLEET_PG_DATABASE"])
    # the URL is known (its password generated) before the server starts, so Airflow's settings,
    # read when something first imports airflow, already point at it
    os.environ["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] = pg.url()
    from fleetlab.lab_spec import fleet_specs

    fleet = fleet_specs(state_dir(repo, worker, shard, ".lab-test"), plan, suffix="test")
    for spec in fleet.values():
        os.environ.update(spec.connection_env())
    # Small Spark jobs: a driver JVM that compiles with the quick JIT only (C1) spends about half the
    # CPU of the default tiered JIT on them (the stuck job on the test data: 23 s of CPU instead of
    # 41 s, 21 s instead of 26 s of wall time); spark-submit passes SPARK_SUBMIT_OPTS to the driver
    # (the DAGs' tasks and the `spark` fixture alike). Production jobs keep the default.
    os.environ.setdefault("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")
    os.environ["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[2]"})
    fleet_file = state_dir(repo, worker, shard, ".lab-test") / "fleet.yaml"
    os.environ["FLEET_FILE"] = str(fleet_file)
    # runs that take the default data root (e.g. started by an asset watcher) never write the demo's ./data
    os.environ["FLEET_DATA_ROOT"] = str(home / "data")
    # the audit chains' heads live as long as that data root (across sessions, whatever lock folder a
    # test takes): a head lost while its chain stays is reported, and refuses a trim's restore
    os.environ["FLEET_AUDIT_HEADS_DIR"] = str(home / "audit-heads")
    # the DAG files of the tests' Airflow: the loaders `fleetctl deploy dags` writes, as in a deployment
    # (the dags_folder of airflow.cfg is ${AIRFLOW_HOME}/dags)
    from fleet_airflow.dag_files import install

    dags = home / "dags"
    install(dags)
    (home / "plugins").mkdir(parents=True, exist_ok=True)
    # the clusters are collected when a test needs it, not every 5 min: none goes stale during a run
    # (the STALE state is tested with explicit intervals in tests/unit/test_blind.py and test_fleetview.py)
    os.environ["FLEET_COLLECTION_INTERVAL"] = "1h"
    # the tests' api-server publishes KMinion's names beside kafka-lag-exporter's (their dashboards'
    # queries run against it in tests/ui/test_metrics_prometheus.py)
    os.environ["FLEET_METRICS_NAMES"] = "kafka-lag-exporter,kminion"
    return Harness(repo, worker, shard, home, offset, plan, pg, fleet, fleet_file, dags)


def write_fleet_file(spec, path: Path, **cluster_overrides) -> Path:
    """A fleet file of one lab cluster (a LabSpec) or several, the approvers and overrides on each."""
    import yaml

    specs = spec if isinstance(spec, list) else [spec]
    doc = {"version": 1, "clusters": []}
    for one in specs:
        entry = one.fleet_cluster()
        entry["approvers"] = list(APPROVERS)
        entry.update(cluster_overrides)
        doc["clusters"].append(entry)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def airflow_db_up(h: Harness) -> bool:
    """The harness's PostgreSQL (started unless running) with Airflow's database migrated; True when
    started here (then stop it with airflow_db_down)."""
    from fleetlab import postgres

    h.airflow_home.mkdir(exist_ok=True)
    was_running = postgres.running(h.pg) is not None
    postgres.up(h.pg)
    out = subprocess.run([str(h.repo / ".venv" / "bin" / "airflow"), "db", "migrate"], capture_output=True,
                         text=True, env=dict(os.environ))
    if out.returncode != 0:
        if not was_running:
            airflow_db_down(h)
        raise RuntimeError(f"airflow db migrate failed:\n{out.stdout[-3000:]}{out.stderr[-3000:]}")
    return not was_running


def airflow_db_down(h: Harness) -> str:
    """Closes this process's Airflow sessions (no rollback on a closed socket at exit), then stops
    the PostgreSQL by PID."""
    from fleetlab import postgres

    close_airflow_sessions()
    return f"postgresql: {postgres.down(h.pg)}"


def close_airflow_sessions() -> None:
    import sys

    if "airflow.settings" in sys.modules:
        try:
            sys.modules["airflow.settings"].dispose_orm()
        except Exception as e:  # noqa: BLE001 - best effort at the end of the session
            print(f"closing Airflow's database sessions: {e}")

"""The project's own Airflow: api-server, scheduler, dag-processor and triggerer as separate
processes on 127.0.0.1, PID files under .airflow/run, and its metadata database on a private
PostgreSQL cluster under .airflow/postgres (fleetlab.postgres), started first and stopped last.

Three profiles (FLEET_PROFILE, `fleetlab airflow up --profile`, `make ... PROFILE=cluster`):

* embedded (the default): LocalExecutor; Spark jobs on local[*].
* cluster: what production runs. CeleryExecutor with a private Redis as the broker
  (fleetlab.redis_server) and this PostgreSQL as the result backend, two Celery workers
  (`airflow celery worker`, distinct --celery-hostname, each with its log server on its own
  loopback port), and a Spark standalone cluster (fleetlab.spark_cluster: a master and two
  workers) that `spark_default` points at, its executors on a Python that holds only pyspark,
  pandas, pyarrow and numpy. Their files live under .airflow/cluster; ports come from the port
  plan (fleetlab.ports). The DAGs are the same in both.
* hosts: the cluster profile spread over lab hosts (fleetlab.hosts_profile: network namespaces on
  the lab's own bridge): Airflow's components, PostgreSQL and Redis on one host, each Celery worker
  on its own, the Spark master and workers on theirs, every process bound to its host's address.

Ports and databases: the demo's PostgreSQL listens on 25432 (database airflow_demo), the tests'
on 15432 (airflow_test); FLEET_PG_PORT / FLEET_PG_DATABASE choose others.

Secrets (JWT secret, fernet key, the UI password) are generated once into the untracked
.airflow/airflow.env and .airflow/simple_auth_manager_passwords.json.generated.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from base64 import urlsafe_b64encode
from pathlib import Path

from fleetlab import procs
from fleetkit.core.errors import FleetError
from fleetlab.lab_spec import LabSpec, fleet_specs
from fleetlab import hosts_profile, ports, postgres, redis_server, spark_cluster

from fleetlab.paths import AIRFLOW_CFG, CHECKOUT as REPO_ROOT, DEMO_DATA_ROOT, DEMO_FLEET_FILE, VENV_BIN
from fleetlab.paths import airflow_env_file, airflow_home, dags_folder

API_HOST = "127.0.0.1"
API_PORT = int(os.environ.get("FLEET_AIRFLOW_PORT", "28080"))
COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
USERS = ("admin", "approver")
PG_PORT_DEFAULT = 25432
PG_DATABASE_DEFAULT = "airflow_demo"
PROFILES = ("embedded", "cluster", "hosts")
CELERY_WORKERS = 2
CELERY_CONCURRENCY = 2  # task slots per worker: 2 x 2 = [core] parallelism


def pg_spec() -> postgres.PgSpec:
    """The PostgreSQL cluster of the Airflow home in use (on the Airflow host in the hosts profile)."""
    host, netns = hosts_profile.place(hosts_profile.AIRFLOW)
    return postgres.PgSpec(home=airflow_home() / "postgres",
                           port=int(os.environ.get("FLEET_PG_PORT", PG_PORT_DEFAULT)),
                           database=os.environ.get("FLEET_PG_DATABASE", PG_DATABASE_DEFAULT), host=host, netns=netns)


def lab_specs() -> list[LabSpec]:
    """The Kafka clusters of the Airflow in use: the lab fleet, or, in the hosts profile, the one
    cluster on the broker hosts (the only one its workers reach)."""
    if hosts_profile.placed():
        return [hosts_profile.kafka_spec(hosts_profile.folder(), port_plan())]
    return list(fleet_specs().values())


STATE_CONN_ID = "fleet_state"


def state_pg_spec() -> postgres.PgSpec:
    """The shared run state's database (hosts profile): database fleet_state of the metadata
    PostgreSQL."""
    import dataclasses

    return dataclasses.replace(pg_spec(), database="fleet_state")


def api_host() -> str:
    """The api-server's address: loopback, or the Airflow host's in the hosts profile."""
    return hosts_profile.place(hosts_profile.AIRFLOW)[0]


def api_url() -> str:
    return f"http://{api_host()}:{API_PORT}"


# -- profiles ---------------------------------------------------------------------------------

def profile(name: str | None = None) -> str:
    """The profile asked for: `name`, else FLEET_PROFILE, else embedded."""
    chosen = (name or os.environ.get("FLEET_PROFILE") or "embedded").strip()
    if chosen not in PROFILES:
        raise FleetError(f"unknown Airflow profile {chosen!r} (FLEET_PROFILE / --profile): "
                         f"one of {', '.join(PROFILES)}")
    return chosen


def port_plan() -> ports.PortPlan:
    """The port plan of the Airflow in use: the tests' when the api-server is on the tests' port
    (fleetlab.harness puts it there), else the demo's."""
    return ports.tests() if API_PORT == ports.tests().airflow_api else ports.DEMO


def cluster_home() -> Path:
    """Where the cluster profile's Redis and Spark live (.airflow/cluster for the demo)."""
    return airflow_home() / "cluster"


def redis_spec() -> redis_server.RedisSpec:
    host, netns = hosts_profile.place(hosts_profile.AIRFLOW)
    return redis_server.RedisSpec(home=cluster_home() / "redis", port=port_plan().redis, host=host, netns=netns)


def spark_spec() -> spark_cluster.SparkClusterSpec:
    placement = ()
    if hosts_profile.placed():
        names = [hosts_profile.SPARK_MASTER, *hosts_profile.SPARK_WORKERS]
        placement = tuple((daemon, *hosts_profile.place(host))
                          for daemon, host in zip(["master", "worker-0", "worker-1"], names))
    return spark_cluster.SparkClusterSpec.from_plan(cluster_home() / "spark", port_plan(), workers=2,
                                                    placement=placement)


def celery_hostname(worker: int) -> str:
    """The Celery node name of lab worker `worker` (also the hostname its task instances show): the
    worker's lab host in the hosts profile."""
    if hosts_profile.placed():
        return f"fleet-worker-{worker}@{hosts_profile.WORKERS[worker]}"
    return f"fleet-worker-{worker}@{socket.gethostname()}"


def celery_hostnames() -> list[str]:
    return [celery_hostname(i) for i in range(CELERY_WORKERS)]


def profile_env(name: str | None = None) -> dict[str, str]:
    """What every Airflow process of the profile gets on top of the common environment."""
    # one api-server process answers the UI, the REST API and the execution API of every task slot:
    # on a small, busy machine (the lab starting beside it) its answers can take longer than the 5 s
    # default, and a task whose first call times out fails before it runs
    common = {"AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30"}
    if profile(name) == "embedded":
        return {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor", **common}
    # cluster and hosts: the hosts profile is the cluster profile placed on lab hosts (pg_spec,
    # redis_spec, spark_spec and the workers' env say where)
    spark = spark_spec()
    return {
        "AIRFLOW__CORE__EXECUTOR": "CeleryExecutor",
        "AIRFLOW__CELERY__BROKER_URL": redis_spec().url(),
        # Celery's database result backend on the metadata PostgreSQL
        "AIRFLOW__CELERY__RESULT_BACKEND": "db+" + pg_spec().url(),
        "AIRFLOW__CELERY__WORKER_CONCURRENCY": str(CELERY_CONCURRENCY),
        **common,
        # the api-server asks a running task's worker for its log on this port (worker 0's log
        # server; on one machine every worker writes the same log folder, which it reads first)
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(port_plan().celery_log_server(0)),
        "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(spark.connection()),
        **spark_cluster.submit_env(spark),
    }


def celery_worker_env(worker: int) -> dict[str, str]:
    """On top of profile_env("cluster"): what tells worker `worker` apart. In the hosts profile its
    Spark drivers (spark-submit runs on the worker, client mode) listen on the worker host's address."""
    env = {
        "FLEET_CELERY_HOSTNAME": celery_hostname(worker),
        "AIRFLOW__CORE__HOSTNAME_CALLABLE": "fleetlab.celery_worker.hostname",
        "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(port_plan().celery_log_server(worker)),
    }
    if hosts_profile.placed():
        env["SPARK_LOCAL_IP"] = hosts_profile.place(hosts_profile.WORKERS[worker])[0]
    return env


def ensure_env_file(labs: list[LabSpec] | None = None) -> Path:
    """Create .airflow/airflow.env (once; later calls keep the secrets) and the UI passwords."""
    env_file = airflow_env_file()
    home = env_file.parent
    home.mkdir(parents=True, exist_ok=True)
    existing: dict[str, str] = {}
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            if "=" in line and not line.startswith("#"):
                k, v = line.split("=", 1)
                existing[k.removeprefix("export ").strip()] = v.strip().strip("'")
    placed = hosts_profile.placed()
    labs = labs if labs is not None else lab_specs()
    fleet_file = str(hosts_profile.fleet_file()) if placed else (os.environ.get("FLEET_FILE") or str(DEMO_FLEET_FILE))
    values = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW_CONFIG": str(AIRFLOW_CFG),
        # the lab's deployment settings, explicit (fleetkit.core.settings: nothing falls back to the lab)
        "FLEET_FILE": fleet_file,
        "FLEET_DATA_ROOT": hosts_profile.DATA_ROOT if placed else (os.environ.get("FLEET_DATA_ROOT") or str(DEMO_DATA_ROOT)),
        "AIRFLOW__API_AUTH__JWT_SECRET": existing.get("AIRFLOW__API_AUTH__JWT_SECRET") or secrets.token_urlsafe(32),
        "AIRFLOW__API__SECRET_KEY": existing.get("AIRFLOW__API__SECRET_KEY") or secrets.token_urlsafe(32),
        "AIRFLOW__CORE__FERNET_KEY": existing.get("AIRFLOW__CORE__FERNET_KEY")
        or urlsafe_b64encode(secrets.token_bytes(32)).decode(),
        # the audit chain's HMAC key (the Airflow Variable fleet_audit_key), kept once made
        "AIRFLOW_VAR_FLEET_AUDIT_KEY": existing.get("AIRFLOW_VAR_FLEET_AUDIT_KEY") or secrets.token_hex(32),
        # the lab binds to loopback; the executors of local Spark run the lab's own Python
        "SPARK_LOCAL_IP": "127.0.0.1",
        "FLEET_SPARK_PYTHON": str(VENV_BIN / "python"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": pg_spec().url(),
        # where fleetctl reaches the REST API as its caller (audit rollback, lock clear, trim resume)
        "FLEET_AIRFLOW_URL": api_url(),
    }
    if placed:
        # several hosts: the lock, the execution journal and the audit heads in the deployment's
        # PostgreSQL, where every worker and fleetctl on any host reach them
        state = state_pg_spec()
        values["FLEET_STATE_CONN_ID"] = STATE_CONN_ID
        # the data root on the object store host, its keys in an aws connection
        values["FLEET_DATA_ROOT_CONN_ID"] = hosts_profile.STORE_CONN_ID
        values[f"AIRFLOW_CONN_{hosts_profile.STORE_CONN_ID.upper()}"] = hosts_profile.store_spec(port_plan()).connection_uri()
        # the Spark jobs read and write the store through s3a: its jars (about 700 MB, fetched once);
        # FLEET_LAB_SPARK_S3A=0 leaves them out (a test whose jobs all run in process)
        if os.environ.get("FLEET_LAB_SPARK_S3A", "1") != "0":
            from fleetlab import dists

            values["FLEET_SPARK_JARS"] = ",".join(dists.hadoop_aws_jars())
        values[f"AIRFLOW_CONN_{STATE_CONN_ID.upper()}"] = json.dumps({
            "conn_type": "postgres", "host": state.host, "port": state.port, "login": postgres.SUPERUSER,
            "password": state.password(), "schema": state.database})
    if existing.get("AIRFLOW_VAR_FLEET_AUDIT_KEYS_PREVIOUS"):  # keys retired by a rotation stay
        values["AIRFLOW_VAR_FLEET_AUDIT_KEYS_PREVIOUS"] = existing["AIRFLOW_VAR_FLEET_AUDIT_KEYS_PREVIOUS"]
    for lab in labs:
        values.update(lab.connection_env())
    # local Spark by default; point the spark_default connection at a cluster to scale out
    values["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps({"conn_type": "spark", "host": "local[*]"})
    # the lab's Spark jobs are small: a driver JVM with the quick JIT only (C1) spends about half the
    # CPU of the default tiered JIT on them (spark-submit passes SPARK_SUBMIT_OPTS to the driver);
    # a production deployment keeps the default
    values["SPARK_SUBMIT_OPTS"] = "-XX:TieredStopAtLevel=1"
    lines = ["# Generated by `make setup` (fleetlab airflow env). Secrets: never commit this file."]
    lines += [f"{k}='{v}'" for k, v in values.items()]
    tmp = env_file.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    # 0600 from the start: it holds secrets (and the secured labs' Kafka passwords)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
        f.write("\n".join(lines) + "\n")
    tmp.replace(env_file)
    ensure_passwords()
    ensure_dag_files()
    return env_file


def ensure_dag_files() -> Path:
    """The lab's dags folder holds what a deployment's does: the loaders `fleetctl deploy dags`
    writes (the same function), importing the DAGs from the installed package; the plugin comes
    from the package's entry point, so the plugins folder stays empty."""
    from fleet_airflow.dag_files import install

    install(dags_folder())
    (airflow_home() / "plugins").mkdir(parents=True, exist_ok=True)
    return dags_folder()


def ensure_passwords() -> dict[str, str]:
    """The UI users' passwords (SimpleAuthManager), generated once per Airflow home."""
    pw_file = airflow_home() / "simple_auth_manager_passwords.json.generated"
    if not pw_file.exists():
        pw_file.parent.mkdir(parents=True, exist_ok=True)
        pw_file.write_text(json.dumps({u: secrets.token_urlsafe(12) for u in USERS}))
        os.chmod(pw_file, 0o600)
    return passwords()


def passwords() -> dict[str, str]:
    pw_file = airflow_home() / "simple_auth_manager_passwords.json.generated"
    try:
        return json.loads(pw_file.read_text())
    except (OSError, ValueError):
        return {}


def _env() -> dict[str, str]:
    from fleetlab.paths import load_airflow_env

    load_airflow_env()
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    base = api_url()
    env.update({"AIRFLOW__API__PORT": str(API_PORT), "AIRFLOW__API__BASE_URL": base,
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{base}/execution/"})
    return env


def _airflow_bin() -> str:
    return str(Path(sys.executable).parent / "airflow")


def _db_revision() -> str | None:
    """The metadata database's Alembic revision (None: not migrated yet, or not readable)."""
    spec = pg_spec()
    try:
        conn = postgres._connect(spec, spec.database)
    except Exception:  # noqa: BLE001 - no database: migrate
        return None
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT version_num FROM alembic_version")
            rows = cur.fetchall()
        return ",".join(sorted(r[0] for r in rows)) or None
    except Exception:  # noqa: BLE001 - no alembic_version table: migrate
        return None
    finally:
        conn.close()


def _migrated_stamp() -> Path:
    return pg_spec().home / f"migrated-{pg_spec().database}.json"


def _airflow_version() -> str:
    from importlib.metadata import version

    return version("apache-airflow")


def migrate_needed(stamp_text: str | None, revision: str | None, airflow_version: str) -> bool:
    """False only when the stamp says this Airflow version migrated the database to the revision it
    has now (a fresh or reset database, another Airflow version, a broken stamp: migrate)."""
    try:
        done = json.loads(stamp_text) if stamp_text else None
    except ValueError:
        return True
    return revision is None or done != {"airflow": airflow_version, "revision": revision}


def migrate() -> bool:
    """`airflow db migrate`, unless this Airflow version migrated this database to the revision it
    has now (the stamp written after each migrate): the command costs an Airflow start-up (10 s and
    more) even when there is nothing to do. Returns whether it ran."""
    stamp = _migrated_stamp()
    try:
        stamp_text = stamp.read_text()
    except OSError:
        stamp_text = None
    if not migrate_needed(stamp_text, _db_revision(), _airflow_version()):
        return False
    out = subprocess.run([_airflow_bin(), "db", "migrate"], env=_env(), capture_output=True, text=True)
    if out.returncode != 0:
        raise FleetError(f"airflow db migrate failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    revision = _db_revision()
    if revision is not None:
        stamp.write_text(json.dumps({"airflow": _airflow_version(), "revision": revision}))
    return True


def _pid_file(name: str) -> Path:
    return airflow_home() / "run" / f"{name}.pid"


def _marker(name: str = "") -> str:
    """What the command line of our process `name` holds. A Celery worker retitles itself
    ("[celeryd: <node name>:MainProcess] ..."), keeping its node name; the log servers run
    fleetlab.celery_worker; the other components keep `airflow` in their command line."""
    if name.startswith("celery-worker-"):
        return celery_hostname(int(name.rsplit("-", 1)[1]))
    if name.startswith("celery-log-server-"):
        return LOG_SERVER_MARKER
    return "airflow"


def up(timeout: float = 180, write_env_file: bool = True, profile_name: str | None = None,
       progress=None) -> None:
    """Start what is not running yet, in the profile `profile_name` (default: FLEET_PROFILE, else
    embedded), and wait until the api-server answers.

    An Airflow already running in the other profile is switched: the scheduler (which holds the
    executor) is restarted, and going back to embedded stops the Celery workers, Redis and Spark.
    `progress(line)`, when given, hears how long each step took.
    """
    chosen = profile(profile_name)
    t = time.monotonic()

    def step(what: str) -> None:
        nonlocal t
        if progress is not None:
            progress(f"{what} in {time.monotonic() - t:.1f}s")
        t = time.monotonic()
    previous = running_profile()
    if previous is not None and "hosts" in (previous, chosen) and previous != chosen:
        raise FleetError(f"the running Airflow is in the {previous} profile: stop it first (`fleetlab airflow "
                         f"down`, or `make stop`) to start it in the {chosen} profile (its database and "
                         "services move between this machine's loopback and the lab hosts)")
    if chosen == "hosts":
        addresses = hosts_profile.up()
        step(f"lab hosts up ({len(addresses)} network namespaces on the lab's bridge)")
        hosts_profile.kafka_up(port_plan())
        hosts_profile.store_up(port_plan())
        os.environ["FLEET_FILE"] = str(hosts_profile.fleet_file())
        step(f"Kafka {hosts_profile.KAFKA_VERSION} ({hosts_profile.KAFKA_CLUSTER}) up on the broker hosts")
    if write_env_file:
        from fleetlab.paths import read_env_file

        # the file was written from this environment, but where the database, the api-server and the
        # fleet are depends on the profile: its values win over ones loaded before (another profile's)
        os.environ.update(read_env_file(ensure_env_file()))
    ensure_passwords()
    env = {**_env(), **profile_env(chosen)}
    db_up()
    if chosen == "hosts":
        postgres.ensure_database(state_pg_spec())
    step("postgresql up")
    step("airflow db migrate" if migrate() else "database already migrated by this Airflow version (checked)")
    (airflow_home() / "run").mkdir(parents=True, exist_ok=True)
    if previous is not None and previous != chosen:
        print(f"switching the running Airflow from the {previous} to the {chosen} profile: restarting the "
              f"scheduler ({procs.stop(_pid_file('scheduler'), _marker(), group=True)})", flush=True)
        if chosen == "embedded":
            _cluster_down()
    if chosen in ("cluster", "hosts"):
        redis_server.up(redis_spec())
        spark_cluster.up(spark_spec())
    _profile_file().write_text(chosen + "\n")
    def start(name: str) -> None:
        if procs.owned_pid(_pid_file(name), _marker()):
            return
        argv = [_airflow_bin(), name]
        if name in ("scheduler", "triggerer"):
            argv.append("--skip-serve-logs")
        if name == "api-server":
            argv += ["--host", api_host(), "--port", str(API_PORT)]
        procs.start(argv, _pid_file(name), airflow_home() / "logs" / f"{name}.out", env=env, cwd=str(REPO_ROOT),
                    netns=hosts_profile.place(hosts_profile.AIRFLOW)[1])

    # Task processes report to the api-server's execution API: the components that run tasks
    # (scheduler with its executor, triggerer, Celery workers) start once it answers, so that a run
    # the scheduler starts at once (a schedule interval already due) never fails its first tasks
    # with "connection refused". The dag-processor parses DAGs meanwhile.
    runs_tasks = ("scheduler", "triggerer")
    for name in COMPONENTS:
        if name not in runs_tasks:
            start(name)
    deadline = time.monotonic() + timeout
    waiting_for = [n for n in COMPONENTS if n not in runs_tasks]
    while time.monotonic() < deadline:
        if api_healthy():
            step("api-server answering")
            break
        _check_alive(waiting_for)
        time.sleep(1)
    else:
        raise FleetError(f"the Airflow api-server did not answer on {api_url()} in {timeout:.0f}s")
    for name in runs_tasks:
        start(name)
    if chosen in ("cluster", "hosts"):
        _start_celery_workers(env)
        _wait_celery_workers(deadline=max(deadline, time.monotonic() + 60))


def _check_alive(names) -> None:
    for name in names:
        if not procs.owned_pid(_pid_file(name), _marker(name)):
            log = airflow_home() / "logs" / f"{name}.out"
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
            raise FleetError(f"airflow {name} exited during start-up; last lines of {log}:\n{tail}")


def _profile_file() -> Path:
    return airflow_home() / "run" / "profile"


def running_profile() -> str | None:
    """The profile of the running scheduler (None when it is not running)."""
    if procs.owned_pid(_pid_file("scheduler"), _marker()) is None:
        return None
    try:
        recorded = _profile_file().read_text().strip()
    except OSError:
        return "embedded"
    return recorded if recorded in PROFILES else "embedded"


def _clustered(name: str | None) -> bool:
    return name in ("cluster", "hosts")


def _celery_names() -> list[str]:
    return [f"celery-worker-{i}" for i in range(CELERY_WORKERS)]


def _log_server_names() -> list[str]:
    return [f"celery-log-server-{i}" for i in range(CELERY_WORKERS)]


LOG_SERVER_MARKER = "fleetlab.celery_worker"


def _start_celery_workers(env: dict[str, str]) -> None:
    """`airflow celery worker` x CELERY_WORKERS (no log server of their own: it would listen on
    every interface), and a loopback log server for each."""
    run = airflow_home() / "run"
    for i, (name, server) in enumerate(zip(_celery_names(), _log_server_names())):
        worker_env = {**env, **celery_worker_env(i)}
        host, netns = hosts_profile.place(hosts_profile.WORKERS[i])
        if not procs.owned_pid(_pid_file(name), _marker(name)):
            argv = [_airflow_bin(), "celery", "worker", "--celery-hostname", celery_hostname(i),
                    "--concurrency", str(CELERY_CONCURRENCY), "--skip-serve-logs",
                    "--pid", str(run / f"{name}.celery-pid")]
            procs.start(argv, _pid_file(name), airflow_home() / "logs" / f"{name}.out", env=worker_env,
                        cwd=str(REPO_ROOT), netns=netns)
        if not procs.owned_pid(_pid_file(server), _marker(server)):
            port = port_plan().celery_log_server(i)
            if procs.port_open(host, port):
                raise FleetError(f"port {host}:{port} (the log server of Celery worker {i}) is taken by "
                                 "another process")
            procs.start([sys.executable, "-m", LOG_SERVER_MARKER, "--port", str(port), "--host", host],
                        _pid_file(server), airflow_home() / "logs" / f"{server}.out", env=worker_env,
                        cwd=str(REPO_ROOT), netns=netns)


def celery_ping(timeout: float = 2.0) -> list[str]:
    """The Celery node names that answer a ping through the broker."""
    from celery import Celery

    app = Celery(broker=redis_spec().url())
    try:
        replies = app.control.ping(timeout=timeout) or []
    finally:
        app.close()
    return sorted(name for reply in replies for name in reply)


def _wait_celery_workers(deadline: float) -> None:
    wanted = set(celery_hostnames())
    seen: set[str] = set()
    while time.monotonic() < deadline:
        _check_alive(_celery_names())
        seen = set(celery_ping())
        if wanted <= seen:
            return
        time.sleep(1)
    raise FleetError(f"Celery workers {sorted(wanted - seen)} did not answer a ping through "
                     f"Redis on {redis_spec().where}; logs: {airflow_home() / 'logs'}/celery-worker-*.out")


def api_healthy() -> bool:
    try:
        with urllib.request.urlopen(f"{api_url()}/api/v2/monitor/health", timeout=2) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def db_up() -> postgres.PgSpec:
    """Start (creating it on first use) the metadata database's PostgreSQL."""
    spec = pg_spec()
    postgres.up(spec)
    return spec


def _cluster_down(timeout: float = 30) -> list[str]:
    """Stop what the cluster profile adds (whatever of it runs): the Celery workers (warm shutdown:
    SIGTERM lets running tasks finish for `timeout`, then SIGKILL to the worker's process group),
    their log servers, Spark, Redis."""
    out = []
    for name in _celery_names():
        if _pid_file(name).exists():
            out.append(f"{name}: {_stop_celery_worker(name, timeout)}")
    for name in _log_server_names():
        if _pid_file(name).exists():
            out.append(f"{name}: {procs.stop(_pid_file(name), _marker(name), timeout=10)}")
    spark = spark_spec()
    if any(spark.pid_file(n).exists() for n in spark.names()):
        out += spark_cluster.down(spark)
    if redis_spec().pid_file.exists():
        out.append(f"redis: {redis_server.down(redis_spec())}")
    return out


def _stop_celery_worker(name: str, timeout: float) -> str:
    """Warm shutdown (SIGTERM: running tasks may finish for `timeout`), then SIGKILL to its process
    group. A task runs in a session of its own (`airflow worker -- <id>`, and its spark-submit), out
    of the worker's group: whatever of the worker's descendants outlives it gets SIGTERM, then
    SIGKILL after 10 s."""
    import psutil

    pid = procs.owned_pid(_pid_file(name), _marker(name))
    descendants = []
    if pid is not None:
        try:
            descendants = psutil.Process(pid).children(recursive=True)
        except psutil.Error:
            pass
    result = procs.stop(_pid_file(name), _marker(name), timeout=timeout, group=True)
    def alive(p) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.Error:
            return False

    left = [p for p in descendants if alive(p)]
    if left:
        for p in left:
            try:
                p.terminate()
            except psutil.Error:
                pass
        _, alive = psutil.wait_procs(left, timeout=10)
        for p in alive:
            try:
                p.kill()
            except psutil.Error:
                pass
        result += f", {len(left)} task process(es) it left stopped"
    return result


def down(timeout: float = 30, database: bool = True) -> list[str]:
    """Stop the components (each with the processes it left in its group, such as LocalExecutor
    workers), then what the cluster profile adds (Celery workers, Spark, Redis), then PostgreSQL
    (unless database=False: the tests stop theirs themselves)."""
    out = [f"{name}: {procs.stop(_pid_file(name), _marker(), timeout=timeout, group=True)}"
           for name in reversed(COMPONENTS)]
    out += _cluster_down(timeout)
    _profile_file().unlink(missing_ok=True)
    if database:
        out.append(f"postgresql: {postgres.down(pg_spec())}")
        out += hosts_profile.kafka_down(port_plan())
        out += hosts_profile.store_down(port_plan())
        if hosts_profile.placed():  # the hosts profile's network goes with its last process
            out += hosts_profile.down()
    return out


def status() -> list[dict]:
    rows = []
    for name in COMPONENTS:
        pid = procs.owned_pid(_pid_file(name), _marker())
        rows.append({"component": name, "pid": pid, "running": pid is not None})
    if _clustered(running_profile()) or any(_pid_file(n).exists() for n in _celery_names()):
        for name in _celery_names() + _log_server_names():
            pid = procs.owned_pid(_pid_file(name), _marker(name))
            rows.append({"component": name, "pid": pid, "running": pid is not None})
        pid = redis_server.running(redis_spec())
        rows.append({"component": "redis", "pid": pid, "running": pid is not None})
        rows += spark_cluster.status(spark_spec())
    pid = postgres.running(pg_spec())
    rows.append({"component": "postgresql", "pid": pid, "running": pid is not None})
    return rows


_TOKENS: dict[tuple[str, int, str], tuple[float, str]] = {}
TOKEN_REUSE_SECONDS = 600


def api_token(user: str = "admin") -> str:
    """A JWT for `user`, reused for a few minutes (a busy api-server answers /auth/token slowly)."""
    key = (api_host(), API_PORT, user)
    cached = _TOKENS.get(key)
    if cached and time.monotonic() - cached[0] < TOKEN_REUSE_SECONDS:
        return cached[1]
    body = json.dumps({"username": user, "password": passwords().get(user, "")}).encode()
    req = urllib.request.Request(f"{api_url()}/auth/token", data=body,
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        token = json.loads(r.read())["access_token"]
    _TOKENS[key] = (time.monotonic(), token)
    return token


def api(method: str, path: str, body: dict | None = None, user: str = "admin", attempts: int = 3) -> dict:
    """A REST call as `user`. Reads are retried on a timeout or a refused connection (a loaded
    api-server); writes are sent again only after a 401 (a token the api-server no longer takes)."""
    tries = attempts if method == "GET" else 2
    for attempt in range(1, tries + 1):
        req = urllib.request.Request(f"{api_url()}{path}", method=method,
                                     data=json.dumps(body).encode() if body is not None else None,
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {api_token(user)}"})
        try:
            with urllib.request.urlopen(req, timeout=60) as r:
                raw = r.read()
                return json.loads(raw) if raw else {}
        except urllib.error.HTTPError as e:
            if e.code == 401:
                _TOKENS.pop((api_host(), API_PORT, user), None)
            if e.code != 401 or attempt == tries:
                raise
        except (TimeoutError, urllib.error.URLError):
            if attempt == tries or method != "GET":
                raise
        time.sleep(2 * attempt)
    raise AssertionError("unreachable")

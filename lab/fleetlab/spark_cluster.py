"""A Spark standalone cluster on one machine: a master and N workers of the pyspark distribution
in .venv, for the cluster profile and the benchmarks.

pip's pyspark ships bin/spark-class but none of the sbin start scripts, so each daemon is
`spark-class org.apache.spark.deploy.master.Master ...` / `... deploy.worker.Worker ...` run in the
foreground, started and stopped by PID like every other lab process. Everything binds 127.0.0.1
(`--host`, SPARK_LOCAL_IP for the web UIs), or, on the several-hosts lab (`placement`), each daemon
its own lab host's address inside that host's network namespace; the ports come from the port plan
(fleetlab.ports.PortPlan: spark_master, spark_master_ui, spark_worker(i), spark_worker_ui(i)),
never Spark's 7077 / 8080 / 8081. Workers are small (1 core, 1g each by default).

The executors' Python is a second virtualenv (.cache/spark-exec-venv) holding only pyspark,
pandas, pyarrow and numpy at the lock's versions, and NOT the project: the project's code reaches
executors only through the jobs' --py-files, as on a real cluster. Jobs submitted through the
cluster's conf folder (SPARK_CONF_DIR=<home>/conf, its spark-defaults.conf) run their executors on
it (spark.pyspark.python) and their driver on the submitting side's .venv
(spark.pyspark.driver.python).

On one machine every worker reads and writes the same folders, so the data root is simply a local
path; on a real cluster it must be a path every executor reads (a shared file system or an object
store).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from fleetkit.core.errors import FleetError
from fleetlab import procs
from fleetlab.ports import PortPlan

from fleetlab.paths import CHECKOUT as REPO  # noqa: E402
VENV_BIN = REPO / ".venv" / "bin"
EXEC_VENV = REPO / ".cache" / "spark-exec-venv"
#: what the executors' Python holds: these packages at requirements.lock's versions, nothing else
EXEC_PACKAGES = ("pyspark", "pandas", "pyarrow", "numpy")
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


class SparkClusterError(FleetError):
    pass


@dataclass(frozen=True)
class SparkClusterSpec:
    home: Path
    master_port: int
    master_ui_port: int
    worker_ports: tuple[int, ...]
    worker_ui_ports: tuple[int, ...]
    worker_cores: int = 1
    worker_memory: str = "1g"
    exec_python: Path = field(default=EXEC_VENV / "bin" / "python")
    driver_python: Path = field(default=VENV_BIN / "python")
    #: (daemon name, address, network namespace) of daemons on lab hosts (fleetlab.hosts); a daemon
    #: not listed runs on this machine's loopback
    placement: tuple[tuple[str, str, str], ...] = ()

    def address(self, name: str) -> str:
        """The address daemon `name` ("master", "worker-<i>") binds and is reached at."""
        return next((a for n, a, _ in self.placement if n == name), "127.0.0.1")

    def netns(self, name: str) -> str | None:
        return next((ns for n, _, ns in self.placement if n == name), None)

    @classmethod
    def from_plan(cls, home: Path, plan: PortPlan, workers: int = 2, **kwargs) -> "SparkClusterSpec":
        return cls(home=Path(home), master_port=plan.spark_master, master_ui_port=plan.spark_master_ui,
                   worker_ports=tuple(plan.spark_worker(i) for i in range(workers)),
                   worker_ui_ports=tuple(plan.spark_worker_ui(i) for i in range(workers)), **kwargs)

    @property
    def master_url(self) -> str:
        return f"spark://{self.address('master')}:{self.master_port}"

    @property
    def master_ui(self) -> str:
        return f"http://{self.address('master')}:{self.master_ui_port}"

    @property
    def workers(self) -> int:
        return len(self.worker_ports)

    @property
    def conf_dir(self) -> Path:
        """SPARK_CONF_DIR of the jobs submitted to this cluster (spark-defaults.conf)."""
        return self.home / "conf"

    @property
    def daemon_properties(self) -> Path:
        """--properties-file of the master and workers (also how their PIDs are checked to be ours)."""
        return self.home / "daemon.properties"

    def names(self) -> list[str]:
        return ["master"] + [f"worker-{i}" for i in range(self.workers)]

    def pid_file(self, name: str) -> Path:
        return self.home / "run" / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.home / "logs" / f"{name}.out"

    def connection(self) -> dict:
        """The Airflow `spark_default` connection (AIRFLOW_CONN_SPARK_DEFAULT) for this master."""
        return {"conn_type": "spark", "host": f"spark://{self.address('master')}", "port": self.master_port,
                "extra": {"deploy-mode": "client"}}


# -- the executors' virtualenv --------------------------------------------------------------------

def locked_versions(lock: Path = REPO / "requirements.lock", names=EXEC_PACKAGES) -> dict[str, str]:
    """name -> version pinned in requirements.lock, for `names`; a clear error for one missing."""
    pins = {}
    for line in lock.read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==([^\s;#]+)", line)
        if m:
            pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    missing = [n for n in names if n not in pins]
    if missing:
        raise SparkClusterError(f"{lock}: no pinned version of {', '.join(missing)} (run `make lock`)")
    return {n: pins[n] for n in names}


def ensure_exec_venv(path: Path = EXEC_VENV) -> Path:
    """Create (or bring up to the lock's versions) the executors' virtualenv; returns its python.

    Same interpreter version as .venv (PySpark refuses a driver and executors of different minor
    versions), only EXEC_PACKAGES and their dependencies (constrained by the lock), never the
    project."""
    versions = locked_versions()
    wanted = " ".join(f"{n}=={v}" for n, v in versions.items())
    stamp = path / ".fleet-installed"
    python = path / "bin" / "python"
    if python.exists() and stamp.exists() and stamp.read_text().strip() == wanted:
        return python
    uv = VENV_BIN / "uv"
    if not uv.exists():
        raise SparkClusterError(f"{uv} is missing: run `make setup` first")
    base = getattr(sys, "_base_executable", sys.executable)
    if not python.exists():
        _run([str(uv), "venv", "--quiet", "--python", base, str(path)], "creating the executors' virtualenv")
    _run([str(uv), "pip", "install", "--quiet", "--python", str(python), *wanted.split(),
          "-c", str(REPO / "requirements.lock")], "installing the executors' packages")
    stamp.write_text(wanted + "\n")
    return python


def _run(argv: list[str], what: str) -> None:
    out = subprocess.run(argv, capture_output=True, text=True)
    if out.returncode != 0:
        raise SparkClusterError(f"{what} failed ({' '.join(argv)}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")


# -- configuration --------------------------------------------------------------------------------

def spark_defaults(spec: SparkClusterSpec) -> dict[str, str]:
    """spark-defaults.conf of the jobs submitted to this cluster."""
    return {
        # executors: the second virtualenv (the project reaches them only through --py-files)
        "spark.pyspark.python": str(spec.exec_python),
        # the driver runs where spark-submit runs (client mode): the Airflow workers' .venv
        "spark.pyspark.driver.python": str(spec.driver_python),
        "spark.executor.memory": spec.worker_memory,
        **({"spark.executor.extraJavaOptions": " ".join(flags)} if (flags := procs.jvm_flags()) else {}),
        # where the driver listens is the submitting side's: SPARK_LOCAL_IP of the Airflow worker
        # (loopback on one machine, its lab host's address on the several-hosts lab)
    }


def daemon_properties(spec: SparkClusterSpec) -> dict[str, str]:
    return {
        "spark.master.rest.enabled": "false",  # no submission REST server (it would take port 6066)
        # a taken port is an error, not a silent move to the next one (the UIs would not be where
        # the port plan says); up() retries a daemon whose port was briefly taken
        "spark.port.maxRetries": "0",
        "spark.ui.reverseProxy": "false",
        "spark.worker.cleanup.enabled": "true",
    }


def _properties_text(props: dict[str, str]) -> str:
    return "# written by fleetlab.spark_cluster\n" + "".join(f"{k} {v}\n" for k, v in props.items())


def write_config(spec: SparkClusterSpec) -> None:
    spec.conf_dir.mkdir(parents=True, exist_ok=True)
    (spec.conf_dir / "spark-defaults.conf").write_text(_properties_text(spark_defaults(spec)))
    spec.daemon_properties.write_text(_properties_text(daemon_properties(spec)))


def daemon_env(spec: SparkClusterSpec, base: dict | None = None, name: str = "master") -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.pop("PYTHONPATH", None)  # executors see the py-files and their own venv, nothing of ours
    env.update({
        "PATH": f"{VENV_BIN}:{env.get('PATH', '')}",
        "SPARK_LOCAL_IP": spec.address(name),  # the web UIs bind to it
        "SPARK_CONF_DIR": str(spec.conf_dir),
        "SPARK_DAEMON_MEMORY": "512m",
        "SPARK_DAEMON_JAVA_OPTS": " ".join(procs.jvm_flags()),
        "SPARK_LOCAL_DIRS": str(spec.home / "local"),
        "PYSPARK_PYTHON": str(spec.exec_python),
    })
    env.pop("SPARK_HOME", None)  # found from spark-class in .venv
    return env


def submit_env(spec: SparkClusterSpec) -> dict[str, str]:
    """What a spark-submit to this cluster needs in its environment (the Airflow workers' env)."""
    return {"SPARK_CONF_DIR": str(spec.conf_dir)}


def argv(spec: SparkClusterSpec, name: str) -> list[str]:
    spark_class = str(VENV_BIN / "spark-class")
    props = ["--properties-file", str(spec.daemon_properties)]
    if name == "master":
        return [spark_class, MASTER_CLASS, "--host", spec.address(name), "--port", str(spec.master_port),
                "--webui-port", str(spec.master_ui_port), *props]
    i = int(name.removeprefix("worker-"))
    return [spark_class, WORKER_CLASS, "--host", spec.address(name), "--port", str(spec.worker_ports[i]),
            "--webui-port", str(spec.worker_ui_ports[i]), "--cores", str(spec.worker_cores),
            "--memory", spec.worker_memory, "--work-dir", str(spec.home / name / "work"), *props, spec.master_url]


def _ports(spec: SparkClusterSpec, name: str) -> list[int]:
    if name == "master":
        return [spec.master_port, spec.master_ui_port]
    i = int(name.removeprefix("worker-"))
    return [spec.worker_ports[i], spec.worker_ui_ports[i]]


def _marker(spec: SparkClusterSpec) -> str:
    return str(spec.daemon_properties)


# -- control --------------------------------------------------------------------------------------

def running(spec: SparkClusterSpec, name: str) -> int | None:
    return procs.owned_pid(spec.pid_file(name), _marker(spec))


def master_state(spec: SparkClusterSpec, timeout: float = 3) -> dict | None:
    """The master's state (its web UI's /json: workers, active and completed applications), or None
    when it does not answer."""
    try:
        with urllib.request.urlopen(f"{spec.master_ui}/json/", timeout=timeout) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, OSError, ValueError):
        return None


def alive_workers(state: dict | None) -> int:
    return sum(1 for w in (state or {}).get("workers", []) if w.get("state") == "ALIVE")


def applications(spec: SparkClusterSpec) -> list[dict]:
    """Every application the master knows (active and completed), from /json."""
    state = master_state(spec) or {}
    return list(state.get("activeapps", [])) + list(state.get("completedapps", []))


def up(spec: SparkClusterSpec, timeout: float = 120) -> None:
    """Start the master and the workers (those not already running) and wait until the master
    reports every worker ALIVE."""
    ensure_exec_venv(spec.exec_python.parent.parent)
    write_config(spec)
    (spec.home / "run").mkdir(parents=True, exist_ok=True)
    for name in spec.names():
        if running(spec, name) is not None:
            continue
        env = daemon_env(spec, name=name)
        for port in _ports(spec, name):
            if procs.port_open(spec.address(name), port):
                raise SparkClusterError(f"port {spec.address(name)}:{port} is taken by another process: the Spark "
                                        f"{name} of {spec.home} cannot start there")
        (spec.home / name).mkdir(parents=True, exist_ok=True)
        for attempt in range(1, BIND_ATTEMPTS + 1):
            procs.start(argv(spec, name), spec.pid_file(name), spec.log_file(name), env=env,
                        cwd=str(spec.home / name), netns=spec.netns(name))
            try:
                if name == "master":
                    _wait(spec, timeout, lambda s: s is not None, "the master's web UI to answer")
                else:
                    i = int(name.removeprefix("worker-"))
                    _wait(spec, timeout, lambda s, i=i, name=name: _worker_alive(s, spec.worker_ports[i], spec.address(name)),
                          f"Spark {name} to register with the master")
                break
            except SparkClusterError:
                # a port of the plan can be held for a moment by an outgoing connection (the plan
                # lies in the kernel's ephemeral range): try again, up to BIND_ATTEMPTS times
                if attempt == BIND_ATTEMPTS or running(spec, name) is not None or not _bind_failed(spec, name):
                    raise
                spec.pid_file(name).unlink(missing_ok=True)
                time.sleep(2)
    _wait(spec, timeout, lambda s: alive_workers(s) >= spec.workers, f"{spec.workers} ALIVE workers")


BIND_ATTEMPTS = 3


def _worker_alive(state: dict | None, port: int, host: str = "127.0.0.1") -> bool:
    return any(w.get("state") == "ALIVE" and w.get("port") == port and w.get("host") == host
               for w in (state or {}).get("workers", []))


def _bind_failed(spec: SparkClusterSpec, name: str) -> bool:
    text = _tail(spec.log_file(name), 60)
    return "could not bind" in text or "Address already in use" in text


def _wait(spec: SparkClusterSpec, timeout: float, ok, what: str) -> dict:
    deadline = time.monotonic() + timeout
    state = None
    while time.monotonic() < deadline:
        for name in spec.names():
            if spec.pid_file(name).exists() and running(spec, name) is None:
                raise SparkClusterError(f"Spark {name} of {spec.home} exited during start-up; last lines of "
                                        f"{spec.log_file(name)}:\n{_tail(spec.log_file(name))}")
        state = master_state(spec)
        if ok(state):
            return state
        time.sleep(0.5)
    raise SparkClusterError(f"waited {timeout:.0f}s for {what} at {spec.master_ui}/json/ (last state: "
                            f"{alive_workers(state)} ALIVE workers); logs in {spec.home / 'logs'}")


def down(spec: SparkClusterSpec, timeout: float = 20) -> list[str]:
    """Stop the workers (their executors with them), then the master: SIGTERM, SIGKILL after `timeout`."""
    out = []
    for name in reversed(spec.names()):
        out.append(f"spark {name}: {procs.stop(spec.pid_file(name), _marker(spec), timeout=timeout, group=True)}")
    return out


def status(spec: SparkClusterSpec) -> list[dict]:
    state = master_state(spec)
    rows = []
    for name in spec.names():
        pid = running(spec, name)
        rows.append({"component": f"spark-{name}", "pid": pid, "running": pid is not None})
    if state is not None:
        rows[0]["alive_workers"] = alive_workers(state)
    return rows


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


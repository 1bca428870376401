"""Spark jobs from Airflow: one factory for every spark-submit task of the DAGs.

    spark_job_operator("analyse_stuck", "stuck", [...args...], trigger_rule="all_done")

submits the installed package's job <job>.py (fleet_spark_jobs, the repository's spark_jobs/)
through the deployment's Spark connection (FLEET_SPARK_CONN_ID, default `spark_default`: its
master is local[*] in the lab, a cluster elsewhere) with the environment of
fleet_airflow.settings.spark_env(), computed on the worker when the task runs. The job gets the
toolkit's code the way a cluster needs it: `--py-files` is a zip of the installed domain library
(the fleetkit package tree) and of the jobs' modules (jobs_common, and the job modules other jobs
import, e.g. trim_plan imports trim_health), built when the task runs in a temporary folder
removed when the job is over.

The zip holds .py files only. The library's templates (fleetkit/templates, used by
fleetkit.core.render) are not in it: no job renders a template (reports and runbooks are rendered
by the Airflow tasks).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any, Sequence

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.providers.common.compat.sdk import AirflowException

from fleet_airflow import settings

ZIP_NAME = "fleet_spark_py_files.zip"
# what every job is submitted with (the jobs' session() sets the same; a cluster's own defaults
# for anything else stay)
SPARK_CONF = {"spark.ui.enabled": "false", "spark.sql.session.timeZone": "UTC"}


def _package_dir(name: str) -> Path:
    import importlib

    return Path(importlib.import_module(name).__file__).resolve().parent


def library_dir() -> Path:
    """The installed fleetkit package (what the executors import)."""
    return _package_dir("fleetkit")


def jobs_dir() -> Path:
    """The installed Spark jobs (the fleet_spark_jobs package; spark-submit runs them as scripts)."""
    return _package_dir("fleet_spark_jobs")


def _py_sources(library: Path, jobs: Path) -> list[tuple[Path, str]]:
    """(source file, name in the zip): fleetkit/**/*.py, then the jobs' modules at the top level."""
    if not (library / "__init__.py").is_file():
        raise FileNotFoundError(f"{library} is not a Python package (no __init__.py)")
    out = [(f, f"{library.name}/{f.relative_to(library).as_posix()}")
           for f in sorted(library.rglob("*.py")) if "__pycache__" not in f.relative_to(library).parts]
    out += [(f, f.name) for f in sorted(jobs.glob("*.py")) if f.name != "__init__.py"]
    return out


def build_py_files(folder: str | Path, library: str | Path | None = None, jobs: str | Path | None = None) -> Path:
    """Write <folder>/fleet_spark_py_files.zip (for --py-files) from the current sources and return
    its path: every .py of the library package `library` (default include/fleetkit) under its
    package name, and every module of `jobs` (default spark_jobs/) at the top level."""
    library = Path(library) if library is not None else library_dir()
    jobs = Path(jobs) if jobs is not None else jobs_dir()
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    dest = folder / ZIP_NAME
    tmp = folder / f".{ZIP_NAME}.tmp"
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for source, name in _py_sources(library, jobs):
            z.write(source, name)
    tmp.replace(dest)
    return dest


def _arg(args: Sequence[str], name: str) -> str | None:
    """The value after `name` in a job's arguments (None when absent)."""
    args = list(args)
    return args[args.index(name) + 1] if name in args[:-1] else None


class FleetSparkSubmitOperator(SparkSubmitOperator):
    """SparkSubmitOperator whose job gets the project's code as --py-files (a zip built when the task
    runs, added to any py_files given).

    `in_process_input`: the argument naming the job's input (stuck: `--snapshots`,
    trim_health and group_ids: `--data-root`). When that input is small
    (fleetkit.core.inprocess.small_input: up to the job's row limit in core.inprocess.LIMITS, on a
    local path), the job runs with `--engine in-process` under the worker's Python instead of
    spark-submit: no JVM, the same files."""

    #: seconds a job run in process gets to end on SIGTERM when the task is killed, before SIGKILL
    KILL_GRACE_SECONDS = 10.0

    def __init__(self, *, in_process_input: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.in_process_input = in_process_input
        self._in_process = None

    def _small_input(self) -> bool:
        if not self.in_process_input:
            return False
        import datetime as dt

        from fleetkit.core import inprocess

        path = _arg(self.application_args or [], self.in_process_input)
        days = _arg(self.application_args or [], "--recent-days")
        since = dt.datetime.now(dt.timezone.utc).date() - dt.timedelta(days=int(days)) if days else None
        return bool(path) and inprocess.small_input(self.name, path, since)

    def _run_in_process(self) -> None:
        import os
        import subprocess
        import sys

        argv = [sys.executable, str(self.application), *self.application_args, "--engine", "in-process"]
        # the job's own minimal environment: nothing of Airflow's secrets (settings.job_env)
        env = {**settings.job_env(), **settings.data_root_store_env(),
               "PYTHONPATH": os.pathsep.join([str(library_dir().parent), str(jobs_dir())])}
        self.log.info("small input: %s runs in process (no Spark start-up): %s", self.name,
                      " ".join([Path(argv[1]).name, *argv[2:]]))
        proc = self._in_process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                   text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            self.log.info("%s", line.rstrip())
        if proc.wait() != 0:
            raise AirflowException(f"{self.name} (in process) exited with code {proc.returncode}: see the lines above")

    def _get_hook(self):
        """The provider's hook, whose spark-submit runs with settings.spark_env() and nothing else of the
        worker's environment (the hook would otherwise start it with a copy of the task's whole
        environment: Airflow's secrets, the audit key, every connection)."""
        extra = dict(self.env_vars or {})
        self.env_vars = None  # given to the hook, it would start spark-submit with the whole environment
        try:
            hook = super()._get_hook()
        finally:
            self.env_vars = extra or None
        submit = hook.submit
        env = {**settings.spark_env(), **extra}

        def submit_with_env(application: str = "", **kwargs: Any):
            kwargs["env"] = env
            return submit(application, **kwargs)

        hook.submit = submit_with_env
        return hook

    def on_kill(self) -> None:
        """A killed task stops the job it runs in process too (by its PID: SIGTERM, then SIGKILL)."""
        import subprocess

        proc = self._in_process
        if proc is None:
            return super().on_kill()
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(self.KILL_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def execute(self, context: Any) -> Any:
        # the job's file in this worker's installation, and the environment of this worker: neither
        # is known where the DAG was parsed (another host, another Python)
        self.application = str(jobs_dir() / f"{self.name}.py")
        if self._small_input():
            return self._run_in_process()
        if self.in_process_input and "--engine" not in (self.application_args or []):
            # decided here, once: the job does not judge its input's size again under spark-submit
            self.application_args = [*(self.application_args or []), "--engine", "spark"]
        folder = Path(tempfile.mkdtemp(prefix=f"fleet-spark-{re.sub(r'[^A-Za-z0-9_.-]', '_', self.task_id)}-"))
        try:
            zip_path = build_py_files(folder)
            self.log.info("py-files: %s", zip_path)
            self.py_files = ",".join(p for p in (self.py_files, str(zip_path)) if p)
            # the deployment's extra jars (FLEET_SPARK_JARS: hadoop-aws and the AWS SDK bundle for an
            # s3:// data root), read on the worker; the store's keys reach the job in its environment
            self.jars = ",".join(p for p in (self.jars, os.environ.get("FLEET_SPARK_JARS")) if p) or None
            self._hook = None  # the hook takes py_files and conf when it is made
            self.conf = driver_conf(self._get_hook()._connection["master"], self.conf)
            self._hook = None
            return super().execute(context)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


def driver_conf(master: str, conf: dict | None) -> dict:
    """The job's Spark conf with where its driver listens. On a local master the driver stays on
    loopback (127.0.0.1, nothing to reach from elsewhere). On a cluster (client mode: the driver runs
    on this worker) nothing is pinned here: the driver advertises this host's address, SPARK_LOCAL_IP
    when the worker sets it, else the address of its host name (Spark's own rule), or
    spark.driver.host / spark.driver.bindAddress where the Spark connection's conf or the cluster's
    spark-defaults.conf give them."""
    out = dict(conf or {})
    if master.startswith("local"):
        out.setdefault("spark.driver.host", "127.0.0.1")
        out.setdefault("spark.driver.bindAddress", "127.0.0.1")
    return out


def spark_job_operator(task_id: str, job: str, application_args: Sequence[str], *,
                       conf: dict[str, str] | None = None, **kwargs: Any) -> FleetSparkSubmitOperator:
    """The task that runs the Spark job `job` (fleet_spark_jobs/<job>.py, application name `job`) with
    these arguments (templated) through the deployment's Spark connection (FLEET_SPARK_CONN_ID), the
    toolkit's code as --py-files, the settings.spark_env() environment (made when the task runs) and
    SPARK_CONF (plus `conf`). Other keyword arguments (trigger_rule, execution_timeout,
    in_process_input, ...) go to the operator."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", job):
        raise ValueError(f"job {job!r} must be a module name of spark_jobs/ (like 'stuck')")
    return FleetSparkSubmitOperator(
        task_id=task_id,
        conn_id=settings.spark_conn_id(),
        name=job,
        application=f"{job}.py",  # made a path of this worker's installation when the task runs
        application_args=list(application_args),
        conf={**SPARK_CONF, **(conf or {})},
        **kwargs,
    )

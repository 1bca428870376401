"""The Airflow side of the deployment's settings: what DAG templates see, the refusal of a run conf
that names a deployment setting, and spark-submit's environment. The settings themselves are read
in one place, fleetkit.core.settings, re-exported here for the adapters.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from fleetkit.core.settings import (  # noqa: F401  (re-exported for the adapters)
    MissingSetting, collection_interval, collection_interval_text, collection_schedule, data_root, fleet_file,
    lock_dir, plans_root, quarantine_root, require, retention_days, run_folder, spark_conn_id, spark_python,
    under_root)

from fleetkit.core.settings import safe_component as _safe_component

# Jinja filters of every DAG: run folders are named in one place (fleetkit.core.settings)
TEMPLATE_FILTERS = {"run_folder_name": _safe_component}


class Deployment:
    """The deployment settings seen from a template: ``{{ fleet_settings.data_root }}`` and
    ``{{ fleet_settings.fleet_file }}``, read from the environment when the template is rendered.
    Destructive runbooks use these, never trigger params: whoever triggers a run chooses neither
    the approvers (the fleet file) nor where the audit goes (the data root)."""

    @property
    def fleet_file(self) -> str:
        return fleet_file()

    @property
    def data_root(self) -> str:
        return data_root()


# Jinja macros of every DAG that reads the fleet file or the data root
DEPLOYMENT_MACROS = {"fleet_settings": Deployment()}

# what a run's conf may never name: every DAG reads them from the deployment (see Deployment)
DEPLOYMENT_KEYS = ("fleet_file", "data_root")


def deployment_keys_in(conf: dict | None) -> str | None:
    """Why a run's conf is refused for naming deployment settings, or None."""
    named = [k for k in DEPLOYMENT_KEYS if k in (conf or {})]
    if not named:
        return None
    return (f"the run conf names {', '.join(repr(k) for k in named)}: where the fleet file (which lists "
            "the approvers) and the data root (plans, audit) live is a deployment setting (FLEET_FILE, "
            "FLEET_DATA_ROOT), not a trigger param; trigger again without "
            f"{'them' if len(named) > 1 else 'it'}")


def refuse_deployment_conf(context) -> None:
    """Task pre-execute hook of the DAGs that are not runbooks (``deployment_default_args``): fail
    the task, before it reads or writes anything, when the run's conf names ``fleet_file`` or
    ``data_root``. Airflow accepts conf keys that are not params, so without this such a run would
    go ahead on the deployment's settings with the caller believing otherwise. Every task of the
    DAG checks, not only the first: tasks with trigger rule ``all_done`` run after a failed
    upstream. In a runbook the gate's `plan` task refuses (and audits) such a run itself; this
    hook stops the tasks before and around it (the trim runbook collects and analyses first)."""
    if context.get("task") is not None and getattr(context["task"], "task_id", None) == "plan":
        return
    wrong = deployment_keys_in(getattr(context.get("dag_run"), "conf", None))
    if wrong:
        from airflow.providers.common.compat.sdk import AirflowFailException

        raise AirflowFailException(f"REFUSED, nothing read or written: {wrong}")


def api_base_url() -> str:
    """Where Airflow's UI and REST API are: `[api] base_url` (without a trailing /), else
    http://<[api] host>:<[api] port> with a wildcard or empty host as loopback. Never from a
    request. The fleet page posts runs there; the approval notices link to the approval page there."""
    from airflow.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").strip().rstrip("/")
    if base:
        return base
    host = (conf.get("api", "host", fallback="") or "").strip().strip("[]")
    port = conf.getint("api", "port", fallback=8080)
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def deployment_default_args() -> dict:
    """default_args of every DAG of the toolkit: no retries, and every task refuses a run whose conf
    names a deployment setting (``refuse_deployment_conf``). Called when a DAG file is parsed, it
    first checks the deployment's required settings: without them the DAG does not load, and its
    import error is the one line naming the missing setting."""
    require()
    return {"retries": 0, "pre_execute": refuse_deployment_conf}


#: what a job's process (spark-submit, or a job run in the worker's own process) is given of the
#: worker's environment: the system's basics and Spark's, Java's and Hadoop's own variables, and the
#: toolkit's settings. Never Airflow's variables (its database URL, fernet key, JWT secret, the
#: audit key as AIRFLOW_VAR_FLEET_AUDIT_KEY, connections with their passwords) nor anything named
#: like a secret: a job reads datasets and writes files, it needs none of them.
JOB_ENV_NAMES = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "TEMP", "TMP",
                           "PYTHONHASHSEED", "SSL_CERT_FILE", "SSL_CERT_DIR"})
JOB_ENV_PREFIXES = ("LC_", "SPARK_", "PYSPARK_", "HADOOP_", "YARN_", "JAVA_", "FLEET_")
_SECRET_WORDS = ("PASSWORD", "PASSWD", "SECRET", "TOKEN", "CREDENTIAL", "_KEY", "PRIVATE")


def job_env(environ: dict | None = None) -> dict[str, str]:
    """The minimal environment of a job's process (JOB_ENV_NAMES and JOB_ENV_PREFIXES, minus
    anything named like a secret and fleetctl's own Airflow login), with the worker's own Python
    environment first on PATH (a pip-installed spark-submit finds Spark through the first python3
    on PATH; a SPARK_HOME on the worker takes precedence as usual) and the executors' Python
    (FLEET_SPARK_PYTHON, as PYSPARK_PYTHON) when the deployment names one. Made on the worker when
    the task runs, never where the DAG was parsed."""
    env = os.environ if environ is None else environ
    out = {k: v for k, v in env.items()
           if (k in JOB_ENV_NAMES or k.startswith(JOB_ENV_PREFIXES)) and not k.startswith("FLEET_AIRFLOW_")
           and not any(w in k.upper() for w in _SECRET_WORDS)}
    bin_dir = str(Path(sys.executable).parent)
    path = out.get("PATH", "")
    out["PATH"] = path if path.split(os.pathsep)[0] == bin_dir else os.pathsep.join(p for p in (bin_dir, path) if p)
    python = spark_python()
    if python:
        out["PYSPARK_PYTHON"] = python
    return out


def data_root_store_env() -> dict[str, str]:
    """What a job's process needs of an object store data root: the endpoint, region and keys of the
    connection FLEET_DATA_ROOT_CONN_ID names, as the AWS SDKs' environment variables (never on the
    job's command line). {} for a local data root."""
    if not data_root().startswith(("s3://", "s3a://")):
        return {}
    from fleetkit.core.datasets import object_store_options

    return object_store_options().child_env()


def spark_env() -> dict[str, str]:
    """The environment of spark-submit and of a job run in process: job_env(), and the data root's
    object store (data_root_store_env) when it is on one."""
    return {**job_env(), **data_root_store_env()}

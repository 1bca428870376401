"""The Airflow side of the settings: the Airflow home, its generated env file and spark-submit's
environment. Where the toolkit's files live (fleet file, data root, plans, quarantine, locks) is
fleetkit.core.settings, re-exported here for the adapters.
"""

from __future__ import annotations

import os
from pathlib import Path

from fleetkit.core.settings import (  # noqa: F401  (re-exported for the adapters)
    data_root, fleet_file, lock_dir, plans_root, quarantine_root, retention_days, run_folder)

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


def deployment_default_args() -> dict:
    """default_args of the DAGs that are not runbooks: no retries, and every task refuses a run whose
    conf names a deployment setting (``refuse_deployment_conf``)."""
    return {"retries": 0, "pre_execute": refuse_deployment_conf}


REPO_ROOT = Path(os.environ.get("FLEET_HOME") or Path(__file__).resolve().parents[2])


def spark_env() -> dict[str, str]:
    """Environment of spark-submit from Airflow: the venv's bin first (the pip-installed
    spark-submit finds Spark through the first python3 on PATH), loopback only."""
    venv_bin = str(REPO_ROOT / ".venv" / "bin")
    path = os.environ.get("PATH", "")
    return {"PATH": f"{venv_bin}:{path}" if not path.startswith(venv_bin) else path,
            "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": str(REPO_ROOT / ".venv" / "bin" / "python"),
            **({"JAVA_HOME": os.environ["JAVA_HOME"]} if os.environ.get("JAVA_HOME") else {})}


def airflow_home() -> Path:
    return Path(os.environ.get("AIRFLOW_HOME") or REPO_ROOT / ".airflow")


def airflow_env_file() -> Path:
    """The generated env file of the Airflow home in use (.airflow/airflow.env for the demo)."""
    return airflow_home() / "airflow.env"


def load_airflow_env() -> None:
    """Make this process see the same Airflow as the project's servers.

    Loads the generated .airflow/airflow.env (secrets, connection variables) without overriding
    anything already set, and points AIRFLOW_HOME / AIRFLOW_CONFIG at the project's.
    """
    os.environ.setdefault("FLEET_HOME", str(REPO_ROOT))
    os.environ.setdefault("AIRFLOW_HOME", str(REPO_ROOT / ".airflow"))
    os.environ.setdefault("AIRFLOW_CONFIG", str(REPO_ROOT / "airflow.cfg"))
    env_file = airflow_env_file()
    if env_file.exists():
        for line in env_file.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, value = line.split("=", 1)
            key = key.removeprefix("export ").strip()
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
                value = value[1:-1]
            os.environ.setdefault(key, value)

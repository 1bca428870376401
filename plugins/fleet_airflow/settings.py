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


# Jinja macros of the destructive runbooks
DEPLOYMENT_MACROS = {"fleet_settings": Deployment()}

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

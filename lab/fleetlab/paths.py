"""Where the lab keeps its state: the checkout it runs from. The lab is this repository's development
tool, so it may know the checkout (its .venv, .lab, .airflow, .cache, airflow.cfg); the toolkit it
runs never does: it gets every setting from the deployment the lab writes for it (airflow.env).
"""

from __future__ import annotations

import os
from pathlib import Path

#: the repository the lab runs from (lab/fleetlab/paths.py -> the repository root)
CHECKOUT = Path(os.environ.get("FLEET_LAB_CHECKOUT") or Path(__file__).resolve().parents[2])
VENV_BIN = CHECKOUT / ".venv" / "bin"
AIRFLOW_CFG = CHECKOUT / "airflow.cfg"
#: the demo's fleet file (the tests write their own)
DEMO_FLEET_FILE = CHECKOUT / "lab" / "fleets" / "lab.yaml"
#: the demo's data root
DEMO_DATA_ROOT = CHECKOUT / "data"


def airflow_home() -> Path:
    """The lab's Airflow home in use: AIRFLOW_HOME, else the demo's .airflow."""
    return Path(os.environ.get("AIRFLOW_HOME") or CHECKOUT / ".airflow")


def airflow_env_file() -> Path:
    """The generated env file of the Airflow home in use (.airflow/airflow.env for the demo)."""
    return airflow_home() / "airflow.env"


def dags_folder() -> Path:
    """The lab's dags folder: the loader files `fleetctl deploy dags` writes, as in a deployment."""
    return airflow_home() / "dags"


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of a generated env file (quotes removed); {} when it does not exist."""
    out: dict[str, str] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, value = line.split("=", 1)
        key = key.removeprefix("export ").strip()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key] = value
    return out


def load_airflow_env() -> None:
    """Make this process see the lab's Airflow and deployment: the generated airflow.env of the Airflow
    home in use (secrets, connections, FLEET_* settings), without overriding anything already set."""
    os.environ.setdefault("AIRFLOW_HOME", str(airflow_home()))
    os.environ.setdefault("AIRFLOW_CONFIG", str(AIRFLOW_CFG))
    for key, value in read_env_file(airflow_env_file()).items():
        os.environ.setdefault(key, value)

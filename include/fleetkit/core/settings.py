"""Where things live: the fleet file, the data root and the folders below it (plans, reports,
quarantine), the lock folder. One module, read from the environment, no Airflow.

Environment variables (all optional):
  FLEET_HOME            the installation root (default: found from this file)
  FLEET_FILE            the fleet file (default: include/fleets/lab.yaml)
  FLEET_DATA_ROOT       the data root, a folder or a Spark/pyarrow URI (default: FLEET_HOME/data)
  FLEET_RETENTION_DAYS  days of dataset partitions to keep (default 30)
  FLEET_PLANS_DIR       stored plans (default: <data root>/plans)
  FLEET_QUARANTINE_DIR  quarantined segment files (default: <data root>/quarantine)
  FLEET_LOCK_DIR        per-cluster lock files (default: $AIRFLOW_HOME/locks, else FLEET_HOME/.locks);
                        it must be shared by every worker that can run a destructive runbook
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def home() -> Path:
    return Path(os.environ.get("FLEET_HOME") or Path(__file__).resolve().parents[3])


def fleet_file() -> str:
    return os.environ.get("FLEET_FILE") or str(home() / "include" / "fleets" / "lab.yaml")


def data_root() -> str:
    return os.environ.get("FLEET_DATA_ROOT") or str(home() / "data")


def retention_days() -> int:
    return int(os.environ.get("FLEET_RETENTION_DAYS", "30"))


def plans_root(data_root_: str | None = None) -> str:
    """Plans live beside the datasets: <data root>/plans/<dag>/<run>/plan.json."""
    return os.environ.get("FLEET_PLANS_DIR") or str(Path(data_root_ or data_root()) / "plans")


def quarantine_root(data_root_: str | None = None) -> Path:
    return Path(os.environ.get("FLEET_QUARANTINE_DIR") or Path(data_root_ or data_root()) / "quarantine")


def lock_dir() -> str:
    if os.environ.get("FLEET_LOCK_DIR"):
        return os.environ["FLEET_LOCK_DIR"]
    if os.environ.get("AIRFLOW_HOME"):
        return str(Path(os.environ["AIRFLOW_HOME"]) / "locks")
    return str(home() / ".locks")


def safe_component(value: str) -> str:
    """A path component made from a run id, DAG id or cluster name (run ids hold ':' and '+').
    ValueError when nothing is left."""
    out = _SAFE.sub("_", str(value)).strip("._")
    if not out:
        raise ValueError(f"cannot make a file name from {value!r}")
    return out[:200]


def run_folder(base: str | os.PathLike, *parts: str) -> Path:
    """The folder of one run's output under `base`: each part (kind, DAG id, run id) made a safe
    path component. The one naming of run folders (reports, plans, trims)."""
    return Path(base).joinpath(*(safe_component(p) for p in parts))

"""One destructive runbook at a time per cluster: an exclusive lock file per cluster.

The lock folder must be shared by every worker that can run runbooks (a local folder for the
LocalExecutor; shared storage for distributed executors). A lock names its holder (DAG, run) and
is released only by that holder.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from pathlib import Path

from fleetkit.core.errors import FleetError
from fleetkit.core.plans import safe_component


class ClusterLocked(FleetError):
    pass


class ClusterLock:
    def __init__(self, lock_dir: str | os.PathLike, cluster: str):
        self.path = Path(lock_dir) / f"{safe_component(cluster)}.lock"
        self.cluster = cluster

    def holder(self) -> dict | None:
        try:
            return json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            return {"owner": "unreadable lock file"}

    def acquire(self, owner: str, dag_id: str = "", run_id: str = "") -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        doc = {"owner": owner, "dag_id": dag_id, "run_id": run_id,
               "since": dt.datetime.now(dt.timezone.utc).isoformat().replace("+00:00", "Z"), "pid": os.getpid()}
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            h = self.holder() or {}
            if h.get("owner") == owner:
                return  # re-entrant for the same run (a retried task)
            raise ClusterLocked(
                f"cluster {self.cluster!r} is locked by another destructive runbook: DAG {h.get('dag_id')!r} "
                f"run {h.get('run_id')!r} since {h.get('since')} (lock file {self.path}). Wait for it to "
                "finish; if that run is gone for good, remove the lock file after checking the cluster.") from None
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)

    def release(self, owner: str) -> bool:
        h = self.holder()
        if h is None or h.get("owner") != owner:
            return False
        self.path.unlink(missing_ok=True)
        return True

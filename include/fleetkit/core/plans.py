"""Plans: what a destructive runbook will change, as data with a digest.

A plan is a JSON object::

    {"action": "reset_offsets", "cluster": "lab", "title": "...", "created_at": "...Z",
     "dag_id": "...", "run_id": "...",
     "preconditions": [{"check": "group_empty", "what": "...", "expected": ...}, ...],
     "changes": [{"target": "orders-0", "before": 17, "after": 42}, ...],
     "risks": ["..."], "rollback": {"how": "...", "dag_id": "...", "conf": {...}},
     "details": {...action-specific...}}

Its digest is SHA-256 over the canonical form (sorted keys, no insignificant whitespace, UTF-8),
so any edit to the stored plan after approval changes it.

The plans folder is a local folder (a plan is written durably: fsync and rename) or a URI of the
data root's object store (published whole as one object, fleetkit.core.datasets.DataRoot).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

from fleetkit.core import settings
from fleetkit.core.datasets import DataPath, as_path
from fleetkit.core.durable import replace_file
from fleetkit.core.errors import FleetError

REQUIRED = ("action", "cluster", "title", "preconditions", "changes", "rollback")


class PlanError(FleetError):
    pass


def canonical(plan: dict) -> bytes:
    return json.dumps(plan, sort_keys=True, ensure_ascii=False, separators=(",", ":"),
                      allow_nan=False).encode("utf-8")


def digest(plan: dict) -> str:
    return "sha256:" + hashlib.sha256(canonical(plan)).hexdigest()


def validate(plan: dict) -> dict:
    if not isinstance(plan, dict):
        raise PlanError(f"a plan is a JSON object, got {type(plan).__name__}")
    missing = [k for k in REQUIRED if k not in plan]
    if missing:
        raise PlanError(f"plan is missing {', '.join(missing)}")
    if not isinstance(plan["changes"], list) or not isinstance(plan["preconditions"], list):
        raise PlanError("plan changes and preconditions must be lists")
    return plan


def safe_component(value: str) -> str:
    """A path component from a run id or DAG id (core.settings.safe_component, one-to-one),
    PlanError if empty."""
    try:
        return settings.safe_component(value)
    except ValueError as e:
        raise PlanError(str(e)) from None


def _root(plans_root) -> Path | DataPath:
    """The plans folder: a Path for a local one, a DataPath for an object store's."""
    return as_path(plans_root)


def plan_path(plans_root: str | os.PathLike, dag_id: str, run_id: str) -> Path | DataPath:
    """Where a run's plan lives: derived from (dag, run), never passed along by a task."""
    return _root(plans_root) / safe_component(dag_id) / safe_component(run_id) / "plan.json"


def store(plans_root: str | os.PathLike, dag_id: str, run_id: str, plan: dict) -> tuple[Path, str]:
    validate(plan)
    rollback = plan["rollback"]
    if isinstance(rollback, dict) and rollback.get("conf") and not rollback.get("dag_id"):
        # `fleetctl audit rollback` triggers the DAG the record names: a conf without one cannot run
        raise PlanError(f"plan {plan['action']!r}: its rollback has a conf but names no dag_id to run it with")
    path = replace_file(plan_path(plans_root, dag_id, run_id), canonical(plan))
    return path, digest(plan)


def result_path(plans_root: str | os.PathLike, dag_id: str, run_id: str) -> Path:
    """Where a run's execute result lives: beside its plan."""
    return plan_path(plans_root, dag_id, run_id).parent / "result.json"


def store_result(plans_root: str | os.PathLike, dag_id: str, run_id: str, result) -> Path:
    """The execute step's result, for its verify step: a file, not the task's XCom. A result holds
    what the cluster said (group names, commit metadata: any string, NUL included, which
    PostgreSQL's JSONB refuses) and grows with it (every offset of every group of a trimmed
    partition)."""
    return replace_file(result_path(plans_root, dag_id, run_id),
                        json.dumps(result, sort_keys=True, ensure_ascii=False, default=str).encode("utf-8"))


def load_result(plans_root: str | os.PathLike, dag_id: str, run_id: str):
    """The run's stored execute result; PlanError when there is none or it is not JSON."""
    path = result_path(plans_root, dag_id, run_id)
    try:
        return json.loads(path.read_bytes())
    except FileNotFoundError:
        raise PlanError(f"no stored execute result for DAG {dag_id!r} run {run_id!r} (expected {path}): "
                        f"the execute step did not finish") from None
    except ValueError as e:
        raise PlanError(f"stored execute result {path} is not valid JSON: {e}") from None


def _legacy_component(value: str) -> str:
    """The folder names of earlier releases (not one-to-one: `a:b` and `a_b` met); read only."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", str(value)).strip("._")[:200]


def _legacy_plan(plans_root: str | os.PathLike, dag_id: str, run_id: str) -> tuple[Path, dict] | None:
    """A plan stored by an earlier release under its folder names, if it says it is this run's."""
    parts = (_legacy_component(dag_id), _legacy_component(run_id))
    if not all(parts):
        return None
    path = _root(plans_root).joinpath(*parts, "plan.json")
    if path == plan_path(plans_root, dag_id, run_id):
        return None
    try:
        plan = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    if isinstance(plan, dict) and plan.get("dag_id") == dag_id and plan.get("run_id") == run_id:
        return path, plan
    return None


def load(plans_root: str | os.PathLike, dag_id: str, run_id: str) -> tuple[dict, str]:
    """The run's stored plan and its digest. A plan stored before the folder names became
    one-to-one is still found, when the plan names this DAG and run."""
    path = plan_path(plans_root, dag_id, run_id)
    try:
        plan = json.loads(path.read_bytes())
    except FileNotFoundError:
        legacy = _legacy_plan(plans_root, dag_id, run_id)
        if legacy is None:
            raise PlanError(f"no stored plan for DAG {dag_id!r} run {run_id!r} (expected {path})") from None
        path, plan = legacy
    except ValueError as e:
        raise PlanError(f"stored plan {path} is not valid JSON: {e}") from None
    return validate(plan), digest(plan)

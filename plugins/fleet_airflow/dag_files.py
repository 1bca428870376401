"""The DAG files a deployment puts in its dags folder: one small loader per DAG of the installed
package `fleet_dags` (the repository's dags/), written by `fleetctl deploy dags FOLDER`.

A loader imports the DAG from the installed package, so upgrading the package upgrades the DAG
(no copy to go stale) and the DAG file itself names nothing but the package:

    \"\"\"Kafka fleet toolkit: the Airflow DAG fleet_maintenance ...\"\"\"
    from fleet_dags.fleet_maintenance import dag  # noqa: F401

Airflow bags a DAG under the file that defines its module-level name (its fileloc is the loader),
so the UI, the parse API and the workers all point at the loader. Settings come from the deployment
(fleetkit.core.settings), never from the loader. No Airflow import here: fleetctl uses it.
"""

from __future__ import annotations

import importlib.resources
import os
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "fleet_dags"
#: the first line of every loader: what tells a loader of ours from a file the team wrote
MARKER = "Kafka fleet toolkit: the Airflow DAG"


#: DAG ids renamed in 0.3 (old -> new: a capability's DAGs carry its package's name). Each old id
#: stays registered for one release: built by the same code as the new one (its module in
#: fleet_dags calls the new module's `build` with the old id), tagged `deprecated`, never scheduled
#: (started by hand or by an old script only), and it will be removed (docs/airflow.md, "Renamed in 0.3").
RENAMED = {
    "runbook_stuck_partition": "runbook_stuck_skip",
    "runbook_reset_offsets": "runbook_stuck_reset",
    "runbook_offsets_trim": "runbook_trim",
    "coordinator_ownership": "ownership",
    "runbook_coordinator_recovery": "runbook_ownership",
    "group_id_reconciliation": "group_ids",
    "runbook_group_id_reconciliation": "runbook_group_ids",
}


def renamed_note(old: str) -> str:
    return f"renamed to {RENAMED[old]}; this id is kept for one release and will be removed"


def dag_kwargs(args: dict) -> dict:
    """The keyword arguments of a DAG of fleet_dags (`DAG(**dag_kwargs({...}))`): as given for a
    current id; for an old id of RENAMED those of its deprecated alias (the same tasks: a note
    leading the description and the doc, the tag `deprecated`, no schedule). Never auto-registered:
    a DAG is bagged through the `dag` its loader imports, so the alias module importing the new
    one's `build` does not register the new DAG a second time under the alias's file."""
    args = {**args, "auto_register": False}
    old = args["dag_id"]
    if old in RENAMED:
        note = renamed_note(old)
        args["description"] = f"{note}. {args.get('description') or ''}".strip()
        args["doc_md"] = f"**Deprecated: {note}.**\n\n" + (args.get("doc_md") or "")
        args["tags"] = [*(args.get("tags") or []), "deprecated"]
        args["schedule"] = None
    return args


def dag_modules() -> list[str]:
    """The DAG modules of the installed package, sorted (fleet_maintenance, runbook_..., ...)."""
    names = []
    for entry in importlib.resources.files(PACKAGE).iterdir():
        name = entry.name
        if name.endswith(".py") and name != "__init__.py" and entry.is_file():
            names.append(name[:-3])
    return sorted(names)


def loader_text(module: str) -> str:
    return (f'"""{MARKER} {module}, defined in the installed package ({PACKAGE}.{module}).\n\n'
            f"Written by `fleetctl deploy dags`: upgrading the package upgrades the DAG; settings come from the\n"
            f'deployment (FLEET_FILE, FLEET_DATA_ROOT, ...: docs/deploy.md), never from this file."""\n\n'
            f"from {PACKAGE}.{module} import dag  # noqa: F401\n")


@dataclass(frozen=True)
class Outcome:
    path: Path
    action: str  # "written", "unchanged", "updated", "refused" (a file of the team's own), "stale" (not ours to keep)


def install(folder: str | os.PathLike, *, force: bool = False, check: bool = False,
            prefix: str = "") -> list[Outcome]:
    """Write (or, with `check`, only compare) the loader of every DAG into `folder` as
    <prefix><module>.py (a renamed DAG's old id only where its loader is there already). A file there that is not a loader of ours is left alone ("refused") unless
    `force`. A loader of ours for a DAG the package no longer has is reported "stale" (removed
    unless `check`). Written atomically (a scheduler never parses half a file)."""
    folder = Path(folder)
    if not check:
        folder.mkdir(parents=True, exist_ok=True)
    out = []
    # a renamed DAG's old id: its loader is kept (and updated) where a deployment already has it, for
    # one release; a new deployment gets the current ids only
    present = {p.name for p in folder.glob(f"{prefix}*.py")} if folder.is_dir() else set()
    wanted = {f"{prefix}{m}.py": m for m in dag_modules() if m not in RENAMED or f"{prefix}{m}.py" in present}
    for name, module in wanted.items():
        path = folder / name
        text = loader_text(module)
        try:
            current = path.read_text()
        except FileNotFoundError:
            current = None
        except (OSError, UnicodeDecodeError):
            current = ""
        if current == text:
            out.append(Outcome(path, "unchanged"))
            continue
        if current is not None and MARKER not in current.split("\n", 1)[0] and not force:
            out.append(Outcome(path, "refused"))
            continue
        action = "written" if current is None else "updated"
        if not check:
            tmp = path.with_name(f".{path.name}.tmp")
            tmp.write_text(text)
            os.replace(tmp, path)
        out.append(Outcome(path, action))
    if folder.is_dir():
        for path in sorted(folder.glob(f"{prefix}*.py")):
            if path.name in wanted:
                continue
            try:
                first = path.read_text().split("\n", 1)[0]
            except (OSError, UnicodeDecodeError):
                continue
            if MARKER in first:
                if not check:
                    path.unlink()
                out.append(Outcome(path, "stale"))
    return out

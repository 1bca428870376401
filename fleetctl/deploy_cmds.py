"""fleetctl deploy: put the toolkit's DAG files into a deployment's dags folder, and check what a
host of the deployment sees of its settings (docs/deploy.md). No Airflow import."""

from __future__ import annotations

import argparse
import os
import sys

from fleetkit.core.render import visible_controls

from fleetctl.output import BAD_INPUT, FLAGGED, OK, add_json, print_json, print_table, red


def cmd_deploy_dags(args) -> int:
    """Write one loader per DAG of the installed package into FOLDER (or, with --check, say what
    differs: exit 3 when anything would change)."""
    from fleet_airflow.dag_files import install

    outcomes = install(args.folder, force=args.force, check=args.check, prefix=args.prefix)
    changed = sum(o.action in ("written", "updated", "stale") for o in outcomes)
    refused = sum(o.action == "refused" for o in outcomes)
    if args.json:
        print_json({"folder": args.folder, "check": args.check,
                    "files": [{"path": str(o.path), "action": o.action} for o in outcomes]})
        outcomes = []
    for o in outcomes:
        what = {"written": "would write" if args.check else "wrote",
                "updated": "would update" if args.check else "updated",
                "stale": "would remove (the package has no such DAG)" if args.check else "removed (no such DAG)",
                "refused": "left alone: not a loader of the toolkit (--force replaces it)",
                "unchanged": "up to date"}[o.action]
        print(f"{what}: {o.path}")
    if refused:
        print(red(f"error: {refused} file(s) in {args.folder} have a DAG's name but are not the toolkit's loaders"),
              file=sys.stderr)
        return BAD_INPUT
    return FLAGGED if args.check and changed else OK


def cmd_deploy_check(args) -> int:
    """The deployment's settings as this host sees them, then what they point at: the fleet file
    parses, the data root and the lock folder are writable folders (or the shared run state's
    database answers: FLEET_STATE_CONN_ID), the audit key is set. Exit 2
    naming the first problem; 0 when all hold."""
    from fleetkit.core import settings

    rows = settings.describe()
    if args.json:  # the same checks; their notes gathered into the document
        import contextlib
        import io

        notes = io.StringIO()
        with contextlib.redirect_stdout(notes):
            problems = _deploy_problems()
        print_json({"settings": [{"setting": n, "value": v, "means": m} for n, v, m in rows],
                    "notes": notes.getvalue().splitlines(), "problems": problems})
    else:
        print_table(["SETTING", "VALUE", "MEANS"], [[n, visible_controls(v), m] for n, v, m in rows])
        problems = _deploy_problems()
    for p in problems:
        print(red(f"error: {p}"), file=sys.stderr)
    return BAD_INPUT if problems else OK


def _deploy_problems() -> list[str]:
    """deploy check's checks, each holding one printing a line; the problems found."""
    from fleetkit.core import settings
    from fleetkit.core.errors import FleetError

    problems: list[str] = []
    try:
        settings.require()
    except FleetError as e:
        problems.append(str(e))
    if not problems:
        from fleetkit.core.fleet import load_fleet

        try:
            fleet = load_fleet(settings.fleet_file())
            print(f"fleet file: {len(fleet.names)} cluster(s): {', '.join(visible_controls(n) for n in fleet.names)}")
        except FleetError as e:
            problems.append(f"FLEET_FILE {settings.fleet_file()!r}: {e}")
        except OSError as e:
            problems.append(f"FLEET_FILE {settings.fleet_file()!r}: {e.strerror or e}")
        root = settings.data_root()
        if "://" not in root:
            problems += _writable("FLEET_DATA_ROOT", root)
        else:
            problems += _object_store_root(root)
        if settings.state_conn_id() is None:
            try:
                problems += _writable("lock folder", settings.lock_dir())
            except FleetError as e:
                problems.append(str(e))
        else:
            problems += _shared_state()
    from fleetkit.core import audit

    try:
        key = audit.load_keys().require_current()
        print(f"audit key: set (id {visible_controls(key.key_id)})")
    except FleetError as e:
        problems.append(str(e))
    return problems


def _object_store_root(root: str) -> list[str]:
    """An object store data root: its bucket answers with the connection FLEET_DATA_ROOT_CONN_ID names."""
    from fleetkit.core.datasets import DataRoot
    from fleetkit.core.errors import FleetError

    try:
        where = DataRoot(root).describe()
    except FleetError as e:
        return [str(e)]
    print(f"data root: {where} (reachable)")
    return []


def _shared_state() -> list[str]:
    """FLEET_STATE_CONN_ID: its database answers (the tables made on first use)."""
    from fleetkit.core.errors import FleetError

    from fleetctl.connect import state_store

    try:
        store = state_store()
        held = store.locks_held(None)
    except FleetError as e:
        return [str(e)]
    print(f"shared run state: {store.describe()} (reachable; {len(held)} lock(s) held)")
    return []


def _writable(what: str, folder: str) -> list[str]:
    if not os.path.isdir(folder):
        return [f"{what} {folder!r} is not a folder (create it, shared by every host that needs it)"]
    if not os.access(folder, os.W_OK | os.X_OK):
        return [f"{what} {folder!r} is not writable by this user"]
    print(f"{what}: {folder} (writable)")
    return []


def add_parser(sub) -> None:
    fmt = argparse.RawDescriptionHelpFormatter
    d = sub.add_parser("deploy", help="install the DAG files into a dags folder; check a host's settings",
                       description=__doc__, formatter_class=fmt)
    dsub = d.add_subparsers(dest="deploy_command", required=True)
    dd = dsub.add_parser("dags", help="write the loader of every DAG into FOLDER (your Airflow's dags folder)",
                         epilog="examples:\n  fleetctl deploy dags \"$AIRFLOW_HOME/dags\"\n"
                                "  fleetctl deploy dags /opt/airflow/dags --check   # exit 3 when out of date",
                         formatter_class=fmt)
    dd.add_argument("folder")
    dd.add_argument("--check", action="store_true", help="change nothing; exit 3 when a file would change")
    dd.add_argument("--force", action="store_true", help="replace files of the same name that are not loaders")
    dd.add_argument("--prefix", default="", help="prefix of the files' names (e.g. kafka_fleet_)")
    add_json(dd)
    dd.set_defaults(func=cmd_deploy_dags)
    dc = dsub.add_parser("check", help="the deployment's settings as this host sees them, and whether they hold",
                         epilog="example:\n  fleetctl deploy check", formatter_class=fmt)
    add_json(dc)
    dc.set_defaults(func=cmd_deploy_check)

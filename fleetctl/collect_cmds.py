"""fleetctl collect: a cluster's state into the datasets, as fleet_maintenance's collect does."""

from __future__ import annotations

import os
import sys

from fleetkit.core.errors import FleetError

from fleetctl.connect import connected
from fleetctl.output import BAD_INPUT, BLIND, OK, add_json, print_json, say_blind, with_examples


def cmd_collect(args) -> int:
    """Collect clusters into the datasets, as fleet_maintenance's collect does; connections from
    the AIRFLOW_CONN_ variables when they are JSON (no Airflow import), else from Airflow."""
    from fleetkit.collection.groups import collect_recorded
    from fleetkit.core.datasets import DataRoot
    from fleetkit.core.fleet import load_fleet
    from fleetkit.core.settings import retention_days

    from fleet_airflow import settings

    from fleetkit.core.errors import AuthenticationFailed, ClusterUnreachable, NotAuthorized, TlsHandshakeFailed

    fleet = load_fleet(args.fleet or settings.fleet_file())
    names = fleet.names if args.cluster == "all" else [args.cluster]
    root = DataRoot(args.out or settings.data_root())
    failed = blind = 0
    report = []  # --json: per cluster, what the text says
    for name in names:
        cluster = fleet.cluster(name)
        entry: dict = {"cluster": name}
        report.append(entry)
        try:
            res = collect_recorded(cluster, root, lambda: connected(cluster, args.timeout), retention_days())
        except (AuthenticationFailed, NotAuthorized, TlsHandshakeFailed, ClusterUnreachable) as e:
            entry["not_seen"] = [str(e)]
            say_blind([str(e)])
            blind += 1
            continue
        except FleetError as e:
            entry["error"] = str(e)
            print(f"error: {e}", file=sys.stderr)
            failed += 1
            continue
        entry.update(summary=res.summary(), problems=res.problems, not_seen=res.blind_lines() if res.blind else [])
        if not args.json:
            print(res.summary())
            for p in res.problems:
                print(f"  problem: {p}")
        if res.blind:  # groups (or topics) it may not describe: their rows are missing, never "OK"
            say_blind(["; ".join(res.blind_lines())])
            blind += 1
    where = os.path.abspath(args.out or settings.data_root())
    if args.json:
        print_json({"data_root": where, "clusters": report})
    else:
        print(f"datasets under {where}")
    return BAD_INPUT if failed else BLIND if blind else OK


def add_parser(sub) -> None:
    c = sub.add_parser("collect", help="collect a cluster's state into the datasets (exit 4 when a cluster could not be "
                                       "reached, or the login or an ACL kept groups or topics from being seen)")
    c.add_argument("--fleet", help="fleet file (default: $FLEET_FILE)")
    c.add_argument("--cluster", required=True, help="cluster name from the fleet file, or 'all'")
    c.add_argument("--out", help="data root (default: $FLEET_DATA_ROOT)")
    c.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for a cluster (default 15)")
    add_json(c)
    with_examples(c, "examples:\n  fleetctl collect --cluster lab\n  fleetctl collect --cluster lab --out /tmp/snapshot --timeout 60")
    c.set_defaults(func=cmd_collect)

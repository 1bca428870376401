"""fleetctl groups: kafka-consumer-groups' --list, --describe --state and --describe --members, with
its column names in its order (a script reading its tables by position reads these), for every
generation the toolkit reads (0.9 included) and through the deployment's login."""

from __future__ import annotations

import json
import sys

from fleetkit.core.errors import FleetError

from fleetctl.connect import connected, load_cluster
from fleetctl.output import OK, print_table, say_blind, with_examples, wrapped

STATE_COLUMNS = ("GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE", "#MEMBERS")
MEMBERS_COLUMNS = ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS")


def _assignment_text(assignment) -> str:
    """kafka-consumer-groups --members --verbose's ASSIGNMENT: topic(0,1,2),other(3); '-' for none."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in assignment or ():
        by_topic.setdefault(topic, []).append(partition)
    return ",".join(f"{t}({','.join(str(p) for p in sorted(ps))})" for t, ps in sorted(by_topic.items())) or "-"


def _coordinator_text(d) -> str:
    if d.coordinator_id is None:
        return "-"
    return f"{d.coordinator or '?'} ({d.coordinator_id})"


def state_record(d) -> dict:
    return {"group": d.group, "coordinator": d.coordinator, "coordinator_id": d.coordinator_id,
            "assignment_strategy": d.assignor, "state": d.state, "members": len(d.members), "type": d.group_type,
            "error": d.error}


def member_records(d) -> list[dict]:
    return [{"group": d.group, "consumer_id": m.member_id, "host": m.reported_host or m.host, "client_id": m.client_id,
             "partitions": None if m.assignment is None else len(m.assignment),
             "assignment": None if m.assignment is None else [list(tp) for tp in m.assignment],
             "member_epoch": m.member_epoch} for m in d.members]


def cmd_groups(args) -> int:
    chosen = [args.list, args.state, args.members]
    if sum(chosen) != 1:
        raise FleetError("give one of --list, --state or --members")
    if args.list and (args.groups or args.all_groups):
        raise FleetError("--list lists every group: give no group names and no --all-groups")
    if not args.list and bool(args.groups) == bool(args.all_groups):
        raise FleetError("name the groups (fleetctl groups GROUP... --state) or give --all-groups")
    cluster = load_cluster(args)
    with connected(cluster, args.timeout, zookeeper=False, stores=False) as (kafka, _, _):
        if args.list:
            errors: list[str] = []
            listed = kafka.list_groups_typed(errors)
            refusal = kafka.listing_refusal()
            if args.json:
                print(json.dumps({"cluster": cluster.name, "groups": [
                    {"group": g, "state": s, "type": t} for g, s, t in listed], "problems": errors}, indent=1))
            else:
                from fleetkit.core.render import visible_controls

                for g, _, _ in listed:
                    print(visible_controls(g))
            for e in errors:
                print(f"problem: {e}", file=sys.stderr)
            return say_blind([str(refusal)]) if refusal is not None else OK
        names = sorted(g for g, _ in kafka.list_groups()) if args.all_groups else list(dict.fromkeys(args.groups))
        descs, _ = kafka.describe_with_coordinators(names)
    refused = {g: kafka.refused(descs[g].error, g, "DescribeGroups") for g in names}
    refusals = [x for x in refused.values() if x is not None]
    seen = [descs[g] for g in names if refused[g] is None]
    if args.json:
        key, records = ("groups", [state_record(d) for d in seen]) if args.state else \
            ("members", [r for d in seen for r in member_records(d)])
        print(json.dumps({"cluster": cluster.name, key: records, "not_seen": [str(r) for r in refusals]}, indent=1))
    elif args.state:
        print_table(STATE_COLUMNS, [(d.group, _coordinator_text(d), d.assignor or "-", d.state, str(len(d.members)))
                                    for d in seen])
    else:
        headers = MEMBERS_COLUMNS + (("ASSIGNMENT",) if args.verbose_assignment else ())
        rows = []
        for d in seen:
            for m in d.members:
                row = (d.group, m.member_id, m.reported_host or m.host, m.client_id,
                       "-" if m.assignment is None else str(len(m.assignment)))
                rows.append(row + ((_assignment_text(m.assignment),) if args.verbose_assignment else ()))
        print_table(headers, rows)
    for d in seen:
        if d.error:  # a lookup or describe the cluster answered with an error: not seen, never "no members"
            refusals.append(f"group {d.group}: {d.error}")
        elif not args.json and args.members and not d.members:
            print(f"group {d.group}: no active members", file=sys.stderr)
    if refusals:
        return say_blind([str(r) for r in refusals])
    return OK


def add_parser(sub) -> None:
    import argparse

    g = sub.add_parser(
        "groups", help="kafka-consumer-groups --list / --describe --state / --describe --members, on every generation",
        description=wrapped("The consumer groups as kafka-consumer-groups shows them, with its column names in its "
                            "order: --list (every group the brokers list), --state (GROUP, COORDINATOR (ID), "
                            "ASSIGNMENT-STRATEGY, STATE, #MEMBERS), --members (GROUP, CONSUMER-ID, HOST, CLIENT-ID, "
                            "#PARTITIONS; --verbose-assignment adds ASSIGNMENT). Offsets and lag: fleetctl lag."),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("groups", nargs="*", metavar="GROUP")
    g.add_argument("--cluster", required=True, help="cluster name from the fleet file")
    g.add_argument("--fleet", help="fleet file (default: $FLEET_FILE)")
    g.add_argument("--all-groups", action="store_true", help="every group the brokers list")
    g.add_argument("--list", action="store_true", help="the group names, one per line")
    g.add_argument("--state", action="store_true", help="each group's coordinator, assignment strategy, state")
    g.add_argument("--members", action="store_true", help="each group's members")
    g.add_argument("--verbose-assignment", action="store_true", help="with --members: each member's partitions")
    g.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster (default 10)")
    g.add_argument("--json", action="store_true", help="one JSON document instead of the table")
    with_examples(g, "examples:\n  fleetctl groups --list --cluster lab\n"
                     "  fleetctl groups orders-consumer --state --cluster lab\n"
                     "  fleetctl groups --all-groups --members --verbose-assignment --cluster lab43 --json")
    g.set_defaults(func=cmd_groups)


"""fleetctl coordinator: a group's __consumer_offsets partition, who coordinates it and what it answers."""

from __future__ import annotations

import sys

from fleetctl.connect import CONNECT_TIMEOUT, connected, load_cluster
from fleetctl.output import add_json, print_json, say_blind, with_examples


def cmd_coordinator_partition(args) -> int:
    from fleetkit.core.partitioning import partition_for

    if args.partitions <= 0:
        print(f"error: --partitions must be positive, got {args.partitions}", file=sys.stderr)
        return 2
    if args.json:
        print_json({"offsets_topic_partitions": args.partitions,
                    "groups": [{"group": g, "partition": partition_for(g, args.partitions)} for g in args.groups]})
        return 0
    for g in args.groups:
        print(f"{g}\t{partition_for(g, args.partitions)}")
    return 0


def cmd_coordinator_who(args) -> int:
    from fleetkit.core.errors import blind_summary
    from fleetkit.core.render import visible_controls
    from fleetkit.ownership.collect import who

    cluster = load_cluster(args)
    with connected(cluster, CONNECT_TIMEOUT, stores=False) as (kafka, zk, _):
        try:
            rows = who(kafka, zk, args.groups)
        except LookupError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        refusals = [x for x in (kafka.refused(r["error"], r["group"], "FindCoordinator") for r in rows) if x]
    if args.json:
        print_json({"cluster": cluster.name, "groups": rows, "not_seen": [str(x) for x in refusals]})
    for r in rows if not args.json else ():
        isr = ",".join(str(b) for b in r["isr"])
        answer = r["error"] or r["state"] or "?"
        print(f"{visible_controls(r['group'])}\t{r['partition']}\tleader={r['leader']}\tisr={isr}\t"
              f"leader_epoch={r['leader_epoch'] if r['leader_epoch'] is not None else '?'}\t"
              f"coordinator={r['coordinator_id'] if r['coordinator_id'] is not None else '?'}\t"
              f"answer={answer}\tverdict={r['verdict']}")
    if refusals:  # not judged: the principal may not describe these groups
        return say_blind([f"cluster {cluster.name}: " + blind_summary("group", refusals)])
    return 0 if all(r["verdict"] == "OK" for r in rows) else 3


def add_parser(sub) -> None:
    co = sub.add_parser("coordinator", help="which __consumer_offsets partition coordinates a group")
    co_sub = co.add_subparsers(dest="coordinator_command", required=True)
    cp = co_sub.add_parser("partition", help="group -> partition, as Kafka computes it (Java hashCode, Utils.abs)")
    cp.add_argument("groups", nargs="+", metavar="GROUP")
    cp.add_argument("--partitions", type=int, default=50, help="offsets.topic.num.partitions (default 50)")
    add_json(cp)
    with_examples(cp, "example:\n  fleetctl coordinator partition orders-app billing --partitions 50")
    cp.set_defaults(func=cmd_coordinator_partition)
    cw = co_sub.add_parser("who", help="a group's partition, its leader/ISR/epoch, the coordinator the cluster names "
                                       "and what it answers (exit 3 when a group is not OK, 4 when the login or an "
                                       "ACL kept it from being seen)")
    cw.add_argument("groups", nargs="+", metavar="GROUP")
    cw.add_argument("--fleet", help="fleet file (default: $FLEET_FILE)")
    cw.add_argument("--cluster", required=True, help="cluster name from the fleet file")
    add_json(cw)
    with_examples(cw, "example:\n  fleetctl coordinator who orders-app billing --cluster lab")
    cw.set_defaults(func=cmd_coordinator_who)

"""fleetctl groupids: KoP client-to-group mappings against the live members, read now."""

from __future__ import annotations

from fleetctl.connect import CONNECT_TIMEOUT, connected, load_cluster
from fleetctl.output import add_json, print_json, with_examples


def cmd_groupids_diff(args) -> int:
    """Read a cluster's KoP mappings and live members now and print the findings (never writes)."""
    from fleetkit.group_ids import collect as group_id_collect
    from fleetkit.group_ids import rules as group_ids
    from fleetkit.core.render import visible_controls

    cluster = load_cluster(args)
    cfg = cluster.group_id_mappings
    if cfg is None:  # not an error: e.g. a KRaft cluster (no ZooKeeper) has no KoP mappings
        if args.json:
            print_json({"cluster": cluster.name, "mappings": None, "why": group_id_collect.no_mappings(cluster)})
        else:
            print(f"cluster {visible_controls(cluster.name)}: {group_id_collect.no_mappings(cluster)}")
        return 0
    with connected(cluster, CONNECT_TIMEOUT, stores=False) as (kafka, zk, _):
        coll = group_id_collect.collect(cluster, kafka, zk.client)
    findings = group_ids.diff(coll.mappings, coll.members, cfg.root, cfg.grace_seconds)
    counts = {k: sum(1 for f in findings if f["class"] == k) for k in group_ids.CLASSES}
    if args.json:
        print_json({"cluster": cluster.name, "summary": coll.summary(), "problems": coll.problems, "counts": counts,
                    "findings": [f for f in findings if f["class"] != "OK" or args.all]})
        return 0
    print(coll.summary())
    for p in coll.problems:
        print(f"  problem: {visible_controls(p)}")
    print("  ".join(f"{k} {v}" for k, v in counts.items()))
    for f in findings:
        if f["class"] != "OK" or args.all:
            group = f["group"] if f["group"] is not None else ",".join(f["groups"])
            print("\t".join(visible_controls(x) for x in (f["class"], f["path"] or "-", group or "-",
                                                        f["znode_group"] if f["znode_group"] is not None else "-",
                                                        "-" if f["znode_version"] is None else f["znode_version"],
                                                        f["reason"])))
    return 0


def add_parser(sub) -> None:
    g = sub.add_parser("groupids", help="KoP client-to-group mappings in ZooKeeper")
    g_sub = g.add_subparsers(dest="groupids_command", required=True)
    gd = g_sub.add_parser("diff", help="read mappings and live members now, print the findings (writes nothing)")
    gd.add_argument("--fleet", help="fleet file (default: $FLEET_FILE)")
    gd.add_argument("--cluster", required=True)
    gd.add_argument("--all", action="store_true", help="print OK paths too")
    add_json(gd)
    with_examples(gd, "examples:\n  fleetctl groupids diff --cluster kop\n  fleetctl groupids diff --cluster kop --all")
    gd.set_defaults(func=cmd_groupids_diff)

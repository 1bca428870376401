"""fleetctl audit: list, verify and seal the hash-chained audit, start a rollback from a record."""

from __future__ import annotations

import json
import sys
import time

from fleetctl.connect import airflow_context, state_store
from fleetctl.output import FLAGGED, OK, add_json, print_json, red, with_examples


def cmd_audit_list(args) -> int:
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    from fleet_airflow import settings

    rows = audit.records(DataRoot(args.data_root or settings.data_root()), args.cluster, args.run)
    if args.json:
        print_json({"records": rows[-args.limit:]})
        return 0
    for r in rows[-args.limit:]:
        print(audit.describe(r))
        if args.details:
            print("    " + json.dumps(r["details"], sort_keys=True))
    if not rows:
        print("no audit records")
    return 0


# records whose details carry the plan's rollback: a finished execute, and one that failed or was
# killed partway (the rollback's own plan re-reads the cluster, so it undoes only what was done)
ROLLBACK_EVENTS = ("executed", "failed", "interrupted")


def cmd_audit_rollback(args) -> int:
    """Start the rollback runbook of an executed run, as the caller's own Airflow user: Airflow
    records them as the one who triggered it, so the gate never lets them approve it."""
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    from fleet_airflow import settings
    from fleetctl import airflow_api

    # only a record the toolkit signed may plan a change (a row written into the data root by hand may not)
    rec = audit.find(DataRoot(args.data_root or settings.data_root()), args.record_id, authentic_only=True)
    rollback = (rec["details"] or {}).get("rollback") or {}
    conf = rollback.get("conf")
    if rec["event"] not in ROLLBACK_EVENTS or not conf:
        print(f"error: record {args.record_id} ({rec['event']}) holds no rollback; roll back from the "
              "'executed' record of the run (or its 'failed' / 'interrupted' record when execute did not "
              "finish)", file=sys.stderr)
        return 2
    # the runbook reads the fleet file and the data root from its deployment, never from the conf;
    # who asks is the Airflow user that triggers it (never a name written into the conf)
    conf = {k: v for k, v in conf.items() if k not in ("fleet_file", "data_root", "requested_by")}
    conf = dict(conf, dry_run=not args.execute)
    storm = conf.get("source") == "storm"
    if args.topology_deactivated and not storm:
        print(f"error: --topology-deactivated is for the rollback of a Storm spout's offsets; record "
              f"{args.record_id} is a {rec['action']} of source {conf.get('source', 'kafka')}", file=sys.stderr)
        return 2
    if storm and not args.print_only:
        if not args.topology_deactivated:
            print("error: a Storm spout's offsets are rolled back only with the topology deactivated (a live "
                  "topology overwrites them at its next commit): run `storm deactivate <topology>`, then again "
                  "with --topology-deactivated", file=sys.stderr)
            return 2
        conf["topology_deactivated"] = True
    print(f"rollback of {rec['action']} run {rec['run_id']} on cluster {rec['cluster']}:")
    print(f"  {rollback['dag_id']} conf {json.dumps(conf, sort_keys=True)}")
    if args.print_only:
        return 0
    airflow_context()
    me = airflow_api.login()
    run = me.api("POST", f"/api/v2/dags/{rollback['dag_id']}/dagRuns", {"logical_date": None, "conf": conf})
    print(f"triggered {rollback['dag_id']} run {run['dag_run_id']} as {me.user} "
          f"({'approval required, by another approver' if args.execute else 'dry run: plan only'})")
    if args.execute:
        _say_plan(args, rollback["dag_id"], run["dag_run_id"])
    return 0


def _say_plan(args, dag_id: str, run_id: str, wait: float = 30.0) -> None:
    """The run's plan as soon as its plan task stored it: its title and, in red, what the execution
    would refuse if it were approved now (a group with live members), so that nobody approves a
    change that cannot happen."""
    from fleetkit.core import plans
    from fleetkit.core.errors import FleetError
    from fleetkit.core.render import visible_controls

    from fleetkit.core.settings import plans_root

    from fleet_airflow import settings

    root = plans_root(args.data_root or settings.data_root())
    deadline = time.monotonic() + wait
    while True:
        try:
            plan, digest = plans.load(root, dag_id, run_id)
            break
        except FleetError:
            if time.monotonic() > deadline:
                print(f"  the plan is not stored yet after {wait:.0f}s: see the run's approval page")
                return
            time.sleep(0.5)
    print(f"  plan {digest[:12]}: {visible_controls(plan['title'])}")
    for line in plan.get("refused_now") or []:
        print(red(f"  refused if approved now: {visible_controls(line)}", sys.stdout))


def cmd_audit_verify(args) -> int:
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    from fleet_airflow import settings

    state_store()  # the chains' heads: FLEET_STATE_CONN_ID, else the heads folder
    root = DataRoot(args.data_root or settings.data_root())
    reports = audit.verify(root, args.cluster)
    if args.json:
        print_json({"data_root": root.uri, "chains": [
            {"cluster": rep.cluster, "ok": rep.ok, "chained": rep.chained, "before_key": rep.before_key,
             "before_chain": rep.before_chain, "warnings": list(rep.warnings),
             "problems": [{"record_id": rid, "what": what} for rid, what in rep.problems]} for rep in reports]})
        return OK if all(rep.ok for rep in reports) else FLAGGED
    if not reports:
        print(f"no audit records under {root.uri}")
        return 0
    for rep in reports:
        before = (f", {rep.before_key} before the key" if rep.before_key else "") + \
            (f", {rep.before_chain} before the chain" if rep.before_chain else "")
        if rep.ok:
            print(f"OK\tcluster={rep.cluster}\t{rep.chained} records chained{before}")
        for warning in rep.warnings:
            print(f"WARNING\tcluster={rep.cluster}\t{warning}")
        for record_id, what in rep.problems:
            print(f"FAIL\tcluster={rep.cluster}\trecord={record_id}\t{what}")
        if not rep.ok:
            print(f"FAILED\tcluster={rep.cluster}\t{len(rep.problems)} problem(s); {rep.chained} records on the "
                  f"chain that ends at the head{before}")
    return OK if all(rep.ok for rep in reports) else FLAGGED


def cmd_audit_seal(args) -> int:
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    from fleet_airflow import settings

    state_store()  # the chains' heads: FLEET_STATE_CONN_ID, else the heads folder
    root = DataRoot(args.data_root or settings.data_root())
    clusters = [args.cluster] if args.cluster else audit.audit_clusters(root)
    for cluster in clusters:
        head = audit.seal(root, cluster)
        print(f"SEALED\tcluster={cluster}\tkey_id={head.get('key_id')}")
    return 0


def cmd_audit_copy_heads(args) -> int:
    """Copy the chains' heads of the data root from the heads folder (FLEET_AUDIT_HEADS_DIR) into the
    shared run state's database (FLEET_STATE_CONN_ID): once, when a deployment moves there."""
    from fleetkit.core import audit, settings as core_settings
    from fleetkit.core.datasets import DataRoot

    from fleet_airflow import settings

    if core_settings.state_conn_id() is None:
        print("error: FLEET_STATE_CONN_ID is not set: the heads already live in the heads folder "
              "(docs/deploy.md: Shared run state)", file=sys.stderr)
        return 2
    store = state_store()
    root = DataRoot(args.data_root or settings.data_root())
    copied = audit.copy_heads(root, store)
    for cluster in copied:
        print(f"COPIED\tcluster={cluster}")
    print(f"{len(copied)} chain head(s) of {root.uri} copied into {store.describe()}; check with `fleetctl audit verify`")
    return 0


def add_parser(sub) -> None:
    au = sub.add_parser("audit", help="the audit dataset: what destructive runbooks did")
    au_sub = au.add_subparsers(dest="audit_command", required=True)
    al = au_sub.add_parser("list", help="audit records, oldest first")
    al.add_argument("--cluster")
    al.add_argument("--run", help="a DAG run id")
    al.add_argument("--limit", type=int, default=50)
    al.add_argument("--details", action="store_true", help="print each record's details (before/after)")
    al.add_argument("--data-root")
    add_json(al)
    with_examples(al, "examples:\n  fleetctl audit list --cluster lab --limit 20\n  fleetctl audit list --run RUN --details")
    al.set_defaults(func=cmd_audit_list)
    ar = au_sub.add_parser("rollback", help="start the rollback of an executed runbook from its audit record, as "
                                            "your own Airflow user (FLEET_AIRFLOW_USER + FLEET_AIRFLOW_PASSWORD or "
                                            "AIRFLOW_API_TOKEN), who then may not approve it")
    ar.add_argument("record_id")
    ar.add_argument("--execute", action="store_true", help="not a dry run: the rollback itself waits for approval")
    ar.add_argument("--print-only", action="store_true", help="print the rollback run conf, trigger nothing")
    ar.add_argument("--topology-deactivated", action="store_true",
                    help="Storm spout offsets: I confirm the topology is deactivated (required for them)")
    ar.add_argument("--data-root", help="where to find the audit record (the rollback run audits into the "
                                        "deployment's data root)")
    with_examples(ar, "examples:\n  fleetctl audit rollback RECORD_ID --print-only   # the rollback run's conf\n  fleetctl audit rollback RECORD_ID --execute      # the rollback, after its approval")
    ar.set_defaults(func=cmd_audit_rollback)
    av = au_sub.add_parser("verify", help="check every cluster's audit hash chain: modified, removed, inserted or "
                                          "re-ordered records and a truncated tail (exit 3 when one is found)")
    av.add_argument("--cluster", help="only this cluster's chain")
    av.add_argument("--data-root")
    add_json(av)
    with_examples(av, "examples:\n  fleetctl audit verify\n  fleetctl audit verify --cluster lab")
    av.set_defaults(func=cmd_audit_verify)
    asl = au_sub.add_parser("seal", help="sign the head of chains written before the audit key was configured "
                                         "(once, after the upgrade; refused when a chain has a problem)")
    asl.add_argument("--cluster", help="only this cluster's chain")
    asl.add_argument("--data-root")
    with_examples(asl, "example:\n  fleetctl audit seal --cluster lab")
    asl.set_defaults(func=cmd_audit_seal)
    ac = au_sub.add_parser("copy-heads", help="copy the chains' heads from the heads folder (FLEET_AUDIT_HEADS_DIR) "
                                              "into the shared run state's database (FLEET_STATE_CONN_ID): once, "
                                              "when the deployment moves its run state there")
    ac.add_argument("--data-root")
    with_examples(ac, "example:\n  FLEET_STATE_CONN_ID=fleet_state fleetctl audit copy-heads")
    ac.set_defaults(func=cmd_audit_copy_heads)

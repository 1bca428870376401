"""fleetctl trim: finish an interrupted __consumer_offsets trim, or put its files back."""

from __future__ import annotations

import sys

from fleetctl.connect import CONNECT_TIMEOUT, airflow_clusters, airflow_context, connected, state_store
from fleetctl.connect import actor as current_actor
from fleetctl.output import ProgressBar, with_examples


def _trim_command(args, what: str) -> int:
    """resume / restore of one run of runbook_trim: dry run unless --execute. The runbook
    engine checks the approval, the audit and the journal; Airflow is asked (as the caller) whether
    the run still runs; the cluster's lock is held while acting."""
    airflow_context()
    state_store()  # the lock, the journal and the audit heads: FLEET_STATE_CONN_ID, else local files
    from fleetkit.core.locks import RUNNING_STATES
    from fleetkit.core.render import visible_controls
    from fleetkit.core.runbook import Refused, run_state_problem
    from fleetkit.trim import resume as trim_resume

    from fleetctl.airflow_api import run_state_or_none

    actor = current_actor()
    rb = trim_resume.runbook(args.run, args.dag)
    try:
        run = trim_resume.approved_run(rb, what, actor)
    except Refused as e:
        print(f"error: REFUSED, nothing done: {e}", file=sys.stderr)
        return 2
    print(f"{what} of {run.dag_id} run {visible_controls(run.run_id)} on cluster {visible_controls(run.cluster)}")
    with airflow_clusters().broker_hosts(rb.fleet_cluster()) as seen:  # access: ssh brokers' files on their hosts
        for line in trim_resume.describe(run, seen.files):
            print(visible_controls(line))
    if getattr(args, "approve", False):
        if actor.startswith("unverified:"):
            print("error: REFUSED: approving a restore needs your Airflow login (AIRFLOW_API_TOKEN, or "
                  "FLEET_AIRFLOW_USER with its password) and a reachable api-server: nothing recorded", file=sys.stderr)
            return 2
        from fleetkit.core.errors import FleetError

        try:
            trim_resume.approve_restore(run, actor)
        except FleetError as e:
            print(f"error: REFUSED: {e}", file=sys.stderr)
            return 2
        print(f"restore approved by {actor} for {trim_resume.RESTORE_APPROVAL_HOURS} h: another listed approver "
              f"runs `fleetctl trim restore {visible_controls(run.run_id)} --execute`")
        return 0
    if what == "restore" and args.execute:
        problem = trim_resume.restore_approval_problem(run, actor)
        if problem:
            rb.refuse(problem, actor=actor, digest=run.digest, final=False)
            print(f"error: REFUSED, nothing done: {problem}", file=sys.stderr)
            return 2
    if not args.execute:
        trim_resume.record(run, "dry_run", actor, f"fleetctl trim {what} (dry run): nothing changed")
        print(f"dry run: nothing changed (add --execute to {what})")
        return 0
    state, why_unknown = run_state_or_none(run.dag_id, run.run_id)
    problem = run_state_problem(state, f"{what} of run {run.run_id!r}", args.force)
    if problem:
        rb.refuse(problem, actor=actor, digest=run.digest, final=False, details={"run_state": state})
        print(f"error: REFUSED, nothing done: {problem}" + (f" ({why_unknown})" if state is None else ""),
              file=sys.stderr)
        return 2

    def holder_running(dag_id: str, run_id: str):
        st, _ = run_state_or_none(dag_id, run_id, prompt=False)
        return (None if st is None else st in RUNNING_STATES), st

    cluster = rb.fleet_cluster()
    owner = f"fleetctl trim {what}/{run.dag_id}/{run.run_id}"
    # it changes the cluster: the runbook connections (principal)
    with connected(cluster, CONNECT_TIMEOUT, stores=False, changes=True) as (kafka, zk, _):
        # brokers with access: ssh: their files and broker_control commands over their connection
        hosts = airflow_clusters().broker_hosts(cluster)  # (sessions open on first use)
        try:
            # the cluster's lock, held by this process (host and pid recorded: `fleetctl lock clear`
            # refuses while it runs); every change checks it is still ours
            with rb.holding(cluster, kafka, zk, owner, holder_running, kind="cli"):
                # on a terminal, a bar on stderr: brokers done (each one stopped, its files moved,
                # started and back in the ISR: minutes apiece)
                bar = ProgressBar(f"trim {what} of {cluster.name}", None, "brokers")
                ctx = trim_resume.ClusterContext(cluster, kafka, zk, journal_path=run.journal, broker_hosts=hosts,
                                                 progress=lambda done, total, _unit: bar.update(done, total))
                try:
                    out = trim_resume.finish(ctx, run) if what == "resume" else {"done": trim_resume.undo(ctx, run)}
                except Exception as e:
                    trim_resume.record(run, "failed", actor, f"fleetctl trim {what} failed: {type(e).__name__}: {e}",
                                       {"journal": trim_resume.journal.summary(run.journal)})
                    raise
                finally:
                    bar.close()
        finally:
            hosts.close()
    if what == "restore":
        for line in out["done"]:
            print(visible_controls(line))
        trim_resume.record(run, "restored", actor, f"restored {sum(1 for x in out['done'] if x.startswith('restored'))} "
                           "file(s) from the quarantine (checksums verified)", {"done": out["done"]})
        print("restored")
        return 0
    res = out["result"]
    for line in out["teardown"]:
        print(visible_controls(line))
    print(f"files: {res['files']}; re-committed {len(res['recommitted'])}, skipped {len(res['recommit_skipped'])}")
    for c in res["recommit_skipped"]:
        print(visible_controls(f"  skipped {c['group']} {c['topic']}-{c['partition']}: {c['reason']}"))
    if out["problems"]:
        trim_resume.record(run, "verify_failed", actor, "; ".join(out["problems"]), {"problems": out["problems"]})
        for p in out["problems"]:
            print(visible_controls(f"  problem: {p}"))
        return 1
    trim_resume.record(run, "resumed", actor, "fleetctl trim resume: the interrupted trim finished and verified",
                       {"result": res, "teardown": out["teardown"], "rollback": run.plan["rollback"]})
    print("resumed: finished and verified")
    return 0


def cmd_trim_resume(args) -> int:
    return _trim_command(args, "resume")


def cmd_trim_restore(args) -> int:
    return _trim_command(args, "restore")


def add_parser(sub) -> None:
    tr = sub.add_parser("trim", help="an interrupted __consumer_offsets trim: finish it or put its files back")
    tr_sub = tr.add_subparsers(dest="trim_command", required=True)
    for name, fn, hlp in (
            ("resume", cmd_trim_resume, "finish an approved, interrupted trim from its stored plan and journal: skip "
                                        "the moves done (checking their checksums), move the rest, restart brokers, "
                                        "wait for the ISR, re-commit (never rewinding), verify"),
            ("restore", cmd_trim_restore, "put an approved trim's quarantined files back byte for byte (checksums), "
                                          "broker by broker")):
        sp = tr_sub.add_parser(name, help=hlp + "; dry run unless --execute")
        sp.add_argument("run", metavar="RUN", help="the DAG run id of the trim")
        sp.add_argument("--dag", default="runbook_trim", help="the trim DAG (default runbook_trim)")
        sp.add_argument("--execute", action="store_true", help="act (default: show what would be done)")
        sp.add_argument("--force", action="store_true", help="act although Airflow cannot be asked whether the run "
                                                             "still runs (you checked it yourself); never while it runs")
        if name == "restore":
            sp.add_argument("--approve", action="store_true",
                            help="approve the restore of a finished trim (a listed approver, logged in to Airflow; "
                                 "another person then runs it with --execute within 4 h)")
            sp.epilog = ("examples:\n  fleetctl trim restore RUN                 # what would be put back\n"
                         "  fleetctl trim restore RUN --approve       # an approver, for a finished trim\n"
                         "  fleetctl trim restore RUN --execute       # someone else, within 4 h")
            sp.formatter_class = __import__("argparse").RawDescriptionHelpFormatter
        elif name == "resume":
            with_examples(sp, "examples:\n  fleetctl trim resume RUN             # what is left to do\n"
                              "  fleetctl trim resume RUN --execute   # finish it under the cluster's lock")
        sp.set_defaults(func=fn)

"""fleetctl: the toolkit's operator CLI, for incident shells and the lab (outside Airflow).

Connection ids resolve the way Airflow resolves them: AIRFLOW_CONN_<ID> environment variables,
then the Airflow metadata database (the project's .airflow/ when run from this repository).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from fleetkit.core.errors import FleetError

log = logging.getLogger("fleetctl")


def _airflow_context() -> None:
    """Before Airflow is imported: project settings, and the server-side secrets chain.

    Outside a task, Airflow's connection lookup only reads environment variables unless told it
    runs server-side; fleetctl is an operator tool next to the metadata database, so it asks for
    the server chain (environment variables, then the metadata database).
    """
    from fleet_airflow.settings import load_airflow_env

    load_airflow_env()
    os.environ.setdefault("_AIRFLOW_PROCESS_CONTEXT", "server")


# -- lab -------------------------------------------------------------------------------------
def _labs(args) -> list:
    """The labs a command acts on: --lab-dir names one lab folder; otherwise the demo fleet's
    clusters (fleetlab.ports.CLUSTERS), or those named with --cluster."""
    from fleetlab.lab import Lab, LabSpec, fleet_specs

    if args.lab_dir:
        spec = LabSpec.load(os.path.abspath(args.lab_dir))
        if args.zk_port:
            spec.zk_port = args.zk_port
        if args.broker_port:
            spec.broker_base_port = args.broker_port
        return [Lab(spec)]
    if args.zk_port or args.broker_port:
        raise FleetError("--zk-port / --broker-port apply to one lab folder: give --lab-dir too")
    specs = fleet_specs()
    chosen = args.cluster or list(specs)
    unknown = [c for c in chosen if c not in specs]
    if unknown:
        raise FleetError(f"the lab fleet has no cluster {unknown[0]!r}; its clusters: {', '.join(specs)}")
    return [Lab(specs[c]) for c in chosen]


def _describe(lab) -> str:
    s = lab.spec
    where = f"ZooKeeper {s.zk_hosts}{s.chroot}, " if not s.kraft else ""
    return f"Kafka {s.kafka_version} ({s.mode}): {where}brokers {s.bootstrap}"


def cmd_lab_up(args) -> int:
    from concurrent.futures import ThreadPoolExecutor

    labs = _labs(args)
    t = time.monotonic()
    for lab in labs:
        print(f"starting {lab.spec.name} in {lab.spec.path}: Kafka {lab.spec.kafka_version} ({lab.spec.mode}) ...",
              flush=True)

    def up(lab):
        started = time.monotonic()
        lab.up()
        print(f"{lab.spec.name} up in {time.monotonic() - started:.0f}s: {_describe(lab)}", flush=True)

    failed = []
    # the clusters start side by side (their JVMs start slowly, mostly waiting)
    with ThreadPoolExecutor(max_workers=len(labs)) as pool:
        for lab, fut in [(lab, pool.submit(up, lab)) for lab in labs]:
            try:
                fut.result()
            except Exception as e:  # noqa: BLE001 - report every cluster, then fail
                failed.append(lab.spec.name)
                print(f"error: {lab.spec.name}: {e}", file=sys.stderr, flush=True)
    if failed:
        print(f"error: not started: {', '.join(failed)} (see their logs/ folders)", file=sys.stderr)
        return 1
    if len(labs) > 1:
        print(f"lab fleet up in {time.monotonic() - t:.0f}s ({len(labs)} clusters)")
    return 0


def cmd_lab_down(args) -> int:
    for lab in reversed(_labs(args)):
        for line in lab.down():
            print(f"{lab.spec.name}: {line}")
    return 0


def cmd_lab_status(args) -> int:
    out = []
    for lab in _labs(args):
        for r in lab.status():
            out.append({"cluster": lab.spec.name, "kafka_version": lab.spec.kafka_version,
                        "mode": lab.spec.mode, **r})
    if args.json:
        print(json.dumps(out, indent=1))
    else:
        print(f"{'CLUSTER':<10} {'KAFKA':<8} {'COMPONENT':<10} {'ADDRESS':<46} {'PID':<8} "
              f"{'RSS MB':>7} {'PEAK MB':>8}  STATE")
        for r in out:
            state = "answering" if r["answering"] else ("running, not answering" if r["running"] else "stopped")
            rss = f"{r['rss_mb']:.0f}" if r["rss_mb"] is not None else "-"
            peak = f"{r['peak_rss_mb']:.0f}" if r["peak_rss_mb"] is not None else "-"
            print(f"{r['cluster']:<10} {r['kafka_version']:<8} {r['component']:<10} {r['address']:<46} "
                  f"{r['pid'] or '-':<8} {rss:>7} {peak:>8}  {state}")
        running = [r for r in out if r["rss_mb"] is not None]
        if running:
            print(f"{len(running)} processes: {sum(r['rss_mb'] for r in running):.0f} MB resident now, "
                  f"peak {sum(r['peak_rss_mb'] for r in running):.0f} MB (sum of each process's peak)")
    return 0 if all(r["answering"] for r in out) else 3


def _lab_broker(args):
    """The lab of a command on one of its brokers: it must exist (runbooks run these commands; a
    wrong --lab-dir must fail, not report a broker that is not running)."""
    if not args.lab_dir and len(args.cluster or []) != 1:
        raise FleetError("name one cluster: --cluster NAME (lab, lab39, lab43) or --lab-dir FOLDER")
    lab = _labs(args)[0]
    if args.lab_dir and not (lab.spec.path / "lab.json").exists():
        raise FleetError(f"no lab in {lab.spec.path} (lab.json missing): check --lab-dir, or run fleetctl lab up")
    if not 0 <= args.broker < lab.spec.brokers:
        raise FleetError(f"lab {lab.spec.path} has no broker {args.broker} (brokers 0..{lab.spec.brokers - 1})")
    return lab


def cmd_lab_stop_broker(args) -> int:
    print(f"broker {args.broker}: {_lab_broker(args).stop_broker(args.broker)}")
    return 0


def cmd_lab_start_broker(args) -> int:
    _lab_broker(args).start_broker(args.broker)
    print(f"broker {args.broker}: answering")
    return 0


def cmd_lab_broker_config(args) -> int:
    """Set broker properties of the lab (its brokers share them); they apply at a broker's next start."""
    props = {}
    for item in args.settings:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise FleetError(f"{item!r} is not key=value")
        props[key.strip()] = value
    lab = _lab_broker(args)
    lab.spec.broker_overrides = {**lab.spec.broker_overrides, **props}
    lab._write_configs()  # server.properties of every broker, and lab.json
    print(f"broker {args.broker}: {' '.join(f'{k}={v}' for k, v in props.items())} (applies at the next start)")
    return 0


def cmd_lab_env(args) -> int:
    for lab in _labs(args):
        for k, v in lab.spec.connection_env().items():
            print(f"export {k}='{v}'")
    return 0


def cmd_lab_traffic(args) -> int:
    for lab in _labs(args):
        if args.action == "start":
            print(f"{lab.spec.name}: traffic running (pid {lab.start_traffic(args.rate)}), "
                  f"log {lab.spec.path / 'logs' / 'traffic.out'}")
        else:
            print(f"{lab.spec.name}: traffic {lab.stop_traffic()}")
    return 0


# -- airflow ---------------------------------------------------------------------------------
def cmd_airflow(args) -> int:
    from fleetlab import airflow_services as services

    if args.action == "env":
        print(f"wrote {services.ensure_env_file()}")
    elif args.action == "up":
        profile = services.profile(args.profile)
        extra = (" + Redis, 2 Celery workers, Spark standalone (master + 2 workers)"
                 if profile == "cluster" else "")
        print(f"starting Airflow, {profile} profile (api-server, scheduler, dag-processor, triggerer{extra}) ...",
              flush=True)
        services.up(profile_name=profile, progress=lambda line: print(line, flush=True))
        print(f"Airflow UI: http://{services.API_HOST}:{services.API_PORT}  "
              f"(user admin, password {services.passwords().get('admin', '?')})")
        if profile == "cluster":
            spark = services.spark_spec()
            print(f"Spark master: {spark.master_url}  (UI {spark.master_ui}); Celery broker: "
                  f"{services.redis_spec().url()}; Celery workers: {', '.join(services.celery_hostnames())}")
    elif args.action == "down":
        for line in services.down():
            print(line)
    elif args.action == "status":
        for r in services.status():
            print(f"{r['component']:<20} {'pid ' + str(r['pid']) if r['pid'] else 'stopped'}")
        print(f"api-server healthy: {services.api_healthy()}; profile: {services.running_profile() or '-'}")
    return 0


def cmd_trigger(args) -> int:
    from fleetlab import airflow_services as services

    dag_id = args.dag_id
    deadline = time.monotonic() + args.timeout
    while True:  # the dag-processor may not have parsed the DAG yet
        try:
            services.api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
            break
        except Exception as e:  # noqa: BLE001
            if time.monotonic() > deadline:
                print(f"error: DAG {dag_id!r} not available in Airflow: {e}", file=sys.stderr)
                return 2
            time.sleep(2)
    conf = json.loads(args.conf) if args.conf else {}
    failed = 0
    for i in range(args.times):
        run = services.api("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
        run_id = run["dag_run_id"]
        print(f"triggered {dag_id} run {run_id}", flush=True)
        if not args.wait:
            continue
        while True:
            state = services.api("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
            if state in ("success", "failed"):
                break
            if time.monotonic() > deadline:
                print(f"error: run {run_id} still {state} after {args.timeout}s", file=sys.stderr)
                return 2
            time.sleep(2)
        print(f"  {run_id}: {state}", flush=True)
        failed += state != "success"
        if i + 1 < args.times and args.interval:
            time.sleep(args.interval)
    return 1 if failed else 0


def cmd_demo(args) -> int:
    """The demo: lab and Airflow started side by side, traffic, the DAG runs, the summary, with a
    progress line per step and the time per step at the end (fleetlab.demo)."""
    from fleetlab import demo

    started = args.started_at if args.started_at else None
    setup = time.time() - started if started else None
    try:
        return demo.main(started_at=started, setup_seconds=setup)
    except RuntimeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


# -- offsets --------------------------------------------------------------------------------
def cmd_offsets_decode(args) -> int:
    from fleetkit.clients.offsets_codec import DecodeError, decode

    try:
        key = bytes.fromhex(args.key)
        value = bytes.fromhex(args.value) if args.value is not None else None
    except ValueError as e:
        print(f"error: --key/--value must be hex: {e}", file=sys.stderr)
        return 2
    try:
        out = decode(key, value, "record")
    except DecodeError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if out.pop("kind", None) == "unknown":
        # a record type (key version) this decoder does not know: said so, never shown as a record
        out = {"key_version": out["key_version"], "unknown": True, "tombstone": out["tombstone"],
               "key_hex": key.hex(), "value_hex": value.hex() if value is not None else None}
        print(f"note: key version {out['key_version']} is a record type this decoder does not know: not decoded",
              file=sys.stderr)
    print(json.dumps(out, ensure_ascii=False))
    return 0


def cmd_offsets_capacity(args) -> int:
    from fleetkit.trim.cleaner import capacity

    try:
        print(json.dumps(capacity(args.dedupe_buffer_size, args.threads, args.load_factor)))
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


# -- coordinator ----------------------------------------------------------------------------
def cmd_coordinator_partition(args) -> int:
    from fleetkit.core.partitioning import partition_for

    if args.partitions <= 0:
        print(f"error: --partitions must be positive, got {args.partitions}", file=sys.stderr)
        return 2
    for g in args.groups:
        print(f"{g}\t{partition_for(g, args.partitions)}")
    return 0


def cmd_coordinator_who(args) -> int:
    _airflow_context()
    from fleetkit.core.fleet import load_fleet
    from fleetkit.ownership.rules import who
    from fleetkit.core.render import visible_controls

    from fleet_airflow import clusters, settings

    from fleetctl.incident import say_blind
    from fleetkit.core.errors import blind_summary

    cluster = load_fleet(args.fleet or settings.fleet_file()).cluster(args.cluster)
    with clusters.connected(cluster) as (kafka, zk):
        try:
            rows = who(kafka, zk, args.groups)
        except LookupError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        refusals = [x for x in (kafka.refused(r["error"], r["group"], "FindCoordinator") for r in rows) if x]
    for r in rows:
        isr = ",".join(str(b) for b in r["isr"])
        answer = r["error"] or r["state"] or "?"
        print(f"{visible_controls(r['group'])}\t{r['partition']}\tleader={r['leader']}\tisr={isr}\t"
              f"leader_epoch={r['leader_epoch'] if r['leader_epoch'] is not None else '?'}\t"
              f"coordinator={r['coordinator_id'] if r['coordinator_id'] is not None else '?'}\t"
              f"answer={answer}\tverdict={r['verdict']}")
    if refusals:  # not judged: the principal may not describe these groups
        return say_blind([f"cluster {cluster.name}: " + blind_summary("group", refusals)])
    return 0 if all(r["verdict"] == "OK" for r in rows) else 3


# -- audit -----------------------------------------------------------------------------------
def cmd_audit_list(args) -> int:
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    from fleet_airflow import settings

    rows = audit.records(DataRoot(args.data_root or settings.data_root()), args.cluster, args.run)
    for r in rows[-args.limit:]:
        print(audit.describe(r))
        if args.details:
            print("    " + json.dumps(r["details"], sort_keys=True))
    if not rows:
        print("no audit records")
    return 0


def _os_user() -> str:
    import getpass

    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER
        return f"uid-{os.getuid()}"


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

    rec = audit.find(DataRoot(args.data_root or settings.data_root()), args.record_id)
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
    _airflow_context()
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
    from fleetctl.incident import red

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

    settings.load_airflow_env()  # the deployment's audit keys (no Airflow import)
    root = DataRoot(args.data_root or settings.data_root())
    reports = audit.verify(root, args.cluster)
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
    return 0 if all(rep.ok for rep in reports) else 1


def cmd_audit_seal(args) -> int:
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot

    from fleet_airflow import settings

    settings.load_airflow_env()
    root = DataRoot(args.data_root or settings.data_root())
    clusters = [args.cluster] if args.cluster else audit.audit_clusters(root)
    for cluster in clusters:
        head = audit.seal(root, cluster)
        print(f"SEALED\tcluster={cluster}\tkey_id={head.get('key_id')}")
    return 0


# -- trim ------------------------------------------------------------------------------------
def _trim_command(args, what: str) -> int:
    """resume / restore of one run of runbook_offsets_trim: dry run unless --execute. The runbook
    engine checks the approval, the audit and the journal; Airflow is asked (as the caller) whether
    the run still runs; the cluster's lock is held while acting."""
    _airflow_context()
    from fleetkit.core.locks import RUNNING_STATES
    from fleetkit.core.render import visible_controls
    from fleetkit.core.runbook import Refused, run_state_problem
    from fleetkit.trim import resume as trim_resume

    from fleet_airflow import clusters
    from fleetctl.airflow_api import run_state_or_none

    actor = _actor()
    rb = trim_resume.runbook(args.run, args.dag)
    try:
        run = trim_resume.approved_run(rb, what, actor)
    except Refused as e:
        print(f"error: REFUSED, nothing done: {e}", file=sys.stderr)
        return 2
    print(f"{what} of {run.dag_id} run {visible_controls(run.run_id)} on cluster {visible_controls(run.cluster)}")
    for line in trim_resume.describe(run):
        print(visible_controls(line))
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
    with clusters.connected(cluster, changes=True) as (kafka, zk):  # it changes the cluster: the runbook principal
        lock = rb.lock(cluster, kafka, zk, owner, holder_running)  # the cluster's identity
        try:
            ctx = trim_resume.ClusterContext(cluster, kafka, zk, journal_path=run.journal)
            try:
                out = trim_resume.finish(ctx, run) if what == "resume" else {"done": trim_resume.undo(ctx, run)}
            except Exception as e:
                trim_resume.record(run, "failed", actor, f"fleetctl trim {what} failed: {type(e).__name__}: {e}",
                                   {"journal": trim_resume.journal.summary(run.journal)})
                raise
        finally:
            lock.release(owner)
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


# -- collect ---------------------------------------------------------------------------------
def cmd_collect(args) -> int:
    """Collect clusters into the datasets, as fleet_maintenance's collect does; connections from
    the AIRFLOW_CONN_ variables when they are JSON (no Airflow import), else from Airflow."""
    from fleetkit.collection.groups import collect_recorded
    from fleetkit.core.datasets import DataRoot
    from fleetkit.core.fleet import load_fleet
    from fleetkit.core.settings import retention_days

    from fleet_airflow import settings

    from fleetctl.incident import BLIND, connected, say_blind
    from fleetkit.core.errors import AuthenticationFailed, NotAuthorized, TlsHandshakeFailed

    settings.load_airflow_env()
    fleet = load_fleet(args.fleet or settings.fleet_file())
    names = fleet.names if args.cluster == "all" else [args.cluster]
    root = DataRoot(args.out or settings.data_root())
    failed = blind = 0
    for name in names:
        cluster = fleet.cluster(name)
        try:
            res = collect_recorded(cluster, root, lambda: connected(cluster, args.timeout), retention_days())
        except (AuthenticationFailed, NotAuthorized, TlsHandshakeFailed) as e:
            say_blind([str(e)])
            blind += 1
            continue
        except FleetError as e:
            print(f"error: {e}", file=sys.stderr)
            failed += 1
            continue
        print(res.summary())
        for p in res.problems:
            print(f"  problem: {p}")
        if res.blind:  # groups (or topics) it may not describe: their rows are missing, never "OK"
            say_blind(["; ".join(res.blind_lines())])
            blind += 1
    print(f"datasets under {os.path.abspath(args.out or settings.data_root())}")
    return 1 if failed else BLIND if blind else 0


# -- group-id mappings -------------------------------------------------------------------------
def cmd_groupids_diff(args) -> int:
    """Read a cluster's KoP mappings and live members now and print the findings (never writes)."""
    _airflow_context()
    from fleetkit.group_ids import collect as group_id_collect
    from fleetkit.group_ids import rules as group_ids
    from fleetkit.core.fleet import load_fleet
    from fleetkit.core.render import visible_controls

    from fleet_airflow import clusters, settings

    cluster = load_fleet(args.fleet or settings.fleet_file()).cluster(args.cluster)
    cfg = cluster.group_id_mappings
    if cfg is None:  # not an error: e.g. a KRaft cluster (no ZooKeeper) has no KoP mappings
        print(f"cluster {visible_controls(cluster.name)}: {group_id_collect.no_mappings(cluster)}")
        return 0
    with clusters.connected(cluster) as (kafka, zk):
        coll = group_id_collect.collect(cluster, kafka, zk.client)
    findings = group_ids.diff(coll.mappings, coll.members, cfg.root, cfg.grace_seconds)
    print(coll.summary())
    for p in coll.problems:
        print(f"  problem: {visible_controls(p)}")
    counts = {k: sum(1 for f in findings if f["class"] == k) for k in group_ids.CLASSES}
    print("  ".join(f"{k} {v}" for k, v in counts.items()))
    for f in findings:
        if f["class"] != "OK" or args.all:
            group = f["group"] if f["group"] is not None else ",".join(f["groups"])
            print("\t".join(visible_controls(x) for x in (f["class"], f["path"] or "-", group or "-",
                                                        f["znode_group"] if f["znode_group"] is not None else "-",
                                                        "-" if f["znode_version"] is None else f["znode_version"],
                                                        f["reason"])))
    return 0


# -- per-cluster locks ---------------------------------------------------------------------------
def _lock_dir(args) -> str:
    from fleet_airflow.settings import load_airflow_env  # no Airflow import: the env file only
    from fleetkit.core import settings as core_settings

    load_airflow_env()  # the Airflow home the workers use, hence their lock folder and data root
    return args.lock_dir or core_settings.lock_dir()


def cmd_lock_status(args) -> int:
    """Every held lock: cluster, holder run, since, identity (exit 3 when one is held)."""
    from fleetkit.core.locks import held_locks
    from fleetkit.core.render import visible_controls

    lock_dir = _lock_dir(args)
    held = held_locks(lock_dir)
    if not held:
        print(f"no cluster is locked (lock folder {lock_dir})")
        return 0
    for path, h in held:
        print("\t".join(visible_controls(str(x)) for x in (
            h.get("cluster", "?"), f"dag={h.get('dag_id', '?')}", f"run={h.get('run_id', '?')}",
            f"since={h.get('since', '?')}", f"host={h.get('host', '?')}", f"pid={h.get('pid', '?')}",
            f"identity={h.get('identity', '?')}", str(path))))
    return 3


def _actor() -> str:
    """Who acts, for the audit: the caller's Airflow user when configured, else the OS login."""
    return os.environ.get("FLEET_AIRFLOW_USER") or _os_user()


def cmd_lock_clear(args) -> int:
    """Clear the lock of a cluster (by the name or identity its holder recorded), after checking the
    cluster: never while the holder run is queued or running (asked of Airflow as the caller); with
    --force when it no longer runs or Airflow cannot be asked. The lock file is moved to
    <lock folder>/cleared/ and the clearing is audited on the holder run."""
    from fleetkit.core.locks import find_locks
    from fleetkit.core.render import visible_controls
    from fleetkit.core.runbook import Runbook, run_state_problem

    from fleetctl.airflow_api import run_state_or_none

    lock_dir = _lock_dir(args)
    locks = find_locks(lock_dir, args.cluster)
    if not locks:
        print(f"error: no lock held for cluster {visible_controls(args.cluster)!r} in {lock_dir} "
              "(fleetctl lock status lists the held locks)", file=sys.stderr)
        return 2
    refused = 0
    for lock in locks:
        h = lock.holder() or {}
        dag_id, run_id = str(h.get("dag_id") or ""), str(h.get("run_id") or "")
        what = (f"the lock of cluster {visible_controls(str(h.get('cluster')))!r} held by DAG "
                f"{visible_controls(dag_id)!r} run {visible_controls(run_id)!r}")
        state, why_unknown = run_state_or_none(dag_id, run_id) if dag_id and run_id else ("no such run", "")
        problem = run_state_problem(state, what, args.force)
        if problem is None and not args.force:
            problem = (f"{what}: its run is {state}; it may have left the cluster half-changed (see its audit records "
                       "and journal). After checking the cluster, clear it with --force")
        if problem:
            print(f"error: {problem}" + (f" ({visible_controls(why_unknown)})" if state is None else ""), file=sys.stderr)
            refused += 1
            continue
        cleared = lock.clear()
        if cleared is None:
            continue
        Runbook(capability="lock", action="cluster_lock", dag_id=dag_id or "-", run_id=run_id or "-",
                cluster=str(h.get("cluster") or args.cluster), lock_dir=lock_dir).audit(
            "lock_cleared", actor=_actor(),
            message=f"fleetctl lock clear --force: the lock of {h.get('identity')} held since {h.get('since')} cleared "
                    f"(holder run state: {state or 'unknown: ' + why_unknown})",
            details={"holder": h, "holder_state": state, "lock_file": str(lock.path)})
        print(f"cleared {what} since {h.get('since')} ({h.get('identity')}); kept in {lock.lock_dir / 'cleared'}; "
              "audited")
    return 2 if refused else 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="fleetctl", description="Kafka fleet maintenance toolkit")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    lab = sub.add_parser("lab", help="the lab fleet: Kafka 0.9.0.1, 3.9.2 (ZooKeeper mode), 4.3.1 (KRaft) on loopback",
                         description="The lab fleet: clusters lab (Kafka 0.9.0.1, ZooKeeper mode), lab39 (3.9.2, "
                                     "ZooKeeper mode) and lab43 (4.3.1, KRaft), in .lab/<cluster>, ports from "
                                     "fleetlab/ports.py. Example: fleetctl lab up --cluster lab43",
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    lab_sub = lab.add_subparsers(dest="lab_command", required=True)

    def lab_opts(sp):
        sp.add_argument("--cluster", action="append", metavar="NAME",
                        help="a cluster of the lab fleet: lab, lab39, lab43 (repeatable; default: all)")
        sp.add_argument("--lab-dir", help="one lab folder instead (a lab a test or benchmark started)")
        sp.add_argument("--zk-port", type=int, help="with --lab-dir: ZooKeeper port (default: the lab's saved one)")
        sp.add_argument("--broker-port", type=int, help="with --lab-dir: first broker's port; broker N listens on "
                                                        "it + N (default: the lab's saved one)")

    for name, fn, hlp in (("up", cmd_lab_up, "start the clusters (ZooKeeper, 3 brokers each); return when all answer"),
                          ("down", cmd_lab_down, "stop everything by PID"),
                          ("status", cmd_lab_status, "what runs where"),
                          ("env", cmd_lab_env, "print the AIRFLOW_CONN_* exports of the clusters")):
        sp = lab_sub.add_parser(name, help=hlp)
        lab_opts(sp)
        if name == "status":
            sp.add_argument("--json", action="store_true")
        sp.set_defaults(func=fn)
    for name, fn, hlp in (("stop-broker", cmd_lab_stop_broker, "stop one broker (SIGTERM, then SIGKILL)"),
                          ("start-broker", cmd_lab_start_broker, "start one broker again")):
        sp = lab_sub.add_parser(name, help=hlp)
        lab_opts(sp)
        sp.add_argument("broker", type=int)
        sp.set_defaults(func=fn)
    sp = lab_sub.add_parser("broker-config", help="set broker properties (key=value); they apply at the next start")
    lab_opts(sp)
    sp.add_argument("broker", type=int)
    sp.add_argument("settings", nargs="+", metavar="KEY=VALUE")
    sp.set_defaults(func=cmd_lab_broker_config)

    sp = lab_sub.add_parser("traffic", help="demo traffic: healthy groups, a poison record, a stopped group")
    lab_opts(sp)
    sp.add_argument("action", choices=["start", "stop"])
    sp.add_argument("--rate", type=float, default=20.0, help="records/s per topic")
    sp.set_defaults(func=cmd_lab_traffic)

    a = sub.add_parser("airflow", help="the project's Airflow (api-server, scheduler, dag-processor, triggerer)")
    a.add_argument("action", choices=["env", "up", "down", "status"])
    a.add_argument("--profile", choices=["embedded", "cluster"], default=None,
                   help="up: embedded (LocalExecutor, Spark local[*]; the default, or FLEET_PROFILE) or cluster "
                        "(CeleryExecutor + Redis, 2 Celery workers, Spark standalone master + 2 workers)")
    a.set_defaults(func=cmd_airflow)

    t = sub.add_parser("trigger", help="trigger a DAG through the Airflow REST API")
    t.add_argument("dag_id")
    t.add_argument("--conf", help="run conf as JSON")
    t.add_argument("--times", type=int, default=1)
    t.add_argument("--interval", type=float, default=0, help="seconds between runs")
    t.add_argument("--wait", action="store_true", help="wait for each run to finish")
    t.add_argument("--timeout", type=float, default=600)
    t.set_defaults(func=cmd_trigger)

    d = sub.add_parser("demo", help="start the lab, Airflow and traffic, run the demo's DAGs, print the summary "
                                    "and the time per step (what `make demo` runs after setup)")
    d.add_argument("--started-at", type=float, help="Unix time the demo started (before setup), so the setup "
                                                    "check counts in the time per step")
    d.set_defaults(func=cmd_demo)

    o = sub.add_parser("offsets", help="__consumer_offsets: dump, health, decode records, cleaner capacity")
    o_sub = o.add_subparsers(dest="offsets_command", required=True)
    od = o_sub.add_parser("decode", help="decode one __consumer_offsets record given as hex (a record type this "
                                         "decoder does not know: \"unknown\": true, key and value in hex)")
    od.add_argument("--key", required=True, help="the record key, hex")
    od.add_argument("--value", help="the record value, hex (absent: a tombstone)")
    od.set_defaults(func=cmd_offsets_decode)
    from fleetctl.incident import add_health_parser, add_offsets_parsers

    add_offsets_parsers(o_sub)
    add_health_parser(o_sub)
    oc = o_sub.add_parser("cleaner-capacity", help="how many keys one log-cleaner pass can map")
    oc.add_argument("--dedupe-buffer-size", type=int, required=True, help="log.cleaner.dedupe.buffer.size, bytes")
    oc.add_argument("--threads", type=int, default=1, help="log.cleaner.threads")
    oc.add_argument("--load-factor", type=float, default=0.9, help="log.cleaner.io.buffer.load.factor")
    oc.set_defaults(func=cmd_offsets_capacity)

    co = sub.add_parser("coordinator", help="which __consumer_offsets partition coordinates a group")
    co_sub = co.add_subparsers(dest="coordinator_command", required=True)
    cp = co_sub.add_parser("partition", help="group -> partition, as Kafka computes it (Java hashCode, Utils.abs)")
    cp.add_argument("groups", nargs="+", metavar="GROUP")
    cp.add_argument("--partitions", type=int, default=50, help="offsets.topic.num.partitions (default 50)")
    cp.set_defaults(func=cmd_coordinator_partition)
    cw = co_sub.add_parser("who", help="a group's partition, its leader/ISR/epoch, the coordinator the cluster names "
                                       "and what it answers (exit 3 when a group is not OK, 4 when the login or an "
                                       "ACL kept it from being seen)")
    cw.add_argument("groups", nargs="+", metavar="GROUP")
    cw.add_argument("--fleet", help="fleet file (default: $FLEET_FILE or include/fleets/lab.yaml)")
    cw.add_argument("--cluster", required=True, help="cluster name from the fleet file")
    cw.set_defaults(func=cmd_coordinator_who)

    au = sub.add_parser("audit", help="the audit dataset: what destructive runbooks did")
    au_sub = au.add_subparsers(dest="audit_command", required=True)
    al = au_sub.add_parser("list", help="audit records, oldest first")
    al.add_argument("--cluster")
    al.add_argument("--run", help="a DAG run id")
    al.add_argument("--limit", type=int, default=50)
    al.add_argument("--details", action="store_true", help="print each record's details (before/after)")
    al.add_argument("--data-root")
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
    ar.set_defaults(func=cmd_audit_rollback)
    av = au_sub.add_parser("verify", help="check every cluster's audit hash chain: modified, removed, inserted or "
                                          "re-ordered records and a truncated tail (exit 1 when one is found)")
    av.add_argument("--cluster", help="only this cluster's chain")
    av.add_argument("--data-root")
    av.set_defaults(func=cmd_audit_verify)
    asl = au_sub.add_parser("seal", help="sign the head of chains written before the audit key was configured "
                                         "(once, after the upgrade; refused when a chain has a problem)")
    asl.add_argument("--cluster", help="only this cluster's chain")
    asl.add_argument("--data-root")
    asl.set_defaults(func=cmd_audit_seal)

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
        sp.add_argument("--dag", default="runbook_offsets_trim", help="the trim DAG (default runbook_offsets_trim)")
        sp.add_argument("--execute", action="store_true", help="act (default: show what would be done)")
        sp.add_argument("--force", action="store_true", help="act although Airflow cannot be asked whether the run "
                                                             "still runs (you checked it yourself); never while it runs")
        sp.set_defaults(func=fn)

    g = sub.add_parser("groupids", help="KoP client-to-group mappings in ZooKeeper")
    g_sub = g.add_subparsers(dest="groupids_command", required=True)
    gd = g_sub.add_parser("diff", help="read mappings and live members now, print the findings (writes nothing)")
    gd.add_argument("--fleet", help="fleet file (default: $FLEET_FILE or include/fleets/lab.yaml)")
    gd.add_argument("--cluster", required=True)
    gd.add_argument("--all", action="store_true", help="print OK paths too")
    gd.set_defaults(func=cmd_groupids_diff)

    lk = sub.add_parser("lock", help="the per-cluster locks of the destructive runbooks")
    lk_sub = lk.add_subparsers(dest="lock_command", required=True)
    ls_ = lk_sub.add_parser("status", help="the held locks: cluster, holder run, since (exit 3 when one is held)")
    ls_.add_argument("--lock-dir", help="lock folder (default: $FLEET_LOCK_DIR, else $AIRFLOW_HOME/locks)")
    ls_.set_defaults(func=cmd_lock_status)
    lc = lk_sub.add_parser("clear", help="clear a cluster's lock after checking the cluster: refused while its holder "
                                         "run is queued or running (asked of Airflow as you: FLEET_AIRFLOW_USER); "
                                         "needs --force; audited")
    lc.add_argument("cluster", help="the cluster name (or identity) the lock's holder recorded")
    lc.add_argument("--force", action="store_true", help="clear it (the holder run no longer runs, or Airflow cannot "
                                                         "be asked and you checked the run yourself)")
    lc.add_argument("--lock-dir", help="lock folder (default: $FLEET_LOCK_DIR, else $AIRFLOW_HOME/locks)")
    lc.set_defaults(func=cmd_lock_clear)

    from fleetctl.incident import add_parsers

    add_parsers(sub)

    c = sub.add_parser("collect", help="collect a cluster's state into the datasets (exit 1 when a cluster failed, "
                                       "4 when the login or an ACL kept groups or topics from being seen)")
    c.add_argument("--fleet", help="fleet file (default: $FLEET_FILE or include/fleets/lab.yaml)")
    c.add_argument("--cluster", required=True, help="cluster name from the fleet file, or 'all'")
    c.add_argument("--out", help="data root (default: $FLEET_DATA_ROOT or ./data)")
    c.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for a cluster (default 15)")
    c.set_defaults(func=cmd_collect)
    return p


# Commands (or "command subcommand") that need no Airflow in the process: fleetctl imports no
# Airflow for them (nor for --help), so they start in a fraction of a second. `airflow` starts and
# stops Airflow's processes (and writes their env file); the demo talks to Airflow through its REST
# API.
AIRFLOW_FREE_COMMANDS = ("lab", "offsets", "coordinator partition", "lock", "demo", "airflow", "lag", "stuck",
                         "collect")


def needs_airflow(args: argparse.Namespace) -> bool:
    sub = getattr(args, f"{args.command}_command", None)
    return args.command not in AIRFLOW_FREE_COMMANDS and f"{args.command} {sub}" not in AIRFLOW_FREE_COMMANDS


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from fleetctl.incident import BLIND, say_blind
    from fleetkit.core.errors import AuthenticationFailed, ClusterUnreachable, NotAuthorized, TlsHandshakeFailed

    try:
        return args.func(args)
    except (AuthenticationFailed, NotAuthorized, TlsHandshakeFailed) as e:
        # the cluster answered but the toolkit could not see: a refused login, a missing ACL
        return say_blind([str(e)])
    except ClusterUnreachable as e:
        print(f"error: {e}", file=sys.stderr)
        return BLIND
    except FleetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        if not _stdout_closed():
            raise  # a socket's, not the reader's: not a quiet end
        return 0  # `fleetctl offsets dump ... | head`: the reader has what it wanted


def _stdout_closed() -> bool:
    """Whether stdout's reader went away (then stdout points at /dev/null, so the interpreter's own
    flush at exit does not fail again)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        closed = any(ev & select.POLLERR for _, ev in poller.poll(0))  # a pipe without a reader
    except (OSError, ValueError):
        return False
    if closed:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, fd)
        os.close(devnull)
    return closed


def console_main() -> int:
    """The `fleetctl` command: stdout carries only what the command prints (tab-separated lines
    scripts parse); Airflow's and the libraries' logs go to stderr, warnings and up unless -v."""
    import warnings

    verbose = any(a in ("-v", "--verbose") for a in sys.argv[1:])
    if not verbose:
        warnings.filterwarnings("ignore", category=DeprecationWarning)
    args = build_parser().parse_args()  # --help and usage errors end here, before any Airflow import
    if not needs_airflow(args):
        return run(args)  # e.g. the lab (runbooks run these commands: they start fast)
    _airflow_context()
    try:
        import airflow  # noqa: F401 - configures Airflow's logging (to stdout) ...
        from airflow._shared.logging import configure_logging

        configure_logging(output=sys.stderr, log_level="DEBUG" if verbose else "WARNING", colors=False)  # ... moved
    except Exception:  # noqa: BLE001 - an Airflow without that helper keeps its own logging
        pass
    return run(args)


if __name__ == "__main__":
    sys.exit(console_main())

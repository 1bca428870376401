"""fleetlab: the lab's command (the demo and the tests' fleet on loopback), apart from the
product's `fleetctl`.

    fleetlab up|down|status|env                 the lab fleet (lab, lab39, lab43), or one --lab-dir
    fleetlab stop-broker|start-broker|broker-config   one broker (the lab fleet file's broker_control)
    fleetlab traffic start|stop                 demo traffic
    fleetlab objectstore up|down|status         the lab's S3-compatible object store (s3proxy)
    fleetlab airflow env|up|down|status         the project's Airflow processes
    fleetlab trigger DAG                        trigger a DAG run through that Airflow's REST API
    fleetlab demo                               what `make demo` runs after setup

No command here imports Airflow: they start and stop processes, and talk to Airflow over REST.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time

from fleetkit.core.errors import FleetError


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
        raise FleetError(f"no lab in {lab.spec.path} (lab.json missing): check --lab-dir, or run fleetlab up")
    if not 0 <= args.broker < lab.spec.brokers:
        raise FleetError(f"lab {lab.spec.path} has no broker {args.broker} (brokers 0..{lab.spec.brokers - 1})")
    return lab


DEFAULT_HOSTS = ["airflow", "worker1", "worker2", "spark0", "spark1", "spark2", "store", "kafka0", "kafka1", "kafka2"]


def cmd_hosts(args) -> int:
    from fleetlab.hosts import Hosts, HostsError
    from fleetlab.paths import CHECKOUT

    hosts = Hosts(CHECKOUT / ".lab" / "hosts")
    try:
        if args.action == "up":
            for name, addr in hosts.up(args.names or DEFAULT_HOSTS).items():
                print(f"{name:10} {addr:15} netns {hosts.netns(name)}")
            print(f"bridge {hosts.state()['bridge']} ({hosts.state()['subnet']}), this machine at {hosts.gateway()}")
        elif args.action == "down":
            for line in hosts.down() or ["nothing to remove"]:
                print(line)
        else:
            state = hosts.state()
            if not state:
                print("hosts: not up")
                return 3
            for name, h in state["hosts"].items():
                print(f"{name:10} {h['address']:15} {len(hosts.pids(name))} processes")
    except HostsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


def object_store_spec(test: bool = False):
    """The lab's object store: .lab/objectstore on the demo's port plan (the tests': .lab/objectstore-test)."""
    from fleetlab import ports
    from fleetlab.objectstore import ObjectStoreSpec
    from fleetlab.paths import CHECKOUT

    plan = ports.tests() if test else ports.DEMO
    return ObjectStoreSpec(CHECKOUT / ".lab" / ("objectstore-test" if test else "objectstore"), plan.object_store)


def cmd_objectstore(args) -> int:
    from fleetlab import objectstore

    spec = object_store_spec()
    if args.action == "up":
        pid = objectstore.up(spec)
        objectstore.create_bucket(spec, args.bucket)
        print(f"object store up (pid {pid}): {spec.endpoint}, bucket {args.bucket!r}, blobs in {spec.blobs}; "
              f"data root s3://{args.bucket}/<prefix> with an aws connection from {spec.credentials_file}")
    elif args.action == "down":
        print(f"object store: {objectstore.down(spec)}")
    else:
        pid = objectstore.running(spec)
        print(f"object store: {'pid %d, %s' % (pid, spec.endpoint) if pid else 'not running'}")
        return 0 if pid else 3
    return 0


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


#: what `fleetlab env` exports of the lab's generated airflow.env besides the clusters' connections:
#: the lab's deployment settings and where its Airflow is (a shell that evals it runs fleetctl as a
#: host of the lab's deployment would)
DEPLOYMENT_EXPORTS = ("AIRFLOW_HOME", "AIRFLOW_CONFIG", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN", "FLEET_FILE",
                      "FLEET_DATA_ROOT", "FLEET_SPARK_PYTHON", "FLEET_AIRFLOW_URL", "AIRFLOW_VAR_FLEET_AUDIT_KEY",
                      "SPARK_LOCAL_IP")


def cmd_lab_env(args) -> int:
    """The exports of the lab's deployment (`eval "$(.venv/bin/fleetlab env)"`): its settings from the
    generated airflow.env (`make setup` writes it) and the clusters' AIRFLOW_CONN_* connections."""
    import shlex

    from fleetlab.paths import airflow_env_file, read_env_file

    generated = read_env_file(airflow_env_file())
    if not generated:
        print(f"# {airflow_env_file()} does not exist yet: run `make setup` first", file=sys.stderr)
    for k in DEPLOYMENT_EXPORTS:
        if k in generated:
            print(f"export {k}={shlex.quote(generated[k])}")
    for lab in _labs(args):
        for k, v in lab.spec.connection_env().items():
            print(f"export {k}={shlex.quote(v)}")
    return 0


def cmd_lab_traffic(args) -> int:
    for lab in _labs(args):
        if args.action == "start":
            print(f"{lab.spec.name}: traffic running (pid {lab.start_traffic(args.rate)}), "
                  f"log {lab.spec.path / 'logs' / 'traffic.out'}")
        else:
            print(f"{lab.spec.name}: traffic {lab.stop_traffic()}")
    return 0


def cmd_airflow(args) -> int:
    from fleetlab import airflow_services as services

    if args.action == "env":
        print(f"wrote {services.ensure_env_file()}")
    elif args.action == "up":
        profile = services.profile(args.profile)
        extra = (" + Redis, 2 Celery workers, Spark standalone (master + 2 workers)"
                 if profile in ("cluster", "hosts") else "")
        if profile == "hosts":
            extra += ", each on its lab host, + Kafka 4.3.1 on three broker hosts"
        print(f"starting Airflow, {profile} profile (api-server, scheduler, dag-processor, triggerer{extra}) ...",
              flush=True)
        services.up(profile_name=profile, progress=lambda line: print(line, flush=True))
        print(f"Airflow UI: {services.api_url()}  "
              f"(user admin, password {services.passwords().get('admin', '?')})")
        if profile in ("cluster", "hosts"):
            spark = services.spark_spec()
            print(f"Spark master: {spark.master_url}  (UI {spark.master_ui}); Celery broker: "
                  f"Redis on {services.redis_spec().where}; Celery workers: {', '.join(services.celery_hostnames())}")
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fleetlab", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="The lab: clusters lab (Kafka 0.9.0.1, ZooKeeper mode), lab39 (3.9.2, ZooKeeper mode) and "
                    "lab43 (4.3.1, KRaft), in .lab/<cluster>, ports from fleetlab/ports.py; the project's Airflow; "
                    "the demo. Example: fleetlab up --cluster lab43")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    def lab_opts(sp):
        sp.add_argument("--cluster", action="append", metavar="NAME",
                        help="a cluster of the lab fleet: lab, lab39, lab43 (repeatable; default: all)")
        sp.add_argument("--lab-dir", help="one lab folder instead (a lab a test or benchmark started)")
        sp.add_argument("--zk-port", type=int, help="with --lab-dir: ZooKeeper port (default: the lab's saved one)")
        sp.add_argument("--broker-port", type=int, help="with --lab-dir: first broker's port; broker N listens on "
                                                        "it + N (default: the lab's saved one)")

    for name, fn, hlp in (("up", cmd_lab_up, "start the clusters (ZooKeeper, 3 brokers each); return when all answer"),
                          ("down", cmd_lab_down, "stop everything by PID"),
                          ("status", cmd_lab_status, "what runs where (exit 3 when a process does not answer)"),
                          ("env", cmd_lab_env, "print the exports of the lab's deployment (settings, connections): "
                           "eval \"$(.venv/bin/fleetlab env)\" before fleetctl")):
        sp = sub.add_parser(name, help=hlp)
        lab_opts(sp)
        if name == "status":
            sp.add_argument("--json", action="store_true")
        sp.set_defaults(func=fn)
    for name, fn, hlp in (("stop-broker", cmd_lab_stop_broker, "stop one broker (SIGTERM, then SIGKILL)"),
                          ("start-broker", cmd_lab_start_broker, "start one broker again")):
        sp = sub.add_parser(name, help=hlp)
        lab_opts(sp)
        sp.add_argument("broker", type=int)
        sp.set_defaults(func=fn)
    sp = sub.add_parser("broker-config", help="set broker properties (key=value); they apply at the next start")
    lab_opts(sp)
    sp.add_argument("broker", type=int)
    sp.add_argument("settings", nargs="+", metavar="KEY=VALUE")
    sp.set_defaults(func=cmd_lab_broker_config)

    sp = sub.add_parser("hosts", help="the several-hosts network: one Linux network namespace per lab host, on "
                                      "a bridge and a private /24 the lab checks unused (root only)")
    sp.add_argument("action", choices=["up", "down", "status"])
    sp.add_argument("names", nargs="*", metavar="HOST", help="up: the hosts to create (default: airflow worker1 "
                                                             "worker2 spark0 spark1 spark2 store kafka0 kafka1 kafka2)")
    sp.set_defaults(func=cmd_hosts)

    sp = sub.add_parser("objectstore", help="the lab's S3-compatible object store (s3proxy on 127.0.0.1, "
                                            "filesystem backend under .lab/objectstore)")
    sp.add_argument("action", choices=["up", "down", "status"])
    sp.add_argument("--bucket", default="fleet", help="up: the bucket to create (default: fleet)")
    sp.set_defaults(func=cmd_objectstore)

    sp = sub.add_parser("traffic", help="demo traffic: healthy groups, a poison record, a stopped group")
    lab_opts(sp)
    sp.add_argument("action", choices=["start", "stop"])
    sp.add_argument("--rate", type=float, default=20.0, help="records/s per topic")
    sp.set_defaults(func=cmd_lab_traffic)

    a = sub.add_parser("airflow", help="the project's Airflow (api-server, scheduler, dag-processor, triggerer)")
    a.add_argument("action", choices=["env", "up", "down", "status"])
    a.add_argument("--profile", choices=["embedded", "cluster", "hosts"], default=None,
                   help="up: embedded (LocalExecutor, Spark local[*]; the default, or FLEET_PROFILE) or cluster "
                        "(CeleryExecutor + Redis, 2 Celery workers, Spark standalone master + 2 workers)")
    a.set_defaults(func=cmd_airflow)

    t = sub.add_parser("trigger", help="trigger a DAG of the project's Airflow through its REST API (as its admin user)")
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
    return p


def main(argv: list[str] | None = None) -> int:
    """The `fleetlab` command (pyproject: fleetlab.cli:main)."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except FleetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())

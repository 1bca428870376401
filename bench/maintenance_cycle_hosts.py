"""Benchmark: the fleet_maintenance cycle on one host against the same deployment on lab hosts, same
cluster, same traffic, same day.

    .venv/bin/python bench/maintenance_cycle_hosts.py [--runs 3] [--spark]

As root (the lab hosts are network namespaces), with no demo running (`make stop` first: both
layouts use the demo's port plan). Each layout gets an Airflow home of its own in a temporary
folder, so the checkout's .airflow is not touched:

- one host: Airflow's cluster profile on this machine's loopback (api-server, scheduler, two Celery
  workers, Redis, PostgreSQL, the Spark standalone master and two workers), the data root, locks and
  journals on the local disk, and the secured KRaft cluster of the hosts profile (Kafka 4.3.1,
  three nodes, SASL_SSL, cleaner off) on loopback, its broker files reached locally;
- hosts: the hosts profile (fleetlab.hosts_profile): every part on a lab host of its own, the data
  root on the object store host (s3://), the run state in the Airflow host's PostgreSQL, the same
  cluster on three broker hosts reached over SSH.

Both run the lab's traffic on the cluster (the same groups, the same stuck consumers), then
`--runs` fleet_maintenance runs one after another (the demo's conf), and print each run's wall time
(Airflow's start to end) and its tasks' times, then the median per layout and the ratio. `--spark`
sends every analysis to the standalone master however small its input (the default, as deployed,
runs small inputs in process).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYOUTS = ("one host", "hosts")


def phase(layout: str, runs: int, spark: bool, out: Path) -> int:
    """One layout, in this process (its environment was set before any fleetlab import)."""
    import datetime as dt

    from fleetlab import airflow_services as services
    from fleetlab import hosts_profile
    from fleetlab.demo import FINAL_CONF, Airflow, Clock, wait_traffic
    from fleetlab.lab import Lab, LabSpec

    clock = Clock()
    plan = services.port_plan()
    home = Path(os.environ["AIRFLOW_HOME"])
    spec = None
    try:
        if layout == "one host":
            ports = plan.cluster("lab43")
            spec = LabSpec(lab_dir=str(home / "kafka" / hosts_profile.KAFKA_CLUSTER), name=hosts_profile.KAFKA_CLUSTER,
                           zk_port=0, broker_base_port=ports["broker_base_port"],
                           controller_base_port=ports["controller_base_port"], brokers=len(hosts_profile.BROKERS),
                           kafka_version=hosts_profile.KAFKA_VERSION, security="sasl_ssl",
                           broker_overrides={"log.cleaner.enable": "false"}, offsets_segment_bytes=1024 * 1024)
            Lab(spec).up(timeout=300)
            fleet = hosts_profile.write_fleet_file(spec, home / "fleet.yaml")
            os.environ["FLEET_FILE"] = str(fleet)
            clock.say(f"{layout}: Kafka {hosts_profile.KAFKA_VERSION} ({spec.name}) up on loopback")
            # this Airflow's clusters (its connections in airflow.env) are this one, not the lab fleet
            services.lab_specs = lambda: [spec]
            services.up(profile_name="cluster", progress=lambda line: clock.say(f"  airflow: {line}"))
        else:
            services.up(profile_name="hosts", progress=lambda line: clock.say(f"  airflow: {line}"))
            spec = services.lab_specs()[0]
        Lab(spec).start_traffic()
        wait_traffic(clock, [spec])
        airflow = Airflow()
        airflow.set_paused("ownership", True)
        airflow.set_paused("fleet_maintenance", False)
        results = []
        for i in range(runs):
            run = airflow.trigger("fleet_maintenance", dict(FINAL_CONF))
            run_id = run["dag_run_id"]
            deadline = time.monotonic() + 1200
            while True:
                state = airflow.run("fleet_maintenance", run_id)
                if state["state"] in ("success", "failed"):
                    break
                if time.monotonic() > deadline:
                    raise SystemExit(f"{layout}: fleet_maintenance run {run_id} not over after 20 minutes")
                time.sleep(2)
            start, end = (dt.datetime.fromisoformat(state[k]) for k in ("start_date", "end_date"))
            tasks = {}
            for ti in airflow.tasks("fleet_maintenance", run_id):
                if ti.get("start_date") and ti.get("end_date"):
                    tasks[ti["task_id"] + (f"[{ti['map_index']}]" if ti.get("map_index", -1) >= 0 else "")] = round(
                        (dt.datetime.fromisoformat(ti["end_date"])
                         - dt.datetime.fromisoformat(ti["start_date"])).total_seconds(), 1)
            wall = (end - start).total_seconds()
            results.append({"run": run_id, "state": state["state"], "wall_s": round(wall, 1), "tasks": tasks})
            slowest = ", ".join(f"{k} {v:.0f}s" for k, v in sorted(tasks.items(), key=lambda kv: -kv[1])[:4])
            clock.say(f"{layout}: run {i + 1}/{runs} {state['state']} in {wall:.1f}s (slowest tasks: {slowest})")
            if state["state"] != "success":
                raise SystemExit(f"{layout}: fleet_maintenance run {run_id} failed (see its task logs under {home})")
        out.write_text(json.dumps({"layout": layout, "spark": spark, "runs": results}))
        return 0
    finally:
        if spec is not None:
            clock.say(f"traffic: {Lab(spec).stop_traffic()}")
        for line in services.down():
            clock.say(f"  {line}")
        if layout == "one host" and spec is not None:
            for line in Lab(spec).down():
                clock.say(f"  {line}")
        from fleetlab import postgres

        clock.say(f"  postgresql: {postgres.remove_relocated(services.pg_spec().home)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--spark", action="store_true", help="every analysis on the standalone master")
    ap.add_argument("--phase", choices=LAYOUTS, help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.phase:
        return phase(args.phase, args.runs, args.spark, args.out)
    if os.geteuid() != 0:
        raise SystemExit("the lab hosts are network namespaces: run as root")
    results = {}
    for layout in LAYOUTS:
        work = Path(tempfile.mkdtemp(prefix=f"bench-cycle-{layout.replace(' ', '-')}-"))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "FLEET_"))}
        env.update({"AIRFLOW_HOME": str(work / "airflow"), "AIRFLOW_CONFIG": str(REPO / "airflow.cfg"),
                    "FLEET_DATA_ROOT": str(work / "data"), "FLEET_LOCK_DIR": str(work / "locks"),
                    "AIRFLOW__CORE__LOAD_EXAMPLES": "False", "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                    "AIRFLOW__SCHEDULER__USE_JOB_SCHEDULE": "False", "FLEET_COLLECTION_INTERVAL": "1h",
                    "FLEET_LAB_SPARK_S3A": "1" if args.spark else "0"})
        if args.spark:
            env.update({"FLEET_STUCK_INPROCESS_MAX_ROWS": "0", "FLEET_TRIM_INPROCESS_MAX_ROWS": "0"})
        out = work / "result.json"
        t = time.monotonic()
        proc = subprocess.run([sys.executable, __file__, "--phase", layout, "--runs", str(args.runs),
                               "--out", str(out)] + (["--spark"] if args.spark else []), env=env)
        if proc.returncode != 0 or not out.exists():
            print(f"{layout}: failed (exit {proc.returncode}); its Airflow home is kept: {work}", file=sys.stderr)
            return 1
        results[layout] = json.loads(out.read_text())
        print(f"{layout}: done in {time.monotonic() - t:.0f}s (start, traffic, runs, stop)", flush=True)
        shutil.rmtree(work, ignore_errors=True)
    medians = {k: statistics.median(r["wall_s"] for r in v["runs"]) for k, v in results.items()}
    for layout, doc in results.items():
        walls = ", ".join(f"{r['wall_s']:.1f}s" for r in doc["runs"])
        print(f"{layout}: fleet_maintenance runs {walls}; median {medians[layout]:.1f}s")
        tasks = {}
        for r in doc["runs"]:
            for k, v in r["tasks"].items():
                tasks.setdefault(k, []).append(v)
        print("   " + ", ".join(f"{k} {statistics.median(v):.1f}s" for k, v in sorted(tasks.items())))
    print(f"RESULT fleet_maintenance median run: one host {medians['one host']:.1f}s, hosts {medians['hosts']:.1f}s, "
          f"hosts/one host = {medians['hosts'] / medians['one host']:.2f}x ({args.runs} runs each"
          f"{', every analysis on Spark' if args.spark else ''})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

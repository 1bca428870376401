"""Benchmark: the seed incident at its scale, per generation: a bloated __consumer_offsets partition,
the coordinator's load after a leader change (LOADING on the real broker, LOAD_STUCK past the
threshold), then runbook_trim: the load after the trim, the trim's wall time, the bytes moved,
and every committed offset checked.

    FLEET_TEST_PORT_OFFSET=3000 env -u PYTHONDONTWRITEBYTECODE .venv/bin/python bench/seed_incident.py \
        [--generations 0.9.0.1,3.9.2,4.3.1] [--gib 2] [--segment-mib 100] [--groups 60] [--partitions 500]
        [--metadata-bytes 256] [--load-stuck 5] [--cold] [--keep]

For each generation, one after the other, in the tests' `trimgen` port slot (FLEET_TEST_PORT_OFFSET
moves it; one lab at a time, in .lab-seed/<version>, removed afterwards unless --keep): a lab
secured as the lab fleet is (0.9 mutual TLS and ACLs, one broker; 3.9 SASL_SSL, SCRAM, ACLs and a SASL
ZooKeeper, one broker; 4.3 SASL_SSL, SCRAM and ACLs in KRaft mode, three combined nodes, the partition
on all three: the trim refuses to stop a lone controller), with the log cleaner off
(`log.cleaner.enable=false`: a partition the cleaner never compacts, the incident's state) and
__consumer_offsets segments of --segment-mib. All traffic is on one __consumer_offsets partition P:

* `early`, whose only commit is the first record of the log (the trim must re-commit it);
* --groups groups committing all --partitions partitions of topic `bulk` over and over (--groups x
  --partitions distinct keys), with a --metadata-bytes commit metadata string (what a client may
  store beside its offset; it makes the records the size of real ones with long names), until P
  holds --gib GiB; `stopped` commits once half-way.

Then, with the lab's `fleet` principal as an operator's tools have it:

1. every group's committed offsets are read (the reference);
2. a leader change (one broker: restarted, a new leader epoch; three nodes: P's leader stopped, another
   replica takes over and loads P, the node started again once it has) and the library's ownership check
   (`fleetkit.ownership.collect.who` through fleetctl's connection, then `partition_verdict` with
   --load-stuck) is polled on the real broker until the groups answer: the LOADING observations, the
   first LOAD_STUCK with its evidence (partition, leader epoch, size, seconds), the time until the
   groups answered, and the broker's own "Finished loading" figure;
3. runbook_trim (dag.test on the tests' PostgreSQL metadata database, approved by a second
   listed approver through fleetlab.hitl, the plan from the offsets health Spark job), timed;
4. the leader change again: the load after the trim; then every group's offsets compared with (1).
With --cold the page cache is dropped (root only) before each judged load, so the partition is read
from disk as a partition larger than memory is; the warm loads are printed too.

Prints one RESULT line per generation: the load before and after (and the ratio, target >= 10x),
the trim's wall time, the bytes moved to quarantine, and the offsets lost (target 0).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include"), str(REPO / "plugins"), str(REPO)]

from fleetlab import harness  # noqa: E402

#: the tests' environment (Airflow home, ports, PostgreSQL), set before anything imports Airflow
H = harness.setup(REPO)

from fleetkit.core.kafka_names import OFFSETS_TOPIC  # noqa: E402
from fleetkit.core.partitioning import partition_for  # noqa: E402
from fleetlab.lab import Lab, LabSpec, log_grown_since  # noqa: E402
from fleetlab.arrange import (bloat_offsets_partition, commit_when_led, committed_offsets,  # noqa: E402
                              groups_on_partition, offsets_partition_bytes)

DAG = "runbook_trim"
LOAD_LINE = re.compile(r"Finished loading[^\n]*?__consumer_offsets[-,](\d+)\]?[^\n]*? in (\d+) ?(?:ms|milliseconds)")


def seed_spec(version: str, segment_mib: int) -> LabSpec:
    folder = REPO / ".lab-seed" / version
    spec = LabSpec(lab_dir=str(folder), name=f"seed{version.replace('.', '')[:2]}", **H.ports.cluster("trimgen"),
                   brokers=1, kafka_version=version, broker_heap="1g",
                   broker_overrides={"log.cleaner.enable": "false"},
                   offsets_segment_bytes=segment_mib * 1024 * 1024)
    spec.security = "sasl_ssl" if spec.modern else "ssl"
    spec.zk_security = "sasl" if spec.modern and not spec.kraft else ""
    # KRaft: three combined nodes, so that stopping one (the leader change, the trim's restarts)
    # leaves the metadata quorum standing (the trim refuses to stop a lone controller)
    spec.brokers = 3 if spec.kraft else 1
    return spec


def read_offsets(spec: LabSpec, groups: dict[str, tuple[str, int]]) -> dict[str, dict[int, int]]:
    return {g: committed_offsets(spec.bootstrap, g, topic, n, spec.kafka_version, spec.security_config("admin"))
            for g, (topic, n) in groups.items()}


def fill(spec: LabSpec, lab: Lab, P: int, args) -> tuple[dict[str, tuple[str, int]], float]:
    """The groups on P and what they committed; returns ({group: (topic, partitions)}, seconds)."""
    early = groups_on_partition(P, 50, 1, "early bird é {i}")[0]
    stopped = groups_on_partition(P, 50, 1, "stopped-{i}")[0]
    bulk = groups_on_partition(P, 50, args.groups, "bulk-writer-{i}")
    commit_when_led(lab, "early-topic", 1, {early: {0: 0}})
    commit_when_led(lab, "bulk", args.partitions, {})
    seconds = bloat_offsets_partition(lab, P, int(args.gib * 2**30), bulk, "bulk", args.partitions,
                                      args.metadata_bytes,
                                      halfway=lambda: commit_when_led(lab, "stopped-topic", 1, {stopped: {0: 0}}))
    groups = {early: ("early-topic", 1), stopped: ("stopped-topic", 1), **{g: ("bulk", args.partitions) for g in bulk}}
    return groups, seconds


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def drop_page_cache() -> bool:
    """Empty the kernel's page cache (root only): the partition is then read from disk, as a
    partition larger than the broker's memory is (the incident's 200 GB). False when not allowed."""
    try:
        os.sync()
        DROP_CACHES.write_text("1\n")
        return True
    except OSError:
        return False


def restart_and_watch(spec: LabSpec, lab: Lab, cluster, P: int, sample: list[str], load_stuck: int,
                      cold: bool = False) -> dict:
    """A leader change of P, then the ownership check polled until every sample group answers OK.
    One broker: it is restarted (a new leader epoch; `cold`: the page cache dropped while it is
    down). Several (KRaft: three combined nodes): P's leader is stopped, another replica becomes
    leader and loads P; the stopped node is started again afterwards and waited back into the ISR."""
    from fleetctl.connect import connected
    from fleetkit.ownership.collect import who
    from fleetkit.ownership.rules import LOAD_STUCK, OK, partition_verdict, worst

    logs = {b: spec.broker_dir(b) / "logs" / "server.log" for b in range(spec.brokers)}
    marks = {b: (p.stat() if p.exists() else None) for b, p in logs.items()}
    size = offsets_partition_bytes(spec, P)
    with connected(cluster, 5.0, stores=False) as (kafka, zk, _):
        leader = who(kafka, zk, sample[:1])[0]["leader"]
    # dropped before the stop: several nodes move P's leadership during the leader's controlled
    # shutdown, and the new leader starts loading then
    if cold and not drop_page_cache():
        raise SystemExit(f"--cold: {DROP_CACHES} is not writable here (root only); run without --cold")
    t_start = time.monotonic()
    lab.stop_broker(leader)
    if spec.brokers == 1:
        lab.start_broker(leader)
    # one broker: it answers again; several: the leadership moved during the controlled shutdown
    changed = time.monotonic() if spec.brokers == 1 else t_start
    seen, stuck, epoch, polls, new_leader = {}, None, None, 0, None
    with connected(cluster, 5.0, stores=False) as (kafka, zk, _):
        while True:
            polls += 1
            try:
                rows = who(kafka, zk, sample)
            except Exception as e:  # noqa: BLE001 - an answer the check could not get is counted, not fatal
                rows, err = [], f"{type(e).__name__}"
                seen[err] = seen.get(err, 0) + 1
            now = time.monotonic()
            if rows:
                verdicts = [r["verdict"] for r in rows]
                for r in rows:
                    key = f"{r['verdict']} ({r['error']})" if r["error"] else r["verdict"]
                    seen[key] = seen.get(key, 0) + 1
                epoch, new_leader = rows[0]["leader_epoch"], rows[0]["leader"]
                pv = partition_verdict(worst(verdicts), new_leader, int(now - changed), load_stuck)
                if pv == LOAD_STUCK and stuck is None:
                    stuck = {"partition": P, "leader": new_leader, "leader_epoch": epoch,
                             "size_bytes": size, "waiting_s": round(now - changed, 1)}
                    print(f"  ownership: LOAD_STUCK {OFFSETS_TOPIC}-{P} leader {new_leader} epoch {epoch}, "
                          f"{size / 2**30:.2f} GiB, loading for {stuck['waiting_s']} s (threshold {load_stuck} s)",
                          flush=True)
                if all(v == OK for v in verdicts):
                    break
            if now - changed > 1800:
                raise SystemExit(f"the groups of {OFFSETS_TOPIC}-{P} did not answer within 30 min of the leader change")
            time.sleep(0.25)
        done = time.monotonic()
        if spec.brokers > 1:  # the stopped node back, and back in P's ISR (the trim checks it)
            lab.start_broker(leader)
            deadline = time.monotonic() + 600
            while len(who(kafka, zk, sample[:1])[0]["isr"]) < spec.brokers:
                if time.monotonic() > deadline:
                    raise SystemExit(f"node {leader} did not rejoin the ISR of {OFFSETS_TOPIC}-{P} within 10 min")
                time.sleep(1)
    # the load of the leader that served the groups (a node started again later loads P too)
    grown = log_grown_since(logs[new_leader], marks[new_leader], limit=1 << 30).decode(errors="replace")
    broker_ms = [int(ms) for p, ms in LOAD_LINE.findall(grown) if int(p) == P]
    return {"restart_to_answer_s": round(changed - t_start, 1), "load_s": round(done - changed, 2),
            "broker_load_s": broker_ms[0] / 1000 if broker_ms else None, "observations": seen,
            "load_stuck": stuck, "leader_epoch": epoch, "leader_before": leader, "leader_after": new_leader,
            "polls": polls}


def judged_loads(spec: LabSpec, lab: Lab, cluster, P: int, sample: list[str], args, when: str) -> dict:
    """The load after a leader change, warm, then (--cold) with the page cache dropped: the last one judged."""
    out = None
    for cold in (False, True) if args.cold else (False,):
        out = restart_and_watch(spec, lab, cluster, P, sample, args.load_stuck, cold=cold)
        print(f"  {when}{', page cache dropped' if cold else ''}: groups answered {out['load_s']} s after the leader "
              f"change (broker's own load figure {out['broker_load_s']} s); observations {out['observations']}",
              flush=True)
    return out


def run_trim(spec: LabSpec, P: int, tmp: Path) -> tuple[float, object, Path]:
    from airflow.dag_processing.dagbag import DagBag

    from fleetlab.hitl import Answerer, run_dag

    data = tmp / "data"
    os.environ.update(FLEET_FILE=str(tmp / "fleet.yaml"), FLEET_DATA_ROOT=str(data), FLEET_LOCK_DIR=str(tmp / "locks"))
    dag = DagBag(dag_folder=str(H.dags_folder)).get_dag(DAG)
    t0 = time.monotonic()  # approved by "approver", requested by "admin" (fleetlab.hitl)
    dr = run_dag(dag, {"cluster": spec.name, "partitions": str(P), "dry_run": False, "min_bloat_bytes": 0},
                 Answerer(DAG, "Approve", timeout=3600))
    wall = time.monotonic() - t0
    tis = dr.get_task_instances()
    print(f"  trim run {dr.state} in {wall:.0f}s; tasks: "
          + ", ".join(f"{ti.task_id} {ti.state} {ti.duration or 0:.0f}s" for ti in tis), flush=True)
    if dr.state != "success":
        raise SystemExit(f"the trim run ended {dr.state}")
    return wall, dr, data


def one_generation(version: str, args) -> str:
    spec = seed_spec(version, args.segment_mib)
    lab = Lab(spec)
    lab.down()
    shutil.rmtree(spec.path, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix="bench-seed-"))
    try:
        print(f"Kafka {version}: {spec.brokers}-node {spec.security} lab in {spec.path}, cleaner off, "
              f"{args.segment_mib} MiB offsets segments", flush=True)
        lab.up()
        for k, v in spec.connection_env().items():
            os.environ[k] = v
        harness.write_fleet_file(spec, tmp / "fleet.yaml")
        from fleetkit.core.fleet import load_fleet
        cluster = load_fleet(tmp / "fleet.yaml").cluster(spec.name)

        P = partition_for("seed-incident", 50)  # any partition: the groups are chosen to hash onto it
        groups, fill_s = fill(spec, lab, P, args)
        size = offsets_partition_bytes(spec, P)
        segments = len(list((spec.log_dir(0) / f"{OFFSETS_TOPIC}-{P}").glob("*.log")))
        keys = sum(n for _, n in groups.values())
        print(f"  {OFFSETS_TOPIC}-{P}: {size / 2**30:.2f} GiB in {segments} segments, {keys:,} group keys, "
              f"filled in {fill_s:.0f}s", flush=True)
        reference = read_offsets(spec, groups)
        sample = list(groups)[:2] + list(groups)[2:7]
        before = judged_loads(spec, lab, cluster, P, sample, args, "before the trim")

        trim_s, dr, data = run_trim(spec, P, tmp)
        manifests = [json.loads(m.read_text()) for m in (data / "quarantine").rglob("manifest.json")]
        moved = sum(f.get("size") or 0 for m in manifests for f in m["files"])
        files = sum(len(m["files"]) for m in manifests)
        after_size = offsets_partition_bytes(spec, P)

        after = judged_loads(spec, lab, cluster, P, sample, args, f"after the trim ({after_size / 2**20:.0f} MiB)")
        now = read_offsets(spec, groups)
        lost = sum(1 for g, offs in reference.items() for p, o in offs.items() if now[g].get(p) != o)
        total = sum(len(offs) for offs in reference.values())
        # the load is the broker's own figure where it logs one; the client's view adds the polling
        # and the restart's fixed costs (what a consumer waits, printed beside it)
        if before["broker_load_s"] and after["broker_load_s"]:
            ratio = before["broker_load_s"] / after["broker_load_s"]
        else:
            ratio = before["load_s"] / after["load_s"] if after["load_s"] else float("inf")
        verdict = "met" if ratio >= 10 and lost == 0 and before["load_stuck"] else "NOT met"
        cold = " (page cache dropped before each load)" if args.cold else ""
        return (f"RESULT Kafka {version}{cold}: {size / 2**30:.2f} GiB ({segments} segments, {keys:,} keys) "
                f"-> {after_size / 2**20:.0f} MiB; load (broker) {before['broker_load_s']} s -> "
                f"{after['broker_load_s']} s ({ratio:.1f}x; groups answering {before['load_s']} s -> "
                f"{after['load_s']} s after the leader change); "
                f"LOAD_STUCK seen: {'yes, ' + str(before['load_stuck']) if before['load_stuck'] else 'no'}; "
                f"trim run {trim_s:.0f} s, {files} files / {moved / 2**30:.2f} GiB moved to quarantine; "
                f"offsets lost {lost} of {total}; target (>=10x, 0 lost, LOAD_STUCK seen) {verdict}")
    finally:
        if args.keep:
            print(f"  --keep: the lab stays up in {spec.path} (stop it with Lab.down / fleetlab)")
        else:
            print(f"  {spec.name}: {'; '.join(lab.down())}", flush=True)
            shutil.rmtree(spec.path, ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--generations", default="0.9.0.1,3.9.2,4.3.1")
    ap.add_argument("--gib", type=float, default=2.0, help="the bloated partition's size (default 2 GiB)")
    ap.add_argument("--segment-mib", type=int, default=100)
    ap.add_argument("--groups", type=int, default=60, help="bulk groups on the partition (x --partitions keys)")
    ap.add_argument("--partitions", type=int, default=500)
    ap.add_argument("--metadata-bytes", type=int, default=256)
    ap.add_argument("--load-stuck", type=int, default=5, help="the ownership check's load_stuck seconds")
    ap.add_argument("--cold", action="store_true",
                    help="judge the loads with the page cache dropped while the broker is down (root only): read "
                         "from disk, as a partition larger than memory is; the warm loads are printed too")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    started = harness.airflow_db_up(H)
    results = []
    try:
        for version in args.generations.split(","):
            results.append(one_generation(version.strip(), args))
            print(results[-1], flush=True)
    finally:
        if started:
            print(harness.airflow_db_down(H))
    print("\n".join(results))
    return 0 if all(r.endswith(" met") and "NOT met" not in r for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())

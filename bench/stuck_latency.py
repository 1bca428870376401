"""Benchmark: how soon the stuck verdicts appear after a fault, with live consumers on Kafka 0.9.

    FLEET_TEST_PORT_OFFSET=3000 .venv/bin/python bench/stuck_latency.py [--interval 10] [--fault-after 100]
        [--after-fault 110] [--window 15m] [--keep]

Starts the benchmark's own 0.9 lab (the `bench` slot of the tests' port plan, like
bench/collect_offsets.py), and runs one group per scenario, each on its own topic (partition 0),
with a producer writing 20 records/s to every topic but `rare` (one record every 40 s):

  healthy          commits every 2 s
  stalled          commits every 2 s; at the fault it meets a record it cannot process and retries
                   it forever (alive, never commits again)
  stopped          commits every 2 s; at the fault it commits and closes
  rewound          processes 25 records/s, commits every 2 s; at the fault it seeks 300 records back
                   and commits from there (it takes a minute to pass its old position)
  slow             processes 10 records/s of the 20 produced, commits every 2 s
  rare             commits only when it receives a record (one every 40 s)
  slow-committer   commits every 30 s under steady traffic

A collection (the real one: `fleet_airflow.clusters.collect`, __consumer_offsets commit times
included) runs every `--interval` seconds. Afterwards the stuck job's transform
(`evaluate`, local Spark) is replayed with `as_of` at every snapshot time over the `--window`
(15 minutes by default: early detection must not wait for it), and the pure rules are run on the
same rows as a cross-check. Prints, per scenario, the first time each verdict appears relative to
the fault, every false positive (a STALLED, STOPPED, FROZEN, REWOUND or OUT_OF_RANGE verdict for a
scenario that has none), and the targets: STALLED / STOPPED at most 20 s after the fault, zero
false positives.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "spark_jobs"), str(REPO / "include"), str(REPO / "plugins"), str(REPO / "bench"),
                str(REPO)]
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

from fleetlab.paths import load_airflow_env  # noqa: E402  (the lab's deployment: airflow.env)

load_airflow_env()

from confluent_kafka import TopicPartition  # noqa: E402

from collect_offsets import bench_lab  # noqa: E402
from fleetkit.core.datasets import DataRoot, read_dataset  # noqa: E402
from fleetkit.core.durations import parse_duration  # noqa: E402
from fleetkit.core.fleet import parse_fleet  # noqa: E402
from fleetkit.stuck import rules  # noqa: E402
from fleetlab.traffic import ConsumerThread, producer, wait_topic  # noqa: E402

SCENARIOS = ("healthy", "stalled", "stopped", "rewound", "slow", "rare", "slow-committer")
EXPECTED = {"stalled": "STALLED", "stopped": "STOPPED", "rewound": "REWOUND"}
ALARMS = ("STALLED", "STOPPED", "FROZEN", "REWOUND", "OUT_OF_RANGE")
TARGET_SECONDS = 20.0
#: this run's topics and groups (the lab may hold those of earlier runs, stopped long ago)
PREFIX = f"latency-{time.strftime('%H%M%S')}-"
RATE = 20.0          # records/s to every topic but `rare`
RARE_EVERY = 40.0    # seconds between records of `rare`


class Scenario:
    """One group on one topic and what happens to it at the fault."""

    def __init__(self, name: str, bootstrap: str, version: str, fault: threading.Event):
        self.name, self.topic, self.group = name, PREFIX + name, PREFIX + name
        self.fault, self.fault_at, self.rewound = fault, None, False
        commit_every = {"rare": 0.0, "slow-committer": 30.0}.get(name, 2.0)
        self.thread = ConsumerThread(bootstrap, self.group, [self.topic], handle=self.handle,
                                     commit_every=commit_every, client_id=f"{self.group}-1",
                                     kafka_version=version)

    def handle(self, msg) -> bool:
        if self.name == "slow":
            time.sleep(1.0 / (RATE / 2))
        elif self.name == "rewound":  # a little faster than production: a rewind stays visible for a while
            time.sleep(1.0 / (RATE * 1.25))
        if not self.fault.is_set():
            return True
        if self.name == "stalled":
            return False  # the poison record: retried forever, never committed
        if self.name == "rewound" and not self.rewound:
            self.rewound = True
            # processed; the next records come from 300 back, and the next commit goes backwards
            self.thread.consumer.seek(TopicPartition(self.topic, msg.partition(), max(0, msg.offset() - 300)))
        return True


class Traffic:
    """The scenarios' consumers and the producer (RATE records/s to every topic but `rare`, one
    record every RARE_EVERY s to `rare`): start(), fault() at the fault, stop() at the end."""

    def __init__(self, bootstrap: str, version: str):
        self.fault_event, self.prod_stop = threading.Event(), threading.Event()
        self.scenarios = [Scenario(n, bootstrap, version, self.fault_event) for n in SCENARIOS]
        for s in self.scenarios:
            wait_topic(bootstrap, s.topic, kafka_version=version)
        self.prod = producer(bootstrap, version)
        self.producer_thread = threading.Thread(target=self._produce, daemon=True)

    def _produce(self) -> None:
        n, last_rare = 0, 0.0
        while not self.prod_stop.is_set():
            for s in self.scenarios:
                if s.name != "rare":
                    self.prod.produce(s.topic, value=f"{n}".encode(), partition=0)
            if time.monotonic() - last_rare >= RARE_EVERY:
                self.prod.produce(PREFIX + "rare", value=f"{n}".encode(), partition=0)
                last_rare = time.monotonic()
            n += 1
            self.prod.poll(0)
            self.prod_stop.wait(1.0 / RATE)
        self.prod.flush(10)

    def start(self) -> None:
        self.producer_thread.start()
        for s in self.scenarios:
            s.thread.start()

    def fault(self) -> float:
        """The fault: stalled meets a poison record, stopped commits and closes, rewound seeks back.
        Returns its time (epoch seconds)."""
        self.fault_event.set()
        at = time.time()
        stopped = next(s for s in self.scenarios if s.name == "stopped")
        threading.Thread(target=stopped.thread.stop, daemon=True).start()
        return at

    def stop(self) -> None:
        self.prod_stop.set()
        for s in self.scenarios:
            s.thread.stop()
        if self.producer_thread.is_alive():
            self.producer_thread.join(15)


def run_traffic(args, lab, version: str, data: str) -> tuple[dict[str, float], list[dt.datetime]]:
    """Run the scenarios, collect every interval; returns (fault time per scenario, snapshot times)."""
    from fleet_airflow import clusters

    fleet = parse_fleet(__import__("yaml").safe_dump(lab.spec.fleet_document()), path="bench")
    cluster = fleet.cluster(lab.spec.name)
    traffic = Traffic(lab.spec.bootstrap, version)
    traffic.start()
    start = time.monotonic()
    snapshots: list[dt.datetime] = []
    fault_at: dict[str, float] = {}
    total = args.fault_after + args.after_fault
    try:
        tick = 0
        while True:
            due = start + tick * args.interval
            now = time.monotonic()
            if now < due:
                time.sleep(due - now)
            elapsed = time.monotonic() - start
            if elapsed >= args.fault_after and not traffic.fault_event.is_set():
                at = traffic.fault()
                for s in traffic.scenarios:
                    fault_at[s.name] = at
                print(f"t={elapsed:5.1f}s  FAULT: stalled meets a poison record, stopped closes, rewound seeks "
                      "300 back", flush=True)
            if elapsed > total:
                break
            t0 = time.monotonic()
            res = clusters.collect(cluster, data)
            snapshots.append(res.observed_at)
            mine = [r for r in res.rows["offsets_snapshots"] if r["group"].startswith(PREFIX) and r["partition"] == 0]
            timed = sum(1 for r in mine if r.get("committed_at") is not None)
            print(f"t={elapsed:5.1f}s  snapshot {len(snapshots):2d}: {len(mine)} rows, commit times on {timed}, "
                  f"{time.monotonic() - t0:.1f}s" + (f", problems {res.problems[:2]}" if res.problems else ""),
                  flush=True)
            tick += 1
    finally:
        traffic.stop()
    return fault_at, snapshots


def replay(data: str, snapshots: list[dt.datetime], window: dt.timedelta) -> dict:
    """{(scenario, as_of): (status, since, confidence)} from the Spark job's transform, plus the pure
    rules' statuses for the cross-check."""
    from pyspark.sql import functions as F

    from jobs_common import SNAPSHOT_SCHEMA, read_rows, session
    from stuck import evaluate

    spark = session("bench-stuck-latency", "local[2]")
    df = read_rows(spark, str(Path(data) / "offsets_snapshots"), SNAPSHOT_SCHEMA, ("observed_at", "committed_at"))
    df = df.filter(F.col("group").startswith(PREFIX) & (F.col("partition") == 0)).cache()
    spark_out, pure_out = {}, {}
    table = read_dataset(DataRoot(data), "offsets_snapshots").to_pylist()
    by_group = defaultdict(list)
    for r in table:
        if r["group"].startswith(PREFIX) and r["partition"] == 0:
            for k in ("observed_at", "committed_at"):
                if r.get(k) is not None and r[k].tzinfo is None:
                    r[k] = r[k].replace(tzinfo=dt.timezone.utc)
            by_group[r["group"]].append(r)
    for as_of in snapshots:
        findings, _, _ = evaluate(df, window, as_of)
        for row in findings.collect():
            name = row["group"].removeprefix(PREFIX)
            since = row["stalled_since"] or row["stopped_since"]
            spark_out[(name, as_of)] = (row["status"], since, row["confidence"])
        for g, rows in by_group.items():
            f = rules.features(rows, as_of, window)
            pure_out[(g.removeprefix(PREFIX), as_of)] = rules.judge(f, window.total_seconds()).status
        findings.unpersist()
    spark.stop()
    return {"spark": spark_out, "pure": pure_out}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--interval", type=float, default=10.0, help="seconds between snapshots")
    ap.add_argument("--fault-after", type=float, default=100.0, help="seconds of normal traffic before the fault")
    ap.add_argument("--after-fault", type=float, default=110.0, help="seconds observed after the fault")
    ap.add_argument("--window", default="15m")
    ap.add_argument("--keep", action="store_true", help="leave the benchmark's lab running")
    ap.add_argument("--data", help="keep the collected datasets in this folder (default: a temporary one)")
    args = ap.parse_args()
    window = parse_duration(args.window)

    lab, version = bench_lab("lab")
    started = not lab.running()
    if started:
        print(f"starting the benchmark lab (Kafka {version}) ...", flush=True)
        lab.up()
    os.environ.update(lab.spec.connection_env())
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data = args.data or tmp
            fault_at, snapshots = run_traffic(args, lab, version, data)
            t = time.monotonic()
            out = replay(data, snapshots, window)
            print(f"replayed the job at {len(snapshots)} snapshot times in {time.monotonic() - t:.1f}s "
                  f"(window {args.window})", flush=True)
    finally:
        if started and not args.keep:
            for line in lab.down():
                print(line)

    spark_out, pure_out = out["spark"], out["pure"]
    mismatches = [(k, v, pure_out.get(k)) for k, v in spark_out.items() if pure_out.get(k) != v[0]]
    fault = min(fault_at.values())
    print()
    print(f"{'scenario':16} {'first verdicts after the fault (s)':60} false positives")
    ok = True
    for name in SCENARIOS:
        seen: dict[str, float] = {}
        false: list[str] = []
        for as_of in snapshots:
            got = spark_out.get((name, as_of))
            if got is None:
                continue
            status, since, confidence = got
            rel = as_of.timestamp() - fault
            seen.setdefault(status, rel)
            if status in ALARMS and (status != EXPECTED.get(name) or rel < 0):
                false.append(f"{status}@{rel:+.0f}s")
        order = sorted(seen.items(), key=lambda kv: kv[1])
        text = ", ".join(f"{s} {r:+.0f}" for s, r in order)
        print(f"{name:16} {text:60} {', '.join(false) or 'none'}")
        ok &= not false
        want = EXPECTED.get(name)
        if want:
            first = next((as_of for as_of in snapshots if spark_out.get((name, as_of), ("",))[0] == want
                          and as_of.timestamp() >= fault), None)
            if first is None:
                print(f"  {want}: never reported")
                ok = False
                continue
            status, since, confidence = spark_out[(name, first)]
            delay = first.timestamp() - fault
            since_txt = f", since {since:%H:%M:%S} ({since.replace(tzinfo=dt.timezone.utc).timestamp() - fault:+.1f}s " \
                        "from the fault)" if since else ""
            print(f"  {want} after {delay:.1f}s, confidence {confidence}{since_txt}")
            if want in ("STALLED", "STOPPED") and delay > TARGET_SECONDS:
                ok = False
    print(f"\nSpark and the pure rules disagree on {len(mismatches)} of {len(spark_out)} verdicts"
          + (f": {mismatches[:5]}" if mismatches else ""))
    print(f"RESULT interval={args.interval:.0f}s window={args.window} target: STALLED/STOPPED <= {TARGET_SECONDS:.0f}s "
          f"after the fault, zero false positives: {'MET' if ok and not mismatches else 'MISSED'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

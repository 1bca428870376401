"""Benchmark: one full collection of 1,000 consumer groups (1 topic x 3 partitions each) on the lab.

    .venv/bin/python bench/collect_offsets.py [--groups 1000] [--repeat 3]

Starts the demo lab if it is not running (and stops it afterwards), creates the topics and the
groups' commits once (idempotent names bench-NNNN), then times complete collections (list,
describe, offset fetch, log offsets, ZooKeeper partition state, Parquet write) and prints
groups/s and the peak memory of this process. Target: <= 30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include"), str(REPO / "plugins")]

from fleet_airflow.settings import load_airflow_env  # noqa: E402

load_airflow_env()

from confluent_kafka import TopicPartition  # noqa: E402

from fleetkit.core.fleet import parse_fleet  # noqa: E402
from fleetlab.lab import Lab, LabSpec  # noqa: E402
from fleetlab.traffic import consumer, producer  # noqa: E402


def prepare(lab: Lab, groups: int) -> list[str]:
    names = [f"bench-{i:04d}" for i in range(groups)]
    prod = producer(lab.spec.bootstrap)
    t = time.monotonic()
    # 0.9 has no CreateTopics: a metadata request for an unknown topic auto-creates it
    for chunk in range(0, groups, 100):
        for name in names[chunk:chunk + 100]:
            for p in range(3):
                prod.produce(name, value=b"bench", partition=p)
        left = prod.flush(120)
        if left:
            raise SystemExit(f"{left} records not acknowledged while creating topics")
    print(f"prepare: {groups} topics x 3 partitions ready in {time.monotonic() - t:.1f}s", flush=True)

    def commit(name: str) -> None:
        c = consumer(lab.spec.bootstrap, name)
        try:
            c.commit(offsets=[TopicPartition(name, p, 1) for p in range(3)], asynchronous=False)
        finally:
            c.close()

    t = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(commit, names))
    print(f"prepare: {groups} groups committed in {time.monotonic() - t:.1f}s", flush=True)
    return names


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    lab = Lab(LabSpec())
    started = not lab.running()
    if started:
        print("starting the lab ...", flush=True)
        lab.up()
    os.environ.update(lab.spec.connection_env())
    try:
        names = prepare(lab, args.groups)
        from fleet_airflow import clusters

        fleet = parse_fleet(__import__("yaml").safe_dump(lab.spec.fleet_document()), path="bench")
        cluster = dataclasses.replace(fleet.cluster(lab.spec.name), groups=tuple(names))
        times = []
        with tempfile.TemporaryDirectory() as data:
            for i in range(args.repeat):
                t = time.monotonic()
                res = clusters.collect(cluster, data)
                dt = time.monotonic() - t
                times.append(dt)
                rows = len(res.rows["offsets_snapshots"])
                print(f"run {i + 1}: {len(res.groups)} groups, {rows} snapshot rows, {dt:.2f}s, "
                      f"{len(res.groups) / dt:.0f} groups/s, problems {len(res.problems)}", flush=True)
                assert rows >= 3 * args.groups, "every bench group must yield its 3 partitions"
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        best, worst = min(times), max(times)
        print(f"RESULT groups={args.groups} best={best:.2f}s worst={worst:.2f}s "
              f"groups_per_s={args.groups / best:.0f} peak_rss_mb={peak_mb:.0f} "
              f"target<=30s {'MET' if worst <= 30 else 'MISSED'}")
    finally:
        if started:
            lab.down()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

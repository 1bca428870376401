"""Benchmark: one full collection of 1,000 consumer groups (1 topic x 3 partitions each) on a lab cluster.

    .venv/bin/python bench/collect_offsets.py --cluster lab [--groups 1000] [--repeat 3] [--keep]
    .venv/bin/python bench/collect_offsets.py --cluster lab43 --standalone 300 --kip848 200   # a mix
    .venv/bin/python bench/collect_offsets.py --bootstrap HOST:PORT --kafka-version 4.3.1   # a running cluster

Starts its own lab for the cluster's Kafka generation (a single-purpose lab in the test port plan,
so it never touches the demo or the test labs; FLEET_TEST_PORT_OFFSET shifts it) unless it is
already running, creates the topics and the groups' commits once (idempotent names bench-NNNN),
then times complete collections (list, describe, offset fetch, log offsets, coordinators,
partition state from ZooKeeper or metadata, Parquet write). Prints the time of each step of the
last run, groups/s and the peak memory of this process. Python's imports (Airflow's hooks, pandas,
pyarrow) are done before the clock starts: they cost once per process, not per collection. Target: <= 10 s per collection on 2 cores.

By default every group commits without joining and the fleet file names them all. With --standalone
and/or --kip848 the groups are a mix the collector must find by itself (the fleet file names none):
N commit-only groups (assign + commit), M KIP-848 consumer groups (group.protocol=consumer, Kafka 4
only) whose one member each stays alive during the runs, and the rest classic groups whose one
member joined, committed and left before the first collection.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import resource
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include"), str(REPO / "plugins"), str(REPO)]

from fleetlab.paths import load_airflow_env  # noqa: E402  (the lab's deployment: airflow.env)

load_airflow_env()

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402

from fleetkit.clients.kafka import KafkaCluster, client_config  # noqa: E402
from fleetkit.clients.zookeeper import ZooKeeperCluster  # noqa: E402
from fleetkit.core.fleet import parse_fleet  # noqa: E402
from fleetlab import ports  # noqa: E402
from fleetlab.lab import Lab, LabSpec  # noqa: E402
from fleetlab.traffic import without_leaders  # noqa: E402

TARGET_SECONDS = 10.0


def bench_lab(cluster: str) -> tuple[Lab, str]:
    """(the benchmark's own lab for `cluster`'s Kafka generation, its Kafka version): the
    single-purpose `bench` slot of the tests' port plan, one generation at a time, in
    .lab-bench-collect/<cluster>."""
    if cluster not in ports.CLUSTERS:
        raise SystemExit(f"--cluster {cluster!r}: not a cluster of the lab fleet ({', '.join(ports.CLUSTERS)})")
    version = ports.CLUSTERS[cluster][0]
    folder = REPO / ".lab-bench-collect" / cluster
    spec = LabSpec.load(folder) if (folder / "lab.json").exists() else LabSpec(lab_dir=str(folder))
    spec.lab_dir, spec.name, spec.kafka_version = str(folder), f"bench-{cluster}", version
    for key, value in ports.tests().cluster("bench").items():
        setattr(spec, key, value)
    for other in ports.CLUSTERS:
        if other != cluster:
            peer = REPO / ".lab-bench-collect" / other
            if (peer / "lab.json").exists() and Lab(LabSpec.load(peer)).running():
                raise SystemExit(f"the benchmark lab of {other} is running on the same ports: stop it first "
                                 f"(fleetlab down --lab-dir {peer})")
    return Lab(spec), version


def prepare(bootstrap: str, version: str, groups: int) -> list[str]:
    """Create the topics bench-NNNN (3 partitions, one record each) and commit offset 1 for
    groups of the same names without joining."""
    names = create_topics(bootstrap, version, groups)

    def commit(name: str) -> None:
        c = Consumer(client_config({"bootstrap.servers": bootstrap, "group.id": name,
                                    "enable.auto.commit": False}, version))
        try:
            c.commit(offsets=[TopicPartition(name, p, 1) for p in range(3)], asynchronous=False)
        finally:
            c.close()

    t = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(commit, names))
    print(f"prepare: {groups} groups committed in {time.monotonic() - t:.1f}s", flush=True)
    return names


def _join_and_commit(bootstrap: str, version: str, group: str, topic: str, protocol: str) -> Consumer:
    """A member of `group` (classic or KIP-848 consumer protocol) subscribed to `topic`; returns once
    it holds all 3 partitions and committed offset 1 on each."""
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "client.id": f"{group}-member"}
    if protocol == "consumer":  # kept alive unpolled through the runs: no poll-interval eviction
        conf.update({"group.protocol": "consumer", "max.poll.interval.ms": 3_600_000})
    else:
        conf["session.timeout.ms"] = 10000
    for attempt in range(3):  # a loaded lab now and then leaves a join unanswered: a new member tries again
        c = Consumer(client_config(conf, version))
        c.subscribe([topic])
        deadline = time.monotonic() + 60
        while len(c.assignment()) < 3 and time.monotonic() < deadline:
            c.poll(0.2)
        if len(c.assignment()) == 3:
            break
        c.close()
        print(f"prepare: group {group}: no assignment of {topic} after 60s (attempt {attempt + 1} of 3)", flush=True)
    else:
        raise SystemExit(f"group {group}: no assignment of {topic} in 3 attempts")
    for attempt in range(10):  # a loaded broker times a commit out now and then: poll and try again
        try:
            c.commit(offsets=[TopicPartition(topic, p, 1) for p in range(3)], asynchronous=False)
            return c
        except KafkaException as e:
            if attempt == 9:
                c.close()
                raise SystemExit(f"group {group}: commit failed 10 times ({e})")
            c.poll(0.5)
    return c


def prepare_mix(bootstrap: str, version: str, groups: int, standalone: int, kip848: int
                ) -> tuple[list[str], list[Consumer]]:
    """(group names, the live KIP-848 members): `standalone` commit-only groups, `kip848` KIP-848
    groups with a live member each, the rest classic groups whose member joined, committed and left."""
    if standalone + kip848 > groups:
        raise SystemExit(f"--standalone {standalone} + --kip848 {kip848} exceed --groups {groups}")
    if kip848 and version.split(".")[0] in ("0", "1", "2", "3"):
        raise SystemExit(f"--kip848 needs Kafka 4 (KIP-848 consumer groups); this cluster runs {version}")
    topics = create_topics(bootstrap, version, groups)
    kinds = ["standalone"] * standalone + ["kip848"] * kip848 + ["departed"] * (groups - standalone - kip848)
    names = [f"bench-{k}-{i:04d}" for i, k in enumerate(kinds)]
    live: list[Consumer] = []

    def one(i: int) -> None:
        kind, group, topic = kinds[i], names[i], topics[i]
        if kind == "standalone":
            c = Consumer(client_config({"bootstrap.servers": bootstrap, "group.id": group,
                                        "enable.auto.commit": False}, version))
            try:
                c.commit(offsets=[TopicPartition(topic, p, 1) for p in range(3)], asynchronous=False)
            finally:
                c.close()
        elif kind == "kip848":
            live.append(_join_and_commit(bootstrap, version, group, topic, "consumer"))
        else:
            _join_and_commit(bootstrap, version, group, topic, "classic").close()

    t = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, range(groups)))
    print(f"prepare: {standalone} commit-only, {kip848} KIP-848 (live), {groups - standalone - kip848} classic "
          f"departed groups in {time.monotonic() - t:.1f}s", flush=True)
    return names, live


def create_topics(bootstrap: str, version: str, groups: int) -> list[str]:
    """Topics bench-NNNN with 3 partitions and one record in each (idempotent)."""
    names = [f"bench-{i:04d}" for i in range(groups)]
    prod = Producer(client_config({"bootstrap.servers": bootstrap, "linger.ms": 5}, version))
    t = time.monotonic()
    if version.split(".")[0] != "0":  # CreateTopics (0.10.1+); 0.9 auto-creates on the first metadata request
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(client_config({"bootstrap.servers": bootstrap}, version))
        existing = set(admin.list_topics(timeout=30).topics)
        todo = [NewTopic(n, 3, 1) for n in names if n not in existing]
        for chunk in range(0, len(todo), 50):
            for name, fut in admin.create_topics(todo[chunk:chunk + 50], request_timeout=120).items():
                try:
                    fut.result(timeout=180)
                except Exception as e:  # noqa: BLE001 - a slow controller times out; checked below
                    print(f"prepare: creating {name}: {e}", flush=True)
        deadline = time.monotonic() + 300
        while True:  # every topic with 3 led partitions (a timed-out request may still have created it)
            md = admin.list_topics(timeout=60).topics
            missing = without_leaders(md, names)
            if not missing:
                break
            if time.monotonic() > deadline:
                raise SystemExit(f"{len(missing)} bench topics have no leaders after 300s, e.g. {missing[:3]}")
            for chunk in range(0, len(missing), 50):
                admin.create_topics([NewTopic(n, 3, 1) for n in missing[chunk:chunk + 50] if n not in md],
                                    request_timeout=120)
            time.sleep(2)
    for chunk in range(0, groups, 100):
        for name in names[chunk:chunk + 100]:
            for p in range(3):
                prod.produce(name, value=b"bench", partition=p)
        left = prod.flush(120)
        if left:
            raise SystemExit(f"{left} records not acknowledged while creating topics")
    print(f"prepare: {groups} topics x 3 partitions ready in {time.monotonic() - t:.1f}s", flush=True)
    return names


STEPS = {KafkaCluster: ("list_groups_typed", "describe_groups", "committed_offsets", "log_offsets", "coordinators",
                        "leader_epochs", "metadata"),
         ZooKeeperCluster: ("partition_states",)}


def timed_steps() -> dict[str, float]:
    """Wrap the readers' steps to add their wall time to the returned dict."""
    spent: dict[str, float] = {}
    for cls, names in STEPS.items():
        for name in names:
            real = getattr(cls, name)

            @functools.wraps(real)
            def wrapper(*a, _real=real, _name=name, **kw):
                t = time.monotonic()
                try:
                    return _real(*a, **kw)
                finally:
                    spent[_name] = spent.get(_name, 0.0) + time.monotonic() - t

            setattr(cls, name, wrapper)
    return spent


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cluster", default="lab", help="which generation of the lab fleet: lab, lab39 or lab43")
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the benchmark's lab running")
    ap.add_argument("--bootstrap", help="benchmark this running cluster instead (no ZooKeeper: metadata)")
    ap.add_argument("--kafka-version", help="with --bootstrap: the cluster's Kafka version")
    ap.add_argument("--standalone", type=int, default=None,
                    help="a mix: this many commit-only groups (the fleet file then names no group)")
    ap.add_argument("--kip848", type=int, default=None,
                    help="a mix: this many KIP-848 consumer groups with a live member (Kafka 4)")
    args = ap.parse_args()
    mix = args.standalone is not None or args.kip848 is not None

    if args.bootstrap:
        if not args.kafka_version:
            raise SystemExit("--bootstrap needs --kafka-version")
        lab, version, started = None, args.kafka_version, False
        bootstrap, name = args.bootstrap, "bench-external"
        os.environ["AIRFLOW_CONN_BENCH_EXTERNAL_KAFKA"] = json.dumps(
            {"conn_type": "kafka", "extra": {"bootstrap.servers": bootstrap}})
        doc = {"version": 1, "clusters": [{"name": name, "kafka_version": version,
                                           "kafka_conn_id": "bench_external_kafka"}]}
    else:
        lab, version = bench_lab(args.cluster)
        started = not lab.running()
        if started:
            print(f"starting the benchmark lab for {args.cluster} (Kafka {version}) ...", flush=True)
            lab.up()
        os.environ.update(lab.spec.connection_env())
        bootstrap, name, doc = lab.spec.bootstrap, lab.spec.name, lab.spec.fleet_document()
    live: list = []
    try:
        if mix:
            names, live = prepare_mix(bootstrap, version, args.groups, args.standalone or 0, args.kip848 or 0)
        else:
            names = prepare(bootstrap, version, args.groups)
        from fleet_airflow import clusters
        # Python's imports (Airflow's hooks, pandas, pyarrow) happen once per process, not per collection
        import fleet_airflow.hooks.kafka_cluster  # noqa: F401
        import fleet_airflow.hooks.zookeeper  # noqa: F401
        import pandas  # noqa: F401
        import pyarrow.parquet  # noqa: F401

        fleet = parse_fleet(__import__("yaml").safe_dump(doc), path="bench")
        # a mix must be found by the collector itself: the fleet file then names no group
        cluster = dataclasses.replace(fleet.cluster(name), groups=() if mix else tuple(names))
        spent = timed_steps()
        times = []
        with tempfile.TemporaryDirectory() as data:
            for i in range(args.repeat):
                spent.clear()
                t = time.monotonic()
                res = clusters.collect(cluster, data)
                dt = time.monotonic() - t
                times.append(dt)
                rows = len(res.rows["offsets_snapshots"])
                print(f"run {i + 1}: {len(res.groups)} groups, {rows} snapshot rows, {dt:.2f}s, "
                      f"{len(res.groups) / dt:.0f} groups/s, problems {len(res.problems)}", flush=True)
                print("  steps: " + ", ".join(f"{k} {v:.2f}s" for k, v in spent.items()), flush=True)
                for p in res.problems[:5]:
                    print(f"  problem: {p}")
                assert rows >= 3 * args.groups, "every bench group must yield its 3 partitions"
                mine = [r for r in res.rows["offsets_snapshots"] if r["group"] in set(names)]
                assert len(mine) == 3 * len(names), f"{len(mine)} rows of the {len(names)} bench groups"
                assert all(r["committed_offset"] == 1 and r["log_end_offset"] >= 1 for r in mine), \
                    "every bench partition has committed offset 1"
                if mix:
                    kinds = {}
                    for r in mine:
                        kinds.setdefault(r["group"].split("-")[1], set()).add((r["group_type"], r["group_state"]))
                    print("  (type, state) by kind: " + "; ".join(f"{k} {sorted(map(str, v))}"
                                                               for k, v in sorted(kinds.items())), flush=True)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        best, worst = min(times), max(times)
        mixed = f" standalone={args.standalone or 0} kip848={args.kip848 or 0}" if mix else ""
        print(f"RESULT cluster={args.bootstrap or args.cluster} kafka={version} groups={args.groups}{mixed} best={best:.2f}s "
              f"worst={worst:.2f}s groups_per_s={args.groups / best:.0f} peak_rss_mb={peak_mb:.0f} "
              f"target<={TARGET_SECONDS:.0f}s {'MET' if worst <= TARGET_SECONDS else 'MISSED'}")
    finally:
        with ThreadPoolExecutor(16) as pool:  # the KIP-848 members leave (in parallel: each waits for its leave)
            list(pool.map(lambda c: c.close(), live))
        if started and not args.keep:
            for line in lab.down():
                print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

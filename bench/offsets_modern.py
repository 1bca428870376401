"""Benchmark: the whole __consumer_offsets of a Kafka 4.3.1 (KRaft) broker after N offset commits,
read + decoded + written as the offsets_topic_records dataset, end to end from the broker; and the
same log through Kafka's own `kafka-dump-log --offsets-decoder` (org.apache.kafka.tools.DumpLogSegments
from the pinned 4.3.1 jars) for a side-by-side ratio.

    FLEET_TEST_PORT_OFFSET=N .venv/bin/python bench/offsets_modern.py [--commits 1000000] [--keep]

Runs its own one-node KRaft lab in the test port plan's "bench" slot (.lab-bench-modern), fills it
with bulk OffsetCommits (500 partitions per request, 50 groups, pipelined), then times:

* the toolkit: fleetkit.collection.offsets_topic.collect_offsets_topic (Fetch on the wire, record
  batches v2, decode, Parquet) into a fresh data root;
* Kafka: DumpLogSegments --offsets-decoder --files <every .log of __consumer_offsets-*> > /dev/null
  (it reads the segment files directly: no broker round trips).

Prints records/s of each and the ratio. The lab is stopped and removed afterwards (--keep keeps it).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "include")]

from confluent_kafka import TopicPartition  # noqa: E402

from fleetkit.clients.kafka import KafkaCluster, client_config  # noqa: E402
from fleetkit.collection.offsets_topic import collect_offsets_topic  # noqa: E402
from fleetkit.core.datasets import DataRoot  # noqa: E402
from fleetkit.core.fleet import load_fleet  # noqa: E402
from fleetkit.core.kafka_names import OFFSETS_TOPIC  # noqa: E402
from fleetlab import dists, ports, traffic  # noqa: E402
from fleetlab.lab import Lab, LabSpec  # noqa: E402

VERSION = "4.3.1"
PARTITIONS = 500
GROUPS = 50


def fill(bootstrap: str, commits: int) -> float:
    """Bulk commits, asynchronous (librdkafka pipelines them), PARTITIONS per request."""
    topic = "bench-commits"
    t0 = time.monotonic()
    done_requests = [0]
    errors: list = []

    def on_commit(err, _parts):
        done_requests[0] += 1
        if err is not None:
            errors.append(err)

    consumers = [traffic.consumer(bootstrap, f"bench-group-{g}", VERSION, on_commit=on_commit) for g in range(GROUPS)]
    done, i = 0, 0
    while done < commits:
        c = consumers[i % GROUPS]
        n = min(PARTITIONS, commits - done)
        c.commit(offsets=[TopicPartition(topic, p, i + 1) for p in range(n)], asynchronous=True)
        done += n
        i += 1
        if i % GROUPS == 0:
            while i - done_requests[0] > 4 * GROUPS:  # at most 4 requests in flight per consumer
                for c2 in consumers:
                    c2.poll(0)
    while done_requests[0] < i:
        for c in consumers:
            c.poll(0.01)
    for c in consumers:
        c.close()
    if errors:
        raise SystemExit(f"{len(errors)} commit(s) failed, e.g. {errors[0]}")
    return time.monotonic() - t0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--commits", type=int, default=1_000_000)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    plan = ports.tests()
    spec = LabSpec(lab_dir=str(REPO / ".lab-bench-modern"), name="benchmodern", **plan.cluster("bench"), brokers=1,
                   kafka_version=VERSION)
    lab = Lab(spec)
    lab.down()
    shutil.rmtree(spec.lab_dir, ignore_errors=True)
    lab.up()
    try:
        lab.create_topic("bench-commits", PARTITIONS)
        traffic.wait_topic(spec.bootstrap, "bench-commits", PARTITIONS, kafka_version=VERSION)
        fill_s = fill(spec.bootstrap, args.commits)
        print(f"filled: {args.commits:,} offset commits in {fill_s:.1f}s", flush=True)
        tmp = Path(tempfile.mkdtemp(prefix="bench-offsets-"))
        fleet_file = tmp / "fleet.yaml"
        import yaml

        entry = spec.fleet_cluster()
        entry["approvers"] = ["a", "b"]
        fleet_file.write_text(yaml.safe_dump({"version": 1, "clusters": [entry]}))
        cluster = load_fleet(fleet_file).cluster(spec.name)
        kafka = KafkaCluster(spec.name, client_config({"bootstrap.servers": spec.bootstrap}, VERSION), timeout=60)
        t0 = time.monotonic()
        res = collect_offsets_topic(cluster, kafka, DataRoot(tmp / "data"), files_for=lambda b: None)
        ours = time.monotonic() - t0
        n = res.records_written + res.other_versions
        offs = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in range(50)])
        in_log = sum(e - s for s, e, _ in offs.values())
        if n != in_log:
            raise SystemExit(f"the toolkit read {n:,} records, the log holds {in_log:,}")
        print(f"toolkit: {n:,} records read + decoded + written (Parquet) in {ours:.1f}s = {n / ours:,.0f} records/s "
              f"(reader {res.reader}; {res.summary()}; problems {res.problems[:3]})", flush=True)
        home = dists.ensure_kafka_dist(VERSION) if hasattr(dists, "ensure_kafka_dist") else None
        libs = Path(home or dists.cache_dir() / f"kafka-{VERSION}") / "libs"
        files = sorted(str(f) for f in Path(spec.log_dir(0)).glob(f"{OFFSETS_TOPIC}-*/*.log"))
        cmd = [shutil.which("java") or "java", "-Xmx512m", "-cp", f"{libs}/*", "org.apache.kafka.tools.DumpLogSegments",
               "--offsets-decoder", "--files", ",".join(files)]
        t0 = time.monotonic()
        with open("/dev/null", "wb") as devnull:
            subprocess.run(cmd, stdout=devnull, stderr=subprocess.PIPE, check=True)
        theirs = time.monotonic() - t0
        print(f"kafka-dump-log --offsets-decoder: the same {len(files)} segment file(s) in {theirs:.1f}s = "
              f"{n / theirs:,.0f} records/s", flush=True)
        print(f"RESULT toolkit {n / ours:,.0f} records/s end to end from the broker, kafka-dump-log {n / theirs:,.0f} "
              f"records/s from local files: ratio {theirs / ours:.2f} (toolkit time / dump-log time "
              f"{ours / theirs:.2f})")
        print("command: " + " ".join(cmd[:5]) + " --offsets-decoder --files <every __consumer_offsets .log file>")
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if not args.keep:
            lab.down()
            shutil.rmtree(spec.lab_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Benchmark: a lab broker's __consumer_offsets after N offset commits, read + decoded + written as
the offsets_topic_records dataset, end to end from the broker; and the same log through Kafka's
own `kafka-dump-log --offsets-decoder` (DumpLogSegments from the pinned jars of that version) for
a side-by-side ratio. Target: 400,000 records/s on one partition, on every generation, at most
600 MB.

    FLEET_TEST_PORT_OFFSET=N .venv/bin/python bench/offsets_reader.py [--kafka-version 0.9.0.1|3.9.2|4.3.1]
        [--commits 1000000] [--groups 1] [--keep]

Runs its own one-broker lab of that version in the test port plan's "bench" slot
(.lab-bench-offsets-<version>), fills it with bulk OffsetCommits (500 partitions per request,
`--groups` groups: one group puts every record on one __consumer_offsets partition), then times:

* the toolkit: fleetkit.collection.offsets_topic.collect_offsets_topic (Fetch on the wire: v0
  and message sets on 0.9, record batches after; column-wise decoding; Parquet) into a fresh data
  root, in a child process whose peak RSS is reported;
* Kafka: DumpLogSegments --offsets-decoder --print-data-log --files <every .log of
  __consumer_offsets-*> > /dev/null (it reads the segment files directly: no broker round trips);
* on 0.9 also Kafka's ConsoleConsumer with the offsets formatter (GroupMetadataManager's
  OffsetsMessageFormatter, the old consumer through ZooKeeper, exclude.internal.topics=false), from
  the broker like the toolkit, `--max-messages` the records in the log (so no idle timeout counts).

Prints records/s of each and the ratio. The lab is stopped and removed afterwards (--keep keeps it).
"""

from __future__ import annotations

import argparse
import json
import resource
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
from fleetkit.core.kafka_names import OFFSETS_TOPIC  # noqa: E402
from fleetlab import dists, ports, traffic  # noqa: E402
from fleetlab.lab import Lab, LabSpec  # noqa: E402

VERSIONS = ("0.9.0.1", "3.9.2", "4.3.1")
PARTITIONS = 500

#: the toolkit's side, run in a child process (its peak RSS is the reader's alone)
CHILD = r"""
import json, sys, time
from pathlib import Path
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/include"]
from fleetkit.clients.kafka import KafkaCluster, client_config
from fleetkit.collection.offsets_topic import collect_offsets_topic
from fleetkit.core.datasets import DataRoot
from fleetkit.core.fleet import load_fleet
fleet, name, bootstrap, version, data = sys.argv[2:7]
cluster = load_fleet(fleet).cluster(name)
kafka = KafkaCluster(name, client_config({"bootstrap.servers": bootstrap}, version), timeout=60)
t0 = time.monotonic()
res = collect_offsets_topic(cluster, kafka, DataRoot(data), files_for=lambda b: None)
print(json.dumps({"seconds": time.monotonic() - t0, "records": res.records_written + res.other_versions,
                  "reader": res.reader, "summary": res.summary(), "problems": res.problems[:3]}))
"""


def fill(bootstrap: str, commits: int, groups: int, version: str) -> float:
    """Bulk commits, asynchronous (librdkafka pipelines them), PARTITIONS per request."""
    topic = "bench-commits"
    t0 = time.monotonic()
    done_requests = [0]
    errors: list = []

    def on_commit(err, _parts):
        done_requests[0] += 1
        if err is not None:
            errors.append(err)

    consumers = [traffic.consumer(bootstrap, f"bench-group-{g}", version, on_commit=on_commit) for g in range(groups)]
    done, i = 0, 0
    while done < commits:
        c = consumers[i % groups]
        n = min(PARTITIONS, commits - done)
        c.commit(offsets=[TopicPartition(topic, p, i + 1) for p in range(n)], asynchronous=True)
        done += n
        i += 1
        while i - done_requests[0] > 4 * groups:  # at most 4 requests in flight per consumer
            for c2 in consumers:
                c2.poll(0.001)
    while done_requests[0] < i:
        for c in consumers:
            c.poll(0.01)
    for c in consumers:
        c.close()
    if errors:
        raise SystemExit(f"{len(errors)} commit(s) failed, e.g. {errors[0]}")
    return time.monotonic() - t0


def console_consumer_09(libs: Path, zk_hosts: str, records: int, tmp: Path) -> dict:
    """Kafka 0.9.0.1's ConsoleConsumer printing __consumer_offsets with its offsets formatter, until
    it has printed `records` records: seconds and the lines it printed."""
    props = tmp / "console.properties"
    props.write_text("exclude.internal.topics=false\n")
    cmd = [shutil.which("java") or "java", "-Xmx512m", "-cp", f"{libs}/*", "kafka.tools.ConsoleConsumer",
           "--zookeeper", zk_hosts, "--topic", OFFSETS_TOPIC, "--from-beginning",
           "--formatter", "kafka.coordinator.GroupMetadataManager$OffsetsMessageFormatter",
           "--consumer.config", str(props), "--max-messages", str(records)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False, timeout=3600)
    seconds = time.monotonic() - t0
    lines = proc.stdout.count(b"\n")
    if proc.returncode != 0 or lines == 0:
        raise SystemExit(f"ConsoleConsumer failed (exit {proc.returncode}, {lines} lines):\n"
                         f"{proc.stderr.decode(errors='replace')[-3000:]}")
    return {"seconds": seconds, "lines": lines, "cmd": cmd}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--kafka-version", choices=VERSIONS, default="4.3.1")
    ap.add_argument("--commits", type=int, default=1_000_000)
    ap.add_argument("--groups", type=int, default=1, help="1: every record on one __consumer_offsets partition")
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    version = args.kafka_version
    plan = ports.tests()
    spec = LabSpec(lab_dir=str(REPO / f".lab-bench-offsets-{version}"), name="benchoffsets", **plan.cluster("bench"),
                   brokers=1, kafka_version=version)
    lab = Lab(spec)
    lab.down()
    shutil.rmtree(spec.lab_dir, ignore_errors=True)
    lab.up()
    try:
        lab.create_topic("bench-commits", PARTITIONS)
        traffic.wait_topic(spec.bootstrap, "bench-commits", PARTITIONS, kafka_version=version)
        fill_s = fill(spec.bootstrap, args.commits, args.groups, version)
        kafka = KafkaCluster(spec.name, client_config({"bootstrap.servers": spec.bootstrap}, version), timeout=60)
        offs = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in range(50)])
        in_log = sum(e - s for s, e, _ in offs.values())
        used = sorted(p for (_, p), (s, e, _) in offs.items() if e > s)
        print(f"Kafka {version}: {args.commits:,} offset commits in {fill_s:.1f}s; {in_log:,} records on "
              f"__consumer_offsets partition(s) {used}", flush=True)
        tmp = Path(tempfile.mkdtemp(prefix="bench-offsets-"))
        fleet_file = tmp / "fleet.yaml"
        import yaml

        entry = spec.fleet_cluster()
        entry["approvers"] = ["a", "b"]
        fleet_file.write_text(yaml.safe_dump({"version": 1, "clusters": [entry]}))
        out = subprocess.run([sys.executable, "-c", CHILD, str(REPO), str(fleet_file), spec.name, spec.bootstrap,
                              version, str(tmp / "data")], capture_output=True, text=True, check=False)
        if out.returncode != 0:
            raise SystemExit(f"the toolkit's reader failed:\n{out.stderr[-3000:]}")
        got = json.loads(out.stdout.strip().splitlines()[-1])
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        ours, n = got["seconds"], got["records"]
        if n != in_log:
            raise SystemExit(f"the toolkit read {n:,} records, the log holds {in_log:,}")
        print(f"toolkit: {n:,} records read + decoded + written (Parquet) in {ours:.2f}s = {n / ours:,.0f} records/s, "
              f"peak RSS {peak_mb:,.0f} MB (reader {got['reader']}; {got['summary']}; problems {got['problems']})",
              flush=True)
        libs = dists.ensure(version) / "libs"
        files = sorted(str(f) for f in Path(spec.log_dir(0)).glob(f"{OFFSETS_TOPIC}-*/*.log"))
        tool = "org.apache.kafka.tools.DumpLogSegments" if version.startswith("4.") else "kafka.tools.DumpLogSegments"
        cmd = [shutil.which("java") or "java", "-Xmx512m", "-cp", f"{libs}/*", tool, "--offsets-decoder",
               "--print-data-log", "--files", ",".join(files)]
        t0 = time.monotonic()
        with open("/dev/null", "wb") as devnull:
            subprocess.run(cmd, stdout=devnull, stderr=subprocess.PIPE, check=True)
        theirs = time.monotonic() - t0
        print(f"kafka-dump-log --offsets-decoder: the same {len(files)} segment file(s) in {theirs:.2f}s = "
              f"{n / theirs:,.0f} records/s", flush=True)
        if version.startswith("0.9"):
            console = console_consumer_09(libs, f"{spec.zk_hosts}{spec.chroot}", n, tmp)
            print(f"ConsoleConsumer with the offsets formatter: {console['lines']:,} lines in {console['seconds']:.2f}s "
                  f"= {n / console['seconds']:,.0f} records/s (toolkit time / ConsoleConsumer time "
                  f"{ours / console['seconds']:.2f})", flush=True)
            print("command: " + " ".join(console["cmd"]))
        print(f"RESULT Kafka {version}: toolkit {n / ours:,.0f} records/s end to end from the broker (peak "
              f"{peak_mb:,.0f} MB), kafka-dump-log {n / theirs:,.0f} records/s from local files: toolkit time / "
              f"dump-log time {ours / theirs:.2f}; target 400,000 records/s: {'met' if n / ours >= 400_000 else 'MISSED'}")
        print("command: " + " ".join(cmd[:4]) + f" {tool} --offsets-decoder --print-data-log --files <every "
              "__consumer_offsets .log file>")
        shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if not args.keep:
            lab.down()
            shutil.rmtree(spec.lab_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

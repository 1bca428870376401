"""Benchmark: the __consumer_offsets reader on a SASL_SSL listener beside PLAINTEXT, on the same data.

    FLEET_TEST_PORT_OFFSET=N .venv/bin/python bench/offsets_reader_secured.py [--commits 300000] [--repeat 3] [--keep]

Runs the secured one-node Kafka 4.3.1 lab (fleetlab.lab SECURED_ACLS; the test port plan's
"securelab" slot, so not at the same time as tests/integration/test_secured_cluster.py) in
.lab-bench-secured, fills one __consumer_offsets partition with bulk OffsetCommits of one group
(500 partitions per request, as the `admin` user), then reads that partition with the toolkit's
reader (fleetkit.collection.offsets_topic.read_records, Fetch on the wire, column-wise decoding
into Arrow tables that are dropped) twice per round: as the read-only `fleet` user on the SASL_SSL
listener (SCRAM-SHA-512, TLS), and anonymously on the node's PLAINTEXT inter-broker listener,
which serves the same log. Prints records/s of each (best of --repeat) and the ratio.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "include")]

from fleetkit.clients.kafka import KafkaCluster, client_config  # noqa: E402
from fleetkit.collection.offsets_topic import read_records  # noqa: E402
from fleetkit.core.partitioning import partition_for  # noqa: E402
from fleetlab import ports  # noqa: E402
from fleetlab.lab import Lab, LabSpec  # noqa: E402
from fleetlab.traffic import bulk_commits  # noqa: E402

PARTITIONS = 500
TOPIC, GROUP = "bench-commits", "bench-secured-group"


def fill(spec: LabSpec, commits: int) -> float:
    try:
        return bulk_commits(spec.client_config(), GROUP, TOPIC, commits, PARTITIONS, in_flight=4)
    except RuntimeError as e:
        raise SystemExit(str(e)) from None


def timed_read(kafka: KafkaCluster, partition: int) -> tuple[float, int, str]:
    t0 = time.monotonic()
    res = read_records("securebench", kafka, [partition], {}, table_sink=lambda table: None)
    if res.problems:
        raise SystemExit(f"reader problems: {res.problems[:3]}")
    records = res.records_written + res.other_versions or sum(res.kinds.values())
    return time.monotonic() - t0, records, res.reader


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--commits", type=int, default=300_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--keep", action="store_true", help="leave the lab running and its folder in place")
    args = ap.parse_args()
    spec = LabSpec(lab_dir=str(REPO / ".lab-bench-secured"), name="securebench",
                   **ports.tests().cluster("securelab"), brokers=1, kafka_version="4.3.1", security="sasl_ssl")
    lab = Lab(spec)
    lab.down()
    shutil.rmtree(spec.lab_dir, ignore_errors=True)
    lab.up()
    try:
        lab.create_topic(TOPIC, PARTITIONS)
        admin, deadline = lab.admin(), time.monotonic() + 60
        while time.monotonic() < deadline:  # every partition led before the first commit
            md = admin.list_topics(TOPIC, timeout=10).topics.get(TOPIC)
            if md is not None and md.error is None and len(md.partitions) == PARTITIONS and all(
                    q.leader >= 0 for q in md.partitions.values()):
                break
            time.sleep(0.5)
        time.sleep(2)
        fill_s = fill(spec, args.commits)
        p = partition_for(GROUP)
        print(f"Kafka 4.3.1: {args.commits:,} offset commits in {fill_s:.1f}s, all on __consumer_offsets-{p}")
        secured = KafkaCluster("securebench", client_config({"bootstrap.servers": spec.bootstrap,
                                                             **spec.security_config("fleet")}, "4.3.1"), timeout=60)
        plain = KafkaCluster("securebench", client_config(
            {"bootstrap.servers": f"127.0.0.1:{spec.internal_port(0)}"}, "4.3.1"), timeout=60)
        best: dict[str, tuple[float, int, str]] = {}
        for _ in range(args.repeat):
            for name, kafka in (("SASL_SSL (fleet, SCRAM-SHA-512)", secured), ("PLAINTEXT (inter-broker)", plain)):
                got = timed_read(kafka, p)
                if name not in best or got[0] < best[name][0]:
                    best[name] = got
        for name, (s, n, reader) in best.items():
            print(f"{name:34s} {n:>10,} records in {s:6.2f}s = {n / s:>12,.0f} records/s (reader: {reader})")
        (s1, n1, _), (s2, n2, _) = best.values()
        print(f"SASL_SSL / PLAINTEXT: {(n1 / s1) / (n2 / s2):.2f}")
    finally:
        if not args.keep:
            lab.down()
            shutil.rmtree(spec.lab_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

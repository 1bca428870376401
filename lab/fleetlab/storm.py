"""The lab's Storm topology: storm-kafka's KafkaSpout on a Storm LocalCluster, in its own JVM.

The topology (fleetlab/storm/PoisonTopology.java, compiled with the machine's javac at setup,
`python -m fleetlab.storm`, or on first use, against the jars of fleetlab.dists.ensure_storm,
into the cache beside them) reads one topic of a lab cluster whose protocol
storm-kafka speaks (Kafka 0.9: its SimpleConsumer finds the brokers through the host/port of their
registrations in ZooKeeper, i.e. the loopback PLAINTEXT listener of the lab's 0.9 brokers) and
acks every record except the poison one, which its bolt fails every time: the spout replays it
forever and its committed offset stops at it.

Both Storm's cluster state (storm.zookeeper.root, /storm) and the spout's offsets (SpoutConfig
zkRoot/id: <spout root>/<spout id>/partition_<N>) live in the lab cluster's ZooKeeper, outside
its Kafka chroot, as in production where spouts commit into Storm's ZooKeeper. The LocalCluster
runs no Thrift server, UI or logviewer (nothing listens); its temporary folders are under the
topology's folder. The JVM keeps a PID file; `stop` asks it to kill the topology (a stop file) and
waits for it to exit, then stops it by PID (SIGTERM, then SIGKILL) if it has not.

Java 17: the ZooKeeper 3.4.14 client inside storm-core (shaded) and beside storm-kafka's Curator
names a server it has not resolved by the text of InetSocketAddress.toString() before the last
':' (StaticHostProvider.getHostString), which Java 14 and later render "host/<unresolved>:port":
the client then looks up "127.0.0.1/<unresolved>" and never connects (ZOOKEEPER-3779). The JVM
gets its own hosts file (jdk.net.hosts.file) that maps that text, localhost and this machine's
name to 127.0.0.1; nothing else is resolved in it.
"""

from __future__ import annotations

import hashlib
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fleetkit.core.errors import LabError

from fleetlab import dists, procs
from fleetlab.lab_spec import LabSpec

SOURCE = Path(__file__).with_name("storm") / "PoisonTopology.java"
MAIN = "fleetlab.storm.PoisonTopology"
#: Storm's settings beside the topology's classes (read from the classpath as storm.yaml): a
#: shorter ZooKeeper session than Storm's 20 s default, so a JVM that died loses its ephemeral
#: supervisor registrations sooner
STORM_YAML = "storm.zookeeper.session.timeout: 8000\nstorm.zookeeper.connection.timeout: 8000\n"


@dataclass
class StormTopology:
    """A poison-record topology on a lab cluster (a Kafka 0.9 LabSpec)."""

    spec: LabSpec
    topic: str
    spout_root: str = "/fleetlab-spouts"
    spout_id: str = "fleetlab-spout"
    name: str = "fleetlab-poison"
    poison: str = "poison"

    @property
    def folder(self) -> Path:
        return self.spec.path / "storm"

    @property
    def pid_file(self) -> Path:
        return self.folder / "topology.pid"

    @property
    def log_file(self) -> Path:
        return self.folder / "topology.log"

    @property
    def stop_file(self) -> Path:
        return self.folder / "stop"

    @property
    def properties_file(self) -> Path:
        return self.folder / "topology.properties"

    def running(self) -> bool:
        return procs.owned_pid(self.pid_file, str(self.folder)) is not None

    def start(self, timeout: float = 180) -> int:
        """Start the JVM (unless it runs) and wait until the topology is submitted; its PID."""
        pid = procs.owned_pid(self.pid_file, str(self.folder))
        if pid is not None:
            return pid
        java = shutil.which("java")
        if java is None:
            raise LabError("java is not installed")
        classes = compiled()
        tmp = self.folder / "tmp"
        shutil.rmtree(tmp, ignore_errors=True)  # a previous LocalCluster's nimbus and supervisor folders
        tmp.mkdir(parents=True)
        self.properties_file.write_text("".join(f"{k}={v}\n" for k, v in {
            "zk.host": "127.0.0.1", "zk.port": self.spec.zk_port,
            "kafka.brokers.path": f"{self.spec.chroot.rstrip('/')}/brokers", "topic": self.topic,
            "spout.root": self.spout_root, "spout.id": self.spout_id, "topology.name": self.name,
            "poison": self.poison, "stop.file": self.stop_file}.items()))
        self.stop_file.unlink(missing_ok=True)
        hosts = self.folder / "hosts"
        hosts.write_text(f"127.0.0.1 localhost 127.0.0.1/<unresolved> {socket.gethostname()}\n")
        start_at = self.log_file.stat().st_size if self.log_file.exists() else 0
        pid = procs.start([java, "-Xmx384m", "-XX:+UseSerialGC", "-Djava.awt.headless=true",
                           f"-Djava.io.tmpdir={tmp}", f"-Djdk.net.hosts.file={hosts}", "-cp", f"{classes}:{dists.ensure_storm()}/*", MAIN,
                           str(self.properties_file)], self.pid_file, self.log_file)
        want = f"topology {self.name} submitted".encode()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with open(self.log_file, "rb") as f:
                f.seek(start_at)
                if want in f.read():
                    return pid
            if not procs.pid_alive(pid):
                raise LabError(f"the Storm topology's JVM exited; see {self.log_file}")
            time.sleep(1)
        self.stop()
        raise LabError(f"the Storm topology was not submitted within {timeout:.0f}s; see {self.log_file}")

    def stop(self, timeout: float = 90) -> str:
        """Kill the topology as `storm kill` would (the JVM does it when its stop file appears:
        Nimbus removes the topology's StormBase and assignment), then the JVM exits; SIGTERM, and
        SIGKILL after a timeout, if it has not within `timeout`."""
        pid = procs.owned_pid(self.pid_file, str(self.folder))
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return "not running"
        self.stop_file.write_text("stop\n")
        deadline = time.monotonic() + timeout
        while procs.pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        if not procs.pid_alive(pid):
            procs._reap(pid)
            self.pid_file.unlink(missing_ok=True)
            return f"topology killed, JVM exited (pid {pid})"
        return procs.stop(self.pid_file, str(self.folder), timeout=30)

def compiled() -> Path:
    """The compiled topology with its storm.yaml, in the cache beside Storm's jars (javac once per
    version of the source)."""
    jars = dists.ensure_storm()
    out = dists.cache_dir() / f"{dists.storm_folder()}-topology"
    digest = hashlib.sha256(SOURCE.read_bytes() + STORM_YAML.encode()).hexdigest()
    stamp = out / ".source-sha256"
    if not stamp.exists() or stamp.read_text().strip() != digest:
        javac = shutil.which("javac")
        if javac is None:
            raise LabError("javac is not installed: the lab's Storm topology is compiled at setup "
                           "(`make system-deps` installs openjdk-17-jdk-headless)")
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        done = subprocess.run([javac, "--release", "8", "-nowarn", "-Xlint:-options", "-d", str(out),
                               "-cp", f"{jars}/*", str(SOURCE)], capture_output=True, text=True)
        if done.returncode != 0:
            raise LabError(f"javac could not compile {SOURCE.name}:\n{done.stderr.strip()[-2000:]}")
        (out / "storm.yaml").write_text(STORM_YAML)
        stamp.write_text(digest + "\n")
    return out


if __name__ == "__main__":
    print(f"Storm {dists.STORM_VERSION} topology compiled in {compiled()}", file=sys.stderr)

"""Helpers shared by the tests that talk to the lab (one place for each)."""

from __future__ import annotations

import shutil
import time
from contextlib import contextmanager


from fleetkit.clients.kafka import client_config
# shared with the benchmarks: defined in the lab, the tests import them from here as before
from fleetlab.arrange import (  # noqa: F401
    commit_when_led, committed, committed_offsets, groups_on_partition, wait_until,
)


def fleet_kafka(spec, timeout: float | None = None, conn_id: str | None = None, **override):
    """A lab cluster as the toolkit opens it: the AIRFLOW_CONN_* JSON of spec.connection_env() (on a
    secured lab the read-only `fleet` user), read by fleetkit.core.connections, its librdkafka config."""
    from fleetkit.core.connections import from_env, kafka_config

    conn = from_env(conn_id or spec.kafka_conn_id, environ=spec.connection_env())
    return _cluster(spec, client_config(dict(kafka_config(conn), **override), spec.kafka_version), timeout)


def _cluster(spec, cfg: dict, timeout: float | None):
    from fleetkit.clients.kafka import KafkaCluster

    return KafkaCluster(spec.name, cfg) if timeout is None else KafkaCluster(spec.name, cfg, timeout=timeout)


def runbook_kafka(spec, timeout: float | None = None, **override):
    """A lab cluster as a destructive runbook opens it: a secured lab's runbook connection (user
    `fleet-runbook`); an open lab has only the one connection."""
    return fleet_kafka(spec, timeout, spec.runbook_kafka_conn_id if spec.secured else None, **override)


def admin_kafka(spec, timeout: float | None = None):
    """A lab cluster as its operator opens it, outside the toolkit's connections: the lab's `admin`
    login (a secured lab's super user; nothing on an open lab). For tests that arrange or check a
    cluster's state independently of what they test."""
    return _cluster(spec, spec.client_config(), timeout)


def fleet_wire_security(spec):
    """The wire-protocol security of the toolkit's connection to a lab cluster (None: an open lab)."""
    return fleet_kafka(spec).wire_security


#: the timeout a "fails fast" test gives the client it calls: a failure the client only reported
#: once it gave up would take at least this long, so ending before it says the failure was
#: reported as it happened, not waited out. How soon it is reported is a benchmark figure
#: (bench/README.md), never a test's assertion: a loaded CI machine makes any such bound a flake.
GIVE_UP = 60.0


@contextmanager
def not_waited_out(timeout: float = GIVE_UP):
    """Assert that the block ends before `timeout`, the timeout its client was given (GIVE_UP)."""
    t0 = time.monotonic()
    yield
    elapsed = time.monotonic() - t0
    print(f"ended after {elapsed:.2f}s (the client's timeout: {timeout:.0f}s)")
    assert elapsed < timeout, f"{elapsed:.1f}s: the client waited out its own {timeout:.0f}s timeout"


def mapped_task_states(dr) -> dict:
    """{(task_id, map_index): state} of a DAG run (mapped tasks keep their index)."""
    return {(ti.task_id, ti.map_index): ti.state for ti in dr.get_task_instances()}


def fleet_with_stopped_group(lab, tmp_path, topic: str, group: str):
    """A committed group with no members on the lab's 0.9 cluster (7 records: 6/0/1 per partition,
    offsets 6 on partition 0 and 0 on partition 2), listed in the cluster's `groups` of a fleet
    file written to tmp_path (0.9 forgets a group without members). Returns the fleet file."""
    import yaml

    from fleetlab.traffic import commit, produce, wait_topic

    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 6, 1: 0, 2: 1})
    commit(lab.bootstrap, group, {(topic, 0): 6, (topic, 2): 0})
    fleet = lab.own_fleet()
    fleet["clusters"][0]["groups"] = [group]
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet))
    return fleet_file


def zigzag(n: int) -> bytes:
    """A zigzag varint (record batches' lengths and deltas), for batches built by tests."""
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def fsync_spy(monkeypatch) -> list[str]:
    """The paths os.fsync is called on from now on (it still syncs)."""
    import os

    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return synced


@contextmanager
def fresh_lab(spec):
    """A single-purpose lab of a test module, started from an empty folder and stopped (by PID)
    and removed afterwards, whatever the tests did."""
    from fleetlab.lab import Lab

    lab = Lab(spec)
    lab.down()
    shutil.rmtree(spec.lab_dir, ignore_errors=True)
    lab.up()
    try:
        yield lab
    finally:
        lab.down()
        shutil.rmtree(spec.lab_dir, ignore_errors=True)


class LeadershipHandles:
    """The readers of one test-fleet cluster: Kafka (the toolkit's read-only connection), its
    ZooKeeper (None on KRaft) and what moves leadership there (fleetkit.clients.leadership.for_cluster,
    on KRaft through the runbook principal's connection: the moves need Alter on the cluster)."""

    def __init__(self, handle):
        self.handle = handle
        self.kafka = fleet_kafka(handle.spec)
        self.runbook_kafka = runbook_kafka(handle.spec)
        self.zk = None if handle.spec.kraft else handle.zookeeper()
        if self.zk is not None:
            self.zk.start()
        from fleetkit.clients import leadership

        self.admin = leadership.for_cluster(self.runbook_kafka, self.zk)

    def close(self):
        if self.zk is not None:
            self.zk.stop()
        self.kafka.close()
        self.runbook_kafka.close()


def poisoned_consumer_collected(handle, topic: str, group: str, data_root: str, client_id: str) -> None:
    """A consumer of `group` stuck on the poison record of `topic` (fleetlab.traffic.not_poison),
    collected four times 11 s apart into `data_root`, then stopped: its offset waits at the poison
    record for three snapshot intervals, past the two a partition of unknown rhythm needs
    (fleetkit.stuck.rules, rule 6)."""
    from fleet_airflow import clusters
    from fleetlab.traffic import ConsumerThread, not_poison

    member = ConsumerThread(handle.bootstrap, group, [topic], handle=not_poison, client_id=client_id,
                            kafka_version=handle.spec.kafka_version)
    member.start()
    try:
        time.sleep(8)
        for i in range(4):
            if i:
                time.sleep(11)
            clusters.collect(handle.cluster, str(data_root))
    finally:
        member.stop()


def on_a_terminal(cmd: list[str], timeout: float = 120, env: dict | None = None) -> tuple[int, str, bytes]:
    """Run `cmd` with stderr on a pseudo-terminal (TERM=xterm, 120 columns) and stdout a pipe:
    (exit code, stdout, what the terminal was shown). The terminal is read while stdout is (a
    command that fills the terminal's buffer waits until it is read); past `timeout` seconds the
    command is killed and TimeoutExpired raised."""
    import os
    import pty
    import subprocess
    import threading

    env = {k: v for k, v in (os.environ if env is None else env).items() if k not in ("NO_COLOR", "TERM")}
    env.update(TERM="xterm", COLUMNS="120")
    main_fd, tty_fd = pty.openpty()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=tty_fd, env=env)
    os.close(tty_fd)
    shown = bytearray()

    def read_terminal() -> None:
        while True:
            try:
                chunk = os.read(main_fd, 65536)
            except OSError:  # the terminal's other end closed
                return
            if not chunk:
                return
            shown.extend(chunk)

    reader = threading.Thread(target=read_terminal, daemon=True)
    reader.start()
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise
    finally:
        reader.join(30)
        os.close(main_fd)
    return p.returncode, out.decode(), bytes(shown)


def live_groups_on_partition(lab, partition: int, n: int, name: str, topic: str, client_id: str) -> tuple[list, list]:
    """`n` groups hashing onto __consumer_offsets-`partition` (`name`: a format string with {i}),
    each with a started live member (client id `client_id`-i) consuming `topic` (5 records on each of
    3 partitions). Returns (groups, members); the caller stops the members."""
    from fleetlab.traffic import ConsumerThread, produce, wait_topic

    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 5, 1: 5, 2: 5})
    groups = groups_on_partition(partition, 50, n, name)
    members = [ConsumerThread(lab.bootstrap, g, [topic], client_id=f"{client_id}-{i}") for i, g in enumerate(groups)]
    for m in members:
        m.start()
    return groups, members

"""The several-hosts lab's network (fleetlab.hosts), on real Linux network namespaces: each host has
its own address on the lab's bridge and its own loopback, hosts reach each other and the machine
reaches them through the bridge, nothing lands on a host interface, and everything is removed at
stop, also after a crash (the state file names what a dead run left). Then a secured Kafka cluster
with each node in a host of its own, read by the toolkit's clients at the nodes' own addresses,
and the same cluster's broker hosts reached over SSH (each host runs an sshd): the trim's file
work, quarantine and restore, and broker_control, as a deployment with `access: ssh` brokers."""

from __future__ import annotations

import ipaddress
import json
import subprocess
import sys
import time

import pytest

from fleetlab.hosts import Hosts, HostsError, free_subnet, used_networks

SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((sys.argv[1], int(sys.argv[2]))); s.listen(4)
print("listening", flush=True)
while True:
    c, peer = s.accept(); c.sendall(f"{sys.argv[3]} sees {peer[0]}".encode()); c.close()
"""

CLIENT = """
import socket, sys
c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
print(c.recv(200).decode())
"""


def links() -> set[str]:
    return {e["ifname"] for e in json.loads(subprocess.run(["ip", "-j", "link"], capture_output=True, text=True,
                                                          check=True).stdout)}


def netns() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def start_server(hosts, host, port):
    proc = hosts.run(host, [sys.executable, "-c", SERVER, hosts.address(host), str(port), host],
                     stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "listening"
    return proc


def connect(hosts, host, address, port) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-c", CLIENT, address, str(port)]
    if host is None:  # from the machine itself
        return subprocess.run(argv, capture_output=True, text=True, timeout=30)
    proc = hosts.run(host, argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


@pytest.fixture
def hosts(tmp_path):
    h = Hosts(tmp_path / "lab")
    yield h
    h.down()


def test_hosts_have_their_own_addresses_and_reach_each_other(hosts):
    before_links, before_ns = links(), netns()
    machine = [n for n in used_networks() if not n.is_loopback]
    addrs = hosts.up(["airflow", "worker1", "kafka0"])
    subnet = ipaddress.ip_network(hosts.state()["subnet"])
    assert not any(subnet.overlaps(n) for n in machine)  # a subnet this machine did not use before
    assert all(ipaddress.ip_address(a) in subnet for a in addrs.values()) and len(set(addrs.values())) == 3
    assert netns() - before_ns == {hosts.netns(h) for h in addrs}

    server = start_server(hosts, "kafka0", 29092)
    try:
        got = connect(hosts, "worker1", addrs["kafka0"], 29092)
        assert got.returncode == 0 and got.stdout.strip() == f"kafka0 sees {addrs['worker1']}", got.stderr
        got = connect(hosts, None, addrs["kafka0"], 29092)  # the machine, through the bridge
        assert got.stdout.strip() == f"kafka0 sees {hosts.gateway()}", got.stderr
        # the host's loopback is its own: the server is not on the machine's 127.0.0.1 nor on airflow's
        assert connect(hosts, None, "127.0.0.1", 29092).returncode != 0
        assert connect(hosts, "airflow", "127.0.0.1", 29092).returncode != 0
        assert hosts.pids("kafka0") == [server.pid] or server.pid in hosts.pids("kafka0")
    finally:
        stopped = hosts.stop_processes("kafka0")
    assert server.wait(10) is not None and server.pid in stopped
    # nothing of the lab's subnet on the machine's own interfaces: only on the lab's bridge
    out = json.loads(subprocess.run(["ip", "-j", "-4", "addr"], capture_output=True, text=True).stdout)
    on = {e["ifname"] for e in out for a in e.get("addr_info", []) if ipaddress.ip_address(a["local"]) in subnet}
    assert on == {hosts.state()["bridge"]}

    done = hosts.down()
    assert links() == before_links and netns() == before_ns, done
    assert not hosts.state_file.exists()


def test_a_crashed_run_is_cleaned_up_at_the_next_start_and_at_stop(tmp_path):
    """A run that died (its object gone, its processes still running in the namespaces) left
    hosts.json: `down` from a new process removes everything, processes included."""
    before_links, before_ns = links(), netns()
    folder = tmp_path / "lab"
    code = ("import sys, subprocess; from pathlib import Path; from fleetlab.hosts import Hosts; "
            "h = Hosts(Path(sys.argv[1])); h.up(['a', 'b']); "
            "h.run('a', ['sleep', '600'], start_new_session=True); import os; os._exit(0)")
    subprocess.run([sys.executable, "-c", code, str(folder)], check=True, timeout=60)
    crashed = Hosts(folder)
    left = crashed.pids("a")
    assert left and netns() - before_ns == {crashed.netns("a"), crashed.netns("b")}
    again = Hosts(folder)
    again.up(["a"])  # starting again removes what the crashed run left first
    assert all(not _alive(p) for p in left)
    assert netns() - before_ns == {again.netns("a")}
    again.down()
    deadline = time.monotonic() + 10
    while (links() != before_links or netns() != before_ns) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert links() == before_links and netns() == before_ns


def test_bad_host_names_and_a_full_address_space_are_refused(hosts):
    with pytest.raises(HostsError, match="lab host name"):
        hosts.up(["ok", "no; rm -rf /"])
    with pytest.raises(HostsError, match="distinct"):
        hosts.up(["a", "a"])
    with pytest.raises(HostsError, match="no free private /24"):
        free_subnet([ipaddress.ip_network("10.0.0.0/8")])
    with pytest.raises(HostsError, match="is the hosts profile up"):
        hosts.address("airflow")


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def hosts_cluster(tmp_path_factory):
    """Kafka 4.3.1 (KRaft, secured) with each of its three nodes in a lab host of its own, each host
    running an sshd (LabSpec.broker_ssh): one cluster for the module's live tests."""
    from fleetlab.lab import LabSpec
    from tests.helpers import fresh_lab

    tmp = tmp_path_factory.mktemp("hosts43")
    hosts = Hosts(tmp / "net")
    try:
        addrs = hosts.up(["kafka0", "kafka1", "kafka2"])
        nodes = [{"address": addrs[h], "netns": hosts.netns(h)} for h in ("kafka0", "kafka1", "kafka2")]
        spec = LabSpec(lab_dir=str(tmp / "lab"), name="hosts43", zk_port=0, broker_base_port=29092,
                       controller_base_port=29192, brokers=3, kafka_version="4.3.1", security="sasl_ssl",
                       broker_hosts=nodes, broker_ssh=True)
        with fresh_lab(spec) as lab:
            yield hosts, lab, addrs
    finally:
        hosts.down()


@pytest.mark.timeout(900)
@pytest.mark.lab
def test_a_secured_cluster_with_a_broker_per_host_is_read_by_the_toolkit(hosts_cluster):
    """Kafka 4.3.1 (KRaft, SASL_SSL for clients, mutual TLS between the nodes) with each of its three
    nodes in a lab host of its own: the nodes elect, replicate and serve across the lab's network,
    and the toolkit's own clients (the connection a deployment writes, Metadata with leader epochs,
    FindCoordinator / DescribeGroups, the __consumer_offsets reader) reach them at their own
    addresses; nothing of the cluster listens on this machine's loopback, and no node listener
    accepts a connection without a certificate of the lab CA."""
    import ssl

    from fleetkit.clients.kafka import KafkaCluster, client_config
    from fleetkit.collection.offsets_topic import read_records
    from fleetkit.core.connections import from_env, kafka_config
    from fleetkit.core.partitioning import partition_for
    from tests.helpers import commit_when_led

    hosts, lab, addrs = hosts_cluster
    spec = lab.spec
    assert [lab.spec.host(i) for i in range(3)] == [addrs["kafka0"], addrs["kafka1"], addrs["kafka2"]]
    for i, h in enumerate(("kafka0", "kafka1", "kafka2")):  # each JVM runs in its own host, beside its sshd
        pid = int((spec.path / "run" / f"broker-{i}.pid").read_text())
        assert set(hosts.pids(h)) == {pid, spec.sshd(i).running()}, (h, hosts.pids(h), pid)
        assert not procs_listening("127.0.0.1", spec.broker_port(i))
    commit_when_led(lab, "orders", 3, {"billing": {0: 10, 1: 11, 2: 12}})

    conn = from_env(spec.kafka_conn_id, environ=spec.connection_env())
    cfg = client_config(kafka_config(conn), spec.kafka_version)
    assert all(a in cfg["bootstrap.servers"] for a in addrs.values()) and "127.0.0.1" not in cfg["bootstrap.servers"]
    kafka = KafkaCluster(spec.name, cfg, timeout=30)
    parts, errors = kafka.leader_epochs(["orders"])
    assert not errors and {p.leader for p in parts} <= {0, 1, 2} and len(parts) == 3
    answer = kafka.coordinators(["billing"])["billing"]
    coordinator = answer.coordinator_id
    assert answer.error is None and answer.coordinator == f"{spec.host(coordinator)}:{spec.broker_port(coordinator)}"
    res = read_records(spec.name, kafka, [partition_for("billing")], {})
    assert res.reader == "wire" and not res.problems
    committed = {(r["topic"], r["topic_partition"]): r["committed_offset"] for r in res.rows
                 if r["group"] == "billing"}
    assert committed == {("orders", 0): 10, ("orders", 1): 11, ("orders", 2): 12}

    # the node listeners (INTERNAL, CONTROLLER) answer a node's certificate only
    for port in (spec.internal_port(1), spec.controller_port(1)):
        assert api_versions_answered(spec, port, certificate=True)
        with pytest.raises(ssl.SSLError, match="(?i)certificate"):
            api_versions_answered(spec, port, certificate=False)


def api_versions_answered(spec, port: int, certificate: bool) -> bool:
    """An ApiVersions v0 request to node 1's `port` over TLS (trusting the lab CA), with the lab's
    node certificate or none: True when an answer came."""
    import socket
    import ssl
    import struct

    ctx = ssl.create_default_context(cafile=str(spec.tls_dir / "ca.pem"))
    if certificate:
        ctx.load_cert_chain(str(spec.tls_dir / "node-client.pem"), str(spec.tls_dir / "node-client.key"))
    client = b"fleet-test"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    with socket.create_connection((spec.host(1), port), timeout=15) as raw, \
            ctx.wrap_socket(raw, server_hostname=spec.host(1)) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        head = sock.recv(8)
    return len(head) == 8 and struct.unpack(">ii", head)[1] == 1


def procs_listening(host: str, port: int) -> bool:
    from fleetlab import procs

    return procs.port_open(host, port)


@pytest.mark.timeout(900)
@pytest.mark.lab
def test_the_trim_reaches_each_broker_host_over_ssh(hosts_cluster, tmp_path, monkeypatch):
    """The fleet file the lab writes describes the brokers as access: ssh, one ssh connection each
    (AIRFLOW_CONN_ JSON, resolved by the adapter as a deployment's would be). Over SSH, with the
    trim's own functions: a broker's __consumer_offsets segments and checkpoints listed (the same
    as its folder shows), the broker stopped by broker_control on its host (it really stops), its
    partition's files checked and quarantined beside its log dir on its host, then restored byte for
    byte (SHA-256 compared, on disk and on the host), the broker started again over SSH and back in
    the ISR. A host presenting another host key is refused in one line; a path and command
    arguments full of shell metacharacters reach the host as they are (no shell runs them)."""
    import hashlib
    import uuid
    from pathlib import Path

    import yaml

    from fleet_airflow import clusters
    from fleetkit.clients.broker_control import BrokerControlError, CommandBrokerControl, control_for
    from fleetkit.clients.broker_files import LocalBrokerFiles, SshBrokerFiles
    from fleetkit.clients.kafka import KafkaCluster, client_config
    from fleetkit.clients.ssh import SshError, SshSession
    from fleetkit.collection.offsets_topic import inventory
    from fleetkit.core.action import ClusterContext
    from fleetkit.core.connections import from_env, kafka_config
    from fleetkit.core.fleet import BrokerControlSettings, load_fleet
    from fleetkit.core.journal import Journal, read_journal
    from fleetkit.core.kafka_names import OFFSETS_TOPIC
    from fleetkit.core.partitioning import partition_for
    from fleetkit.trim import execute
    from fleetkit.trim.layout import host_quarantine_root
    from fleetkit.trim.plan import gate_plan

    hosts, lab, addrs = hosts_cluster
    spec = lab.spec
    env = spec.connection_env()
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(spec.fleet_document()))
    cluster = load_fleet(fleet_file).cluster(spec.name)
    assert {(b.access, b.ssh_conn_id) for b in cluster.brokers} == {("ssh", spec.ssh_conn_id(i)) for i in range(3)}
    kafka = KafkaCluster(spec.name, client_config(kafka_config(from_env(spec.runbook_kafka_conn_id)),
                                                  spec.kafka_version), timeout=30)
    b, p = 2, partition_for("billing")
    with clusters.broker_hosts(cluster) as broker_hosts:
        ctx = ClusterContext(cluster, kafka, None, journal_path=tmp_path / "journal.jsonl", broker_hosts=broker_hosts)
        files = broker_hosts.files(b)
        assert isinstance(files, SshBrokerFiles) and files.session.settings.host == addrs["kafka2"]
        log_dir = cluster.broker(b).log_dirs[0]
        here = LocalBrokerFiles([log_dir])  # the lab's hosts share this machine's disk: what the host shows
        assert (log_dir, p) in files.partitions(OFFSETS_TOPIC)
        assert files.partitions(OFFSETS_TOPIC) == here.partitions(OFFSETS_TOPIC)
        segs = files.segments(OFFSETS_TOPIC, p)
        def seen(ss):  # SFTP gives whole seconds
            return [(s.log_dir, s.base_offset, s.size_bytes, s.is_active, int(s.modified_at.timestamp())) for s in ss]
        assert segs and seen(segs) == seen(here.segments(OFFSETS_TOPIC, p))
        assert files.cleaner_checkpoints() == here.cleaner_checkpoints()
        # the collection's segment inventory reads every broker's host over SSH (the adapter's files_for)
        skipped: list[int] = []
        rows, _ = inventory(cluster, files_for=clusters.files_for(broker_hosts), partitions=[p], skipped=skipped)
        assert not skipped and {r["broker"] for r in rows} == {0, 1, 2}
        assert {r["log_dir"] for r in rows} == {cluster.broker(i).log_dirs[0] for i in range(3)}

        trim_plan = {"partitions": [{"partition": p, "replicas": [
            {"broker": b, "log_dir": log_dir, "quarantine": [{"base_offset": s.base_offset, "size_bytes": s.size_bytes}
                                                              for s in segs],
             "kept": [], "bytes_freed": sum(s.size_bytes for s in segs), "fix": None}],
            "recommit": [], "active_groups": [], "group_metadata_lost": []}]}
        _, isr = execute.offsets_topic_state(ctx)
        plan = gate_plan(cluster, trim_plan, {}, isr, str(tmp_path / "local-quarantine"))
        plan["run_id"] = "ssh-run"
        quarantine = Path(host_quarantine_root(log_dir)) / "ssh-run" / f"broker-{b}" / f"{OFFSETS_TOPIC}-{p}"
        assert plan["preconditions"][0]["segments"][0]["quarantine_root"] == host_quarantine_root(log_dir)
        assert execute.check(plan, isr, {}, None, broker_hosts.files) == []

        # broker_control.stop runs on the broker's host over SSH: the broker really stops
        pid = int((spec.path / "run" / f"broker-{b}.pid").read_text())
        control = control_for(cluster, broker_hosts)
        control.stop(b)
        execute.wait_broker_gone(ctx, b)
        assert not _alive(pid) and not procs_listening(spec.host(b), spec.broker_port(b))

        moves = execute.file_moves(plan)
        present = [m for m in moves if Path(m["source"]).exists()]
        assert present and all(Path(m["destination"]).parent == quarantine for m in moves)
        before = {m["source"]: hashlib.sha256(Path(m["source"]).read_bytes()).hexdigest() for m in present}
        journal = Journal(ctx.journal_path)
        try:
            done = [execute.apply_move(journal, m, None, files) for m in moves]
            execute.write_manifests(plan, read_journal(ctx.journal_path), broker_hosts.files)
            assert done.count("moved") == len(present)
            for m in present:  # a rename on the host: the bytes are in the quarantine, none left behind
                assert not Path(m["source"]).exists()
                assert hashlib.sha256(Path(m["destination"]).read_bytes()).hexdigest() == before[m["source"]]
            assert (quarantine / "manifest.json").exists()
            assert all("no longer exists" in line for line in execute.check(plan, isr, {}, None, broker_hosts.files))
            back, problems = execute.restorable(plan, read_journal(ctx.journal_path), broker_hosts.files)
            assert not problems and {m["source"] for m in back} == set(before)
            execute.restore_files(journal, list(reversed(back)), files)
        finally:
            journal.close()
        for src, digest in before.items():  # byte for byte, on disk and as the host reads it
            assert hashlib.sha256(Path(src).read_bytes()).hexdigest() == digest == files.sha256(src)
        assert not [n for n in quarantine.iterdir() if n.name != "manifest.json"]

        # broker_control.start over SSH: the broker comes back (in its own host) and into the ISR
        control.start(b)
        kafka.close()
        execute.wait_back_in_isr(ctx, b, {p})
        new_pid = int((spec.path / "run" / f"broker-{b}.pid").read_text())
        assert new_pid != pid and new_pid in hosts.pids("kafka2")

        # a host that presents another key than the pinned one: refused, one line, nothing sent
        other = clusters.ssh_settings(spec.ssh_conn_id(0))
        wrong = type(other)(**{**other.__dict__, "host": addrs["kafka1"]})
        with pytest.raises(SshError) as e:
            SshSession(wrong).client()
        msg = str(e.value)
        assert "\n" not in msg and spec.ssh_conn_id(0) in msg and addrs["kafka1"] in msg and "not the pinned" in msg
        assert "BEGIN" not in msg

        # names full of shell metacharacters reach the host as they are
        marker = Path(f"/tmp/fleet-ssh-marker-{uuid.uuid4().hex}")
        evil = (f"{spec.path}/evil $(touch {marker}); touch {marker} `touch {marker}` 'q\" |&>x" + "/data")
        evil_files = SshBrokerFiles(files.session, [evil], b)
        seg = f"{evil}/{OFFSETS_TOPIC}-0/{0:020d}.log"
        evil_files.write_text(seg, "records")
        assert evil_files.partitions(OFFSETS_TOPIC) == [(evil, 0)]
        assert [s.size_bytes for s in evil_files.segments(OFFSETS_TOPIC, 0)] == [7]
        assert evil_files.sha256(seg) == hashlib.sha256(b"records").hexdigest()
        moved = f"{host_quarantine_root(evil)}/r/broker-{b}/{OFFSETS_TOPIC}-0/{0:020d}.log"
        evil_files.move(seg, moved, evil_files.sha256(seg))
        assert Path(moved).read_text() == "records" and not Path(seg).exists()
        evil_control = CommandBrokerControl(BrokerControlSettings(stop=("test", "-f", moved),
                                                                  start=("ls", "--", f"$(touch {marker})")),
                                            cluster.name, broker_hosts)
        evil_control.stop(b)  # `test -f <path>` exits 0: the path arrived as one argument (split: exit 2)
        with pytest.raises(BrokerControlError) as e:
            evil_control.start(b)
        assert "cannot access" in str(e.value) and f"$(touch {marker})" in str(e.value)  # ls got the literal name
        assert not marker.exists()
    kafka.close()

"""ZooKeeper over TLS: a real ZooKeeper 3.8 (the server jars of the lab's Kafka 3.9.2) that takes
clients on its secureClientPort only and asks each for a certificate (ssl.clientAuth=need), reached
by the toolkit through a `zookeeper` connection whose extra says `ssl`. A digest login's password
then travels inside TLS, not in clear; a server whose certificate another CA signed, a client
without a certificate, and a client that does not speak TLS are refused in one line."""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

import pytest

from fleetkit.clients.zookeeper import ZooKeeperCluster, connection_settings
from fleetkit.core.errors import ClusterUnreachable, TlsHandshakeFailed
from fleetlab import dists, procs, tls
from fleetlab.ports import SINGLE_PURPOSE

from tests.conftest import TEST_PORTS, state_dir
from tests.helpers import GIVE_UP, not_waited_out, wait_until

pytestmark = [pytest.mark.lab, pytest.mark.timeout(600)]
PORT = TEST_PORTS.zookeeper(SINGLE_PURPOSE["zktls"])
HOSTS = f"localhost:{PORT}"  # the server certificate names localhost and 127.0.0.1


@pytest.fixture(scope="module")
def zk_tls():
    home = dists.ensure("3.9.2")
    folder = state_dir(".lab-zktls")
    (folder / "data").mkdir(parents=True, exist_ok=True)
    ca, ca_key = tls.make_ca(folder, "zktls CA")
    server = tls.make_server_cert(folder, ca, ca_key, name="zookeeper")
    password = secrets.token_urlsafe(16)
    keystore, truststore = tls.make_java_stores(folder, server, ca, password)
    client_cert, client_key = tls.make_client_cert(folder, ca, ca_key, {"CN": "fleet", "O": "fleetlab"}, "fleet")
    cfg = folder / "zoo.cfg"
    tls._write_private(cfg, (
        f"dataDir={folder / 'data'}\nsecureClientPort={PORT}\nsecureClientPortAddress=127.0.0.1\n"
        "serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n"
        f"ssl.keyStore.location={keystore}\nssl.keyStore.password={password}\nssl.keyStore.type=PKCS12\n"
        f"ssl.trustStore.location={truststore}\nssl.trustStore.password={password}\nssl.trustStore.type=JKS\n"
        "ssl.clientAuth=need\ntickTime=2000\nadmin.enableServer=false\n").encode())
    pid_file, log = folder / "zookeeper.pid", folder / "zookeeper.out"
    marker = str(cfg)
    procs.stop(pid_file, marker)
    procs.start(["java", "-Xmx128m", "-Djava.awt.headless=true", "-cp", f"{home}/libs/*",
                 "org.apache.zookeeper.server.quorum.QuorumPeerMain", str(cfg)], pid_file, log)
    try:
        wait_until(lambda: _port_open(PORT), 60, f"ZooKeeper's TLS port {PORT}")
        yield {"ca": str(ca), "certfile": str(client_cert), "keyfile": str(client_key), "folder": folder}
    finally:
        print(f"zookeeper: {procs.stop(pid_file, marker)}")


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _cluster(extra: dict, login: str | None = None, password: str | None = None) -> ZooKeeperCluster:
    return ZooKeeperCluster.from_settings("tlszk", connection_settings(
        "tlszk", None, None, login, password, {"hosts": HOSTS, "timeout": GIVE_UP, **extra}))


def test_a_client_with_the_ca_and_its_certificate_reads_and_writes(zk_tls):
    ssl = {k: zk_tls[k] for k in ("ca", "certfile", "keyfile")}
    zk = _cluster({"ssl": ssl}, login="fleet", password="not-in-clear-" + secrets.token_hex(4))
    zk.start()
    try:
        path = f"/tls-{secrets.token_hex(4)}"
        zk.client.create(path, b"over tls")
        assert zk.client.get(path)[0] == b"over tls"
        assert zk.client.connected and zk.tls is not None
    finally:
        zk.stop()


def test_a_server_certificate_of_another_ca_is_refused_in_one_line(zk_tls, tmp_path):
    other, _ = tls.make_ca(tmp_path, "another CA")
    zk = _cluster({"ssl": {"ca": str(other), "certfile": zk_tls["certfile"], "keyfile": zk_tls["keyfile"]}})
    with not_waited_out(), pytest.raises(TlsHandshakeFailed) as e:
        zk.start()
    print(e.value)
    assert str(e.value).startswith(f"TLS handshake with the ZooKeeper of cluster 'tlszk' ({HOSTS}) failed: ")
    assert "certificate verify failed" in str(e.value) and "\n" not in str(e.value)


def test_a_client_without_a_certificate_or_without_tls_is_refused(zk_tls):
    no_cert = _cluster({"ssl": {"ca": zk_tls["ca"]}})
    with not_waited_out(), pytest.raises((TlsHandshakeFailed, ClusterUnreachable)) as e:
        no_cert.start()
    print(e.value)
    assert "'tlszk'" in str(e.value) and "\n" not in str(e.value)
    plain = _cluster({})
    with not_waited_out(), pytest.raises(ClusterUnreachable) as e:
        plain.start()
    assert "'tlszk'" in str(e.value)


def test_bad_tls_settings_name_the_field():
    for extra, message in (({"ssl": "yes"}, "extra.ssl must be an object"),
                           ({"ssl": {"certfile": "c"}}, "extra.ssl.ca"),
                           ({"ssl": {"ca": "a", "certfile": "c"}}, "both certfile and keyfile"),
                           ({"ssl": {"ca": "a", "verify": False}}, "unknown key(s) verify")):
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            connection_settings("tlszk", None, None, None, None, {"hosts": HOSTS, **extra})

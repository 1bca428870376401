"""A Kafka 3.9 lab whose ZooKeeper 3.8 requires a SASL (DIGEST-MD5) login (LabSpec.zk_security =
"sasl", opt-in: the toolkit's ZooKeeper client learns SASL separately): the brokers log in from a
JAAS file and protect their znodes (zookeeper.set.acl), an anonymous client is refused, and no
password is on a command line or in a log."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetlab.lab import ZK_USER, LabSpec

from tests.conftest import TEST_PORTS
from tests.helpers import fresh_lab

REPO = Path(__file__).resolve().parents[2]
SPEC = LabSpec(lab_dir=str(REPO / ".lab-zksasl"), name="zksasllab", **TEST_PORTS.cluster("zksasllab"), brokers=1,
               kafka_version="3.9.2", security="sasl_ssl", zk_security="sasl")
pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def zk_sasl_lab():
    with fresh_lab(SPEC) as lab:
        yield lab


def test_brokers_log_in_to_zookeeper_and_protect_their_znodes(zk_sasl_lab):
    zk = zk_sasl_lab.zk_client()  # logged in as ZK_USER
    try:
        assert zk.get_children("/brokers/ids") == ["0"]
        acls = {(a.id.scheme, a.id.id): a.perms for a in zk.get_acls("/brokers/ids")[0]}
        assert acls == {("sasl", ZK_USER): 31, ("world", "anyone"): 1}  # all rights for the brokers' user
    finally:
        zk.stop()
        zk.close()
    admin = zk_sasl_lab.admin()  # the brokers work: a topic created through them
    assert zk_sasl_lab.create_topic("zk-sasl-topic", 1)
    assert "zk-sasl-topic" in admin.list_topics(timeout=10).topics


def test_an_anonymous_zookeeper_client_is_refused(zk_sasl_lab):
    from kazoo.client import KazooClient
    from kazoo.exceptions import KazooException

    anon = KazooClient(hosts=f"{SPEC.zk_hosts}{SPEC.chroot}", timeout=3,
                       connection_retry={"max_tries": 1}, command_retry={"max_tries": 0})
    try:
        with pytest.raises((KazooException, Exception)):
            anon.start(timeout=6)
            anon.get_children("/brokers/ids")
    finally:
        anon.stop()
        anon.close()


def test_the_login_is_in_files_only(zk_sasl_lab):
    password = SPEC.passwords()[f"zookeeper:{ZK_USER}"]
    for f in (zk_sasl_lab.zk_jaas_file, zk_sasl_lab.broker_jaas_file):
        assert (f.stat().st_mode & 0o777) == 0o600 and password in f.read_text()
    for row in zk_sasl_lab.status():
        assert password.encode() not in Path(f"/proc/{row['pid']}/cmdline").read_bytes()
    for f in [*SPEC.path.glob("**/*.log"), *SPEC.path.glob("**/*.out")]:
        assert password.encode() not in f.read_bytes(), f
    conn = json.loads(SPEC.connection_env()[f"AIRFLOW_CONN_{SPEC.zk_conn_id.upper()}"])
    assert (conn["login"], conn["password"], conn["extra"]) == (ZK_USER, password, {"auth": "sasl"})

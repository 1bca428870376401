"""The 3.9 cluster of the test fleet (lab39test) runs a ZooKeeper 3.8 that requires a SASL
(DIGEST-MD5) login, as production does (fleet_specs: LabSpec.zk_security = "sasl"): the brokers log
in from a JAAS file and protect their znodes (zookeeper.set.acl), an anonymous client is refused,
the toolkit's read-only ZooKeeper user reads but may not write /admin, a wrong password is one line
naming the cluster and the user, and no password is on a command line or in a log."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from fleetlab.lab_security import ZK_READ_USER, ZK_USER, ZK_USERS

from tests.conftest import write_fleet_file

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.lab, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def lab39(lab_fleet):
    return lab_fleet("lab39test")


def test_brokers_log_in_to_zookeeper_and_protect_their_znodes(lab39):
    zk = lab39.lab.zk_client()  # logged in as ZK_USER, the brokers' user
    try:
        assert zk.get_children("/brokers/ids") == ["0", "1", "2"]
        # a broker's registration is made at each start: the brokers' ACL whatever the folder's history
        acls = {(a.id.scheme, a.id.id): a.perms for a in zk.get_acls("/brokers/ids/0")[0]}
        assert acls == {("sasl", ZK_USER): 31, ("world", "anyone"): 1}  # all rights for the brokers' user
    finally:
        zk.stop()
        zk.close()


def test_the_read_only_user_reads_and_may_not_write_admin(lab39):
    from kazoo.exceptions import NoAuthError

    zk = lab39.lab.zk_client(user=ZK_READ_USER)  # the toolkit's scheduled reads (<cluster>_zookeeper)
    try:
        assert zk.get_children("/brokers/ids") == ["0", "1", "2"]
        assert json.loads(zk.get("/controller")[0])["brokerid"] in (0, 1, 2)
        try:  # move_leader's znode: the runbook connection's (ZK_USER) only
            zk.create("/admin/reassign_partitions", b'{"version":1,"partitions":[]}')
        except NoAuthError:
            pass
        else:  # never leave it behind: the controller would act on it
            zk.delete("/admin/reassign_partitions")
            pytest.fail("the read-only ZooKeeper user created /admin/reassign_partitions")
    finally:
        zk.stop()
        zk.close()


def test_an_anonymous_zookeeper_client_is_refused(lab39):
    from fleetkit.clients.zookeeper import ZooKeeperCluster
    from fleetkit.core.errors import AuthenticationFailed

    spec = lab39.spec
    with pytest.raises(AuthenticationFailed) as e:
        with ZooKeeperCluster(spec.name, spec.zk_hosts, spec.chroot, timeout=5) as zk:
            zk.broker_ids()
    assert str(e.value) == (f"authentication failed for anonymous (no ZooKeeper authentication) on ZooKeeper of "
                            f"cluster {spec.name!r} ({spec.zk_hosts}{spec.chroot}): the server requires a SASL login "
                            "(set the connection's login, password and extra {\"auth\": \"sasl\"})")


def test_a_wrong_zookeeper_password_is_one_line_naming_the_cluster_and_the_user(lab39, tmp_path):
    """`fleetctl coordinator who` (it reads partition leaders from ZooKeeper) with the read-only
    ZooKeeper connection's password wrong: one line, the cluster and the user, never the password."""
    spec = lab39.spec
    fleet = write_fleet_file(spec, tmp_path / "fleet.yaml")
    env = dict(os.environ, **spec.connection_env())
    var = f"AIRFLOW_CONN_{spec.zk_conn_id.upper()}"
    doc = json.loads(env[var])
    wrong = "not-the-" + doc["password"]
    env[var] = json.dumps(dict(doc, password=wrong))
    out = subprocess.run([str(REPO / ".venv" / "bin" / "fleetctl"), "coordinator", "who", "some-group",
                          "--cluster", spec.name, "--fleet", str(fleet)],
                         env=env, capture_output=True, text=True, timeout=120)
    line = (f"authentication failed for sasl:{ZK_READ_USER} on ZooKeeper of cluster {spec.name!r} "
            f"({spec.zk_hosts}{spec.chroot}): the SASL (DIGEST-MD5) login was refused (wrong password or "
            "unknown user)")
    assert out.returncode != 0 and line in out.stderr, out.stderr[-2000:]
    assert len([x for x in out.stderr.splitlines() if "authentication failed" in x]) == 1
    assert wrong not in out.stdout + out.stderr and doc["password"] not in out.stdout + out.stderr


def test_the_login_is_in_files_only(lab39):
    spec, lab = lab39.spec, lab39.lab
    passwords = [spec.passwords()[f"zookeeper:{u}"] for u in ZK_USERS]
    assert passwords[0] in lab.broker_jaas_file.read_text()
    for f in (lab.zk_jaas_file, lab.broker_jaas_file):
        assert (f.stat().st_mode & 0o777) == 0o600
    assert all(pw in lab.zk_jaas_file.read_text() for pw in passwords)
    for row in lab.status():
        if row.get("pid"):
            cmdline = Path(f"/proc/{row['pid']}/cmdline").read_bytes()
            assert not any(pw.encode() in cmdline for pw in passwords)
    for f in [*spec.path.glob("**/*.log"), *spec.path.glob("**/*.out")]:
        data = f.read_bytes()
        assert not any(pw.encode() in data for pw in passwords), f
    env = spec.connection_env()
    read, runbook = (json.loads(env[f"AIRFLOW_CONN_{c.upper()}"]) for c in (spec.zk_conn_id, spec.zk_runbook_conn_id))
    assert (read["login"], read["extra"]) == (ZK_READ_USER, {"auth": "sasl"})
    assert (runbook["login"], runbook["password"], runbook["extra"]) == (ZK_USER, passwords[0], {"auth": "sasl"})


def test_the_toolkit_reads_as_the_read_only_user_and_writes_admin_through_the_runbook_connection(lab39, unique):
    """The fleet file's two ZooKeeper connections, opened as the DAGs open them
    (fleet_airflow.clusters.zookeeper_for): the scheduled reads as `fleet`, the runbook's
    /admin write as the brokers' user (the znode is removed at once; no controller acts on an
    empty reassignment)."""
    from fleet_airflow import clusters

    from fleetkit.clients.zookeeper import create_znode

    cluster = lab39.cluster
    assert cluster.zookeeper.runbook_conn_id == lab39.spec.zk_runbook_conn_id
    with clusters.zookeeper_for(cluster) as read:
        assert read.identity == f"sasl:{ZK_READ_USER}" and read.broker_ids() == [0, 1, 2]
    path = f"/admin/{unique('zk-sasl-probe')}"
    with clusters.zookeeper_for(cluster, changes=True) as write:
        assert write.identity == f"sasl:{ZK_USER}"
        create_znode(write.client, path, b"{}", cluster=cluster.name)
        try:
            acls = {(a.id.scheme, a.id.id): a.perms for a in write.client.get_acls(path)[0]}
            assert acls == {("sasl", ZK_USER): 31, ("world", "anyone"): 1}  # Kafka's own rule
        finally:
            write.client.delete(path)

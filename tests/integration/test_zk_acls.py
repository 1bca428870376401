"""The ACL of every znode the toolkit creates, and a refused write, on the real ZooKeepers of the
test fleet: ZooKeeper 3.4.6 (the 0.9 lab, open: "authenticated" is digest, `addauth digest` needs
no server setting) and 3.8 (the 3.9 lab, which requires a SASL DIGEST-MD5 login: the writer and
owner there are the brokers' user ZK_USER, the refused one the read-only ZK_READ_USER, and an
anonymous session does not exist, so the anonymous cases run on 3.4.6 only).

The rule (fleetkit.clients.zookeeper.new_znode_acl): an authenticated session creates with
creator-all + world-read (Kafka's zookeeper.set.acl=true); an anonymous one copies the ACL of the
nearest existing parent, missing parents included. A refused write is one NotAuthorized line.

Each test works below its own top-level znode (used as the chroot where Kafka's layout is needed),
so no broker or controller sees it."""

from __future__ import annotations

import json
import logging
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.security import ACL, Id, Permissions, make_digest_acl

from fleetkit.clients import leadership
from fleetkit.clients.zookeeper import ZooKeeperAuth, ZooKeeperCluster
from fleetkit.core.action import ClusterContext
from fleetkit.core.errors import FleetError, NotAuthorized
from fleetkit.core.fleet import Cluster, OffsetStoreSettings
from fleetkit.core.journal import read_journal
from fleetkit.group_ids import execute as gi_execute
from fleetkit.group_ids import rules as gi
from fleetkit.stuck import zk_reset

from fleetlab.lab_security import ZK_READ_USER, ZK_USER

from tests.conftest import GENERATIONS

pytestmark = pytest.mark.lab

SECRET = "runbook-S3cret"
OWNER_SECRET = "owner-S3cret"
WORLD_READ = ACL(Permissions.READ, Id("world", "anyone"))
# what an anonymous session may do below these test roots: everything but ADMIN (so a copy of it is
# told from kazoo's open default, which grants ALL)
PERMISSIVE = [ACL(Permissions.ALL & ~Permissions.ADMIN, Id("world", "anyone"))]


def creator_all_world_read(user: str, password: str) -> list[ACL]:
    """What ZooKeeper stores for CREATOR_ALL_ACL + READ_ACL_UNSAFE created by digest user:password."""
    return [make_digest_acl(user, password, all=True), WORLD_READ]


@pytest.fixture(params=["0.9", "3.9"], ids=["zookeeper-3.4.6", "zookeeper-3.8"])
def spec(request, lab_fleet):
    return lab_fleet(GENERATIONS[request.param]).lab.spec


def writer(spec) -> ZooKeeperAuth:
    """The runbook's identity: digest fleet-runbook on the open ZooKeeper, the brokers' SASL user on a secured one."""
    if spec.zk_sasl:
        return ZooKeeperAuth("sasl", ZK_USER, spec.passwords()[f"zookeeper:{ZK_USER}"])
    return ZooKeeperAuth("digest", "fleet-runbook", SECRET)


def owner(spec) -> ZooKeeperAuth:
    """Who owns the owner-only znodes (on a secured ZooKeeper the brokers' user, as Kafka's znodes)."""
    return writer(spec) if spec.zk_sasl else ZooKeeperAuth("digest", "owner", OWNER_SECRET)


def intruder(spec) -> ZooKeeperAuth:
    """An identity the owner-only ACLs do not grant writes (on a secured ZooKeeper the read-only user)."""
    if spec.zk_sasl:
        return ZooKeeperAuth("sasl", ZK_READ_USER, spec.passwords()[f"zookeeper:{ZK_READ_USER}"])
    return ZooKeeperAuth("digest", "intruder", SECRET)


def acl_of(auth: ZooKeeperAuth) -> list[ACL]:
    """What ZooKeeper stores for CREATOR_ALL_ACL + READ_ACL_UNSAFE created by `auth`."""
    if auth.scheme == "digest":
        return creator_all_world_read(auth.username, auth.password)
    return [ACL(Permissions.ALL, Id(auth.scheme, auth.username)), WORLD_READ]


#: the anonymous cases: ZooKeeper 3.4.6 only (the 3.9 lab's ZooKeeper requires a SASL login, so no
#: anonymous session exists there: test_zookeeper_sasl.py checks it is refused)
OPEN_ZOOKEEPER_ONLY = pytest.mark.parametrize("spec", ["0.9"], ids=["zookeeper-3.4.6"], indirect=True)


@pytest.fixture
def top(spec):
    """A fresh top-level znode's path (no chroot) and a kazoo client of the whole tree that sets up
    and cleans up (it holds both test identities, so it may delete whatever the test created)."""
    path = f"/acltest_{uuid.uuid4().hex[:10]}"
    admin = spec.zk_client("", auth_data=[("digest", f"owner:{OWNER_SECRET}"), ("digest", f"fleet-runbook:{SECRET}")])
    try:
        yield path, admin
    finally:
        if admin.exists(path):
            admin.delete(path, recursive=True)
        admin.stop()
        admin.close()


def _sorted(acl):
    return sorted(acl, key=lambda a: (a.id.scheme, a.id.id, a.perms))


def _zk(spec, chroot: str, auth: ZooKeeperAuth | None) -> ZooKeeperCluster:
    return ZooKeeperCluster(spec.name, spec.zk_hosts, chroot, auth=auth, timeout=10)


def _topic_layout(admin, chroot: str, acl) -> None:
    """A topic's assignment znode below `chroot`, as Kafka writes it (read by reorder_replicas)."""
    admin.create(chroot, b"", acl=acl)
    admin.create(f"{chroot}/brokers/topics/t", json.dumps({"version": 1, "partitions": {"0": [1, 2]}}).encode(),
                 makepath=True, acl=acl)


def test_reassignment_and_election_znodes_authenticated_get_creator_all_and_world_read(spec, top):
    chroot, admin = top
    _topic_layout(admin, chroot, PERMISSIVE)
    with _zk(spec, chroot, writer(spec)) as zk:
        # no controller watches this chroot: the znode stays, the wait times out
        with pytest.raises(FleetError, match="did not complete /admin/reassign_partitions"):
            leadership.reorder_replicas(zk, "t", 0, [2, 1], timeout=0.5)
        with pytest.raises(FleetError, match="did not complete /admin/preferred_replica_election"):
            leadership.preferred_election(zk, [("t", 0)], timeout=0.5)
    want = _sorted(acl_of(writer(spec)))
    for node in ("/admin", "/admin/reassign_partitions", "/admin/preferred_replica_election"):
        assert _sorted(admin.get_acls(f"{chroot}{node}")[0]) == want, node  # makepath's /admin too
    assert json.loads(admin.get(f"{chroot}/admin/reassign_partitions")[0]) == {
        "version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [2, 1]}]}


@OPEN_ZOOKEEPER_ONLY
def test_reassignment_znode_anonymous_copies_the_parents_acl(spec, top):
    chroot, admin = top
    _topic_layout(admin, chroot, PERMISSIVE)
    with _zk(spec, chroot, None) as zk:
        with pytest.raises(FleetError, match="did not complete"):
            leadership.reorder_replicas(zk, "t", 0, [2, 1], timeout=0.5)
    for node in ("/admin", "/admin/reassign_partitions"):  # /admin made by makepath: same ACL, not an open one
        assert admin.get_acls(f"{chroot}{node}")[0] == PERMISSIVE, node


@pytest.mark.parametrize("spec, anonymous", [("0.9", True), ("0.9", False), ("3.9", False)], indirect=["spec"],
                         ids=["zookeeper-3.4.6-anonymous", "zookeeper-3.4.6-logged-in", "zookeeper-3.8-logged-in"])
def test_a_refused_reassignment_is_one_line_naming_operation_znode_and_identity(spec, top, anonymous):
    auth = None if anonymous else intruder(spec)
    chroot, admin = top
    _topic_layout(admin, chroot, acl_of(owner(spec)))  # readable, owner-only writes
    with _zk(spec, chroot, auth) as zk:
        with pytest.raises(NotAuthorized) as e:
            leadership.reorder_replicas(zk, "t", 0, [2, 1], timeout=5)
    who = auth.identity if auth else "anonymous (no ZooKeeper authentication)"
    assert str(e.value) == (f"ZooKeeper refused create on znode /admin/reassign_partitions (chroot {chroot}) for "
                            f"{who} on cluster {spec.name!r} (NoAuth: the znode's ACL does not grant it)")
    assert (auth is None or auth.password not in str(e.value)) and admin.exists(f"{chroot}/admin") is None


def _missing_ops(root: str, n: int = 2):
    members = [{"group": "g 'ü'", "client_host": "10.9.0.1", "client_id": f"c{i}", "member_id": f"m{i}"}
               for i in range(n)]
    return gi.ops_for(gi.diff([], members, root, 3600), ["MISSING"])


def test_group_id_mappings_authenticated_get_creator_all_and_world_read_root_included(spec, top):
    base, admin = top
    admin.create(base, b"", acl=PERMISSIVE)
    root = f"{base}/pulsar/client_group_id"  # missing, and so is its parent
    with _zk(spec, "", writer(spec)) as zk:
        res = gi_execute.apply(zk.client, _missing_ops(root), root)
    assert len(res.changed) == 2 and res.errors == []
    want = _sorted(acl_of(writer(spec)))
    for node in (f"{base}/pulsar", root, f"{root}/10.9.0.1-c0", f"{root}/10.9.0.1-c1"):
        assert _sorted(admin.get_acls(node)[0]) == want, node
    # world-readable: a reader without rights of its own (a KoP broker without credentials; where
    # ZooKeeper requires a login, the read-only user) reads the mapping
    anon = spec.zk_client("", user=ZK_READ_USER) if spec.zk_sasl else KazooClient(hosts=spec.zk_hosts, timeout=10)
    if not spec.zk_sasl:
        anon.start(timeout=15)
    try:
        assert anon.get(f"{root}/10.9.0.1-c0")[0] == "g 'ü'".encode()
    finally:
        anon.stop()
        anon.close()


@OPEN_ZOOKEEPER_ONLY
def test_group_id_mappings_anonymous_copy_the_roots_acl_and_a_missing_root_its_parents(spec, top):
    base, admin = top
    admin.create(base, b"", acl=PERMISSIVE)
    existing = f"{base}/existing"
    root_acl = [ACL(Permissions.READ | Permissions.CREATE | Permissions.DELETE, Id("world", "anyone"))]
    admin.create(existing, b"", acl=root_acl)
    missing = f"{base}/a/b"
    with _zk(spec, "", None) as zk:
        assert len(gi_execute.apply(zk.client, _missing_ops(existing), existing).changed) == 2
        assert len(gi_execute.apply(zk.client, _missing_ops(missing, 1), missing).changed) == 1
    for node in (f"{existing}/10.9.0.1-c0", f"{existing}/10.9.0.1-c1"):
        assert admin.get_acls(node)[0] == root_acl, node
    for node in (f"{base}/a", missing, f"{missing}/10.9.0.1-c0"):
        assert admin.get_acls(node)[0] == PERMISSIVE, node


def test_a_refused_mapping_write_is_reported_in_one_line(spec, top):
    base, admin = top
    admin.create(base, b"", acl=acl_of(owner(spec)))
    who = intruder(spec)
    with _zk(spec, "", who) as zk:
        res = gi_execute.apply(zk.client, _missing_ops(base, 1), base)  # below an existing root: reported
        with pytest.raises(NotAuthorized) as e:  # a missing root it may not create: raised
            gi_execute.apply(zk.client, _missing_ops(f"{base}/root", 1), f"{base}/root")
    assert res.changed == [] and [x["reason"] for x in res.errors] == [
        f"ZooKeeper refused create on znode {base}/10.9.0.1-c0 for {who.identity} (NoAuth: the znode's ACL "
        "does not grant it)"]
    assert str(e.value).startswith(f"ZooKeeper refused create on znode {base}/root for {who.identity}")
    assert who.password not in str(e.value) and admin.get_children(base) == []


def _reset_setup(spec, admin, base: str):
    """A ZooKeeper offset store below `base` (the old consumer's layout), owner-only writes."""
    path = f"{base}/consumers/grp/offsets/t/0"
    admin.create(base, b"", acl=PERMISSIVE)
    admin.create(path, b"42", acl=acl_of(owner(spec)), makepath=True)
    store = OffsetStoreSettings(kind="zookeeper", conn_id=spec.zk_conn_id, root="/consumers", chroot=base)
    cluster = Cluster(name=spec.name, kafka_conn_id=spec.kafka_conn_id, offset_stores=(store,))
    plan = {"details": {"source": "zookeeper", "group": "grp", "topic": "t",
                        "partitions": [{"partition": 0, "znode": "/consumers/grp/offsets/t/0", "version": 0,
                                        "committed": 42, "new": 7}],
                        "store": {"kind": "zookeeper", "conn_id": store.conn_id, "chroot": base, "root": "/consumers"}}}
    return path, cluster, plan


def test_a_refused_zookeeper_offset_reset_is_one_line_and_journaled(spec, top, tmp_path):
    """The reset rewrites existing znodes only (it creates none); a write the znode's ACL refuses
    stops it with the one line, which the journal keeps."""
    base, admin = top
    path, cluster, plan = _reset_setup(spec, admin, base)

    def ctx(auth):
        return ClusterContext(cluster, None, None, open_zookeeper=lambda store: _zk(spec, store.chroot, auth))

    with pytest.raises(NotAuthorized) as e:
        zk_reset.execute(ctx(intruder(spec)), plan, tmp_path / "j.jsonl")
    line = (f"ZooKeeper refused set on znode /consumers/grp/offsets/t/0 (chroot {base}) for {intruder(spec).identity} on "
            f"cluster {spec.name!r} (NoAuth: the znode's ACL does not grant it)")
    assert str(e.value) == line and admin.get(path)[0] == b"42"
    assert read_journal(tmp_path / "j.jsonl")[0]["error"] == line
    out = zk_reset.execute(ctx(owner(spec)), plan, tmp_path / "k.jsonl")
    assert out["changes"][0]["after"] == 7 and admin.get(path)[0] == b"7"


def test_no_password_in_the_debug_log_of_a_real_login(spec, top, caplog):
    """kazoo logs the addauth request it sends at connect time: the credential is redacted (a SASL
    login, the 3.9 lab's, sends no addauth: its password is in no log line either)."""
    base, admin = top
    admin.create(base, b"", acl=PERMISSIVE)
    auth = writer(spec)
    with caplog.at_level(logging.DEBUG):
        with _zk(spec, base, auth) as zk:
            zk.client.get("/")
    assert auth.password not in caplog.text
    if auth.scheme == "digest":
        assert "scheme='digest', auth='***'" in caplog.text

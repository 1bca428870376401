"""ZooKeeper authentication from the Airflow connection (digest, SASL, none), secrets kept out of
every repr, error and log line, and the one ACL rule of created znodes (against stand-in clients;
tests/integration/test_zk_acls.py runs it on the real ZooKeepers)."""

from __future__ import annotations

import logging

import pytest
from kazoo.exceptions import NoAuthError, NoNodeError
from kazoo.protocol.serialization import Auth
from kazoo.security import ACL, CREATOR_ALL_ACL, READ_ACL_UNSAFE, Id, Permissions, make_digest_acl

from fleetkit.clients.zookeeper import (
    ANONYMOUS, ZooKeeperAuth, ZooKeeperCluster, authenticated, connection_settings, create_znode, kazoo_log,
    new_znode_acl, not_authorized, zk_identity,
)
from fleetkit.core.errors import ClusterUnreachable, FleetError, NotAuthorized

SECRET = "s3cr3t-Pa55"


def test_a_login_is_digest_auth_by_default():
    s = connection_settings("zk", "127.0.0.1", 2181, "fleet", SECRET, {"chroot": "/kafka"})
    assert s.auth == ZooKeeperAuth("digest", "fleet", SECRET)
    assert s.auth_data == [("digest", f"fleet:{SECRET}")] and s.sasl_options is None
    assert (s.hosts, s.chroot, s.timeout) == ("127.0.0.1:2181", "/kafka", 10.0)
    assert s["hosts"] == "127.0.0.1:2181"  # item access, as callers used the old dict
    assert connection_settings("zk", "h", None, "fleet", SECRET, {"auth": "digest"}).auth_data == \
        [("digest", f"fleet:{SECRET}")]


@pytest.mark.parametrize("value", ["sasl", "SASL"])
def test_extra_auth_sasl_gives_kazoo_sasl_options(value):
    s = connection_settings("zk", None, None, "fleet-runbook", SECRET, {"hosts": "z1:2181,z2:2181", "auth": value})
    assert s.sasl_options == {"mechanism": "DIGEST-MD5", "username": "fleet-runbook", "password": SECRET}
    assert s.auth_data is None and s.hosts == "z1:2181,z2:2181"
    zk = ZooKeeperCluster.from_settings("prod", s)
    # the kazoo client really got them (its connection authenticates with SASL at connect)
    assert zk.client._connection.sasl_options["username"] == "fleet-runbook"
    assert not zk.client.auth_data
    assert authenticated(zk.client) and zk.identity == zk_identity(zk.client) == "sasl:fleet-runbook"


def test_no_login_is_anonymous():
    s = connection_settings("zk", "h", 2181, None, None, {})
    assert s.auth is None and s.auth_data is None and s.sasl_options is None
    zk = ZooKeeperCluster.from_settings("lab", s)
    assert not authenticated(zk.client) and zk.identity == ANONYMOUS


@pytest.mark.parametrize("extra, login, words", [
    ({"auth": "kerberos"}, "fleet", "extra.auth must be one of digest, sasl, got 'kerberos'"),
    ({"auth": 1}, "fleet", "extra.auth must be one of digest, sasl"),
    ({"auth": "sasl"}, None, "extra.auth is 'sasl' but the connection has no login"),
])
def test_bad_auth_settings_name_the_connection_never_the_password(extra, login, words):
    with pytest.raises(ValueError) as e:
        connection_settings("prod_zk", "h", 2181, login, SECRET, extra)
    assert words in str(e.value) and "'prod_zk'" in str(e.value) and SECRET not in str(e.value)


@pytest.mark.parametrize("extra", [{}, {"auth": "sasl"}])
def test_the_password_is_in_no_repr_or_str(extra):
    s = connection_settings("zk", "127.0.0.1", 2181, "fleet", SECRET, extra)
    zk = ZooKeeperCluster.from_settings("lab", s)
    for text in (repr(s), str(s), repr(s.auth), str(s.auth), repr(zk), str(zk), zk.identity, f"{zk}"):
        assert SECRET not in text, text
        assert "fleet" in text
    assert repr(zk) == f"ZooKeeperCluster('lab', 127.0.0.1:2181, {s.auth.scheme}:fleet)"
    assert SECRET not in repr(zk.persistent()) and zk.persistent().auth == s.auth


def test_an_unreachable_zookeeper_error_holds_no_password():
    import socket

    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    zk = ZooKeeperCluster.from_settings("lab", connection_settings("zk", "127.0.0.1", port, "fleet", SECRET,
                                                                   {"timeout": 2}))
    with pytest.raises(ClusterUnreachable) as e:
        zk.start()
    assert SECRET not in str(e.value) and "did not answer" in str(e.value)


def test_kazoos_debug_line_of_the_addauth_request_is_redacted(caplog):
    """kazoo logs each request it sends at DEBUG: the addauth one carries 'user:password'."""
    with caplog.at_level(logging.DEBUG, logger="fleetkit.kazoo"):
        kazoo_log.debug("Sending request(xid=%s): %s", -4, Auth(0, "digest", f"fleet:{SECRET}"))
        kazoo_log.debug("Sending request(xid=%s): %s", 7, "GetData(path='/x')")
    assert SECRET not in caplog.text
    assert "scheme='digest', auth='***'" in caplog.text and "GetData(path='/x')" in caplog.text


# -- the ACL rule -------------------------------------------------------------------------------------
PARENT_ACL = [ACL(Permissions.READ | Permissions.CREATE, Id("world", "anyone"))]


class _Client:
    """The kazoo calls of the rule: get_acls (a tree of existing znodes), create."""

    def __init__(self, acls: dict[str, list], auth_data=(), chroot="", refuse=False):
        self.acls, self.auth_data, self.chroot, self.refuse = dict(acls), set(auth_data), chroot, refuse
        self.created: list[tuple] = []

    def get_acls(self, path):
        if path not in self.acls:
            raise NoNodeError()
        return self.acls[path], None

    def create(self, path, value=b"", acl=None, makepath=False):
        if self.refuse:
            raise NoAuthError()
        self.created.append((path, value, acl, makepath))
        return path


def test_authenticated_creates_get_creator_all_and_world_read():
    c = _Client({"/": PARENT_ACL}, auth_data={("digest", f"fleet:{SECRET}")})
    assert new_znode_acl(c, "/admin/reassign_partitions") == CREATOR_ALL_ACL + READ_ACL_UNSAFE
    create_znode(c, "/admin/reassign_partitions", b"{}", makepath=True)
    assert c.created == [("/admin/reassign_partitions", b"{}", CREATOR_ALL_ACL + READ_ACL_UNSAFE, True)]


def test_anonymous_creates_copy_the_nearest_existing_parents_acl_makepath_included():
    deep = [make_digest_acl("kop", "x", all=True)]
    c = _Client({"/": [ACL(Permissions.ALL, Id("world", "anyone"))], "/kafka": PARENT_ACL, "/kafka/a": deep})
    assert new_znode_acl(c, "/kafka/b/c/d") == PARENT_ACL  # /kafka/b missing: /kafka's
    assert new_znode_acl(c, "/kafka/a/x") == deep
    assert new_znode_acl(c, "/top") == c.acls["/"]
    create_znode(c, "/kafka/b/c/d", b"v", makepath=True)
    # kazoo's makepath creates each missing parent with the ACL it is given: the same one
    assert c.created == [("/kafka/b/c/d", b"v", PARENT_ACL, True)]


def test_a_refused_create_is_one_not_authorized_line_naming_operation_znode_and_identity():
    c = _Client({"/": PARENT_ACL}, auth_data={("digest", f"fleet-runbook:{SECRET}")}, chroot="/kafka", refuse=True)
    with pytest.raises(NotAuthorized) as e:
        create_znode(c, "/admin/reassign_partitions", b"{}", makepath=True, cluster="prod")
    msg = str(e.value)
    assert msg == ("ZooKeeper refused create on znode /admin/reassign_partitions (chroot /kafka) for "
                   "digest:fleet-runbook on cluster 'prod' (NoAuth: the znode's ACL does not grant it)")
    assert "\n" not in msg and SECRET not in msg and isinstance(e.value, FleetError)
    assert e.value.__cause__ is None and e.value.__suppress_context__  # no kazoo traceback holding the session


def test_identities_never_show_a_password():
    assert zk_identity(_Client({}, auth_data={("digest", f"a:{SECRET}"), ("digest", "b:pw:with:colons")})) == \
        "digest:a, digest:b"
    assert zk_identity(_Client({})) == ANONYMOUS
    assert "anonymous" in str(not_authorized(_Client({}), "set", "/consumers/g/offsets/t/0"))


def test_a_sasl_login_refused_inside_kazoos_connection_loop_is_the_login_line_not_a_timeout():
    """kazoo's loop can end on a refused SASL login before its client says connected (it logs the
    SessionClosedRequireSaslError instead of raising it): start() names the login, at once. A
    stand-in for kazoo's client: the race cannot be forced against a real ZooKeeper."""
    import threading

    from kazoo.exceptions import SessionClosedRequireSaslError

    from fleetkit.core.errors import AuthenticationFailed

    class LoopThatFailsTheLogin:
        connected = False

        def start_async(self):
            def loop():
                try:
                    raise SessionClosedRequireSaslError()
                except SessionClosedRequireSaslError:
                    kazoo_log.exception("Unhandled exception in connection loop")
            threading.Timer(0.2, loop).start()
            return threading.Event()  # never set: the loop died

        def stop(self):
            pass

        def close(self):
            pass

    zk = ZooKeeperCluster("lab39", "127.0.0.1:2181", "/kafka", auth=ZooKeeperAuth("sasl", "fleet", "s3cret"),
                          timeout=5, client=LoopThatFailsTheLogin())
    with pytest.raises(AuthenticationFailed) as e:  # (not ClusterUnreachable's "did not answer" at the timeout)
        zk.start()
    assert str(e.value) == ("authentication failed for sasl:fleet on ZooKeeper of cluster 'lab39' "
                            "(127.0.0.1:2181/kafka): the SASL (DIGEST-MD5) login was refused (wrong password or "
                            "unknown user)")
    assert "s3cret" not in str(e.value)

"""The mapping format checked against KoP's source (streamnative/kop, archived at 14f9832; the same
code in the v3.0.0.4 and v3.1.1.1 tags), restated here as facts, not copied:

* GroupIdUtils.groupIdPathFormat(clientHost, clientId): the text of clientHost before its first ':',
  then '-', then the client id; a '/' is put in front when the result does not start with one.
* clientHost is KafkaCommandDecoder.KafkaHeaderAndRequest.getClientHost(), the connection's
  remote address as Java's InetSocketAddress.toString() ('/10.0.0.7:53211'); the coordinator
  (JoinGroup -> GroupCoordinator.handleJoinGroup) keeps that same string as the member's client host,
  which DescribeGroups reports.
* KafkaRequestHandler.storeGroupId: path = groupIdZooKeeperPath (default /client_group_id) + that,
  data = groupId.getBytes(UTF_8), metadataStore.put(path, data, Optional.empty()); Pulsar's
  ZKMetadataStore turns a put without version into setData(version -1), and into a create when the
  znode is missing; a create that finds the znode fails (BadVersion) and is not retried.
* KafkaRequestHandler.close: metadataStore.delete(path, Optional.empty()) for every client id that
  sent a group FindCoordinator on the connection (ZooKeeper delete with version -1).
"""

from __future__ import annotations

import pytest
from kazoo.exceptions import NodeExistsError, NoNodeError

from fleetkit.clients.kafka import strip_host
from fleetkit.group_ids import rules as gi
from tests.kop_standin import kop_delete, kop_write

ROOT = "/client_group_id"


def kop_path(root: str, client_host: str, client_id: str) -> str:
    """KoP's path of a mapping (groupIdStoredPath + GroupIdUtils.groupIdPathFormat), restated."""
    name = client_host.split(":")[0] + "-" + client_id
    if not name.startswith("/"):
        name = "/" + name
    return root + name


# Java's InetSocketAddress.toString() of a client's connection, as KoP sees it, and the address
CONNECTIONS = [
    ("/10.0.0.7:53211", "IPv4"),
    ("/192.168.100.200:1", "IPv4, short port"),
    ("/[2001:db8:0:0:0:0:0:1]:53211", "IPv6, Java 14 and later (brackets)"),
    ("/[0:0:0:0:0:0:0:1]:40000", "IPv6 loopback, Java 14 and later"),
    ("/[fe80:0:0:0:1c2d:3eff:fe4f:5a6b%eth0]:40000", "IPv6 link-local with scope"),
    ("/2001:db8:0:0:0:0:0:1:53211", "IPv6, Java 13 and earlier (no brackets)"),
]
CLIENT_IDS = ["consumer-orders-1", "", "a b'\"$;`|&<>", "ünï€", "rdkafka"]


@pytest.mark.parametrize("conn,_", CONNECTIONS, ids=[c[1] for c in CONNECTIONS])
@pytest.mark.parametrize("client_id", CLIENT_IDS)
def test_the_toolkit_names_a_member_as_kop_names_its_znode(conn, _, client_id):
    # the member as DescribeGroups reports it (KoP's client host, with the port) -> the collected host
    host = strip_host(conn)
    assert gi.name_problem(host, client_id) is None
    assert gi.join_path(ROOT, gi.znode_name(host, client_id)) == kop_path(ROOT, conn, client_id)


def test_what_kop_names_look_like():
    assert kop_path(ROOT, "/10.0.0.7:53211", "c-1") == "/client_group_id/10.0.0.7-c-1"
    assert kop_path(ROOT, "/[2001:db8:0:0:0:0:0:1]:53211", "c-1") == "/client_group_id/[2001-c-1"
    assert kop_path(ROOT, "/2001:db8:0:0:0:0:0:1:53211", "c-1") == "/client_group_id/2001-c-1"
    # an IPv6 keeps only its first group: two hosts of one /16 with one client id share a znode
    assert kop_path(ROOT, "/[2001:db8:0:0:0:0:0:1]:1", "c") == kop_path(ROOT, "/[2001:ffff:0:0:0:0:0:9]:2", "c")
    assert gi.znode_name("2001:db8:0:0:0:0:0:1", "c") == gi.znode_name("2001:ffff:0:0:0:0:0:9", "c") == "[2001-c"
    assert gi.znode_name("::1", "c") == "[0-c"
    assert gi.split_name("[2001-c-1") == ("[2001", "c-1")


def test_a_client_id_with_a_slash_is_a_nested_znode_in_kop_and_unrepresentable_here():
    assert kop_path(ROOT, "/10.0.0.7:53211", "a/b") == "/client_group_id/10.0.0.7-a/b"
    assert "nested" in gi.name_problem("10.0.0.7", "a/b")


class FakeZK:
    """Just enough of kazoo's client: set(version), create(makepath), delete(version)."""

    def __init__(self, nodes=None, appears_on_create=None):
        self.nodes = dict(nodes or {})
        self.calls = []
        self.appears_on_create = appears_on_create  # data someone else creates right before our create

    def set(self, path, data, version=-1):
        self.calls.append(("set", path, version))
        if path not in self.nodes:
            raise NoNodeError()
        self.nodes[path] = data

    def create(self, path, data, makepath=False):
        self.calls.append(("create", path, makepath))
        if self.appears_on_create is not None:
            self.nodes[path] = self.appears_on_create
        if path in self.nodes:
            raise NodeExistsError()
        self.nodes[path] = data

    def delete(self, path, version=-1):
        self.calls.append(("delete", path, version))
        if path not in self.nodes:
            raise NoNodeError()
        del self.nodes[path]


def test_the_standin_writes_like_pulsars_put_without_version():
    zk = FakeZK()
    path = kop_write(zk, ROOT, "10.0.0.7", "c-1", "grüppe")
    assert path == "/client_group_id/10.0.0.7-c-1"
    assert zk.nodes[path] == "grüppe".encode("utf-8")
    assert zk.calls == [("set", path, -1), ("create", path, True)]
    zk.calls.clear()
    assert kop_write(zk, ROOT, "10.0.0.7", "c-1", "other") == path  # an existing znode: overwritten
    assert zk.nodes[path] == b"other" and zk.calls == [("set", path, -1)]


def test_the_standin_loses_a_create_race_like_kop():
    zk = FakeZK(appears_on_create=b"created-meanwhile")
    assert kop_write(zk, ROOT, "10.0.0.7", "c-1", "kop-group") is None
    assert zk.nodes["/client_group_id/10.0.0.7-c-1"] == b"created-meanwhile"  # not retried, not overwritten


def test_the_standin_deletes_without_version_and_ignores_a_missing_znode():
    zk = FakeZK({"/client_group_id/10.0.0.7-c-1": b"g"})
    kop_delete(zk, ROOT, "10.0.0.7", "c-1")
    kop_delete(zk, ROOT, "10.0.0.7", "c-1")
    assert zk.nodes == {}
    assert zk.calls == [("delete", "/client_group_id/10.0.0.7-c-1", -1)] * 2

"""The wire protocol's encoders and decoders against byte vectors written out from Kafka's message
schemas (clients/src/main/resources/common/message/*.json), one version at a time.

Conventions in the vectors: int16/int32 big-endian; non-flexible strings are int16 length +
UTF-8, arrays int32 count; flexible (compact) strings, arrays and bytes are unsigned varint
(length + 1); "00" after a flexible struct is its empty tagged-field section.
"""

from __future__ import annotations

import socket
import threading

import pytest

from fleetkit.clients import wire
from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol import transport

H = bytes.fromhex


def body(api: m.Api, version: int, values: dict) -> bytes:
    """A request's body: the request without its size, header v1 and, when flexible, header tags."""
    return api.encode_request(version, 0, values)[4 + 8 + len(CLIENT) + api.flexible(version):]


def find_coordinator_body(version, keys):
    return body(m.FIND_COORDINATOR, version, wire.find_request(version, keys))


def decode_find_coordinator(version, payload, keys):
    cid, answer = m.FIND_COORDINATOR.decode_response(version, payload)
    return cid, wire.coordinators(version, answer, keys)


def describe_groups_body(version, groups):
    return body(m.DESCRIBE_GROUPS, version, {"Groups": groups})


def decode_describe_groups(version, payload):
    cid, answer = m.DESCRIBE_GROUPS.decode_response(version, payload)
    return cid, wire.described_groups(answer)


def consumer_group_describe_body(version, groups):
    return body(m.CONSUMER_GROUP_DESCRIBE, version, {"GroupIds": groups})


def decode_consumer_group_describe(version, payload):
    cid, answer = m.CONSUMER_GROUP_DESCRIBE.decode_response(version, payload)
    return cid, wire.consumer_groups(answer)


def metadata_body(version, topics):
    return body(m.METADATA, version, wire.metadata_request(topics))


def decode_metadata(version, payload):
    cid, answer = m.METADATA.decode_response(version, payload)
    return (cid, *wire.metadata(answer))


def _frame(payload: bytes) -> bytes:
    return len(payload).to_bytes(4, "big") + payload


# client id "fleetkit": int16 length 8 + bytes
CLIENT = H("0008") + b"fleetkit"


# -- version choice ---------------------------------------------------------------------------
@pytest.mark.parametrize("broker, find, describe", [
    (None, 0, 0),                               # 0.9: no ApiVersions, version 0 of everything
    ({10: (0, 2), 15: (0, 2)}, 2, 2),           # 2.0
    ({10: (0, 4), 15: (0, 5)}, 4, 5),           # 3.9
    ({10: (1, 6), 15: (1, 6)}, 4, 5),           # 4.x: v0 removed, newer versions than spoken here
    ({10: (5, 6), 15: (6, 6)}, None, None),     # nothing in common
    ({18: (0, 3)}, None, None),                 # the broker does not offer the API at all
])
def test_version_is_the_highest_both_sides_speak(broker, find, describe):
    assert m.FIND_COORDINATOR.pick_version(broker) == find
    assert m.DESCRIBE_GROUPS.pick_version(broker) == describe


# -- ApiVersions ------------------------------------------------------------------------------
def test_api_versions_v0_request():
    # header v1: api key 18, version 0, correlation id -1, client id; no body
    assert m.API_VERSIONS.encode_request(0, -1) == _frame(H("0012" "0000" "ffffffff") + CLIENT)


def test_api_versions_v0_response():
    payload = H("ffffffff"          # correlation id (response header v0, even for flexible versions)
                "0000"              # error code
                "00000003"          # 3 api keys
                "000a" "0000" "0004"
                "000f" "0001" "0005"
                "0012" "0000" "0004")
    assert transport.decode_api_versions(payload) == (0, {10: (0, 4), 15: (1, 5), 18: (0, 4)})


def test_api_versions_error_answer_with_its_own_versions():
    # KIP-511: UNSUPPORTED_VERSION (35) still lists ApiVersions' own range
    assert transport.decode_api_versions(H("00000001" "0023" "00000001" "0012" "0000" "0003")) == (35, {18: (0, 3)})


# -- FindCoordinator --------------------------------------------------------------------------
def test_find_coordinator_v0():
    req = m.FIND_COORDINATOR.encode_request(0, 7, wire.find_request(0, ["my-group"]))
    assert req == _frame(H("000a" "0000" "00000007") + CLIENT + H("0008") + b"my-group")
    resp = H("00000007" "0000" "00000002" "0009") + b"127.0.0.1" + H("00009a44")
    assert decode_find_coordinator(0, resp, ["my-group"]) == \
        (7, [wire.Coordinator("my-group", 0, 2, "127.0.0.1", 39492)])


def test_find_coordinator_v1_adds_key_type_throttle_and_message():
    body = find_coordinator_body(1, ["g"])
    assert body == H("0001") + b"g" + H("00")              # key, key type 0 (group)
    resp = (H("00000003" "00000000" "000f" "0005") + b"no ld"  # throttle, error 15, message "no ld"
            + H("ffffffff" "0000" "ffffffff"))                # node -1, host "", port -1
    assert decode_find_coordinator(1, resp, ["g"]) == (3, [wire.Coordinator("g", 15, -1, "", -1)])


def test_find_coordinator_v3_is_flexible():
    req = m.FIND_COORDINATOR.encode_request(3, 1, wire.find_request(3, ["gé"]))
    # header v2 (client id keeps its int16 length, then empty tags); compact key: varint 3+1, key type, tags
    assert req == _frame(H("000a" "0003" "00000001") + CLIENT + H("00") + H("04") + "gé".encode() + H("00" "00"))
    resp = (H("00000001" "00"           # correlation id, header tags
              "00000000" "0000" "00"    # throttle, error 0, null compact message
              "00000001" "0a") + b"127.0.0.1" + H("00009a44" "00"))
    assert decode_find_coordinator(3, resp, ["gé"]) == (1, [wire.Coordinator("gé", 0, 1, "127.0.0.1", 39492)])


def test_find_coordinator_v4_batches_keys():
    body = find_coordinator_body(4, ["a", "bc"])
    assert body == H("00" "03" "02") + b"a" + H("03") + b"bc" + H("00")  # key type, 2 keys, tags
    resp = (H("00000009" "00" "00000000"
              "03"                                                     # 2 coordinators
              "02") + b"a" + H("00000001" "0a") + b"127.0.0.1" + H("00009a44" "0000" "00" "00")
            + H("03") + b"bc" + H("ffffffff" "01" "ffffffff" "000f" "03") + b"no" + H("00")
            + H("00"))
    assert decode_find_coordinator(4, resp, ["a", "bc"]) == (9, [
        wire.Coordinator("a", 0, 1, "127.0.0.1", 39492), wire.Coordinator("bc", 15, -1, "", -1)])


def test_find_coordinator_before_v4_takes_one_key():
    with pytest.raises(ValueError, match="exactly one key"):
        find_coordinator_body(3, ["a", "b"])


def test_long_group_names_get_multi_byte_varints():
    name = "x" * 200  # 201 = 0xc9 0x01 as an unsigned varint
    assert find_coordinator_body(4, [name]) == H("00" "02" "c901") + name.encode() + H("00")


def test_group_id_longer_than_kafka_allows_is_refused():
    with pytest.raises(ValueError, match="longer than Kafka's 32767"):
        find_coordinator_body(0, ["é" * 20000])


# -- DescribeGroups ---------------------------------------------------------------------------
V0_GROUP = (H("0000" "0001") + b"g" + H("0006") + b"Stable" + H("0008") + b"consumer" + H("0005") + b"range"
            + H("00000001" "0002") + b"m1" + H("0002") + b"c1" + H("000a") + b"/127.0.0.1"
            + H("00000002" "abcd" "00000000"))


def test_describe_groups_v0():
    assert describe_groups_body(0, ["g", "h"]) == H("00000002" "0001") + b"g" + H("0001") + b"h"
    cid, groups = decode_describe_groups(0, H("00000005" "00000001") + V0_GROUP)
    assert cid == 5 and groups == [wire.DescribedGroup(0, "g", "Stable", "consumer", "range", (
        wire.GroupMember("m1", None, "c1", "/127.0.0.1"),))]


def test_describe_groups_v1_adds_throttle_time():
    cid, groups = decode_describe_groups(1, H("00000005" "00000064" "00000001") + V0_GROUP)
    assert [g.state for g in groups] == ["Stable"]


def test_describe_groups_v3_asks_no_authorized_operations():
    assert describe_groups_body(3, ["g"]) == H("00000001" "0001") + b"g" + H("00")
    resp = (H("00000000" "00000000" "00000001" "0010" "0001") + b"g" + H("0004") + b"Dead" + H("0000" "0000")
            + H("00000000" "80000000"))                    # no members, authorized operations unset
    assert decode_describe_groups(3, resp)[1] == [wire.DescribedGroup(16, "g", "Dead", "", "", ())]


def test_describe_groups_v4_has_group_instance_ids():
    member = (H("0002") + b"m1" + H("0003") + b"gi1" + H("0002") + b"c1" + H("0001") + b"h"
              + H("ffffffff" "ffffffff"))
    resp = (H("00000000" "00000000" "00000001" "0000" "0001") + b"g" + H("0005") + b"Empty" + H("0000" "0000")
            + H("00000002") + member
            + H("0002") + b"m2" + H("ffff" "0002") + b"c2" + H("0001") + b"h" + H("00000000" "00000000")
            + H("80000000"))
    (g,) = decode_describe_groups(4, resp)[1]
    assert g.members == (wire.GroupMember("m1", "gi1", "c1", "h"), wire.GroupMember("m2", None, "c2", "h"))


def test_describe_groups_v5_is_flexible():
    assert describe_groups_body(5, ["g"]) == H("02" "02") + b"g" + H("00" "00")
    resp = (H("00000002" "00" "00000000"
              "02"                                                  # 1 group
              "0000" "02") + b"g" + H("07") + b"Stable" + H("09") + b"consumer" + H("06") + b"range"
            + H("02")                                               # 1 member
            + H("03") + b"m1" + H("00") + H("03") + b"c1" + H("0a") + b"127.0.0.1"
            + H("03" "abcd" "01")                                   # metadata 2 bytes, assignment empty
            + H("01" "00" "02" "aaaa")                              # member tags: one unknown tag skipped
            + H("80000000" "00")                                    # authorized operations, group tags
            + H("00"))
    cid, groups = decode_describe_groups(5, resp)
    assert cid == 2 and groups == [wire.DescribedGroup(0, "g", "Stable", "consumer", "range", (
        wire.GroupMember("m1", None, "c1", "127.0.0.1"),))]


def test_truncated_response_is_an_error_not_garbage():
    with pytest.raises(Exception) as e:
        decode_describe_groups(5, H("00000002" "00" "00000000" "02" "0000" "7f") + b"short")
    assert isinstance(e.value, wire.struct.error)


# -- negotiation with servers that cannot answer ApiVersions ----------------------------------
class StandIn:
    """A socket server standing in for a broker in the cases no real broker here shows (an error
    answer without versions) or that cost a whole lab (0.9's silence is also checked on the real
    0.9 lab in tests/integration). `on_api_versions`: "error" answers UNSUPPORTED_VERSION with no
    versions, "silent" never answers (what 0.9 does). FindCoordinator gets COORDINATOR_NOT_AVAILABLE
    in v0 form."""

    def __init__(self, on_api_versions: str):
        self.mode = on_api_versions
        self.srv = socket.create_server(("127.0.0.1", 0))
        self.port = self.srv.getsockname()[1]
        self.seen: list[tuple[int, int]] = []
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()

    def _one(self, conn):
        with conn:
            f = conn.makefile("rb")
            while True:
                head = f.read(4)
                if len(head) < 4:
                    return
                req = f.read(int.from_bytes(head, "big"))
                key, ver, cid = int.from_bytes(req[0:2], "big"), int.from_bytes(req[2:4], "big"), req[4:8]
                self.seen.append((key, ver))
                if key == 18:
                    if self.mode == "error":
                        conn.sendall(_frame(cid + H("0023" "00000000")))
                    continue
                conn.sendall(_frame(cid + H("000f" "ffffffff" "0000" "ffffffff")))

    def close(self):
        self.srv.close()


@pytest.fixture
def stand_in(request):
    s = StandIn(request.param)
    yield s
    s.close()


@pytest.mark.parametrize("stand_in", ["error"], indirect=True)
def test_broker_answering_api_versions_with_a_bare_error_is_spoken_to_in_version_0(stand_in):
    answers = wire.probe(f"127.0.0.1:{stand_in.port}", ["g"], timeout=5)
    assert stand_in.seen == [(18, 0), (10, 0)] and stand_in.connections == 1
    assert answers["g"].lookup_error == "COORDINATOR_NOT_AVAILABLE"


@pytest.mark.parametrize("stand_in", ["silent"], indirect=True)
def test_broker_leaving_api_versions_unanswered_is_spoken_to_in_version_0(stand_in, monkeypatch):
    monkeypatch.setattr(transport, "API_VERSIONS_TIMEOUT", 0.5)
    answers = wire.probe(f"127.0.0.1:{stand_in.port}", ["g"], timeout=5)
    assert stand_in.seen == [(18, 0), (10, 0)] and stand_in.connections == 2  # a fresh connection for v0
    assert answers["g"].lookup_error == "COORDINATOR_NOT_AVAILABLE"


@pytest.mark.parametrize("stand_in", ["silent"], indirect=True)
def test_a_cluster_known_to_predate_api_versions_is_not_asked(stand_in):
    answers = wire.probe(f"127.0.0.1:{stand_in.port}", ["g"], timeout=5, api_versions=False)
    assert stand_in.seen == [(10, 0)]
    assert answers["g"].lookup_error == "COORDINATOR_NOT_AVAILABLE"


# -- consumer-protocol assignments in DescribeGroups ------------------------------------------
ASSIGNMENT = H("0000" "00000002" "0001") + b"t" + H("00000002" "00000002" "00000000") + H("0002") + b"a/" \
    + H("00000001" "00000007" "ffffffff")  # version 0, t: [2, 0], a/: [7], null user data


def test_member_assignments_are_decoded_for_consumer_groups():
    assert wire.decode_consumer_assignment(ASSIGNMENT) == (("a/", 7), ("t", 0), ("t", 2))
    assert wire.decode_consumer_assignment(b"") is None          # rebalancing: the broker sends none
    assert wire.decode_consumer_assignment(H("0000" "0000")) is None  # cut short: unknown, not empty
    group = (H("0000" "0001") + b"g" + H("0006") + b"Stable" + H("0008") + b"consumer" + H("0005") + b"range"
             + H("00000001" "0002") + b"m1" + H("0002") + b"c1" + H("0001") + b"h"
             + H("00000000") + len(ASSIGNMENT).to_bytes(4, "big") + ASSIGNMENT)
    (g,) = decode_describe_groups(0, H("00000000" "00000001") + group)[1]
    assert g.members[0].assignment == (("a/", 7), ("t", 0), ("t", 2))
    connect = group.replace(H("0008") + b"consumer", H("0007") + b"connect")
    (g,) = decode_describe_groups(0, H("00000000" "00000001") + connect)[1]
    assert g.members[0].assignment is None  # another protocol's bytes are not read as partitions


@pytest.mark.parametrize("broker_state, name", [
    ("Stable", "Stable"), ("Empty", "Empty"), ("Dead", "Dead"), ("PreparingRebalance", "PreparingRebalance"),
    ("AwaitingSync", "CompletingRebalance"), ("CompletingRebalance", "CompletingRebalance"),
])
def test_descriptions_from_the_wire_use_kafkas_state_names(broker_state, name):
    from fleetkit.clients.kafka import description_from_answer

    member = wire.GroupMember("m1", None, "c1", "/10.0.0.7", (("t", 0),))
    a = wire.Answer(group="g", coordinator_id=2, coordinator="h:1", state=broker_state, described=(member,))
    d = description_from_answer(a)
    assert (d.state, d.coordinator_id, d.error) == (name, 2, None)
    assert [(m.client_id, m.host, m.assignment) for m in d.members] == [("c1", "10.0.0.7", (("t", 0),))]
    failed = description_from_answer(wire.Answer(group="g", coordinator_id=2, describe_error="NOT_COORDINATOR"))
    assert (failed.state, failed.error, failed.members) == ("Unknown", "NOT_COORDINATOR", ())


# -- Metadata v7-v8: leaders with their epochs (KRaft clusters have no ZooKeeper to read) ------
def test_metadata_v8_request_never_creates_topics():
    assert metadata_body(8, ["t"]) == H("00000001" "0001") + b"t" + H("00" "00" "00")
    assert metadata_body(7, ["t"]) == H("00000001" "0001") + b"t" + H("00")
    assert m.METADATA.pick_version(None, wire.LEADER_EPOCHS_FROM) is None          # 0.9: no epochs in metadata
    assert m.METADATA.pick_version({3: (0, 13)}, wire.LEADER_EPOCHS_FROM) == 8
    assert m.METADATA.pick_version({3: (0, 5)}, wire.LEADER_EPOCHS_FROM) is None   # before 1.0
    assert m.METADATA.pick_version(None) == 0                # the log reader's leaders on 0.9


def test_metadata_v8_response():
    resp = (H("00000000" "00000000"
              "00000001" "00000001" "0009") + b"127.0.0.1" + H("00009a44" "ffff")   # broker 1, no rack
            + H("0003") + b"cid" + H("00000001")                                       # cluster id, controller
            + H("00000002")
            + H("0000" "0001") + b"t" + H("00" "00000001"                            # topic t, not internal
                "0000" "00000002" "00000001" "00000007"                              # p2 leader 1 epoch 7
                "00000002" "00000001" "00000002" "00000001" "00000001" "00000000"    # replicas [1,2], isr [1]
                "80000000")
            + H("0003" "0004") + b"nope" + H("00" "00000000" "80000000")             # UNKNOWN_TOPIC_OR_PARTITION
            + H("80000000"))
    cid, brokers, errors, parts = decode_metadata(8, resp)
    assert brokers == {1: "127.0.0.1:39492"} and errors == {"nope": 3}
    assert parts == [wire.PartitionLeader("t", 2, 0, 1, 7, (1, 2), (1,))]


def test_partition_state_without_zookeeper_carries_leader_epochs():
    from fleetkit.clients.offsets_leaders import LeaderState, partition_leaders

    class Kafka:
        def leader_epochs(self, topics):
            return ([wire.PartitionLeader("t", 1, 0, -1, 4, (1, 2), ()),
                     wire.PartitionLeader("t", 0, 0, 2, 9, (2, 1), (2, 1))], {"gone": "UNKNOWN_TOPIC_OR_PARTITION"})

    problems = []
    assert partition_leaders(Kafka(), None, ["t", "gone"], problems) == [
        LeaderState("t", 0, 2, (2, 1), 9, None, "metadata"), LeaderState("t", 1, -1, (), 4, None, "metadata")]
    assert problems == ["topic 'gone': metadata answered UNKNOWN_TOPIC_OR_PARTITION", "partition t-1 has no leader"]


# -- ConsumerGroupDescribe (KIP-848 groups) -----------------------------------------------------
def _cs(s: str) -> bytes:  # compact string
    b = s.encode()
    return bytes([len(b) + 1]) + b


def _cgd_response(version: int) -> bytes:
    """ConsumerGroupDescribe response: one Reconciling group (epoch 7) with one member at epoch 6
    holding t-0 and t-2 (target t-0..2), and one classic group answered GROUP_ID_NOT_FOUND."""
    topic_id = bytes(range(16))
    assignment = H("02") + topic_id + _cs("t") + H("03") + H("00000000") + H("00000002") + H("00") + H("00")
    target = H("02") + topic_id + _cs("t") + H("04") + H("00000000 00000001 00000002".replace(" ", "")) + H("00") + H("00")
    member = (_cs("m-1") + H("00") + H("00") + H("00000006") + _cs("cli") + _cs("/10.0.0.9")
              + H("02") + _cs("t") + H("00") + assignment + target
              + (H("01") if version >= 1 else b"") + H("00"))
    g1 = (H("0000") + H("00") + _cs("g ĝ") + _cs("Reconciling") + H("00000007") + H("00000007") + _cs("uniform")
          + H("02") + member + H("80000000") + H("00"))
    g2 = (H("0045") + _cs("Group classic is not a consumer group.") + _cs("classic") + _cs("") + H("00000000")
          + H("00000000") + _cs("") + H("01") + H("80000000") + H("00"))
    return H("00000005") + H("00") + H("00000000") + H("03") + g1 + g2 + H("00")


def test_consumer_group_describe_request_v0():
    body = consumer_group_describe_body(0, ["g ĝ", "b"])
    assert body == H("03") + _cs("g ĝ") + _cs("b") + H("00") + H("00")


@pytest.mark.parametrize("version", [0, 1])
def test_consumer_group_describe_response(version):
    cid, groups = decode_consumer_group_describe(version, _cgd_response(version))
    assert cid == 5
    g, classic = groups
    assert (g.error, g.group, g.state, g.group_epoch, g.assignment_epoch) == (0, "g ĝ", "Reconciling", 7, 7)
    (m,) = g.members
    assert (m.member_id, m.client_id, m.client_host, m.member_epoch) == ("m-1", "cli", "/10.0.0.9", 6)
    assert m.assignment == (("t", 0), ("t", 2))
    assert (classic.error, classic.group, classic.members) == (69, "classic", ())


def test_consumer_group_describe_is_never_sent_to_a_broker_without_api_versions():
    # 0.9 answers no ApiVersions: version 0 of what it knows, never an API it predates
    assert m.CONSUMER_GROUP_DESCRIBE.pick_version({m.DESCRIBE_GROUPS.key: (0, 5)}) is None
    assert m.CONSUMER_GROUP_DESCRIBE.pick_version({69: (0, 1)}) == 1


# -- Kafka 0.9 (no ApiVersions): Metadata v0 and Fetch v0 ----------------------------------------
def test_metadata_v0_request_and_response():
    assert metadata_body(0, ["t"]) == H("00000001" "0001") + b"t"  # no auto-creation flag before v4
    resp = (H("00000005"
              "00000001" "00000000" "0009") + b"127.0.0.1" + H("00004a44")           # broker 0, no rack
            + H("00000001")
            + H("0000" "0001") + b"t" + H("00000001"                                  # topic t (no internal flag)
                "0000" "00000003" "00000000"                                         # p3 leader 0 (no epoch)
                "00000001" "00000000" "00000001" "00000000"))                        # replicas [0], isr [0]
    cid, brokers, errors, parts = decode_metadata(0, resp)
    assert cid == 5 and brokers == {0: "127.0.0.1:19012"} and errors == {}
    assert parts == [wire.PartitionLeader("t", 3, 0, 0, -1, (0,), (0,))]


def test_fetch_v0_request_and_response():
    from fleetkit.clients import wire_logs

    assert body(m.FETCH, 0, wire_logs.fetch_request("t", {2: 40}, 32 << 20, 8 << 20, max_wait_ms=100)) == (H("ffffffff" "00000064" "00000001")                     # replica, max wait, min bytes
                    + H("00000001" "0001") + b"t" + H("00000001" "00000002" "0000000000000028" "00800000"))
    records = b"\x00" * 30
    resp = (H("00000007" "00000001" "0001") + b"t"
            + H("00000001" "00000002" "0000" "0000000000000064" "0000001e") + records)   # no throttle, no LSO
    (fp,) = wire_logs.fetched(m.FETCH.decode_response(0, resp)[1])
    assert (fp.partition, fp.error, fp.high_watermark, fp.last_stable_offset, fp.records) == (2, None, 100, -1, records)


def test_kip848_description_carries_the_group_epoch():
    from fleetkit.clients.kafka import description_from_answer

    member = wire.GroupMember("m1", None, "c1", "/10.0.0.7", (("t", 0),), member_epoch=12)
    a = wire.Answer(group="g", coordinator_id=2, state="Stable", described=(member,), group_type="consumer",
                    group_epoch=12, assignor="uniform")
    d = description_from_answer(a)
    assert (d.group_type, d.group_epoch, d.assignor, d.members[0].member_epoch) == ("consumer", 12, "uniform", 12)
    assert description_from_answer(wire.Answer(group="c", coordinator_id=2, state="Stable")).group_epoch is None

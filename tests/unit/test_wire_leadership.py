"""AlterPartitionReassignments / ListPartitionReassignments v0 on the wire
(fleetkit.clients.wire_leadership): the request bytes, and answers built by hand per Kafka's
message schemas (flexible: compact strings and arrays, tagged fields)."""

import struct

import pytest

from fleetkit.clients import wire
from fleetkit.clients import wire_leadership as wl


def _cstr(s):
    if s is None:
        return b"\x00"
    b = s.encode()
    return wire._uvarint(len(b) + 1) + b


def _carr(items):
    return wire._uvarint(len(items) + 1) + b"".join(items)


def test_alter_request_layout():
    topic = "__consumer_offsets"
    req = wl._request(wl.ALTER_REASSIGNMENTS, 7, wl.alter_body(30000, topic, {11: [2, 0, 1]}))
    size, key, version, cid = struct.unpack(">ihhi", req[:12])
    assert (size, key, version, cid) == (len(req) - 4, 45, 0, 7)
    r = wire.Reader(req[12:])
    assert r.string() == "fleetkit"  # client id: int16 length even in header v2
    r.skip_tags()
    assert r.int32() == 30000
    assert r.array_len(True) == 1 and r.string(True) == topic
    assert r.array_len(True) == 1 and r.int32() == 11
    assert [r.int32() for _ in range(r.array_len(True))] == [2, 0, 1]
    for _ in range(3):  # partition, topic, request tags
        r.skip_tags()
    assert r.pos == len(req) - 12  # nothing left over


def test_a_null_replica_list_cancels():
    body = wl.alter_body(1000, "t", {0: None})
    # timeout, 1 topic, "t", 1 partition, partition 0, null array (0), tags x3
    assert body == struct.pack(">i", 1000) + b"\x02" + b"\x02t" + b"\x02" + struct.pack(">i", 0) + b"\x00" \
        + b"\x00" + b"\x00" + b"\x00"


def _response(body: bytes) -> bytes:
    return struct.pack(">i", 1) + b"\x00" + body  # correlation id, header v1 tags


def test_decode_alter_per_partition_error_and_top_level_error():
    part = struct.pack(">ih", 11, 60) + _cstr("reassignment in progress") + b"\x00"
    topic = _cstr("__consumer_offsets") + _carr([part]) + b"\x00"
    ok = _response(struct.pack(">ih", 0, 0) + _cstr(None) + _carr([topic]) + b"\x00")
    err, parts = wl.decode_alter(ok)
    assert err is None
    assert parts == {("__consumer_offsets", 11): "KAFKA_ERROR_60: reassignment in progress"}
    refused = _response(struct.pack(">ih", 0, 41) + _cstr("not the controller") + _carr([]) + b"\x00")
    assert wl.decode_alter(refused) == ("KAFKA_ERROR_41: not the controller", {})


def test_decode_list():
    ints = lambda xs: _carr([struct.pack(">i", x) for x in xs])  # noqa: E731
    part = struct.pack(">i", 3) + ints([0, 1, 2]) + ints([2]) + ints([]) + b"\x00"
    topic = _cstr("orders") + _carr([part]) + b"\x00"
    err, moving = wl.decode_list(_response(struct.pack(">ih", 0, 0) + _cstr(None) + _carr([topic]) + b"\x00"))
    assert err is None and moving == {("orders", 3): {"replicas": [0, 1, 2], "adding": [2], "removing": []}}


def test_no_server_answers_names_the_request():
    with pytest.raises(wl.ReassignmentError, match="AlterPartitionReassignments"):
        wl.alter_replicas("127.0.0.1:1", "t", 0, [0, 1], timeout=1)

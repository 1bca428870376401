"""AlterPartitionReassignments / ListPartitionReassignments v0 on the wire
(fleetkit.clients.wire_leadership): the request bytes, and answers built by hand per Kafka's
message schemas (flexible: compact strings and arrays, tagged fields)."""

import struct

import pytest

from fleetkit.clients import wire_leadership as wl
from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol.schema import uvarint

ALTER, LIST = m.ALTER_PARTITION_REASSIGNMENTS, m.LIST_PARTITION_REASSIGNMENTS
HEADER = 4 + 8 + 2 + len("fleetkit") + 1  # size, key/version/correlation id, client id, header tags


def _cstr(s):
    if s is None:
        return b"\x00"
    b = s.encode()
    return uvarint(len(b) + 1) + b


def _carr(items):
    return uvarint(len(items) + 1) + b"".join(items)


def test_alter_request_layout():
    topic = "__consumer_offsets"
    req = ALTER.encode_request(0, 7, wl.alter_request(30000, topic, {11: [2, 0, 1]}))
    size, key, version, cid = struct.unpack(">ihhi", req[:12])
    assert (size, key, version, cid) == (len(req) - 4, 45, 0, 7)
    assert req[12:HEADER] == b"\x00\x08fleetkit\x00"  # client id: int16 length even in header v2, then tags
    ints = b"".join(struct.pack(">i", x) for x in (2, 0, 1))
    assert req[HEADER:] == (struct.pack(">i", 30000) + _carr([_cstr(topic) + _carr([struct.pack(">i", 11) + _carr(
        [ints[i:i + 4] for i in range(0, 12, 4)]) + b"\x00"]) + b"\x00"]) + b"\x00")


def test_a_null_replica_list_cancels():
    body = ALTER.encode_request(0, 0, wl.alter_request(1000, "t", {0: None}))[HEADER:]
    # timeout, 1 topic, "t", 1 partition, partition 0, null array (0), tags x3
    assert body == struct.pack(">i", 1000) + b"\x02" + b"\x02t" + b"\x02" + struct.pack(">i", 0) + b"\x00" \
        + b"\x00" + b"\x00" + b"\x00"


def _response(body: bytes) -> bytes:
    return struct.pack(">i", 1) + b"\x00" + body  # correlation id, header v1 tags


def test_decode_alter_per_partition_error_and_top_level_error():
    part = struct.pack(">ih", 11, 60) + _cstr("reassignment in progress") + b"\x00"
    topic = _cstr("__consumer_offsets") + _carr([part]) + b"\x00"
    ok = _response(struct.pack(">ih", 0, 0) + _cstr(None) + _carr([topic]) + b"\x00")
    err, parts = wl.alter_problems(ALTER.decode_response(0, ok)[1])
    assert err is None
    assert parts == {("__consumer_offsets", 11): "KAFKA_ERROR_60: reassignment in progress"}
    refused = _response(struct.pack(">ih", 0, 41) + _cstr("not the controller") + _carr([]) + b"\x00")
    assert wl.alter_problems(ALTER.decode_response(0, refused)[1]) == ("KAFKA_ERROR_41: not the controller", {})


def test_decode_list():
    ints = lambda xs: _carr([struct.pack(">i", x) for x in xs])  # noqa: E731
    part = struct.pack(">i", 3) + ints([0, 1, 2]) + ints([2]) + ints([]) + b"\x00"
    topic = _cstr("orders") + _carr([part]) + b"\x00"
    answer = LIST.decode_response(0, _response(struct.pack(">ih", 0, 0) + _cstr(None) + _carr([topic]) + b"\x00"))[1]
    err, moving = wl.in_progress(answer)
    assert err is None and moving == {("orders", 3): {"replicas": [0, 1, 2], "adding": [2], "removing": []}}


def test_no_server_answers_names_the_request():
    with pytest.raises(wl.ReassignmentError, match="AlterPartitionReassignments"):
        wl.alter_replicas("127.0.0.1:1", "t", 0, [0, 1], timeout=1)

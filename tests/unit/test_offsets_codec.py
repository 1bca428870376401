"""__consumer_offsets decoding: every key and value version, tombstones, corrupt input, the CLI."""

import json
import struct

import pytest

from fleetkit.trim.cleaner import buffer_for, capacity
from fleetkit.clients.offsets_codec import (DecodeError, decode, encode_group_key, encode_offset_key,
                                    encode_offset_value_v1)


def i16(v): return struct.pack(">h", v)
def i32(v): return struct.pack(">i", v)
def i64(v): return struct.pack(">q", v)
def s(t): return i16(-1) if t is None else i16(len(t.encode())) + t.encode()
def cs(t): return b"\x00" if t is None else bytes([len(t.encode()) + 1]) + t.encode()  # short compact string
def b(x): return i32(len(x)) + x
def cb(x): return bytes([len(x) + 1]) + x


KEY = encode_offset_key("grp", "orders", 7)


@pytest.mark.parametrize("value, expected", [
    (i16(0) + i64(42) + s("meta") + i64(1000), {"value_version": 0, "offset": 42, "metadata": "meta",
                                                "commit_timestamp": 1000}),
    (encode_offset_value_v1(42, "m1\x00", 1000, 2000), {"value_version": 1, "offset": 42, "metadata": "m1\x00",
                                                        "commit_timestamp": 1000, "expire_timestamp": 2000}),
    (i16(2) + i64(43) + s("") + i64(1001), {"value_version": 2, "offset": 43, "metadata": "", "commit_timestamp": 1001}),
    (i16(3) + i64(44) + i32(5) + s(None) + i64(1002), {"value_version": 3, "offset": 44, "leader_epoch": 5,
                                                      "metadata": None, "commit_timestamp": 1002}),
    (i16(4) + i64(45) + i32(6) + cs("m") + i64(1003) + b"\x01\x00\x02ab",
     {"value_version": 4, "offset": 45, "leader_epoch": 6, "metadata": "m", "commit_timestamp": 1003}),
])
def test_offset_commit_values(value, expected):
    out = decode(KEY, value)
    assert out == {"key_version": 1, "kind": "offset_commit", "group": "grp", "topic": "orders", "partition": 7,
                   "tombstone": False, **expected}


def _member(v, mid="m-1", cid="c ü", host="/10.0.0.7"):
    flexible = v >= 4
    st, by = (cs, cb) if flexible else (s, b)
    out = st(mid)
    if v >= 3:
        out += st(None)
    out += st(cid) + st(host)
    if v >= 1:
        out += i32(300000)
    out += i32(10000) + by(b"sub") + by(b"assign!")
    if flexible:
        out += b"\x00"
    return out


@pytest.mark.parametrize("v", [0, 1, 2, 3, 4])
def test_group_metadata_values(v):
    flexible = v >= 4
    st = cs if flexible else s
    value = i16(v) + st("consumer") + i32(9) + st("range") + st("m-1")
    if v >= 2:
        value += i64(12345)
    value += (bytes([2]) if flexible else i32(1)) + _member(v)
    if flexible:
        value += b"\x00"
    out = decode(encode_group_key("grp"), value)
    assert (out["key_version"], out["value_version"], out["group"], out["generation"], out["protocol"],
            out["leader"]) == (2, v, "grp", 9, "range", "m-1")
    m = out["members"][0]
    assert (m["member_id"], m["client_id"], m["client_host"], m["session_timeout"], m["subscription_size"],
            m["assignment_size"]) == ("m-1", "c ü", "/10.0.0.7", 10000, 3, 7)
    assert ("rebalance_timeout" in m) == (v >= 1) and ("group_instance_id" in m) == (v >= 3)
    assert ("current_state_timestamp" in out) == (v >= 2)


def test_tombstones_and_other_versions():
    assert decode(KEY, None) == {"key_version": 1, "kind": "offset_commit", "group": "grp", "topic": "orders",
                                 "partition": 7, "tombstone": True}
    assert decode(encode_group_key("g"), None)["tombstone"] is True
    # the newer record types are named, their key decoded (group, then member id or regex)
    assert decode(i16(3) + s("g"), i16(0) + i32(4) + b"\x00") == {
        "key_version": 3, "kind": "consumer_group_metadata", "group": "g", "tombstone": False, "value_version": 0,
        "epoch": 4}
    assert decode(i16(5) + s("g") + s("m1"), None) == {"key_version": 5, "kind": "consumer_group_member_metadata",
                                                        "group": "g", "member_id": "m1", "tombstone": True}
    assert decode(i16(16) + s("g") + s("orders.*"), None)["regex"] == "orders.*"
    assert decode(i16(11) + s("share"), i16(0) + b"whatever")["kind"] == "share_group_metadata"
    assert decode(i16(23) + s("streams"), i16(0))["kind"] == "streams_group_topology"
    # types only some releases write (Kafka's message specs: 9 and 18 in some, 24 in the newest sources)
    assert [decode(i16(v) + s("g"), None)["kind"] for v in (9, 18, 24)] == [
        "share_group_partition_metadata", "streams_group_partition_metadata",
        "streams_group_target_assignment_resolved_topic_ids"]
    # versions this decoder does not know: kind "unknown" with the version, never an error
    for v in (25, 99, -1, 9999):
        assert decode(i16(v) + b"whatever", b"x") == {"key_version": v, "kind": "unknown", "tombstone": False}


@pytest.mark.parametrize("key, value, message", [
    (encode_offset_key("grp", "orders", 7)[:-2], None, "truncated reading partition"),
    (KEY, i16(1) + i64(1), "truncated reading metadata"),
    (KEY, i16(9) + i64(1), "unknown offset-commit value version 9"),
    (encode_group_key("g"), i16(0) + s("consumer") + i32(1) + s("r") + s("l") + i32(3), "truncated reading members"),
    (i16(0) + i16(2) + b"\xff\xfe" + s("t") + i32(0), None, "not valid UTF-8"),
    (i16(0) + i16(-5), None, "negative length -5 for group"),
])
def test_corrupt_input_is_named(key, value, message):
    with pytest.raises(DecodeError, match=message):
        decode(key, value, "__consumer_offsets-3 offset 17")
    with pytest.raises(DecodeError, match="__consumer_offsets-3 offset 17"):
        decode(key, value, "__consumer_offsets-3 offset 17")


def test_cli_decode(capsys):
    from fleetctl.cli import main

    assert main(["offsets", "decode", "--key", KEY.hex(), "--value",
                 encode_offset_value_v1(42, "m1\x00", 1000, 2000).hex()]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out == {"key_version": 1, "group": "grp", "topic": "orders", "partition": 7, "tombstone": False,
                   "value_version": 1, "offset": 42, "metadata": "m1\x00", "commit_timestamp": 1000,
                   "expire_timestamp": 2000}
    assert main(["offsets", "decode", "--key", KEY.hex()]) == 0
    assert json.loads(capsys.readouterr().out)["tombstone"] is True
    assert main(["offsets", "decode", "--key", "zz"]) == 2
    assert main(["offsets", "decode", "--key", KEY.hex()[:-4]]) == 2
    assert "truncated" in capsys.readouterr().err


def test_cleaner_capacity():
    assert capacity(128 * 2**20, 1, 0.9)["slots"] == 5_592_405
    assert capacity(128 * 2**20, 1, 0.9)["keys_per_pass"] == 5_033_164
    assert capacity(2 * 2**20)["keys_per_pass"] == 78_642
    big = capacity(8 * 2**30, 2)
    assert big["capped_at_2gib"] and big["bytes_per_thread"] == 2**31 - 1
    assert capacity(8 * 2**30, 2)["slots"] == (2**31 - 1) // 24
    with pytest.raises(ValueError, match="threads must be positive"):
        capacity(2**20, 0)
    need = buffer_for(1_550_080)
    assert capacity(need)["keys_per_pass"] >= 1_550_080 * 1.25 - 1
    assert need % 2**20 == 0


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from fleetkit.clients.offsets_codec import _fast, decode_key, decode_offset_value  # noqa: E402

text = st.text(st.characters(exclude_categories=("Cs",)), max_size=30)


@settings(max_examples=300, deadline=None)
@given(text, text, st.integers(-2**31, 2**31 - 1), st.integers(0, 2**62), st.one_of(st.none(), text),
       st.integers(0, 2), st.booleans())
def test_fast_path_agrees_with_the_careful_decoder(group, topic, partition, offset, meta, vv, tomb):
    key = encode_offset_key(group, topic, partition)
    if tomb:
        value = None
    elif vv == 1:
        value = encode_offset_value_v1(offset, meta, 5, 6)
    else:
        value = i16(vv) + i64(offset) + s(meta) + i64(5)
    slow = dict(decode_key(key), tombstone=value is None)
    if value is not None:
        slow.update(decode_offset_value(value))
    assert _fast(key, value) == slow
    # and any truncation falls back to the careful path's error
    if value is not None:
        with pytest.raises(DecodeError):
            decode(key, value[:-1])


@pytest.mark.parametrize("meta", [None, "", "m", "x" * 100, "ü" * 60, "y" * 200])
@pytest.mark.parametrize("tags", [b"\x00", b"\x01\x00\x10" + b"a" * 16])
def test_fast_path_of_values_v3_v4_agrees_with_the_careful_decoder(meta, tags):
    """3.x writes offset-commit value v3, 4.x v4 (flexible, the topic id as tagged field 0)."""
    for value in (i16(3) + i64(7) + i32(3) + s(meta) + i64(99),
                  i16(4) + i64(7) + i32(3) + (cs(meta) if meta is None or len(meta.encode()) < 127 else
                                              b"\xc9\x01" + meta.encode()) + i64(99) + tags):
        careful = {**decode_key(KEY), "tombstone": False, **decode_offset_value(value)}
        fast = _fast(KEY, value)
        assert fast is None or fast == careful
        assert decode(KEY, value) == careful
    assert _fast(KEY, i16(3) + i64(7) + i32(3) + s("m") + i64(99)) is not None

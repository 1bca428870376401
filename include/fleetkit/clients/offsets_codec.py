"""Decode __consumer_offsets records (the formats of Kafka's GroupMetadataManager and its group-coordinator message specs).

Keys start with an int16 version, which is the record type: 0 and 1 are offset-commit keys (group,
topic, partition), 2 is a group-metadata key (group). 3-8 and 16 are the records of the consumer
group protocol (KIP-848, Kafka 4.x): group metadata (epoch), partition metadata, member metadata,
target assignment metadata and member, current member assignment, regular expression; they are
decoded (tagged fields skipped). 9-15 (share groups; 9, partition metadata, only in the releases
that wrote it) and 17-24 (streams groups; 18, partition metadata, and 24, the target assignment's
resolved topic ids, likewise) are named and their key decoded. Any other version is kind
"unknown" with its version (counted by the reader, never an error). Keys are never flexible
(int16-length strings); the values of types 3-24 are flexible (compact strings and arrays, tagged
fields).

Values: offset commit v0-v4 (v4 flexible: compact strings, tagged fields), group metadata v0-v4
(v4 flexible). A missing value is a tombstone. Strings are returned exactly as stored (librdkafka
stores commit metadata with a trailing NUL: "m1" is stored, and decoded, as "m1\\x00").
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")

KNOWN_KEY_KINDS = {0: "offset_commit", 1: "offset_commit", 2: "group_metadata",
                   3: "consumer_group_metadata", 4: "consumer_group_partition_metadata",
                   5: "consumer_group_member_metadata", 6: "consumer_group_target_assignment_metadata",
                   7: "consumer_group_target_assignment_member", 8: "consumer_group_current_member_assignment",
                   9: "share_group_partition_metadata", 10: "share_group_member_metadata", 11: "share_group_metadata",
                   12: "share_group_target_assignment_metadata", 13: "share_group_target_assignment_member",
                   14: "share_group_current_member_assignment", 15: "share_group_state_partition_metadata",
                   16: "consumer_group_regular_expression", 17: "streams_group_metadata",
                   18: "streams_group_partition_metadata", 19: "streams_group_member_metadata", 20: "streams_group_target_assignment_metadata",
                   21: "streams_group_target_assignment_member", 22: "streams_group_current_member_assignment",
                   23: "streams_group_topology", 24: "streams_group_target_assignment_resolved_topic_ids"}
#: record types of the newer protocols (everything but the classic offset commits and group metadata)
OTHER_KEY_VERSIONS = tuple(v for v in KNOWN_KEY_KINDS if v > 2)
#: the second key field of the types keyed by (group, member id) or (group, regular expression)
_MEMBER_KEYED = {5, 7, 8, 10, 13, 14, 19, 21, 22}
_REGEX_KEYED = {16}


class DecodeError(ValueError):
    """Truncated or corrupt bytes. The message says what was being read at which byte."""


@dataclass
class Reader:
    data: bytes
    pos: int = 0
    what: str = ""

    def _need(self, n: int, field: str) -> None:
        if self.pos + n > len(self.data):
            raise DecodeError(f"{self.what}: truncated reading {field} at byte {self.pos} "
                              f"(needs {n}, {len(self.data) - self.pos} left)")

    def _fixed(self, fmt: struct.Struct, field: str) -> int:
        self._need(fmt.size, field)
        v = fmt.unpack_from(self.data, self.pos)[0]
        self.pos += fmt.size
        return v

    def i16(self, field: str) -> int:
        return self._fixed(_I16, field)

    def i32(self, field: str) -> int:
        return self._fixed(_I32, field)

    def i64(self, field: str) -> int:
        return self._fixed(_I64, field)

    def uvarint(self, field: str) -> int:
        shift = result = 0
        while True:
            self._need(1, field)
            b = self.data[self.pos]
            self.pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7
            if shift > 35:
                raise DecodeError(f"{self.what}: varint too long reading {field} at byte {self.pos}")

    def _text(self, n: int, field: str) -> str:
        self._need(n, field)
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError(f"{self.what}: {field} is not valid UTF-8 at byte {self.pos - n}") from None

    def string(self, field: str) -> str | None:
        n = self.i16(field)
        if n == -1:
            return None
        if n < -1:
            raise DecodeError(f"{self.what}: negative length {n} for {field} at byte {self.pos - 2}")
        return self._text(n, field)

    def compact_string(self, field: str) -> str | None:
        n = self.uvarint(field)
        return None if n == 0 else self._text(n - 1, field)

    def bytes_(self, field: str) -> bytes | None:
        n = self.i32(field)
        if n == -1:
            return None
        if n < -1:
            raise DecodeError(f"{self.what}: negative length {n} for {field}")
        self._need(n, field)
        raw = self.data[self.pos:self.pos + n]
        self.pos += n
        return raw

    def compact_bytes(self, field: str) -> bytes | None:
        n = self.uvarint(field)
        if n == 0:
            return None
        self._need(n - 1, field)
        raw = self.data[self.pos:self.pos + n - 1]
        self.pos += n - 1
        return raw

    def i8(self, field: str) -> int:
        self._need(1, field)
        v = self.data[self.pos]
        self.pos += 1
        return v - 256 if v > 127 else v

    def uuid(self, field: str) -> str:
        self._need(16, field)
        raw = self.data[self.pos:self.pos + 16]
        self.pos += 16
        return raw.hex()

    def compact_array(self, field: str) -> int:
        """The length of a compact array (-1 for null)."""
        return self.uvarint(f"{field} length") - 1

    def tagged_fields(self, field: str) -> None:
        for _ in range(self.uvarint(f"{field} tag count")):
            self.uvarint(f"{field} tag")
            size = self.uvarint(f"{field} tag size")
            self._need(size, field)
            self.pos += size


def decode_key(key: bytes, where: str = "key") -> dict:
    """{"key_version": v, "kind": ..., "group", ...}: "topic", "partition" for offset commits,
    "member_id" or "regex" for the newer types keyed by them; kind "unknown" for a version this
    decoder does not know (nothing else read)."""
    if key is None:
        raise DecodeError(f"{where}: a __consumer_offsets record always has a key")
    r = Reader(key, 0, where)
    v = r.i16("key version")
    if v in (0, 1):
        return {"key_version": v, "kind": "offset_commit", "group": r.string("group"), "topic": r.string("topic"),
                "partition": r.i32("partition")}
    kind = KNOWN_KEY_KINDS.get(v)
    if kind is None:
        return {"key_version": v, "kind": "unknown"}
    out = {"key_version": v, "kind": kind, "group": r.string("group")}
    if v in _MEMBER_KEYED:
        out["member_id"] = r.string("member_id")
    elif v in _REGEX_KEYED:
        out["regex"] = r.string("regular expression")
    return out


def _compact_strings(r: Reader, field: str) -> list:
    return [r.compact_string(f"{field}[{i}]") for i in range(max(r.compact_array(field), 0))]


def _topic_partitions(r: Reader, field: str) -> list[dict]:
    """[{"topic_id", "partitions"}] of a compact array of (uuid, []int32, tagged fields)."""
    out = []
    for i in range(max(r.compact_array(field), 0)):
        tid = r.uuid(f"{field}[{i}].topic_id")
        parts = [r.i32(f"{field}[{i}].partitions") for _ in range(max(r.compact_array(f"{field}[{i}].partitions"), 0))]
        r.tagged_fields(f"{field}[{i}]")
        out.append({"topic_id": tid, "partitions": parts})
    return out


def decode_consumer_group_value(kind_version: int, value: bytes, where: str = "value") -> dict:
    """The value of a consumer-group-protocol record (types 3-8, 16; value version 0, flexible).
    Other value versions and the share / streams types: only the value version."""
    r = Reader(value, 0, where)
    v = r.i16("value version")
    out: dict = {"value_version": v}
    if v != 0 or kind_version not in (3, 4, 5, 6, 7, 8, 16):
        return out
    t = kind_version
    if t == 3:
        out["epoch"] = r.i32("epoch")
    elif t == 4:
        topics = []
        for i in range(max(r.compact_array("topics"), 0)):
            tid, name = r.uuid(f"topics[{i}].topic_id"), r.compact_string(f"topics[{i}].topic_name")
            n = r.i32(f"topics[{i}].num_partitions")
            for j in range(max(r.compact_array(f"topics[{i}].partition_metadata"), 0)):
                r.i32(f"topics[{i}].partition_metadata[{j}].partition")
                _compact_strings(r, f"topics[{i}].partition_metadata[{j}].racks")
                r.tagged_fields(f"topics[{i}].partition_metadata[{j}]")
            r.tagged_fields(f"topics[{i}]")
            topics.append({"topic_id": tid, "topic": name, "num_partitions": n})
        out["topics"] = topics
    elif t == 5:
        out["instance_id"] = r.compact_string("instance_id")
        out["rack_id"] = r.compact_string("rack_id")
        out["client_id"] = r.compact_string("client_id")
        out["client_host"] = r.compact_string("client_host")
        out["subscribed_topics"] = _compact_strings(r, "subscribed_topic_names")
        out["subscribed_regex"] = r.compact_string("subscribed_topic_regex")
        out["rebalance_timeout"] = r.i32("rebalance_timeout")
        out["server_assignor"] = r.compact_string("server_assignor")
    elif t == 6:
        out["assignment_epoch"] = r.i32("assignment_epoch")
    elif t == 7:
        out["assignment"] = _topic_partitions(r, "topic_partitions")
    elif t == 8:
        out["member_epoch"] = r.i32("member_epoch")
        out["previous_member_epoch"] = r.i32("previous_member_epoch")
        out["state"] = r.i8("state")
        out["assignment"] = _topic_partitions(r, "assigned_partitions")
        out["pending_revocation"] = _topic_partitions(r, "partitions_pending_revocation")
    elif t == 16:
        out["topics"] = _compact_strings(r, "topics")
        out["regex_version"] = r.i64("version")
        out["timestamp"] = r.i64("timestamp")
    r.tagged_fields("value")
    return out


def decode_offset_value(value: bytes, where: str = "value") -> dict:
    r = Reader(value, 0, where)
    v = r.i16("value version")
    out: dict = {"value_version": v}
    if v in (0, 1, 2):
        out["offset"] = r.i64("offset")
        out["metadata"] = r.string("metadata")
        out["commit_timestamp"] = r.i64("commit_timestamp")
        if v == 1:
            out["expire_timestamp"] = r.i64("expire_timestamp")
    elif v == 3:
        out["offset"] = r.i64("offset")
        out["leader_epoch"] = r.i32("leader_epoch")
        out["metadata"] = r.string("metadata")
        out["commit_timestamp"] = r.i64("commit_timestamp")
    elif v == 4:
        out["offset"] = r.i64("offset")
        out["leader_epoch"] = r.i32("leader_epoch")
        out["metadata"] = r.compact_string("metadata")
        out["commit_timestamp"] = r.i64("commit_timestamp")
        r.tagged_fields("value")
    else:
        raise DecodeError(f"{where}: unknown offset-commit value version {v}")
    return out


def decode_group_value(value: bytes, where: str = "value") -> dict:
    r = Reader(value, 0, where)
    v = r.i16("value version")
    if v not in range(0, 5):
        raise DecodeError(f"{where}: unknown group-metadata value version {v}")
    flexible = v >= 4
    s = r.compact_string if flexible else r.string
    b = r.compact_bytes if flexible else r.bytes_
    out: dict = {"value_version": v, "protocol_type": s("protocol_type"), "generation": r.i32("generation"),
                 "protocol": s("protocol"), "leader": s("leader")}
    if v >= 2:
        out["current_state_timestamp"] = r.i64("current_state_timestamp")
    n = (r.uvarint("members count") - 1) if flexible else r.i32("members count")
    members = []
    for i in range(max(n, 0)):
        m: dict = {"member_id": s(f"members[{i}].member_id")}
        if v >= 3:
            m["group_instance_id"] = s(f"members[{i}].group_instance_id")
        m["client_id"] = s(f"members[{i}].client_id")
        m["client_host"] = s(f"members[{i}].client_host")
        if v >= 1:
            m["rebalance_timeout"] = r.i32(f"members[{i}].rebalance_timeout")
        m["session_timeout"] = r.i32(f"members[{i}].session_timeout")
        sub = b(f"members[{i}].subscription")
        asg = b(f"members[{i}].assignment")
        m["subscription_size"] = 0 if sub is None else len(sub)
        m["assignment_size"] = 0 if asg is None else len(asg)
        if flexible:
            r.tagged_fields(f"members[{i}]")
        members.append(m)
    if flexible:
        r.tagged_fields("value")
    out["members"] = members
    return out


_I16_I64 = struct.Struct(">hq")


def _fast(key: bytes, value: bytes | None) -> dict | None:
    """The common case (offset-commit key v0/v1, value v0-v2), with few checks; None means
    "take the careful path" (which also produces the precise error)."""
    if len(key) < 8 or key[0] != 0 or key[1] > 1:
        return None
    n = (key[2] << 8) | key[3]
    p = 4 + n
    if n >= 0x8000 or p + 2 > len(key):
        return None
    m = (key[p] << 8) | key[p + 1]
    q = p + 2 + m
    if m >= 0x8000 or q + 4 != len(key):
        return None
    out = {"key_version": key[1], "kind": "offset_commit", "group": key[4:p].decode("utf-8"),
           "topic": key[p + 2:q].decode("utf-8"), "partition": _I32.unpack_from(key, q)[0]}
    if value is None:
        out["tombstone"] = True
        return out
    if len(value) < 12 or value[0] != 0 or value[1] > 4:
        return None
    if value[1] >= 3:
        return _fast_v3_v4(out, value)
    vv, offset = _I16_I64.unpack_from(value, 0)
    ml = (value[10] << 8) | value[11]
    if ml == 0xFFFF:
        meta, r = None, 12
    elif ml >= 0x8000:
        return None
    else:
        meta, r = value[12:12 + ml].decode("utf-8"), 12 + ml
    expected = r + (16 if vv == 1 else 8)
    if len(value) != expected:
        return None
    out["tombstone"] = False
    out["value_version"] = vv
    out["offset"] = offset
    out["metadata"] = meta
    out["commit_timestamp"] = _I64.unpack_from(value, r)[0]
    if vv == 1:
        out["expire_timestamp"] = _I64.unpack_from(value, r + 8)[0]
    return out


_I16_I64_I32 = struct.Struct(">hqi")


def _fast_v3_v4(out: dict, value: bytes) -> dict | None:
    """Offset-commit values v3 (leader epoch) and v4 (v3, flexible: a compact metadata string and
    tagged fields, e.g. the topic id), what 3.x and 4.x brokers write."""
    if len(value) < 15:
        return None
    vv, offset, epoch = _I16_I64_I32.unpack_from(value, 0)
    if vv == 3:
        ml = (value[14] << 8) | value[15] if len(value) >= 16 else 0x8000
        if ml == 0xFFFF:
            meta, r = None, 16
        elif ml >= 0x8000:
            return None
        else:
            meta, r = value[16:16 + ml].decode("utf-8"), 16 + ml
        if len(value) != r + 8:
            return None
    else:
        n = value[14]
        if n >= 0x80:
            return None  # metadata of 127 bytes or more: the careful path
        meta, r = (None, 15) if n == 0 else (value[15:15 + n - 1].decode("utf-8"), 15 + n - 1)
        t = r + 8  # tagged fields: none, or only the topic id (tag 0, 16 bytes); anything else: careful path
        if not ((len(value) == t + 1 and value[t] == 0) or
                (len(value) == t + 19 and value[t:t + 3] == b"\x01\x00\x10")):
            return None
    out["tombstone"] = False
    out["value_version"] = vv
    out["offset"] = offset
    out["leader_epoch"] = epoch
    out["metadata"] = meta
    out["commit_timestamp"] = _I64.unpack_from(value, r)[0]
    return out


def decode(key: bytes, value: bytes | None, where: str = "record") -> dict:
    """One record -> a flat dict: key fields, then value fields, `tombstone` when value is None."""
    if key:
        try:
            fast = _fast(key, value)
        except UnicodeDecodeError:
            fast = None
        if fast is not None:
            return fast
    k = decode_key(key, f"{where} key")
    out = dict(k)
    if value is None:
        out["tombstone"] = True
        return out
    out["tombstone"] = False
    if k["kind"] == "offset_commit":
        out.update(decode_offset_value(value, f"{where} value"))
    elif k["kind"] == "group_metadata":
        out.update(decode_group_value(value, f"{where} value"))
    elif k["kind"] != "unknown":
        out.update(decode_consumer_group_value(k["key_version"], value, f"{where} value"))
    return out


# -- encoders (the lab's bulk writer and the tests build real records with them) ----------------
def _s(text: str | None) -> bytes:
    if text is None:
        return _I16.pack(-1)
    raw = text.encode("utf-8")
    return _I16.pack(len(raw)) + raw


def encode_offset_key(group: str, topic: str, partition: int, version: int = 1) -> bytes:
    return _I16.pack(version) + _s(group) + _s(topic) + _I32.pack(partition)


def encode_group_key(group: str) -> bytes:
    return _I16.pack(2) + _s(group)


def encode_offset_value_v1(offset: int, metadata: str, commit_ts: int, expire_ts: int) -> bytes:
    return _I16.pack(1) + _I64.pack(offset) + _s(metadata) + _I64.pack(commit_ts) + _I64.pack(expire_ts)

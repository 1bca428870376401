"""Decode __consumer_offsets records (the formats of Kafka's GroupMetadataManager and its group-coordinator message specs).

Keys start with an int16 version: 0 and 1 are offset-commit keys (group, topic, partition), 2 is
a group-metadata key (group). 3-24 belong to newer protocols (consumer groups, share groups,
regex subscriptions, streams groups): recognised, counted and skipped. Anything else is reported.

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

OTHER_KEY_VERSIONS = range(3, 25)
KNOWN_KEY_KINDS = {0: "offset_commit", 1: "offset_commit", 2: "group_metadata"}


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

    def tagged_fields(self, field: str) -> None:
        for _ in range(self.uvarint(f"{field} tag count")):
            self.uvarint(f"{field} tag")
            size = self.uvarint(f"{field} tag size")
            self._need(size, field)
            self.pos += size


def decode_key(key: bytes, where: str = "key") -> dict:
    """{"key_version": v, "kind": ..., "group", "topic", "partition"}; kind "other" for 3-24."""
    if key is None:
        raise DecodeError(f"{where}: a __consumer_offsets record always has a key")
    r = Reader(key, 0, where)
    v = r.i16("key version")
    if v in (0, 1):
        return {"key_version": v, "kind": "offset_commit", "group": r.string("group"), "topic": r.string("topic"),
                "partition": r.i32("partition")}
    if v == 2:
        return {"key_version": v, "kind": "group_metadata", "group": r.string("group")}
    if v in OTHER_KEY_VERSIONS:
        return {"key_version": v, "kind": "other"}
    raise DecodeError(f"{where}: unknown key version {v}")


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
    if len(value) < 12 or value[0] != 0 or value[1] > 2:
        return None
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

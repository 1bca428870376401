"""The Kafka protocol's primitive types, as its specification defines them (the schema types of
clients/src/main/resources/common/message/*.json): fixed-width integers, unsigned varints,
strings, arrays and tagged-field sections in their classic and flexible (compact) forms, the
request header (v1, or v2 for flexible versions) and the response header, and the error codes the
toolkit names. Every read is bounded by the response it reads (`Reader`): a length past its end
or a varint longer than five bytes is a struct.error, never a read beyond it.

The requests and responses built from these live in `wire` (discovery: ApiVersions,
FindCoordinator, DescribeGroups, ConsumerGroupDescribe, Metadata), `wire_security` (SASL),
`wire_logs` (Fetch, ListOffsets) and `wire_leadership` (AlterPartitionReassignments,
ElectLeaders); this module imports none of them.
"""

from __future__ import annotations

import struct

ERRORS = {
    0: None, -1: "UNKNOWN_SERVER_ERROR", 7: "REQUEST_TIMED_OUT", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 24: "INVALID_GROUP_ID",
    25: "UNKNOWN_MEMBER_ID", 30: "GROUP_AUTHORIZATION_FAILED", 35: "UNSUPPORTED_VERSION",
    3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE", 29: "TOPIC_AUTHORIZATION_FAILED",
    42: "INVALID_REQUEST", 69: "GROUP_ID_NOT_FOUND", 31: "CLUSTER_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM", 34: "ILLEGAL_SASL_STATE", 58: "SASL_AUTHENTICATION_FAILED",
}
MAX_STRING = 32767


def error_name(code: int) -> str | None:
    return ERRORS[code] if code in ERRORS else f"KAFKA_ERROR_{code}"


# -- encoding ---------------------------------------------------------------------------------
def utf8(s: str, what: str = "group id") -> bytes:
    b = s.encode("utf-8", "surrogatepass")
    if len(b) > MAX_STRING:
        raise ValueError(f"{what} of {len(b)} UTF-8 bytes is longer than Kafka's {MAX_STRING}")
    return b


def uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def string(s: str, flexible: bool = False) -> bytes:
    b = utf8(s)
    return (uvarint(len(b) + 1) if flexible else struct.pack(">h", len(b))) + b


def array_len(n: int, flexible: bool) -> bytes:
    return uvarint(n + 1) if flexible else struct.pack(">i", n)


NO_TAGS = b"\x00"  # an empty tagged-field section


def encode_request(api_key: int, version: int, correlation_id: int, body: bytes, flexible: bool,
                   client_id: str = "fleetkit") -> bytes:
    """A size-prefixed request: header v1 (v2 with its empty tagged fields for a flexible
    version; the client id keeps its int16 length in both) followed by `body`."""
    header = struct.pack(">hhi", api_key, version, correlation_id) + string(client_id)
    if flexible:
        header += NO_TAGS
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


# -- decoding ---------------------------------------------------------------------------------
class Reader:
    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def _unpack(self, fmt: str, size: int) -> int:
        (v,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return v

    def int8(self) -> int:
        return self._unpack(">b", 1)

    def int16(self) -> int:
        return self._unpack(">h", 2)

    def int32(self) -> int:
        return self._unpack(">i", 4)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            if self.pos >= len(self.data):
                raise struct.error("varint runs past the end of the response")
            b = self.data[self.pos]
            self.pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 35:
                raise struct.error("varint longer than 5 bytes")

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise struct.error(f"field of {n} bytes runs past the end of the response")
        v = self.data[self.pos:self.pos + n]
        self.pos += n
        return v

    def string(self, flexible: bool = False) -> str | None:
        n = self.uvarint() - 1 if flexible else self.int16()
        if n < 0:
            return None
        return self._take(n).decode("utf-8", "replace")

    def skip_bytes(self, flexible: bool = False) -> None:
        n = self.uvarint() - 1 if flexible else self.int32()
        if n > 0:
            self._take(n)

    def bytes_(self, flexible: bool = False) -> bytes | None:
        n = self.uvarint() - 1 if flexible else self.int32()
        return None if n < 0 else self._take(n)

    def array_len(self, flexible: bool = False) -> int:
        n = self.uvarint() - 1 if flexible else self.int32()
        return max(n, 0)  # -1: null array

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self._take(self.uvarint())


def response_reader(payload: bytes, flexible: bool) -> tuple[int, Reader]:
    """(correlation id, reader at the body) of a response without its size prefix: header v0,
    or v1 (with tagged fields) for flexible versions."""
    r = Reader(payload)
    cid = r.int32()
    if flexible:
        r.skip_tags()
    return cid, r

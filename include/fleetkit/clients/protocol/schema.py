"""Kafka's message schemas, as its specification writes them, and the one encoder and decoder of
every request and response spoken here.

A message is a list of `Field`s the way Kafka's clients/src/main/resources/common/message/*.json
lists them: a name, a type (int8, int16, uint16, int32, int64, bool, uuid, string, bytes, records,
`[]T` an array, or a struct with its own fields), the versions the field is in ("0+", "1-3"), the
versions it may be null in, and its default (what a field absent from a version decodes to and is
encoded as when a request leaves it out). Tagged fields are not declared: none is written, and
every tagged-field section read is skipped.

From a message's first flexible version on (its `flexibleVersions`), strings, bytes and arrays
carry an unsigned varint of length + 1 (0: null) and every struct ends with a tagged-field
section: that difference is handled here, once, for every message.

Every read is bounded by the bytes it reads (`Reader`): a length past the end, a varint longer
than five bytes or an array announcing more elements than there are bytes left is a
struct.error, never a read beyond the answer nor a loop over a hostile count.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field as dc_field
from typing import Any

ERRORS = {
    0: None, -1: "UNKNOWN_SERVER_ERROR", 7: "REQUEST_TIMED_OUT", 14: "COORDINATOR_LOAD_IN_PROGRESS",
    15: "COORDINATOR_NOT_AVAILABLE", 16: "NOT_COORDINATOR", 24: "INVALID_GROUP_ID",
    25: "UNKNOWN_MEMBER_ID", 30: "GROUP_AUTHORIZATION_FAILED", 35: "UNSUPPORTED_VERSION",
    3: "UNKNOWN_TOPIC_OR_PARTITION", 5: "LEADER_NOT_AVAILABLE", 29: "TOPIC_AUTHORIZATION_FAILED",
    42: "INVALID_REQUEST", 69: "GROUP_ID_NOT_FOUND", 31: "CLUSTER_AUTHORIZATION_FAILED",
    33: "UNSUPPORTED_SASL_MECHANISM", 34: "ILLEGAL_SASL_STATE", 58: "SASL_AUTHENTICATION_FAILED",
}
MAX_STRING = 32767
_FIXED = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "uint16": struct.Struct(">H"),
          "int32": struct.Struct(">i"), "int64": struct.Struct(">q"), "float64": struct.Struct(">d")}
#: the default of a field whose absence means null (Kafka's `"default": "null"`)
NULL = type("Null", (), {"__repr__": lambda self: "NULL"})()
_I16 = _FIXED["int16"].unpack_from
_ZERO = {"bool": False, "string": "", "bytes": b"", "records": None, "uuid": bytes(16)}


def error_name(code: int) -> str | None:
    return ERRORS[code] if code in ERRORS else f"KAFKA_ERROR_{code}"


def versions(spec: str) -> tuple[int, int]:
    """A version range as Kafka's specs write it: "0+", "1-3", "5" or "none" (an empty range)."""
    if spec == "none":
        return 1, 0
    if spec.endswith("+"):
        return int(spec[:-1]), 1 << 15
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


@dataclass(frozen=True)
class Field:
    """One field of a message or struct, as in Kafka's message specs."""

    name: str
    type: str
    versions: str = "0+"
    nullable: str = "none"
    default: Any = None
    fields: tuple[Field, ...] = ()
    _in: tuple[int, int] = dc_field(init=False, repr=False, compare=False)
    _null: tuple[int, int] = dc_field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "_in", versions(self.versions))
        object.__setattr__(self, "_null", versions(self.nullable))

    def present(self, v: int) -> bool:
        return self._in[0] <= v <= self._in[1]

    def null_in(self, v: int) -> bool:
        return self._null[0] <= v <= self._null[1]

    @property
    def element(self) -> str | None:
        """The element type of an array (`[]int32` -> int32), else None."""
        return self.type[2:] if self.type.startswith("[]") else None

    def zero(self) -> Any:
        """The value of the field where a version does not carry it."""
        if self.default is NULL:
            return None
        if self.default is not None:
            return self.default
        if self.element is not None:
            return []
        return 0 if self.type in _FIXED else (_ZERO.get(self.type) if self.type in _ZERO else {})


def F(name: str, type: str, versions: str = "0+", nullable: str = "none", default: Any = None,
      fields: tuple[Field, ...] = ()) -> Field:
    return Field(name, type, versions, nullable, default, tuple(fields))


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


def _length(out: bytearray, n: int, flexible: bool, classic: struct.Struct) -> None:
    out += uvarint(n + 1) if flexible else classic.pack(n)


def _write(out: bytearray, f: Field, t: str, value: Any, v: int, flexible: bool) -> None:
    if t in _FIXED:
        out += _FIXED[t].pack(value)
    elif t == "bool":
        out.append(1 if value else 0)
    elif t == "uuid":
        out += bytes(value or bytes(16))[:16].ljust(16, b"\x00")
    elif t == "string":
        if value is None:
            _nullable(f, v)
            _length(out, -1, flexible, _FIXED["int16"])
        else:
            b = utf8(value, f.name)
            _length(out, len(b), flexible, _FIXED["int16"])
            out += b
    elif t in ("bytes", "records"):
        if value is None:
            _nullable(f, v)
            _length(out, -1, flexible, _FIXED["int32"])
        else:
            _length(out, len(value), flexible, _FIXED["int32"])
            out += value
    elif t.startswith("[]"):
        if value is None:
            _nullable(f, v)
            _length(out, -1, flexible, _FIXED["int32"])
            return
        _length(out, len(value), flexible, _FIXED["int32"])
        for item in value:
            _write(out, f, t[2:], item, v, flexible)
    else:  # a struct
        encode_into(out, f.fields, value or {}, v, flexible)


def _nullable(f: Field, v: int) -> None:
    if not f.null_in(v):
        raise ValueError(f"{f.name} cannot be null in version {v}")


def encode_into(out: bytearray, fields: tuple[Field, ...], values: dict, v: int, flexible: bool) -> None:
    for f in fields:
        if f.present(v):
            _write(out, f, f.type, values[f.name] if f.name in values else f.zero(), v, flexible)
    if flexible:
        out.append(0)  # no tagged fields


def encode(fields: tuple[Field, ...], values: dict, v: int, flexible: bool) -> bytes:
    out = bytearray()
    encode_into(out, fields, values, v, flexible)
    return bytes(out)


# -- decoding ---------------------------------------------------------------------------------
class Reader:
    """Reads a response's bytes front to back, never past their end."""

    def __init__(self, data: bytes):
        self.data, self.pos = data, 0

    def fixed(self, fmt: struct.Struct) -> Any:
        (v,) = fmt.unpack_from(self.data, self.pos)
        self.pos += fmt.size
        return v

    def int16(self) -> int:
        return self.fixed(_FIXED["int16"])

    def int32(self) -> int:
        return self.fixed(_FIXED["int32"])

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

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise struct.error(f"field of {n} bytes runs past the end of the response")
        v = self.data[self.pos:self.pos + n]
        self.pos += n
        return v

    def length(self, flexible: bool, classic: struct.Struct) -> int:
        """A length (-1: null); an array's count is checked against the bytes left."""
        return self.uvarint() - 1 if flexible else self.fixed(classic)

    def count(self, flexible: bool) -> int:
        n = self.length(flexible, _FIXED["int32"])
        if n > len(self.data) - self.pos:
            raise struct.error(f"array of {n} elements in {len(self.data) - self.pos} bytes")
        return n

    def skip_tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()  # tag
            self.take(self.uvarint())


def _reader(f: Field, t: str, v: int, flexible: bool):
    """The function reading one value of type `t` (field `f`, version `v`) from a Reader."""
    if t in _FIXED:
        unpack, size = _FIXED[t].unpack_from, _FIXED[t].size

        def fixed(r: Reader):
            value = unpack(r.data, r.pos)[0]
            r.pos += size
            return value
        return fixed
    if t == "bool":
        return lambda r: r.take(1) != b"\x00"
    if t == "uuid":
        return lambda r: r.take(16)
    null = f.null_in(v)
    if t == "string":
        def string(r: Reader):
            data, pos = r.data, r.pos
            if flexible and pos < len(data) and data[pos] < 0x80:  # a one-byte length: most strings
                n, pos = data[pos] - 1, pos + 1
            elif flexible:
                n = r.uvarint() - 1
                pos = r.pos
            else:
                n = _I16(data, pos)[0]
                pos += 2
            if n < 0:
                r.pos = pos
                return None if null else ""
            end = pos + n
            if end > len(data):
                raise struct.error(f"field of {n} bytes runs past the end of the response")
            r.pos = end
            return data[pos:end].decode("utf-8", "replace")
        return string
    if t in ("bytes", "records"):
        absent = None if null or t == "records" else b""
        return lambda r: absent if (n := r.length(flexible, _FIXED["int32"])) < 0 else r.take(n)
    if t.startswith("[]"):
        element = _reader(f, t[2:], v, flexible)

        def array(r: Reader):
            n = r.count(flexible)
            return (None if null else []) if n < 0 else [element(r) for _ in range(n)]
        return array
    return _decoder(f.fields, v, flexible)


_DECODERS: dict[tuple[int, int, bool], tuple] = {}


def _decoder(fields: tuple[Field, ...], v: int, flexible: bool):
    """The function decoding one struct of `fields` in version `v`: a dict display of the fields'
    readers in order (a field absent from the version: its default, a fresh one for a list or a
    dict), made once per declaration and version (keyed by the declaration's identity, kept)."""
    key = (id(fields), v, flexible)
    made = _DECODERS.get(key)
    if made is None:
        env: dict = {"skip": _skip_tags}
        items = []
        for i, f in enumerate(fields):
            if f.present(v):
                env[f"read{i}"] = _reader(f, f.type, v, flexible)
                items.append(f"{f.name!r}: read{i}(r)")
            else:
                zero = f.zero()
                env[f"zero{i}"] = zero
                items.append(f"{f.name!r}: " + ("[]" if zero == [] else "{}" if zero == {} else f"zero{i}"))
        body = "    out = {" + ", ".join(items) + "}\n" + ("    skip(r)\n" if flexible else "") + "    return out\n"
        exec("def decode(r):\n" + body, env)  # noqa: S102 - code made here from the declarations, no input
        made = _DECODERS[key] = (fields, env["decode"])
    return made[1]


def _skip_tags(r: Reader) -> None:
    if r.pos < len(r.data) and r.data[r.pos] == 0:  # no tagged fields: the usual case
        r.pos += 1
    else:
        r.skip_tags()


def decode_from(r: Reader, fields: tuple[Field, ...], v: int, flexible: bool) -> dict:
    return _decoder(fields, v, flexible)(r)


def decode(fields: tuple[Field, ...], data: bytes, v: int, flexible: bool) -> dict:
    return decode_from(Reader(data), fields, v, flexible)

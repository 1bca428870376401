"""Kafka's on-disk and on-the-wire record formats: message sets (magic 0 and 1, Kafka 0.8-0.10) and
record batches (magic 2, Kafka 0.11+), with every compression codec Kafka writes.

One log entry starts with its offset (int64) and size (int32); the magic byte is at byte 16 in both
families:

* magic 0/1 message: offset int64, size int32, crc int32, magic int8, attributes int8 (bits 0-2
  codec), [timestamp int64, magic 1 only], key bytes (int32 length, -1 null), value bytes. A
  compressed message (the "wrapper") holds in its value a compressed message set of inner
  messages; magic 1 inner offsets are relative (the wrapper carries the absolute offset of the
  last one, KIP-31), magic 0 inner offsets are absolute. Kafka's LegacyRecord / AbstractLegacyRecordBatch.
* magic 2 batch: base offset int64, length int32, partition leader epoch int32, magic int8, crc
  uint32, attributes int16 (bits 0-2 codec, bit 4 transactional, bit 5 control), last offset
  delta int32, base timestamp int64, max timestamp int64, producer id int64, producer epoch
  int16, base sequence int32, record count int32, then records of varint fields. Kafka's
  DefaultRecordBatch / DefaultRecord.

Codecs (Kafka's CompressionType): 1 gzip (RFC 1952), 2 snappy (xerial snappy-java framing
"\\x82SNAPPY\\x00" + version + compat, then blocks of int32 length + raw snappy; raw snappy too,
as some clients write), 3 lz4 (the LZ4 frame format; magic 0 messages carry a header checksum
computed over the wrong bytes, KAFKA-3160, so the frame is read here without checking it), 4 zstd.
snappy, lz4 and zstd come from cramjam.

Every entry is checked before any of its records is decoded: the CRC (magic 2: CRC32C of the
bytes from the attributes to the end of the batch, Kafka's DefaultRecordBatch.ensureValid; magic
0/1: CRC32 of the bytes from the magic byte to the end of the message, LegacyRecord.ensureValid),
then every length and count read from the bytes: lengths below -1, slices past the end of the
entry, a record count the batch's bytes cannot hold, varints longer than Kafka writes, records
that do not fill their batch exactly are FormatErrors naming the entry and the byte. An entry is
decoded whole or not at all.
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO, Iterator, NamedTuple

from crc32c import crc32c

COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPES = {0: "abort", 1: "commit"}
BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count: 61 bytes
LOG_OVERHEAD = 12                              # offset int64 + size int32
ENTRY_HEAD = struct.Struct(">qi")              # those two, at the start of an entry of either family
_XERIAL = b"\x82SNAPPY\x00"
_LZ4_MAGIC = 0x184D2204
_LZ4_MAX_BLOCK = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}
CRC_FROM = 21          # a batch's CRC32C covers its bytes from the attributes (byte 21) to its end
MIN_RECORD = 7         # the smallest record of a batch: length, attributes, timestamp delta, offset
                       # delta, key length, value length, header count, one byte each
#: the smallest message (size field value) of magic 0 and 1: crc, magic, attributes, [timestamp],
#: key length, value length
MIN_MESSAGE = {0: 14, 1: 22}


class FormatError(ValueError):
    """Bytes that are not a valid log entry or compressed payload (the message says where)."""


class Corrupt(NamedTuple):
    """A log entry that was not decoded: where it starts, the offset its header names, why."""

    position: int
    offset: int
    reason: str


class SegmentReport:
    """What `read_segment` skipped: corrupt entries (not decoded), and the bytes of a last entry
    that the file does not hold whole (a segment being written, or a cut copy)."""

    def __init__(self):
        self.corrupt: list[Corrupt] = []
        self.truncated_tail = 0


class Record(NamedTuple):
    offset: int
    timestamp: int | None          # ms since the epoch (None: magic 0)
    key: bytes | None
    value: bytes | None
    magic: int
    codec: int
    control: str | None = None     # "commit" / "abort" / "unknown" for a control record (magic 2)
    producer_id: int = -1          # >= 0: a transactional batch's producer


# -- compression -----------------------------------------------------------------------------------
def _snappy(data: bytes) -> bytes:
    import cramjam

    if not data.startswith(_XERIAL):
        return bytes(cramjam.snappy.decompress_raw(data))
    out, pos = [], 16  # magic (8), version (4), compatible version (4)
    while pos < len(data):
        if pos + 4 > len(data):
            raise FormatError(f"snappy: block length at byte {pos} cut off")
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or pos + 4 + n > len(data):
            raise FormatError(f"snappy: block of {n} bytes at byte {pos} does not fit the {len(data)} bytes")
        out.append(bytes(cramjam.snappy.decompress_raw(data[pos + 4:pos + 4 + n])))
        pos += 4 + n
    return b"".join(out)


def _lz4(data: bytes) -> bytes:
    """An LZ4 frame, block by block (header checksum not checked: KAFKA-3160)."""
    import cramjam

    if len(data) < 7 or struct.unpack_from("<I", data, 0)[0] != _LZ4_MAGIC:
        raise FormatError("lz4: not an LZ4 frame (magic missing)")
    flg, bd = data[4], data[5]
    pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0) + 1  # content size, dict id, header checksum
    block_checksum = bool(flg & 0x10)
    buf = bytearray(_LZ4_MAX_BLOCK.get((bd >> 4) & 0x07, 4 * 1024 * 1024))
    out = []
    while True:
        if pos + 4 > len(data):
            raise FormatError("lz4: frame ends without its end mark")
        (size,) = struct.unpack_from("<I", data, pos)
        pos += 4
        if size == 0:
            return b"".join(out)
        n, raw = size & 0x7FFFFFFF, bool(size & 0x80000000)
        if pos + n > len(data):
            raise FormatError(f"lz4: block of {n} bytes at byte {pos} runs past the frame's {len(data)} bytes")
        block = data[pos:pos + n]
        pos += n + (4 if block_checksum else 0)
        if raw:
            out.append(bytes(block))
        else:
            got = cramjam.lz4.decompress_block_into(block, buf)
            out.append(bytes(buf[:got]))


def decompress(codec: int, data: bytes) -> bytes:
    """The decompressed bytes of a payload compressed with Kafka codec `codec`."""
    try:
        if codec == 0:
            return data
        if codec == 1:
            return zlib.decompress(data, 16 + zlib.MAX_WBITS)
        if codec == 2:
            return _snappy(data)
        if codec == 3:
            return _lz4(data)
        if codec == 4:
            import cramjam

            return bytes(cramjam.zstd.decompress(data))
    except FormatError:
        raise
    except Exception as e:  # noqa: BLE001 - zlib.error, cramjam's DecompressionError, struct.error
        raise FormatError(f"{COMPRESSION.get(codec, codec)}: {e}") from None
    raise FormatError(f"unknown compression codec {codec}")


# -- magic 2 records -------------------------------------------------------------------------------
def _varint(data: bytes, pos: int, end: int | None = None, limit: int = 10) -> tuple[int, int]:
    """A zigzag varint (Kafka's ByteUtils.readVarint / readVarlong: at most 5 / 10 bytes, `limit`)
    at `pos`, before `end` (default: the end of `data`): (value, next pos)."""
    if end is None:
        end = len(data)
    if pos >= end:
        raise FormatError(f"varint at byte {pos} runs past the end ({end})")
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    shift = value = 0
    start = pos
    while True:
        if pos >= end:
            raise FormatError(f"varint at byte {start} runs past the end ({end})")
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if pos - start >= limit:
            raise FormatError(f"varint at byte {start} longer than {limit} bytes")


def _length(data: bytes, pos: int, end: int, field: str) -> tuple[int, int]:
    """A varint length of a record's key, value or header: -1 (null) or a length that fits before `end`."""
    n, p = _varint(data, pos, end, 5)
    if n < -1:
        raise FormatError(f"{field} length {n} at byte {pos}: below -1")
    if p + max(n, 0) > end:
        raise FormatError(f"{field} of {n} bytes at byte {p} runs past the end of its record ({end})")
    return n, p


def parse_records(records: bytes, base_offset: int, count: int, out: list, base_timestamp: int | None = None) -> None:
    """Append (offset, key, value) of each record of a batch's (decompressed) record bytes; with
    `base_timestamp`, (offset, timestamp, key, value). The records must fill the bytes exactly;
    anything else is a FormatError (nothing is appended then)."""
    n = len(records)
    where = f"batch at offset {base_offset}"
    if count < 0 or count * MIN_RECORD > n:
        raise FormatError(f"{where}: record count {count} is impossible for its {n} bytes of records")
    got: list = []
    pos = i = 0
    try:
        for i in range(count):
            length, p = _varint(records, pos, n, 5)
            end = p + length
            if length < MIN_RECORD - 1 or end > n:
                raise FormatError(f"at byte {pos}: length {length} does not fit {n - p} remaining byte(s)")
            p += 1  # record attributes (unused)
            ts_delta, p = _varint(records, p, end)
            delta, p = _varint(records, p, end, 5)
            klen, p = _length(records, p, end, "key")
            key = None if klen < 0 else records[p:p + klen]
            p += max(klen, 0)
            vlen, p = _length(records, p, end, "value")
            value = None if vlen < 0 else records[p:p + vlen]
            p += max(vlen, 0)
            headers, p = _varint(records, p, end, 5)
            if headers < 0:
                raise FormatError(f"header count {headers}")
            for h in range(headers):
                hk, p = _length(records, p, end, f"header {h} key")
                if hk < 0:
                    raise FormatError(f"header {h} has a null key")
                p += hk
                hv, p = _length(records, p, end, f"header {h} value")
                p += max(hv, 0)
            if p != end:
                raise FormatError(f"at byte {pos}: {length} bytes announced, {p - (end - length)} read")
            if base_timestamp is None:
                got.append((base_offset + delta, key, value))
            else:
                got.append((base_offset + delta, base_timestamp + ts_delta, key, value))
            pos = end
    except FormatError as e:
        raise FormatError(f"{where}: record {i} of {count}: {e}") from None
    if pos != n:
        raise FormatError(f"{where}: {n - pos} byte(s) after its {count} record(s)")
    out.extend(got)


def batch_problem(entry, pos: int = 0) -> str | None:
    """Why the magic 2 batch at `pos` of `entry` (its bytes up to the end of the batch) is not
    valid, from its header and CRC32C alone; None when it is."""
    n = len(entry) - pos
    if n < BATCH_HEAD.size:
        return f"record batch of {n} bytes: shorter than its header"
    _base, length = ENTRY_HEAD.unpack_from(entry, pos)
    if LOG_OVERHEAD + length != n:
        return f"record batch length {length} does not match its {n - LOG_OVERHEAD} bytes"
    (stored,) = struct.unpack_from(">I", entry, pos + 17)
    actual = crc32c(memoryview(entry)[pos + CRC_FROM:pos + n])
    if stored != actual:
        return f"CRC32C mismatch (stored {stored:#010x}, computed {actual:#010x})"
    return None


def batch_records(entry: bytes) -> list[Record]:
    """The records of one magic 2 batch (the whole entry, from its base offset), after its CRC32C
    and its bounds are checked."""
    problem = batch_problem(entry)
    if problem is not None:
        raise FormatError(problem)
    (base, _length, _epoch, magic, _crc, attrs, _last, ts0, _tmax, pid, _pe, _seq,
     count) = BATCH_HEAD.unpack_from(entry, 0)
    codec = attrs & 0x07
    if count < 0 or (codec == 0 and count * MIN_RECORD > len(entry) - BATCH_HEAD.size):
        raise FormatError(f"batch at offset {base}: record count {count} is impossible for its "
                          f"{len(entry) - BATCH_HEAD.size} bytes of records")
    body = decompress(codec, entry[BATCH_HEAD.size:])
    recs: list = []
    parse_records(body, base, count, recs, ts0)
    control = bool(attrs & 0x20)
    txn_pid = pid if attrs & 0x10 else -1
    out = []
    for off, ts, key, value in recs:
        kind = None
        if control:
            kind = "unknown"
            if key is not None and len(key) >= 4:
                kind = CONTROL_TYPES.get(struct.unpack_from(">h", key, 2)[0], "unknown")
        out.append(Record(off, ts, key, value, magic, codec, kind, txn_pid))
    return out


# -- magic 0/1 messages ----------------------------------------------------------------------------
def _bytes_at(data: bytes, pos: int, end: int, field: str) -> tuple[bytes | None, int]:
    if pos + 4 > end:
        raise FormatError(f"the {field} length at byte {pos} runs past the end of its message")
    (n,) = struct.unpack_from(">i", data, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < -1:
        raise FormatError(f"{field} length {n} at byte {pos - 4}: below -1")
    if pos + n > end:
        raise FormatError(f"the {field} of {n} bytes at byte {pos} runs past the end of its message")
    return data[pos:pos + n], pos + n


def message_problem(entry, pos: int = 0) -> str | None:
    """Why the magic 0/1 message at `pos` of `entry` (its bytes up to the end of the message) is
    not valid, from its size, magic and CRC32 alone; None when it is."""
    n = len(entry) - pos
    if n < LOG_OVERHEAD + 2:
        return f"message of {n} bytes: shorter than its header"
    _offset, size = ENTRY_HEAD.unpack_from(entry, pos)
    magic = entry[pos + 16]
    if magic not in MIN_MESSAGE:
        return f"magic {magic} is not a message set's (0 or 1)"
    if size < MIN_MESSAGE[magic] or LOG_OVERHEAD + size != n:
        return f"message size {size} is not valid for its {n - LOG_OVERHEAD} bytes (magic {magic})"
    (stored,) = struct.unpack_from(">I", entry, pos + 12)
    actual = zlib.crc32(memoryview(entry)[pos + 16:pos + n])
    if stored != actual:
        return f"CRC32 mismatch (stored {stored:#010x}, computed {actual:#010x})"
    return None


def legacy_records(entry: bytes, depth: int = 0) -> list[Record]:
    """The records of one magic 0/1 message (the whole entry, from its offset): itself, or the
    inner messages of a compressed wrapper, with absolute offsets; after its CRC32 and bounds are checked."""
    if len(entry) < LOG_OVERHEAD:
        raise FormatError(f"message of {len(entry)} bytes: shorter than its header")
    offset, size = ENTRY_HEAD.unpack_from(entry, 0)
    problem = message_problem(entry)
    if problem is not None:
        raise FormatError(f"message at offset {offset}: {problem}")
    end = LOG_OVERHEAD + size
    magic, attrs = entry[16], entry[17]
    pos, ts = 18, None
    if magic == 1:
        (ts,) = struct.unpack_from(">q", entry, pos)
        pos += 8
    key, pos = _bytes_at(entry, pos, end, "key")
    value, pos = _bytes_at(entry, pos, end, "value")
    if pos != end:
        raise FormatError(f"message at offset {offset}: {end - pos} byte(s) after its value")
    codec = attrs & 0x07
    if codec == 0:
        return [Record(offset, ts, key, value, magic, 0)]
    if depth > 0:
        raise FormatError(f"message at offset {offset}: a compressed message inside a compressed message")
    try:
        inner = list(iter_entries(decompress(codec, value or b""), depth + 1))
    except FormatError as e:
        raise FormatError(f"message at offset {offset}: inner messages: {e}") from None
    last_rel = inner[-1].offset if inner else 0
    return [r._replace(offset=offset - last_rel + r.offset if magic == 1 else r.offset, codec=codec,
                       timestamp=ts if (magic == 1 and attrs & 0x08) else r.timestamp)  # LogAppendTime
            for r in inner]


def entry_records(entry: bytes, depth: int = 0) -> list[Record]:
    """The records of one log entry of either family (all of them, or a FormatError)."""
    if len(entry) < 17:
        raise FormatError(f"log entry of {len(entry)} bytes: shorter than any header")
    magic = entry[16]
    if magic == 2:
        return batch_records(entry)
    return legacy_records(entry, depth)


def iter_entries(data: bytes, depth: int = 0) -> Iterator[Record]:
    """The records of whole entries in `data`. At the top (depth 0) a trailing partial entry is
    ignored (a fetch answer can end inside one); the inner messages of a compressed message must
    fill its value exactly."""
    pos, n = 0, len(data)
    while pos + LOG_OVERHEAD <= n:
        (size,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + LOG_OVERHEAD + size
        if size <= 0 or end > n:
            if depth > 0:
                raise FormatError(f"inner message at byte {pos}: size {size} does not fit the {n - pos} bytes left")
            return
        yield from entry_records(data[pos:end], depth)
        pos = end
    if depth > 0 and pos != n:
        raise FormatError(f"{n - pos} byte(s) after the last inner message")


def read_segment(f: BinaryIO, where: str = "segment", report: SegmentReport | None = None) -> Iterator[Record]:
    """Every record of a log segment file, streaming (one entry in memory at a time). A segment
    ends at its last whole entry; zero padding (a preallocated segment) ends it too.

    An entry whose size cannot be a log entry's is a FormatError (the file is not a segment, or
    its framing is lost). An entry that fails its CRC or bounds checks is a FormatError too, or,
    with a `report`, counted there (position, offset, reason) and skipped: none of its records
    is decoded, and reading goes on with the next entry."""
    pos = 0
    try:
        here = f.tell()
        f.seek(0, 2)
        total = f.tell() - here
        f.seek(here)
    except (OSError, AttributeError, ValueError):
        total = None
    while True:
        head = f.read(LOG_OVERHEAD)
        if len(head) < LOG_OVERHEAD:
            if head and report is not None and any(head):
                report.truncated_tail = len(head)
            return
        offset, size = struct.unpack(">qi", head)
        if size == 0 and offset == 0 and pos > 0:
            return  # preallocated zeros after the last entry
        if size < MIN_MESSAGE[0]:
            raise FormatError(f"{where} at byte {pos}: entry size {size} is not valid")
        if total is not None and pos + LOG_OVERHEAD + size > total:
            if report is not None:
                report.truncated_tail = total - pos
            return  # the broker was writing it: the last entry is not whole yet (never read past the file)
        body = f.read(size)
        if len(body) < size:
            if report is not None:
                report.truncated_tail = LOG_OVERHEAD + len(body)
            return
        try:
            records = entry_records(head + body)
        except FormatError as e:
            if report is None:
                raise FormatError(f"{where} at byte {pos} (offset {offset}): {e}") from None
            report.corrupt.append(Corrupt(pos, offset, str(e)))
            records = []
        yield from records
        pos += LOG_OVERHEAD + size

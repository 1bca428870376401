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
"""

from __future__ import annotations

import struct
import zlib
from typing import BinaryIO, Iterator, NamedTuple

COMPRESSION = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}
CONTROL_TYPES = {0: "abort", 1: "commit"}
BATCH_HEAD = struct.Struct(">qiibIhiqqqhii")  # base offset .. record count: 61 bytes
LOG_OVERHEAD = 12                              # offset int64 + size int32
ENTRY_HEAD = struct.Struct(">qi")              # those two, at the start of an entry of either family
_XERIAL = b"\x82SNAPPY\x00"
_LZ4_MAGIC = 0x184D2204
_LZ4_MAX_BLOCK = {4: 64 * 1024, 5: 256 * 1024, 6: 1024 * 1024, 7: 4 * 1024 * 1024}


class FormatError(ValueError):
    """Bytes that are not a valid log entry or compressed payload (the message says where)."""


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
        (n,) = struct.unpack_from(">i", data, pos)
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
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint (Kafka's ByteUtils.readVarint / readVarlong) at `pos`: (value, next pos)."""
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    shift = value = 0
    while True:
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise FormatError("varint longer than 10 bytes")


def parse_records(records: bytes, base_offset: int, count: int, out: list, base_timestamp: int | None = None) -> None:
    """Append (offset, key, value) of each record of a batch's (decompressed) record bytes; with
    `base_timestamp`, (offset, timestamp, key, value)."""
    pos = 0
    n = len(records)
    for _ in range(count):
        if pos >= n:
            raise FormatError(f"batch at {base_offset}: {count} records announced, the bytes end earlier")
        length, pos = _varint(records, pos)
        end = pos + length
        p = pos + 1  # record attributes (unused)
        ts_delta, p = _varint(records, p)
        delta, p = _varint(records, p)
        klen, p = _varint(records, p)
        if klen < 0:
            key = None
        else:
            key = records[p:p + klen]
            p += klen
        vlen, p = _varint(records, p)
        if vlen < 0:
            value = None
        else:
            value = records[p:p + vlen]
            p += vlen
        if base_timestamp is None:
            out.append((base_offset + delta, key, value))
        else:
            out.append((base_offset + delta, base_timestamp + ts_delta, key, value))
        pos = end


def batch_records(entry: bytes) -> Iterator[Record]:
    """The records of one magic 2 batch (the whole entry, from its base offset)."""
    if len(entry) < BATCH_HEAD.size:
        raise FormatError(f"record batch of {len(entry)} bytes: shorter than its header")
    (base, _length, _epoch, magic, _crc, attrs, _last, ts0, _tmax, pid, _pe, _seq,
     count) = BATCH_HEAD.unpack_from(entry, 0)
    codec = attrs & 0x07
    body = decompress(codec, entry[BATCH_HEAD.size:])
    recs: list = []
    parse_records(body, base, count, recs, ts0)
    control = bool(attrs & 0x20)
    txn_pid = pid if attrs & 0x10 else -1
    for off, ts, key, value in recs:
        kind = None
        if control:
            kind = "unknown"
            if key is not None and len(key) >= 4:
                kind = CONTROL_TYPES.get(struct.unpack_from(">h", key, 2)[0], "unknown")
        yield Record(off, ts, key, value, magic, codec, kind, txn_pid)


# -- magic 0/1 messages ----------------------------------------------------------------------------
def _bytes_at(data: bytes, pos: int) -> tuple[bytes | None, int]:
    (n,) = struct.unpack_from(">i", data, pos)
    pos += 4
    if n < 0:
        return None, pos
    if pos + n > len(data):
        raise FormatError(f"a field of {n} bytes runs past the end of its message")
    return data[pos:pos + n], pos + n


def legacy_records(entry: bytes, depth: int = 0) -> Iterator[Record]:
    """The records of one magic 0/1 message (the whole entry, from its offset): itself, or the
    inner messages of a compressed wrapper, with absolute offsets."""
    offset, size = struct.unpack_from(">qi", entry, 0)
    if LOG_OVERHEAD + size > len(entry) or size < 14:
        raise FormatError(f"message at offset {offset}: size {size} does not fit its {len(entry)} bytes")
    magic, attrs = entry[16], entry[17]
    pos, ts = 18, None
    if magic == 1:
        (ts,) = struct.unpack_from(">q", entry, pos)
        pos += 8
    elif magic != 0:
        raise FormatError(f"message at offset {offset}: magic {magic} is not a message set's (0 or 1)")
    key, pos = _bytes_at(entry, pos)
    value, pos = _bytes_at(entry, pos)
    codec = attrs & 0x07
    if codec == 0:
        yield Record(offset, ts, key, value, magic, 0)
        return
    if depth > 0:
        raise FormatError(f"message at offset {offset}: a compressed message inside a compressed message")
    inner = list(iter_entries(decompress(codec, value or b""), depth + 1))
    last_rel = inner[-1].offset if inner else 0
    for r in inner:
        absolute = offset - last_rel + r.offset if magic == 1 else r.offset
        yield r._replace(offset=absolute, codec=codec,
                         timestamp=ts if (magic == 1 and attrs & 0x08) else r.timestamp)  # LogAppendTime


def entry_records(entry: bytes, depth: int = 0) -> Iterator[Record]:
    """The records of one log entry of either family."""
    if len(entry) < 17:
        raise FormatError(f"log entry of {len(entry)} bytes: shorter than any header")
    magic = entry[16]
    if magic == 2:
        return batch_records(entry)
    return legacy_records(entry, depth)


def iter_entries(data: bytes, depth: int = 0) -> Iterator[Record]:
    """The records of whole entries in `data` (a trailing partial entry is ignored: a fetch answer
    can end inside one)."""
    pos, n = 0, len(data)
    while pos + LOG_OVERHEAD <= n:
        (size,) = struct.unpack_from(">i", data, pos + 8)
        end = pos + LOG_OVERHEAD + size
        if size <= 0 or end > n:
            break
        yield from entry_records(data[pos:end], depth)
        pos = end


def read_segment(f: BinaryIO, where: str = "segment") -> Iterator[Record]:
    """Every record of a log segment file, streaming (one entry in memory at a time). A segment
    ends at its last whole entry; zero padding (a preallocated segment) ends it too."""
    pos = 0
    while True:
        head = f.read(LOG_OVERHEAD)
        if len(head) < LOG_OVERHEAD:
            return
        offset, size = struct.unpack(">qi", head)
        if size == 0 and offset == 0 and pos > 0:
            return  # preallocated zeros after the last entry
        if size < 14:
            raise FormatError(f"{where} at byte {pos}: entry size {size} is not valid")
        body = f.read(size)
        if len(body) < size:
            return  # the broker was writing it: the last entry is not whole yet
        try:
            yield from entry_records(head + body)
        except FormatError as e:
            raise FormatError(f"{where} at byte {pos} (offset {offset}): {e}") from None
        pos += LOG_OVERHEAD + size

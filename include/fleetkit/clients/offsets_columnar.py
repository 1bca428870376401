"""__consumer_offsets records decoded column-wise: numpy over a Fetch answer's bytes, for the
common case, straight into the offsets_topic_records dataset's columns.

The per-record path (fleetkit.clients.wire_logs.parse_batches, then offsets_codec.decode and a
dict per row) costs about 10 us a record in Python. This module reads the same bytes as arrays:
one walk over the log entries (record batches, or Kafka 0.8-0.10 messages) and over the records of
the plain batches finds where each record starts; then each field is read for all records at once
(varints, int32 lengths), then the offset-commit keys (v0/v1) and values (v0-v4), strings gathered
into Arrow string arrays.

It takes only what offsets_codec's fast path takes (the same checks: offsets_codec._fast); every
other record, and every entry that is not a plain one (a compressed, transactional or control
batch, a compressed message, anything malformed), is handed back for the per-record path, which
also names the errors. Every entry's CRC is checked first (CRC32C of a batch, CRC32 of a message,
as log_format checks them): an answer holding an entry whose CRC does not match is left whole to
the per-record path, which counts the corrupt entry and takes nothing from it or after it. tests/unit/test_offsets_columnar.py compares both paths on the same bytes."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
from crc32c import crc32c

from fleetkit.clients.log_format import BATCH_HEAD, CRC_FROM, ENTRY_HEAD, MIN_RECORD, FormatError, _varint

HEAD = BATCH_HEAD.size  # 61: base offset .. record count
_BASE_LEN = ENTRY_HEAD
_PAD = 64  # zeros after the answer: a field read past the end of a record stays in the array


@dataclass
class Decoded:
    """What `decode` made of one partition's answer."""

    table: pa.Table | None                  # the taken records' rows (offsets_topic_records columns)
    slow_batches: bytes = b""               # whole batches for the per-record path, in order
    slow_records: list = field(default_factory=list)  # (offset, key, value) of plain batches, for the per-record path
    next_offset: int | None = -1            # the offset after the last whole entry (None: the per-record path's)
    batches: int = 0                        # plain batches taken here
    messages: int = 0                       # plain messages (magic 0/1) taken here


def _be(buf: np.ndarray, at: np.ndarray, width: int, signed: bool = True) -> np.ndarray:
    """Big-endian integers of `width` bytes at positions `at`."""
    v = np.zeros(len(at), dtype=np.uint64)
    for k in range(width):
        v = (v << np.uint64(8)) | buf[at + k].astype(np.uint64)
    out = v.astype(np.int64)  # 8 bytes: two's complement as it is
    if signed and width < 8:
        bits = 8 * width
        out = np.where(out >= (1 << (bits - 1)), out - (1 << bits), out)
    return out


def _varints(buf: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Zigzag varints (Kafka's readVarint / readVarlong) at positions `at`: (values, sizes, ok);
    ok is False where a varint runs over 10 bytes."""
    b0 = buf[at]
    if not (b0 & 0x80).any():  # all one byte (values -64..63): the common case
        v = b0.astype(np.int64)
        return (v >> 1) ^ -(v & 1), np.ones(len(at), dtype=np.int64), np.ones(len(at), dtype=bool)
    value = np.zeros(len(at), dtype=np.uint64)
    size = np.zeros(len(at), dtype=np.int64)
    more = np.ones(len(at), dtype=bool)
    for k in range(10):
        if not more.any():
            break
        b = buf[at + k].astype(np.uint64)
        value |= np.where(more, (b & np.uint64(0x7F)) << np.uint64(7 * k), np.uint64(0))
        size += more
        more &= b >= 0x80
    decoded = (value >> np.uint64(1)).astype(np.int64) ^ -(value & np.uint64(1)).astype(np.int64)
    return decoded, size, ~more


def _strings(buf: np.ndarray, start: np.ndarray, length: np.ndarray, null: np.ndarray) -> pa.Array:
    """A string array of the bytes [start, start + length) of each row (null where `null`);
    raises pa.ArrowInvalid when one is not UTF-8."""
    length = np.where(null, 0, length).astype(np.int64)
    offsets = np.zeros(len(start) + 1, dtype=np.int64)
    np.cumsum(length, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.repeat(start - offsets[:-1], length) + np.arange(total, dtype=np.int64)
    data = buf[idx].tobytes()
    validity = pa.array(~null).buffers()[1] if null.any() else None
    arr = pa.LargeStringArray.from_buffers(len(start), pa.py_buffer(offsets.tobytes()), pa.py_buffer(data),
                                           validity, int(null.sum()))
    arr.validate(full=True)
    return arr.cast(pa.string())


def _records(data: bytes, starts: list[int], ends: list[int], counts: list[int]):
    """The records of plain batches (their bytes: from start + HEAD to end): (record starts after
    their length, record lengths, batch indexes) as arrays, and the indexes of the batches whose
    records do not fill their bytes exactly (left to the per-record path)."""
    rs: list[int] = []
    rl: list[int] = []
    rb: list[int] = []
    bad: list[int] = []
    for i, (pos, end, count) in enumerate(zip(starts, ends, counts)):
        pos += HEAD
        first = len(rs)
        for _ in range(count):
            if pos >= end:
                break
            b = data[pos]
            if b < 0x80:  # one byte, then two: the common lengths, without a call
                ln, pos = (b >> 1) ^ -(b & 1), pos + 1
            elif pos + 1 < end and data[pos + 1] < 0x80:
                v = (b & 0x7F) | (data[pos + 1] << 7)
                ln, pos = (v >> 1) ^ -(v & 1), pos + 2
            else:
                try:
                    ln, pos = _varint(data, pos, end, 5)
                except FormatError:
                    break
            if ln < MIN_RECORD - 1 or pos + ln > end:
                break
            rs.append(pos)
            rl.append(ln)
            pos += ln
        else:
            if pos == end:
                rb.extend([i] * (len(rs) - first))
                continue
        del rs[first:], rl[first:]
        bad.append(i)
    return (np.array(rs, dtype=np.int64), np.array(rl, dtype=np.int64), np.array(rb, dtype=np.int64),
            np.array(bad, dtype=np.int64))


def _walk(data: bytes) -> list[int] | None:
    """Positions of the whole log entries in `data` (record batches, or Kafka 0.8-0.10 messages),
    as wire_logs.parse_batches walks them; None when this module leaves the answer to it (an
    entry shorter than its header)."""
    starts = []
    pos, n = 0, len(data)
    unpack = _BASE_LEN.unpack_from
    while pos + 17 <= n:
        length = unpack(data, pos)[1]
        v2 = data[pos + 16] == 2
        end = pos + 12 + length
        if end > n or (v2 and pos + HEAD > n):
            break
        if length < (HEAD - 12 if v2 else 14):
            return None
        starts.append(pos)
        pos = end
    return starts


def _crcs_match(data: bytes, starts: list[int]) -> bool:
    """Whether every entry's stored CRC is the one of its bytes (CRC32C of a batch from its
    attributes, CRC32 of a message from its magic byte)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    at = np.array(starts, dtype=np.int64)
    ends = (at + 12 + _be(buf, at + 8, 4)).tolist()
    v2 = buf[at + 16] == 2
    stored = np.where(v2, _be(buf, at + 17, 4, signed=False), _be(buf, at + 12, 4, signed=False))
    if v2.all():
        actual = [crc32c(data[s + CRC_FROM:e]) for s, e in zip(starts, ends)]
    elif not v2.any():
        actual = [zlib.crc32(data[s + 16:e]) for s, e in zip(starts, ends)]
    else:
        actual = [crc32c(data[s + CRC_FROM:e]) if m else zlib.crc32(data[s + 16:e])
                  for s, e, m in zip(starts, ends, v2.tolist())]
    return bool((stored == np.array(actual, dtype=np.int64)).all())


def decode(data: bytes, cluster: str, partition: int, observed_at, lo: int, end: int,
           schema: pa.Schema) -> Decoded | None:
    """One partition's Fetch answer (record bytes): the offset-commit records of its plain batches
    and messages at offsets [lo, end) as a table of `schema` (the offsets_topic_records schema),
    the rest for the per-record path. Records outside [lo, end) are dropped here, as the
    per-record path drops them. None: the whole answer is for the per-record path (no whole
    entry, bytes this module does not walk, a string that is not UTF-8)."""
    starts_list = _walk(data)
    if not starts_list or not _crcs_match(data, starts_list):
        return None
    try:
        return _decode(data, starts_list, cluster, partition, observed_at, lo, end, schema)
    except pa.ArrowInvalid:
        return None


def _decode(data: bytes, starts_list: list[int], cluster: str, partition: int, observed_at, lo: int, end: int,
            schema: pa.Schema) -> Decoded:
    buf = np.frombuffer(data + bytes(_PAD), dtype=np.uint8)
    n_data = len(data)

    def clamp(at):  # a position to read at: past the answer's end only into the padding
        return np.clip(at, 0, n_data)

    starts = np.array(starts_list, dtype=np.int64)
    base = _be(buf, starts, 8)
    length = _be(buf, starts + 8, 4)
    entry_end = starts + 12 + length
    magic = buf[starts + 16].astype(np.int64)
    v2 = magic == 2
    legacy = ~v2
    attrs = np.where(v2, _be(buf, clamp(starts + 21), 2), 0)
    last_delta = np.where(v2, _be(buf, clamp(starts + 23), 4), 0)
    count = np.where(v2, _be(buf, clamp(starts + 57), 4), 0)
    plain = v2 & ((attrs & 0x07) == 0) & ((attrs & 0x30) == 0) & (count >= 0)
    # an uncompressed message of magic 0 (Kafka 0.9) or 1: crc, magic, attributes, [timestamp],
    # key bytes, value bytes (int32 lengths)
    plain_msg = legacy & ((magic == 0) | (magic == 1)) & ((buf[starts + 17] & 0x07) == 0)
    # the next offset, as parse_batches gives it, unless the last entry is a compressed message
    # (its inner offsets decide: parse_batches' answer on the slow bytes is taken then)
    if v2[-1]:
        next_offset = int(base[-1] + last_delta[-1] + 1)
    else:
        next_offset = int(base[-1] + 1) if plain_msg[-1] else None

    # records of plain batches: where each starts (after its length) and how long it is
    pb = np.flatnonzero(plain)
    rs, rl, rb, bad = _records(data, starts[pb].tolist(), entry_end[pb].tolist(), count[pb].tolist())
    ok = np.zeros(len(starts), dtype=bool)
    ok[pb] = True
    ok[pb[bad]] = False

    # their fields
    rend = rs + rl
    p = rs + 1  # attributes
    _ts, sz, ok1 = _varints(buf, p)
    p = p + sz
    delta, sz, ok2 = _varints(buf, p)
    p = p + sz
    ok2 &= sz <= 5
    klen, sz, ok3 = _varints(buf, p)
    ok3 &= (sz <= 5) & (klen >= -1)
    ks = p + sz
    p = ks + np.maximum(klen, 0)
    vlen, sz, ok4 = _varints(buf, clamp(p))
    ok4 &= (sz <= 5) & (vlen >= -1)
    vs = p + sz
    # no headers (a header count of 0) and nothing after them: records with headers, and anything
    # else, go the per-record way (which reads headers, and names what is malformed)
    hdr = vs + np.maximum(vlen, 0)
    fine = ok1 & ok2 & ok3 & ok4 & (hdr + 1 == rend) & (buf[clamp(hdr)] == 0)
    entry = pb[rb]
    ok[np.unique(entry[~fine])] = False
    offset = base[entry] + delta

    # the messages' fields
    pm = np.flatnonzero(plain_msg)
    kp = starts[pm] + 18 + np.where(magic[pm] == 1, 8, 0)
    mklen = _be(buf, clamp(kp), 4)
    mks = kp + 4
    vp = mks + np.maximum(mklen, 0)
    mvlen = _be(buf, clamp(vp), 4)
    mvs = vp + 4
    fits = ((vp + 4 <= entry_end[pm]) & (mklen >= -1) & (mvlen >= -1)
            & (mvs + np.maximum(mvlen, 0) == entry_end[pm]))
    ok[pm] = fits

    # both, in log order, then what is taken: records of readable entries within [lo, end)
    entry = np.concatenate([entry, pm])
    order_in = np.concatenate([np.arange(len(rs)), np.zeros(len(pm), dtype=np.int64)])
    offset, klen, ks, vlen, vs = (np.concatenate(x) for x in (
        (offset, base[pm]), (klen, mklen), (ks, mks), (vlen, mvlen), (vs, mvs)))
    order = np.lexsort((order_in, entry))
    entry, offset, klen, ks, vlen, vs = (a[order] for a in (entry, offset, klen, ks, vlen, vs))
    keep = ok[entry] & (offset >= lo) & (offset < end)
    offset, klen, ks, vlen, vs = (a[keep] for a in (offset, klen, ks, vlen, vs))

    # offset-commit keys v0/v1: version, group, topic, partition (offsets_codec._fast)
    ksafe = np.where(klen >= 8, ks, 0)
    key_ok = (klen >= 8) & (buf[ksafe] == 0) & (buf[ksafe + 1] <= 1)
    gl = np.where(key_ok, _be(buf, ksafe + 2, 2, signed=False), 0)
    key_ok &= (gl < 0x8000) & (4 + gl + 2 <= klen)
    tpos = np.where(key_ok, ksafe + 4 + gl, 0)
    tl = np.where(key_ok, _be(buf, tpos, 2, signed=False), 0)
    key_ok &= (tl < 0x8000) & (4 + gl + 2 + tl + 4 == klen)
    ppos = np.where(key_ok, tpos + 2 + tl, 0)

    # values: null (a tombstone), v0-v2 (offset, metadata, commit time[, expire time]), v3 (leader
    # epoch), v4 (flexible: compact metadata, tagged fields: none or the topic id)
    tomb = vlen < 0
    vsafe = np.where(vlen >= 12, vs, 0)
    vv = np.where(vlen >= 12, buf[vsafe + 1].astype(np.int64), -1)
    val_ok = tomb | ((vlen >= 12) & (buf[vsafe] == 0) & (vv >= 0) & (vv <= 4))
    committed = _be(buf, vsafe + 2, 8)
    old = ~tomb & (vv <= 2)
    ml = _be(buf, vsafe + 10, 2, signed=False)
    old_null = old & (ml == 0xFFFF)
    old_ok = old & (old_null | (ml < 0x8000))
    r_old = np.where(old_null, 12, 12 + ml)
    old_ok &= vlen == r_old + np.where(vv == 1, 16, 8)
    v3 = ~tomb & (vv == 3)
    ml3 = np.where(vlen >= 16, _be(buf, vsafe + 14, 2, signed=False), 0x8000)
    v3_null = v3 & (ml3 == 0xFFFF)
    v3_ok = v3 & (v3_null | (ml3 < 0x8000))
    r3 = np.where(v3_null, 16, 16 + ml3)
    v3_ok &= (vlen >= 15) & (vlen == r3 + 8)
    v4 = ~tomb & (vv == 4)
    cn = buf[vsafe + 14].astype(np.int64)
    v4_null = v4 & (cn == 0)
    r4 = np.where(v4_null, 15, 15 + cn - 1)
    t4 = r4 + 8
    tpos4 = clamp(np.where(v4, vsafe + t4, 0))
    tag_none = (vlen == t4 + 1) & (buf[tpos4] == 0)
    tag_id = (vlen == t4 + 19) & (buf[tpos4] == 1) & (buf[tpos4 + 1] == 0) & (buf[tpos4 + 2] == 0x10)
    v4_ok = v4 & (vlen >= 15) & (cn < 0x80) & (tag_none | tag_id)
    val_ok &= tomb | old_ok | v3_ok | v4_ok
    take = key_ok & val_ok

    slow = [(int(offset[i]), data[ks[i]:ks[i] + klen[i]] if klen[i] >= 0 else None,
             data[vs[i]:vs[i] + vlen[i]] if vlen[i] >= 0 else None) for i in np.flatnonzero(~take)]
    slow_bytes = b"".join(data[s:e] for s, e, t in zip(starts.tolist(), entry_end.tolist(), ok) if not t)
    sel = np.flatnonzero(take)
    if sel.size == 0:
        return Decoded(None, slow_bytes, slow, next_offset, int((ok & v2).sum()), int((ok & legacy).sum()))
    offset, ks, klen, gl, tpos, tl, ppos = (a[sel] for a in (offset, ks, klen, gl, tpos, tl, ppos))
    vs, vlen, vv, committed, tomb = (a[sel] for a in (vs, vlen, vv, committed, tomb))
    old, old_null, ml, v3, v3_null, ml3, v4, v4_null, cn = (
        a[sel] for a in (old, old_null, ml, v3, v3_null, ml3, v4, v4_null, cn))
    r_old, r3, r4 = r_old[sel], r3[sel], r4[sel]
    m = len(sel)
    meta_start = np.where(old, vs + 12, np.where(v3, vs + 16, vs + 15))
    meta_len = np.where(old, ml, np.where(v3, ml3, cn - 1))
    meta_null = tomb | old_null | v3_null | v4_null
    r = np.where(old, r_old, np.where(v3, r3, r4))
    commit_ts = _be(buf, np.where(tomb, 0, vs + r), 8)
    expire = _be(buf, np.where(tomb, 0, vs + r + 8), 8)
    epoch = _be(buf, np.where(tomb, 0, vs + 10), 4)
    has_epoch = ~tomb & (v3 | v4)

    def const(value, typ):
        return pa.array([value], typ).take(pa.array(np.zeros(m, dtype=np.int32)))

    cols = {
        "cluster": const(cluster, pa.string()),
        "partition": const(partition, pa.int32()),
        "offset": pa.array(offset),
        "observed_at": const(observed_at, schema.field("observed_at").type),
        "key_version": pa.array(buf[ks + 1].astype(np.int16)),
        "group": _strings(buf, ks + 4, gl, np.zeros(m, dtype=bool)),
        "topic": _strings(buf, tpos + 2, tl, np.zeros(m, dtype=bool)),
        "topic_partition": pa.array(_be(buf, ppos, 4).astype(np.int32)),
        "value_version": pa.array(vv.astype(np.int16), mask=tomb),
        "committed_offset": pa.array(committed, mask=tomb),
        "leader_epoch": pa.array(epoch.astype(np.int32), mask=~has_epoch),
        "metadata": _strings(buf, meta_start, meta_len, meta_null),
        "commit_timestamp": pa.array(commit_ts, mask=tomb),
        "expire_timestamp": pa.array(expire, mask=tomb | ~(old & (vv == 1))),
        "tombstone": pa.array(tomb),
        "size_bytes": pa.array((klen + np.maximum(vlen, 0)).astype(np.int32)),
    }
    arrays = [cols[f.name].cast(f.type) if f.name in cols else pa.nulls(m, f.type) for f in schema]
    return Decoded(pa.Table.from_arrays(arrays, schema=schema), slow_bytes, slow, next_offset, int((ok & v2).sum()),
                   int((ok & legacy).sum()))

"""Partition logs and log dirs on the wire: raw record batches (Fetch), log dir sizes
(DescribeLogDirs) and the KRaft controller quorum (DescribeQuorum).

confluent-kafka hides what a reader of __consumer_offsets must see: it drops control batches
(transaction markers) without a trace, and it has no DescribeLogDirs or DescribeQuorum. This
module asks them on the toolkit's protocol layer (fleetkit.clients.protocol: the messages as
declared there, over the listener's security protocol):

* Fetch v0-v11 (0.9: v0; Kafka 4.x accepts v4 and later, KIP-896), read_uncommitted,
  topics by name. The answer's record batches are parsed here (record batch format v2, magic 2):
  base offset, length, leader epoch, magic, CRC, attributes (bits 0-2 compression, bit 4
  transactional, bit 5 control), last offset delta, timestamps, producer id / epoch, base
  sequence, record count, then records of varint fields (length, attributes, timestamp delta,
  offset delta, key, value, headers). A control record's key is (version int16, type int16:
  0 ABORT, 1 COMMIT). Every codec and the message sets of magic 0/1 are read (fleetkit.clients.log_format),
  each entry only after its CRC (CRC32C; CRC32 for magic 0/1) and bounds are checked: a corrupt
  entry is counted in BatchStats.corrupt_batches and nothing of it or after it is taken.
* DescribeLogDirs v1-v4 (4.x dropped v0): per log dir and partition, the size in bytes and the
  offset lag of a future replica.
* DescribeQuorum v0-v1: the KRaft metadata quorum's leader, voters and observers.

The record batch layout is Kafka's DefaultRecordBatch and DefaultRecord; control records those of
ControlRecordType / EndTransactionMarker.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass, field

from fleetkit.clients import log_format, wire
from fleetkit.clients.log_format import CONTROL_TYPES, parse_records
from fleetkit.clients.protocol import messages as m
from fleetkit.clients.protocol.messages import Api
from fleetkit.clients.protocol.schema import error_name
from fleetkit.clients.protocol.transport import Broker, ask_first
from fleetkit.core.errors import NotAuthorized, refused

log = logging.getLogger(__name__)


class WireError(ConnectionError):
    """A broker that cannot be asked (no common version) or answered unreadably."""


class Refused(WireError):
    """A broker answered a request with an error code (`error`: its name)."""

    def __init__(self, message: str, error: str):
        super().__init__(message)
        self.error = error


def not_authorized(error: str, resource_name: str | None, security, request: str | None = None) -> NotAuthorized:
    """The one-line error of a refused request (core.errors.AUTHORIZATION_ERRORS names the operation
    and resource type), naming the principal the connection logs in as."""
    principal = security.principal if security is not None else "User:ANONYMOUS"
    return refused(error, resource_name, principal, getattr(security, "cluster", None), request)


def version_for(broker: Broker, api: Api) -> int:
    """The version to ask `api` in; WireError naming both sides' versions when there is none."""
    v = api.pick_version(broker.versions)
    if v is not None:
        return v
    if broker.versions is None or api.key not in broker.versions:
        raise WireError(f"broker {broker.host}:{broker.port} does not offer {api.name} "
                        "(a broker before 0.10 answers no ApiVersions)")
    b_lo, b_hi = broker.versions[api.key]
    raise WireError(f"broker {broker.host}:{broker.port} accepts {api.name} v{b_lo}-v{b_hi}, this client "
                    f"speaks v{api.versions[0]}-v{api.versions[1]}")


def _ask(broker: Broker, api: Api, values: dict) -> tuple[int, dict]:
    """(version, answer) of one request in the highest version both sides speak."""
    v = version_for(broker, api)
    try:
        return v, broker.call(api, v, values)
    except struct.error as e:
        raise WireError(f"broker {broker.host}:{broker.port} answered {api.name} v{v} unreadably: {e}") from None


# -- record batches ---------------------------------------------------------------------------
_BATCH_HEAD = log_format.BATCH_HEAD
HEAD = _BATCH_HEAD.size
_BASE_LEN = log_format.ENTRY_HEAD
_LAST_DELTA = struct.Struct(">i")  # a batch's last offset delta, at byte 23 of its header


@dataclass
class BatchStats:
    """What a reader saw besides data records."""

    batches: int = 0
    control_batches: int = 0
    markers: dict[str, int] = field(default_factory=dict)      # control record type -> count
    transactional_records: int = 0
    legacy_message_sets: int = 0
    unsupported: list[str] = field(default_factory=list)       # batches that could not be read
    corrupt_batches: list[log_format.Corrupt] = field(default_factory=list)  # not decoded (CRC, bounds)


def parse_batches(data: bytes, stats: BatchStats, data_out: list, control_out: list | None = None) -> int:
    """Parse a Fetch answer's record bytes. Data records go to `data_out` as (offset, key, value,
    producer id or -1 when not transactional); control records to `control_out` as (offset,
    producer id, "commit" / "abort"). Returns the offset after the last whole batch (-1 when none
    is whole: a batch cut off at the end of an answer is read again by the next fetch).

    Each entry's CRC and bounds are checked before any of its records is taken (log_format). A
    corrupt entry is appended to `stats.corrupt_batches` (position in `data`, the offset its
    header names, why) and parsing stops there: its records and those after it are not taken,
    and the offset returned is the one after the last good entry before it."""
    pos, n, next_offset = 0, len(data), -1
    while pos + 17 <= n:  # an entry's offset, length, and the magic byte at 16 in both families
        base, length = _BASE_LEN.unpack_from(data, pos)
        magic = data[pos + 16]
        end = pos + 12 + length
        if end > n or (magic == 2 and pos + HEAD > n):
            break
        if length < (HEAD - 12 if magic == 2 else 14):
            raise log_format.FormatError(f"log entry at offset {base}: length {length} is shorter than its header")
        entry = data[pos:end]
        try:
            if magic != 2:  # a message set of Kafka 0.8-0.10's formats (0.9's, or an old topic's, never converted)
                got = log_format.legacy_records(entry)
            else:
                (base, length, _epoch, magic, _crc, attrs, last_delta, _t0, _t1, pid, _pe, _seq,
                 count) = _BATCH_HEAD.unpack_from(data, pos)
                problem = log_format.batch_problem(entry)
                if problem is not None:
                    raise log_format.FormatError(f"batch at offset {base}: {problem}")
                codec = attrs & 0x07
                if count < 0 or (codec == 0 and count * log_format.MIN_RECORD > length + 12 - HEAD):
                    raise log_format.FormatError(f"batch at offset {base}: record count {count} is impossible "
                                                 f"for its {length + 12 - HEAD} bytes of records")
                body = entry[HEAD:]
                if codec:
                    body = log_format.decompress(codec, body)
                recs: list = []
                parse_records(body, base, count, recs)
        except log_format.FormatError as e:
            stats.corrupt_batches.append(log_format.Corrupt(pos, base, str(e)))
            return next_offset
        if magic != 2:
            stats.legacy_message_sets += 1
            last = base
            for r in got:
                data_out.append((r.offset, r.key, r.value, -1))
                last = r.offset
            pos, next_offset = end, last + 1
            continue
        stats.batches += 1
        if attrs & 0x20:
            stats.control_batches += 1
            for off, key, _value in recs:
                kind = "unknown"
                if key is not None and len(key) >= 4:
                    kind = CONTROL_TYPES.get(struct.unpack_from(">h", key, 2)[0], "unknown")
                stats.markers[kind] = stats.markers.get(kind, 0) + 1
                if control_out is not None:
                    control_out.append((off, pid, kind))
        elif attrs & 0x10:
            stats.transactional_records += len(recs)
            data_out.extend((o, k, v, pid) for o, k, v in recs)
        else:
            data_out.extend((o, k, v, -1) for o, k, v in recs)
        pos, next_offset = end, base + last_delta + 1
    return next_offset


# -- Fetch ------------------------------------------------------------------------------------
def fetch_request(topic: str, positions: dict[int, int], max_bytes: int, partition_max_bytes: int,
                  max_wait_ms: int = 100) -> dict:
    """read_uncommitted, no fetch session, from replica -1 (a consumer)."""
    return {"MaxWaitMs": max_wait_ms, "MinBytes": 1, "MaxBytes": max_bytes, "Topics": [{"Topic": topic, "Partitions": [
        {"Partition": p, "FetchOffset": off, "PartitionMaxBytes": partition_max_bytes}
        for p, off in sorted(positions.items())]}]}


@dataclass
class FetchedPartition:
    partition: int
    error: str | None
    high_watermark: int
    last_stable_offset: int
    log_start_offset: int
    records: bytes


def fetched(answer: dict) -> list[FetchedPartition]:
    """The partitions of a Fetch answer (WireError when the whole answer is an error)."""
    if answer["ErrorCode"]:
        raise WireError(f"Fetch answered {error_name(answer['ErrorCode'])}")
    return [FetchedPartition(p["PartitionIndex"], error_name(p["ErrorCode"]), p["HighWatermark"], p["LastStableOffset"],
                             p["LogStartOffset"], p["Records"] or b"")
            for t in answer["Responses"] for p in t["Partitions"]]


def leaders(bootstrap: str, topic: str, timeout: float = 10.0,
            api_versions: bool = True, security=None) -> tuple[dict[int, int], dict[int, str]]:
    """({partition: leader id}, {broker id: host:port}) of `topic` from the first bootstrap server
    that answers a Metadata request (v7-v8; v0 without ApiVersions)."""
    def ask(broker: Broker):
        brokers, errors, parts = wire.metadata(_ask(broker, m.METADATA, wire.metadata_request([topic]))[1])
        if error_name(errors.get(topic, 0)) == "TOPIC_AUTHORIZATION_FAILED":
            raise not_authorized("TOPIC_AUTHORIZATION_FAILED", topic, security, "Metadata")
        return {pl.partition: pl.leader for pl in parts if pl.topic == topic}, brokers

    return ask_first(bootstrap, "a metadata request", ask, timeout, api_versions, error=WireError, security=security)


def fetch_log(bootstrap: str, topic: str, ranges: dict[int, tuple[int, int]], on_batch, timeout: float = 10.0,
              max_bytes: int = 32 * 1024 * 1024, partition_max_bytes: int = 8 * 1024 * 1024,
              api_versions: bool = True, security=None) -> dict[int, str]:
    """Read each partition of `ranges` ({partition: (from offset, to offset)}) from its leader,
    calling on_batch(partition, record bytes) for every answer with data, in offset order per
    partition; on_batch returns the offset to fetch next (-1: no whole batch yet). Stops a
    partition at its `to` offset or its last stable offset, whichever is lower. Returns
    {partition: problem} for partitions that could not be read to the end. `api_versions`
    False: the brokers answer no ApiVersions (0.9): Fetch v0, which has no limit for the whole
    answer, so each request asks at most max_bytes / partition_max_bytes partitions."""
    lead, addrs = leaders(bootstrap, topic, timeout, api_versions, security)
    by_broker: dict[int, dict[int, tuple[int, int]]] = {}
    problems: dict[int, str] = {}
    for p, rng in ranges.items():
        b = lead.get(p, -1)
        if b < 0 or b not in addrs:
            problems[p] = f"{topic}-{p} has no leader"
            continue
        by_broker.setdefault(b, {})[p] = rng
    for b, parts in by_broker.items():
        host, _, port = addrs[b].rpartition(":")
        broker = Broker(host, int(port), timeout, api_versions, security)
        try:
            _fetch_from(broker, topic, parts, on_batch, problems, max_bytes, partition_max_bytes, security)
        finally:
            broker.close()
    return problems


def _fetch_from(broker: Broker, topic: str, parts: dict[int, tuple[int, int]], on_batch, problems: dict[int, str],
                max_bytes: int, partition_max_bytes: int, security) -> None:
    """fetch_log's reading from one leader, pipelined: while on_batch decodes one answer, the next
    Fetch is already asked, at the positions the answer's entry headers give (next_offset), and
    received on a second thread (TLS decryption releases the GIL, so it overlaps the decoding, and
    the broker prepares the answer meanwhile). The answer is used only when the request the
    decoded positions call for is exactly that one; otherwise it is received, dropped, and the
    right request sent: the positions are always those on_batch returned."""
    from concurrent.futures import ThreadPoolExecutor

    v = version_for(broker, m.FETCH)
    pos = {p: a for p, (a, z) in parts.items() if a < z}
    end = {p: z for p, (_, z) in parts.items()}
    if not pos:
        return
    per_request = len(pos) if v >= 3 else max(1, max_bytes // partition_max_bytes)
    receiver = ThreadPoolExecutor(1, thread_name_prefix=f"fetch-{broker.host}:{broker.port}")

    def ask(positions: dict[int, int]):
        broker.conn.send(m.FETCH.encode_request(v, 0, fetch_request(topic, positions, max_bytes, partition_max_bytes)))
        return positions, receiver.submit(broker.conn.payload)

    try:
        asked, turn = _next_request(pos, per_request, 0)
        pending = ask(asked)
        stale = 0
        while pos:
            try:
                answer = fetched(m.FETCH.decode_response(v, pending[1].result())[1])
            except struct.error as e:
                raise WireError(f"broker {broker.host}:{broker.port} answered Fetch v{v} unreadably: {e}") from None
            pending = None
            for fp in answer:
                if fp.partition in pos and fp.error == "TOPIC_AUTHORIZATION_FAILED":
                    raise not_authorized(fp.error, topic, security, "Fetch")
            guess_pos, guess_end = dict(pos), dict(end)
            _advance(topic, guess_pos, guess_end, answer, {fp.partition: next_offset(fp.records) for fp in answer}, {})
            if guess_pos:
                pending = ask(_next_request(guess_pos, per_request, turn)[0])
            nexts = {fp.partition: on_batch(fp.partition, fp.records) for fp in answer
                     if fp.partition in pos and not fp.error and fp.records}
            stale = 0 if _advance(topic, pos, end, answer, nexts, problems) else stale + 1
            if stale >= 20:
                for p in pos:
                    problems[p] = f"{topic}-{p}: no progress at offset {pos[p]} (end {end[p]})"
                break
            if not pos:
                break
            asked, turn = _next_request(pos, per_request, turn)
            if pending is not None and pending[0] == asked:
                continue  # the request already on its way is the right one
            if pending is not None:
                pending[1].result()  # a wrong guess: its answer is dropped
            pending = ask(asked)
        if pending is not None:  # a guess no longer needed (the decoding stopped the partition)
            pending[1].result()
    finally:
        receiver.shutdown(wait=False)


def _next_request(pos: dict[int, int], per_request: int, turn: int) -> tuple[dict[int, int], int]:
    """The positions to ask next and the next turn: every partition, or per_request of them in
    turns, so that every partition moves."""
    asked = sorted(pos)
    if len(asked) > per_request:
        turn %= len(asked)
        asked = (asked[turn:] + asked[:turn])[:per_request]
        turn += per_request
    return {p: pos[p] for p in asked}, turn


def _advance(topic: str, pos: dict[int, int], end: dict[int, int], answer: list[FetchedPartition],
             nexts: dict[int, int], problems: dict[int, str]) -> bool:
    """Apply one Fetch answer to the positions (nexts: the offset to fetch next per partition, -1:
    no whole entry yet); partitions read to their end, or answering an error, leave `pos`. True
    when some position moved."""
    moved = False
    for fp in answer:
        p = fp.partition
        if p not in pos:
            continue
        if fp.error:
            problems[p] = f"{topic}-{p} at offset {pos[p]}: {fp.error}"
            del pos[p]
            continue
        if 0 <= fp.last_stable_offset < end[p]:
            end[p] = fp.last_stable_offset
        nxt = nexts.get(p, -1) if fp.records else -1
        if nxt > pos[p]:
            pos[p], moved = nxt, True
        elif fp.high_watermark <= pos[p]:
            # nothing at or after the position (the rest was compacted away)
            pos[p] = max(pos[p], min(fp.high_watermark, end[p]))
        # (no records below the high watermark: the answer's size limit was spent on other
        # partitions; asked again next round)
        if pos[p] >= end[p]:
            del pos[p]
            moved = True
    return moved


def next_offset(records: bytes) -> int:
    """The offset after the last whole entry of a Fetch answer's record bytes, from the entries'
    headers alone (-1: none whole): where the reader will most likely continue. A guess for the
    pipelined fetch, never trusted: parse_batches (CRC checked) gives the real position."""
    at, n, nxt = 0, len(records), -1
    while at + 17 <= n:
        base, length = _BASE_LEN.unpack_from(records, at)
        stop = at + 12 + length
        if length < 14 or stop > n:
            break
        if records[at + 16] == 2:
            if at + HEAD > n:
                break
            nxt = base + _LAST_DELTA.unpack_from(records, at + 23)[0] + 1
        else:  # magic 0/1: an entry's offset is its last message's (a compressed wrapper's too)
            nxt = base + 1
        at = stop
    return nxt


# -- DescribeLogDirs --------------------------------------------------------------------------
@dataclass(frozen=True)
class LogDirPartition:
    broker: int
    log_dir: str
    topic: str
    partition: int
    size_bytes: int
    offset_lag: int
    is_future: bool
    dir_error: str | None = None


def log_dirs(answer: dict, broker: int) -> list[LogDirPartition]:
    """The replicas of a DescribeLogDirs answer (a log dir answering an error and no partition: one
    row naming the error); Refused when the whole answer is an error."""
    if answer["ErrorCode"]:
        name = error_name(answer["ErrorCode"])
        raise Refused(f"broker {broker}: DescribeLogDirs answered {name}", name)
    out = []
    for d in answer["Results"]:
        derr = error_name(d["ErrorCode"])
        out += [LogDirPartition(broker, d["LogDir"], t["Name"], p["PartitionIndex"], p["PartitionSize"], p["OffsetLag"],
                                p["IsFutureKey"], derr) for t in d["Topics"] for p in t["Partitions"]]
        if derr and not out:
            out.append(LogDirPartition(broker, d["LogDir"], "", -1, 0, 0, False, derr))
    return out


def log_dir_sizes(bootstrap: str, topics: dict[str, list[int]] | None, timeout: float = 10.0,
                  brokers: dict[int, str] | None = None, security=None) -> tuple[list[LogDirPartition], dict[int, str]]:
    """DescribeLogDirs asked of every broker of the cluster (each answers for its own log dirs):
    (the partitions' replicas with their sizes, {broker id: problem} of brokers that did not
    answer)."""
    if brokers is None:
        _, brokers = leaders(bootstrap, next(iter(topics)) if topics else "__consumer_offsets", timeout,
                             security=security)
    out, problems = [], {}
    for b, addr in sorted(brokers.items()):
        host, _, port = addr.rpartition(":")
        try:
            broker = Broker(host, int(port), timeout, security=security)
        except OSError as e:
            problems[b] = f"broker {b} ({addr}) unreachable: {e}"
            continue
        try:
            request = {"Topics": None if topics is None else [{"Topic": t, "Partitions": ps}
                                                              for t, ps in sorted(topics.items())]}
            out += log_dirs(_ask(broker, m.DESCRIBE_LOG_DIRS, request)[1], b)
        except Refused as e:
            if e.error == "CLUSTER_AUTHORIZATION_FAILED":
                raise not_authorized(e.error, None, security, "DescribeLogDirs") from None
            problems[b] = f"broker {b} ({addr}): {e}"
        except (OSError, WireError) as e:
            problems[b] = f"broker {b} ({addr}): {e}"
        finally:
            broker.close()
    return out, problems


# -- DescribeQuorum ---------------------------------------------------------------------------
@dataclass(frozen=True)
class Quorum:
    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[tuple[int, int], ...]     # (replica id, log end offset)
    observers: tuple[tuple[int, int], ...]
    #: (voter id, its last fetch from the leader in ms since the epoch, on the leader's clock; -1
    #: unknown: DescribeQuorum v0). The leader reports its own as its current time.
    voter_last_fetch: tuple[tuple[int, int], ...] = ()


def quorum(answer: dict) -> Quorum:
    """The __cluster_metadata partition of a DescribeQuorum answer."""
    if answer["ErrorCode"]:
        name = error_name(answer["ErrorCode"])
        raise Refused(f"DescribeQuorum answered {name}", name)
    for t in answer["Topics"]:
        for p in t["Partitions"]:
            if p["PartitionIndex"] == 0 and not p["ErrorCode"]:
                voters, observers = p["CurrentVoters"], p["Observers"]
                return Quorum(p["LeaderId"], p["LeaderEpoch"], p["HighWatermark"],
                              tuple((v["ReplicaId"], v["LogEndOffset"]) for v in voters),
                              tuple((o["ReplicaId"], o["LogEndOffset"]) for o in observers),
                              tuple((v["ReplicaId"], v["LastFetchTimestamp"]) for v in voters))
    raise WireError("DescribeQuorum named no __cluster_metadata partition")


def describe_quorum(bootstrap: str, timeout: float = 10.0, security=None) -> Quorum:
    """The KRaft metadata quorum as a broker reports it (brokers forward the request to the
    active controller)."""
    def ask(broker: Broker) -> Quorum:
        try:
            return quorum(_ask(broker, m.DESCRIBE_QUORUM, {"Topics": [
                {"TopicName": "__cluster_metadata", "Partitions": [{"PartitionIndex": 0}]}]})[1])
        except Refused as e:  # (not retried on the next bootstrap server)
            if e.error == "CLUSTER_AUTHORIZATION_FAILED":
                raise not_authorized(e.error, None, security, "DescribeQuorum") from None
            raise

    return ask_first(bootstrap, "DescribeQuorum", ask, timeout, error=WireError, security=security)

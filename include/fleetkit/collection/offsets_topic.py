"""Collect __consumer_offsets records and the segment inventory of its partitions.

Records: the first run reads each partition from its log start, later runs from where the last
stopped (positions kept under the data root: a 200 GB partition cannot be re-read every five
minutes), starting over when the log start moved past the saved position or the log is another
one than the one read before (a cluster or topic re-created under the same name, a truncated log:
`log_marks`). Each run stops at the high watermark it saw when it began. Undecodable records are
counted and reported with their partition and offset; decoding goes on.

Partitions are read on the wire (fleetkit.clients.wire_logs: Fetch v4-v11 and record batches v2
from brokers that answer ApiVersions, Fetch v0 and message sets from 0.9), so the reader sees what
confluent-kafka hides: control batches (transaction markers) are skipped and counted, records of
a transaction are kept only once its COMMIT marker is read (an aborted transactional offset
commit never took effect), and a transaction still open at the end stops that partition's
position at its first record (the next run reads it again). The common records are decoded
column-wise (fleetkit.clients.offsets_columnar) when the rows go to the dataset. A confluent-kafka
consumer reads instead when the wire client cannot log in (SASL GSSAPI / OAUTHBEARER) or a run reads at most N records
(the commit index). Records
of the consumer group protocol (KIP-848) and other newer types are counted per kind; a key
version this decoder does not know is counted per version, never an error.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import statistics
import struct
import time
import uuid
import zlib
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import ConfigResource, ResourceType

from fleetkit.clients.broker_files import BrokerFiles, LocalBrokerFiles
from fleetkit.clients.kafka import KafkaCluster, error_name
from fleetkit.clients.offsets_codec import DecodeError, decode
from fleetkit.collection import log_marks, rebalances
from fleetkit.core.datasets import SCHEMAS, DataRoot, Staging, table_from_rows, utcnow
from fleetkit.core.errors import ClusterUnreachable
from fleetkit.core.fleet import Cluster
from fleetkit.core.kafka_names import OFFSETS_TOPIC

log = logging.getLogger(__name__)


@dataclass
class RecordsResult:
    rows: list[dict]
    positions: dict[int, int]
    problems: list[str] = field(default_factory=list)
    other_versions: int = 0          # records of the newer protocols (not rows of the dataset)
    restarted: list[int] = field(default_factory=list)
    seconds: float = 0.0
    records_written: int = 0
    kinds: dict[str, int] = field(default_factory=dict)             # decoded records per kind
    unknown_versions: dict[int, int] = field(default_factory=dict)  # key version -> records
    control_batches: int = 0
    markers: dict[str, int] = field(default_factory=dict)            # "commit" / "abort" -> markers
    aborted_records: int = 0         # records of aborted transactions (not taken)
    open_transactions: int = 0       # transactions without a marker yet (left for the next run)
    reader: str = ""                 # "wire" or "consumer"
    #: record batches that failed their CRC or bounds checks: (partition, offset, reason); their
    #: records are not decoded and the partition is read no further this run
    corrupt_batches: list[tuple[int, int, str]] = field(default_factory=list)

    def summary(self) -> str:
        unknown = ", ".join(f"key version {v}: {n}" for v, n in sorted(self.unknown_versions.items()))
        return (f"records per kind {dict(sorted(self.kinds.items()))}; control batches {self.control_batches} "
                f"(markers {self.markers}); aborted-transaction records {self.aborted_records}; open transactions "
                f"{self.open_transactions}" + (f"; UNKNOWN record types ({unknown})" if unknown else "")
                + (f"; CORRUPT record batches {len(self.corrupt_batches)} (not decoded)" if self.corrupt_batches else ""))


def record_row(cluster: str, partition: int, offset: int, observed_at: dt.datetime, key: bytes,
               value: bytes | None, decoded: dict | None = None) -> dict | None:
    d = decoded if decoded is not None else decode(key, value, f"{OFFSETS_TOPIC}-{partition} offset {offset}")
    if d["kind"] not in ("offset_commit", "group_metadata"):
        return None
    row = {"cluster": cluster, "partition": partition, "offset": offset, "observed_at": observed_at,
           "key_version": d["key_version"], "group": d.get("group"), "topic": d.get("topic"),
           "topic_partition": d.get("partition"), "value_version": d.get("value_version"),
           "committed_offset": d.get("offset"), "leader_epoch": d.get("leader_epoch"),
           "metadata": d.get("metadata"), "commit_timestamp": d.get("commit_timestamp"),
           "expire_timestamp": d.get("expire_timestamp"), "tombstone": d["tombstone"],
           "size_bytes": len(key) + (len(value) if value is not None else 0),
           "generation": d.get("generation"), "protocol_type": d.get("protocol_type"),
           "protocol": d.get("protocol"), "leader": d.get("leader"), "members": None,
           # not in the dataset; the rebalance history reads them (collection.rebalances)
           "state_timestamp": d.get("current_state_timestamp")}
    if d.get("members") is not None:
        row["members"] = [{"client_id": m.get("client_id"), "client_host": m.get("client_host"),
                           "member_id": m.get("member_id"), "group_instance_id": m.get("group_instance_id"),
                           "rebalance_timeout": m.get("rebalance_timeout"),
                           "session_timeout": m.get("session_timeout")} for m in d["members"]]
    return row


CHUNK_ROWS = 250_000


class _Taker:
    """Turns (partition, offset, key, value) into rows and counts; shared by both readers. With a
    `table_sink`, rows go there as Arrow tables of the offsets_topic_records dataset (rows decoded
    column-wise by fleetkit.clients.offsets_columnar and the per-record path's rows together, in
    partition and offset order per table), CHUNK_ROWS at a time."""

    def __init__(self, cluster: str, observed_at: dt.datetime, res: RecordsResult, sink, progress_every: int,
                 on_record=None, table_sink=None, on_progress=None):
        self.cluster, self.observed_at, self.res, self.sink = cluster, observed_at, res, sink
        self.progress_every, self.read = progress_every, 0
        #: on_progress(records read): told every PROGRESS_STEP records (a progress bar's feed)
        self.on_progress = on_progress
        self.table_sink, self.tables, self.table_rows = table_sink, [], 0
        self.columnar = table_sink is not None and on_record is None
        if table_sink is not None:
            self.sink = lambda rows: self.flush()
        if on_record is not None:  # every record, undecoded, to the caller (fleetctl offsets dump)
            self.take = lambda p, off, key, value: self._hand(on_record, p, off, key, value)

    def take_table(self, table) -> None:
        """Rows decoded column-wise (offset commits), counted as `take` counts them."""
        n = table.num_rows
        before, self.read = self.read, self.read + n
        self.res.kinds["offset_commit"] = self.res.kinds.get("offset_commit", 0) + n
        self.tables.append(table)
        self.table_rows += n
        if self.table_rows + len(self.res.rows) >= CHUNK_ROWS:
            self.flush()
        if before // self.progress_every != self.read // self.progress_every:
            log.info("%s: %d records read", OFFSETS_TOPIC, self.read)
        if self.on_progress is not None:
            self.on_progress(self.read)

    def flush(self) -> None:
        """Hand the rows so far to the table sink, as one table in partition and offset order."""
        import pyarrow as pa
        import pyarrow.compute as pc

        parts = self.tables + ([table_from_rows("offsets_topic_records", self.res.rows)] if self.res.rows else [])
        self.tables, self.table_rows, self.res.rows = [], 0, []
        if parts:
            table = pa.concat_tables(parts)
            self.table_sink(table.take(pc.sort_indices(table, [("partition", "ascending"), ("offset", "ascending")])))

    def _hand(self, on_record, p: int, off: int, key: bytes | None, value: bytes | None) -> None:
        self.read += 1
        on_record(p, off, key, value)

    def take(self, p: int, off: int, key: bytes | None, value: bytes | None) -> None:
        res = self.res
        self.read += 1
        try:
            d = decode(key, value, f"{OFFSETS_TOPIC}-{p} offset {off}")
        except DecodeError as e:
            res.problems.append(str(e))
            return
        kind = d["kind"]
        res.kinds[kind] = res.kinds.get(kind, 0) + 1
        if kind == "unknown":
            v = d["key_version"]
            if v not in res.unknown_versions:
                log.warning("%s-%d offset %d: record type (key version) %d is unknown to this decoder: counted, "
                            "not decoded", OFFSETS_TOPIC, p, off, v)
            res.unknown_versions[v] = res.unknown_versions.get(v, 0) + 1
            return
        if kind not in ("offset_commit", "group_metadata"):
            res.other_versions += 1
            return
        res.rows.append(record_row(self.cluster, p, off, self.observed_at, key, value, d))
        if self.sink is not None and len(res.rows) >= CHUNK_ROWS:
            self.sink(res.rows)
            res.rows = []
        if self.read % self.progress_every == 0:
            log.info("%s: %d records read", OFFSETS_TOPIC, self.read)
        if self.on_progress is not None and self.read % PROGRESS_STEP == 0:
            self.on_progress(self.read)


#: records between two progress callbacks on the per-record path
PROGRESS_STEP = 10_000


def read_records(cluster: str, kafka: KafkaCluster, partitions: list[int], positions: dict[int, int],
                 observed_at: dt.datetime | None = None, max_records: int | None = None,
                 progress_every: int = 1_000_000, sink=None, on_record=None, ends: dict[int, int] | None = None,
                 table_sink=None, on_progress=None) -> RecordsResult:
    """Read records after `positions`. With `sink(rows)`, rows are handed over in chunks of
    CHUNK_ROWS (memory stays flat on huge partitions) instead of accumulating in the result; with
    `table_sink(table)`, the same as Arrow tables of the offsets_topic_records dataset (on the wire,
    the common records are then decoded column-wise: far faster). With
    `on_record(partition, offset, key, value)`, every record goes there instead, undecoded (no
    rows). `ends`: stop before these offsets (default: the log end now). `on_progress(read, total)`:
    records read so far, of `total` offsets to read (a compacted log has fewer records than offsets),
    told as the read goes and once at its end."""
    from fleetkit.clients import wire

    t0 = time.monotonic()
    observed_at = observed_at or utcnow()
    logs = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in partitions])
    res = RecordsResult(rows=[], positions=dict(positions))
    pos: dict[int, int] = {}
    stops = ends or {}
    ends = {}
    for p in partitions:
        start, end, err = logs[(OFFSETS_TOPIC, p)]
        refusal = kafka.refused(err, OFFSETS_TOPIC, "ListOffsets")
        if refusal is not None:  # the principal may not even DESCRIBE the topic: nothing is read
            raise refusal
        if err or start is None or end is None:
            res.problems.append(f"{OFFSETS_TOPIC}-{p}: log offsets not readable ({err}); skipped")
            continue
        end = min(end, stops.get(p, end))
        at = positions.get(p)
        at = start if at is None else at  # no saved position (e.g. the topic had no log end yet)
        if at < start:
            res.restarted.append(p)
            log.warning("%s-%d: log start %d moved past the saved position %d: reading again from the start",
                        OFFSETS_TOPIC, p, start, at)
            at = start
        res.positions[p] = at
        if at < end:
            pos[p], ends[p] = at, end
    total = sum(ends[p] - pos[p] for p in pos)
    told = None if on_progress is None else (lambda read: on_progress(read, total))
    taker = _Taker(cluster, observed_at, res, sink, progress_every, on_record, table_sink, told)
    if wire.supported(kafka.config) and max_records is None:
        res.reader = "wire"
        _read_wire(kafka, pos, ends, taker)
    else:
        res.reader = "consumer"
        _read_consumer(kafka, pos, ends, taker, max_records)
    if told is not None:
        told(taker.read)
    if table_sink is not None:
        taker.flush()
    elif sink is not None and res.rows:
        sink(res.rows)
        res.rows = []
    if res.unknown_versions:
        res.problems.append("record types unknown to this decoder (counted, not decoded): " + ", ".join(
            f"key version {v}: {n} record(s)" for v, n in sorted(res.unknown_versions.items())))
    res.seconds = time.monotonic() - t0
    return res


class BatchFeeder:
    """Record batches of __consumer_offsets partitions (a Fetch answer's record bytes) into the
    taker: data records in offset order, control batches counted, a transaction's records held
    until its marker (COMMIT: taken; ABORT: counted and dropped). Records before a partition's
    start position or at/after its end are ignored (a fetch answers from the batch holding the
    position)."""

    def __init__(self, taker: _Taker, starts: dict[int, int], ends: dict[int, int]):
        from fleetkit.clients import wire_logs

        self.wire_logs = wire_logs
        self.taker, self.res, self.ends = taker, taker.res, ends
        self.taken_to = dict(starts)
        self.pending: dict[int, dict[int, list]] = {}  # partition -> producer id -> [(offset, key, value)]
        self.stats = wire_logs.BatchStats()

    def feed(self, p: int, data: bytes) -> int:
        res, taker = self.res, self.taker
        recs: list = []
        ctl: list = []
        lo, end = self.taken_to[p], self.ends[p]
        fast = None
        if taker.columnar:
            from fleetkit.clients import offsets_columnar

            fast = offsets_columnar.decode(data, taker.cluster, p, taker.observed_at, lo, end,
                                           SCHEMAS["offsets_topic_records"])
        corrupt_before = len(self.stats.corrupt_batches)
        stats_before = copy.deepcopy(self.stats) if fast is not None else None
        try:
            nxt = self.wire_logs.parse_batches(fast.slow_batches if fast else data, self.stats, recs, ctl)
            if fast is not None and len(self.stats.corrupt_batches) > corrupt_before:
                # an entry left to this path is corrupt (the column-wise decoder already refuses an
                # answer with a CRC mismatch): read the whole answer this way, so that nothing after
                # the corrupt entry is taken
                self.stats, fast, recs, ctl = stats_before, None, [], []
                nxt = self.wire_logs.parse_batches(data, self.stats, recs, ctl)
        except (ValueError, IndexError, struct.error, zlib.error) as e:
            res.problems.append(f"{OFFSETS_TOPIC}-{p} at offset {self.taken_to[p]}: unreadable record batch ({e}); "
                                "the rest of this partition is not read")
            return self.ends[p]
        corrupt = self.stats.corrupt_batches[corrupt_before:]
        if fast is not None:
            self.stats.batches += fast.batches
            self.stats.legacy_message_sets += fast.messages
            if fast.next_offset is not None:
                nxt = fast.next_offset
            for off, k, v in fast.slow_records:
                taker.take(p, off, k, v)
            if fast.table is not None:
                taker.take_table(fast.table)
        txn = self.pending.setdefault(p, {})
        ci = 0
        for off, k, v, pid in recs:
            while ci < len(ctl) and ctl[ci][0] < off:
                self._marker(p, txn, ctl[ci], lo, end)
                ci += 1
            if off < lo or off >= end:
                continue
            if pid >= 0:  # a transactional batch (TxnOffsetCommit)
                txn.setdefault(pid, []).append((off, k, v))
            else:
                taker.take(p, off, k, v)
        for c in ctl[ci:]:
            self._marker(p, txn, c, lo, end)
        if nxt > self.taken_to[p]:
            self.taken_to[p] = nxt
        if corrupt:
            # the records before it were taken; the corrupt batch is not decoded and the partition
            # is read no further: the next run starts at it again (and reports it again)
            c = corrupt[0]
            res.corrupt_batches.append((p, c.offset, c.reason))
            res.problems.append(f"{OFFSETS_TOPIC}-{p}: corrupt record batch at offset {c.offset} ({c.reason}); "
                                "its records are not decoded and the rest of this partition is not read")
            return self.ends[p]
        return nxt

    def _marker(self, p: int, txn: dict, marker: tuple, lo: int, end: int) -> None:
        off, pid, kind = marker
        if off < lo or off >= end:
            return
        res = self.res
        res.control_batches += 1
        res.markers[kind] = res.markers.get(kind, 0) + 1
        got = txn.pop(pid, [])
        if kind == "commit":
            for o, k, v in got:
                self.taker.take(p, o, k, v)
        else:
            res.aborted_records += len(got)

    def finish(self, starts: dict[int, int], problems: dict[int, str]) -> None:
        """Positions for the next run: the end, or the first record of a transaction still open."""
        res = self.res
        res.problems.extend(f"{OFFSETS_TOPIC}: {u}" for u in self.stats.unsupported)
        for p in starts:
            taken = self.taken_to[p]
            at = taken if p in problems else min(max(taken, starts[p]), self.ends[p])
            open_first = [recs[0][0] for recs in self.pending.get(p, {}).values() if recs]
            if open_first:
                res.open_transactions += len(open_first)
                at = min(at, min(open_first))
            res.positions[p] = at


def _read_wire(kafka: KafkaCluster, pos: dict[int, int], ends: dict[int, int], taker: _Taker) -> None:
    """Fetch on the wire, through a BatchFeeder."""
    from fleetkit.clients import wire_logs

    feeder = BatchFeeder(taker, pos, ends)
    problems = wire_logs.fetch_log(kafka.bootstrap, OFFSETS_TOPIC, {p: (pos[p], ends[p]) for p in pos}, feeder.feed,
                                   timeout=kafka.timeout, api_versions=kafka.asks_api_versions,
                                   security=kafka.wire_security)
    for p, problem in problems.items():
        taker.res.problems.append(problem + "; stopped there, the next run resumes")
    feeder.finish(pos, problems)


#: seconds the consumer reader waits for a record before it gives up (the next run resumes)
READ_IDLE = 2.0


def _read_consumer(kafka: KafkaCluster, pos: dict[int, int], ends: dict[int, int], taker: _Taker,
                   max_records: int | None) -> None:
    res = taker.res
    c = Consumer(dict(kafka.config, **{"group.id": f"fleetkit-offsets-reader-{uuid.uuid4().hex}",
                                        "enable.auto.commit": False, "enable.partition.eof": True,
                                        "fetch.message.max.bytes": 8 * 1024 * 1024,
                                        "fetch.wait.max.ms": 100}))
    try:
        if pos:
            c.assign([TopicPartition(OFFSETS_TOPIC, p, o) for p, o in pos.items()])
        active = set(pos)
        # consume() waits its whole timeout unless the batch fills: short calls, so that the read
        # ends as soon as every partition reached its end, and READ_IDLE without a record at all
        idle_until = time.monotonic() + READ_IDLE
        while active and (max_records is None or taker.read < max_records):
            msgs = c.consume(num_messages=5000, timeout=0.1)
            kafka.login_failed()
            for m in msgs:  # a refused Fetch: READ on the topic is missing (not "no data"); the
                # throwaway group's own errors (no DESCRIBE on it) do not matter to an assigned reader
                if m.error() is not None and m.error().name() == "TOPIC_AUTHORIZATION_FAILED":
                    raise kafka.refused("TOPIC_AUTHORIZATION_FAILED", OFFSETS_TOPIC, "Fetch")
            if not msgs:
                if time.monotonic() < idle_until:
                    continue
                for p in sorted(active):
                    res.problems.append(f"{OFFSETS_TOPIC}-{p}: no data at offset {pos[p]} within {READ_IDLE:.0f} s "
                                        f"(end {ends[p]}); stopped there, the next run resumes")
                break
            idle_until = time.monotonic() + READ_IDLE
            for m in msgs:
                p = m.partition()
                if p not in active:
                    continue
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        pos[p] = max(pos[p], ends[p])  # the rest was compacted away, or all read
                        active.discard(p)
                    continue
                off = m.offset()
                if off >= ends[p]:
                    pos[p] = ends[p]
                    active.discard(p)
                    continue
                taker.take(p, off, m.key(), m.value())
                pos[p] = off + 1
                if pos[p] >= ends[p]:
                    active.discard(p)
    except KafkaException as e:
        kafka.login_failed()
        if error_name(e) == "TOPIC_AUTHORIZATION_FAILED":
            raise kafka.refused("TOPIC_AUTHORIZATION_FAILED", OFFSETS_TOPIC, "Fetch") from None
        res.problems.append(f"reading {OFFSETS_TOPIC} failed: {e}")
    finally:
        c.close()
    res.positions.update(pos)


DESCRIBE_CONFIGS_SINCE = (0, 11)
CLEANER_KEYS = {"log.cleaner.dedupe.buffer.size": ("dedupe_buffer_size", int),
                "log.cleaner.threads": ("threads", int),
                "log.cleaner.io.buffer.load.factor": ("load_factor", float),
                "log.cleaner.enable": ("cleaner_enabled", lambda v: str(v).lower() == "true")}
TOPIC_KEYS = {"segment.bytes": ("segment_bytes", int), "min.cleanable.dirty.ratio": ("min_cleanable_ratio", float),
              "cleanup.policy": ("cleanup_policy", str)}


def _describe(admin, resources: list, timeout: float) -> dict[str, dict[str, str]]:
    """DescribeConfigs, one resource per call (the client allows one broker resource per call)."""
    out = {}
    for one in resources:
        for res, fut in admin.describe_configs([one], request_timeout=timeout).items():
            entries = fut.result(timeout=timeout + 5)
            out[res.name] = {k: e.value for k, e in entries.items()}
    return out


def cleaner_settings(admin, broker_ids: list[int], timeout: float = 15.0, kafka: KafkaCluster | None = None) -> dict:
    """{"brokers": {id: {dedupe_buffer_size, threads, load_factor, cleaner_enabled}}, "topic":
    {segment_bytes, min_cleanable_ratio, cleanup_policy}} from DescribeConfigs. With `kafka`, a
    refusal (DESCRIBE_CONFIGS on the cluster or the topic) raises its NotAuthorized."""
    try:
        got = _describe(admin, [ConfigResource(ResourceType.BROKER, str(b)) for b in broker_ids]
                        + [ConfigResource(ResourceType.TOPIC, OFFSETS_TOPIC)], timeout)
    except KafkaException as e:
        refusal = kafka.refused(error_name(e), OFFSETS_TOPIC, "DescribeConfigs") if kafka is not None else None
        if refusal is not None:
            raise refusal from None
        raise ClusterUnreachable(f"DescribeConfigs of the cleaner settings failed: {e}") from None
    brokers = {}
    for b in broker_ids:
        cfg = got.get(str(b), {})
        brokers[b] = {name: conv(cfg[k]) for k, (name, conv) in CLEANER_KEYS.items() if cfg.get(k) is not None}
    topic_cfg = got.get(OFFSETS_TOPIC, {})
    topic = {name: conv(topic_cfg[k]) for k, (name, conv) in TOPIC_KEYS.items() if topic_cfg.get(k) is not None}
    return {"brokers": brokers, "topic": topic}


def local_files(broker) -> BrokerFiles | None:
    """The broker's files when they are on this machine (access local, a log dir present), else
    None (the collection then asks the broker for sizes with DescribeLogDirs, from Kafka 1.0)."""
    if broker.access != "local" or not any(Path(d).is_dir() for d in broker.log_dirs):
        return None
    return LocalBrokerFiles(broker.log_dirs)


def inventory(cluster: Cluster, files_for=None, observed_at: dt.datetime | None = None,
              partitions: list[int] | None = None, skipped: list[int] | None = None) -> tuple[list[dict], list[dict]]:
    """(segment_inventory rows, cleaner_checkpoints rows) of __consumer_offsets on every broker
    whose files can be read. A broker for which files_for returns None is left out and its id
    appended to `skipped`."""
    observed_at = observed_at or utcnow()
    segs, cps = [], []
    for b in cluster.brokers:
        files: BrokerFiles | None = files_for(b) if files_for else local_files(b)
        if files is None:
            if skipped is not None:
                skipped.append(b.id)
            continue
        for log_dir, p in files.partitions(OFFSETS_TOPIC):
            if partitions is not None and p not in partitions:
                continue
            for s in files.segments(OFFSETS_TOPIC, p):
                segs.append({"cluster": cluster.name, "broker": b.id, "log_dir": s.log_dir, "topic": OFFSETS_TOPIC,
                             "partition": p, "observed_at": observed_at, "base_offset": s.base_offset,
                             "size_bytes": s.size_bytes, "modified_at": s.modified_at, "is_active": s.is_active})
        for (log_dir, topic, p), off in files.cleaner_checkpoints().items():
            if topic == OFFSETS_TOPIC and (partitions is None or p in partitions):
                cps.append({"cluster": cluster.name, "broker": b.id, "log_dir": log_dir, "topic": topic,
                            "partition": p, "observed_at": observed_at, "checkpoint_offset": off})
    return segs, cps


DESCRIBE_LOG_DIRS_SINCE = (1, 0)


def wire_inventory(cluster: Cluster, kafka: KafkaCluster, brokers: list[int], partitions: list[int],
                   observed_at: dt.datetime) -> list[dict]:
    """segment_inventory rows from DescribeLogDirs (no broker file access): one row per replica,
    its whole size as one segment starting at the partition's log start offset."""
    from fleetkit.clients import wire_logs

    _, addrs = wire_logs.leaders(kafka.bootstrap, OFFSETS_TOPIC, kafka.timeout, security=kafka.wire_security)
    wanted = {b: addrs[b] for b in brokers if b in addrs}
    found, problems = wire_logs.log_dir_sizes(kafka.bootstrap, {OFFSETS_TOPIC: sorted(partitions)}, kafka.timeout,
                                              brokers=wanted, security=kafka.wire_security)
    for b, problem in problems.items():
        log.warning("cluster %s: %s", cluster.name, problem)
    starts = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in partitions])
    rows = []
    for r in found:
        if r.topic != OFFSETS_TOPIC or r.is_future or r.partition not in partitions:
            continue
        start = starts.get((OFFSETS_TOPIC, r.partition), (None, None, None))[0]
        rows.append({"cluster": cluster.name, "broker": r.broker, "log_dir": r.log_dir, "topic": OFFSETS_TOPIC,
                     "partition": r.partition, "observed_at": observed_at, "base_offset": start or 0,
                     "size_bytes": r.size_bytes, "modified_at": observed_at, "is_active": True})
    return rows


def settings_path(root: DataRoot, cluster: str) -> str:
    """Where the collection keeps the cleaner settings the brokers reported (DescribeConfigs)."""
    return root.join("_state", f"cluster={cluster}", "cleaner_settings.json")


def _records_at(cluster: Cluster, kafka: KafkaCluster, offsets: dict[int, int], logs: dict | None = None) -> dict[int, str]:
    """log_marks.fingerprint of the record at each partition's offset, where one can be read (none
    when it was compacted away, is below the log start or is a control record). `logs`: the
    partitions' log offsets when already asked."""
    got: dict[int, str] = {}
    if not offsets:
        return got

    def on_record(p: int, off: int, key: bytes | None, value: bytes | None) -> None:
        if off == offsets.get(p):
            got[p] = log_marks.fingerprint(key, value)

    logs = logs or kafka.log_offsets([(OFFSETS_TOPIC, p) for p in offsets])
    readable = {}
    for p, o in offsets.items():
        start, end, _ = logs[(OFFSETS_TOPIC, p)]
        if start is not None and end is not None and start <= o < end:
            readable[p] = o
    if readable:
        read_records(cluster.name, kafka, sorted(readable), dict(readable), on_record=on_record,
                     ends={p: o + 1 for p, o in readable.items()})
    return got


def positions_path(root: DataRoot, cluster: str) -> str:
    return root.join("_state", f"cluster={cluster}", "offsets_topic_positions.json")


def collect_offsets_topic(cluster: Cluster, kafka: KafkaCluster, root: DataRoot,
                          partitions: list[int] | None = None, files_for=None, on_progress=None) -> RecordsResult:
    """Read new __consumer_offsets records and the segment inventory; write them all or nothing.

    Segments and cleaner checkpoints come from the brokers' files where they can be read; on
    brokers from 1.0 whose files cannot (files_for returns None) the partition sizes come from
    DescribeLogDirs. On brokers from 0.11 the cleaner settings each broker runs with and the
    topic's segment.bytes / min.cleanable.dirty.ratio come from DescribeConfigs (kept in
    settings_path, read by the trim_health job). `on_progress(read, total)`: read_records'."""
    parts = partitions if partitions is not None else list(range(cluster.offsets_topic_partitions))
    saved = {int(k): v for k, v in (root.read_json(positions_path(root, cluster.name), default={}) or {}).items()}
    now = utcnow()
    # the saved positions are of this log? (log_marks: a cluster re-created under the same name)
    state = log_marks.load(root, cluster.name)
    probe = {p: m["offset"] for p, m in state["marks"].items()
             if p in parts and saved.get(p) is not None and m["offset"] < saved[p]}
    replaced: dict[int, str] = {}
    if probe:
        logs = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in probe])
        replaced = log_marks.changed({p: state["marks"][p] for p in probe}, saved,
                                     {p: logs[(OFFSETS_TOPIC, p)][1] for p in probe},
                                     _records_at(cluster, kafka, probe, logs))
    for p, why in sorted(replaced.items()):
        log.warning("%s-%d of cluster %s: %s: read again from its log start; the rows collected before are "
                    "superseded", OFFSETS_TOPIC, p, cluster.name, why)
        saved.pop(p, None)
        state["marks"].pop(p, None)
        state["superseded_before"][p] = now.isoformat()
    staging = Staging(root, cluster.name, now)
    try:
        res = read_records(cluster.name, kafka, parts, saved, observed_at=now, on_progress=on_progress,
                           table_sink=lambda table: staging.add_table("offsets_topic_records", table))
        res.restarted += sorted(replaced)
        res.problems += [f"{OFFSETS_TOPIC}-{p}: {why}: read again from its log start (the rows collected "
                         "before are superseded)" for p, why in sorted(replaced.items())]
        skipped: list[int] = []
        segs, cps = inventory(cluster, files_for=files_for, observed_at=now, partitions=parts, skipped=skipped)
        if skipped and cluster.version_tuple >= DESCRIBE_LOG_DIRS_SINCE:
            segs += wire_inventory(cluster, kafka, skipped, parts, now)
        elif skipped:
            res.problems.append(f"brokers {skipped}: files not readable and Kafka {cluster.kafka_version} has no "
                                "DescribeLogDirs: no sizes for them")
        staging.add("segment_inventory", segs)
        staging.add("cleaner_checkpoints", cps)
    except BaseException:
        staging.abort()
        raise
    written = staging.commit()
    root.write_json_atomic(positions_path(root, cluster.name), {str(k): v for k, v in res.positions.items()})
    # the new marks: the last record read where the position moved (a mark that cannot be read stays)
    moved = {p: at - 1 for p, at in res.positions.items() if at and (at != saved.get(p) or p not in state["marks"])}
    for p, fp in _records_at(cluster, kafka, moved).items():
        state["marks"][p] = {"offset": moved[p], "sha256": fp}
    log_marks.save(root, cluster.name, state)
    if cluster.version_tuple >= DESCRIBE_CONFIGS_SINCE:
        try:
            got = cleaner_settings(kafka.admin, [b.id for b in cluster.brokers], kafka.timeout, kafka)
            root.write_json_atomic(settings_path(root, cluster.name), {
                "observed_at": now.isoformat(), "kafka_version": cluster.kafka_version,
                "brokers": {str(b): v for b, v in got["brokers"].items()}, "topic": got["topic"]})
        except ClusterUnreachable as e:
            res.problems.append(str(e))
    res.records_written = written.rows.get("offsets_topic_records", 0)
    log.info("cluster %s: %d __consumer_offsets records (%d of newer protocols skipped), %d segments, %d "
             "checkpoints, %d problem(s) in %.1fs; %s", cluster.name, res.records_written, res.other_versions,
             len(segs), len(cps), len(res.problems), res.seconds, res.summary())
    return res


# -- groups with live commits ------------------------------------------------------------------
# Brokers before 0.10.1 list only groups that joined (a group that commits without joining, or whose
# members all left before anyone listed it, is invisible to ListGroups) while __consumer_offsets
# holds its commits. The index below is kept incrementally beside the other reader state: per
# group, per partition commit key, when the commit expires. Tombstones remove keys.

#: offsets.retention.minutes' default before Kafka 2.0 (one day), for commit values without an expiry
DEFAULT_OFFSETS_RETENTION_MS = 24 * 3600 * 1000


def _commit_key(topic: str, partition: int) -> str:
    return f"{partition}:{topic}"


def fold_live_commits(index: dict[str, dict[str, int | None]], rows: list[dict],
                      retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS) -> None:
    """Apply offset-commit rows (record_row's) to `index` {group: {commit key: expires at ms or None}}
    in log order; group metadata and other records do not touch it."""
    for r in rows:
        if r.get("key_version") not in (0, 1) or r.get("group") is None or r.get("topic") is None:
            continue
        key = _commit_key(r["topic"], r["topic_partition"])
        if r.get("tombstone"):
            keys = index.get(r["group"])
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del index[r["group"]]
            continue
        expire = r.get("expire_timestamp")
        if expire is None and r.get("commit_timestamp") is not None:
            expire = r["commit_timestamp"] + retention_ms
        index.setdefault(r["group"], {})[key] = expire


def live_groups(index: dict[str, dict[str, int | None]], now_ms: int) -> set[str]:
    """Groups with at least one commit neither tombstoned nor expired at `now_ms`."""
    return {g for g, keys in index.items() if any(e is None or e > now_ms for e in keys.values())}


def prune_expired(index: dict[str, dict[str, int | None]], now_ms: int) -> None:
    for g in list(index):
        keys = {k: e for k, e in index[g].items() if e is None or e > now_ms}
        if keys:
            index[g] = keys
        else:
            del index[g]


#: offset changes remembered per partition, and how many it takes before their median is its rhythm
COMMIT_GAPS_KEPT = 8
COMMIT_GAPS_NEEDED = 3
COMMIT_VALUES_KEPT = 4


def fold_commit_times(times: dict[str, dict[str, list]], rows: list[dict]) -> None:
    """Apply offset-commit rows (log order) to `times` {group: {commit key: [offset, changed at ms,
    [gaps ms], [[earlier offset, changed at ms]]]}}: when a partition's committed offset changes,
    remember the commit time of the change, the gap since the previous change (the last
    COMMIT_GAPS_KEPT) and the values before it (the last COMMIT_VALUES_KEPT: a snapshot read just
    before the index still finds its offset). Re-commits of an unchanged offset change nothing
    (librdkafka's auto-commit skips them, Java's sends them)."""
    for r in rows:
        if r.get("key_version") not in (0, 1) or r.get("group") is None or r.get("topic") is None:
            continue
        key = _commit_key(r["topic"], r["topic_partition"])
        if r.get("tombstone"):
            keys = times.get(r["group"])
            if keys is not None:
                keys.pop(key, None)
                if not keys:
                    del times[r["group"]]
            continue
        offset, at = r.get("committed_offset"), r.get("commit_timestamp")
        if offset is None or at is None:
            continue
        keys = times.setdefault(r["group"], {})
        cur = keys.get(key)
        if cur is None:
            keys[key] = [offset, at, [], []]
        elif cur[0] != offset:
            earlier = (cur[3] if len(cur) > 3 else []) + [[cur[0], cur[1]]]
            keys[key] = [offset, at, (cur[2] + [max(0, at - cur[1])])[-COMMIT_GAPS_KEPT:],
                         earlier[-COMMIT_VALUES_KEPT:]]


def commit_rhythm(entry: list | None, committed_offset: int | None) -> tuple[dt.datetime | None, float | None]:
    """(when the committed offset took its value, the partition's typical seconds between offset
    changes) for a snapshot row, from a fold_commit_times entry: nothing when the entry is about
    another offset (a commit the log was not read up to yet), no rhythm before COMMIT_GAPS_NEEDED
    changes were seen."""
    if entry is None or committed_offset is None:
        return None, None
    if entry[0] == committed_offset:
        at = entry[1]
    else:  # the snapshot was read before the index: one of the offsets just before the latest
        at = next((t for o, t in reversed(entry[3] if len(entry) > 3 else []) if o == committed_offset), None)
        if at is None:
            return None, None
    changed = dt.datetime.fromtimestamp(at / 1000, tz=dt.timezone.utc)
    gaps = entry[2]
    return changed, (statistics.median(gaps) / 1000 if len(gaps) >= COMMIT_GAPS_NEEDED else None)


def add_commit_times(snapshots: list[dict], times: dict[str, dict[str, list]]) -> int:
    """Fill committed_at / commit_interval_seconds of Kafka-stored snapshot rows; returns how many."""
    n = 0
    for row in snapshots:
        if (row.get("source") or "kafka") != "kafka":
            continue
        entry = times.get(row["group"], {}).get(_commit_key(row["topic"], row["partition"]))
        changed, interval = commit_rhythm(entry, row.get("committed_offset"))
        if changed is not None:
            row["committed_at"], row["commit_interval_seconds"] = changed, interval
            n += 1
    return n


def committed_groups_path(root: DataRoot, cluster: str) -> str:
    return root.join("_state", f"cluster={cluster}", "committed_groups.json")


#: records one collection reads at most for the index (a bloated topic is caught up over several runs)
COMMITTED_GROUPS_MAX_RECORDS = 2_000_000


@dataclass
class CommitIndex:
    groups: set[str]                         # groups with live commits
    times: dict[str, dict[str, list]]        # fold_commit_times' state
    problems: list[str]
    generations: dict[str, dict] = field(default_factory=dict)  # collection.rebalances' state


def commit_index(cluster: Cluster, kafka: KafkaCluster, root: DataRoot,
                 retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
                 max_records: int = COMMITTED_GROUPS_MAX_RECORDS) -> CommitIndex:
    """Groups with live commits and each partition's commit rhythm, read incrementally from
    __consumer_offsets: the first call reads each partition from its log start, later ones only what
    was appended since (state in committed_groups.json under the data root), at most `max_records`
    per call. Stays within the collect stage: no Spark job."""
    path = committed_groups_path(root, cluster.name)
    state = root.read_json(path, default={}) or {}
    positions = {int(k): int(v) for k, v in (state.get("positions") or {}).items()}
    index: dict[str, dict[str, int | None]] = {g: dict(keys) for g, keys in (state.get("groups") or {}).items()}
    times: dict[str, dict[str, list]] = {g: dict(keys) for g, keys in (state.get("times") or {}).items()}
    generations: dict[str, dict] = dict(state.get("generations") or {})
    folded = [0]
    read_ms = int(time.time() * 1000)

    def fold(rows: list[dict]) -> None:
        folded[0] += len(rows)
        fold_live_commits(index, rows, retention_ms)
        fold_commit_times(times, rows)
        rebalances.fold_generations(generations, rows, read_ms)

    res = read_records(cluster.name, kafka, list(range(cluster.offsets_topic_partitions)), positions,
                       max_records=max_records, sink=fold)
    if folded[0] + res.other_versions >= max_records:
        res.problems.append(f"{OFFSETS_TOPIC}: the index of groups with commits read its {max_records} records for "
                            "this run and is still behind; groups that commit without joining may be missing "
                            "until later runs catch up")
    now_ms = int(time.time() * 1000)
    prune_expired(index, now_ms)
    times = {g: {k: v for k, v in keys.items() if k in index.get(g, {})} for g, keys in times.items() if g in index}
    times = {g: keys for g, keys in times.items() if keys}
    rebalances.prune(generations, now_ms)
    root.write_json_atomic(path, {"positions": {str(k): v for k, v in res.positions.items()}, "groups": index,
                                  "times": times, "generations": generations})
    log.info("cluster %s: %d group(s) with live commits in %s (%.1fs)", cluster.name, len(index), OFFSETS_TOPIC,
             res.seconds)
    return CommitIndex(live_groups(index, now_ms), times, res.problems, generations)

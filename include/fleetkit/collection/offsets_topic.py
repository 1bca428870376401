"""Collect __consumer_offsets records and the segment inventory of its partitions.

Records: the first run reads each partition from its log start, later runs from where the last
stopped (positions kept under the data root: a 200 GB partition cannot be re-read every five
minutes), starting over when the log start moved past the saved position. Each run stops at the
high watermark it saw when it began. Undecodable records are counted and reported with their
partition and offset; decoding goes on.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from fleetkit.clients.broker_files import BrokerFiles, LocalBrokerFiles
from fleetkit.clients.kafka import KafkaCluster
from fleetkit.clients.offsets_codec import DecodeError, decode
from fleetkit.core.datasets import DataRoot, Staging, utcnow
from fleetkit.core.fleet import Cluster
from fleetkit.core.kafka_names import OFFSETS_TOPIC

log = logging.getLogger(__name__)


@dataclass
class RecordsResult:
    rows: list[dict]
    positions: dict[int, int]
    problems: list[str] = field(default_factory=list)
    other_versions: int = 0
    restarted: list[int] = field(default_factory=list)
    seconds: float = 0.0
    records_written: int = 0


def record_row(cluster: str, partition: int, offset: int, observed_at: dt.datetime, key: bytes,
               value: bytes | None) -> dict | None:
    d = decode(key, value, f"{OFFSETS_TOPIC}-{partition} offset {offset}")
    if d["kind"] == "other":
        return None
    row = {"cluster": cluster, "partition": partition, "offset": offset, "observed_at": observed_at,
           "key_version": d["key_version"], "group": d.get("group"), "topic": d.get("topic"),
           "topic_partition": d.get("partition"), "value_version": d.get("value_version"),
           "committed_offset": d.get("offset"), "leader_epoch": d.get("leader_epoch"),
           "metadata": d.get("metadata"), "commit_timestamp": d.get("commit_timestamp"),
           "expire_timestamp": d.get("expire_timestamp"), "tombstone": d["tombstone"],
           "size_bytes": len(key) + (len(value) if value is not None else 0),
           "generation": d.get("generation"), "protocol_type": d.get("protocol_type"),
           "protocol": d.get("protocol"), "leader": d.get("leader"), "members": None}
    if d.get("members") is not None:
        row["members"] = [{"client_id": m.get("client_id"), "client_host": m.get("client_host"),
                           "member_id": m.get("member_id")} for m in d["members"]]
    return row


CHUNK_ROWS = 250_000


def read_records(cluster: str, kafka: KafkaCluster, partitions: list[int], positions: dict[int, int],
                 observed_at: dt.datetime | None = None, max_records: int | None = None,
                 progress_every: int = 1_000_000, sink=None) -> RecordsResult:
    """Read records after `positions`. With `sink(rows)`, rows are handed over in chunks of
    CHUNK_ROWS (memory stays flat on huge partitions) instead of accumulating in the result."""
    t0 = time.monotonic()
    observed_at = observed_at or utcnow()
    logs = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in partitions])
    res = RecordsResult(rows=[], positions=dict(positions))
    c = Consumer(dict(kafka.config, **{"group.id": f"fleetkit-offsets-reader-{uuid.uuid4().hex}",
                                        "enable.auto.commit": False, "enable.partition.eof": True,
                                        "fetch.message.max.bytes": 8 * 1024 * 1024,
                                        "fetch.wait.max.ms": 100}))
    pos: dict[int, int] = {}
    ends: dict[int, int] = {}
    for p in partitions:
        start, end, err = logs[(OFFSETS_TOPIC, p)]
        if err or start is None or end is None:
            res.problems.append(f"{OFFSETS_TOPIC}-{p}: log offsets not readable ({err}); skipped")
            continue
        at = positions.get(p, start)
        if at < start:
            res.restarted.append(p)
            log.warning("%s-%d: log start %d moved past the saved position %d: reading again from the start",
                        OFFSETS_TOPIC, p, start, at)
            at = start
        res.positions[p] = at
        if at < end:
            pos[p], ends[p] = at, end
    read = 0
    try:
        if pos:
            c.assign([TopicPartition(OFFSETS_TOPIC, p, o) for p, o in pos.items()])
        active = set(pos)
        while active and (max_records is None or read < max_records):
            msgs = c.consume(num_messages=5000, timeout=2)
            if not msgs:
                for p in sorted(active):
                    res.problems.append(f"{OFFSETS_TOPIC}-{p}: no data at offset {pos[p]} within 2 s (end {ends[p]}); "
                                        "stopped there, the next run resumes")
                break
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
                try:
                    row = record_row(cluster, p, off, observed_at, m.key(), m.value())
                except DecodeError as e:
                    res.problems.append(str(e))
                    row = None
                    pos[p] = off + 1
                    continue
                pos[p] = off + 1
                read += 1
                if row is None:
                    res.other_versions += 1
                else:
                    res.rows.append(row)
                    if sink is not None and len(res.rows) >= CHUNK_ROWS:
                        sink(res.rows)
                        res.rows = []
                if read % progress_every == 0:
                    log.info("%s: %d records read (%d partition(s) still behind their end)", OFFSETS_TOPIC, read,
                             len(active))
                if pos[p] >= ends[p]:
                    active.discard(p)
    except KafkaException as e:
        res.problems.append(f"reading {OFFSETS_TOPIC} failed: {e}")
    finally:
        c.close()
    res.positions.update(pos)
    if sink is not None and res.rows:
        sink(res.rows)
        res.rows = []
    res.seconds = time.monotonic() - t0
    return res


def inventory(cluster: Cluster, files_for=None, observed_at: dt.datetime | None = None,
              partitions: list[int] | None = None) -> tuple[list[dict], list[dict]]:
    """(segment_inventory rows, cleaner_checkpoints rows) of __consumer_offsets on every broker."""
    observed_at = observed_at or utcnow()
    segs, cps = [], []
    for b in cluster.brokers:
        files: BrokerFiles = files_for(b) if files_for else LocalBrokerFiles(b.log_dirs)
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


def positions_path(root: DataRoot, cluster: str) -> str:
    return root.join("_state", f"cluster={cluster}", "offsets_topic_positions.json")


def collect_offsets_topic(cluster: Cluster, kafka: KafkaCluster, root: DataRoot,
                          partitions: list[int] | None = None) -> RecordsResult:
    """Read new __consumer_offsets records and the segment inventory; write them all or nothing."""
    parts = partitions if partitions is not None else list(range(cluster.offsets_topic_partitions))
    saved = {int(k): v for k, v in (root.read_json(positions_path(root, cluster.name), default={}) or {}).items()}
    now = utcnow()
    staging = Staging(root, cluster.name, now)
    try:
        res = read_records(cluster.name, kafka, parts, saved, observed_at=now,
                           sink=lambda rows: staging.add("offsets_topic_records", rows))
        segs, cps = inventory(cluster, observed_at=now, partitions=parts)
        staging.add("segment_inventory", segs)
        staging.add("cleaner_checkpoints", cps)
    except BaseException:
        staging.abort()
        raise
    written = staging.commit()
    root.write_json_atomic(positions_path(root, cluster.name), {str(k): v for k, v in res.positions.items()})
    res.records_written = written.rows.get("offsets_topic_records", 0)
    log.info("cluster %s: %d __consumer_offsets records (%d of newer protocols skipped), %d segments, %d "
             "checkpoints, %d problem(s) in %.1fs", cluster.name, res.records_written, res.other_versions,
             len(segs), len(cps), len(res.problems), res.seconds)
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


def committed_groups_path(root: DataRoot, cluster: str) -> str:
    return root.join("_state", f"cluster={cluster}", "committed_groups.json")


#: records one collection reads at most for the index (a bloated topic is caught up over several runs)
COMMITTED_GROUPS_MAX_RECORDS = 2_000_000


def committed_groups(cluster: Cluster, kafka: KafkaCluster, root: DataRoot,
                     retention_ms: int = DEFAULT_OFFSETS_RETENTION_MS,
                     max_records: int = COMMITTED_GROUPS_MAX_RECORDS) -> tuple[set[str], list[str]]:
    """(groups with live commits, problems), read incrementally from __consumer_offsets: the first
    call reads each partition from its log start, later ones only what was appended since (state
    in committed_groups.json under the data root), at most `max_records` per call. Stays within
    the collect stage: no Spark job."""
    path = committed_groups_path(root, cluster.name)
    state = root.read_json(path, default={}) or {}
    positions = {int(k): int(v) for k, v in (state.get("positions") or {}).items()}
    index: dict[str, dict[str, int | None]] = {g: dict(keys) for g, keys in (state.get("groups") or {}).items()}
    folded = [0]

    def fold(rows: list[dict]) -> None:
        folded[0] += len(rows)
        fold_live_commits(index, rows, retention_ms)

    res = read_records(cluster.name, kafka, list(range(cluster.offsets_topic_partitions)), positions,
                       max_records=max_records, sink=fold)
    if folded[0] + res.other_versions >= max_records:
        res.problems.append(f"{OFFSETS_TOPIC}: the index of groups with commits read its {max_records} records for "
                            "this run and is still behind; groups that commit without joining may be missing "
                            "until later runs catch up")
    now_ms = int(time.time() * 1000)
    prune_expired(index, now_ms)
    root.write_json_atomic(path, {"positions": {str(k): v for k, v in res.positions.items()}, "groups": index})
    log.info("cluster %s: %d group(s) with live commits in %s (%.1fs)", cluster.name, len(index), OFFSETS_TOPIC,
             res.seconds)
    return live_groups(index, now_ms), res.problems

"""__consumer_offsets health and trim: the rules (one definition, used by the Spark jobs, the
runbook's execute step and the tests).

Per (cluster, broker, partition), from the decoded records, the segment inventory and the cleaner
checkpoint history:

  OVER_CAPACITY    a segment holds more messages than one cleaner pass can map, on a broker
                   without KAFKA-3894 (before 0.10.1): the cleaner thread dies on it, for good.
                   Never on later brokers: there a too-small buffer only slows cleaning
  CLEANER_STALLED  the checkpoint does not advance while dirty bytes grow; or, where the
                   checkpoint cannot be read (sizes from DescribeLogDirs), the partition grew past
                   one segment while its dirty ratio (1 - live / size) stayed at or above
                   min.cleanable.dirty.ratio and never fell
  BLOATED          the partition is far larger than its live set (never compacted)
  HEALTHY          otherwise

Each unhealthy verdict carries the cleaner setting that fixes the cause, and how it is applied
("apply": "live" from Kafka 1.1, IncrementalAlterConfigs with no restart; "restart" before).

The trim plan's rules (spark_jobs/trim_plan.py applies them; trim/execute.py re-checks them live):

  which segments   every rolled segment of a replica except the newest rolled one; never the
                   active one (`quarantined`)
  a group's state  the coordinator's state as last collected; without one, the newest
                   group-metadata record: members and no tombstone is a live group, else Empty
                   (`group_state`)
  re-commit        only for a group that is Empty (or Dead) now (`may_recommit`), and only an
                   offset the trim removed: never one that moved since the plan
                   (`recommit_decision`), with the commit metadata the record held when the
                   client can write it back byte for byte (`recommit_metadata`)
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import Iterable

from fleetkit.core.fleet import version_tuple
from fleetkit.core.kafka_names import EMPTY_STATES
from fleetkit.trim.cleaner import buffer_for, capacity, fix_mode

DEFAULT_BLOAT_RATIO = 10.0
DEFAULT_MIN_BLOAT_BYTES = 64 * 1024 * 1024
KAFKA_3894_FIXED = (0, 10, 1)
VERDICTS = ("OVER_CAPACITY", "CLEANER_STALLED", "BLOATED", "HEALTHY")


@dataclass(frozen=True)
class HealthFacts:
    records: int
    live_keys: int
    tombstones: int
    record_bytes: int          # bytes of all records read (key + value)
    live_bytes: int            # bytes of the live records
    disk_bytes: int            # bytes of the partition's segments on this broker
    segments: int
    largest_segment_messages: int
    checkpoint_first: int | None   # cleaner checkpoint, first and last observation in the history
    checkpoint_last: int | None
    dirty_bytes_first: int | None  # bytes above the checkpoint, first and last observation
    dirty_bytes_last: int | None
    observations: int              # inventory observations in the history


def verdict(f: HealthFacts, kafka_version: str, dedupe_buffer_size: int, threads: int = 1,
            load_factor: float = 0.9, bloat_ratio: float = DEFAULT_BLOAT_RATIO,
            min_bloat_bytes: int = DEFAULT_MIN_BLOAT_BYTES, min_cleanable_ratio: float = 0.5,
            segment_bytes: int | None = None) -> tuple[str, str, dict | None]:
    """(verdict, reason, fix). fix: the cleaner setting to apply, or None."""
    cap = capacity(dedupe_buffer_size, threads, load_factor)
    keys_per_pass = cap["keys_per_pass"]
    pre_3894 = version_tuple(kafka_version) < KAFKA_3894_FIXED
    mode = fix_mode(version_tuple(kafka_version))

    def fix_for(messages: int) -> dict:
        try:
            need = buffer_for(max(messages, 1), threads, load_factor)
        except ValueError as e:
            return {"error": str(e)}
        return {"log.cleaner.dedupe.buffer.size": max(need, dedupe_buffer_size), "log.cleaner.threads": threads,
                "keys_per_pass_after": capacity(max(need, dedupe_buffer_size), threads, load_factor)["keys_per_pass"],
                "apply": mode}

    if pre_3894 and f.largest_segment_messages > keys_per_pass:
        fix = fix_for(f.largest_segment_messages)
        return ("OVER_CAPACITY",
                f"A segment holds {f.largest_segment_messages:,} messages but one cleaner pass maps only "
                f"{keys_per_pass:,} keys ({dedupe_buffer_size:,} bytes / {threads} thread(s)); Kafka "
                f"{kafka_version} (before 0.10.1, KAFKA-3894) kills the cleaner thread on it, so this partition is "
                f"never compacted again. " + (
                    f"Raise log.cleaner.dedupe.buffer.size to {fix['log.cleaner.dedupe.buffer.size']:,} before "
                    "restarting, then trim." if "error" not in fix else
                    f"No cleaner buffer can fix it ({fix['error']}); trim, then lower segment.bytes."), fix)
    stalled = (f.observations >= 2 and f.checkpoint_first is not None and f.checkpoint_last is not None
               and f.checkpoint_last <= f.checkpoint_first and f.dirty_bytes_first is not None
               and f.dirty_bytes_last is not None and f.dirty_bytes_last > f.dirty_bytes_first)
    live = max(f.live_bytes, 1)
    if not stalled and f.checkpoint_first is None and f.checkpoint_last is None and f.observations >= 2 \
            and f.dirty_bytes_first and f.dirty_bytes_last and f.dirty_bytes_last > f.dirty_bytes_first \
            and segment_bytes and f.disk_bytes > segment_bytes:
        ratio_first = max(0.0, 1 - live / f.dirty_bytes_first)
        ratio_last = max(0.0, 1 - live / f.dirty_bytes_last)
        if ratio_last >= min_cleanable_ratio and ratio_last >= ratio_first:
            return ("CLEANER_STALLED",
                    f"The partition grew from {f.dirty_bytes_first:,} to {f.dirty_bytes_last:,} bytes, past one segment "
                    f"({segment_bytes:,} bytes), and its dirty ratio rose from {ratio_first:.2f} to {ratio_last:.2f} "
                    f"(min.cleanable.dirty.ratio {min_cleanable_ratio}) without ever falling: the cleaner is not "
                    "compacting it (check log-cleaner.log and the broker's uncleanable-partitions-count).",
                    fix_for(f.largest_segment_messages))
    if stalled:
        return ("CLEANER_STALLED",
                f"The cleaner checkpoint stayed at {f.checkpoint_last} while dirty bytes grew from "
                f"{f.dirty_bytes_first:,} to {f.dirty_bytes_last:,}: the cleaner is not running for this partition "
                "(check log-cleaner.log for a dead thread).", fix_for(f.largest_segment_messages))
    if f.disk_bytes >= min_bloat_bytes and f.disk_bytes > bloat_ratio * live:
        return ("BLOATED",
                f"{f.disk_bytes:,} bytes on disk for a live set of {f.live_keys:,} keys ({f.live_bytes:,} bytes): "
                f"{f.disk_bytes / live:,.0f}x the live data; a new leader must read all of it before it serves "
                "the groups of this partition.", fix_for(f.largest_segment_messages))
    return ("HEALTHY", f"{f.disk_bytes:,} bytes on disk, {f.live_keys:,} live keys, largest segment "
                       f"{f.largest_segment_messages:,} messages (one pass maps {keys_per_pass:,}).", None)


#: the settings columns `judge_replica` reads beside the HealthFacts fields
SETTING_FIELDS = ("kafka_version", "dedupe_buffer_size", "threads", "load_factor", "min_cleanable_ratio",
                  "segment_bytes")


def judge_replica(row: dict, bloat_ratio: float = DEFAULT_BLOAT_RATIO,
                  min_bloat_bytes: int = DEFAULT_MIN_BLOAT_BYTES) -> tuple[str, str, str | None]:
    """(verdict, reason, fix as JSON text or None) of one replica's row of the trim_health job:
    the HealthFacts fields (the counts null where nothing was read: 0) and SETTING_FIELDS (the
    broker's reported cleaner settings over the fleet file's; a version not known: 0.9.0.1)."""
    import json

    names = list(HealthFacts.__dataclass_fields__)
    f = HealthFacts(*[0 if row.get(n) is None and i < 8 else row.get(n) for i, n in enumerate(names)])
    min_ratio, segment_bytes = row.get("min_cleanable_ratio"), row.get("segment_bytes")
    v, reason, fix = verdict(f, row.get("kafka_version") or "0.9.0.1", int(row["dedupe_buffer_size"]),
                             int(row["threads"]), float(row["load_factor"]), bloat_ratio, min_bloat_bytes,
                             0.5 if min_ratio is None else float(min_ratio),
                             None if segment_bytes is None else int(segment_bytes))
    return v, reason, json.dumps(fix) if fix else None


# -- the trim plan ---------------------------------------------------------------------------------
def quarantined(segments: Iterable[tuple[int, bool]]) -> set[int]:
    """Of one replica's segments, (base offset, is active) each, the base offsets the trim moves to
    the quarantine: every rolled segment except the newest rolled one (the broker keeps a recent
    segment to load from), never the active one."""
    rolled = sorted((base for base, active in segments if not active), reverse=True)
    return set(rolled[1:])


def group_state(collected: str | None, metadata_live: bool | None) -> str:
    """A group's state for the plan: the coordinator's, as last collected; without one, from its
    newest group-metadata record (`metadata_live`: members and not a tombstone) "Stable", else
    "Empty" (no record either: a standalone committer, Empty)."""
    if collected:
        return collected
    return "Stable" if metadata_live else "Empty"


def may_recommit(state: str | None) -> bool:
    """A group whose removed offset may be put back: no member is there to commit its own."""
    return state in EMPTY_STATES


def recommit_decision(planned: int, before: int | None, now: int | None, state: str | None) -> tuple[str, str]:
    """Whether to re-commit a planned offset: ("commit" | "already" | "skip", why).

    `before` is the group's committed offset read when execute started, `now` the one read right
    before the commit. A re-commit only puts back an offset the trim removed; it never sets a
    group back (a standalone consumer commits while its group is Empty)."""
    if not may_recommit(state):
        return "skip", f"the group is {state} now (live members commit their own offsets)"
    if now == planned:
        return "already", f"committed offset is {now}, as planned"
    if now is not None:
        return "skip", (f"committed offset moved after the plan was read (plan {planned}, now {now}): "
                        "not set back")
    if before != planned:
        return "skip", (f"committed offset was {before} when execute started, the plan read {planned}: "
                        "it moved after the plan; not re-committed")
    return "commit", f"offset {planned} was only in a quarantined segment"


def recommit_metadata(stored: str | None) -> tuple[str | None, str | None]:
    """The commit metadata to give the client for a re-commit, and why it is not carried when not.

    `stored` is the metadata exactly as the quarantined record held it. The toolkit commits through
    librdkafka, which stores a metadata string with a trailing NUL: a string its own clients wrote
    ("m1" stored as "m1\\x00") goes back byte for byte when given without that NUL. A string another
    client wrote (a Java client's, Kafka Streams' encoded timestamps) would come back with a NUL
    more, which its owner may fail to decode: it is not carried (the offset is), and the note says so."""
    if not stored:
        return None, None
    if stored.endswith("\x00") and "\x00" not in stored[:-1]:
        return stored[:-1], None
    return None, (f"its commit metadata ({len(stored.encode('utf-8', 'surrogatepass'))} bytes, not written by a "
                  "librdkafka client) is not carried: librdkafka would store it with a trailing NUL")


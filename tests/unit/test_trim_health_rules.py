"""The numbered rule table of the __consumer_offsets health verdicts (fleetkit.trim.rules.verdict),
without Spark: each case says why its answer is right. The Spark job calls the same function
(tests/spark checks the job's plumbing)."""

from __future__ import annotations

import pytest

from fleetkit.trim.cleaner import capacity
from fleetkit.trim.rules import VERDICTS, HealthFacts, verdict

MIB = 2**20
BUF = 2 * MIB  # the seed incident's buffer: one pass maps 78,642 keys (kafka-facts)


def facts(**kw) -> HealthFacts:
    base = dict(records=1000, live_keys=100, tombstones=0, record_bytes=68_000, live_bytes=6_800,
                disk_bytes=70_000, segments=2, largest_segment_messages=900, checkpoint_first=None,
                checkpoint_last=None, dirty_bytes_first=None, dirty_bytes_last=None, observations=1)
    base.update(kw)
    return HealthFacts(**base)


CASES = [
    # (n, facts, kafka version, buffer, expected, why)
    (1, facts(), "0.9.0.1", BUF, "HEALTHY",
     "small partition, segments far below one pass, no checkpoint history"),
    (2, facts(largest_segment_messages=1_550_080), "0.9.0.1", BUF, "OVER_CAPACITY",
     "the seed incident: 1,550,080 messages in a segment vs 78,642 keys per pass kills 0.9's cleaner"),
    (3, facts(largest_segment_messages=1_550_080), "0.10.1.0", BUF, "HEALTHY",
     "KAFKA-3894 is fixed in 0.10.1: a too-small map only slows cleaning, the thread survives"),
    (4, facts(largest_segment_messages=1_550_080), "0.10.0.1", BUF, "OVER_CAPACITY",
     "0.10.0 is still before the fix"),
    (5, facts(largest_segment_messages=78_642), "0.9.0.1", BUF, "HEALTHY",
     "exactly what one pass maps fits (the check is strictly greater)"),
    (6, facts(largest_segment_messages=78_643), "0.9.0.1", BUF, "OVER_CAPACITY",
     "one message more than a pass maps"),
    (7, facts(observations=2, checkpoint_first=5, checkpoint_last=5, dirty_bytes_first=10, dirty_bytes_last=99),
     "2.8.0", 128 * MIB, "CLEANER_STALLED", "checkpoint frozen while dirty bytes grew: the cleaner does not run"),
    (8, facts(observations=2, checkpoint_first=5, checkpoint_last=9, dirty_bytes_first=10, dirty_bytes_last=99),
     "2.8.0", 128 * MIB, "HEALTHY", "the checkpoint advanced: the cleaner runs, growth is just traffic"),
    (9, facts(observations=2, checkpoint_first=5, checkpoint_last=5, dirty_bytes_first=99, dirty_bytes_last=99),
     "2.8.0", 128 * MIB, "HEALTHY", "frozen checkpoint but no new dirty bytes: nothing to clean yet"),
    (10, facts(observations=1, checkpoint_first=5, checkpoint_last=5, dirty_bytes_first=10, dirty_bytes_last=99),
     "2.8.0", 128 * MIB, "HEALTHY", "one observation is no history: a stall needs two"),
    (11, facts(disk_bytes=500 * MIB, live_bytes=MIB), "2.8.0", 128 * MIB, "BLOATED",
     "500x the live data and above the 64 MiB floor: a new leader reads all of it before serving"),
    (12, facts(disk_bytes=60 * MIB, live_bytes=MIB), "2.8.0", 128 * MIB, "HEALTHY",
     "60x the live data but under the 64 MiB floor: loads in well under a second"),
    (13, facts(disk_bytes=500 * MIB, live_bytes=100 * MIB), "2.8.0", 128 * MIB, "HEALTHY",
     "5x the live data is normal between cleaner passes (ratio below 10)"),
    (14, facts(largest_segment_messages=1_550_080, observations=2, checkpoint_first=0, checkpoint_last=0,
               dirty_bytes_first=10, dirty_bytes_last=99, disk_bytes=500 * MIB, live_bytes=MIB),
     "0.9.0.1", BUF, "OVER_CAPACITY", "first match wins: the cause (a dead cleaner thread) before its symptoms"),
    (15, facts(observations=2, checkpoint_first=0, checkpoint_last=0, dirty_bytes_first=10, dirty_bytes_last=99,
               disk_bytes=500 * MIB, live_bytes=MIB), "2.8.0", 128 * MIB, "CLEANER_STALLED",
     "a stalled cleaner is named before the bloat it causes"),
]


@pytest.mark.parametrize("n,f,version,buf,expected,why", CASES, ids=[f"case{c[0]}" for c in CASES])
def test_rule_table(n, f, version, buf, expected, why):
    got, reason, fix = verdict(f, version, buf)
    assert got == expected, f"case {n} ({why}): got {got}: {reason}"
    assert reason
    if expected == "HEALTHY":
        assert fix is None
    else:
        assert fix is not None


def test_every_verdict_is_covered():
    assert {c[4] for c in CASES} == set(VERDICTS)


def test_the_fix_makes_one_pass_map_the_largest_segment():
    v, _, fix = verdict(facts(largest_segment_messages=1_550_080), "0.9.0.1", BUF)
    assert v == "OVER_CAPACITY"
    after = capacity(fix["log.cleaner.dedupe.buffer.size"], fix["log.cleaner.threads"])["keys_per_pass"]
    assert after >= 1_550_080 and fix["keys_per_pass_after"] == after


def test_a_segment_no_thread_can_map_says_so():
    # 2 GiB per thread maps about 80M keys: beyond that only smaller segments help
    v, _, fix = verdict(facts(largest_segment_messages=200_000_000), "0.9.0.1", BUF)
    assert v == "OVER_CAPACITY" and "shrink segment.bytes" in fix["error"]


# -- 3.9 / 4.x: sizes from DescribeLogDirs, no checkpoint; the fix applied live -----------------
SEG = 100 * MIB


def grown(first: int, last: int, live: int, **kw) -> HealthFacts:
    return facts(observations=2, dirty_bytes_first=first, dirty_bytes_last=last, disk_bytes=last, live_bytes=live,
                 segments=1, **kw)


@pytest.mark.parametrize("f, version, expected, why", [
    (grown(150 * MIB, 300 * MIB, 60 * MIB), "3.9.2", "CLEANER_STALLED",
     "past one segment, the dirty ratio rose from 0.60 to 0.80 (>= min.cleanable.dirty.ratio 0.5): not compacted"),
    (grown(150 * MIB, 300 * MIB, 200 * MIB), "4.3.1", "HEALTHY",
     "it grew, but its dirty ratio (0.33) is below min.cleanable.dirty.ratio: the cleaner has nothing to do yet"),
    (grown(60 * MIB, 90 * MIB, 40 * MIB), "4.3.1", "HEALTHY",
     "ratio 0.56, but 90 MiB is less than one segment: all of it is the active segment, never cleaned"),
    (grown(300 * MIB, 150 * MIB, 60 * MIB), "3.9.2", "HEALTHY",
     "it shrank: the cleaner runs"),
    (facts(observations=2, dirty_bytes_first=150 * MIB, dirty_bytes_last=300 * MIB, disk_bytes=300 * MIB,
           live_bytes=60 * MIB, checkpoint_first=7, checkpoint_last=9), "3.9.2", "HEALTHY",
     "where the checkpoint is known (files readable) it decides: it moved"),
], ids=["stalled", "below-min-ratio", "active-segment-only", "cleaned", "checkpoint-moved"])
def test_modern_stall_from_the_dirty_ratio(f, version, expected, why):
    got, reason, fix = verdict(f, version, 32 * MIB, segment_bytes=SEG)
    assert got == expected, why
    if got != "HEALTHY":
        assert fix["apply"] == "live" and "dirty ratio rose from 0.60 to 0.80" in reason


def test_the_fix_says_how_it_is_applied():
    f = facts(largest_segment_messages=1_550_080)
    assert verdict(f, "0.9.0.1", BUF)[2]["apply"] == "restart"
    assert verdict(f, "0.10.0.1", BUF)[2]["apply"] == "restart"
    big = facts(disk_bytes=700 * MIB, live_bytes=MIB)
    assert verdict(big, "1.1.0", BUF)[2]["apply"] == "live"
    assert verdict(big, "4.3.1", BUF)[2]["apply"] == "live"
    # OVER_CAPACITY is a 0.9 / 0.10.0 verdict only: the same segment on 3.9 / 4.x is not one
    assert verdict(f, "3.9.2", BUF)[0] == "HEALTHY" and verdict(f, "4.3.1", BUF)[0] == "HEALTHY"

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

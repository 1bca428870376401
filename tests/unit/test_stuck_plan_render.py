"""The stuck-partition runbook's evidence as the approval page shows it: the record at the
committed offset with a readable time (never its value)."""

from __future__ import annotations

import pytest

from fleetkit.stuck.plan import evidence_items


def diagnosis(record: dict | None) -> dict:
    return {"status": "STALLED", "reason": "frozen", "snapshots": 4, "last_snapshot": "2026-11-27T19:25:57Z",
            "group_state": "Empty", "members": [], "committed_offset": 3, "log_start_offset": 0,
            "log_end_offset": 8, "lag": 5, "record_at_committed_offset": record}


def record_line(record: dict | None) -> str:
    return next(i["value"] for i in evidence_items(diagnosis(record)) if i["label"] == "record at the committed offset")


@pytest.mark.parametrize("timestamp, shown", [
    (1795807513551, "timestamp 2026-11-27T19:25:13.551Z (1795807513551)"),
    (None, "no timestamp"),   # Kafka 0.9 records have none
    (-1, "no timestamp"),     # what newer brokers answer for a record without one
    (10 ** 20, "timestamp 100000000000000000000 (out of range)"),
])
def test_the_record_time_is_readable(timestamp, shown):
    line = record_line({"offset": 3, "timestamp": timestamp, "key": "b'poison-key'", "size": 39})
    assert line == f"offset 3, {shown}, key b'poison-key', 39 bytes"


def test_no_record_and_an_unreadable_one():
    assert record_line(None) == "none (caught up)"
    assert record_line({"error": "TOPIC_AUTHORIZATION_FAILED"}) == "not readable: TOPIC_AUTHORIZATION_FAILED"

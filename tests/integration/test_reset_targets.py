"""The reset runbook's targets that kafka-consumer-groups' --reset-offsets has, planned against each
generation's real brokers as the toolkit's read-only user: --shift-by (shift N, kept within the
log), --to-datetime (datetime T: the first record at or after T) and --by-duration (duration D),
which a cluster before 0.10 (records without timestamps) refuses in one line."""

from __future__ import annotations

import datetime as dt
import time

import pytest

from fleetkit.stuck.plan import ResetError, build_plan
from tests.helpers import fleet_kafka
from tests.integration.fleet_clusters import GENERATIONS, Target, target_fixture

pytestmark = pytest.mark.lab

target = target_fixture(GENERATIONS)


def new_offsets(plan: dict) -> dict[int, int]:
    return {r["partition"]: r["new"] for r in plan["details"]["partitions"]}


def test_shift_datetime_and_duration_targets(target: Target, unique):
    t = target
    topic, group = unique("reset-targets"), unique("reset-targets-group")
    t.wait_topic(topic)
    p = t.producer()
    for i in range(10):
        p.produce(topic, value=b"early %d" % i, partition=0)
    assert p.flush(30) == 0
    time.sleep(1.5)  # the records after `middle` are at least a second newer than those before
    middle = dt.datetime.now(dt.timezone.utc) - dt.timedelta(milliseconds=500)
    for i in range(10):
        p.produce(topic, value=b"late %d" % i, partition=0)
    assert p.flush(30) == 0
    t.commit(group, {(topic, 0): 4})
    kafka = fleet_kafka(t.handle.spec)
    try:
        def plan(target_text: str) -> dict[int, int]:
            return new_offsets(build_plan(kafka, t.cluster.name, group, topic, "0", target_text))

        assert plan("shift 3") == {0: 7}
        assert plan("shift -10") == {0: 0}  # kept within the log, as Kafka's tool does
        assert plan("shift +100") == {0: 20}
        if t.cluster.version_tuple < (0, 10):
            with pytest.raises(ResetError, match="runs Kafka before 0.10, whose records carry no timestamps"):
                plan(f"datetime {middle.isoformat()}")
            return
        assert plan(f"datetime {middle.strftime('%Y-%m-%dT%H:%M:%S.%f')[:-3]}Z") == {0: 10}
        assert plan("datetime 2000-01-01T00:00:00Z") == {0: 0}
        assert plan(f"datetime {(dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)).isoformat()}") == {0: 20}
        assert plan("duration 1h") == {0: 0}  # every record is newer than an hour
        assert plan("duration PT0.001S") == {0: 20}  # none is that new: the log end
        described = build_plan(kafka, t.cluster.name, group, topic, "0", "duration 1h")
        assert described["details"]["target"] == "duration 1h" and "duration 1h" in described["title"]
    finally:
        kafka.close()

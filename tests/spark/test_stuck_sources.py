"""The stuck job over offsets from several stores: one partition per (cluster, source, group,
topic, partition), so a ZooKeeper-stored group and a Kafka group of the same name stay apart, and a
frozen Storm spout is FROZEN (nothing says whether it is alive)."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "spark_jobs"))
pytestmark = pytest.mark.spark

AS_OF = dt.datetime(2026, 2, 1, 0, 0, tzinfo=dt.timezone.utc)


def _rows(source, group, committed, assigned, state):
    """Four collections five minutes apart ending at AS_OF; the log grows by 10 each time."""
    out = []
    for i, c in enumerate(committed):
        out.append({"cluster": "c1", "group": group, "topic": "t", "partition": 0,
                    "observed_at": AS_OF - dt.timedelta(minutes=15 - 5 * i), "committed_offset": c,
                    "log_start_offset": 0, "log_end_offset": 100 + 10 * i, "group_state": state,
                    "assigned": assigned, "member_client_id": None, "member_host": None, "source": source})
    return out


def test_sources_stay_apart_and_a_frozen_spout_is_frozen(live):
    from jobs_common import SNAPSHOT_SCHEMA
    from stuck import evaluate

    rows = (_rows(None, "billing", [90, 100, 110, 120], True, "Stable")          # Kafka, files before `source`
            + _rows("zookeeper", "billing", [50, 50, 50, 50], False, "Empty")    # same name, old consumer, stopped
            + _rows("storm", "clicks spout 'é'", [77, 77, 77, 77], None, "Unknown"))
    df = live.createDataFrame([tuple(r.get(f.name) for f in SNAPSHOT_SCHEMA.fields) for r in rows], SNAPSHOT_SCHEMA)
    findings, groups, _ = evaluate(df, dt.timedelta(minutes=15), AS_OF)
    got = {(r["source"], r["group"]): (r["status"], r["committed_offset"], r["lag"]) for r in findings.collect()}
    assert got == {("kafka", "billing"): ("OK", 120, 10),
                   ("zookeeper", "billing"): ("STOPPED", 50, 80),
                   ("storm", "clicks spout 'é'"): ("FROZEN", 77, 53)}
    assert {(r["source"], r["group"]): r["status"] for r in groups.collect()} == {
        ("kafka", "billing"): "OK", ("zookeeper", "billing"): "STOPPED", ("storm", "clicks spout 'é'"): "FROZEN"}

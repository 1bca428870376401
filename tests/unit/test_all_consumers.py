"""Pure parts of collecting every consumer: the live-commit index kept from __consumer_offsets,
group types, KIP-848 states in the stuck rules, the reset mechanism, old snapshot files."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pyarrow.parquet as pq

from fleetkit.clients.kafka import KafkaCluster, type_name
from fleetkit.collection.offsets_topic import (
    add_commit_times, commit_rhythm, fold_commit_times, fold_live_commits, live_groups, prune_expired,
)
from fleetkit.core.datasets import DataRoot, read_dataset
from fleetkit.stuck import execute as reset_execute
from fleetkit.stuck import rules as stuck

G = "grp 'x' $(rm -rf /) {{ 7*7 }}\nĝ"


def _commit(group, topic, partition, expire=None, commit_ts=1_000, tombstone=False):
    return {"key_version": 1, "group": group, "topic": topic, "topic_partition": partition,
            "tombstone": tombstone, "expire_timestamp": expire, "commit_timestamp": None if tombstone else commit_ts}


def test_live_commit_index_follows_commits_tombstones_and_expiry():
    index: dict = {}
    fold_live_commits(index, [
        _commit(G, "t", 0, expire=5_000), _commit(G, "t", 1, expire=5_000),
        _commit("gone", "t", 0, expire=5_000), _commit("gone", "t", 0, tombstone=True),
        _commit("old", "t", 0, expire=2_000),
        _commit("v3", "t", 2, expire=None, commit_ts=1_000),  # no expiry in the value: commit + retention
        {"key_version": 2, "group": "meta-only", "tombstone": False},  # group metadata: not a commit
    ], retention_ms=10_000)
    assert live_groups(index, now_ms=1_500) == {G, "old", "v3"}
    assert live_groups(index, now_ms=3_000) == {G, "v3"}
    assert live_groups(index, now_ms=6_000) == {"v3"}
    fold_live_commits(index, [_commit(G, "t", 0, tombstone=True)])
    assert index[G] == {"1:t": 5_000}
    prune_expired(index, now_ms=6_000)
    assert index == {"v3": {"2:t": 11_000}}


def _c(offset, at_ms, group=G, topic="t", partition=0, tombstone=False):
    return {"key_version": 1, "group": group, "topic": topic, "topic_partition": partition, "tombstone": tombstone,
            "committed_offset": None if tombstone else offset, "commit_timestamp": None if tombstone else at_ms}


def test_commit_times_follow_offset_changes_not_recommits():
    times: dict = {}
    # a Java consumer re-commits 10 at 1 s and 2 s: only the change at 0 s counts
    fold_commit_times(times, [_c(10, 0), _c(10, 1_000), _c(10, 2_000), _c(20, 3_000), _c(30, 6_000)])
    assert times[G]["0:t"] == [30, 6_000, [3_000, 3_000], [[10, 0], [20, 3_000]]]
    changed, interval = commit_rhythm(times[G]["0:t"], 30)
    assert changed == dt.datetime(1970, 1, 1, 0, 0, 6, tzinfo=dt.timezone.utc)
    assert interval is None  # two gaps: not yet a rhythm
    fold_commit_times(times, [_c(40, 8_000), _c(40, 9_000), _c(50, 14_000)])
    assert commit_rhythm(times[G]["0:t"], 50)[1] == 3.0  # median of 3, 3, 2, 6 s
    # a snapshot that read another offset than the index knows gets nothing
    assert commit_rhythm(times[G]["0:t"], 60) == (None, None)
    # one read just before the index's latest commits still finds its offset's commit time
    assert commit_rhythm(times[G]["0:t"], 40) == (dt.datetime(1970, 1, 1, 0, 0, 8, tzinfo=dt.timezone.utc), 3.0)
    assert commit_rhythm(times[G]["0:t"], 10)[0] is not None and commit_rhythm(times[G]["0:t"], 35) == (None, None)
    fold_commit_times(times, [_c(60, 15_000)])
    assert commit_rhythm(times[G]["0:t"], 10) == (None, None)  # scrolled out of the last 4
    fold_commit_times(times, [_c(None, None, tombstone=True)])
    assert G not in times


def test_commit_gaps_keep_the_last_eight():
    times: dict = {}
    fold_commit_times(times, [_c(i, i * 100_000 if i < 5 else 500_000 + (i - 5) * 1_000) for i in range(20)])
    gaps = times[G]["0:t"][2]
    assert len(gaps) == 8 and set(gaps) == {1_000}  # the slow start has scrolled out


def test_add_commit_times_fills_kafka_rows_only():
    times: dict = {}
    fold_commit_times(times, [_c(i * 10, i * 2_000) for i in range(5)])
    rows = [{"group": G, "topic": "t", "partition": 0, "committed_offset": 40},
            {"group": G, "topic": "t", "partition": 0, "committed_offset": 40, "source": "zookeeper"},
            {"group": G, "topic": "t", "partition": 1, "committed_offset": 40},
            {"group": "other", "topic": "t", "partition": 0, "committed_offset": None}]
    assert add_commit_times(rows, times) == 1
    assert rows[0]["commit_interval_seconds"] == 2.0
    assert rows[0]["committed_at"] == dt.datetime(1970, 1, 1, 0, 0, 8, tzinfo=dt.timezone.utc)
    assert all("committed_at" not in r for r in rows[1:])


def test_group_type_names():
    from confluent_kafka import ConsumerGroupType

    assert [type_name(ConsumerGroupType.CONSUMER), type_name(ConsumerGroupType.CLASSIC),
            type_name(ConsumerGroupType.UNKNOWN), type_name(None)] == ["consumer", "classic", None, None]


def test_kip848_assigning_and_reconciling_count_as_rebalancing():
    t = [dt.datetime(2026, 1, 1, 0, m, tzinfo=dt.timezone.utc) for m in range(3)]
    assert stuck.rebalance_storm({t[0]: "Assigning", t[1]: "Stable", t[2]: "Reconciling"}) is True
    assert stuck.rebalance_storm({t[0]: "Reconciling", t[1]: "Stable", t[2]: "Stable"}) is False


def test_reset_mechanism_follows_the_cluster_generation():
    old = KafkaCluster("c09", {"bootstrap.servers": "127.0.0.1:1", "api.version.request": False})
    new = KafkaCluster("c43", {"bootstrap.servers": "127.0.0.1:1"})
    assert (reset_execute.mechanism_for(old), reset_execute.mechanism_for(new)) == ("commit_offsets", "alter_offsets")
    assert set(reset_execute.MECHANISMS) >= {"commit_offsets", "alter_offsets"}


def test_snapshot_files_written_before_group_type_stay_readable(tmp_path):
    path = tmp_path / "offsets_snapshots" / "cluster=c" / "date=2026-01-01"
    path.mkdir(parents=True)
    old = pa.table({"cluster": ["c"], "group": [G], "topic": ["t"], "partition": pa.array([0], pa.int32()),
                    "committed_offset": pa.array([7], pa.int64()), "group_state": ["Dead"]})
    pq.write_table(old, path / "part-0.parquet")
    rows = read_dataset(DataRoot(str(tmp_path)), "offsets_snapshots").to_pylist()
    assert [(r["group"], r["committed_offset"], r["group_state"], r["group_type"]) for r in rows] == \
        [(G, 7, "Dead", None)]


def test_record_reads_pick_lagging_positions_largest_lag_first_one_per_partition_per_round():
    from fleetkit.collection.groups import record_reads

    def row(group, partition, committed, end, start=0, source=None):
        return {"group": group, "topic": "t ĝ", "partition": partition, "committed_offset": committed,
                "log_start_offset": start, "log_end_offset": end, "source": source}

    rows = [row("a", 0, 3, 10), row(G, 0, 3, 10),  # same position: one read
            row("b", 0, 7, 10),                    # same partition, another offset: a second round
            row("c", 1, 2, 10),                    # the largest lag: first
            row("caught up", 2, 10, 10), row("no commit", 2, None, 10),
            row("out of range", 1, 1, 10, start=5), row("zk", 1, 0, 10, source="zookeeper")]
    assert record_reads(rows, 100) == [{("t ĝ", 1): 2, ("t ĝ", 0): 3}, {("t ĝ", 0): 7}]
    assert record_reads(rows, 2) == [{("t ĝ", 1): 2, ("t ĝ", 0): 3}]
    assert record_reads(rows, 0) == []
    assert record_reads(rows, 100, max_reads=1) == [{("t ĝ", 1): 2, ("t ĝ", 0): 3}]  # 0 at 7 waits for a later run

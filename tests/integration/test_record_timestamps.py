"""The collection reads the timestamp of the record at each lagging committed offset on 0.10+
(one read per partition and offset, shared by the groups at it, within a budget), and leaves it
null on 0.9, whose message format carries no timestamps."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetkit.collection import groups as collection_groups
from fleetkit.core.datasets import DataRoot, read_dataset

from fleet_airflow import clusters
from tests.integration.fleet_clusters import GENERATIONS, Target, target_fixture

pytestmark = pytest.mark.lab

target = target_fixture(GENERATIONS)  # 0.9 included: there the timestamps must stay null


def _rows(root, groups):
    return {(r["group"], r["partition"]): r["committed_record_timestamp"]
            for r in read_dataset(DataRoot(root), "offsets_snapshots").to_pylist() if r["group"] in groups}


def test_record_timestamps_at_committed_offsets(target: Target, data_root, unique, monkeypatch):
    t = target
    topic = unique("stamped")
    t.wait_topic(topic)
    base_ms = (int(dt.datetime.now(dt.timezone.utc).timestamp()) - 3600) * 1000  # an hour ago, whole seconds
    p = t.producer()
    for part in (0, 1):
        for i in range(10):  # record i of a partition: timestamp base + i s (+ 100 s on partition 1)
            p.produce(topic, value=b"v", key=str(i).encode(), partition=part,
                      timestamp=base_ms + (i + 100 * part) * 1000)
    assert p.flush(30) == 0
    a, b, c, caught_up = (unique(n) for n in ("at 3 'a'", "at 7 $(b)", "also at 3 c", "caught up"))
    t.commit(a, {(topic, 0): 3, (topic, 1): 2})
    t.commit(b, {(topic, 0): 7})
    t.commit(c, {(topic, 0): 3})
    t.commit(caught_up, {(topic, 0): 10})
    reads = []
    real = collection_groups.KafkaCluster.record_timestamps

    def counting(self, positions, timeout=5.0):
        reads.append(dict(positions))
        return real(self, positions, timeout)

    monkeypatch.setattr(collection_groups.KafkaCluster, "record_timestamps", counting)  # counts, reads for real
    monkeypatch.setattr(collection_groups, "RECORD_TIMESTAMP_BUDGET", 100_000)  # other tests' groups lag too
    clusters.collect(t.cluster, data_root)

    got = _rows(data_root, {a, b, c, caught_up})
    at = {k: None if v is None else v.replace(tzinfo=dt.timezone.utc).timestamp() * 1000 for k, v in got.items()}
    if t.cluster.version_tuple < collection_groups.RECORD_TIMESTAMPS_SINCE:
        # message format v0: nothing to read, and nothing is read
        assert at == {(a, 0): None, (a, 1): None, (b, 0): None, (c, 0): None, (caught_up, 0): None}
        assert reads == []
        return
    assert at == {(a, 0): base_ms + 3000, (a, 1): base_ms + 102_000, (b, 0): base_ms + 7000,
                  (c, 0): base_ms + 3000, (caught_up, 0): None}
    # each (partition, offset) read once: partition 0 at 3 (groups a and c share it) and at 7, in two
    # reads (one consumer holds one position per partition); the caught-up group costs nothing
    ours = sorted((k[1], o) for r in reads for k, o in r.items() if k[0] == topic)
    assert ours == [(0, 3), (0, 7), (1, 2)]

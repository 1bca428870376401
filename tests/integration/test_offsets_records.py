"""Reading __consumer_offsets back from each generation's real brokers: every offset commit and
group-metadata record the test wrote, decoded, with exact counts; on 3.9 and 4.x the markers of a
committed and an aborted transaction (the aborted commits dropped), on 4.x the records of a
consumer-protocol (KIP-848) group; and the same rows decoded column-wise (what a collection writes)."""

from __future__ import annotations

import datetime as dt
import time


import pyarrow as pa
import pyarrow.compute as pc

from fleetkit.collection.offsets_topic import read_records
from fleetkit.core.datasets import table_from_rows
from fleetkit.core.kafka_names import OFFSETS_TOPIC

from tests import offsets_records_scenario
from tests.helpers import fleet_kafka

#: group-metadata records of a classic group that one consumer joins and leaves: 0.9 writes the
#: group at the end of the join and a tombstone when the last member leaves; 3.9 the join and
#: the Empty group after the leave; 4.3's coordinator also the new group (generation 0)
CLASSIC_GROUP_METADATA = {"0.9.0.1": [False, True], "3.9.2": [False, False], "4.3.1": [False, False, False]}
NOW = dt.datetime(2026, 11, 26, tzinfo=dt.timezone.utc)
KIP848_KINDS = {"consumer_group_metadata", "consumer_group_member_metadata", "consumer_group_target_assignment_member",
                "consumer_group_target_assignment_metadata", "consumer_group_current_member_assignment"}


def test_records_read_back_exactly(generation_lab):
    h = generation_lab
    version = h.cluster.kafka_version
    kafka = fleet_kafka(h.spec)  # the toolkit's connection (the read-only fleet user where secured)
    before = kafka.log_offsets([(OFFSETS_TOPIC, p) for p in range(50)])
    expect = offsets_records_scenario.run(h.bootstrap, version, lambda t: h.lab.create_topic(t, 3),
                                          security=h.spec.security_config("admin"))
    parts = expect["partitions"]
    classic = [g for g in expect["groups"] if g.endswith("-classic")][0]

    def classic_metadata(res):
        return [r["tombstone"] for r in res.rows if r["group"] == classic and r["key_version"] == 2]

    # the coordinator writes a departed group's records after the member's LeaveGroup answer (0.9:
    # the tombstone of the now empty group): read until they are there, for at most 20 s
    deadline = time.monotonic() + 20
    while True:
        res = read_records(h.spec.name, kafka, parts, {p: before[(OFFSETS_TOPIC, p)][1] for p in parts},
                           observed_at=NOW)
        if classic_metadata(res) == CLASSIC_GROUP_METADATA[version] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert res.problems == [] and res.unknown_versions == {}
    assert res.reader == "wire"  # Fetch v0 and message sets on 0.9, record batches after
    mine = [r for r in res.rows if r["group"] in expect["groups"]]
    for g, e in expect["groups"].items():
        commits = [r for r in mine if r["group"] == g and r["key_version"] in (0, 1)]
        assert len(commits) == e["offset_commits"], g
        latest = {}
        for r in commits:
            latest[(r["topic"], r["topic_partition"])] = r["committed_offset"]
        assert latest == e["latest"], g
    assert classic_metadata(res) == CLASSIC_GROUP_METADATA[version]
    if version == "0.9.0.1":
        assert res.control_batches == 0
    else:
        assert res.markers == {"commit": 1, "abort": 1} and res.aborted_records == 2
    if version.startswith("4."):
        assert KIP848_KINDS <= set(res.kinds)
    else:
        assert not KIP848_KINDS & set(res.kinds)
    assert all(res.positions[p] >= before[(OFFSETS_TOPIC, p)][1] for p in parts)

    # the same records decoded column-wise (what a collection writes to the dataset): the same rows
    tables = []
    fast = read_records(h.spec.name, kafka, parts, {p: before[(OFFSETS_TOPIC, p)][1] for p in parts},
                        observed_at=NOW, ends=res.positions, table_sink=tables.append)
    slow = table_from_rows("offsets_topic_records", res.rows)
    got = pa.concat_tables(tables)
    key = [("partition", "ascending"), ("offset", "ascending")]
    slow, got = (t.take(pc.sort_indices(t, key)) for t in (slow, got))
    assert got.num_rows == slow.num_rows > 0
    for name in slow.schema.names:
        assert got.column(name).to_pylist() == slow.column(name).to_pylist(), name
    assert (fast.kinds, fast.markers, fast.aborted_records, fast.positions) == (
        res.kinds, res.markers, res.aborted_records, res.positions)

"""Offsets kept in ZooKeeper: the fleet file's offset_stores, safe znode paths, the storm-kafka
JSON, the snapshot rows and the stuck rules over a store that registers no members."""

from __future__ import annotations

import datetime as dt

import pytest

from fleetkit.collection import storm_state, zk_offsets
from fleetkit.core.errors import FleetConfigError
from fleetkit.core.fleet import OffsetStoreSettings, parse_fleet
from fleetkit.stuck import rules

BASE = """
version: 1
clusters:
  - name: c1
    kafka_conn_id: c1_kafka
    offset_stores:
"""


def _stores(body: str):
    return parse_fleet(BASE + body, path="fleet.yaml").cluster("c1").offset_stores


def test_offset_stores_parse_with_defaults_on_a_cluster_without_zookeeper():
    stores = _stores("""
      - {kind: zookeeper, conn_id: old_zk, chroot: /kafka, groups: ["legacy billing"]}
      - {kind: storm, conn_id: storm_zk, root: /kafka-spouts, spouts: [clicks]}
""")
    assert stores == (
        OffsetStoreSettings(kind="zookeeper", conn_id="old_zk", root="/consumers", chroot="/kafka",
                            groups=("legacy billing",)),
        OffsetStoreSettings(kind="storm", conn_id="storm_zk", root="/kafka-spouts", spouts=("clicks",)),
    )


@pytest.mark.parametrize("body, field, words", [
    ("      - {kind: kafka, conn_id: z}\n", "offset_stores[0].kind", "must be one of zookeeper, storm"),
    ("      - {kind: storm, conn_id: z}\n", "offset_stores[0]", "missing required field 'root'"),
    ("      - {kind: zookeeper}\n", "offset_stores[0]", "missing required field 'conn_id'"),
    ("      - {kind: zookeeper, conn_id: 'a b'}\n", "offset_stores[0].conn_id", "not a valid connection id"),
    ("      - {kind: zookeeper, conn_id: z, root: /a/../b}\n", "offset_stores[0].root", ". or .."),
    ("      - {kind: zookeeper, conn_id: z, root: consumers}\n", "offset_stores[0].root", "leading slash"),
    ("      - {kind: zookeeper, conn_id: z, groups: [a/../../x]}\n", "offset_stores[0].groups[0]", "znode name"),
    ("      - {kind: zookeeper, conn_id: z, spouts: [s]}\n", "offset_stores[0].spouts", "only a storm store"),
    ("      - {kind: storm, conn_id: z, root: /s, groups: [g]}\n", "offset_stores[0].groups", "use spouts"),
    ("      - {kind: zookeeper, conn_id: z, colour: red}\n", "offset_stores[0]", "unknown field(s) colour"),
    ("      - {kind: zookeeper, conn_id: z}\n      - {kind: zookeeper, conn_id: z}\n", "offset_stores[1]",
     "appears twice"),
    ("      kind: zookeeper\n", "offset_stores", "expected a list"),
])
def test_bad_offset_stores_name_the_field(body, field, words):
    with pytest.raises(FleetConfigError) as e:
        _stores(body)
    assert f"fleet.yaml: clusters[c1].{field}: " in str(e.value) and words in str(e.value)


def test_the_lab_fleet_file_declares_stores():
    from pathlib import Path

    from fleetkit.core.fleet import load_fleet

    fleet = load_fleet(Path(__file__).resolve().parents[2] / "lab" / "fleets" / "lab.yaml")
    kinds = {(c.name, s.kind) for c in fleet.clusters for s in c.offset_stores}
    assert ("lab", "zookeeper") in kinds and ("lab43", "storm") in kinds


@pytest.mark.parametrize("name", ["..", ".", "", "a/b", "../../brokers", "x\x00y"])
def test_child_path_refuses_names_that_leave_their_parent(name):
    with pytest.raises(zk_offsets.UnsafeZnodeName):
        zk_offsets.child_path("/consumers", name)


def test_child_path_keeps_hostile_but_legal_names_as_one_component():
    name = "grp 'q' \"d\" ĝrüp {{ 7*7 }} ; rm -rf"
    assert zk_offsets.child_path("/consumers", name, "offsets") == f"/consumers/{name}/offsets"


# The JSON storm-kafka's PartitionManager.commit() writes through ZkState.writeJSON (json-simple:
# an ImmutableMap in this key order, "/" escaped as "\/").
STORM_JSON = (b'{"topology":{"id":"clicks-7-1700000000","name":"clicks \\/ \xc3\xa9t\xc3\xa9"},"offset":1234,'
              b'"partition":2,"broker":{"host":"kafka-1","port":9092},"topic":"clicks"}')


def test_storm_state_parses_offset_topic_partition_and_topology():
    assert zk_offsets.parse_storm_state(STORM_JSON, "/s/x/partition_2") == {
        "offset": 1234, "partition": 2, "topic": "clicks", "topology": "clicks / été",
        "topology_id": "clicks-7-1700000000"}


@pytest.mark.parametrize("data", [b"1234", b"{}", b'{"offset":"12","partition":0,"topic":"t"}', b"\xff"])
def test_storm_state_that_is_not_spout_state_names_the_znode(data):
    with pytest.raises(ValueError, match="/root/sp/partition_0"):
        zk_offsets.parse_storm_state(data, "/root/sp/partition_0")


def _t(minutes):
    return dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=minutes)


def test_snapshot_rows_per_source():
    read = zk_offsets.StoreRead(
        offsets=[zk_offsets.StoreOffset("zookeeper", "old", "t", 0, 5, "/c/old/offsets/t/0", 3, owner="old_h-1"),
                 zk_offsets.StoreOffset("zookeeper", "gone", "t", 1, 6, "/c/gone/offsets/t/1", 0),
                 zk_offsets.StoreOffset("storm", "spout", "t", 2, 7, "/s/spout/partition_2", 9, topology="topo"),
                 zk_offsets.StoreOffset("storm", "live", "t", 3, 8, "/s/live/partition_3", 1, topology="a",
                                        topology_id="a-1-1"),
                 zk_offsets.StoreOffset("storm", "dead", "t", 4, 9, "/s/dead/partition_4", 1, topology="b",
                                        topology_id="b-2-2"),
                 zk_offsets.StoreOffset("storm", "elsewhere", "t", 5, 9, "/s/elsewhere/partition_5", 1,
                                        topology="c", topology_id="c-3-3")],
        members={"old": ["old_h-1"], "gone": []},
        liveness={"a-1-1": storm_state.Liveness(storm_state.RUNNING, "assigned"),
                  "b-2-2": storm_state.Liveness(storm_state.NOT_RUNNING, "killed"),
                  "c-3-3": storm_state.Liveness(storm_state.UNKNOWN, "no Storm state")})
    rows = zk_offsets.snapshot_rows("c1", read, {("t", 0): (0, 10, None)}, _t(0))
    got = [(r["source"], r["group"], r["committed_offset"], r["log_end_offset"], r["group_state"], r["assigned"],
            r["member_client_id"]) for r in rows]
    assert got == [("zookeeper", "old", 5, 10, "Stable", True, "old_h-1"),
                   ("zookeeper", "gone", 6, None, "Empty", False, None),
                   ("storm", "spout", 7, None, "Unknown", None, "topo"),  # no topology id in its JSON
                   ("storm", "live", 8, None, "Stable", True, "a"),
                   ("storm", "dead", 9, None, "Empty", False, "b"),
                   ("storm", "elsewhere", 9, None, "Unknown", None, "c")]


def _frozen_rows(source, assigned=None):
    return [{"observed_at": _t(m), "committed_offset": 100, "log_start_offset": 0, "log_end_offset": 150,
             "assigned": assigned, "source": source} for m in (0, 5, 10, 15)]


def test_a_frozen_storm_spout_is_frozen_not_a_claim_about_members():
    f = rules.features(_frozen_rows("storm"), _t(15), dt.timedelta(minutes=15))
    status, reason = rules.classify(f, 900)
    assert status == "FROZEN" and "live member" not in reason and "Storm" in reason
    assert "FROZEN" in rules.ALERTING and rules.group_status(["OK", "FROZEN"]) == "FROZEN"


@pytest.mark.parametrize("assigned, status", [(True, "STALLED"), (False, "STOPPED")])
def test_a_frozen_storm_spout_whose_topology_storm_shows_is_stalled_or_stopped(assigned, status):
    """Storm's own znodes told whether the topology runs: the latest snapshot's word decides."""
    rows = _frozen_rows("storm", None)[:2] + _frozen_rows("storm", assigned)[2:]
    f = rules.features(rows, _t(15), dt.timedelta(minutes=15))
    assert f.liveness_known and rules.classify(f, 900)[0] == status
    # ... and unknown again when the latest snapshot could not tell
    rows = _frozen_rows("storm", assigned)[:3] + _frozen_rows("storm", None)[3:]
    assert rules.classify(rules.features(rows, _t(15), dt.timedelta(minutes=15)), 900)[0] == "FROZEN"


@pytest.mark.parametrize("source", [None, "kafka", "zookeeper"])
def test_frozen_offsets_of_stores_with_members_keep_their_verdicts(source):
    f = rules.features(_frozen_rows(source), _t(15), dt.timedelta(minutes=15))
    assert rules.classify(f, 900)[0] == "STOPPED"


def test_files_written_before_the_source_column_still_read(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from fleetkit.core.datasets import SCHEMAS, DataRoot, read_dataset

    schema = SCHEMAS["offsets_snapshots"]
    old = pa.schema([f for f in schema if f.name != "source"])
    folder = tmp_path / "offsets_snapshots" / "cluster=c1" / "date=2026-01-01"
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([{"cluster": "c1", "group": "g", "topic": "t", "partition": 0,
                                          "observed_at": _t(0), "committed_offset": 5}], schema=old),
                   folder / "part-old.parquet")
    rows = read_dataset(DataRoot(tmp_path), "offsets_snapshots").to_pylist()
    assert [(r["group"], r["committed_offset"], r["source"]) for r in rows] == [("g", 5, None)]


def test_report_names_the_source(tmp_path):
    from fleetkit.stuck.report import StuckReport

    finding = {"cluster": "c1", "group": "clicks-spout", "topic": "t", "partition": 0, "status": "FROZEN",
               "lag": 50, "committed_offset": 100, "log_end_offset": 150, "reason": "r", "source": "storm",
               "expires_in_seconds": 600, "offset_expires_at": "2026-01-02T00:00:00Z"}
    old = dict(finding, group="billing", status="STOPPED")
    del old["source"]
    rep = StuckReport(findings=[finding, old], groups=[])
    html, md = rep.render(tmp_path)
    assert "<td>storm</td><td>clicks-spout</td>" in html.read_text()
    assert "<td>kafka</td><td>billing</td>" in html.read_text()
    assert "storm · spout clicks\\-spout" in md.read_text()  # Markdown escapes the dash
    assert any(a.startswith("FROZEN c1 storm spout 'clicks-spout'") for a in rep.alerts())


def test_storm_offset_rewrite_keeps_every_other_byte():
    from fleetkit.stuck.zk_reset import replace_storm_offset

    out = replace_storm_offset(STORM_JSON, 99)
    assert out == STORM_JSON.replace(b'"offset":1234,', b'"offset":99,')
    assert replace_storm_offset(out, 1234) == STORM_JSON
    # an "offset" inside a nested object or a string is not the spout's offset
    tricky = b'{"topology":{"id":"x","name":"\\"offset\\":1","offset":5},"offset" : 7 ,"topic":"t"}'
    assert replace_storm_offset(tricky, 8) == tricky.replace(b'"offset" : 7', b'"offset" : 8')


def test_a_plan_refuses_a_group_that_cannot_be_a_znode_name():
    """(The storm plan's refusal without Storm state or confirmation needs a ZooKeeper: it is in
    tests/dags/test_runbook_reset_zk_offsets.py.)"""
    from fleetkit.core.action import ClusterContext
    from fleetkit.stuck.plan import ResetError
    from fleetkit.stuck.zk_reset import build_plan

    cluster = parse_fleet(BASE + "      - {kind: storm, conn_id: s, root: /s}\n", path="f.yaml").cluster("c1")
    with pytest.raises(ResetError, match="cannot be a znode name"):
        build_plan(ClusterContext(cluster, None, None), {"source": "zookeeper", "group": "../x", "topic": "t",
                                                         "target": "skip 1"})

"""The trim_health job in process (fleetkit.trim.inprocess) against the Spark job: the same data
root through both gives the same health rows, the same messages per segment and the same trim
plans, field for field."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetkit.collection import log_marks
from fleetkit.collection.offsets_topic import settings_path
from fleetkit.core.datasets import DataRoot, write_collection
from fleetkit.trim import inprocess

from tests.spark.engines import by_key, close

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "spark_jobs"))
pytestmark = pytest.mark.spark

T0 = dt.datetime(2026, 11, 20, 12, 0, tzinfo=dt.timezone.utc)
HOSTILE = ["", "3:abc", "a\"b' $(id)", "grüße 🚀"]
FLEET = """version: 1
clusters:
- name: c1
  kafka_version: 0.9.0.1
  kafka_conn_id: c1_kafka
  cleaner:
    dedupe_buffer_size: 100000
- name: c2
  kafka_version: 3.9.1
  kafka_conn_id: c2_kafka
"""


def commit(p, offset, group, topic="t", tp=0, committed=1, tomb=False, size=100, metadata="m"):
    return {"partition": p, "offset": offset, "key_version": 1, "group": group, "topic": topic,
            "topic_partition": tp, "committed_offset": None if tomb else committed, "tombstone": tomb,
            "size_bytes": size, "metadata": None if tomb else metadata, "value_version": 1}


def group_meta(p, offset, group, members: int, tomb=False, generation=3):
    return {"partition": p, "offset": offset, "key_version": 2, "group": group, "tombstone": tomb, "size_bytes": 300,
            "generation": None if tomb else generation, "protocol_type": "consumer",
            "members": [{"client_id": f"c{i}", "client_host": "/10.0.0.1", "member_id": f"m{i}"}
                        for i in range(members)]}


def segment(broker, p, base, size, active=False, log_dir="/data"):
    return {"broker": broker, "log_dir": log_dir, "topic": "__consumer_offsets", "partition": p, "base_offset": base,
            "size_bytes": size, "modified_at": T0 - dt.timedelta(hours=base % 7), "is_active": active}


def c1_records() -> list[dict]:
    """Partition 0: one key committed again and again (bloated), records read twice, a group the
    coordinator calls Stable, another Empty, hostile names, group metadata and its tombstone.
    Partition 1: records below every segment base. Partition 2: segments and no record."""
    rows = []
    for i in range(400):  # the same key, over and over: the newest wins
        rows.append(commit(0, i, "busy", committed=i))
    rows[350] = group_meta(0, 350, "old-meta", 1)  # a group-metadata record the trim removes
    rows[351] = commit(0, 351, "stable-group", committed=6)  # a removed offset of an active group
    for n, name in enumerate(HOSTILE):
        rows.append(commit(0, 400 + n, name, topic=f"{name}-t", committed=7 + n, metadata=name or None))
    rows += [commit(0, 410, "empty-group", committed=5),
             group_meta(0, 412, "stable-group", 2), group_meta(0, 413, "gone-group", 1),
             group_meta(0, 414, "gone-group", 0, tomb=True), commit(0, 415, "dropped", tomb=True),
             commit(0, 416, "late", committed=9)]
    rows += [dict(r) for r in rows[395:405]]  # read twice: count once
    rows.append({**commit(0, 417, "odd"), "key_version": None})  # an unknown key version
    rows += [commit(1, o, "below", committed=o) for o in (3, 4, 5)] + [commit(1, 60, "below", committed=60)]
    return rows


def write_root(root: Path) -> Path:
    data = DataRoot(str(root))
    # the first collection: segments and checkpoints of an older observation
    t1, t2 = T0 - dt.timedelta(hours=1), T0
    write_collection(data, "c1", t1, {
        "offsets_topic_records": [{**r, "cluster": "c1", "observed_at": t1} for r in c1_records()[:200]],
        "segment_inventory": [{**s, "cluster": "c1", "observed_at": t1}
                              for s in (segment(0, 0, 0, 40_000), segment(0, 0, 200, 10_000, active=True))],
        "cleaner_checkpoints": [{"cluster": "c1", "broker": 0, "log_dir": "/data", "topic": "__consumer_offsets",
                                 "partition": 0, "observed_at": t1, "checkpoint_offset": 0}]})
    latest = [segment(b, 0, base, size, active=active) for b in (0, 1)
              for base, size, active in ((0, 40_000, False), (100, 30_000, False), (300, 20_000, False), (405, 5_000, False),
                                         (418, 0, True))]
    latest += [segment(0, 1, 50, 4_000), segment(0, 1, 61, 100, active=True), segment(1, 2, 0, 0, active=True)]
    write_collection(data, "c1", t2, {
        "offsets_topic_records": [{**r, "cluster": "c1", "observed_at": t2} for r in c1_records()[200:]],
        "segment_inventory": [{**s, "cluster": "c1", "observed_at": t2} for s in latest],
        "cleaner_checkpoints": [{"cluster": "c1", "broker": 0, "log_dir": "/data", "topic": "__consumer_offsets",
                                 "partition": 0, "observed_at": t2, "checkpoint_offset": 0}],
        "group_coordinators": [{"cluster": "c1", "group": "stable-group", "observed_at": t2, "coordinator_id": 0,
                                "state": "Stable", "members": 2},
                               {"cluster": "c1", "group": "empty-group", "observed_at": t2, "coordinator_id": 0,
                                "state": "Empty", "members": 0}]})
    # c2: a log replaced under the collection (only the rows since count), the brokers' own settings
    for when, first in ((t1, 0), (t2, 1000)):
        write_collection(data, "c2", when, {
            "offsets_topic_records": [{**commit(3, first + i, "g2", committed=i), "cluster": "c2", "observed_at": when}
                                      for i in range(30)],
            "segment_inventory": [{**segment(5, 3, first, 3_000, active=True), "cluster": "c2", "observed_at": when}],
            "cleaner_checkpoints": []})
    log_marks.save(data, "c2", {"marks": {}, "superseded_before": {3: t2.isoformat()}})
    data.write_json_atomic(settings_path(data, "c2"), {
        "brokers": {"5": {"dedupe_buffer_size": 2_000_000, "threads": 2, "load_factor": 0.5}},
        "topic": {"min_cleanable_ratio": 0.2, "segment_bytes": 1_000}})
    # a cluster no longer in the fleet file: left out of the health, as the Spark job does
    write_collection(data, "gone", t2, {
        "offsets_topic_records": [{**commit(0, 1, "x"), "cluster": "gone", "observed_at": t2}],
        "segment_inventory": [{**segment(0, 0, 0, 100, active=True), "cluster": "gone", "observed_at": t2}],
        "cleaner_checkpoints": []})
    fleet = root.parent / "fleet.yaml"
    fleet.write_text(FLEET, encoding="utf-8")
    return fleet


def _differences(spark_rows, local_rows, keys) -> list[str]:
    a, b = by_key(spark_rows, keys), by_key(local_rows, keys)
    out = [f"only in Spark: {k}" for k in sorted(set(a) - set(b), key=str)]
    out += [f"only in process: {k}" for k in sorted(set(b) - set(a), key=str)]
    for k in sorted(set(a) & set(b), key=str):
        out += [f"{k} {f}: Spark {a[k].get(f)!r}, in process {b[k].get(f)!r}"
                for f in sorted(set(a[k]) | set(b[k])) if not close(a[k].get(f), b[k].get(f), 1e-9)]
    return out


def _read(folder: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (folder / name).read_text(encoding="utf-8").splitlines() if line]


@pytest.mark.parametrize("partitions", [None, "0,1,2"], ids=["all-unhealthy", "chosen"])
def test_the_same_data_root_gives_the_same_files_in_process_and_in_spark(tmp_path, partitions):
    root = tmp_path / "data"
    fleet = write_root(root)
    outs = {}
    for engine in ("spark", "in-process"):
        out = tmp_path / engine
        args = [sys.executable, str(REPO / "spark_jobs" / "trim_health.py"), "--data-root", str(root),
                "--fleet", str(fleet), "--out", str(out), "--bloat-ratio", "3", "--min-bloat-bytes", "0",
                "--trim-plan", "--engine", engine, "--master", "local[1]"]
        if partitions:
            args += ["--partitions", partitions]
        run = subprocess.run(args, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "PYTHONPATH": f"{REPO / 'include'}"})
        assert run.returncode == 0, run.stderr[-3000:]
        assert "gone" in run.stdout and "left out" in run.stdout  # the cluster not in the fleet file is named
        outs[engine] = out
    spark_health, local_health = _read(outs["spark"], "health.jsonl"), _read(outs["in-process"], "health.jsonl")
    assert _differences(spark_health, local_health, ("cluster", "broker", "partition")) == []
    assert _differences(_read(outs["spark"], "segments.jsonl"), _read(outs["in-process"], "segments.jsonl"),
                        ("cluster", "broker", "partition", "base_offset")) == []
    spark_plan = json.loads((outs["spark"] / "trim_plan.json").read_text(encoding="utf-8"))
    local_plan = json.loads((outs["in-process"] / "trim_plan.json").read_text(encoding="utf-8"))
    assert close(spark_plan, local_plan, 1e-9), (json.dumps(spark_plan)[:3000], json.dumps(local_plan)[:3000])

    # the data exercised what it was built for (the comparison is not of two empty files)
    health = by_key(local_health, ("cluster", "broker", "partition"))
    assert {r["cluster"] for r in local_health} == {"c1", "c2"}
    assert health[("c1", 0, 0)]["verdict"] != "HEALTHY" and health[("c1", 0, 0)]["segments"] == 5
    assert health[("c1", 1, 2)]["records"] == 0 and health[("c1", 0, 1)]["records"] == 4
    assert health[("c2", 5, 3)]["records"] == 30  # the rows of the replaced log are left out
    assert health[("c2", 5, 3)]["keys_per_pass"] == 20_833  # the broker's reported settings win
    segs = by_key(_read(outs["in-process"], "segments.jsonl"), ("cluster", "broker", "partition", "base_offset"))
    assert segs[("c1", 0, 0, 418)]["messages"] == 0 and segs[("c1", 0, 0, 0)]["messages"] == 100
    p0 = next(p for c in local_plan if c["cluster"] == "c1" for p in c["partitions"] if p["partition"] == 0)
    assert sorted(i["group"] for i in p0["recommit"]) == sorted(["busy", *HOSTILE])  # empty-group's is kept
    assert [(i["group"], i["group_state"]) for i in p0["active_groups"]] == [("stable-group", "Stable")]
    assert [g["group"] for g in p0["group_metadata_lost"]] == ["old-meta"]


def test_the_row_limit_decides_the_engine(tmp_path, monkeypatch):
    root = tmp_path / "data"
    write_root(root)
    monkeypatch.delenv("FLEET_TRIM_INPROCESS_MAX_ROWS", raising=False)
    monkeypatch.delenv("FLEET_OFFSETS_INPROCESS_MAX_ROWS", raising=False)
    assert inprocess.small_input(str(root))
    # the variable's earlier name is still read, and the new one wins when both are set
    monkeypatch.setenv("FLEET_OFFSETS_INPROCESS_MAX_ROWS", "100")
    assert not inprocess.small_input(str(root))
    monkeypatch.setenv("FLEET_TRIM_INPROCESS_MAX_ROWS", "1000000")
    assert inprocess.small_input(str(root))
    monkeypatch.delenv("FLEET_OFFSETS_INPROCESS_MAX_ROWS")
    monkeypatch.setenv("FLEET_TRIM_INPROCESS_MAX_ROWS", "100")
    assert not inprocess.small_input(str(root))
    monkeypatch.setenv("FLEET_TRIM_INPROCESS_MAX_ROWS", "0")
    assert not inprocess.small_input(str(root))
    monkeypatch.setenv("FLEET_TRIM_INPROCESS_MAX_ROWS", "1000000")
    assert not inprocess.small_input("hdfs://nn/data")
    assert not inprocess.small_input(str(tmp_path / "nothing-here"))
    (tmp_path / "empty").mkdir()  # a data root with no records collected yet: nothing to count, no Spark
    assert inprocess.small_input(str(tmp_path / "empty"))

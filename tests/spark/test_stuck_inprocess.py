"""The stuck job in process (fleetkit.stuck.inprocess) against the Spark job: the same rows through
both give the same findings, groups and lag series, field for field."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from fleetkit.core.datasets import SCHEMAS
from fleetkit.stuck import inprocess, stages
from tests.spark.test_stuck_job import AS_OF, case_rows, storm_rows, to_jsonl
from tests.stuck_cases import WINDOW

from tests.spark.engines import by_key, close

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "spark_jobs"))
pytestmark = pytest.mark.spark

HOSTILE = ["", "3:abc", "a\"b' $(id)", "grüße 🚀", "1:x-2:yy"]


def mixed_rows() -> list[dict]:
    """The rule table's cases, the storm groups, a group of three verdicts, hostile names, a
    ZooKeeper-stored group, a partition without a log end, and rows after as_of."""
    rows = case_rows() + storm_rows()
    for n, name in enumerate(HOSTILE):
        for p, (c, e) in enumerate([(10, 10), (5, 50), (7, 70)]):
            for i in range(5):
                rows.append({"cluster": name or "c2", "group": name, "topic": f"{name}-t", "partition": p,
                             "observed_at": AS_OF - dt.timedelta(seconds=100 * i + n),
                             "committed_offset": c + (i == 4 and p == 0), "log_start_offset": 0,
                             "log_end_offset": None if (p == 2 and i == 1) else e + (n if p else 0),
                             "group_state": "Stable", "assigned": p == 1,
                             "source": "zookeeper" if n == 2 else None})
    rows.append({"cluster": "c2", "group": "late", "topic": "t", "partition": 0,
                 "observed_at": AS_OF + dt.timedelta(seconds=30), "committed_offset": 1, "log_end_offset": 2})
    return rows


def test_the_same_rows_give_the_same_outputs_in_process_and_in_spark(live):
    spark = live
    import stuck as job
    from jobs_common import SNAPSHOT_SCHEMA
    from pyspark.sql import functions as F

    rows = mixed_rows()
    df = spark.createDataFrame([tuple(r.get(f.name) for f in SNAPSHOT_SCHEMA.fields) for r in rows], SNAPSHOT_SCHEMA)
    findings, groups, as_of = job.evaluate(df, WINDOW, AS_OF)

    def as_written(frame):  # what write_jsonl writes: every column, nulls kept
        return [json.loads(r[0]) for r in frame.select(F.to_json(F.struct("*"), {"ignoreNullFields": "false"})).collect()]

    spark_findings = as_written(job.for_json(findings))
    spark_groups = as_written(job.for_json(groups))
    spark_series = as_written(job.lag_series(findings, job.with_source(df), as_of, WINDOW))

    table = pa.Table.from_pylist([{f.name: r.get(f.name) for f in SCHEMAS["offsets_snapshots"]} for r in rows],
                                 schema=SCHEMAS["offsets_snapshots"])
    f2, g2, as_of2 = inprocess.evaluate(table, WINDOW, AS_OF)
    assert as_of2 == AS_OF
    mine = json.loads(json.dumps(stages.as_json(f2)))
    keys = ("cluster", "source", "group", "topic", "partition")
    theirs, ours = by_key(spark_findings, keys), by_key(mine, keys)
    assert theirs.keys() == ours.keys()
    assert len(ours) > 60 and {"STALLED", "STOPPED", "OK", "INSUFFICIENT_DATA", "NO_COMMIT"} <= \
        {f["status"] for f in mine}
    for k, want in theirs.items():
        got = ours[k]
        assert list(got) == list(want), k  # the same columns in the same order
        diff = {c: (want[c], got[c]) for c in want if not close(want[c], got[c])}
        assert not diff, (k, diff)
    mine_groups = json.loads(json.dumps(stages.as_json(g2)))
    theirs, ours = by_key(spark_groups, keys[:3]), by_key(mine_groups, keys[:3])
    assert theirs.keys() == ours.keys() and any(g["rebalance_storm"] for g in mine_groups)
    for k, want in theirs.items():
        assert list(ours[k]) == list(want), k
        diff = {c: (want[c], ours[k][c]) for c in want if not close(want[c], ours[k][c])}
        assert not diff, (k, diff)
    mine_series = json.loads(json.dumps(stages.as_json(inprocess.lag_series(f2, table, AS_OF, WINDOW))))
    assert mine_series and by_key(mine_series, keys).keys() == by_key(spark_series, keys).keys()
    for k, want in by_key(spark_series, keys).items():
        assert close(by_key(mine_series, keys)[k], want), k


def test_auto_judges_a_small_input_without_spark_and_writes_the_job_files(tmp_path):
    """Run as a plain script (no spark-submit, no JVM): the job's files and datasets, and its summary
    says which engine judged."""
    rows = mixed_rows()
    out = subprocess.run([sys.executable, str(REPO / "spark_jobs" / "stuck.py"),
                          "--snapshots", str(to_jsonl(rows, tmp_path / "s.jsonl")), "--out", str(tmp_path / "o"),
                          "--window", "10m", "--data-root", str(tmp_path / "data")],
                         capture_output=True, text=True, timeout=120,
                         env={"PYTHONPATH": str(REPO / "include"), "PATH": "/usr/bin:/bin",
                              "JAVA_HOME": "/nonexistent"})  # a JVM start would fail
    assert out.returncode == 0, out.stderr[-3000:]
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["engine"] == "in-process" and summary["input_rows"] == len(rows)
    findings = [json.loads(x) for x in (tmp_path / "o" / "findings.jsonl").read_text().splitlines()]
    assert len(findings) == summary["partitions"] and summary["statuses"]["STALLED"] >= 1
    assert (tmp_path / "o" / "groups.jsonl").read_text() and (tmp_path / "o" / "series.jsonl").read_text()
    for dataset in ("stuck_findings", "stuck_groups"):
        (part,) = (tmp_path / "data" / dataset).glob("date=*/run=*/*.parquet")
        import pyarrow.parquet as pq

        assert pq.read_table(part).num_rows == (summary["partitions"] if dataset == "stuck_findings"
                                                else summary["groups"])


def test_the_size_limit_sends_larger_inputs_to_spark(tmp_path, monkeypatch):
    path = to_jsonl(mixed_rows(), tmp_path / "s.jsonl")
    assert inprocess.small_input(str(path))
    monkeypatch.setenv("FLEET_STUCK_INPROCESS_MAX_ROWS", "10")
    assert not inprocess.small_input(str(path))
    monkeypatch.setenv("FLEET_STUCK_INPROCESS_MAX_ROWS", "0")
    assert not inprocess.small_input(str(path))
    monkeypatch.delenv("FLEET_STUCK_INPROCESS_MAX_ROWS")
    assert not inprocess.small_input("hdfs://namenode/data/offsets_snapshots")

"""The group_ids job: the case table through Spark and in process
(fleetkit.group_ids.inprocess), and the job's files from spark-submit and from the in-process engine."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetkit.core.datasets import DataRoot, write_collection
from tests.group_id_cases import AS_OF, CASES, GRACE, ROOT, key, rows

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "spark_jobs"))
pytestmark = pytest.mark.spark


def _all_rows():
    zn, mem = [], []
    for number, _, members, znodes, _, _ in CASES:
        z, m = rows(number, members, znodes)
        zn += z
        mem += m
    return zn, mem


def test_case_table_through_spark(spark):
    import group_ids as job
    zn, mem = _all_rows()
    mdf = spark.createDataFrame([tuple(r[f] for f in job.MAPPINGS_SCHEMA.names) for r in zn], job.MAPPINGS_SCHEMA)
    udf = spark.createDataFrame([tuple(r[f] for f in job.MEMBERS_SCHEMA.names) for r in mem], job.MEMBERS_SCHEMA)
    mdf, udf = job.latest(mdf, udf)
    got: dict[str, dict[str, str]] = {}
    for r in job.classify(mdf, udf, None, ROOT, GRACE).collect():
        got.setdefault(r["cluster"], {})[key(r.asDict())] = r["class"]
    for number, title, _, _, expected, why in CASES:
        assert got.get(f"case-{number:02d}") == expected, f"case {number} {title}: {why}"


def test_case_table_in_process():
    from fleetkit.group_ids import inprocess

    zn, mem = _all_rows()
    got: dict[str, dict[str, str]] = {}
    for f in inprocess.classify(zn, mem, {}, ROOT, GRACE):
        got.setdefault(f["cluster"], {})[key(f)] = f["class"]
    for number, title, _, _, expected, why in CASES:
        assert got.get(f"case-{number:02d}") == expected, f"case {number} {title}: {why}"


@pytest.mark.parametrize("engine", ["spark", "in-process"])
def test_the_job_reads_the_datasets_newest_collection(tmp_path, engine):
    """Three collections of one cluster: only the newest counts (a znode deleted since is gone); a
    cluster whose newest collection is older than --max-age is left out. The same files from
    spark-submit and from the in-process engine (no JVM: JAVA_HOME points nowhere)."""
    root = DataRoot(tmp_path / "data")
    import datetime as dt

    zn, mem = rows(3, [("g1", "10.0.0.7", "c1")], {"10.0.0.7-c1": ("g0", 10), "10.0.0.7-old": ("g1", 99999)})
    for r in zn + mem:
        r["cluster"] = "lab"
    old = AS_OF - dt.timedelta(minutes=5)
    write_collection(root, "lab", old, {"group_id_mappings": [dict(r, observed_at=old) for r in zn],
                                        "group_members": [dict(r, observed_at=old) for r in mem]})
    write_collection(root, "lab", AS_OF, {"group_id_mappings": [zn[0]], "group_members": mem})
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text("version: 1\nclusters:\n  - name: lab\n    kafka_conn_id: k\n    zookeeper: {conn_id: z}\n"
                     f"    group_id_mappings: {{root: {ROOT}, grace: 1h}}\n")
    # another cluster whose newest collection is old (its last collection failed): left out
    recent = dt.datetime.now(dt.timezone.utc)
    write_collection(root, "lab", recent, {"group_id_mappings": [dict(zn[0], observed_at=recent)],
                                           "group_members": [dict(r, observed_at=recent) for r in mem]})
    old_rows = [dict(r, cluster="down", observed_at=old) for r in mem]
    write_collection(root, "down", old, {"group_id_mappings": [], "group_members": old_rows})
    out = tmp_path / "out"
    job = [str(REPO / "spark_jobs" / "group_ids.py"), "--data-root", str(tmp_path / "data"),
           "--fleet", str(fleet), "--out", str(out), "--max-age", "30m", "--engine", engine]
    if engine == "spark":
        proc = subprocess.run(["spark-submit", "--master", "local[2]", "--conf", "spark.ui.enabled=false", *job],
                              capture_output=True, text=True)
    else:
        proc = subprocess.run([sys.executable, *job], capture_output=True, text=True,
                              env={**os.environ, "JAVA_HOME": "/nonexistent", "PYTHONPATH": str(REPO / "include")})
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["clusters"] == {"lab": {"MISMATCHED": 1}} and summary["findings"] == 1
    assert summary["skipped_old_collections"] == ["down"]
    (f,) = [json.loads(x) for x in (out / "findings.jsonl").read_text().splitlines()]
    assert (f["path"], f["class"], f["group"], f["znode_group"], f["znode_version"], f["client_id"]) == \
        ("/client_group_id/10.0.0.7-c1", "MISMATCHED", "g1", "g0", 3, "c1")
    assert json.loads((out / "summary.json").read_text())["clusters"] == summary["clusters"]

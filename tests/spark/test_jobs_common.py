"""jobs_common: Spark schemas derived from the datasets' pyarrow schemas, and input listing / output
writing through the Hadoop FileSystem API (local paths and file:// URIs alike)."""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from fleetkit.core.datasets import SCHEMAS, DataRoot, write_collection

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "spark_jobs"))
pytestmark = pytest.mark.spark

from pyspark.sql import types as T  # noqa: E402

# the schemas as the jobs wrote them by hand before they were derived
HAND_WRITTEN = {
    "offsets_snapshots": T.StructType([
        T.StructField("cluster", T.StringType()), T.StructField("group", T.StringType()),
        T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
        T.StructField("observed_at", T.TimestampType()), T.StructField("committed_offset", T.LongType()),
        T.StructField("log_start_offset", T.LongType()), T.StructField("log_end_offset", T.LongType()),
        T.StructField("group_state", T.StringType()), T.StructField("assigned", T.BooleanType()),
        T.StructField("member_client_id", T.StringType()), T.StructField("member_host", T.StringType()),
        T.StructField("group_type", T.StringType()), T.StructField("source", T.StringType()),
        T.StructField("member_epoch", T.IntegerType()),
        T.StructField("committed_at", T.TimestampType()), T.StructField("commit_interval_seconds", T.DoubleType()),
        T.StructField("committed_record_timestamp", T.TimestampType()),
        T.StructField("generation", T.IntegerType()), T.StructField("rejoins", T.IntegerType()),
        T.StructField("rejoin_cause", T.StringType()), T.StructField("assignor", T.StringType()),
        T.StructField("member_id", T.StringType()),
    ]),
    "group_coordinators": T.StructType([
        T.StructField("cluster", T.StringType()), T.StructField("group", T.StringType()),
        T.StructField("observed_at", T.TimestampType()), T.StructField("coordinator_id", T.IntegerType()),
        T.StructField("error", T.StringType()), T.StructField("state", T.StringType()),
        T.StructField("members", T.IntegerType()),
    ]),
    "partition_state": T.StructType([
        T.StructField("cluster", T.StringType()), T.StructField("topic", T.StringType()),
        T.StructField("partition", T.IntegerType()), T.StructField("observed_at", T.TimestampType()),
        T.StructField("leader", T.IntegerType()), T.StructField("isr", T.ArrayType(T.IntegerType())),
        T.StructField("leader_epoch", T.IntegerType()), T.StructField("controller_epoch", T.IntegerType()),
        T.StructField("source", T.StringType()),
    ]),
    "leader_changes": T.StructType([
        T.StructField("cluster", T.StringType()), T.StructField("partition", T.IntegerType()),
        T.StructField("observed_at", T.TimestampType()), T.StructField("from_leader", T.IntegerType()),
        T.StructField("to_leader", T.IntegerType()), T.StructField("from_epoch", T.IntegerType()),
        T.StructField("to_epoch", T.IntegerType()), T.StructField("isr", T.ArrayType(T.IntegerType())),
        T.StructField("source", T.StringType()),
    ]),
    "group_id_mappings": T.StructType([
        T.StructField("cluster", T.StringType()), T.StructField("observed_at", T.TimestampType()),
        T.StructField("path", T.StringType()), T.StructField("client_host", T.StringType()),
        T.StructField("client_id", T.StringType()), T.StructField("group", T.StringType()),
        T.StructField("znode_version", T.IntegerType()), T.StructField("ctime", T.TimestampType()),
        T.StructField("mtime", T.TimestampType()),
    ]),
    "group_members": T.StructType([
        T.StructField("cluster", T.StringType()), T.StructField("observed_at", T.TimestampType()),
        T.StructField("group", T.StringType()), T.StructField("client_id", T.StringType()),
        T.StructField("client_host", T.StringType()), T.StructField("member_id", T.StringType()),
    ]),
}


# -- schemas ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("dataset", sorted(HAND_WRITTEN))
def test_derived_schema_equals_the_hand_written_one(dataset):
    from jobs_common import spark_schema

    assert spark_schema(dataset) == HAND_WRITTEN[dataset]


def test_every_dataset_converts_with_its_columns_in_order():
    from jobs_common import SNAPSHOT_SCHEMA, spark_schema

    assert SNAPSHOT_SCHEMA == HAND_WRITTEN["offsets_snapshots"]
    for name, schema in SCHEMAS.items():
        assert spark_schema(name).fieldNames() == schema.names, name
    records = spark_schema("offsets_topic_records")
    assert records["key_version"].dataType == T.ShortType()
    assert records["members"].dataType == T.ArrayType(T.StructType([
        T.StructField("client_id", T.StringType()), T.StructField("client_host", T.StringType()),
        T.StructField("member_id", T.StringType())]))


def test_other_pyarrow_types():
    from jobs_common import spark_schema, spark_type

    assert spark_type(pa.timestamp("us")) == T.TimestampNTZType()
    assert spark_type(pa.float64()) == T.DoubleType()
    assert spark_type(pa.decimal128(10, 2)) == T.DecimalType(10, 2)
    assert spark_type(pa.map_(pa.string(), pa.int64())) == T.MapType(T.StringType(), T.LongType())
    assert spark_schema(pa.schema([pa.field("x", pa.int8(), nullable=False)])) == \
        T.StructType([T.StructField("x", T.ByteType(), False)])
    with pytest.raises(TypeError, match="no Spark type"):
        spark_type(pa.time32("s"))


def test_parquet_written_by_the_collectors_reads_with_the_derived_schema(live, tmp_path):
    from jobs_common import read_rows, spark_schema

    at = dt.datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=dt.timezone.utc)
    rows = [{"cluster": "c1", "partition": 7, "offset": 42, "observed_at": at, "key_version": 1, "group": "g",
             "tombstone": False, "members": [{"client_id": "a", "client_host": "/10.0.0.1", "member_id": "m"}]}]
    write_collection(DataRoot(tmp_path), "c1", at, {"offsets_topic_records": rows})
    df = read_rows(live, (tmp_path / "offsets_topic_records").as_uri(), spark_schema("offsets_topic_records"),
                   ("observed_at",))
    got = df.collect()
    assert len(got) == 1
    assert (got[0]["partition"], got[0]["offset"], got[0]["key_version"], got[0]["members"][0]["client_host"]) == \
        (7, 42, 1, "/10.0.0.1")
    assert got[0]["observed_at"].replace(tzinfo=dt.timezone.utc) == at


# -- files -----------------------------------------------------------------------------------------

def old_data_files(path: str, since: dt.date | None = None) -> tuple[list[str], list[str]]:
    """data_files as it was (os.walk): local paths must come back exactly like this."""
    def too_old(folder):
        if since is None or not folder.startswith("date="):
            return False
        try:
            return dt.date.fromisoformat(folder[5:]) < since
        except ValueError:
            return False
    p = Path(path)
    if p.is_file():
        files = [p]
    else:
        files = []
        for root, dirs, names in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")) and not too_old(d))
            files.extend(Path(root) / n for n in sorted(names) if not n.startswith(("_", ".")))
    return ([str(f) for f in files if f.suffix == ".parquet"],
            [str(f) for f in files if f.suffix in (".jsonl", ".json")])


def make_tree(root: Path) -> None:
    for rel in ["top.jsonl", "b.parquet", "a.json", "notes.txt", "_SUCCESS", ".hidden.parquet",
                "cluster=c1/date=2026-01-01/part-1.parquet", "cluster=c1/date=2026-01-01/part-0.parquet",
                "cluster=c1/date=2026-01-03/part-2.parquet", "cluster=c1/date=2026-01-03/_tmp-x.parquet",
                "cluster=c1/date=not-a-day/x.jsonl", "cluster=c1/z.jsonl",
                "cluster=c0/date=2026-01-02/part-3.parquet", "_state/s.parquet", ".cache/c.parquet",
                "cluster=c1/date=2026-01-03/_tmp-run=1/p.parquet"]:
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("x")


@pytest.mark.parametrize("since", [None, dt.date(2026, 1, 2)])
def test_data_files_of_a_local_path_are_as_before(live, tmp_path, monkeypatch, since):
    from jobs_common import data_files

    make_tree(tmp_path / "data")
    parquet, jsonl = data_files(str(tmp_path / "data"), since)
    assert (parquet, jsonl) == old_data_files(str(tmp_path / "data"), since)
    assert len(parquet) == (5 if since is None else 3) and len(jsonl) == 4
    # the stuck job in process reads the same files in the same order
    from fleetkit.stuck.inprocess import input_files
    assert input_files(str(tmp_path / "data"), since) == (parquet, jsonl)
    monkeypatch.chdir(tmp_path)  # relative paths: relative to this process's folder, and kept relative
    assert data_files("data", since) == old_data_files("data", since)
    assert data_files("./data/top.jsonl") == ([], ["data/top.jsonl"])


def test_data_files_of_a_file_uri(live, tmp_path):
    from jobs_common import data_files

    make_tree(tmp_path / "data")
    uri = f"file://{tmp_path / 'data'}"  # as Spark and Hadoop take it (no percent-encoding of '=')
    local_parquet, local_jsonl = old_data_files(str(tmp_path / "data"), dt.date(2026, 1, 2))
    parquet, jsonl = data_files(uri + "/", dt.date(2026, 1, 2))
    as_uri = lambda paths: [f"file://{p}" for p in paths]  # noqa: E731
    assert (parquet, jsonl) == (as_uri(local_parquet), as_uri(local_jsonl))
    assert data_files(uri + "/top.jsonl") == ([], [uri + "/top.jsonl"])
    with pytest.raises(SystemExit, match="does not exist"):
        data_files(uri + "/missing")
    with pytest.raises(SystemExit, match=r"input 'nowhere' does not exist"):
        data_files("nowhere")


def rows_of(df_rows) -> list[dict]:
    return [r.asDict() for r in df_rows]


@pytest.mark.parametrize("as_uri", [False, True])
def test_write_jsonl(live, tmp_path, as_uri):
    from jobs_common import write_jsonl

    out = tmp_path / "reports" / "run" / "findings.jsonl"
    target = out.as_uri() if as_uri else str(out)
    df = live.createDataFrame([(1, "a", None), (2, None, 3.5), (3, "c", 1.0)], "x int, y string, z double")
    assert write_jsonl(df, target) == 3
    assert [json.loads(line) for line in out.read_text().splitlines()] == [
        {"x": 1, "y": "a", "z": None}, {"x": 2, "y": None, "z": 3.5}, {"x": 3, "y": "c", "z": 1.0}]
    assert sorted(p.name for p in out.parent.iterdir()) == ["findings.jsonl"]  # no _tmp, no .crc
    # replaced on the next write; an empty DataFrame writes an empty file
    assert write_jsonl(df.filter("x > 1").repartition(3), target) == 2
    assert len(out.read_text().splitlines()) == 2
    assert write_jsonl(df.limit(0), target) == 0
    assert out.read_text() == ""
    assert sorted(p.name for p in out.parent.iterdir()) == ["findings.jsonl"]


def test_write_dataset_on_a_file_uri(live, tmp_path):
    from jobs_common import data_files, write_dataset

    df = live.createDataFrame([("c1", 1), ("c1", 2)], "cluster string, n int")
    root = (tmp_path / "data").as_uri()
    final = write_dataset(df, root, "stuck_findings", "20260101T000000Z")
    day = dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert final == f"{root}/stuck_findings/date={day}/run=20260101T000000Z"
    folder = tmp_path / "data" / "stuck_findings" / f"date={day}"
    assert [p.name for p in folder.iterdir()] == ["run=20260101T000000Z"]  # the _tmp folder was renamed
    parquet, _ = data_files(root + "/stuck_findings")
    assert sorted(r["n"] for r in live.read.parquet(*parquet).collect()) == [1, 2]
    with pytest.raises(FileExistsError):
        write_dataset(df, root, "stuck_findings", "20260101T000000Z")
    local = write_dataset(df, str(tmp_path / "data"), "stuck_findings", "20260101T000001Z")
    assert local == str(folder / "run=20260101T000001Z")


# -- the library: from --py-files, else from the checkout ----------------------------------------

def test_small_text_files_through_hadoop(spark, tmp_path):
    from jobs_common import is_file, path_exists, path_join, read_text, write_text

    for base in (str(tmp_path), tmp_path.as_uri()):
        target = path_join(base, "out dir", "summary.json")
        assert not path_exists(target)
        write_text(target, '{"a": "é"}')
        write_text(target, '{"a": "ü"}')  # replaced, not appended
        assert path_exists(target) and is_file(target)
        assert read_text(target) == '{"a": "ü"}'
        assert sorted(p.name for p in (tmp_path / "out dir").iterdir()) == ["summary.json"]
        (tmp_path / "out dir" / "summary.json").unlink()
    assert path_join("s3a://bucket/root", "a", "b") == "s3a://bucket/root/a/b"

"""What every Spark job shares: the session, reading datasets, writing JSON Lines and Parquet.

Jobs run on local[*] by default and on any cluster by changing the master (spark-submit's
--master, or the Airflow Spark connection). SPARK_LOCAL_IP=127.0.0.1 and spark.ui.enabled=false
keep a local session on loopback.
"""

from __future__ import annotations

import datetime as dt
import glob
import os
import shutil
import sys
import uuid
from pathlib import Path

# the domain library ships with the job (include/ beside spark_jobs/, or --py-files)
_INCLUDE = Path(__file__).resolve().parents[1] / "include"
if _INCLUDE.is_dir() and str(_INCLUDE) not in sys.path:
    sys.path.insert(0, str(_INCLUDE))

from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

ISO_Z = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"

SNAPSHOT_SCHEMA = T.StructType([
    T.StructField("cluster", T.StringType()), T.StructField("group", T.StringType()),
    T.StructField("topic", T.StringType()), T.StructField("partition", T.IntegerType()),
    T.StructField("observed_at", T.TimestampType()), T.StructField("committed_offset", T.LongType()),
    T.StructField("log_start_offset", T.LongType()), T.StructField("log_end_offset", T.LongType()),
    T.StructField("group_state", T.StringType()), T.StructField("assigned", T.BooleanType()),
    T.StructField("member_client_id", T.StringType()), T.StructField("member_host", T.StringType()),
])


def session(app: str, master: str | None = None) -> SparkSession:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (pandas UDFs) run the driver's interpreter, whatever python3 PATH finds first
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = (SparkSession.builder.appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", os.environ.get("FLEET_SPARK_SHUFFLE_PARTITIONS", "8"))
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.execution.arrow.pyspark.enabled", "true"))
    from pyspark import SparkConf

    if master:
        b = b.master(master)
    elif not SparkConf().contains("spark.master"):  # spark-submit sets it; plain python does not
        b = b.master(os.environ.get("FLEET_SPARK_MASTER", "local[*]"))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    return spark


def data_files(path: str, since: dt.date | None = None) -> tuple[list[str], list[str]]:
    """(parquet files, JSON Lines files) under a file or folder, recursively, skipping names that
    start with _ or . (temporary files of atomic writes, hidden files, _state folders), and, with
    `since`, date=YYYY-MM-DD folders older than it."""
    p = Path(path)
    if not p.exists():
        raise SystemExit(f"input {path!r} does not exist")
    if p.is_file():
        files = [p]
    else:
        files = []
        for root, dirs, names in os.walk(p):
            dirs[:] = sorted(d for d in dirs if not d.startswith(("_", ".")) and not _too_old(d, since))
            files.extend(Path(root) / n for n in sorted(names) if not n.startswith(("_", ".")))
    parquet = [str(f) for f in files if f.suffix == ".parquet"]
    jsonl = [str(f) for f in files if f.suffix in (".jsonl", ".json")]
    return parquet, jsonl


def _too_old(folder: str, since: dt.date | None) -> bool:
    if since is None or not folder.startswith("date="):
        return False
    try:
        return dt.date.fromisoformat(folder[5:]) < since
    except ValueError:
        return False


def read_rows(spark: SparkSession, path: str, schema: T.StructType, ts_fields: tuple[str, ...],
              since: dt.date | None = None) -> DataFrame:
    """Parquet and JSON Lines rows of one schema; JSON timestamps are ISO-8601 strings ending in Z."""
    parquet, jsonl = data_files(path, since)
    if not parquet and not jsonl:
        raise SystemExit(f"input {path!r} holds no .parquet or .jsonl files")
    frames = []
    if parquet:
        frames.append(spark.read.schema(schema).parquet(*parquet))
    if jsonl:
        str_schema = T.StructType([T.StructField(f.name, T.StringType() if f.name in ts_fields else f.dataType)
                                   for f in schema.fields])
        df = spark.read.schema(str_schema).option("mode", "FAILFAST").json(jsonl)
        for name in ts_fields:
            df = df.withColumn(name, F.to_timestamp(F.col(name)))
        frames.append(df)
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def write_jsonl(df: DataFrame, out_file: str) -> int:
    """Write a DataFrame as one JSON Lines file (nulls kept as null)."""
    out = Path(out_file)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f"_tmp-{uuid.uuid4().hex}"
    df.coalesce(1).write.mode("overwrite").option("ignoreNullFields", "false").json(str(tmp))
    parts = glob.glob(str(tmp / "part-*"))
    with open(out.with_suffix(out.suffix + ".tmp"), "wb") as dst:
        for part in sorted(parts):
            with open(part, "rb") as src:
                shutil.copyfileobj(src, dst)
    os.replace(out.with_suffix(out.suffix + ".tmp"), out)
    shutil.rmtree(tmp, ignore_errors=True)
    with open(out, "rb") as f:
        return sum(1 for _ in f)


def write_dataset(df: DataFrame, data_root: str, dataset: str, run_stamp: str) -> str:
    """Append a job's rows as Parquet to <root>/<dataset>/date=<day>/run=<stamp>/ (written to a
    _tmp folder, then renamed: readers never see a half-written run)."""
    day = dt.datetime.now(dt.timezone.utc).date().isoformat()
    final = Path(data_root) / dataset / f"date={day}" / f"run={run_stamp}"
    tmp = final.parent / f"_tmp-run={run_stamp}"
    df.write.mode("overwrite").parquet(str(tmp))
    final.parent.mkdir(parents=True, exist_ok=True)
    os.replace(tmp, final)
    return str(final)


def iso(col) -> "F.Column":
    return F.date_format(col, ISO_Z)


def parse_ts(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    except ValueError:
        raise SystemExit(f"--as-of {text!r} is not an ISO-8601 time like 2026-01-01T00:00:00Z") from None

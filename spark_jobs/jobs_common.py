"""What every Spark job shares: the session, the dataset schemas, reading datasets, writing JSON
Lines and Parquet.

Jobs run on local[*] by default and on any cluster by changing the master (spark-submit's
--master, or the Airflow Spark connection). A session the job starts itself (plain python, a
local master) keeps its driver on loopback; under spark-submit the driver listens where the
submitting side says (spark.driver.host / SPARK_LOCAL_IP, set by the operator from the Spark
connection: loopback for a local master, the worker's own address for a cluster's executors to
reach in client mode).

Inputs and outputs are any path Spark reads and writes (a local path, file:///..., hdfs://...,
s3a://...): listing, renames and deletes go through the Hadoop FileSystem of the path, never
through the local file system directly. A path without a scheme is a local path when the default
file system is the local one (as before), else a path of the default file system (as Spark
reads it).
"""

from __future__ import annotations

import datetime as dt
import os
import re
import sys
import uuid
from pathlib import Path, PurePosixPath

# the domain library ships with the job as --py-files (the zip the Airflow operator builds), or is
# installed where the job runs (the in-process engine, fleetctl)
import pyarrow as pa  # noqa: E402
from py4j.java_gateway import is_instance_of  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from fleetkit.core.datasets import SCHEMAS, date_folder_before  # noqa: E402

ISO_Z = "yyyy-MM-dd'T'HH:mm:ss.SSSSSS'Z'"


# -- schemas: declared once, as pyarrow schemas in fleetkit.core.datasets ---------------------------

_SIMPLE_TYPES = (
    (pa.types.is_boolean, T.BooleanType), (pa.types.is_int8, T.ByteType), (pa.types.is_int16, T.ShortType),
    (pa.types.is_int32, T.IntegerType), (pa.types.is_int64, T.LongType), (pa.types.is_float32, T.FloatType),
    (pa.types.is_float64, T.DoubleType), (pa.types.is_string, T.StringType),
    (pa.types.is_large_string, T.StringType), (pa.types.is_binary, T.BinaryType),
    (pa.types.is_large_binary, T.BinaryType), (pa.types.is_date32, T.DateType),
)


def spark_type(t: pa.DataType) -> T.DataType:
    """The Spark SQL type of a pyarrow type (the types the toolkit's datasets use, and their kin)."""
    for is_type, spark in _SIMPLE_TYPES:
        if is_type(t):
            return spark()
    if pa.types.is_timestamp(t):
        return T.TimestampType() if t.tz is not None else T.TimestampNTZType()
    if pa.types.is_decimal(t):
        return T.DecimalType(t.precision, t.scale)
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return T.ArrayType(spark_type(t.value_type), containsNull=t.value_field.nullable)
    if pa.types.is_struct(t):
        return T.StructType([T.StructField(f.name, spark_type(f.type), f.nullable)
                             for f in (t.field(i) for i in range(t.num_fields))])
    if pa.types.is_map(t):
        return T.MapType(spark_type(t.key_type), spark_type(t.item_type), valueContainsNull=t.item_field.nullable)
    raise TypeError(f"no Spark type for the pyarrow type {t}")


def spark_schema(dataset: str | pa.Schema) -> T.StructType:
    """The Spark schema of a dataset of fleetkit.core.datasets.SCHEMAS (by name), or of any pyarrow
    schema: same columns, same order, same nullability."""
    schema = SCHEMAS[dataset] if isinstance(dataset, str) else dataset
    return T.StructType([T.StructField(f.name, spark_type(f.type), f.nullable) for f in schema])


SNAPSHOT_SCHEMA = spark_schema("offsets_snapshots")


def session(app: str, master: str | None = None) -> SparkSession:
    submitted = "PYSPARK_GATEWAY_PORT" in os.environ  # spark-submit started the JVM with its --master
    if not submitted:
        master = master or os.environ.get("FLEET_SPARK_MASTER", "local[*]")
    on_loopback = bool(master) and master.startswith("local")
    if on_loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers (pandas UDFs) run the driver's interpreter, whatever python3 PATH finds first
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    b = (SparkSession.builder.appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")  # progress bars garble task logs
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.shuffle.partitions", os.environ.get("FLEET_SPARK_SHUFFLE_PARTITIONS", "8"))
         # percentile and collect_list keep per-key buffers; past 128 keys per task Spark would fall
         # back to sorting the rows (the stuck job's per-partition medians over 100,000s of partitions)
         .config("spark.sql.objectHashAggregate.sortBased.fallbackThreshold", "100000")
         # the jobs run on a few cores of one machine (local, or the lab's standalone cluster):
         # compressing shuffle blocks costs more CPU than the disk writes it saves (the stuck job
         # on 10M rows: 75 s compressed, 65 s not); FLEET_SPARK_SHUFFLE_COMPRESS=true where
         # shuffles cross a network
         .config("spark.shuffle.compress", os.environ.get("FLEET_SPARK_SHUFFLE_COMPRESS", "false"))
         .config("spark.sql.execution.arrow.pyspark.enabled", "true")
         # rows cross to Python (mapInArrow, Arrow UDFs) in batches of 50,000 instead of 10,000:
         # fewer batches to write and read (the stuck job on 10M rows: about 2 s less)
         .config("spark.sql.execution.arrow.maxRecordsPerBatch", "50000"))
    if on_loopback:
        # a local session's driver: nothing outside this process reaches it
        b = b.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    # Under spark-submit (which starts the JVM and hands its gateway over in PYSPARK_GATEWAY_PORT)
    # the submitted --master and driver address stand, unless a master is given here; a SparkConf()
    # made here could not tell, as it reads no defaults before a SparkContext exists.
    if master:
        b = b.master(master)
    jars = os.environ.get("FLEET_SPARK_JARS")
    if jars and not submitted:  # (spark-submit got them as --jars)
        b = b.config("spark.jars", jars)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    object_store_conf(spark)
    return spark


#: Hadoop's s3a settings of an object store data root: s3:// URIs (the toolkit's) through s3a
S3A_IMPL = {"fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem",
            "fs.AbstractFileSystem.s3.impl": "org.apache.hadoop.fs.s3a.S3A"}


def object_store_conf(spark: SparkSession, environ: dict | None = None) -> None:
    """Point Hadoop's s3a connector at the data root's object store from the job's environment (the
    AWS SDKs' variables the worker gives a job: fleet_airflow.settings.data_root_store_env), set in
    the running session's Hadoop configuration: the keys are never on spark-submit's command line,
    and the executors get them with each job's configuration. Nothing without AWS_ACCESS_KEY_ID or
    AWS_ENDPOINT_URL (the SDK's own chain then: an instance's role)."""
    env = os.environ if environ is None else environ
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    for k, v in S3A_IMPL.items():
        conf.set(k, v)
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        conf.set("fs.s3a.access.key", env["AWS_ACCESS_KEY_ID"])
        conf.set("fs.s3a.secret.key", env["AWS_SECRET_ACCESS_KEY"])
    if env.get("AWS_REGION"):
        conf.set("fs.s3a.endpoint.region", env["AWS_REGION"])
    endpoint = env.get("AWS_ENDPOINT_URL")
    if endpoint:
        # an S3-compatible server: its own address, path-style buckets, objects deleted one by one
        # (its batch delete may refuse the checksum the SDK sends)
        conf.set("fs.s3a.endpoint", endpoint)
        conf.set("fs.s3a.path.style.access", "true")
        conf.set("fs.s3a.connection.ssl.enabled", "true" if endpoint.startswith("https:") else "false")
        conf.set("fs.s3a.multiobjectdelete.enable", "false")


def mark_done(out: str, spark: SparkSession | None = None) -> None:
    """A run folder on an object store gets its _SUCCESS marker last: readers take only marked runs
    there (fleetkit.core.datasets.DataRoot). A local folder gets none (its files are renamed in place)."""
    if _SCHEME.match(out) and not out.startswith("file:"):
        write_text(path_join(out, "_SUCCESS"), "", spark)


# -- files: through the Hadoop FileSystem of each path -------------------------------------------

_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:/")


def _active(spark: SparkSession | None) -> SparkSession:
    spark = spark or SparkSession.getActiveSession() or SparkSession._instantiatedSession
    if spark is None:
        raise RuntimeError("no Spark session: create one with jobs_common.session() first")
    return spark


class _Location:
    """A path as the caller wrote it (`text`) and as Hadoop sees it (`path`, on `fs`).

    Names of children are joined to `text` the way the caller writes paths (pathlib for local
    paths, "/" for URIs), so local paths come back exactly as before."""

    def __init__(self, spark: SparkSession, text: str, _fs=None, _path=None):
        self.spark, self.text = spark, text
        if _fs is not None:
            self.fs, self.path = _fs, _path
            return
        jvm = spark._jvm
        conf = spark._jsc.hadoopConfiguration()
        HPath = jvm.org.apache.hadoop.fs.Path
        if _SCHEME.match(text):
            path = HPath(text)
        elif (jvm.org.apache.hadoop.fs.FileSystem.getDefaultUri(conf).getScheme() or "file") == "file":
            path = HPath("file:" + os.path.abspath(text))  # relative to this process's folder, as before
        else:
            path = HPath(text)
        fs = path.getFileSystem(conf)
        if fs.getUri().getScheme() == "file":  # the raw local file system: no .crc files beside the outputs
            while is_instance_of(spark.sparkContext._gateway, fs, "org.apache.hadoop.fs.FilterFileSystem"):
                fs = fs.getRawFileSystem()
        self.fs, self.path = fs, fs.makeQualified(path)

    @property
    def local(self) -> bool:
        return not _SCHEME.match(self.text)

    @property
    def uri(self) -> str:
        """The qualified path, for Spark's readers and writers."""
        return self.path.toString()

    def child(self, *names: str) -> "_Location":
        text = str(Path(self.text).joinpath(*names)) if self.local else "/".join([self.text.rstrip("/"), *names])
        HPath = self.spark._jvm.org.apache.hadoop.fs.Path
        path = self.path
        for name in names:
            path = HPath(path, HPath(None, None, name))  # a name with ':' is not a scheme
        return _Location(self.spark, text, self.fs, path)

    @property
    def parent(self) -> "_Location":
        if self.local:
            text = str(Path(self.text).parent)
        else:
            head, _, _ = self.text.rstrip("/").rpartition("/")
            text = head or self.text
        return _Location(self.spark, text, self.fs, self.path.getParent())

    @property
    def name(self) -> str:
        return self.path.getName()

    def exists(self) -> bool:
        return bool(self.fs.exists(self.path))

    def is_file(self) -> bool:
        return bool(self.fs.getFileStatus(self.path).isFile())

    def listing(self) -> tuple[list[str], list[str]]:
        """(sub-folder names, file names), each sorted."""
        dirs, files = [], []
        for status in self.fs.listStatus(self.path):
            (dirs if status.isDirectory() else files).append(status.getPath().getName())
        return sorted(dirs), sorted(files)

    def mkdirs(self) -> None:
        self.fs.mkdirs(self.path)

    def delete(self, recursive: bool = True) -> None:
        self.fs.delete(self.path, recursive)

    def rename_to(self, dest: "_Location", replace: bool = False) -> None:
        """Rename within one file system (atomic where the file system renames atomically); with
        `replace` an existing file at `dest` is replaced (rename-over where the file system allows
        it, else delete then rename)."""
        if self.fs.rename(self.path, dest.path):
            return
        if replace and dest.exists() and dest.is_file():
            dest.delete(recursive=False)
            if self.fs.rename(self.path, dest.path):
                return
        raise OSError(f"could not rename {self.uri} to {dest.uri}")


def path_join(base: str, *names: str) -> str:
    """`base` joined with `names` as the caller writes paths: pathlib for local paths, "/" for URIs
    (pathlib would turn s3a://bucket into s3a:/bucket)."""
    if _SCHEME.match(base):
        return "/".join([base.rstrip("/"), *names])
    return str(Path(base).joinpath(*names))


def path_exists(path: str, spark: SparkSession | None = None) -> bool:
    return _Location(_active(spark), path).exists()


def is_file(path: str, spark: SparkSession | None = None) -> bool:
    loc = _Location(_active(spark), path)
    return loc.exists() and loc.is_file()


def read_text(path: str, spark: SparkSession | None = None) -> str:
    """A small text file (a summary, a plan) from any path Spark reads."""
    loc = _Location(_active(spark), path)
    stream = loc.fs.open(loc.path)
    try:
        jvm = loc.spark._jvm
        out = jvm.java.io.ByteArrayOutputStream()
        jvm.org.apache.hadoop.io.IOUtils.copyBytes(stream, out, 65536, False)
        return bytes(out.toByteArray()).decode("utf-8")
    finally:
        stream.close()


def write_text(path: str, text: str, spark: SparkSession | None = None) -> None:
    """A small text file at any path Spark writes, atomically: written beside it under a _tmp- name,
    then renamed over it."""
    loc = _Location(_active(spark), path)
    folder = loc.parent
    folder.mkdirs()
    staged = folder.child(f"_tmp-{uuid.uuid4().hex}-{loc.name}")
    try:
        stream = loc.fs.create(staged.path, True)
        try:
            stream.write(bytearray(text.encode("utf-8")))
        finally:
            stream.close()
        staged.rename_to(loc, replace=True)
    finally:
        if staged.exists():
            staged.delete()


def data_files(path: str, since: dt.date | None = None,
               spark: SparkSession | None = None) -> tuple[list[str], list[str]]:
    """(parquet files, JSON Lines files) under a file or folder (any path Spark reads), recursively,
    skipping names that start with _ or . (temporary files of atomic writes, hidden files, _state
    folders), and, with `since`, date=YYYY-MM-DD folders older than it. Listed with the Hadoop
    FileSystem of the path (the active Spark session's, unless `spark` is given)."""
    root = _Location(_active(spark), path)
    if not root.exists():
        raise SystemExit(f"input {path!r} does not exist")
    if root.is_file():
        files = [root.text if not root.local else str(Path(root.text))]
    else:
        files = []
        folders = [root]
        while folders:  # the order of os.walk: a folder's files, then its sub-folders, depth first
            folder = folders.pop()
            dirs, names = folder.listing()
            files.extend(folder.child(n).text for n in names if not n.startswith(("_", ".")))
            folders.extend(reversed([folder.child(d) for d in dirs
                                     if not d.startswith(("_", ".")) and not date_folder_before(d, since)]))
    parquet = [f for f in files if PurePosixPath(f).suffix == ".parquet"]
    jsonl = [f for f in files if PurePosixPath(f).suffix in (".jsonl", ".json")]
    return parquet, jsonl


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
    """Write a DataFrame as one JSON Lines file (nulls kept as null) at any path Spark writes; returns
    its number of lines. Spark writes into a _tmp- folder beside the file; its part file is renamed
    into place (parts concatenated in their order first when there are several: the rows keep the
    DataFrame's order, and the work before the write keeps all its tasks), so readers never see half
    a file."""
    spark = df.sparkSession
    out = _Location(spark, out_file)
    folder = out.parent
    folder.mkdirs()
    token = uuid.uuid4().hex
    tmp = folder.child(f"_tmp-{token}")
    staged = folder.child(f"_tmp-{token}-{out.name}")
    try:
        df.write.mode("overwrite").option("ignoreNullFields", "false").json(tmp.uri)
        parts = [tmp.child(n) for n in sorted(tmp.listing()[1]) if n.startswith("part-")]
        if len(parts) == 1:
            parts[0].rename_to(staged)
        else:
            _concat(parts, staged)
        staged.rename_to(out, replace=True)
    finally:
        for leftover in (tmp, staged):
            if leftover.exists():
                leftover.delete()
    return spark.read.text(out.uri).count()


def _concat(parts: list[_Location], dest: _Location) -> None:
    jvm = dest.spark._jvm
    conf = dest.spark._jsc.hadoopConfiguration()
    stream = dest.fs.create(dest.path, True)
    try:
        for part in parts:
            src = part.fs.open(part.path)
            try:
                jvm.org.apache.hadoop.io.IOUtils.copyBytes(src, stream, conf, False)
            finally:
                src.close()
    finally:
        stream.close()


def write_dataset(df: DataFrame, data_root: str, dataset: str, run_stamp: str) -> str:
    """Append a job's rows as Parquet to <root>/<dataset>/date=<day>/run=<stamp>/ (written to a
    _tmp folder, then renamed with the Hadoop FileSystem API: readers never see a half-written run)."""
    day = dt.datetime.now(dt.timezone.utc).date().isoformat()
    folder = _Location(df.sparkSession, data_root).child(dataset, f"date={day}")
    final = folder.child(f"run={run_stamp}")
    tmp = folder.child(f"_tmp-run={run_stamp}")
    if final.exists():
        raise FileExistsError(f"{final.text} already exists")
    df.write.mode("overwrite").parquet(tmp.uri)
    folder.mkdirs()
    tmp.rename_to(final)
    return final.text


def conform(df: DataFrame, schema: pa.Schema) -> DataFrame:
    """`df` with exactly the columns of a declared output (fleetkit.core.datasets), in its order and
    types: what a job writes is what core/datasets.py says."""
    return df.select(*[F.col(f"`{f.name}`").cast(spark_type(f.type)).alias(f.name) for f in schema])


def arrow_task(fn):
    """A mapInArrow function running `fn` (an Arrow table -> an Arrow table or None) once on all of
    a task's rows: the library's stages run in Spark's tasks as they run in process."""
    def run(batches):
        import pyarrow as pa

        batches = list(batches)
        if not batches:
            return
        out = fn(pa.Table.from_batches(batches))
        if out is not None and out.num_rows:
            yield from out.to_batches()
    return run


def arrow_merging_task(fn, compact_rows: int = 1_000_000):
    """A mapInArrow function running `fn`, a partial aggregation whose outputs merge by running it
    again (fn(concat(fn(a), fn(b))) == fn(concat(a, b))), batch by batch: a task holds the partial
    results, not its rows, and merges them whenever they outgrow twice the last merge (or
    `compact_rows`)."""
    def run(batches):
        import pyarrow as pa

        parts, rows, limit = [], 0, compact_rows
        for batch in batches:
            part = fn(pa.Table.from_batches([batch]))
            parts.append(part)
            rows += part.num_rows
            if rows > limit:
                parts = [fn(pa.concat_tables(parts))]
                rows = parts[0].num_rows
                limit = max(compact_rows, 2 * rows)
        if parts:
            out = fn(pa.concat_tables(parts)) if len(parts) > 1 else parts[0]
            if out.num_rows:
                yield from out.to_batches()
    return run


def iso(col) -> "F.Column":
    return F.date_format(col, ISO_Z)


def parse_ts(text: str) -> dt.datetime:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(dt.timezone.utc)
    except ValueError:
        raise SystemExit(f"--as-of {text!r} is not an ISO-8601 time like 2026-01-01T00:00:00Z") from None

"""__consumer_offsets health per (cluster, broker, partition).

    PATH=.venv/bin:$PATH spark-submit spark_jobs/offsets_health.py --data-root ROOT --fleet FILE --out DIR
        [--bloat-ratio 10] [--min-bloat-bytes 67108864] [--trim-plan [--partitions 3,7 | all-unhealthy]]

Reads the datasets offsets_topic_records, segment_inventory and cleaner_checkpoints under ROOT
(and the cleaner settings the brokers reported to the collection through DescribeConfigs, on
brokers from 0.11: ROOT/_state/cluster=NAME/cleaner_settings.json; they override the fleet
file's `cleaner` section per broker) and writes DIR/health.jsonl: records, live keys, tombstones, bytes, duplicate ratio, largest
segment's message count against the cleaner's capacity, checkpoint progress, and a verdict
(HEALTHY, BLOATED, CLEANER_STALLED, OVER_CAPACITY) with the cleaner setting that would fix it.
The verdict rules live in fleetkit.trim.rules. With --trim-plan the same Spark application then
writes DIR/trim_plan.json (spark_jobs/trim_plan.py's plans from that health), saving a second Spark
start. A data root of up to FLEET_OFFSETS_INPROCESS_MAX_ROWS records (1,000,000 by default) on a
local path is judged without starting Spark, by fleetkit.trim.inprocess: the same rules and files
(`--engine`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs_common import mark_done, session, write_jsonl  # noqa: E402

from pyspark.sql import DataFrame, Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from fleetkit.core import inprocess as core_inprocess  # noqa: E402
from fleetkit.trim import inprocess  # noqa: E402
from fleetkit.trim import rules as trim_rules  # noqa: E402
from fleetkit.core.fleet import load_fleet  # noqa: E402

PKEYS = ["cluster", "partition"]


def read_dataset(spark, root: str, name: str, clusters: list[str] | None = None) -> DataFrame:
    """The dataset's files under ROOT; with `clusters`, only theirs (the `cluster=<name>` folders
    of the clusters the fleet file lists: a cluster taken out of the fleet leaves its data behind,
    with no settings to judge it by). Names the clusters whose data it leaves out."""
    from jobs_common import data_files, path_join

    from fleetkit.core.datasets import files_of_clusters

    parquet = files_of_clusters(data_files(path_join(root, name))[0], root, name, clusters)
    return spark.read.parquet(*parquet)


def current_records(spark, root: str, clusters: list[str] | None = None) -> DataFrame:
    """offsets_topic_records (read_dataset) without the rows of a log the collection found replaced
    under it (fleetkit.collection.log_marks: a cluster re-created under the same name, a truncated
    log): per partition, only the rows collected since."""
    from jobs_common import data_files, path_join

    from fleetkit.collection import log_marks
    from fleetkit.core.datasets import DataRoot, cluster_of_path

    records = read_dataset(spark, root, "offsets_topic_records", clusters)
    names = clusters if clusters is not None else sorted(
        {c for f in data_files(path_join(root, "offsets_topic_records"))[0] for c in [cluster_of_path(f)] if c})
    data = DataRoot(root)
    since = log_marks.superseded_since(data, names)
    if not since:
        return records
    marks = spark.createDataFrame(since, "cluster string, partition int, _since timestamp")
    return (records.join(F.broadcast(marks), ["cluster", "partition"], "left")
            .filter(F.col("_since").isNull() | (F.col("observed_at") >= F.col("_since"))).drop("_since"))


def key_columns() -> list:
    """The compaction key of each record, as columns: offset commits by (group, topic, partition),
    group metadata (key version 2) by group alone."""
    gm = F.col("key_version") == 2
    return [gm.alias("_gm"), F.col("group").alias("_g"), F.when(~gm, F.col("topic")).alias("_t"),
            F.when(~gm, F.col("topic_partition")).alias("_tp")]


def newest_per_key(records: DataFrame, cols: list[str]) -> DataFrame:
    """Each key's newest record: cluster, partition, group, topic, topic_partition (null for group
    metadata), `offset` and the columns `cols` of that record. A hash aggregation (max_by per column
    over the offset), no sort and no key string built; `cols` must be fixed-width (numbers, booleans):
    a struct or string in the aggregation buffer would make Spark sort all the records instead.
    Records read twice (a collector restart) are identical, so duplicates do not change the answer."""
    keyed = records.select("cluster", "partition", *key_columns(), "offset", *cols)
    return (keyed.groupBy("cluster", "partition", "_gm", "_g", "_t", "_tp")
            .agg(F.max("offset").alias("offset"), *[F.max_by(c, "offset").alias(c) for c in cols])
            .select("cluster", "partition", F.col("_g").alias("group"), F.col("_t").alias("topic"),
                    F.col("_tp").alias("topic_partition"), "offset", *cols))


def record_facts(records: DataFrame, summary: DataFrame) -> DataFrame:
    """Per (cluster, partition): records, tombstones, record bytes, highest offset (distinct offsets,
    from `partition_summary`) and the live keys with their bytes (newest record per key not a tombstone)."""
    totals = summary.groupBy(*PKEYS).agg(
        F.sum("n").alias("records"), F.sum("tombstones").alias("tombstones"),
        F.sum("bytes").alias("record_bytes"), F.max("max_offset").alias("max_offset"))
    live = (newest_per_key(records, ["tombstone", "size_bytes"]).filter(~F.col("tombstone"))
            .groupBy(*PKEYS).agg(F.count(F.lit(1)).alias("live_keys"), F.sum("size_bytes").alias("live_bytes")))
    return (totals.join(live, PKEYS, "left")
            .fillna({"live_keys": 0, "live_bytes": 0})
            .withColumn("duplicate_ratio", F.when(F.col("records") > 0,
                                                   1 - F.col("live_keys") / F.col("records")).otherwise(F.lit(0.0))))


def latest_inventory(segments: DataFrame) -> DataFrame:
    last = segments.groupBy("cluster", "broker").agg(F.max("observed_at").alias("_last"))
    return (segments.join(last, ["cluster", "broker"])
            .filter(F.col("observed_at") == F.col("_last")).drop("_last"))


_SUMMARY_SCHEMA = "_pid int, bucket long, n long, tombstones long, bytes long, max_offset long"


def _summarizer(bases: dict[int, list[int]]):
    """mapInArrow function over one task's (pid, offset, tombstone, size_bytes) rows, every copy of
    a record in the same task (the rows are hash-partitioned by pid and offset): drops the copies
    (a record read twice counts once), buckets each offset by the greatest segment base offset <= it
    among `bases[pid]` (bucket null: below every base) with a binary search, and yields per (pid,
    bucket): records, tombstones, bytes, highest offset. Numpy on whole columns; no row in Python."""
    def summarize(batches):
        import numpy as np
        import pyarrow as pa

        cols: list[list] = [[], [], [], []]
        for batch in batches:
            for i in range(4):
                cols[i].append(batch.column(i).to_numpy(zero_copy_only=False))
        if not cols[0] or not sum(len(c) for c in cols[0]):
            return
        pids, offsets, tombs, sizes = (np.concatenate(c) for c in cols)
        order = np.lexsort((offsets, pids))  # by partition, then offset: one sort for all of them
        pids, offsets, tombs, sizes = pids[order], offsets[order], tombs[order], sizes[order]
        starts = np.concatenate(([0], np.flatnonzero(pids[1:] != pids[:-1]) + 1, [len(pids)]))
        for lo, hi in zip(starts[:-1], starts[1:]):
            pid = pids[lo]
            off = offsets[lo:hi]
            first = np.ones(len(off), dtype=bool)
            first[1:] = off[1:] != off[:-1]
            off = off[first]
            tomb = tombs[lo:hi][first].astype(np.int64)
            size = sizes[lo:hi][first].astype(np.int64)
            b = np.asarray(bases[int(pid)], dtype=np.int64)
            idx = np.searchsorted(b, off, side="right")  # 0: below every base, k: bucket b[k-1]
            k = len(b) + 1
            n = np.bincount(idx, minlength=k)
            nt = np.bincount(idx, weights=tomb, minlength=k)
            nb = np.bincount(idx, weights=size, minlength=k)
            # offsets are sorted: a bucket's highest offset is its last one
            last = np.searchsorted(idx, np.arange(k), side="right") - 1
            used = np.nonzero(n)[0]
            yield pa.RecordBatch.from_arrays([
                pa.array(np.full(len(used), pid, dtype=np.int32)),
                pa.array([None if u == 0 else int(b[u - 1]) for u in used], type=pa.int64()),
                pa.array(n[used].astype(np.int64)), pa.array(np.rint(nt[used]).astype(np.int64)),
                pa.array(np.rint(nb[used]).astype(np.int64)), pa.array(off[last[used]])],
                names=["_pid", "bucket", "n", "tombstones", "bytes", "max_offset"])
    return summarize


def partition_summary(records: DataFrame, segments: DataFrame) -> DataFrame:
    """Per (cluster, partition, bucket) of the partitions in `segments`: distinct records,
    tombstones, bytes and the highest offset, bucket being the segment base offset (the union of
    all brokers' bases) a record falls in, null below every base. One shuffle of four fixed-width
    columns and numpy per task (`_summarizer`): no aggregation keyed by offset, no sort in Spark."""
    spark = records.sparkSession
    triples = sorted({(r["cluster"], r["partition"], r["base_offset"])
                      for r in segments.select(*PKEYS, "base_offset").distinct().collect()})
    ids: dict[tuple, int] = {}
    bases: dict[int, list[int]] = {}
    for c, p, base in triples:
        bases.setdefault(ids.setdefault((c, p), len(ids)), []).append(base)
    pid_frame = spark.createDataFrame([(c, p, i) for (c, p), i in ids.items()],
                                      "cluster string, partition int, _pid int")
    # tasks hold their rows in memory: enough of them that each holds a few million
    tasks = max(int(spark.conf.get("spark.sql.shuffle.partitions")), 4 * records.rdd.getNumPartitions())
    rows = (records.join(F.broadcast(pid_frame), PKEYS)
            .select("_pid", "offset", F.coalesce(F.col("tombstone"), F.lit(False)).alias("tombstone"),
                    F.coalesce(F.col("size_bytes"), F.lit(0)).alias("size_bytes"))
            .repartition(tasks, "_pid", "offset"))
    return (rows.mapInArrow(_summarizer(bases), _SUMMARY_SCHEMA)
            .join(F.broadcast(pid_frame), "_pid").drop("_pid"))


def segment_messages(summary: DataFrame, segments: DataFrame) -> DataFrame:
    """Messages per segment of each broker: `partition_summary`'s buckets summed over each broker's
    segment range (a segment no bucket falls in, e.g. an empty active segment: 0)."""
    fine = summary.filter(F.col("bucket").isNotNull()).select(
        F.col("cluster").alias("_c"), F.col("partition").alias("_p"), "bucket", "n")
    sw = Window.partitionBy("cluster", "broker", "partition").orderBy("base_offset")
    segs = segments.withColumn("next_base", F.lead("base_offset").over(sw))
    inside = ((F.col("_c") == F.col("cluster")) & (F.col("_p") == F.col("partition"))
              & (F.col("bucket") >= F.col("base_offset"))
              & (F.col("next_base").isNull() | (F.col("bucket") < F.col("next_base"))))
    return (segs.join(fine, inside, "left")
            .groupBy("cluster", "broker", "log_dir", "partition", "base_offset", "next_base", "size_bytes",
                     "is_active")
            .agg(F.coalesce(F.sum("n"), F.lit(0)).alias("messages")))


def checkpoint_facts(segments: DataFrame, checkpoints: DataFrame) -> DataFrame:
    """Checkpoint and dirty bytes (segments at or above the checkpoint) at the first and last
    observation of each (cluster, broker, partition)."""
    keys = ["cluster", "broker", "partition", "observed_at"]
    obs = (segments.join(checkpoints.select(*keys, "checkpoint_offset"), keys, "left")
           .groupBy(*keys).agg(
               F.first("checkpoint_offset", ignorenulls=True).alias("checkpoint"),
               F.sum(F.when(F.col("checkpoint_offset").isNull() | (F.col("base_offset") >= F.col("checkpoint_offset")),
                            F.col("size_bytes")).otherwise(0)).alias("dirty_bytes")))
    return obs.groupBy("cluster", "broker", "partition").agg(
        F.count(F.lit(1)).alias("observations"),
        F.min_by("checkpoint", "observed_at").alias("checkpoint_first"),
        F.max_by("checkpoint", "observed_at").alias("checkpoint_last"),
        F.min_by("dirty_bytes", "observed_at").alias("dirty_bytes_first"),
        F.max_by("dirty_bytes", "observed_at").alias("dirty_bytes_last"))


_VERDICT = T.StructType([T.StructField("verdict", T.StringType()), T.StructField("reason", T.StringType()),
                         T.StructField("fix", T.StringType())])


def health(records: DataFrame, segments: DataFrame, checkpoints: DataFrame, settings: DataFrame,
           bloat_ratio: float, min_bloat_bytes: int, broker_settings: DataFrame | None = None) -> tuple[DataFrame, DataFrame]:
    """(health per cluster/broker/partition, messages per segment)."""
    latest = latest_inventory(segments)
    summary = partition_summary(records, latest).cache()  # a few rows per segment
    per_segment = segment_messages(summary, latest).cache()
    disk = per_segment.groupBy("cluster", "broker", "log_dir", "partition").agg(
        F.count(F.lit(1)).alias("segments"), F.sum("size_bytes").alias("disk_bytes"),
        F.max("messages").alias("largest_segment_messages"))
    facts = (disk.join(record_facts(records, summary), PKEYS, "left")
             .join(checkpoint_facts(segments, checkpoints), ["cluster", "broker", "partition"], "left")
             .join(F.broadcast(settings), "cluster", "left")
             .fillna({"records": 0, "live_keys": 0, "tombstones": 0, "record_bytes": 0, "live_bytes": 0,
                      "observations": 0}))
    fields = list(trim_rules.HealthFacts.__dataclass_fields__)

    if broker_settings is not None:
        facts = (facts.join(F.broadcast(broker_settings), ["cluster", "broker"], "left")
                 .withColumn("dedupe_buffer_size", F.coalesce("b_dedupe_buffer_size", "dedupe_buffer_size"))
                 .withColumn("threads", F.coalesce("b_threads", "threads"))
                 .withColumn("load_factor", F.coalesce("b_load_factor", "load_factor")))
    else:
        facts = (facts.withColumn("min_cleanable_ratio", F.lit(None).cast("double"))
                 .withColumn("segment_bytes", F.lit(None).cast("long")))

    names = [*trim_rules.SETTING_FIELDS, *fields]

    @F.udf(returnType=_VERDICT)
    def judge(*values):
        return trim_rules.judge_replica(dict(zip(names, values)), bloat_ratio, min_bloat_bytes)

    cap = F.floor(F.floor(F.least(F.col("dedupe_buffer_size") / F.col("threads"), F.lit(2**31 - 1)) / 24)
                  * F.col("load_factor")).cast("long")
    out = (facts.withColumn("v", judge(*[F.col(c) for c in names]))
           .withColumn("keys_per_pass", cap)
           .select("cluster", "broker", "log_dir", "partition", "records", "live_keys", "tombstones", "record_bytes",
                   "live_bytes", "disk_bytes", "segments", "duplicate_ratio", "largest_segment_messages",
                   "keys_per_pass", "checkpoint_first", "checkpoint_last", "dirty_bytes_first", "dirty_bytes_last",
                   F.col("v.verdict").alias("verdict"), F.col("v.reason").alias("reason"),
                   F.col("v.fix").alias("fix")))
    return out, per_segment


def settings_frame(spark, fleet_file: str) -> DataFrame:
    fleet = load_fleet(fleet_file)
    rows = [(c.name, c.kafka_version, c.cleaner.dedupe_buffer_size, c.cleaner.threads, c.cleaner.io_buffer_load_factor)
            for c in fleet.clusters]
    return spark.createDataFrame(rows, "cluster string, kafka_version string, dedupe_buffer_size long, "
                                       "threads int, load_factor double")


BROKER_SETTINGS_SCHEMA = ("cluster string, broker int, b_dedupe_buffer_size long, b_threads int, b_load_factor double, "
                          "min_cleanable_ratio double, segment_bytes long")


def broker_settings_frame(spark, data_root: str, fleet_file: str) -> DataFrame:
    """Per (cluster, broker): the cleaner settings the brokers reported (DescribeConfigs, kept by
    the collection), with the topic's min.cleanable.dirty.ratio and segment.bytes."""
    from fleetkit.core.datasets import DataRoot
    from fleetkit.collection.offsets_topic import settings_path

    root = DataRoot(data_root)
    rows = []
    for c in load_fleet(fleet_file).clusters:
        doc = root.read_json(settings_path(root, c.name), default=None)
        if not doc:
            continue
        topic = doc.get("topic") or {}
        for b, v in (doc.get("brokers") or {}).items():
            rows.append((c.name, int(b), v.get("dedupe_buffer_size"), v.get("threads"), v.get("load_factor"),
                         topic.get("min_cleanable_ratio"), topic.get("segment_bytes")))
    return spark.createDataFrame(rows, BROKER_SETTINGS_SCHEMA)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", required=True)
    ap.add_argument("--fleet", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--bloat-ratio", type=float, default=trim_rules.DEFAULT_BLOAT_RATIO)
    ap.add_argument("--min-bloat-bytes", type=int, default=trim_rules.DEFAULT_MIN_BLOAT_BYTES)
    ap.add_argument("--trim-plan", action="store_true",
                    help="then write DIR/trim_plan.json in the same Spark application")
    ap.add_argument("--partitions", default="all-unhealthy",
                    help="with --trim-plan: 'all-unhealthy' or partition numbers like 3,7")
    ap.add_argument("--master")
    ap.add_argument("--engine", choices=("auto", "spark", "in-process"), default="auto",
                    help="auto (default): a data root of up to FLEET_OFFSETS_INPROCESS_MAX_ROWS __consumer_offsets "
                         "records (1,000,000) on a local path is judged in this process (fleetkit.trim.inprocess: "
                         "the same rules and files, no Spark start-up), a larger one by Spark")
    args = ap.parse_args(argv)
    parts = None
    if args.trim_plan:
        import trim_plan  # spark_jobs/trim_plan.py (it imports this module's readers)

        parts = trim_plan.parse_partitions(args.partitions)
    local_paths = all(core_inprocess.readable_here(p) for p in (args.data_root, args.out))
    if args.engine == "in-process" or (args.engine == "auto" and local_paths and inprocess.small_input(args.data_root)):
        inprocess.run(args.data_root, args.fleet, args.out, args.bloat_ratio, args.min_bloat_bytes, args.trim_plan,
                      parts)
        return 0
    t0 = time.monotonic()
    spark = session("offsets_health", args.master)
    fleet = [c.name for c in load_fleet(args.fleet).clusters]  # only the clusters the fleet file lists
    out, per_segment = health(current_records(spark, args.data_root, fleet),
                              read_dataset(spark, args.data_root, "segment_inventory", fleet),
                              read_dataset(spark, args.data_root, "cleaner_checkpoints", fleet),
                              settings_frame(spark, args.fleet), args.bloat_ratio, args.min_bloat_bytes,
                              broker_settings_frame(spark, args.data_root, args.fleet))
    out = out.cache()  # one row per replica, read by the file, its line count and the verdict counts
    from jobs_common import path_join

    n = write_jsonl(out, path_join(args.out, "health.jsonl"))
    write_jsonl(per_segment, path_join(args.out, "segments.jsonl"))
    counts = {r["verdict"]: r["n"] for r in out.groupBy("verdict").agg(F.count(F.lit(1)).alias("n")).collect()}
    print(json.dumps({"replicas": n, "verdicts": counts, "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    if args.trim_plan:
        t1 = time.monotonic()
        out.unpersist()
        summary = trim_plan.run(spark, args.data_root, args.out, args.out, parts)
        print(json.dumps({"plans": summary, "seconds": round(time.monotonic() - t1, 1)}), flush=True)
    mark_done(args.out, spark)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

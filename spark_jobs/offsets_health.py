"""__consumer_offsets health per (cluster, broker, partition).

    PATH=.venv/bin:$PATH spark-submit spark_jobs/offsets_health.py --data-root ROOT --fleet FILE --out DIR
        [--bloat-ratio 10] [--min-bloat-bytes 67108864]

Reads the datasets offsets_topic_records, segment_inventory and cleaner_checkpoints under ROOT
(and the cleaner settings the brokers reported to the collection through DescribeConfigs, on
brokers from 0.11: ROOT/_state/cluster=NAME/cleaner_settings.json; they override the fleet
file's `cleaner` section per broker) and writes DIR/health.jsonl: records, live keys, tombstones, bytes, duplicate ratio, largest
segment's message count against the cleaner's capacity, checkpoint progress, and a verdict
(HEALTHY, BLOATED, CLEANER_STALLED, OVER_CAPACITY) with the cleaner setting that would fix it.
The verdict rules live in fleetkit.trim.rules.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs_common import session, write_jsonl  # noqa: E402

from pyspark.sql import DataFrame, Window  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from fleetkit.trim import rules as offsets_health  # noqa: E402
from fleetkit.core.fleet import load_fleet  # noqa: E402

PKEYS = ["cluster", "partition"]


def read_dataset(spark, root: str, name: str) -> DataFrame:
    from jobs_common import data_files

    from jobs_common import path_join

    parquet, _ = data_files(path_join(root, name))
    if not parquet:
        raise SystemExit(f"no {name} data under {root} (run the offsets collection first)")
    return spark.read.parquet(*parquet)


def record_key(df: DataFrame) -> DataFrame:
    """The compaction key of each record: offset commits by (group, topic, partition), group
    metadata by group."""
    return df.withColumn("rkey", F.when(F.col("key_version") == 2, F.concat(F.lit("G\x00"), F.col("group")))
                         .otherwise(F.concat_ws("\x00", F.lit("O"), F.col("group"), F.col("topic"),
                                                F.col("topic_partition").cast("string"))))


def newest_per_key(records: DataFrame) -> DataFrame:
    """Each key's newest record: a hash aggregation (max_by over the offset), no sort. Records read
    twice (a collector restart) are identical, so duplicates do not change the answer."""
    recs = record_key(records)
    cols = [c for c in recs.columns if c not in ("cluster", "partition", "rkey")]
    newest = recs.groupBy("cluster", "partition", "rkey").agg(
        F.max_by(F.struct(*cols), F.col("offset")).alias("_r"))
    return newest.select("cluster", "partition", "rkey", *[F.col(f"_r.{c}").alias(c) for c in cols])


def record_facts(records: DataFrame) -> DataFrame:
    recs = records.dropDuplicates(["cluster", "partition", "offset"])
    totals = recs.groupBy(*PKEYS).agg(
        F.count(F.lit(1)).alias("records"),
        F.sum(F.col("tombstone").cast("int")).alias("tombstones"),
        F.sum("size_bytes").alias("record_bytes"),
        F.max("offset").alias("max_offset"))
    live = (newest_per_key(records).filter(~F.col("tombstone"))
            .groupBy(*PKEYS).agg(F.count(F.lit(1)).alias("live_keys"), F.sum("size_bytes").alias("live_bytes")))
    return (totals.join(live, PKEYS, "left")
            .fillna({"live_keys": 0, "live_bytes": 0})
            .withColumn("duplicate_ratio", F.when(F.col("records") > 0,
                                                   1 - F.col("live_keys") / F.col("records")).otherwise(F.lit(0.0))))


def latest_inventory(segments: DataFrame) -> DataFrame:
    last = segments.groupBy("cluster", "broker").agg(F.max("observed_at").alias("_last"))
    return (segments.join(last, ["cluster", "broker"])
            .filter(F.col("observed_at") == F.col("_last")).drop("_last"))


def segment_messages(records: DataFrame, segments: DataFrame) -> DataFrame:
    """Messages per segment of each broker: records bucketed by the union of all brokers' segment
    base offsets (one sort per partition), then summed over each broker's segment range."""
    recs = records.dropDuplicates(["cluster", "partition", "offset"]).select(*PKEYS, "offset")
    bases = segments.select(*PKEYS, F.col("base_offset").alias("offset")).distinct()
    u = (recs.withColumn("is_mark", F.lit(False))
         .unionByName(bases.withColumn("is_mark", F.lit(True))))
    w = (Window.partitionBy(*PKEYS).orderBy(F.col("offset"), F.col("is_mark").desc())
         .rowsBetween(Window.unboundedPreceding, 0))
    fine = (u.withColumn("bucket", F.last(F.when(F.col("is_mark"), F.col("offset")), ignorenulls=True).over(w))
            .filter(~F.col("is_mark") & F.col("bucket").isNotNull())
            .groupBy(*PKEYS, "bucket").agg(F.count(F.lit(1)).alias("n")))
    sw = Window.partitionBy("cluster", "broker", "partition").orderBy("base_offset")
    segs = segments.withColumn("next_base", F.lead("base_offset").over(sw))
    joined = segs.join(fine, PKEYS, "left").filter(
        F.col("bucket").isNull() | ((F.col("bucket") >= F.col("base_offset")) &
                                    (F.col("next_base").isNull() | (F.col("bucket") < F.col("next_base")))))
    return (joined.groupBy("cluster", "broker", "log_dir", "partition", "base_offset", "next_base", "size_bytes",
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
    per_segment = segment_messages(records, latest).cache()
    disk = per_segment.groupBy("cluster", "broker", "log_dir", "partition").agg(
        F.count(F.lit(1)).alias("segments"), F.sum("size_bytes").alias("disk_bytes"),
        F.max("messages").alias("largest_segment_messages"))
    facts = (disk.join(record_facts(records), PKEYS, "left")
             .join(checkpoint_facts(segments, checkpoints), ["cluster", "broker", "partition"], "left")
             .join(F.broadcast(settings), "cluster", "left")
             .fillna({"records": 0, "live_keys": 0, "tombstones": 0, "record_bytes": 0, "live_bytes": 0,
                      "observations": 0}))
    fields = list(offsets_health.HealthFacts.__dataclass_fields__)

    if broker_settings is not None:
        facts = (facts.join(F.broadcast(broker_settings), ["cluster", "broker"], "left")
                 .withColumn("dedupe_buffer_size", F.coalesce("b_dedupe_buffer_size", "dedupe_buffer_size"))
                 .withColumn("threads", F.coalesce("b_threads", "threads"))
                 .withColumn("load_factor", F.coalesce("b_load_factor", "load_factor")))
    else:
        facts = (facts.withColumn("min_cleanable_ratio", F.lit(None).cast("double"))
                 .withColumn("segment_bytes", F.lit(None).cast("long")))

    @F.udf(returnType=_VERDICT)
    def judge(version, buffer_size, threads, load_factor, min_ratio, segment_bytes, *values):
        f = offsets_health.HealthFacts(*[0 if v is None and i < 8 else v for i, v in enumerate(values)])
        v, reason, fix = offsets_health.verdict(f, version or "0.9.0.1", int(buffer_size), int(threads),
                                                float(load_factor), bloat_ratio, min_bloat_bytes,
                                                0.5 if min_ratio is None else float(min_ratio),
                                                None if segment_bytes is None else int(segment_bytes))
        return v, reason, json.dumps(fix) if fix else None

    cap = F.floor(F.floor(F.least(F.col("dedupe_buffer_size") / F.col("threads"), F.lit(2**31 - 1)) / 24)
                  * F.col("load_factor")).cast("long")
    out = (facts.withColumn("v", judge(F.col("kafka_version"), F.col("dedupe_buffer_size"), F.col("threads"),
                                       F.col("load_factor"), F.col("min_cleanable_ratio"), F.col("segment_bytes"),
                                       *[F.col(c) for c in fields]))
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
    ap.add_argument("--bloat-ratio", type=float, default=offsets_health.DEFAULT_BLOAT_RATIO)
    ap.add_argument("--min-bloat-bytes", type=int, default=offsets_health.DEFAULT_MIN_BLOAT_BYTES)
    ap.add_argument("--master")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    spark = session("offsets_health", args.master)
    out, per_segment = health(read_dataset(spark, args.data_root, "offsets_topic_records"),
                              read_dataset(spark, args.data_root, "segment_inventory"),
                              read_dataset(spark, args.data_root, "cleaner_checkpoints"),
                              settings_frame(spark, args.fleet), args.bloat_ratio, args.min_bloat_bytes,
                              broker_settings_frame(spark, args.data_root, args.fleet))
    from jobs_common import path_join

    n = write_jsonl(out, path_join(args.out, "health.jsonl"))
    write_jsonl(per_segment, path_join(args.out, "segments.jsonl"))
    counts = {r["verdict"]: r["n"] for r in out.groupBy("verdict").agg(F.count(F.lit(1)).alias("n")).collect()}
    print(json.dumps({"replicas": n, "verdicts": counts, "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""__consumer_offsets health per (cluster, broker, partition).

    PATH=.venv/bin:$PATH spark-submit spark_jobs/trim_health.py --data-root ROOT --fleet FILE --out DIR
        [--bloat-ratio 10] [--min-bloat-bytes 67108864] [--trim-plan [--partitions 3,7 | all-unhealthy]]

Reads the datasets offsets_topic_records, segment_inventory and cleaner_checkpoints under ROOT
(and the cleaner settings the brokers reported to the collection through DescribeConfigs, on
brokers from 0.11: ROOT/_state/cluster=NAME/cleaner_settings.json; they override the fleet
file's `cleaner` section per broker) and writes DIR/health.jsonl: records, live keys, tombstones, bytes, duplicate ratio, largest
segment's message count against the cleaner's capacity, checkpoint progress, and a verdict
(HEALTHY, BLOATED, CLEANER_STALLED, OVER_CAPACITY) with the cleaner setting that would fix it.
The work is the library's (fleetkit.trim.stages: the records per segment, each key's newest record,
the facts per replica and fleetkit.trim.rules' verdict): this job runs the two stages that read
every record in its tasks and the rest on the small results. With --trim-plan the same Spark application then
writes DIR/trim_plan.json (spark_jobs/trim_plan.py's plans from that health), saving a second Spark
start. A data root of up to FLEET_TRIM_INPROCESS_MAX_ROWS records (1,000,000 by default) on a
local path is judged without starting Spark, by fleetkit.trim.inprocess: the same stages, once
each (`--engine`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from jobs_common import arrow_merging_task, arrow_task, mark_done, session, spark_schema, write_jsonl  # noqa: E402

import pyarrow as pa  # noqa: E402
from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from fleetkit.core import inprocess as core_inprocess  # noqa: E402
from fleetkit.core.datasets import DataRoot  # noqa: E402
from fleetkit.core.fleet import load_fleet  # noqa: E402
from fleetkit.trim import inprocess, stages  # noqa: E402
from fleetkit.trim import rules as trim_rules  # noqa: E402

PKEYS = stages.PKEYS


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
    from fleetkit.core.datasets import cluster_of_path

    records = read_dataset(spark, root, "offsets_topic_records", clusters)
    names = clusters if clusters is not None else sorted(
        {c for f in data_files(path_join(root, "offsets_topic_records"))[0] for c in [cluster_of_path(f)] if c})
    since = log_marks.superseded_since(DataRoot(root), names)
    if not since:
        return records
    return records.mapInArrow(arrow_task(lambda t: stages.after_marks(t, since)), records.schema)


def with_has_members(records: DataFrame) -> DataFrame:
    """The members only as "has members" (the plan's question), as fleetkit.trim.inprocess reads them."""
    return records.withColumn("has_members", F.coalesce(F.size("members") > 0, F.lit(False)))


def newest_per_key(records: DataFrame, cols: list[str], then, schema) -> DataFrame:
    """`then` (Arrow table -> Arrow table of `schema`) of each compaction key's newest record
    (stages.newest_per_key with `cols`): per task first, batch by batch (partial results, merged as
    they grow), then once more per key after a shuffle of those, where `then` runs on whole keys."""
    keyed = records.select(*stages.KEY, "offset", *stages.NEWEST_BASE, *[c for c in cols if c not in stages.NEWEST_BASE])
    partial = keyed.mapInArrow(arrow_merging_task(lambda t: stages.newest_per_key(t, cols)), keyed.schema)
    return (partial.repartition(*stages.KEY)
            .mapInArrow(arrow_task(lambda t: then(stages.newest_per_key(t, cols))), spark_schema(schema)))


def partition_summary(records: DataFrame, latest: pa.Table) -> pa.Table:
    """stages.summarize over the records of the partitions in `latest`, each copy of a record in the
    same task (one shuffle of four fixed-width columns), with cluster and partition: a few rows per
    segment, collected."""
    spark = records.sparkSession
    ids, bases = stages.partition_ids(latest)
    # tasks hold their rows in memory: enough of them that each holds a few million
    tasks = max(int(spark.conf.get("spark.sql.shuffle.partitions")), 4 * records.rdd.getNumPartitions())
    rows = (records.join(F.broadcast(spark.createDataFrame(ids)), PKEYS)
            .select("_pid", "offset", "tombstone", "size_bytes").repartition(tasks, "_pid", "offset"))
    summary = rows.mapInArrow(arrow_task(lambda t: stages.summarize(t, bases)), spark_schema(stages.SUMMARY))
    return summary.toArrow().join(ids, "_pid")


def latest_inventory(segments: DataFrame) -> pa.Table:
    """stages.latest_inventory per broker (its segments' observations in one task), collected."""
    return (segments.repartition("cluster", "broker")
            .mapInArrow(arrow_task(stages.latest_inventory), segments.schema).toArrow())


def checkpoint_facts(segments: DataFrame, checkpoints: DataFrame) -> pa.Table:
    """stages.checkpoint_facts per replica (its observations in one task), collected."""
    return (segments.groupBy(*stages.REPLICA).cogroup(checkpoints.groupBy(*stages.REPLICA))
            .applyInArrow(stages.checkpoint_facts, spark_schema(stages.CHECKPOINTS)).toArrow())


def health(records: DataFrame, segments: DataFrame, checkpoints: DataFrame, clusters: dict, brokers: dict,
           bloat_ratio: float, min_bloat_bytes: int) -> tuple[pa.Table, pa.Table]:
    """(health per cluster/broker/partition, messages per segment): stages.health of the stages run
    in the tasks."""
    latest = latest_inventory(segments)
    summary = partition_summary(records, latest)
    live = newest_per_key(records, ["tombstone", "size_bytes"], stages.live_keys, stages.LIVE).toArrow()
    return stages.health(latest, summary, stages.sum_by(live, PKEYS, stages.LIVE),
                         checkpoint_facts(segments, checkpoints), clusters, brokers, bloat_ratio, min_bloat_bytes)


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
                    help="auto (default): a data root of up to FLEET_TRIM_INPROCESS_MAX_ROWS __consumer_offsets "
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
    spark = session("trim_health", args.master)
    fleet = [c.name for c in load_fleet(args.fleet).clusters]  # only the clusters the fleet file lists
    clusters, brokers = inprocess.cleaner_settings(args.fleet, DataRoot(args.data_root))
    out, per_segment = health(current_records(spark, args.data_root, fleet),
                              read_dataset(spark, args.data_root, "segment_inventory", fleet),
                              read_dataset(spark, args.data_root, "cleaner_checkpoints", fleet),
                              clusters, brokers, args.bloat_ratio, args.min_bloat_bytes)
    from jobs_common import path_join

    n = write_jsonl(spark.createDataFrame(out), path_join(args.out, "health.jsonl"))
    write_jsonl(spark.createDataFrame(per_segment), path_join(args.out, "segments.jsonl"))
    counts: dict[str, int] = {}
    for v in out["verdict"].to_pylist():
        counts[v] = counts.get(v, 0) + 1
    print(json.dumps({"replicas": n, "verdicts": counts, "seconds": round(time.monotonic() - t0, 1)}), flush=True)
    if args.trim_plan:
        t1 = time.monotonic()
        summary = trim_plan.run(spark, args.data_root, args.out, args.out, parts)
        print(json.dumps({"plans": summary, "seconds": round(time.monotonic() - t1, 1)}), flush=True)
    mark_done(args.out, spark)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Diff KoP-style client-to-group mapping znodes against the group coordinators' live members.

    PATH=.venv/bin:$PATH spark-submit spark_jobs/group_ids.py --data-root ROOT --out DIR
        [--fleet FILE] [--root /client_group_id] [--grace 1h] [--cluster NAME]
    (or --mappings PATH --members PATH instead of --data-root)

Reads the datasets group_id_mappings and group_members (the newest collection of each cluster:
rows whose observed_at is the cluster's latest in either dataset) and classifies every path, first
match wins. The rules live in fleetkit.group_ids.rules (one definition): this job slices the rows
by the path's name in one shuffle and runs rules.diff, the runbook's own aggregation, on each slice
(Arrow tables in and out), so findings and reasons are the library's word for word:

  UNREPRESENTABLE  a member whose <ip>-<clientId> cannot be a znode name (client id with '/',
                   characters ZooKeeper refuses, no host): reported, never written
  CONFLICT         one ip-clientId pair is a live member of two or more groups: reported only
  MISMATCHED       the znode holds another group than the live member's
  MISSING          a live member has no znode
  STALE            no live member and the znode not modified for longer than the grace period
                   (never when the znode's group could not be described, nor on a cluster whose
                   group listing was partial (a member row with group null): members unknown)
  OK               everything else (a znode without live member younger than the grace period)

Writes DIR/findings.jsonl (every finding that is not OK: cluster, path, class, reason, group,
groups, client_host, client_id, member_ids, znode_group, znode_version, ctime_ms, mtime, age_seconds) and
DIR/summary.json (counts per cluster and class); prints the summary as one JSON line. Roots and
grace periods per cluster come from the fleet file's group_id_mappings sections. A data root of up
to FLEET_GROUP_IDS_INPROCESS_MAX_ROWS rows (1,000,000 by default) on a local path is judged without
starting Spark, by fleetkit.group_ids.inprocess: the same rules and files (`--engine`).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spark-submit runs this file as a script
from jobs_common import (data_files, iso, mark_done, path_exists, path_join, session, spark_schema,  # noqa: E402
                         write_jsonl, write_text)
from fleetkit.core.datasets import FINDINGS  # noqa: E402

from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from fleetkit.core import inprocess as core_inprocess  # noqa: E402
from fleetkit.core.settings import under_root  # noqa: E402
from fleetkit.group_ids import inprocess  # noqa: E402
from fleetkit.group_ids import rules  # noqa: E402
from fleetkit.core.fleet import DEFAULT_GROUP_ID_GRACE_SECONDS, DEFAULT_GROUP_ID_ROOT, parse_duration_seconds  # noqa: E402

MAPPINGS_SCHEMA = spark_schema("group_id_mappings")
MEMBERS_SCHEMA = spark_schema("group_members")
#: the findings rules.diff returns, one column per key (plus the cluster)
FINDINGS_SCHEMA = spark_schema(FINDINGS["group_id_findings"])
#: slices of each cluster's paths that rules.diff judges one at a time (a name's rows share one)
SLICES = 64


def latest(mappings: DataFrame, members: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Each cluster's newest collection: observed_at equal to the cluster's latest in either dataset
    (one collection writes both with the same observed_at; a collection with no znodes means none)."""
    newest = (mappings.select("cluster", "observed_at").unionByName(members.select("cluster", "observed_at"))
              .groupBy("cluster").agg(F.max("observed_at").alias("observed_at")))
    b = F.broadcast(newest)
    return mappings.join(b, ["cluster", "observed_at"], "left_semi"), members.join(b, ["cluster", "observed_at"], "left_semi")


def newest_from_stats(files: list[str]) -> dict[str, object] | None:
    """cluster -> newest observed_at from the Parquet footers alone (no scan), or None when a file
    lacks the statistics or mixes clusters in a row group (then latest() aggregates)."""
    import pyarrow.parquet as pq

    newest: dict[str, object] = {}
    for f in files:
        md = pq.ParquetFile(f).metadata
        names = [md.schema.column(i).name for i in range(md.num_columns)]
        try:
            ci, oi = names.index("cluster"), names.index("observed_at")
        except ValueError:
            return None
        for rg in range(md.num_row_groups):
            row_group = md.row_group(rg)
            if row_group.num_rows == 0:
                continue
            cs, os_ = row_group.column(ci).statistics, row_group.column(oi).statistics
            if cs is None or os_ is None or not cs.has_min_max or not os_.has_min_max or cs.min != cs.max:
                return None
            c = cs.min.decode() if isinstance(cs.min, bytes) else cs.min
            if c not in newest or os_.max > newest[c]:
                newest[c] = os_.max
    return newest


def _utc(ts):
    import datetime as dt

    return ts if ts.tzinfo is not None else ts.replace(tzinfo=dt.timezone.utc)


def latest_by_stats(mappings: DataFrame, members: DataFrame, newest: dict) -> tuple[DataFrame, DataFrame]:
    """latest() with the newest collection known from the footers: a filter Parquet pushes down,
    so older collections are skipped, not read."""
    if not newest:
        return mappings.limit(0), members.limit(0)
    cond = None
    for c, ts in newest.items():
        one = (F.col("cluster") == F.lit(c)) & (F.col("observed_at") == F.lit(ts))
        cond = one if cond is None else cond | one
    return mappings.filter(cond), members.filter(cond)


def _diff_slices(unknown: dict, config: dict, default_root: str, default_grace: float):
    """rules.diff over one (cluster, slice) of znodes and members, as Arrow tables in and out.
    Everything the workers run is defined in here or in fleetkit: this file is not importable there."""
    import pyarrow as pa

    schema = pa.schema([("cluster", pa.string()), ("path", pa.string()), ("class", pa.string()),
                        ("reason", pa.string()), ("group", pa.string()), ("groups", pa.list_(pa.string())),
                        ("client_host", pa.string()), ("client_id", pa.string()),
                        ("member_ids", pa.list_(pa.string())), ("znode_group", pa.string()),
                        ("znode_version", pa.int32()), ("ctime_ms", pa.int64()),
                        ("mtime", pa.timestamp("us", tz="UTC")), ("age_seconds", pa.float64())])

    def judge(key, znodes, members):
        cluster = key[0].as_py()
        root, grace = config.get(cluster, (default_root, default_grace))
        found = rules.diff(znodes.to_pylist(), members.to_pylist(), root, grace,
                           unknown=unknown.get(cluster, set()))
        return pa.Table.from_pylist([dict(f, cluster=cluster) for f in found], schema=schema)

    return judge


def classify(mappings: DataFrame, members: DataFrame, config: dict | None = None,
             default_root: str = DEFAULT_GROUP_ID_ROOT, default_grace: float = DEFAULT_GROUP_ID_GRACE_SECONDS) -> DataFrame:
    """One row per path (and per unrepresentable member) with its class, first match wins.
    config: cluster -> (root, grace seconds). The facts are aggregated by rules.diff, the runbook's
    own function: the rows are sliced by the path's name (members' <ip>-<clientId>, the znodes' last
    path component), so every row of one name reaches one call; the markers of groups whose members
    are unknown (few) are read first and given to every call of their cluster."""
    marker = F.col("member_id").isNull() & F.col("client_id").isNull() & F.col("client_host").isNull()
    unknown: dict[str, set] = {}
    for r in members.filter(marker).select("cluster", "group").distinct().collect():
        unknown.setdefault(r["cluster"], set()).add(r["group"])
    member_name = F.concat(F.col("client_host"), F.lit("-"), F.col("client_id"))
    znode_name = F.element_at(F.split("path", "/"), -1)
    m = members.filter(~marker).withColumn("slice", F.pmod(F.xxhash64(member_name), F.lit(SLICES)))
    z = mappings.withColumn("slice", F.pmod(F.xxhash64(znode_name), F.lit(SLICES)))
    judge = _diff_slices(unknown, dict(config or {}), default_root, float(default_grace))
    return (z.groupBy("cluster", "slice").cogroup(m.groupBy("cluster", "slice"))
            .applyInArrow(judge, schema=FINDINGS_SCHEMA))


def read_input(spark, path: str, schema: T.StructType) -> DataFrame:
    parquet, jsonl = data_files(path)
    if not parquet and not jsonl:
        return spark.createDataFrame([], schema)
    frames = []
    if parquet:
        frames.append(spark.read.schema(schema).parquet(*parquet))
    if jsonl:
        str_schema = T.StructType([T.StructField(f.name, T.StringType() if isinstance(f.dataType, T.TimestampType)
                                                 else f.dataType) for f in schema.fields])
        df = spark.read.schema(str_schema).option("mode", "FAILFAST").json(jsonl)
        for f in schema.fields:
            if isinstance(f.dataType, T.TimestampType):
                df = df.withColumn(f.name, F.to_timestamp(F.col(f.name)))
        frames.append(df)
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def fleet_config(fleet_file: str | None) -> dict[str, tuple[str, float]]:
    """cluster -> (root, grace seconds) from the fleet file's group_id_mappings sections."""
    config: dict[str, tuple[str, float]] = {}
    if fleet_file:
        from fleetkit.core.fleet import load_fleet

        for c in load_fleet(fleet_file).clusters:
            if c.group_id_mappings is not None:
                config[c.name] = (c.group_id_mappings.root, float(c.group_id_mappings.grace_seconds))
    return config


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-root", help="reads <root>/group_id_mappings and <root>/group_members")
    ap.add_argument("--mappings")
    ap.add_argument("--members")
    ap.add_argument("--out", required=True)
    ap.add_argument("--fleet", help="fleet file: per-cluster root and grace")
    ap.add_argument("--root", default=DEFAULT_GROUP_ID_ROOT, help="root of clusters the fleet file does not configure")
    ap.add_argument("--grace", default="1h", help="grace of clusters the fleet file does not configure")
    ap.add_argument("--cluster", action="append", help="only these clusters (repeatable)")
    ap.add_argument("--max-age", help="ignore clusters whose newest collection is older than this (e.g. 30m): a "
                                      "cluster whose collection just failed is not judged on old data")
    ap.add_argument("--master")
    ap.add_argument("--engine", choices=("auto", "spark", "in-process"), default="auto",
                    help="auto (default): up to FLEET_GROUP_IDS_INPROCESS_MAX_ROWS mappings and members (1,000,000) "
                         "on local paths are judged in this process (fleetkit.group_ids.inprocess: the same rules "
                         "and files, no Spark start-up), more by Spark")
    args = ap.parse_args(argv)
    if not args.data_root and not (args.mappings and args.members):
        raise SystemExit("give --data-root, or both --mappings and --members")
    try:
        grace = parse_duration_seconds(args.grace)
        max_age = parse_duration_seconds(args.max_age) if args.max_age else None
    except ValueError as e:
        raise SystemExit(f"--grace / --max-age: {e}") from None
    import datetime as dt

    cutoff = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=max_age) if max_age is not None else None
    mappings_path = args.mappings or under_root(args.data_root, "group_id_mappings")
    members_path = args.members or under_root(args.data_root, "group_members")
    local = all(core_inprocess.readable_here(p) for p in (mappings_path, members_path, args.out))
    if args.engine == "in-process" or (args.engine == "auto" and local and not (args.mappings or args.members)
                                       and core_inprocess.small_input(inprocess.JOB, args.data_root)):
        summary = inprocess.run(mappings_path, members_path, args.out, fleet_config(args.fleet), args.root, grace,
                                args.cluster, cutoff)
        print(json.dumps(summary, sort_keys=True), flush=True)
        return 0
    t0 = time.monotonic()
    spark = session("group_ids", args.master)
    mappings = read_input(spark, mappings_path, MAPPINGS_SCHEMA) if path_exists(mappings_path, spark) \
        else spark.createDataFrame([], MAPPINGS_SCHEMA)
    members = read_input(spark, members_path, MEMBERS_SCHEMA) if path_exists(members_path, spark) \
        else spark.createDataFrame([], MEMBERS_SCHEMA)
    if args.cluster:
        mappings = mappings.filter(F.col("cluster").isin(args.cluster))
        members = members.filter(F.col("cluster").isin(args.cluster))
    newest = None
    files = [data_files(p) for p in (mappings_path, members_path) if path_exists(p, spark)]
    if all(not jsonl for _, jsonl in files):
        newest = newest_from_stats([f for parquet, _ in files for f in parquet])
    if newest is not None and args.cluster:
        newest = {c: t for c, t in newest.items() if c in args.cluster}
    too_old: list[str] = []
    if cutoff is not None:
        if newest is not None:
            too_old = sorted(c for c, t in newest.items() if _utc(t) < cutoff)
            newest = {c: t for c, t in newest.items() if c not in too_old}
        else:
            mappings = mappings.filter(F.col("observed_at") >= F.lit(cutoff))
            members = members.filter(F.col("observed_at") >= F.lit(cutoff))
    mappings, members = latest(mappings, members) if newest is None else latest_by_stats(mappings, members, newest)
    findings = classify(mappings, members, fleet_config(args.fleet), args.root, grace).persist()
    counts: dict[str, dict[str, int]] = {}
    for r in findings.groupBy("cluster", "class").count().collect():
        counts.setdefault(r["cluster"], {})[r["class"]] = r["count"]
    out = args.out
    n = write_jsonl(findings.filter(F.col("class") != "OK").withColumn("mtime", iso(F.col("mtime")))
                    .orderBy("cluster", "class", "path"), path_join(out, "findings.jsonl"))
    summary = {"clusters": counts, "findings": n, "seconds": round(time.monotonic() - t0, 1),
               "skipped_old_collections": too_old}
    write_text(path_join(out, "summary.json"), json.dumps(summary, indent=1, sort_keys=True), spark)
    mark_done(out, spark)
    print(json.dumps(summary, sort_keys=True), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

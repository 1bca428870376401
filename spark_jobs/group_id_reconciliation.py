"""Diff KoP-style client-to-group mapping znodes against the group coordinators' live members.

    PATH=.venv/bin:$PATH spark-submit spark_jobs/group_id_reconciliation.py --data-root ROOT --out DIR
        [--fleet FILE] [--root /client_group_id] [--grace 1h] [--cluster NAME]
    (or --mappings PATH --members PATH instead of --data-root)

Reads the datasets group_id_mappings and group_members (the newest collection of each cluster:
rows whose observed_at is the cluster's latest in either dataset) and classifies every path, first
match wins. The rules live in fleetkit.group_ids.rules (one definition): this job aggregates each
path's facts (rules.PathFacts) in one shuffle and calls rules.name_problem and rules.classify on
them through Arrow-optimised Python UDFs, so reasons are the library's word for word:

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
grace periods per cluster come from the fleet file's group_id_mappings sections.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # spark-submit runs this file as a script
from jobs_common import data_files, iso, session, write_jsonl  # noqa: E402

from pyspark.sql import DataFrame  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402
from pyspark.sql import types as T  # noqa: E402

from fleetkit.group_ids import rules  # noqa: E402
from fleetkit.core.fleet import DEFAULT_GROUP_ID_GRACE_SECONDS, DEFAULT_GROUP_ID_ROOT, parse_duration_seconds  # noqa: E402

MAPPINGS_SCHEMA = T.StructType([
    T.StructField("cluster", T.StringType()), T.StructField("observed_at", T.TimestampType()),
    T.StructField("path", T.StringType()), T.StructField("client_host", T.StringType()),
    T.StructField("client_id", T.StringType()), T.StructField("group", T.StringType()),
    T.StructField("znode_version", T.IntegerType()), T.StructField("ctime", T.TimestampType()),
    T.StructField("mtime", T.TimestampType()),
])
MEMBERS_SCHEMA = T.StructType([
    T.StructField("cluster", T.StringType()), T.StructField("observed_at", T.TimestampType()),
    T.StructField("group", T.StringType()), T.StructField("client_id", T.StringType()),
    T.StructField("client_host", T.StringType()), T.StructField("member_id", T.StringType()),
])
CONFIG_SCHEMA = T.StructType([T.StructField("cluster", T.StringType()), T.StructField("root", T.StringType()),
                              T.StructField("grace_seconds", T.DoubleType())])

_Z_COLS = [("path", "string"), ("znode_group", "string"), ("znode_version", "int"), ("ctime_ms", "long"),
           ("mtime", "timestamp"), ("age_seconds", "double"), ("z_host", "string"), ("z_client_id", "string")]

_VERDICT = T.StructType([T.StructField("class", T.StringType()), T.StructField("reason", T.StringType())])


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


def _rule_udfs():
    """rules.name_problem and rules.classify as column functions (the one definition, run as is).
    Everything the workers run is defined in here or in fleetkit: this file is not importable there."""

    def _none(x):
        """A null as Python sees it (None; NaN when a batch arrives as pandas)."""
        return None if x is None or (isinstance(x, float) and x != x) else x

    @F.udf(returnType=T.StringType(), useArrow=True)
    def name_problem(client_host, client_id):
        return rules.name_problem(_none(client_host), _none(client_id))

    @F.udf(returnType=_VERDICT, useArrow=True)
    def classify_path(problem, groups, znode_group, age_seconds, group_unknown, grace_seconds):
        facts = rules.PathFacts(member_groups=frozenset(str(g) for g in groups) if groups is not None else frozenset(),
                                znode_group=_none(znode_group), age_seconds=_none(age_seconds),
                                problem=_none(problem), group_unknown=bool(_none(group_unknown)))
        return rules.classify(facts, float(grace_seconds))

    return name_problem, classify_path


def classify(mappings: DataFrame, members: DataFrame, config: DataFrame | None = None,
             default_root: str = DEFAULT_GROUP_ID_ROOT, default_grace: float = DEFAULT_GROUP_ID_GRACE_SECONDS) -> DataFrame:
    """One row per path (and per unrepresentable member) with its class, first match wins: the
    facts of rules.PathFacts are aggregated here, rules.classify judges them."""
    spark = mappings.sparkSession
    if config is None:
        config = spark.createDataFrame([], CONFIG_SCHEMA)
    name_problem, classify_path = _rule_udfs()
    cfg = F.broadcast(config.select("cluster", "root", "grace_seconds"))
    name = F.concat(F.col("client_host"), F.lit("-"), F.col("client_id"))
    marker = F.col("member_id").isNull() & F.col("client_id").isNull() & F.col("client_host").isNull()
    unknown = (members.filter(marker & F.col("group").isNotNull())
               .select("cluster", F.col("group").alias("znode_group")).distinct()
               .withColumn("group_unknown", F.lit(True)))
    # a marker with no group (rules.ALL_GROUPS): the listing was partial, every group is unknown
    cluster_unknown = (members.filter(marker & F.col("group").isNull()).select("cluster").distinct()
                       .withColumn("cluster_unknown", F.lit(True)))
    m = members.filter(~marker).withColumn("problem", name_problem("client_host", "client_id")).withColumn("name", name)
    unrep = (m.filter(F.col("problem").isNotNull())
             .select("cluster", F.lit(None).cast("string").alias("path"), "problem",
                     F.array("group").alias("groups"), "group", "client_host",
                     "client_id", F.array("member_id").alias("member_ids"),
                     F.lit(None).cast("string").alias("znode_group"), F.lit(None).cast("int").alias("znode_version"),
                     F.lit(None).cast("long").alias("ctime_ms"), F.lit(None).cast("timestamp").alias("mtime"),
                     F.lit(None).cast("double").alias("age_seconds"), F.lit(False).alias("group_unknown"),
                     F.lit(None).cast("double").alias("grace")))
    # one shuffle: members and znodes keyed by (cluster, name), aggregated together
    mem_side = (m.filter(F.col("problem").isNull())
                .select("cluster", "name", F.col("group").alias("m_group"), F.col("client_host").alias("m_host"),
                        F.col("client_id").alias("m_client_id"), "member_id",
                        *[F.lit(None).cast(t).alias(c) for c, t in _Z_COLS]))
    z_side = mappings.select(
        "cluster", F.element_at(F.split("path", "/"), -1).alias("name"),
        *[F.lit(None).cast("string").alias(c) for c in ("m_group", "m_host", "m_client_id", "member_id")],
        "path", F.col("group").alias("znode_group"), "znode_version", F.unix_millis("ctime").alias("ctime_ms"),
        "mtime", (F.col("observed_at").cast("double") - F.col("mtime").cast("double")).alias("age_seconds"),
        F.col("client_host").alias("z_host"), F.col("client_id").alias("z_client_id"))
    j = (mem_side.unionByName(z_side).groupBy("cluster", "name").agg(
        F.array_sort(F.collect_set("m_group")).alias("groups"),
        F.first("m_host", ignorenulls=True).alias("m_host"),
        F.first("m_client_id", ignorenulls=True).alias("m_client_id"),
        F.array_sort(F.collect_list("member_id")).alias("member_ids"),
        *[F.first(c, ignorenulls=True).alias(c) for c, _ in _Z_COLS])
        .join(cfg, "cluster", "left")
        .join(F.broadcast(unknown), ["cluster", "znode_group"], "left")
        .join(F.broadcast(cluster_unknown), "cluster", "left"))
    n = F.size("groups")  # collect_set of no value: an empty array
    root = F.coalesce(F.col("root"), F.lit(default_root))
    paths = j.select("cluster",
                     F.coalesce(F.col("path"), F.concat(F.regexp_replace(root, "/$", ""), F.lit("/"), F.col("name"))).alias("path"),
                     F.lit(None).cast("string").alias("problem"),
                     F.coalesce(F.col("groups"), F.array().cast("array<string>")).alias("groups"),
                     F.when(n == 1, F.col("groups")[0]).alias("group"),
                     F.coalesce("m_host", "z_host").alias("client_host"),
                     F.coalesce("m_client_id", "z_client_id").alias("client_id"),
                     F.coalesce(F.col("member_ids"), F.array().cast("array<string>")).alias("member_ids"),
                     "znode_group", "znode_version", "ctime_ms", "mtime", "age_seconds",
                     (F.coalesce(F.col("group_unknown"), F.lit(False))
                      | F.coalesce(F.col("cluster_unknown"), F.lit(False))).alias("group_unknown"),
                     F.col("grace_seconds").alias("grace"))
    grace = F.coalesce(F.col("grace"), F.lit(float(default_grace)))
    verdict = classify_path("problem", "groups", "znode_group", "age_seconds", "group_unknown", grace)
    return (paths.unionByName(unrep).withColumn("verdict", verdict)
            .select("cluster", "path", F.col("verdict.class").alias("class"), F.col("verdict.reason").alias("reason"),
                    "group", "groups", "client_host", "client_id", "member_ids", "znode_group", "znode_version",
                    "ctime_ms", "mtime", "age_seconds"))


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


def fleet_config(spark, fleet_file: str | None) -> DataFrame:
    rows = []
    if fleet_file:
        from fleetkit.core.fleet import load_fleet

        for c in load_fleet(fleet_file).clusters:
            if c.group_id_mappings is not None:
                rows.append((c.name, c.group_id_mappings.root, float(c.group_id_mappings.grace_seconds)))
    return spark.createDataFrame(rows, CONFIG_SCHEMA)


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
    mappings_path = args.mappings or str(Path(args.data_root) / "group_id_mappings")
    members_path = args.members or str(Path(args.data_root) / "group_members")
    t0 = time.monotonic()
    spark = session("group_id_reconciliation", args.master)
    mappings = read_input(spark, mappings_path, MAPPINGS_SCHEMA) if Path(mappings_path).exists() \
        else spark.createDataFrame([], MAPPINGS_SCHEMA)
    members = read_input(spark, members_path, MEMBERS_SCHEMA) if Path(members_path).exists() \
        else spark.createDataFrame([], MEMBERS_SCHEMA)
    if args.cluster:
        mappings = mappings.filter(F.col("cluster").isin(args.cluster))
        members = members.filter(F.col("cluster").isin(args.cluster))
    newest = None
    files = [data_files(p) for p in (mappings_path, members_path) if Path(p).exists()]
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
    findings = classify(mappings, members, fleet_config(spark, args.fleet), args.root, grace).persist()
    counts: dict[str, dict[str, int]] = {}
    for r in findings.groupBy("cluster", "class").count().collect():
        counts.setdefault(r["cluster"], {})[r["class"]] = r["count"]
    out = Path(args.out)
    n = write_jsonl(findings.filter(F.col("class") != "OK").withColumn("mtime", iso(F.col("mtime")))
                    .orderBy("cluster", "class", "path"), str(out / "findings.jsonl"))
    summary = {"clusters": counts, "findings": n, "seconds": round(time.monotonic() - t0, 1),
               "skipped_old_collections": too_old}
    tmp = out / ".summary.json.tmp"
    tmp.write_text(json.dumps(summary, indent=1, sort_keys=True))
    tmp.replace(out / "summary.json")
    print(json.dumps(summary, sort_keys=True), flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

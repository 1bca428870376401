"""The trim_health job (and its trim plan) in this process, for small inputs: the same outputs
as spark_jobs/trim_health.py (and spark_jobs/trim_plan.py) without Spark's start-up.

A lab or a small fleet has a few thousand __consumer_offsets records: the Spark job spends 20-40 s
starting for well under a second of work. Up to the row limit of fleetkit.core.inprocess
(FLEET_TRIM_INPROCESS_MAX_ROWS, 1,000,000 records by default; local paths only) the job runs
here instead: the stages of fleetkit.trim.stages, each once on the whole data root, where the Spark
job runs the heavy ones per task; the same files: health.jsonl, segments.jsonl and trim_plan.json.

Nothing here imports Spark or pandas.
"""

from __future__ import annotations

import json
import time

from fleetkit.core import inprocess as core
from fleetkit.core.datasets import SCHEMAS, files_of_clusters, publish_rows, publish_text, read_file
from fleetkit.core.fleet import load_fleet
from fleetkit.trim import planning, rules, stages

JOB = "trim_health"
#: the records' columns the stages read
RECORD_COLUMNS = ("cluster", "partition", "offset", "observed_at", "key_version", "group", "topic", "topic_partition",
                  "committed_offset", "metadata", "tombstone", "size_bytes", "generation")


def small_input(data_root: str) -> bool:
    """Whether the data root's offsets_topic_records are few enough to judge here (local path)."""
    return core.small_input(JOB, data_root)


def read_dataset(root: str, name: str, clusters: list[str] | None = None, columns=None):
    """The dataset's Parquet files under ROOT as one Arrow table (the Spark job's read_dataset:
    with `clusters`, only their `cluster=<name>` folders, naming the clusters it leaves out)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    folder = core.location(root) / name
    parquet = core.input_files(str(folder))[0] if folder.exists() else []
    parquet = files_of_clusters(parquet, root, name, clusters)
    data = core.location(root).root
    table = pa.concat_tables([read_file(data, f, SCHEMAS[name]) for f in parquet])
    if name == "offsets_topic_records":  # the members only as "has members" (the plan's question)
        has = pc.fill_null(pc.greater(pc.list_value_length(table["members"]), 0), False)
        return table.select(list(columns or RECORD_COLUMNS)).append_column("has_members", has)
    return table.select(list(columns)) if columns else table


def current_records(root: str, clusters: list[str] | None = None):
    """offsets_topic_records without the rows of a log the collection found replaced under it
    (stages.after_marks), as the Spark job's current_records."""
    from fleetkit.collection import log_marks

    records = read_dataset(root, "offsets_topic_records", clusters)
    names = clusters if clusters is not None else sorted(set(records["cluster"].drop_null().to_pylist()))
    return stages.after_marks(records, log_marks.superseded_since(core.location(root).root, names))


def cleaner_settings(fleet_file: str, root):
    """The fleet file's cleaner settings per cluster and the brokers' reported ones per (cluster,
    broker), with the topic's min.cleanable.dirty.ratio and segment.bytes (DescribeConfigs, kept by
    the collection under the data root `root`, a DataRoot): what stages.health judges by."""
    from fleetkit.collection.offsets_topic import settings_path

    clusters, brokers = {}, {}
    for c in load_fleet(fleet_file).clusters:
        clusters[c.name] = {"kafka_version": c.kafka_version, "dedupe_buffer_size": c.cleaner.dedupe_buffer_size,
                            "threads": c.cleaner.threads, "load_factor": c.cleaner.io_buffer_load_factor}
        doc = root.read_json(settings_path(root, c.name), default=None)
        if not doc:
            continue
        topic = doc.get("topic") or {}
        for b, v in (doc.get("brokers") or {}).items():
            brokers[(c.name, int(b))] = {"dedupe_buffer_size": v.get("dedupe_buffer_size"), "threads": v.get("threads"),
                                         "load_factor": v.get("load_factor"),
                                         "min_cleanable_ratio": topic.get("min_cleanable_ratio"),
                                         "segment_bytes": topic.get("segment_bytes")}
    return clusters, brokers


def health(records, segments, checkpoints, clusters: dict, brokers: dict, bloat_ratio: float,
           min_bloat_bytes: int):
    """(health table, per-segment table): the stages once each."""
    latest = stages.latest_inventory(segments)
    ids, bases = stages.partition_ids(latest)
    rows = records.select(["cluster", "partition", "offset", "tombstone", "size_bytes"]).join(ids, stages.PKEYS)
    summary = stages.summarize(rows, bases).join(ids, "_pid")
    newest = stages.newest_per_key(records, ["tombstone", "size_bytes"])
    return stages.health(latest, summary, stages.live_keys(newest), stages.checkpoint_facts(segments, checkpoints),
                         clusters, brokers, bloat_ratio, min_bloat_bytes)


def group_states(root: str) -> dict[tuple, str | None] | None:
    """{(cluster, group): the coordinator's state as last collected}, None without that dataset."""
    try:
        return stages.group_states(read_dataset(root, "group_coordinators",
                                                columns=["cluster", "group", "observed_at", "state"]))
    except SystemExit:
        return None


def trim_plans(records, segments, health_rows: list[dict], states: dict | None,
               partitions: list[int] | None) -> dict[str, dict]:
    """{cluster: plan} (the Spark trim_plan job's build)."""
    replicas, health_map = stages.replicas_to_trim(stages.latest_inventory(segments), health_rows, partitions)
    cutoffs = planning.cutoffs_of(replicas)
    newest = stages.newest_per_key(records, stages.PLAN_COLS)
    return stages.plans(replicas, health_map, stages.plan_rows(newest, cutoffs), states)


def run(data_root: str, fleet_file: str, out: str, bloat_ratio: float = rules.DEFAULT_BLOAT_RATIO,
        min_bloat_bytes: int = rules.DEFAULT_MIN_BLOAT_BYTES, trim_plan: bool = False,
        partitions: list[int] | None = None) -> dict:
    """The whole job in process: read, judge, write health.jsonl and segments.jsonl (and with
    `trim_plan`, trim_plan.json); prints and returns the job's summary lines."""
    t0 = time.monotonic()
    fleet = [c.name for c in load_fleet(fleet_file).clusters]
    records = current_records(data_root, fleet)
    segments = read_dataset(data_root, "segment_inventory", fleet)
    checkpoints = read_dataset(data_root, "cleaner_checkpoints", fleet)
    clusters, brokers = cleaner_settings(fleet_file, core.location(data_root).root)
    table, per_segment = health(records, segments, checkpoints, clusters, brokers, bloat_ratio, min_bloat_bytes)
    rows = table.to_pylist()
    folder = core.location(out)
    folder.mkdir(parents=True, exist_ok=True)
    publish_rows(rows, folder / "health.jsonl")
    publish_rows(per_segment.to_pylist(), folder / "segments.jsonl")
    counts: dict[str, int] = {}
    for r in rows:
        counts[r["verdict"]] = counts.get(r["verdict"], 0) + 1
    summary = {"replicas": len(rows), "verdicts": counts, "seconds": round(time.monotonic() - t0, 1),
               "engine": "in-process"}
    print(json.dumps(summary), flush=True)
    if trim_plan:
        t1 = time.monotonic()
        # the plan reads every cluster's data (as the Spark trim_plan job), not only the fleet file's
        everything = current_records(data_root)
        plans = trim_plans(everything, read_dataset(data_root, "segment_inventory"), rows, group_states(data_root),
                           partitions)
        publish_text(planning.plan_json(plans), folder / "trim_plan.json")
        summary["plans"] = planning.summary(plans)
        print(json.dumps({"plans": summary["plans"], "seconds": round(time.monotonic() - t1, 1)}), flush=True)
    folder.mark_done()
    return summary


"""The offsets_health job (and its trim plan) in this process, for small inputs: the same outputs
as spark_jobs/offsets_health.py (and spark_jobs/trim_plan.py) without Spark's start-up.

A lab or a small fleet has a few thousand __consumer_offsets records: the Spark job spends 20-40 s
starting for well under a second of work. Up to the row limit of fleetkit.core.inprocess
(FLEET_OFFSETS_INPROCESS_MAX_ROWS, 1,000,000 records by default; local paths only) the job runs
here instead, with pandas over the same datasets: the same facts per replica (records, live keys,
tombstones, bytes, segments, the largest segment's messages, checkpoint progress), the same rules
(fleetkit.trim.rules.judge_replica), the same plan assembly (fleetkit.trim.planning), the same
files: health.jsonl, segments.jsonl and trim_plan.json. tests/spark/test_offsets_inprocess.py runs
both engines on the same data and compares every field.

Nothing here imports Spark.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from collections import defaultdict

from fleetkit.core import inprocess as core
from fleetkit.core.datasets import SCHEMAS, files_of_clusters, publish_rows, publish_text, read_file
from fleetkit.core.fleet import load_fleet
from fleetkit.trim import planning, rules
from fleetkit.trim.cleaner import capacity

JOB = "offsets_health"
PKEYS = ["cluster", "partition"]
REPLICA = ["cluster", "broker", "partition"]
#: health.jsonl's columns, in the Spark job's order
HEALTH_COLUMNS = ("cluster", "broker", "log_dir", "partition", "records", "live_keys", "tombstones", "record_bytes",
                  "live_bytes", "disk_bytes", "segments", "duplicate_ratio", "largest_segment_messages",
                  "keys_per_pass", "checkpoint_first", "checkpoint_last", "dirty_bytes_first", "dirty_bytes_last",
                  "verdict", "reason", "fix")
SEGMENT_COLUMNS = ("cluster", "broker", "log_dir", "partition", "base_offset", "next_base", "size_bytes", "is_active",
                   "messages")
_RECORD_COLUMNS = ("cluster", "partition", "offset", "observed_at", "key_version", "group", "topic", "topic_partition",
                   "committed_offset", "metadata", "tombstone", "size_bytes", "generation")


def small_input(data_root: str) -> bool:
    """Whether the data root's offsets_topic_records are few enough to judge here (local path)."""
    return core.small_input(JOB, data_root)


def _frame(table):
    """A pyarrow table as pandas with nullable integers and booleans (a null stays null)."""
    import pandas as pd
    import pyarrow as pa

    mapping = {pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(), pa.int64(): pd.Int64Dtype(),
               pa.bool_(): pd.BooleanDtype(), pa.string(): pd.StringDtype()}
    return table.to_pandas(types_mapper=mapping.get)


def read_dataset(root: str, name: str, clusters: list[str] | None = None, columns=None):
    """The dataset's Parquet files under ROOT as a pandas frame (the Spark job's read_dataset: with
    `clusters`, only their `cluster=<name>` folders, naming the clusters it leaves out)."""
    import pyarrow as pa

    folder = core.location(root) / name
    parquet = core.input_files(str(folder))[0] if folder.exists() else []
    parquet = files_of_clusters(parquet, root, name, clusters)
    data = core.location(root).root
    schema = SCHEMAS[name]
    tables = [read_file(data, f, schema) for f in parquet]
    table = pa.concat_tables(tables)
    if name == "offsets_topic_records":  # the members only as "has members" (the plan's question)
        import pyarrow.compute as pc

        has = pc.fill_null(pc.greater(pc.list_value_length(table["members"]), 0), False)
        table = table.select(list(columns or _RECORD_COLUMNS)).append_column("has_members", has)
    elif columns:
        table = table.select(list(columns))
    return _frame(table)


def current_records(root: str, clusters: list[str] | None = None):
    """offsets_topic_records without the rows of a log the collection found replaced under it
    (fleetkit.collection.log_marks), as the Spark job's current_records."""
    import pandas as pd

    from fleetkit.collection import log_marks

    records = read_dataset(root, "offsets_topic_records", clusters)
    names = clusters if clusters is not None else sorted(records["cluster"].dropna().unique())
    data = core.location(root).root
    since = log_marks.superseded_since(data, names)
    if not since:
        return records
    marks = pd.DataFrame([(c, int(p), pd.Timestamp(t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)))
                          for c, p, t in since], columns=["cluster", "partition", "_since"])
    marks["partition"] = marks["partition"].astype("Int32")
    marks["cluster"] = marks["cluster"].astype(records["cluster"].dtype)
    out = records.merge(marks, on=PKEYS, how="left")
    keep = out["_since"].isna() | (out["observed_at"] >= out["_since"])
    return out[_true(keep)].drop(columns="_since").reset_index(drop=True)


def _true(s):
    """A nullable boolean as a mask (null: False)."""
    return s.fillna(False).astype(bool)


def newest_per_key(records, cols: list[str]):
    """Each key's newest record (the Spark job's newest_per_key): offset commits keyed by (group,
    topic, partition), group metadata (key version 2) by group alone; cluster, partition, group,
    topic, topic_partition (null for group metadata), offset and `cols`."""
    gm = records["key_version"].eq(2)
    not_gm = _true(~gm)
    keyed = records[["cluster", "partition", "offset", *cols]].copy()
    keyed["_gm"] = gm
    keyed["group"] = records["group"]
    keyed["topic"] = records["topic"].where(not_gm)
    keyed["topic_partition"] = records["topic_partition"].where(not_gm)
    keys = ["cluster", "partition", "_gm", "group", "topic", "topic_partition"]
    newest = keyed.sort_values("offset", kind="stable").groupby(keys, dropna=False, sort=False).tail(1)
    return newest.drop(columns="_gm").reset_index(drop=True)


def latest_inventory(segments):
    last = segments.groupby(["cluster", "broker"])["observed_at"].transform("max")
    return segments[segments["observed_at"] == last].reset_index(drop=True)


def partition_summary(records, segments):
    """Per (cluster, partition, bucket) of the partitions in `segments`: distinct records,
    tombstones, bytes, highest offset; bucket: the greatest segment base offset (of any broker) at
    or below the record's offset, null below every base (the Spark job's partition_summary)."""
    import numpy as np
    import pandas as pd

    bases = {k: np.array(sorted(g.unique()), dtype=np.int64)
             for k, g in segments.groupby(PKEYS)["base_offset"]}
    rows = records[["cluster", "partition", "offset", "tombstone", "size_bytes"]]
    rows = rows[[k in bases for k in zip(rows["cluster"], rows["partition"])]] if len(rows) else rows
    rows = rows.drop_duplicates(["cluster", "partition", "offset"])
    out = []
    for (c, p), g in rows.groupby(PKEYS, sort=True):
        g = g.sort_values("offset")
        off = g["offset"].to_numpy(dtype=np.int64)
        b = bases[(c, p)]
        idx = np.searchsorted(b, off, side="right")
        frame = pd.DataFrame({"i": idx, "n": 1, "tombstones": g["tombstone"].fillna(False).astype(np.int64).to_numpy(),
                              "bytes": g["size_bytes"].fillna(0).astype(np.int64).to_numpy(), "max_offset": off})
        agg = frame.groupby("i").agg(n=("n", "sum"), tombstones=("tombstones", "sum"), bytes=("bytes", "sum"),
                                     max_offset=("max_offset", "max")).reset_index()
        agg["bucket"] = [None if i == 0 else int(b[i - 1]) for i in agg["i"]]
        agg["cluster"], agg["partition"] = c, p
        out.append(agg.drop(columns="i"))
    cols = ["cluster", "partition", "bucket", "n", "tombstones", "bytes", "max_offset"]
    if not out:
        return pd.DataFrame(columns=cols)
    summary = pd.concat(out, ignore_index=True)[cols]
    summary["bucket"] = summary["bucket"].astype("Int64")
    return summary


def segment_messages(summary, segments):
    """Messages per segment of each broker: the summary's buckets in [base_offset, next base)."""

    segs = segments.sort_values(["cluster", "broker", "partition", "base_offset"]).reset_index(drop=True)
    segs["next_base"] = segs.groupby(["cluster", "broker", "partition"])["base_offset"].shift(-1).astype("Int64")
    segs["_seg"] = range(len(segs))
    fine = summary[summary["bucket"].notna()][["cluster", "partition", "bucket", "n"]]
    fine = fine.astype({"partition": segs["partition"].dtype, "cluster": segs["cluster"].dtype})
    joined = segs[["_seg", "cluster", "partition", "base_offset", "next_base"]].merge(fine, on=PKEYS, how="inner")
    inside = (joined["bucket"] >= joined["base_offset"]) & (joined["next_base"].isna() | (joined["bucket"] < joined["next_base"]))
    counts = joined[_true(inside)].groupby("_seg")["n"].sum()
    segs["messages"] = segs["_seg"].map(counts).fillna(0).astype("int64")
    return segs[list(SEGMENT_COLUMNS)]


def record_facts(records, summary):
    """Per (cluster, partition): records, tombstones, record bytes (distinct offsets, from the
    summary) and the live keys with their bytes (newest record per key not a tombstone)."""
    import pandas as pd

    totals = summary.groupby(PKEYS).agg(records=("n", "sum"), tombstones=("tombstones", "sum"),
                                        record_bytes=("bytes", "sum")).reset_index()
    newest = newest_per_key(records, ["tombstone", "size_bytes"])
    live = newest[_true(newest["tombstone"].eq(False))]
    live = live.groupby(PKEYS).agg(live_keys=("offset", "size"), live_bytes=("size_bytes", "sum")).reset_index()
    totals = totals.astype({"partition": "Int32"})
    live = live.astype({"partition": "Int32"})
    out = totals.merge(live.astype({"cluster": totals["cluster"].dtype}), on=PKEYS, how="left")
    out["live_keys"] = out["live_keys"].fillna(0).astype("int64")
    out["live_bytes"] = out["live_bytes"].fillna(0).astype("int64")
    out["duplicate_ratio"] = [1 - lk / r if r > 0 else 0.0 for lk, r in zip(out["live_keys"], out["records"])]
    return out if len(out) else pd.DataFrame(columns=[*PKEYS, "records", "tombstones", "record_bytes", "live_keys",
                                                      "live_bytes", "duplicate_ratio"])


def checkpoint_facts(segments, checkpoints):
    """Checkpoint and dirty bytes (segments at or above the checkpoint) at the first and last
    observation of each (cluster, broker, partition)."""
    keys = ["cluster", "broker", "partition", "observed_at"]
    obs = segments.merge(checkpoints[[*keys, "checkpoint_offset"]], on=keys, how="left")
    cp = obs["checkpoint_offset"]
    obs["_dirty"] = obs["size_bytes"].where(_true(cp.isna() | (obs["base_offset"] >= cp)), 0)
    per = obs.groupby(keys).agg(checkpoint=("checkpoint_offset", "first"), dirty_bytes=("_dirty", "sum")).reset_index()
    per = per.sort_values("observed_at", kind="stable")
    g = per.groupby(REPLICA)
    first, last = g.head(1).set_index(REPLICA), g.tail(1).set_index(REPLICA)
    out = g.size().rename("observations").to_frame()
    out["checkpoint_first"], out["dirty_bytes_first"] = first["checkpoint"], first["dirty_bytes"]
    out["checkpoint_last"], out["dirty_bytes_last"] = last["checkpoint"], last["dirty_bytes"]
    return out.reset_index()


def _settings(fleet_file: str, data_root: str):
    """The fleet file's cleaner settings per cluster and the brokers' reported ones per (cluster, broker)."""
    from fleetkit.collection.offsets_topic import settings_path

    clusters, brokers = {}, {}
    root = core.location(data_root).root
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


def _native(v):
    """A pandas / numpy value as JSON's (null for NA)."""
    import pandas as pd

    if v is None or (not isinstance(v, (list, dict, str)) and pd.isna(v)):
        return None
    if hasattr(v, "item"):
        return v.item()
    return v


def _rows(frame, columns) -> list[dict]:
    return [{c: _native(v) for c, v in zip(columns, values)}
            for values in frame[list(columns)].itertuples(index=False, name=None)]


def health(records, segments, checkpoints, clusters: dict, brokers: dict, bloat_ratio: float,
           min_bloat_bytes: int) -> tuple[list[dict], list[dict]]:
    """(health rows per cluster/broker/partition, messages per segment), as the Spark job's `health`."""
    latest = latest_inventory(segments)
    summary = partition_summary(records, latest)
    per_segment = segment_messages(summary, latest)
    disk = per_segment.groupby(["cluster", "broker", "log_dir", "partition"]).agg(
        segments=("base_offset", "size"), disk_bytes=("size_bytes", "sum"),
        largest_segment_messages=("messages", "max")).reset_index()
    facts = disk.merge(record_facts(records, summary).astype({"partition": disk["partition"].dtype,
                                                              "cluster": disk["cluster"].dtype}), on=PKEYS, how="left")
    cps = checkpoint_facts(segments, checkpoints)
    facts = facts.merge(cps.astype({"partition": facts["partition"].dtype, "broker": facts["broker"].dtype}),
                        on=REPLICA, how="left")
    for name in ("records", "live_keys", "tombstones", "record_bytes", "live_bytes", "observations",
                 "checkpoint_first", "checkpoint_last", "dirty_bytes_first", "dirty_bytes_last"):
        facts[name] = facts[name].astype("Int64") if name in facts else None
    out = []
    for row in _rows(facts, list(facts.columns)):
        for name in ("records", "live_keys", "tombstones", "record_bytes", "live_bytes", "observations"):
            row[name] = 0 if row.get(name) is None else row[name]
        settings = dict(clusters.get(row["cluster"]) or {})
        reported = brokers.get((row["cluster"], row["broker"]), {})
        for name in ("dedupe_buffer_size", "threads", "load_factor"):
            if reported.get(name) is not None:
                settings[name] = reported[name]
        settings["min_cleanable_ratio"] = reported.get("min_cleanable_ratio")
        settings["segment_bytes"] = reported.get("segment_bytes")
        row.update(settings)
        row["verdict"], row["reason"], row["fix"] = rules.judge_replica(row, bloat_ratio, min_bloat_bytes)
        row["keys_per_pass"] = capacity(int(row["dedupe_buffer_size"]), int(row["threads"]),
                                        float(row["load_factor"]))["keys_per_pass"]
        out.append({c: row.get(c) for c in HEALTH_COLUMNS})
    out.sort(key=lambda r: (r["cluster"], r["broker"], r["partition"]))
    return out, _rows(per_segment, SEGMENT_COLUMNS)


def group_states(root: str) -> dict[tuple, str | None] | None:
    """{(cluster, group): the coordinator's state as last collected}, None without that dataset."""
    try:
        gc = read_dataset(root, "group_coordinators", columns=["cluster", "group", "observed_at", "state"])
    except SystemExit:
        return None
    last = gc.sort_values("observed_at", kind="stable").groupby(["cluster", "group"]).tail(1)
    return {(c, g): _native(s) for c, g, s in zip(last["cluster"], last["group"], last["state"])}


def trim_plans(records, segments, health_rows: list[dict], states: dict | None,
               partitions: list[int] | None) -> dict[str, dict]:
    """{cluster: plan} (the Spark trim_plan job's build)."""
    import pandas as pd

    unhealthy = [h for h in health_rows if h["verdict"] != "HEALTHY"]
    if partitions is not None:
        unhealthy = [h for h in health_rows if h["partition"] in partitions]
    targets = {(h["cluster"], h["broker"], h["partition"]) for h in unhealthy}
    latest = latest_inventory(segments).sort_values(["cluster", "partition", "broker", "base_offset"])
    replicas: dict[tuple, list[dict]] = defaultdict(list)
    for seg in _rows(latest, list(latest.columns)):
        if (seg["cluster"], seg["broker"], seg["partition"]) in targets:
            if seg.get("modified_at") is not None:
                seg["modified_at"] = pd.Timestamp(seg["modified_at"]).to_pydatetime()
            replicas[(seg["cluster"], seg["broker"], seg["partition"])].append(seg)
    planning.mark_quarantine(replicas)
    cutoffs = planning.cutoffs_of(replicas)
    relevant = records[[k in cutoffs for k in zip(records["cluster"], records["partition"])]] if len(records) else records
    newest = newest_per_key(relevant, ["tombstone", "key_version", "committed_offset", "generation", "has_members"])
    newest["cutoff"] = [cutoffs[k] for k in zip(newest["cluster"], newest["partition"])]
    lost = newest[_true(newest["tombstone"].eq(False)) & (newest["offset"] < newest["cutoff"])]
    at = ["cluster", "partition", "offset"]
    metadata = relevant[at + ["metadata"]].drop_duplicates(at)
    commits = lost[_true(lost["key_version"].ne(2))].merge(metadata, on=at, how="left")
    gm = newest[_true(newest["key_version"].eq(2))]
    live_meta = pd.DataFrame({"cluster": gm["cluster"], "group": gm["group"],
                              "metadata_live": ~gm["tombstone"] & gm["has_members"]})
    commits = commits.merge(live_meta, on=["cluster", "group"], how="left")
    commits["group_state"] = [(states or {}).get((c, g)) for c, g in zip(commits["cluster"], commits["group"])]
    order = ["cluster", "partition", "group", "topic", "topic_partition"]
    commits = commits.sort_values(order, na_position="first", kind="stable")
    live_groups = (newest[_true(newest["tombstone"].eq(False)) & _true(newest["key_version"].ne(2))]
                   [["cluster", "partition", "group"]].drop_duplicates().sort_values(["cluster", "partition", "group"]))
    metadata_lost = lost[_true(lost["key_version"].eq(2))].sort_values(["cluster", "partition", "group"],
                                                                         kind="stable")
    health_map = {(h["cluster"], h["broker"], h["partition"]): h for h in unhealthy}
    return planning.assemble(replicas, _rows(commits, planning.COMMIT_FIELDS),
                             _rows(live_groups, ["cluster", "partition", "group"]),
                             _rows(metadata_lost, ["cluster", "partition", "group", "generation", "offset"]), health_map)


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
    clusters, brokers = _settings(fleet_file, data_root)
    rows, per_segment = health(records, segments, checkpoints, clusters, brokers, bloat_ratio, min_bloat_bytes)
    folder = core.location(out)
    folder.mkdir(parents=True, exist_ok=True)
    publish_rows(rows, folder / "health.jsonl")
    publish_rows(per_segment, folder / "segments.jsonl")
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


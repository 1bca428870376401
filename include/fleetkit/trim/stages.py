"""The trim_health job's and the trim plan's stages over Arrow tables: one definition, run by
both engines.

Two stages read every __consumer_offsets record and give partial results that merge:

    summarize(rows, bases)         records per segment bucket (distinct offsets, tombstones, bytes)
    newest_per_key(records, cols)  each compaction key's newest record (merging its own outputs)

and then, on what is left (a few rows per segment, per key or per replica):

    live_keys(newest)              live keys and bytes per partition (partial sums: sum_by)
    checkpoint_facts(segs, cps)    cleaner checkpoint progress per replica
    after_marks(records, since)    the records of a log replaced under the collection left out
    health(...)                    segment messages, the facts per replica and trim.rules' verdict
    plan_rows(newest, cutoffs)     the removed commits, group-metadata liveness and live groups
    plans(...)                     the trim plan (trim.planning.assemble)

The Spark job (spark_jobs/trim_health.py) runs the first two in its tasks (mapInArrow: per task,
then once more per key after a shuffle) and collects the small results for the rest;
fleetkit.trim.inprocess runs each once on the whole data root. The outputs' columns are declared in
fleetkit.core.datasets.FINDINGS (offsets_health, offsets_segments).

No Spark, no pandas: numpy and pyarrow.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from fleetkit.core.datasets import FINDINGS
from fleetkit.trim import planning, rules
from fleetkit.trim.cleaner import capacity

PKEYS = ["cluster", "partition"]
REPLICA = ["cluster", "broker", "partition"]
HEALTH = FINDINGS["offsets_health"]
SEGMENTS = FINDINGS["offsets_segments"]
#: a compaction key: offset commits by (group, topic, partition), group metadata (key version 2) by
#: group alone (topic and topic_partition null)
KEY = ["cluster", "partition", "group", "topic", "topic_partition"]
SUMMARY = pa.schema([("_pid", pa.int32()), ("bucket", pa.int64()), ("n", pa.int64()), ("tombstones", pa.int64()),
                     ("bytes", pa.int64()), ("max_offset", pa.int64())])
LIVE = pa.schema([("cluster", pa.string()), ("partition", pa.int32()), ("live_keys", pa.int64()),
                  ("live_bytes", pa.int64())])
#: what newest_per_key always keeps besides its `cols`
NEWEST_BASE = ("key_version",)
#: plan_rows' output: `_row` 0 a removed live key (commit or group metadata), 1 a group's newest
#: group-metadata record (metadata_live), 2 a (cluster, partition, group) with a live offset
PLAN_ROWS = pa.schema([("_row", pa.int32()), ("cluster", pa.string()), ("partition", pa.int32()),
                       ("group", pa.string()), ("topic", pa.string()), ("topic_partition", pa.int32()),
                       ("offset", pa.int64()), ("key_version", pa.int16()), ("committed_offset", pa.int64()),
                       ("generation", pa.int32()), ("metadata", pa.string()), ("metadata_live", pa.bool_())])
PLAN_COLS = ["tombstone", "committed_offset", "generation", "has_members", "metadata"]


def after_marks(records: pa.Table, since: list[tuple]) -> pa.Table:
    """offsets_topic_records without the rows of a log the collection found replaced under it:
    `since` (fleetkit.collection.log_marks.superseded_since) is (cluster, partition, time) of each
    such partition, whose rows collected before that time are dropped."""
    if not since or not records.num_rows:
        return records
    # a mask per replaced partition (few), not a join: the records carry columns Acero cannot join over
    drop = pa.array([False] * records.num_rows)
    for cluster, partition, t in since:
        # a row of the partition not known to be collected since (no time) goes too
        older = pc.and_(pc.and_(pc.equal(records["cluster"], cluster), pc.equal(records["partition"], partition)),
                        pc.fill_null(pc.less(records["observed_at"], pa.scalar(t, records["observed_at"].type)), True))
        drop = pc.or_(drop, pc.fill_null(older, False))
    return records.filter(pc.invert(drop))


def latest_inventory(segments: pa.Table) -> pa.Table:
    """Each broker's segments of its newest inventory."""
    if not segments.num_rows:
        return segments
    last = segments.group_by(["cluster", "broker"]).aggregate([("observed_at", "max")])
    joined = segments.join(last, ["cluster", "broker"])
    return joined.filter(pc.equal(joined["observed_at"], joined["observed_at_max"])).drop_columns(["observed_at_max"])


def partition_ids(latest: pa.Table) -> tuple[pa.Table, dict[int, list[int]]]:
    """A number per (cluster, partition) of the inventory (cluster, partition, _pid) and each one's
    segment base offsets (the union over its brokers), sorted: what `summarize` buckets by."""
    triples = sorted({(c, p, b) for c, p, b in zip(*(latest[k].to_pylist() for k in (*PKEYS, "base_offset")))})
    ids: dict[tuple, int] = {}
    bases: dict[int, list[int]] = {}
    for c, p, base in triples:
        bases.setdefault(ids.setdefault((c, p), len(ids)), []).append(base)
    table = pa.table({"cluster": pa.array([c for c, _ in ids], pa.string()),
                      "partition": pa.array([p for _, p in ids], pa.int32()),
                      "_pid": pa.array(list(ids.values()), pa.int32())})
    return table, bases


def summarize(rows: pa.Table, bases: dict[int, list[int]]) -> pa.Table:
    """Rows (_pid, offset, tombstone, size_bytes; every copy of a record among them: a record read
    twice counts once) -> per (_pid, bucket): records, tombstones, bytes, highest offset, bucket
    being the greatest segment base offset <= the offset (null below every base). Numpy on whole
    columns: one sort, then a binary search per partition. Outputs of disjoint offsets add up."""
    if not rows.num_rows:
        return SUMMARY.empty_table()
    pids = rows["_pid"].to_numpy(zero_copy_only=False)
    offsets = rows["offset"].to_numpy(zero_copy_only=False)
    tombs = pc.fill_null(rows["tombstone"], False).to_numpy(zero_copy_only=False)
    sizes = pc.fill_null(rows["size_bytes"], 0).to_numpy(zero_copy_only=False)
    order = np.lexsort((offsets, pids))
    pids, offsets, tombs, sizes = pids[order], offsets[order], tombs[order], sizes[order]
    starts = np.concatenate(([0], np.flatnonzero(pids[1:] != pids[:-1]) + 1, [len(pids)]))
    out = []
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
        last = np.searchsorted(idx, np.arange(k), side="right") - 1  # sorted: a bucket's last offset
        used = np.nonzero(n)[0]
        out.append(pa.Table.from_arrays([
            pa.array(np.full(len(used), pid, dtype=np.int32)),
            pa.array([None if u == 0 else int(b[u - 1]) for u in used], type=pa.int64()),
            pa.array(n[used].astype(np.int64)), pa.array(np.rint(nt[used]).astype(np.int64)),
            pa.array(np.rint(nb[used]).astype(np.int64)), pa.array(off[last[used]])], schema=SUMMARY))
    return pa.concat_tables(out)


def newest_per_key(records: pa.Table, cols: list[str]) -> pa.Table:
    """Each compaction key's newest record: KEY, offset, key_version and `cols` of that record
    (nulls kept). Its own outputs merge: newest_per_key of the concatenated outputs of any split of
    the records is newest_per_key of all of them (records read twice are identical)."""
    cols = [c for c in cols if c not in NEWEST_BASE]
    gm = pc.fill_null(pc.equal(records["key_version"], 2), False)
    t = pa.table({"cluster": records["cluster"], "partition": records["partition"], "group": records["group"],
                  "topic": pc.if_else(gm, pa.scalar(None, records["topic"].type), records["topic"]),
                  "topic_partition": pc.if_else(gm, pa.scalar(None, records["topic_partition"].type),
                                                records["topic_partition"]),
                  "_gm": gm, "offset": records["offset"], "key_version": records["key_version"],
                  **{c: records[c] for c in cols}})
    t = t.sort_by([("offset", "ascending")])
    last = pc.ScalarAggregateOptions(skip_nulls=False)
    out = t.group_by([*KEY, "_gm"], use_threads=False).aggregate(
        [(c, "last", last) for c in ("offset", "key_version", *cols)])
    return out.rename_columns([n[:-len("_last")] if n.endswith("_last") else n for n in out.column_names]) \
        .select([*KEY, "offset", "key_version", *cols])


def sum_by(table: pa.Table, keys: list[str], schema: pa.Schema) -> pa.Table:
    """Partial sums merged: `schema`'s other columns summed per `keys`."""
    values = [n for n in schema.names if n not in keys]
    if not table.num_rows:
        return schema.empty_table()
    out = table.group_by(keys).aggregate([(v, "sum") for v in values])
    return out.rename_columns([n[:-len("_sum")] if n.endswith("_sum") else n for n in out.column_names]) \
        .select(schema.names).cast(schema)


def live_keys(newest: pa.Table) -> pa.Table:
    """Per (cluster, partition): the keys whose newest record is not a tombstone, and their bytes
    (partial when `newest` holds part of the keys: merge with sum_by(..., PKEYS, LIVE))."""
    live = newest.filter(pc.equal(newest["tombstone"], False))
    if not live.num_rows:
        return LIVE.empty_table()
    out = live.group_by(PKEYS).aggregate([("offset", "count"), ("size_bytes", "sum")])
    return pa.table({"cluster": out["cluster"], "partition": out["partition"].cast(pa.int32()),
                     "live_keys": out["offset_count"].cast(pa.int64()),
                     "live_bytes": pc.fill_null(out["size_bytes_sum"], 0).cast(pa.int64())}, schema=LIVE)


#: checkpoint_facts' rows
CHECKPOINTS = pa.schema([("cluster", pa.string()), ("broker", pa.int32()), ("partition", pa.int32()),
                         ("observations", pa.int64()), ("checkpoint_first", pa.int64()), ("checkpoint_last", pa.int64()),
                         ("dirty_bytes_first", pa.int64()), ("dirty_bytes_last", pa.int64())])


def checkpoint_facts(segments: pa.Table, checkpoints: pa.Table) -> pa.Table:
    """Per (cluster, broker, partition) (CHECKPOINTS): its observations, and the checkpoint and dirty
    bytes (segments at or above the checkpoint) at its first and last observation (run on every
    observation of a replica)."""
    per: dict[tuple, dict] = {}
    cps = {}
    for r in checkpoints.select([*REPLICA, "observed_at", "checkpoint_offset"]).to_pylist():
        key = tuple(r[k] for k in (*REPLICA, "observed_at"))
        if r["checkpoint_offset"] is not None:
            cps.setdefault(key, r["checkpoint_offset"])
    for r in segments.select([*REPLICA, "observed_at", "base_offset", "size_bytes"]).to_pylist():
        key = tuple(r[k] for k in (*REPLICA, "observed_at"))
        cp = cps.get(key)
        obs = per.setdefault(key, {"checkpoint": cp, "dirty_bytes": 0})
        if cp is None or r["base_offset"] >= cp:
            obs["dirty_bytes"] += r["size_bytes"] or 0
    out: dict[tuple, dict] = {}
    for key in sorted(per, key=lambda k: (k[:3], k[3])):
        replica, obs = key[:3], per[key]
        f = out.get(replica)
        if f is None:
            f = out[replica] = {**dict(zip(REPLICA, replica)), "observations": 0,
                                "checkpoint_first": obs["checkpoint"], "dirty_bytes_first": obs["dirty_bytes"]}
        f["observations"] += 1
        f["checkpoint_last"], f["dirty_bytes_last"] = obs["checkpoint"], obs["dirty_bytes"]
    return pa.Table.from_pylist(list(out.values()), schema=CHECKPOINTS)


def segment_messages(summary: list[dict], latest: pa.Table) -> list[dict]:
    """Messages per segment of each broker (SEGMENTS): the summary's buckets (cluster, partition,
    bucket, n) in [base_offset, next base) of that broker's segments."""
    buckets: dict[tuple, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for s in summary:
        if s["bucket"] is not None:
            buckets[(s["cluster"], s["partition"])][s["bucket"]] += s["n"]
    rows = sorted(latest.to_pylist(), key=lambda r: (r["cluster"], r["broker"], r["partition"], r["base_offset"]))
    out = []
    for i, r in enumerate(rows):
        nxt = rows[i + 1] if i + 1 < len(rows) else None
        same = nxt is not None and all(nxt[k] == r[k] for k in REPLICA)
        next_base = nxt["base_offset"] if same else None
        inside = buckets.get((r["cluster"], r["partition"]), {})
        messages = sum(n for b, n in inside.items() if b >= r["base_offset"] and (next_base is None or b < next_base))
        out.append({**{c: r[c] for c in SEGMENTS.names if c in r}, "next_base": next_base, "messages": messages})
    return [{c: s[c] for c in SEGMENTS.names} for s in out]


def health(latest: pa.Table, summary: pa.Table, live: pa.Table, checkpoints: pa.Table,
           clusters: dict, brokers: dict, bloat_ratio: float, min_bloat_bytes: int) -> tuple[pa.Table, pa.Table]:
    """(health per replica of the newest inventory (HEALTH, sorted), messages per segment
    (SEGMENTS)). `summary`: summarize's rows with cluster and partition; `live`: live_keys merged;
    `checkpoints`: checkpoint_facts; `clusters`: the fleet file's cleaner settings per cluster
    (kafka_version, dedupe_buffer_size, threads, load_factor); `brokers`: the brokers' reported ones
    per (cluster, broker), with the topic's min_cleanable_ratio and segment_bytes."""
    sums = summary.to_pylist()
    per_segment = segment_messages(sums, latest)
    cps = {tuple(r.pop(k) for k in REPLICA): r for r in checkpoints.to_pylist()}
    totals: dict[tuple, dict] = {}
    for s in sums:
        t = totals.setdefault((s["cluster"], s["partition"]), {"records": 0, "tombstones": 0, "record_bytes": 0})
        t["records"] += s["n"]
        t["tombstones"] += s["tombstones"]
        t["record_bytes"] += s["bytes"]
    lives = {(r["cluster"], r["partition"]): r for r in live.to_pylist()}
    disk: dict[tuple, dict] = {}
    for s in per_segment:
        d = disk.setdefault(tuple(s[k] for k in REPLICA), {"log_dir": s["log_dir"], "segments": 0, "disk_bytes": 0,
                                                           "largest_segment_messages": 0})
        d["segments"] += 1
        d["disk_bytes"] += s["size_bytes"] or 0
        d["largest_segment_messages"] = max(d["largest_segment_messages"], s["messages"])
    out = []
    for key in sorted(disk):
        c, b, p = key
        row = {"cluster": c, "broker": b, "partition": p, **disk[key]}
        t = totals.get((c, p))
        lv = lives.get((c, p), {})
        row.update(t or {"records": 0, "tombstones": 0, "record_bytes": 0})
        row["live_keys"], row["live_bytes"] = (lv.get("live_keys") or 0, lv.get("live_bytes") or 0) if t else (0, 0)
        # no record read of the partition: no ratio
        row["duplicate_ratio"] = None if t is None else 1 - row["live_keys"] / row["records"] if row["records"] else 0.0
        row.update({"checkpoint_first": None, "checkpoint_last": None, "dirty_bytes_first": None,
                    "dirty_bytes_last": None, "observations": 0}, **cps.get(key, {}))
        settings = dict(clusters.get(c) or {})
        reported = brokers.get((c, b), {})
        for name in ("dedupe_buffer_size", "threads", "load_factor"):
            if reported.get(name) is not None:
                settings[name] = reported[name]
        settings["min_cleanable_ratio"] = reported.get("min_cleanable_ratio")
        settings["segment_bytes"] = reported.get("segment_bytes")
        row.update(settings)
        row["verdict"], row["reason"], row["fix"] = rules.judge_replica(row, bloat_ratio, min_bloat_bytes)
        row["keys_per_pass"] = capacity(int(row["dedupe_buffer_size"]), int(row["threads"]),
                                        float(row["load_factor"]))["keys_per_pass"]
        out.append({n: row.get(n) for n in HEALTH.names})
    return pa.Table.from_pylist(out, schema=HEALTH), pa.Table.from_pylist(per_segment, schema=SEGMENTS)


def replicas_to_trim(latest: pa.Table, health_rows: list[dict], partitions: list[int] | None):
    """({(cluster, broker, partition): its segments, oldest first, each marked "quarantine"}, the
    health rows of those replicas): the unhealthy ones, or with `partitions` those partitions'."""
    chosen = [h for h in health_rows if (h["verdict"] != "HEALTHY" if partitions is None
                                         else h["partition"] in partitions)]
    targets = {tuple(h[k] for k in REPLICA) for h in chosen}
    replicas: dict[tuple, list[dict]] = defaultdict(list)
    for seg in sorted(latest.to_pylist(), key=lambda r: (r["cluster"], r["partition"], r["broker"], r["base_offset"])):
        key = tuple(seg[k] for k in REPLICA)
        if key in targets:
            replicas[key].append(seg)
    return planning.mark_quarantine(replicas), {tuple(h[k] for k in REPLICA): h for h in chosen}


def plan_rows(newest: pa.Table, cutoffs: dict[tuple, int]) -> pa.Table:
    """What the plan needs of some keys' newest records (newest_per_key with PLAN_COLS, every record
    of each key among them) of the partitions in `cutoffs`: PLAN_ROWS."""
    out = []
    for r in newest.to_pylist():
        cut = cutoffs.get((r["cluster"], r["partition"]))
        if cut is None:
            continue
        live, kv = r["tombstone"] is False, r["key_version"]
        if kv is None:  # neither a commit nor group metadata (as SQL compares a null)
            continue
        if kv == 2:
            out.append({**r, "_row": 1, "metadata_live": _and(_not(r["tombstone"]), r["has_members"])})
        elif live:
            out.append({"_row": 2, "cluster": r["cluster"], "partition": r["partition"], "group": r["group"]})
        if live and r["offset"] < cut:
            out.append({**r, "_row": 0})
    return pa.Table.from_pylist(out, schema=PLAN_ROWS)


def _not(a):
    return None if a is None else not a


def _and(a, b):
    """SQL's three-valued AND."""
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _order(*values):
    return tuple((v is not None, v if v is not None else 0) for v in values)


def plans(replicas: dict, health_map: dict, rows: pa.Table, states: dict | None) -> dict[str, dict]:
    """{cluster: plan} from replicas_to_trim and the plan_rows of every key of those partitions
    (any number of parts concatenated); `states`: {(cluster, group): the coordinator's state as last
    collected} (group_states), None when never collected."""
    lost, live_groups, meta_live = [], set(), {}
    for r in rows.to_pylist():
        if r["_row"] == 0:
            lost.append(r)
        elif r["_row"] == 1:
            meta_live[(r["cluster"], r["group"])] = r["metadata_live"]
        else:
            live_groups.add((r["cluster"], r["partition"], r["group"]))
    commits = sorted((dict(r, metadata_live=meta_live.get((r["cluster"], r["group"])),
                           group_state=(states or {}).get((r["cluster"], r["group"])))
                      for r in lost if r["key_version"] != 2),
                     key=lambda r: _order(*(r[k] for k in KEY)))
    metadata_lost = sorted((r for r in lost if r["key_version"] == 2),
                           key=lambda r: _order(r["cluster"], r["partition"], r["group"]))
    return planning.assemble(replicas, commits,
                             [{"cluster": c, "partition": p, "group": g}
                              for c, p, g in sorted(live_groups, key=lambda k: _order(*k))],
                             metadata_lost, health_map)


STATES = pa.schema([("cluster", pa.string()), ("group", pa.string()), ("observed_at", pa.timestamp("us", tz="UTC")),
                    ("state", pa.string())])


def states_table(states: dict[tuple, tuple]) -> pa.Table:
    """group_states(..., with_time=True) as rows of group_coordinators (STATES): they merge."""
    return pa.Table.from_pylist([{"cluster": c, "group": g, "observed_at": t, "state": s}
                                 for (c, g), (t, s) in states.items()], schema=STATES)


def group_states(coordinators: pa.Table, with_time: bool = False) -> dict[tuple, str | None]:
    """{(cluster, group): the state of its newest group_coordinators row} (with `with_time`, (its
    time, the state))."""
    out: dict[tuple, tuple] = {}
    for r in coordinators.select(["cluster", "group", "observed_at", "state"]).to_pylist():
        key = (r["cluster"], r["group"])
        if key not in out or (r["observed_at"] is not None and (out[key][0] is None or r["observed_at"] >= out[key][0])):
            out[key] = (r["observed_at"], r["state"])
    return out if with_time else {k: v[1] for k, v in out.items()}

"""The stuck job's per-partition facts computed column-wise (numpy over Arrow tables): what
fleetkit.stuck.rules.features computes for one partition's rows, for every partition of a table at
once. The Spark job (spark_jobs/stuck_partitions.py) hands each task's rows here (mapInArrow);
rules.features stays the reference (tests/unit/test_stuck_key_features.py compares the two)."""

from __future__ import annotations

#: a partition of a group in one offsets store: a ZooKeeper group and a Kafka group of the same
#: name stay apart (`source` null in older files is read as kafka)
KEYS = ["cluster", "source", "group", "topic", "partition"]

#: a key as a 64-bit hash of KEYS (Spark's xxhash64): what the job hands the tasks instead of the
#: four strings when no two keys of the input share it (the job checks, else it hands the strings)
HASH_KEYS = ["_k"]
_KEY_TYPES = {"cluster": "string", "source": "string", "group": "string", "topic": "string", "partition": "int",
              "_k": "long"}

#: the columns `key_features` reads besides the key's
FACT_INPUT = ["observed_at", "committed_offset", "log_start_offset", "log_end_offset", "assigned",
              "commit_interval_seconds", "committed_at", "committed_record_timestamp"]

#: the facts of one key over its committed snapshots, as `key_features` yields them after the key's
#: columns (the columns and types of the aggregation they replace)
FACTS_SCHEMA = ("snapshots long, first_at timestamp, last_at timestamp, latest_committed long, "
                "latest_log_start long, latest_log_end long, latest_assigned boolean, first_committed long, "
                "first_log_end long, rewound boolean, never_moved boolean, lag_never_decreased boolean, "
                "unchanged_since timestamp, snapshot_interval double, change_gap double, commit_interval double, "
                "committed_at double, record_ts double, streak long, streak_start double, before_at double, "
                "before_same boolean")



class _Columns:
    """(values, nulls) of a table's columns as numpy, in the table's row order, each converted once:
    timestamps as microseconds, strings as codes (equal strings, equal codes), nulls filled (0,
    False, code -1) with the null mask beside."""

    def __init__(self, table):
        self.table, self.done = table, {}

    def __call__(self, name):
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if name not in self.done:
            col = self.table.column(name)
            if pa.types.is_timestamp(col.type):
                col = col.cast(pa.int64())
            nulls = col.is_null().to_numpy(zero_copy_only=False)
            if pa.types.is_string(col.type):
                v = pc.dictionary_encode(col).combine_chunks().indices.fill_null(-1).to_numpy(zero_copy_only=False)
            elif pa.types.is_boolean(col.type):
                v = col.fill_null(False).to_numpy(zero_copy_only=False)
            elif pa.types.is_floating(col.type):
                v = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.float64)
            else:
                v = col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
            self.done[name] = (v, nulls)
        return self.done[name]

def features_schema(key_columns: list[str]) -> str:
    """The DDL schema of `key_features`' output for these key columns."""
    return ", ".join(f"`{c}` {_KEY_TYPES[c]}" for c in key_columns) + ", " + FACTS_SCHEMA


def key_features(table, lo_us: int, key_columns: list[str] = KEYS):
    """The facts of fleetkit.stuck.rules.features for every key of `table` (committed snapshot rows,
    observed at or before as_of, keyed by `key_columns`; `lo_us`: the window's start in microseconds), numpy over whole
    columns: one sort by (key, observed_at), then each fact from neighbouring rows and per-key
    reductions. Snapshot pairs are consecutive rows of a key, both in the window; a change is a row
    whose predecessor showed another offset; the trailing streak is the run of last rows in the
    window at the latest offset with lag > 0 (rules.features is the reference, tests compare)."""
    import numpy as np
    import pyarrow as pa

    n = table.num_rows
    if n == 0:
        return None
    raw = _Columns(table)

    # one sort by (key, observed_at); row i below is row order[i] of the table
    order = np.lexsort((raw("observed_at")[0], *reversed([raw(k)[0] for k in key_columns])))
    obs = raw("observed_at")[0][order]
    first = np.zeros(n, dtype=bool)
    first[0] = True
    for k in key_columns:
        kv = raw(k)[0][order]
        first[1:] |= kv[1:] != kv[:-1]
    starts = np.flatnonzero(first)
    gid = np.cumsum(first) - 1
    g = len(starts)
    size = np.diff(np.append(starts, n))
    last_idx = starts + size - 1

    secs = obs / 1e6  # as Spark casts a timestamp to double
    c = raw("committed_offset")[0][order]
    leo, leo_null = (a[order] for a in raw("log_end_offset"))
    lag = leo - c
    in_w = obs >= lo_us
    prev = ~first
    prev_c = np.concatenate(([0], c[:-1]))
    changed = prev & (prev_c != c)  # a row whose predecessor showed another offset
    pair = in_w & np.concatenate(([False], in_w[:-1])) & prev

    # in-window rows are the last rows of each key (sorted by time): the first and last of them
    n_in = np.bincount(gid, weights=in_w, minlength=g).astype(np.int64)
    has = n_in > 0
    first_in = last_idx - n_in + 1
    li = np.where(has, last_idx, 0)
    fi = np.where(has, first_in, 0)

    def col_at(name, idx, mask, seconds=False):  # a column's value at sorted rows idx; null where ~mask
        v, nulls = raw(name)
        src = order[idx]
        values = v[src] / 1e6 if seconds else v[src]
        return pa.array(values, mask=~mask | nulls[src])

    def per_key_any(mask_rows, values):  # (any over rows, whether any row counted) per key
        cnt = np.bincount(gid[mask_rows], minlength=g)
        hit = np.bincount(gid[mask_rows & values], minlength=g)
        return hit > 0, cnt > 0

    rewound, any_pair = per_key_any(pair, c < prev_c)
    prev_lag = np.concatenate(([0], lag[:-1]))
    prev_lag_null = np.concatenate(([True], leo_null[:-1]))
    grew = ~leo_null & ~prev_lag_null & (lag >= prev_lag)
    decreased, _ = per_key_any(pair, ~grew)
    c_in_min = np.full(g, np.iinfo(np.int64).max)
    c_in_max = np.full(g, np.iinfo(np.int64).min)
    np.minimum.at(c_in_min, gid[in_w], c[in_w])
    np.maximum.at(c_in_max, gid[in_w], c[in_w])

    # unchanged since: the newest row that started a run of one offset (its first row or a change)
    run_start = first | changed
    rs_idx = np.zeros(g, dtype=np.int64)
    np.maximum.at(rs_idx, gid[run_start], np.flatnonzero(run_start))

    def medians(rows, values):  # Spark's percentile(0.5): linear between the two middle values
        keys_, vals = gid[rows], values[rows]
        o = np.lexsort((vals, keys_))
        keys_, vals = keys_[o], vals[o]
        cnt = np.bincount(keys_, minlength=g)
        begin = np.concatenate(([0], np.cumsum(cnt)[:-1]))
        ok = cnt > 0
        lo_i = np.where(ok, begin + (cnt - 1) // 2, 0)
        hi_i = np.where(ok, begin + cnt // 2, 0)
        if len(vals) == 0:
            return pa.nulls(g, pa.float64())
        a, b = vals[lo_i], vals[hi_i]
        med = np.where(lo_i == hi_i, a, 0.5 * a + 0.5 * b)
        return pa.array(med, mask=~ok)

    prev_secs = np.concatenate(([0.0], secs[:-1]))
    snapshot_interval = medians(pair, secs - prev_secs)
    # gaps between consecutive changes of a key: the later one in the window, the earlier one too
    ch = np.flatnonzero(changed)
    gap_rows = np.zeros(n, dtype=bool)
    gap_vals = np.zeros(n)
    if len(ch) > 1:
        a, b = ch[:-1], ch[1:]
        ok = (gid[a] == gid[b]) & in_w[b] & (secs[a] >= lo_us / 1e6)
        gap_rows[b[ok]] = True
        gap_vals[b[ok]] = secs[b[ok]] - secs[a[ok]]
    change_gap = medians(gap_rows, gap_vals)

    # the trailing streak: rows after the last "break" (out of the window, another offset than the
    # key's last, or no positive lag)
    v_last = c[last_idx][gid]
    brk = ~(in_w & (c == v_last) & ~leo_null & (lag > 0))
    last_brk = np.full(g, -1, dtype=np.int64)
    np.maximum.at(last_brk, gid[brk], np.flatnonzero(brk))
    has_brk = last_brk >= 0
    pos_after = np.where(has_brk, last_brk - starts + 1, 0)  # rows up to and including the last break
    streak = size - pos_after
    ss_idx = np.where(streak > 0, starts + pos_after, 0)
    bi = np.where(has_brk, last_brk, 0)

    def ts_at(idx, mask):
        return pa.array(obs[idx], mask=~mask).cast(pa.timestamp("us", tz="UTC"))

    out = {k: table.column(k).take(pa.array(order[starts])) for k in key_columns}
    out.update({
        "snapshots": pa.array(n_in),
        "first_at": ts_at(fi, has), "last_at": ts_at(li, has),
        "latest_committed": col_at("committed_offset", li, has),
        "latest_log_start": col_at("log_start_offset", li, has),
        "latest_log_end": col_at("log_end_offset", li, has),
        "latest_assigned": col_at("assigned", li, has),
        "first_committed": col_at("committed_offset", fi, has),
        "first_log_end": col_at("log_end_offset", fi, has),
        "rewound": pa.array(rewound, mask=~any_pair),
        "never_moved": pa.array(c_in_min == c_in_max, mask=~has),
        "lag_never_decreased": pa.array(~decreased, mask=~any_pair),
        "unchanged_since": ts_at(rs_idx, np.ones(g, dtype=bool)),
        "snapshot_interval": snapshot_interval, "change_gap": change_gap,
        "commit_interval": col_at("commit_interval_seconds", li, has),
        "committed_at": col_at("committed_at", li, has, seconds=True),
        "record_ts": col_at("committed_record_timestamp", li, has, seconds=True),
        "streak": pa.array(streak),
        "streak_start": pa.array(secs[ss_idx], mask=streak == 0),
        "before_at": pa.array(secs[bi], mask=~has_brk),
        "before_same": pa.array(c[bi] == c[last_idx], mask=~has_brk),
    })
    return pa.table(out)


#: a group in one offsets store, and the same as a 64-bit hash (Spark's xxhash64), as for KEYS
GROUP_KEYS = ["cluster", "source", "group"]
GROUP_HASH_KEYS = ["_g"]
_KEY_TYPES.update({"_g": "long"})

#: `group_facts` reads, besides the group's columns: observed_at, _rebalancing (the row's group
#: state is a rebalancing one), generation, rejoins, and _cause / _assignor (the codes, 1-based
#: positions in the job's vocabulary, of the rejoin cause and the assignor); it yields, after them:
GROUP_FACTS_SCHEMA = "times long, rebalancing long, rebalances long, rejoins long, cause_code long, assignor_code long"


def group_facts(table, lo_us: int, group_columns: list[str] = GROUP_KEYS):
    """The facts fleetkit.stuck.rules.storm reads from a group's snapshots in the window (rows
    observed at or after `lo_us`; the table holds none after as_of), for every group of `table`:
    distinct snapshot times, how many of them in a rebalancing state (any row of the group at that
    time), the spread of the generation and of the rejoins (0 without any), and the cause and assignor
    codes of the newest row that has one. Rows of one group at one time come from one DescribeGroups
    answer and agree on these (the reference takes the first non-null of each time)."""
    import numpy as np
    import pyarrow as pa

    raw = _Columns(table)
    obs_all = raw("observed_at")[0]
    rows = np.flatnonzero(obs_all >= lo_us)
    if len(rows) == 0:
        return None
    obs = obs_all[rows]
    order = np.lexsort((obs, *reversed([raw(k)[0][rows] for k in group_columns])))
    rows, obs = rows[order], obs[order]
    n = len(rows)
    first = np.zeros(n, dtype=bool)
    first[0] = True
    for k in group_columns:
        kv = raw(k)[0][rows]
        first[1:] |= kv[1:] != kv[:-1]
    gid = np.cumsum(first) - 1
    g = int(gid[-1]) + 1
    new_time = first.copy()
    new_time[1:] |= obs[1:] != obs[:-1]
    times = np.bincount(gid[new_time], minlength=g)
    rb = raw("_rebalancing")[0][rows].astype(bool)
    t_starts = np.flatnonzero(new_time)
    rebalancing_at = np.maximum.reduceat(rb, t_starts) if n else rb
    rebalancing = np.bincount(gid[t_starts][rebalancing_at.astype(bool)], minlength=g)

    def spread(name):
        v, nulls = raw(name)
        v, ok = v[rows], ~nulls[rows]
        hi = np.full(g, np.iinfo(np.int64).min)
        lo = np.full(g, np.iinfo(np.int64).max)
        np.maximum.at(hi, gid[ok], v[ok])
        np.minimum.at(lo, gid[ok], v[ok])
        seen = np.bincount(gid[ok], minlength=g) > 0
        return np.where(seen, hi - lo, 0)

    def newest(name):  # the value of the group's newest row that has one (rows are sorted by time)
        v, nulls = raw(name)
        ok = ~nulls[rows]
        at = np.full(g, -1, dtype=np.int64)
        np.maximum.at(at, gid[ok], np.flatnonzero(ok))
        return pa.array(v[rows][np.where(at >= 0, at, 0)], mask=at < 0)

    out = {k: table.column(k).take(pa.array(rows[first])) for k in group_columns}
    out.update({"times": pa.array(times), "rebalancing": pa.array(rebalancing),
                "rebalances": pa.array(spread("generation")), "rejoins": pa.array(spread("rejoins")),
                "cause_code": newest("_cause"), "assignor_code": newest("_assignor")})
    return pa.table(out)


_ARROW_TYPES = {"long": "int64", "int": "int32", "string": "string", "double": "float64", "boolean": "bool_"}


def task_output_schema(key_columns: list[str], group_columns: list[str]):
    """The Arrow schema of what the job's tasks yield: `_row` (0: a key's facts, 1: a group's), the
    key's and the group's columns, then FACTS_SCHEMA and GROUP_FACTS_SCHEMA (null where the row
    is of the other kind)."""
    import pyarrow as pa

    def arrow(ddl: str):
        return pa.timestamp("us", tz="UTC") if ddl == "timestamp" else getattr(pa, _ARROW_TYPES[ddl])()

    names = key_columns + [c for c in group_columns if c not in key_columns]
    fields = [pa.field("_row", pa.int32())] + [pa.field(c, arrow(_KEY_TYPES[c])) for c in names]
    for part in (FACTS_SCHEMA + ", " + GROUP_FACTS_SCHEMA).split(", "):
        name, ddl = part.split(" ")
        fields.append(pa.field(name, arrow(ddl)))
    return pa.schema(fields)


def task_output_ddl(key_columns: list[str], group_columns: list[str]) -> str:
    """task_output_schema as a Spark DDL string."""
    names = key_columns + [c for c in group_columns if c not in key_columns]
    return ("_row int, " + ", ".join(f"`{c}` {_KEY_TYPES[c]}" for c in names) + ", " + FACTS_SCHEMA + ", "
            + GROUP_FACTS_SCHEMA)


def task_facts(table, lo_us: int, key_columns: list[str], group_columns: list[str]):
    """One Spark task's rows (every row of a group, observed at or before as_of: committed rows and
    the window's uncommitted ones) -> the facts of its keys (`key_features` over the committed rows)
    and of its groups (`group_facts`), as one table of task_output_schema."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = task_output_schema(key_columns, group_columns)
    parts = [(0, key_features(table.filter(pc.is_valid(table.column("committed_offset"))), lo_us, key_columns)),
             (1, group_facts(table, lo_us, group_columns))]
    out = []
    for kind, part in parts:
        if part is None:
            continue
        n = part.num_rows
        out.append(pa.Table.from_arrays(
            [pa.array(np.full(n, kind, dtype=np.int32)) if f.name == "_row"
             else part.column(f.name).cast(f.type) if f.name in part.column_names else pa.nulls(n, f.type)
             for f in schema], schema=schema))
    return pa.concat_tables(out) if out else None

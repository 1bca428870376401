"""The stuck job's per-partition facts computed column-wise (numpy over Arrow tables): what
fleetkit.stuck.rules.features computes for one partition's rows, for every partition of a table at
once. fleetkit.stuck.stages.task runs it first, in each Spark task and once in process;
rules.features stays the reference (tests/unit/test_stuck_key_features.py compares the two)."""

from __future__ import annotations

#: a partition of a group in one offsets store: a ZooKeeper group and a Kafka group of the same
#: name stay apart (`source` null in older files is read as kafka)
KEYS = ["cluster", "source", "group", "topic", "partition"]

_KEY_TYPES = {"cluster": "string", "source": "string", "group": "string", "topic": "string", "partition": "int"}

#: a task gets a row's group (GROUP_KEYS below) as one string, fewer columns to move into Python:
#: for each of cluster, source and group its length in characters, a colon and the value, or "-"
#: for a null (`group_id`; the job builds it with Spark's functions). Any name survives: a length,
#: not a separator, ends each value.
GROUP_ID = "_group_id"


def group_id(cluster: str | None, source: str | None, group: str | None) -> str:
    return "".join("-" if v is None else f"{len(v)}:{v}" for v in (cluster, source, group))


def group_id_column(F):
    """`group_id` of each row's cluster, source and group as a Spark Column (the job's encoder;
    `F` is pyspark.sql.functions, passed in: this library imports no Spark)."""
    return F.concat(*[F.coalesce(F.concat(F.length(c).cast("string"), F.lit(":"), F.col(c)), F.lit("-"))
                      for c in ("cluster", "source", "group")])


def parse_group_id(text: str) -> tuple[str | None, str | None, str | None]:
    """group_id's parts back; ValueError for a string group_id cannot have built."""
    out, i = [], 0
    for _ in range(3):
        if text.startswith("-", i):
            out.append(None)
            i += 1
            continue
        colon = text.index(":", i)
        n = int(text[i:colon])
        if n < 0 or colon + 1 + n > len(text):
            raise ValueError(f"not a group id: {text!r}")
        out.append(text[colon + 1:colon + 1 + n])
        i = colon + 1 + n
    if i != len(text):
        raise ValueError(f"not a group id: {text!r}")
    return out[0], out[1], out[2]


def expand_group_ids(table):
    """`table` with its GROUP_ID column replaced by the cluster, source and group columns (each
    distinct id parsed once)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    ids = pc.dictionary_encode(table.column(GROUP_ID)).combine_chunks()
    parts = list(zip(*[parse_group_id(v) for v in ids.dictionary.to_pylist()])) or [(), (), ()]
    at = table.schema.get_field_index(GROUP_ID)
    table = table.remove_column(at)
    for offset, (name, values) in enumerate(zip(GROUP_KEYS, parts)):
        table = table.add_column(at + offset, name, pa.array(values, pa.string()).take(ids.indices))
    return table


#: a task gets a row's small values packed into two longs (fewer columns to move into Python), and
#: `unpack_small_values` gives back the columns FACT_INPUT and group_facts read:
#:   `_flags`: bits 0-1 assigned (0 null, 1 false, 2 true), bit 2 _rebalancing, bit 3 set when
#:             generation is null, bit 4 when rejoins is, from bit 8 the _cause code and from bit
#:             8 + CODE_BITS the _assignor code (0: null)
#:   `_gen_rejoins`: generation in the high 32 bits, rejoins in the low 32 (two's complement)
PACKED = ["_flags", "_gen_rejoins"]
CODE_BITS = 20  # codes are positions in the job's vocabulary of causes and assignors: < 2**20


def packed_columns(F, vocab, rebalancing_states) -> list:
    """PACKED of each row as Spark Columns (the job's encoder of what `unpack_small_values` decodes):
    assigned, whether its group state is one of `rebalancing_states`, generation, rejoins, and the
    codes (1-based positions in the array Column `vocab`) of its rejoin cause and assignor. `F` is
    pyspark.sql.functions, passed in."""
    def code(c):
        return F.coalesce(F.array_position(vocab, F.col(c)), F.lit(0)).cast("long")

    def bit(cond, n):
        return F.when(cond, F.lit(1 << n)).otherwise(F.lit(0)).cast("long")

    assigned = F.when(F.col("assigned").isNull(), 0).when(F.col("assigned"), 2).otherwise(1).cast("long")
    flags = (assigned + bit(F.coalesce(F.col("group_state").isin(*rebalancing_states), F.lit(False)), 2)
             + bit(F.col("generation").isNull(), 3) + bit(F.col("rejoins").isNull(), 4)
             + F.shiftleft(code("rejoin_cause"), 8) + F.shiftleft(code("assignor"), 8 + CODE_BITS))
    both = (F.shiftleft(F.coalesce(F.col("generation"), F.lit(0)).cast("long"), 32)
            .bitwiseOR(F.coalesce(F.col("rejoins"), F.lit(0)).cast("long").bitwiseAND(F.lit(0xFFFFFFFF))))
    return [flags.alias(PACKED[0]), both.alias(PACKED[1])]


def unpack_small_values(table):
    """`table` with PACKED replaced by the columns assigned, _rebalancing, generation, rejoins,
    _cause and _assignor."""
    import numpy as np
    import pyarrow as pa

    flags = table.column("_flags").to_numpy()
    both = table.column("_gen_rejoins").to_numpy()
    assigned = flags & 3
    codes = [(flags >> shift) & ((1 << CODE_BITS) - 1) for shift in (8, 8 + CODE_BITS)]
    cols = {"assigned": pa.array(assigned == 2, mask=assigned == 0),
            "_rebalancing": pa.array((flags & 4) != 0),
            "generation": pa.array((both >> 32).astype(np.int32), mask=(flags & 8) != 0),
            "rejoins": pa.array((both & 0xFFFFFFFF).astype(np.uint32).view(np.int32), mask=(flags & 16) != 0),
            "_cause": pa.array(codes[0], mask=codes[0] == 0),
            "_assignor": pa.array(codes[1], mask=codes[1] == 0)}
    table = table.drop_columns(PACKED)
    for name, col in cols.items():
        table = table.append_column(name, col)
    return table


#: the columns `key_features` reads besides the key's
FACT_INPUT = ["observed_at", "committed_offset", "log_start_offset", "log_end_offset", "assigned",
              "commit_interval_seconds", "committed_at", "committed_record_timestamp"]

#: the facts of one key over its committed snapshots, as `key_features` yields them after the key's
#: columns (the columns and types of the aggregation they replace)
FACTS_SCHEMA = ("snapshots long, first_at timestamp, last_at timestamp, latest_committed long, "
                "latest_log_start long, latest_log_end long, latest_assigned boolean, first_committed long, "
                "first_log_end long, rewound boolean, never_moved boolean, "
                "unchanged_since timestamp, snapshot_interval double, change_gap double, commit_interval double, "
                "committed_at double, record_ts double, streak long, streak_start double, before_at double, "
                "before_same boolean, trend_snapshots long, trend_span double, trend_third long, "
                "trend_advanced boolean, trend_produced long, trend_slope double, trend_floor_rise long, "
                "trend_dip long")



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

    def codes(self, names, rows=None):
        """One int64 per row (of `rows`, default all) for the tuple of these columns' values: equal
        tuples, equal codes (nulls are a value of their own), dense (0 to the number of distinct
        tuples - 1) and numbered in the order of their first row."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        acc = None
        for name in names:
            v, nulls = self(name)
            if rows is not None:
                v, nulls = v[rows], nulls[rows]
            if v.dtype != np.bool_ and not pa.types.is_string(self.table.column(name).type):
                v = pc.dictionary_encode(pa.array(v)).indices.to_numpy().astype(np.int64)  # dense
            c = np.where(nulls, 0, v.astype(np.int64) + 1)  # 0: null; 1..d: the values
            if acc is None:
                acc = c
                continue
            width = int(c.max()) + 1 if len(c) else 1
            if int(acc.max()) >= (1 << 62) // width:  # re-densify before the product overflows
                acc = pc.dictionary_encode(pa.array(acc)).indices.to_numpy().astype(np.int64)
            acc = acc * width + c
        return pc.dictionary_encode(pa.array(acc)).indices.to_numpy().astype(np.int64)


def _first_rows(codes):
    """The index of each code's first row, in code order, for codes numbered in the order of their
    first row (`_Columns.codes`): where the running maximum of the codes reaches a new one."""
    import numpy as np

    return np.flatnonzero(np.diff(np.maximum.accumulate(codes), prepend=-1) > 0)


def key_features(table, lo_us: int, key_columns: list[str] = KEYS, rows=None, raw=None):
    """The facts of fleetkit.stuck.rules.features for every key of `table` (committed snapshot rows,
    observed at or before as_of, keyed by `key_columns`; `lo_us`: the window's start in
    microseconds; `rows`: the indices of the rows to read, default all; `raw`: the table's _Columns
    when the caller has them), numpy over whole columns: one sort by (key, observed_at), then each
    fact from neighbouring rows and per-key reductions. Snapshot pairs are consecutive rows of a key, both in the window; a change is a row
    whose predecessor showed another offset; the trailing streak is the run of last rows in the
    window at the latest offset with lag > 0 (rules.features is the reference, tests compare)."""
    import numpy as np
    import pyarrow as pa

    raw = raw or _Columns(table)
    rows = np.arange(table.num_rows) if rows is None else rows
    n = len(rows)
    if n == 0:
        return None

    # one sort by (key, observed_at); row i below is row order[i] of the table
    key = raw.codes(key_columns, rows)
    o = np.lexsort((raw("observed_at")[0][rows], key))
    order, key = rows[o], key[o]
    obs = raw("observed_at")[0][order]
    first = np.zeros(n, dtype=bool)
    first[0] = True
    first[1:] = key[1:] != key[:-1]
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
            return np.zeros(g), np.zeros(g, dtype=bool)
        a, b = vals[lo_i], vals[hi_i]
        return np.where(lo_i == hi_i, a, 0.5 * a + 0.5 * b), ok

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
    trend = _trend_facts(raw, order, gid, g, secs, c, lag, leo_null, in_w, li, has, snapshot_interval, change_gap)

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
        "unchanged_since": ts_at(rs_idx, np.ones(g, dtype=bool)),
        "snapshot_interval": pa.array(snapshot_interval[0], mask=~snapshot_interval[1]),
        "change_gap": pa.array(change_gap[0], mask=~change_gap[1]),
        "commit_interval": col_at("commit_interval_seconds", li, has),
        "committed_at": col_at("committed_at", li, has, seconds=True),
        "record_ts": col_at("committed_record_timestamp", li, has, seconds=True),
        "streak": pa.array(streak),
        "streak_start": pa.array(secs[ss_idx], mask=streak == 0),
        "before_at": pa.array(secs[bi], mask=~has_brk),
        "before_same": pa.array(c[bi] == c[last_idx], mask=~has_brk),
        **trend,
    })
    return pa.table(out)


def _trend_facts(raw, order, gid, g, secs, c, lag, leo_null, in_w, li, has, snapshot_interval, change_gap) -> dict:
    """The lag trend's facts (rules.Features.trend_*, rules._trend the reference) of every key, from
    key_features' sorted rows: per key, the in-window rows with a known lag observed at or after
    rules.trend_start (the rhythm: the last row's commit interval, else the change gap), their
    thirds of their span, least squares of lag over time."""
    import numpy as np
    import pyarrow as pa

    from fleetkit.stuck.rules import TREND_SNAPSHOT_INTERVALS

    si, si_ok = snapshot_interval
    ci, ci_null = (a[order][li] for a in raw("commit_interval_seconds"))
    ci_ok = has & ~ci_null
    rhythm = np.where(ci_ok, ci, change_gap[0])
    bounded = si_ok & (ci_ok | change_gap[1])
    # rules.trend_start, the same operations: last - max(k x interval, 3 x (rhythm + interval)) - interval / 4
    d = np.maximum(TREND_SNAPSHOT_INTERVALS * si, 3 * (rhythm + si))
    start = np.where(bounded, secs[li] - d - 0.25 * si, -np.inf)
    seg = in_w & ~leo_null & (secs >= start[gid])
    n = np.bincount(gid[seg], minlength=g)
    ok = n > 0
    idx = np.flatnonzero(seg)
    f_i = np.full(g, np.iinfo(np.int64).max)
    l_i = np.full(g, -1, dtype=np.int64)
    np.minimum.at(f_i, gid[idx], idx)
    np.maximum.at(l_i, gid[idx], idx)
    f_i, l_i = np.where(ok, f_i, 0), np.where(ok, l_i, 0)
    t0, t1 = secs[f_i], secs[l_i]
    span = t1 - t0
    b1, b2 = t0 + span / 3, t0 + 2 * span / 3
    part = np.where(secs < b1[gid], 0, np.where(secs < b2[gid], 1, 2))
    big = np.iinfo(np.int64).max
    counts, floors = [], []
    for k in range(3):
        rows = seg & (part == k)
        counts.append(np.bincount(gid[rows], minlength=g))
        floor = np.full(g, big, dtype=np.int64)
        np.minimum.at(floor, gid[rows], lag[rows])
        floors.append(floor)
    third = np.minimum(np.minimum(counts[0], counts[1]), counts[2])
    dip = np.zeros(g, dtype=np.int64)  # the largest fall of lag between consecutive rows of the trend
    same = gid[idx[1:]] == gid[idx[:-1]]
    np.maximum.at(dip, gid[idx[1:]][same], (lag[idx[:-1]] - lag[idx[1:]])[same])
    all_thirds = ok & (third > 0)
    rise = np.minimum(floors[1] - floors[0], floors[2] - floors[1])
    # least squares, time relative to the first point, summed in time order as the reference does
    x = secs - t0[gid]
    y = lag.astype(np.float64)
    nn = np.where(ok, n, 1)
    mx = np.bincount(gid[seg], weights=x[seg], minlength=g) / nn
    my = np.bincount(gid[seg], weights=y[seg], minlength=g) / nn
    dx, dy = x - mx[gid], y - my[gid]
    sxx = np.bincount(gid[seg], weights=(dx * dx)[seg], minlength=g)
    sxy = np.bincount(gid[seg], weights=(dx * dy)[seg], minlength=g)
    sloped = ok & (sxx > 0)
    slope = np.where(sloped, sxy / np.where(sloped, sxx, 1.0), 0.0)
    return {"trend_snapshots": pa.array(n), "trend_span": pa.array(np.where(ok, span, 0.0)),
            "trend_third": pa.array(np.where(ok, third, 0)),
            "trend_advanced": pa.array(ok & (c[l_i] > c[f_i])),
            "trend_produced": pa.array(np.where(ok, lag[l_i] + c[l_i] - lag[f_i] - c[f_i], 0), mask=~ok),
            "trend_slope": pa.array(slope, mask=~sloped),
            "trend_floor_rise": pa.array(np.where(all_thirds, rise, 0), mask=~all_thirds),
            "trend_dip": pa.array(dip)}


#: a group in one offsets store
GROUP_KEYS = ["cluster", "source", "group"]

#: `group_facts` reads, besides the group's columns: observed_at, _rebalancing (the row's group
#: state is a rebalancing one), generation, rejoins, and _cause / _assignor (the codes, 1-based
#: positions in the job's vocabulary, of the rejoin cause and the assignor); it yields, after them:
GROUP_FACTS_SCHEMA = "times long, rebalancing long, rebalances long, rejoins long, cause_code long, assignor_code long"


def group_facts(table, lo_us: int, group_columns: list[str] = GROUP_KEYS, hi_us: int | None = None, raw=None):
    """The facts fleetkit.stuck.rules.storm reads from a group's snapshots in the window (rows
    observed at or after `lo_us` and, given `hi_us` (as_of), at or before it), for every group of `table`:
    distinct snapshot times, how many of them in a rebalancing state (any row of the group at that
    time), the spread of the generation and of the rejoins (0 without any), and the cause and assignor
    codes of the newest row that has one. Rows of one group at one time come from one DescribeGroups
    answer and agree on these (the reference takes the first non-null of each time)."""
    import numpy as np
    import pyarrow as pa

    raw = raw or _Columns(table)
    obs_all, obs_null = raw("observed_at")
    in_window = ~obs_null & (obs_all >= lo_us)
    if hi_us is not None:
        in_window &= obs_all <= hi_us
    rows = np.flatnonzero(in_window)
    if len(rows) == 0:
        return None
    obs = obs_all[rows]
    group = raw.codes(group_columns, rows)
    order = np.lexsort((obs, group))
    rows, obs, group = rows[order], obs[order], group[order]
    n = len(rows)
    first = np.zeros(n, dtype=bool)
    first[0] = True
    first[1:] = group[1:] != group[:-1]
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


#: a topic partition, and what a task yields of its log end history (`_row` 2): the distinct
#: (observed_at, log end offset) points of its rows up to as_of, packed (`log_end_points`)
TP_KEYS = ["cluster", "topic", "partition"]
POINTS_SCHEMA = "points binary"
#: a packed point: the time in epoch seconds (as Spark casts a timestamp to double), the log end
_POINT = [("t", "<f8"), ("e", "<i8")]

_ARROW_TYPES = {"long": "int64", "int": "int32", "string": "string", "double": "float64", "boolean": "bool_",
                "binary": "binary"}
_PARTS = (FACTS_SCHEMA, GROUP_FACTS_SCHEMA, POINTS_SCHEMA)


def task_output_schema():
    """The Arrow schema of what the job's tasks yield: `_row` (0: a key's facts, 1: a group's, 2: a
    topic partition's log end points), KEYS, then FACTS_SCHEMA, GROUP_FACTS_SCHEMA and POINTS_SCHEMA
    (null where the row is of another kind, as are the key columns a kind has not)."""
    import pyarrow as pa

    def arrow(ddl: str):
        return pa.timestamp("us", tz="UTC") if ddl == "timestamp" else getattr(pa, _ARROW_TYPES[ddl])()

    fields = [pa.field("_row", pa.int32())] + [pa.field(c, arrow(_KEY_TYPES[c])) for c in KEYS]
    for part in ", ".join(_PARTS).split(", "):
        name, ddl = part.split(" ")
        fields.append(pa.field(name, arrow(ddl)))
    return pa.schema(fields)


def log_end_points(table, hi_us: int, raw=None):
    """Per topic partition of `table`, the distinct (observed_at, log end) points of its rows observed
    at or before `hi_us` (as_of) with a log end offset, packed into one value (every group reading a
    partition reports the same log: a task sends each point once): columns TP_KEYS, points."""
    import numpy as np
    import pyarrow as pa

    raw = raw or _Columns(table)
    obs, obs_null = raw("observed_at")
    leo, leo_null = raw("log_end_offset")
    rows = np.flatnonzero(~obs_null & ~leo_null & (obs <= hi_us))
    if len(rows) == 0:
        return None
    # each distinct (partition, time, log end) once (its first row), then sorted by partition
    rows = rows[_first_rows(raw.codes([*TP_KEYS, "observed_at", "log_end_offset"], rows))]
    tp = raw.codes(TP_KEYS, rows)
    o = np.lexsort((leo[rows], obs[rows], tp))
    rows, tp = rows[o], tp[o]
    points = np.empty(len(rows), dtype=_POINT)
    points["t"], points["e"] = obs[rows] / 1e6, leo[rows]
    starts = np.flatnonzero(np.diff(tp, prepend=-1) != 0)
    ends = np.append(starts[1:], len(rows))
    out = {k: table.column(k).take(pa.array(rows[starts])) for k in TP_KEYS}
    out["points"] = pa.array([points[a:b].tobytes() for a, b in zip(starts.tolist(), ends.tolist())], pa.binary())
    return pa.table(out)


def unpack_points(packed) -> list[tuple[float, int]]:
    """The (t, e) points of a topic partition's packed values (log_end_points' `points`, from any
    number of tasks): distinct, sorted by time."""
    import numpy as np

    parts = [np.frombuffer(b, dtype=_POINT) for b in packed if b]
    if not parts:
        return []
    return [(float(t), int(e)) for t, e in np.unique(np.concatenate(parts)).tolist()]


def task_facts(table, lo_us: int, hi_us: int):
    """One Spark task's rows (every row of a group, whenever observed) -> one table of
    task_output_schema (`table` may hold GROUP_ID instead of cluster, source and group, and PACKED
    instead of the small values): the facts of every key of the table (`key_features` over its
    committed rows observed at or before `hi_us`, as_of; a key without such rows gets its key and
    null facts), of its groups (`group_facts`) and its partitions' log end points
    (`log_end_points`)."""
    import numpy as np
    import pyarrow as pa

    schema = task_output_schema()
    if GROUP_ID in table.column_names:
        table = expand_group_ids(table)
    if PACKED[0] in table.column_names:
        table = unpack_small_values(table)
    raw = _Columns(table)
    obs, obs_null = raw("observed_at")
    upto = ~obs_null & (obs <= hi_us)
    committed = upto & ~raw("committed_offset")[1]
    facts = key_features(table, lo_us, KEYS, np.flatnonzero(committed), raw)
    # keys with no committed row up to as_of: their key only (the job reads them as no snapshot)
    key = raw.codes(KEYS)
    first_row = _first_rows(key)
    bare = np.bincount(key[committed], minlength=len(first_row)) == 0
    bare_keys = table.select(KEYS).take(pa.array(first_row[bare])) if bare.any() else None
    parts = [(0, facts), (0, bare_keys), (1, group_facts(table, lo_us, GROUP_KEYS, hi_us, raw)),
             (2, log_end_points(table, hi_us, raw))]
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

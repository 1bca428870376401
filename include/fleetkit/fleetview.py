"""The fleet page's read model: what the jobs wrote, shaped for one page of a browser.

No second store: everything comes from the data root the DAGs write.

* clusters: the fleet file (name, Kafka version), the newest collection and failure of each
  (`_state/cluster=<c>/collection_status.json`, written by every collection);
* groups and partitions: the stuck job's newest outputs (`reports/stuck/latest/groups.jsonl`,
  `findings.jsonl`, `series.jsonl`, copied there by the report task);
* coordinator ownership: the newest `reports/coordinator/*/groups.jsonl` / `partitions.jsonl`;
* `__consumer_offsets` health: the newest `reports/offsets/*/health.jsonl`;
* for the metrics (`fleetkit.metrics`): the flagged partitions (every verdict but OK) of the newest
  stuck run, worst first (findings.jsonl parsed once per version by Arrow), and every partition of
  each cluster's newest collection (its newest `offsets_snapshots` file) with those verdicts;
* the topics of the newest stuck run (log end offsets per partition, the groups with a commit), for
  the Burrow-compatible API (`fleetkit.burrow`): findings.jsonl parsed once per version by Arrow;
* destructive runs: the audit dataset (planned, approved by whom, executed, verified, rolled back),
  and pending approvals: approval records (`<plans>/<dag>/<run>/approval.json`) without an answer.

Parsed files are cached per (path, size, mtime): a fleet of 100,000 groups is parsed once per
stuck run (by Arrow), and a page is a slice of the sorted table. A group's partitions are found by scanning
findings.jsonl for the group's JSON-quoted name before parsing a line.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

from fleetkit.collection.blind import current_state, shown_status
from fleetkit.core.datasets import DataPath, data_path
from fleetkit.core.settings import newest_in_runs as newest
from fleetkit.stuck import rules

PAGE_SIZE = 50
GROUP_RANK = {s: i for i, s in enumerate(rules.SHOWN_ORDER)}

#: the runbook that acts on a partition verdict (dag id, what it does); the form is prefilled from
#: the finding (`runbook_conf`), dry run on
RUNBOOKS = {
    "STALLED": ("runbook_stuck_skip", "diagnose; skip the poison record (approval required)"),
    "STOPPED": ("runbook_stuck_skip", "diagnose the stopped group (start its consumers; a skip if "
                                           "they fail on a record)"),
    "FROZEN": ("runbook_stuck_skip", "diagnose (a Storm spout: deactivate the topology first)"),
    "OUT_OF_RANGE": ("runbook_stuck_reset", "reset the group's offset into the log (approval required)"),
    "REWOUND": ("runbook_stuck_reset", "restore the offsets from before the rewind (approval required)"),
}
#: which of each runbook DAG's params the fleet page's form shows, in order; their types,
#: descriptions and minimums are the DAG's own Params (`form_fields`)
RUNBOOK_FORMS = {
    "runbook_stuck_skip": ("cluster", "group", "topic", "partition", "skip", "dry_run"),
    "runbook_stuck_reset": ("cluster", "group", "topic", "partitions", "target", "source", "dry_run"),
}


class FormField(NamedTuple):
    name: str
    kind: str            # boolean | integer | string
    help: str            # the Param's description
    minimum: int | None  # the Param's minimum (integers)


def form_fields(dag_id: str, params: dict[str, dict]) -> list[FormField]:
    """The runbook form's fields from the DAG's params (`params`: name -> the Param's JSON schema,
    with its description under "description"). ValueError for a DAG this page does not start, or
    whose params lack one of its fields."""
    names = RUNBOOK_FORMS.get(dag_id)
    if names is None:
        raise ValueError(f"{dag_id!r} is not a runbook this page starts ({', '.join(RUNBOOK_FORMS)})")
    out = []
    for name in names:
        schema = params.get(name)
        if schema is None:
            raise ValueError(f"the DAG {dag_id!r} has no param {name!r} (its params: {', '.join(sorted(params))})")
        types = schema.get("type")
        types = [t for t in (types if isinstance(types, list) else [types]) if t != "null"]
        kind = types[0] if types and types[0] in ("boolean", "integer") else "string"
        out.append(FormField(name, kind, schema.get("description") or name,
                             schema.get("minimum") if kind == "integer" else None))
    return out


def runbook_conf(finding: dict) -> tuple[str, dict] | None:
    """(dag id, prefilled conf) of the runbook for a flagged partition, or None."""
    rb = RUNBOOKS.get(finding.get("status"))
    if rb is None:
        return None
    dag = rb[0]
    base = {"cluster": finding["cluster"], "group": finding["group"], "topic": finding["topic"], "dry_run": True}
    if dag == "runbook_stuck_skip":
        return dag, {**base, "partition": int(finding["partition"]), "skip": 1}
    target = "latest" if finding.get("status") == "OUT_OF_RANGE" else "restore"
    return dag, {**base, "partitions": str(finding["partition"]), "target": target,
                 "source": finding.get("source") or "kafka"}


def coerce_conf(fields: list[FormField], form: dict[str, str]) -> dict:
    """A submitted runbook form -> the run conf, typed by its `form_fields`. Raises ValueError
    naming the field that is wrong."""
    conf: dict = {}
    for f in fields:
        raw = form.get(f.name)
        if f.kind == "boolean":
            conf[f.name] = str(raw).lower() in ("1", "true", "on", "yes")
            continue
        if raw is None or str(raw).strip() == "":
            raise ValueError(f"{f.name}: a value is required")
        if f.kind == "integer":
            try:
                conf[f.name] = int(str(raw).strip())
            except ValueError:
                raise ValueError(f"{f.name}: {raw!r} is not a whole number") from None
            if f.minimum is not None and conf[f.name] < f.minimum:
                raise ValueError(f"{f.name}: {raw!r} is below its minimum {f.minimum}")
        else:
            conf[f.name] = str(raw)  # names are taken exactly as the cluster has them
    return conf


# -- cached files ------------------------------------------------------------------------------------
_cache: dict[tuple, object] = {}
_lock = threading.Lock()


def cached(path: DataPath, parse: Callable[[DataPath], object]):
    """parse(path), once per (path, size, mtime); None when the file does not exist."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    key = (str(path), parse.__qualname__, st.st_size, st.st_mtime_ns)  # (two parses of one file: two entries)
    with _lock:
        if key in _cache:
            return _cache[key]
    value = parse(path)
    with _lock:
        for k in [k for k in _cache if k[:2] == key[:2]]:
            del _cache[k]
        _cache[key] = value
    return value


def _jsonl(path: DataPath) -> list[dict]:
    return [json.loads(line) for line in _lines(path) if line.strip()]


def _lines(path: DataPath):
    """The lines of a file (bytes): streamed from a local one, read whole from an object store."""
    if path.local:
        with open(path.path, "rb") as f:
            yield from f
    else:
        yield from path.read_bytes().splitlines(keepends=True)


def _json_source(path: DataPath):
    """What pyarrow's JSON reader reads: a local path, or an object store file opened through its DataRoot."""
    return path.path if path.local else path.open_input()


# -- groups ------------------------------------------------------------------------------------------
@dataclass
class GroupIndex:
    """Every group of the newest stuck run, worst first (status, storm, total lag, cluster, name),
    as one Arrow table: parsed by Arrow's multithreaded JSON reader, sorted and filtered by Arrow
    compute; only the rows of the page shown become Python objects."""

    table: object = None  # pyarrow.Table, sorted
    by_cluster: dict[str, Counter] = field(default_factory=dict)
    storms: Counter = field(default_factory=Counter)
    as_of: str | None = None

    @property
    def size(self) -> int:
        return 0 if self.table is None else self.table.num_rows

    @classmethod
    def parse(cls, path: DataPath) -> "GroupIndex":
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyarrow import json as pajson

        st = path.stat()
        mtime = dt.datetime.fromtimestamp(st.st_mtime, dt.timezone.utc)
        as_of = mtime.isoformat(timespec="seconds").replace("+00:00", "Z")
        if st.st_size == 0:
            return cls(None, {}, Counter(), as_of)
        t = pajson.read_json(_json_source(path), read_options=pajson.ReadOptions(block_size=8 << 20))
        n = t.num_rows

        def col(name, default):
            # (typed from the default: a null-typed column cannot be filled with it)
            return t.column(name) if name in t.column_names else pa.nulls(n, pa.scalar(default).type).fill_null(default)

        status = col("status", "OK").cast(pa.string())
        # (a dict lookup: Arrow's index_in spends about a second setting itself up on its first call)
        rank = pa.array([GROUP_RANK.get(v, len(GROUP_RANK)) for v in status.to_pylist()], pa.int8())
        storm = pc.fill_null(col("rebalance_storm", False).cast(pa.bool_()), False)
        keyed = pa.table({"rank": rank, "calm": pc.invert(storm), "lag": pc.negate(
            pc.fill_null(col("total_lag", 0).cast(pa.int64()), 0)), "cluster": col("cluster", "").cast(pa.string()),
            "group": col("group", "").cast(pa.string())})
        order = pc.sort_indices(keyed, sort_keys=[("rank", "ascending"), ("calm", "ascending"), ("lag", "ascending"),
                                                  ("cluster", "ascending"), ("group", "ascending")])
        t = t.take(order)
        by_cluster: dict[str, Counter] = {}
        for (c, st), k in Counter(zip(t.column("cluster").to_pylist(), status.take(order).to_pylist())).items():
            by_cluster.setdefault(c, Counter())[st or "OK"] += k  # (Arrow's group_by would import pandas)
        storms: Counter = Counter(c for c, s in zip(t.column("cluster").to_pylist(), storm.take(order).to_pylist())
                                  if s) if "rebalance_storm" in t.column_names else Counter()
        return cls(t, by_cluster, storms, as_of)

    @staticmethod
    def _rows(table) -> list[dict]:
        from fleetkit.stuck.report import readable_time

        rows = table.to_pylist()
        for r in rows:  # Arrow gives every row every key: drop the verdicts a group does not have
            if isinstance(r.get("counts"), dict):
                r["counts"] = {k: v for k, v in r["counts"].items() if v}
            for k in ("judged_from", "carried_as_of"):  # (Arrow reads the times as datetimes)
                if r.get(k):
                    r[k] = readable_time(r[k])
        return rows

    def page(self, page: int = 1, cluster: str | None = None, status: str | None = None, query: str | None = None,
             size: int = PAGE_SIZE) -> tuple[list[dict], int]:
        """(the groups of one page, how many match)."""
        import pyarrow.compute as pc

        t = self.table
        if t is None:
            return [], 0
        if cluster or status or query:
            mask = None

            def both(m):
                return m if mask is None else pc.and_(mask, m)
            if cluster:
                mask = both(pc.equal(t.column("cluster"), cluster))
            if status == "STORM":
                mask = both(pc.fill_null(t.column("rebalance_storm"), False) if "rebalance_storm" in t.column_names
                            else pc.equal(t.column("cluster"), "\x00"))
            elif status:
                mask = both(pc.equal(t.column("status"), status))
            if query:
                mask = both(pc.match_substring(t.column("group"), query, ignore_case=True))
            t = t.filter(mask)
        start = max(page - 1, 0) * size
        return self._rows(t.slice(start, size)), t.num_rows

    def find(self, cluster: str, group: str) -> dict | None:
        import pyarrow.compute as pc

        if self.table is None:
            return None
        t = self.table.filter(pc.and_(pc.equal(self.table.column("cluster"), cluster),
                                      pc.equal(self.table.column("group"), group)))
        return self._rows(t.slice(0, 1))[0] if t.num_rows else None


#: the columns of findings.jsonl the metrics read (an explicit schema: Arrow's inference would stop
#: at a column that is null in the first block and set further down)
FINDING_COLUMNS = (("cluster", "string"), ("source", "string"), ("group", "string"), ("topic", "string"),
                   ("partition", "int64"), ("status", "string"), ("lag", "int64"), ("committed_offset", "int64"),
                   ("log_start_offset", "int64"), ("log_end_offset", "int64"), ("lag_seconds", "float64"),
                   ("lag_seconds_kind", "string"))


@dataclass
class FlaggedPartitions:
    """The newest stuck run's findings: `rows`, the partitions whose verdict is not OK, worst first
    (verdict, then lag), as plain rows of FINDING_COLUMNS; `table`, every finding (Arrow); `total`:
    every partition of the run."""

    rows: list[dict] = field(default_factory=list)
    total: int = 0
    table: object = None  # pyarrow.Table of FINDING_COLUMNS, None when the run found nothing

    @classmethod
    def parse(cls, path: DataPath) -> "FlaggedPartitions":
        import pyarrow as pa
        import pyarrow.compute as pc
        from pyarrow import json as pajson

        if path.stat().st_size == 0:
            return cls()
        schema = pa.schema([(name, getattr(pa, kind)()) for name, kind in FINDING_COLUMNS])
        everything = pajson.read_json(_json_source(path), read_options=pajson.ReadOptions(block_size=8 << 20),
                                      parse_options=pajson.ParseOptions(explicit_schema=schema,
                                                                        unexpected_field_behavior="ignore"))
        t = everything.filter(pc.fill_null(pc.not_equal(everything.column("status"), "OK"), True))
        rank = pa.array([GROUP_RANK.get(v, len(GROUP_RANK)) for v in t.column("status").to_pylist()], pa.int8())
        keyed = pa.table({"rank": rank, "lag": pc.negate(pc.fill_null(t.column("lag"), 0))})
        order = pc.sort_indices(keyed, sort_keys=[("rank", "ascending"), ("lag", "ascending")])
        return cls(t.take(order).to_pylist(), everything.num_rows, everything)


#: what the metrics publish of every partition (CurrentPartitions.columns): the newest collection's
#: offsets and member, the newest stuck run's verdict and time lag
CURRENT_COLUMNS = ("cluster", "group", "source", "topic", "partition", "committed_offset", "log_start_offset",
                   "log_end_offset", "lag", "assigned", "member_host", "member_id", "member_client_id", "group_state",
                   "status", "lag_seconds", "lag_seconds_kind")
_KEY = ["cluster", "source", "group", "topic", "partition"]


@dataclass
class CurrentPartitions:
    """Every partition of every group in the newest collection of each cluster, worst first (the
    newest stuck run's verdict, then lag): one Python list per column of CURRENT_COLUMNS.

    Offsets, lag and the member holding the partition are the collection's (what the cluster said
    last); `status` and the time lag the stuck run's (null for a partition it did not judge yet). A
    cluster with no collection file (none yet, or pruned) has its findings' rows instead, without
    members. `version`: FleetView.current_version of the files read."""

    columns: dict[str, list] = field(default_factory=lambda: {c: [] for c in CURRENT_COLUMNS})
    version: tuple = ()

    @property
    def size(self) -> int:
        return len(self.columns["cluster"])

    @classmethod
    def build(cls, snapshots: dict[str, list], findings: FlaggedPartitions) -> "CurrentPartitions":
        """snapshots: cluster -> its newest collection's offsets_snapshots tables ([]: none)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        parts = []
        base_cols = ["cluster", "group", "source", "topic", "partition", "committed_offset", "log_start_offset",
                     "log_end_offset", "assigned", "member_host", "member_id", "member_client_id", "group_state"]
        types = {"partition": pa.int64(), "committed_offset": pa.int64(), "log_start_offset": pa.int64(),
                 "log_end_offset": pa.int64(), "assigned": pa.bool_()}

        def shaped(t):
            cols = []
            for c in base_cols:
                col = t.column(c) if c in t.column_names else pa.nulls(t.num_rows, types.get(c, pa.string()))
                cols.append(col.cast(types.get(c, pa.string())))
            out = pa.table(dict(zip(base_cols, cols)))
            return out.set_column(2, "source", pc.fill_null(out.column("source"), "kafka"))

        judged = findings.table
        for cluster, tables in snapshots.items():
            if tables:
                parts += [shaped(t) for t in tables]
            elif judged is not None:
                parts.append(shaped(judged.filter(pc.equal(judged.column("cluster"), cluster))))
        if not parts:
            return cls()
        t = pa.concat_tables(parts)
        if judged is not None and judged.num_rows:
            verdicts = shaped(judged).select(_KEY).append_column("status", judged.column("status")) \
                .append_column("lag_seconds", judged.column("lag_seconds")) \
                .append_column("lag_seconds_kind", judged.column("lag_seconds_kind"))
            t = t.join(verdicts, keys=_KEY, join_type="left outer")
        else:
            t = t.append_column("status", pa.nulls(t.num_rows, pa.string())) \
                .append_column("lag_seconds", pa.nulls(t.num_rows, pa.float64())) \
                .append_column("lag_seconds_kind", pa.nulls(t.num_rows, pa.string()))
        lag = pc.subtract(t.column("log_end_offset"), t.column("committed_offset"))
        t = t.append_column("lag", lag)
        ok = GROUP_RANK.get("OK", len(GROUP_RANK))
        rank = pa.array([GROUP_RANK.get(v, ok) for v in t.column("status").to_pylist()], pa.int8())
        keyed = pa.table({"rank": rank, "lag": pc.negate(pc.fill_null(lag, 0)), "cluster": t.column("cluster"),
                          "group": t.column("group"), "topic": t.column("topic"), "partition": t.column("partition")})
        order = pc.sort_indices(keyed, sort_keys=[("rank", "ascending"), ("lag", "ascending"), ("cluster", "ascending"),
                                                  ("group", "ascending"), ("topic", "ascending"),
                                                  ("partition", "ascending")])
        t = t.take(order)
        return cls({c: t.column(c).to_pylist() for c in CURRENT_COLUMNS})


@dataclass
class TopicOffsets:
    """The topics of the newest stuck run, per cluster: each partition's log end offset (the largest
    any group's row saw) and the groups with a commit on the topic (NO_COMMIT rows left out)."""

    log_end: dict[str, dict[str, dict[int, int]]] = field(default_factory=dict)  # cluster -> topic -> partition
    groups: dict[str, dict[str, set[str]]] = field(default_factory=dict)         # cluster -> topic -> groups

    @classmethod
    def parse(cls, path: DataPath) -> "TopicOffsets":
        import pyarrow as pa
        from pyarrow import json as pajson

        out = cls()
        if path.stat().st_size == 0:
            return out
        columns = [("cluster", pa.string()), ("group", pa.string()), ("topic", pa.string()),
                   ("partition", pa.int64()), ("status", pa.string()), ("log_end_offset", pa.int64())]
        t = pajson.read_json(_json_source(path), read_options=pajson.ReadOptions(block_size=8 << 20),
                             parse_options=pajson.ParseOptions(explicit_schema=pa.schema(columns),
                                                               unexpected_field_behavior="ignore"))
        for c, g, topic, p, st, end in zip(*(t.column(n).to_pylist() for n, _ in columns)):
            if c is None or topic is None or p is None:
                continue
            parts = out.log_end.setdefault(c, {}).setdefault(topic, {})
            if end is not None and end > parts.get(p, -1):
                parts[p] = end
            if st != "NO_COMMIT" and g is not None:
                out.groups.setdefault(c, {}).setdefault(topic, set()).add(g)
        return out


class FleetView:
    """The read model over one data root (and the plans folder, for pending approvals): a local
    folder or an object store, read through fleetkit.core.datasets.DataRoot."""

    def __init__(self, data_root: str | os.PathLike, plans_root: str | os.PathLike | None = None):
        self.root = data_path(data_root)
        self.plans = data_path(plans_root) if plans_root else self.root / "plans"
        self.stuck = self.root / "reports" / "stuck" / "latest"

    # clusters
    def collection_status(self, cluster: str) -> dict:
        path = self.root / "_state" / f"cluster={cluster}" / "collection_status.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return {}

    def groups(self) -> GroupIndex:
        return cached(self.stuck / "groups.jsonl", GroupIndex.parse) or GroupIndex()

    def flagged_partitions(self) -> FlaggedPartitions:
        """The newest stuck run's partitions not OK, worst first (cached per file version)."""
        return cached(self.stuck / "findings.jsonl", FlaggedPartitions.parse) or FlaggedPartitions()

    def current_version(self, clusters: list[str]) -> tuple:
        """What current_partitions reads, as a key that changes when any of it does: each cluster's
        newest collection files (name, size, modification time) and the newest stuck run's findings.
        Two listings per cluster and a few looks: cheap, unlike the build."""
        from fleetkit.core.datasets import newest_collection

        store = self.root.root
        stats = []
        for c in clusters:
            for f in newest_collection(store, "offsets_snapshots", c):
                try:
                    st = DataPath(store, f).stat()
                except FileNotFoundError:  # pruned between the listing and the look
                    continue
                stats.append((c, f, st.st_size, st.st_mtime_ns))
        try:
            fst = (self.stuck / "findings.jsonl").stat()
            fkey = (fst.st_size, fst.st_mtime_ns)
        except FileNotFoundError:
            fkey = None
        return str(self.root), tuple(clusters), tuple(stats), fkey

    def current_partitions(self, clusters: list[str], version: tuple | None = None) -> CurrentPartitions:
        """Every partition of the clusters' newest collections with the newest stuck run's verdicts
        (CurrentPartitions), built once per `version` (current_version) of the files it reads."""
        from fleetkit.core.datasets import SCHEMAS, read_file

        version = version or self.current_version(clusters)
        # (in the files' cache: the same key shape, the older versions dropped by the same rule)
        key = (version[0], "current_partitions", version)
        with _lock:
            hit = _cache.get(key)
        if hit is not None:
            return hit
        store = self.root.root
        snapshots = {c: [read_file(store, f, SCHEMAS["offsets_snapshots"]) for cl, f, _, _ in version[2] if cl == c]
                     for c in clusters}
        value = CurrentPartitions.build(snapshots, self.flagged_partitions())
        value.version = version
        with _lock:
            for k in [k for k in _cache if k[:2] == key[:2]]:
                del _cache[k]
            _cache[key] = value
        return value

    def topics(self) -> TopicOffsets:
        """The newest stuck run's topics per cluster (cached per file version)."""
        return cached(self.stuck / "findings.jsonl", TopicOffsets.parse) or TopicOffsets()

    def report_file(self, report: str) -> DataPath | None:
        """The newest result file of a report the page and the metrics read (None: none yet):
        stuck, coordinator or offsets."""
        if report == "stuck":
            groups = self.stuck / "groups.jsonl"
            return groups if groups.is_file() else None
        name = {"coordinator": "partitions.jsonl", "offsets": "health.jsonl"}[report]
        return newest(self.root / "reports" / report, name)

    def report_files(self) -> dict[str, DataPath | None]:
        return {r: self.report_file(r) for r in ("stuck", "coordinator", "offsets")}

    def clusters(self, fleet) -> list[dict]:
        idx = self.groups()
        out = []
        for c in fleet.clusters:
            status = self.collection_status(c.name)
            ok, failed = status.get("ok") or {}, status.get("failed") or {}
            seen = current_state(status)
            failing = seen["state"] == "FAILING"
            counts = idx.by_cluster.get(c.name, Counter())
            out.append({"name": c.name, "kafka_version": c.kafka_version, "mode": "KRaft" if c.zookeeper is None
                        else "ZooKeeper", "counts": {s: counts[s] for s in rules.SHOWN_ORDER if counts[s]},
                        "groups": sum(counts.values()), "storms": idx.storms.get(c.name, 0),
                        "collected_at": ok.get("observed_at"), "collection_problems": ok.get("problems") or [],
                        "failed_at": failed.get("at"), "failure": failed.get("error"), "failing": failing,
                        "seen": seen})
        return out

    def shown_groups(self, rows: list[dict], clusters: list[dict]) -> list[dict]:
        """The page's group rows with the verdict to show: an OK its cluster's newest collection
        could not back shows BLIND (fleetkit.collection.blind.shown_status)."""
        seen = {c["name"]: c["seen"] for c in clusters}
        return [dict(r, status=shown_status(r.get("status"), r.get("group"), seen.get(r.get("cluster"))))
                for r in rows]

    # one group
    def partitions(self, cluster: str, group: str) -> list[dict]:
        """The group's partitions in the newest stuck run, each with its lag series (points)."""
        # (a lone surrogate, which UTF-8 cannot carry, makes a needle no line holds: its escaped form
        # is the one to find)
        needle = json.dumps(group, ensure_ascii=False).encode("utf-8", "surrogatepass")
        needle_ascii = json.dumps(group).encode("ascii")
        rows = []
        path = self.stuck / "findings.jsonl"
        if path.exists():
            for line in _lines(path):
                if needle in line or needle_ascii in line:
                    r = json.loads(line)
                    if r.get("group") == group and r.get("cluster") == cluster:
                        rows.append(r)
        series = {}
        spath = self.stuck / "series.jsonl"
        if rows and spath.exists():
            for line in _lines(spath):
                if needle in line or needle_ascii in line:
                    s = json.loads(line)
                    if s.get("group") == group and s.get("cluster") == cluster:
                        series[(s.get("source") or "kafka", s["topic"], s["partition"])] = s.get("points") or []
        for r in rows:
            r["points"] = series.get((r.get("source") or "kafka", r["topic"], r["partition"]), [])
        rows.sort(key=lambda r: (GROUP_RANK.get(r.get("status"), 99), r["topic"], r["partition"]))
        return rows

    def group(self, cluster: str, group: str) -> dict | None:
        return self.groups().find(cluster, group)

    def shown_group(self, cluster: str, group: str) -> tuple[dict | None, str | None]:
        """(the group's row with the verdict to show, its cluster's blind line when that verdict
        is BLIND): a group page never shows OK what the newest collection did not see."""
        g = self.group(cluster, group)
        state = current_state(self.collection_status(cluster))
        if g is not None and shown_status(g.get("status"), group, state) == "BLIND":
            return dict(g, status="BLIND"), state["line"]
        return g, None

    # coordinator ownership, offsets health
    def coordinators(self) -> tuple[list[dict], str | None]:
        """Coordinator ownership per cluster from the newest ownership run: partitions not OK first."""
        path = self.report_file("coordinator")
        if path is None:
            return [], None
        rows = [r for r in cached(path, _jsonl) or [] if r.get("verdict") not in (None, "OK", "NO_GROUPS")]
        return rows, path.parent.name

    def offsets_replicas(self) -> tuple[list[dict], str | None]:
        """Every `__consumer_offsets` replica of the newest trim_health run (verdict, disk_bytes...)."""
        path = self.report_file("offsets")
        if path is None:
            return [], None
        return cached(path, _jsonl) or [], path.parent.name

    def trim_health(self) -> tuple[list[dict], Counter, str | None]:
        rows, run = self.offsets_replicas()
        if run is None:
            return [], Counter(), None
        return ([r for r in rows if r.get("verdict") != "HEALTHY"],
                Counter((r.get("cluster"), r.get("verdict")) for r in rows), run)

    # destructive runs
    def audit_timeline(self, limit: int = 30) -> list[dict]:
        """The newest destructive runs, one entry per run: action, cluster, each step with who and when."""
        from fleetkit.core import audit

        try:
            recs = audit.records(self.root.root)
        except Exception:  # noqa: BLE001 - no audit dataset yet
            return []
        runs: dict[tuple, dict] = {}
        for r in recs:
            key = (r["dag_id"], r["run_id"])
            run = runs.setdefault(key, {"dag_id": r["dag_id"], "run_id": r["run_id"], "cluster": r["cluster"],
                                        "action": r["action"], "steps": [], "last": None})
            at = r["observed_at"]
            run["steps"].append({"event": r["event"], "actor": r.get("actor"),
                                 "at": at.isoformat(timespec="seconds") if hasattr(at, "isoformat") else str(at),
                                 "message": r.get("message")})
            run["last"] = run["steps"][-1]["at"]
        return sorted(runs.values(), key=lambda x: x["last"] or "", reverse=True)[:limit]

    def pending_approvals(self) -> list[dict]:
        out = []
        if not self.plans.is_dir():
            return out
        for path in self.plans.glob("*/*/approval.json"):
            try:
                doc = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if doc.get("answer") is None and doc.get("dag_id") and doc.get("run_id"):
                out.append({"dag_id": doc["dag_id"], "run_id": doc["run_id"], "requested_at": doc.get("requested_at"),
                            "assigned": doc.get("assigned") or [], "requested_by": doc.get("requested_by") or [],
                            "digest": doc.get("digest")})
        return sorted(out, key=lambda d: d.get("requested_at") or "", reverse=True)

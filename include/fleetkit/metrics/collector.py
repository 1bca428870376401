"""The fleet's newest judged state as Prometheus metrics: a prometheus_client custom collector over
the fleet page's read model (fleetkit.fleetview), built on every scrape from its cached files.

What it publishes is `fleetkit.metrics.names.METRICS`. Cardinality is bounded:

* per partition: only flagged partitions (every verdict but OK), worst first (verdict, then lag),
  at most FLEET_METRICS_MAX_PARTITION_SERIES partitions (default 10,000);
* per group: worst first, at most FLEET_METRICS_MAX_GROUP_SERIES groups (default 20,000);
* what the limits leave out is counted in fleet_metrics_series_left_out{kind}; the per-cluster
  counts (fleet_cluster_groups, fleet_partitions_flagged) always cover everything.

Blind is not OK: a group the newest collection of its cluster did not back shows verdict BLIND
(fleetkit.collection.blind.shown_status, as on the page). Only names, verdicts and numbers are
published: never an error text, a collection's blind line or anything from a connection.
"""

from __future__ import annotations

import logging
import time
from collections import Counter

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.samples import Sample

from fleetkit.collection.blind import parse_time, shown_status
from fleetkit.metrics.names import METRICS

log = logging.getLogger(__name__)

DEFAULT_MAX_PARTITIONS = 10_000
DEFAULT_MAX_GROUPS = 20_000
CLUSTER_STATES = ("OK", "BLIND", "FAILING", "STALE", "NEVER")


def _limit(name: str, default: int) -> int:
    """A limit of the deployment (settings.whole_number); ValueError naming it when set wrong."""
    from fleetkit.core.errors import FleetConfigError
    from fleetkit.core.settings import whole_number

    try:
        return whole_number(name, default)
    except FleetConfigError as e:
        raise ValueError(str(e)) from None


#: the largest scrape answered (FLEET_METRICS_MAX_BODY_BYTES): past it the scrape fails naming the
#: limit, rather than the api-server building and sending an answer of any size
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


def max_body_bytes() -> int:
    return _limit("FLEET_METRICS_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)


def limits() -> tuple[int, int]:
    """(partitions, groups) with series: FLEET_METRICS_MAX_PARTITION_SERIES, FLEET_METRICS_MAX_GROUP_SERIES."""
    return (_limit("FLEET_METRICS_MAX_PARTITION_SERIES", DEFAULT_MAX_PARTITIONS),
            _limit("FLEET_METRICS_MAX_GROUP_SERIES", DEFAULT_MAX_GROUPS))


#: the longest label value published, in characters: a longer name (names come from clusters, and
#: 20,000 groups with 32 KB names would make a scrape of gigabytes) keeps its first characters and
#: ends in `~` and 16 hex digits of its SHA-256, so distinct names stay distinct series
MAX_LABEL_CHARS = 256
_HASH_CHARS = 16


def label(value) -> str:
    """A label value: names are published exactly (the encoder escapes \\, " and line feeds) up to
    MAX_LABEL_CHARS; only what UTF-8 cannot carry (a lone surrogate from a JSON \\ud800 escape) is
    written as \\udXXX."""
    if value is None:
        return ""
    s = value if isinstance(value, str) else str(value)
    if not s.isascii():
        try:
            s.encode("utf-8")
        except UnicodeEncodeError:
            s = s.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(s) <= MAX_LABEL_CHARS:
        return s
    import hashlib

    digest = hashlib.sha256(s.encode("utf-8")).hexdigest()[:_HASH_CHARS]
    return f"{s[:MAX_LABEL_CHARS - _HASH_CHARS - 1]}~{digest}"


def epoch(iso) -> float | None:
    t = parse_time(iso)
    return None if t is None else t.timestamp()


class _Families:
    """One GaugeMetricFamily per name of METRICS, created on first use, yielded in METRICS' order.
    Samples are appended as prometheus_client Samples directly (what add_metric builds, without its
    per-call overhead: a scrape of 100,000 partitions adds tens of thousands)."""

    def __init__(self):
        self.fam: dict[str, tuple[GaugeMetricFamily, tuple[str, ...]]] = {}

    def add(self, name: str, labels: list[str], value: float) -> None:
        entry = self.fam.get(name)
        if entry is None:
            names, doc = METRICS[name]
            entry = self.fam[name] = (GaugeMetricFamily(name, doc, labels=list(names)), names)
        fam, names = entry
        fam.samples.append(Sample(name, dict(zip(names, labels)), value, None, None))

    def __iter__(self):
        return (self.fam[n][0] for n in METRICS if n in self.fam)


class FleetCollector:
    """prometheus_client collector: `registry.register(FleetCollector(view, fleet))`.

    view: a fleetkit.fleetview.FleetView; fleet: the fleet file (fleetkit.core.fleet.Fleet) or a
    callable returning it (read on every scrape; None: no per-cluster metrics)."""

    def __init__(self, view, fleet=None, max_partitions: int | None = None, max_groups: int | None = None,
                 now=time.time):
        self.view, self._fleet, self.now = view, fleet, now
        self.max_partitions, self.max_groups = max_partitions, max_groups

    def describe(self):
        return []  # nothing at registration: the data is read at scrape time

    def collect(self):
        max_parts, max_groups = limits()
        max_parts = max_parts if self.max_partitions is None else self.max_partitions
        max_groups = max_groups if self.max_groups is None else self.max_groups
        now = self.now()
        out = _Families()
        up: dict[str, int] = {}
        seen: dict[str, dict] = {}
        for source, part in (("clusters", lambda: self._clusters(out, now, seen)),
                             ("stuck", lambda: self._stuck(out, seen, max_parts, max_groups)),
                             ("offsets", lambda: self._offsets(out)),
                             ("coordinator", lambda: self._coordinators(out)),
                             ("approvals", lambda: self._approvals(out, now)),
                             ("reports", lambda: self._report_ages(out, now))):
            try:
                part()
                up[source] = 1
            except Exception as e:  # noqa: BLE001 - the rest of the fleet is still worth a scrape
                log.warning("fleet metrics: reading %s failed: %s: %s", source, type(e).__name__, e)
                up[source] = 0
        for source, v in up.items():
            out.add("fleet_metrics_source_up", [source], v)
        yield from out

    # -- parts ------------------------------------------------------------------------------------
    def _clusters(self, out: _Families, now: float, seen: dict) -> None:
        from fleetkit.core.settings import collection_interval

        fleet = self._fleet() if callable(self._fleet) else self._fleet
        out.add("fleet_collection_interval_seconds", [], collection_interval())
        if fleet is None:
            return
        for c in self.view.clusters(fleet):
            name, state = label(c["name"]), c["seen"]
            seen[c["name"]] = state
            out.add("fleet_cluster_state", [name, state["state"]], 1)
            out.add("fleet_cluster_blind", [name], int(state["state"] in ("BLIND", "FAILING")))
            out.add("fleet_cluster_stale", [name], int(state["state"] == "STALE"))
            t = epoch(c.get("collected_at"))
            if t is not None:
                out.add("fleet_cluster_collection_age_seconds", [name], max(0.0, now - t))

    def _stuck(self, out: _Families, seen: dict, max_parts: int, max_groups: int) -> None:
        idx = self.view.groups()
        # groups: the table is sorted worst first; only the rows published become Python objects
        n = min(idx.size, max_groups)
        if n:
            t = idx.table.slice(0, n)
            cols = t.column_names
            data = {c: t.column(c).to_pylist() for c in ("cluster", "group", "source", "status", "rebalance_storm",
                                                         "total_lag") if c in cols}
            none = [None] * n
            for cl, g, src, st, storm, lag in zip(data["cluster"], data["group"], data.get("source", none),
                                                  data.get("status", none), data.get("rebalance_storm", none),
                                                  data.get("total_lag", none)):
                labels = [label(cl), label(g), src or "kafka"]
                out.add("fleet_group_verdict", labels + [shown_status(st or "OK", g, seen.get(cl))], 1)
                out.add("fleet_group_rebalance_storm", labels, int(bool(storm)))
                if lag is not None:
                    out.add("kafka_consumergroup_group_sum_lag", labels, lag)
        out.add("fleet_metrics_series_left_out", ["group"], idx.size - n)
        for cl, counts in self._shown_counts(idx, seen).items():
            for verdict, k in sorted(counts.items()):
                out.add("fleet_cluster_groups", [label(cl), verdict], k)
        # flagged partitions, worst first
        flagged = self.view.flagged_partitions()
        latest: dict[tuple, int] = {}
        for r in flagged.rows[:max_parts]:
            labels = [label(r["cluster"]), label(r["group"]), r["source"] or "kafka", label(r["topic"]),
                      str(r["partition"])]
            out.add("fleet_partition_verdict", labels + [r["status"] or "UNKNOWN"], 1)
            if r["committed_offset"] is not None:
                out.add("kafka_consumergroup_group_offset", labels, r["committed_offset"])
            if r["lag"] is not None:
                out.add("kafka_consumergroup_group_lag", labels, r["lag"])
            kind = r["lag_seconds_kind"]
            if r["lag_seconds"] is not None and kind not in (None, "unknown"):
                out.add("kafka_consumergroup_group_lag_seconds", labels + [kind], r["lag_seconds"])
            if r["log_end_offset"] is not None:
                key = (labels[0], labels[3], labels[4])
                latest[key] = max(latest.get(key, r["log_end_offset"]), r["log_end_offset"])
        for key, v in latest.items():
            out.add("kafka_partition_latest_offset", list(key), v)
        out.add("fleet_metrics_series_left_out", ["partition"], max(0, len(flagged.rows) - max_parts))
        for (cl, st), k in sorted(Counter((r["cluster"], r["status"]) for r in flagged.rows).items(),
                                  key=lambda x: (str(x[0][0]), str(x[0][1]))):
            out.add("fleet_partitions_flagged", [label(cl), st or "UNKNOWN"], k)

    @staticmethod
    def _shown_counts(idx, seen: dict) -> dict[str, Counter]:
        """Groups per cluster by the verdict shown: a cluster not seen at all shows its OK groups
        BLIND; a partly blind one, those of its OK groups the collection did not see."""
        out = {}
        for cl, counts in idx.by_cluster.items():
            state = seen.get(cl)
            counts = Counter(counts)
            if state and state["state"] not in ("OK", "NEVER") and counts.get("OK"):
                if state["all"]:
                    counts["BLIND"] += counts.pop("OK")
                elif state["groups"]:
                    import pyarrow.compute as pc

                    t = idx.table.filter(pc.equal(idx.table.column("cluster"), cl))
                    blind = set(state["groups"])
                    moved = sum(1 for g, st in zip(t.column("group").to_pylist(), t.column("status").to_pylist())
                                if (st or "OK") == "OK" and g in blind)
                    if moved:
                        counts["OK"] -= moved
                        counts["BLIND"] += moved
            out[cl] = +counts
        return out

    def _offsets(self, out: _Families) -> None:
        rows, _ = self.view.offsets_replicas()
        for r in rows:
            key = [label(r.get("cluster")), str(r.get("broker")), str(r.get("partition"))]
            out.add("fleet_offsets_partition_verdict", key + [label(r.get("verdict") or "UNKNOWN")], 1)
            if r.get("disk_bytes") is not None:
                out.add("fleet_offsets_partition_size_bytes", key, r["disk_bytes"])

    def _coordinators(self, out: _Families) -> None:
        rows, _ = self.view.coordinators()
        for r in rows:
            key = [label(r.get("cluster")), str(r.get("partition"))]
            out.add("fleet_coordinator_partition_verdict", key + [label(r.get("verdict"))], 1)
            out.add("fleet_coordinator_partition_groups_affected", key,
                    sum(int(r.get(k) or 0) for k in ("mismatch", "loading", "unavailable")))
            if r.get("not_ok_seconds") is not None:
                out.add("fleet_coordinator_partition_not_ok_seconds", key, r["not_ok_seconds"])

    def _approvals(self, out: _Families, now: float) -> None:
        pending = self.view.pending_approvals()
        out.add("fleet_pending_approvals", [], len(pending))
        times = [t for t in (epoch(a.get("requested_at")) for a in pending) if t is not None]
        out.add("fleet_pending_approval_oldest_age_seconds", [], max(0.0, now - min(times)) if times else 0)

    def _report_ages(self, out: _Families, now: float) -> None:
        for report, path in self.view.report_files().items():
            if path is not None:
                try:
                    out.add("fleet_report_age_seconds", [report], max(0.0, now - path.stat().st_mtime))
                except FileNotFoundError:
                    pass

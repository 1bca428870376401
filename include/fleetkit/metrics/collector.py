"""The fleet's newest judged state as Prometheus metrics: a prometheus_client custom collector over
the fleet page's read model (fleetkit.fleetview), built on every scrape from its cached files.

What it publishes is `fleetkit.metrics.names.METRICS`. Cardinality is bounded:

* per partition: every partition of every group in the newest collection of each cluster
  (kafka-lag-exporter's names; KMinion's when FLEET_METRICS_NAMES asks), worst first (the newest
  stuck run's verdict, then lag), at most FLEET_METRICS_MAX_PARTITION_SERIES partitions (default
  100,000); the verdicts of flagged partitions (every verdict but OK) under the same limit;
* per group: the verdicts worst first, and the lag aggregates (every partition counted), each at
  most FLEET_METRICS_MAX_GROUP_SERIES groups (default 20,000);
* what the limits leave out is counted in fleet_metrics_series_left_out{kind}; the per-cluster
  counts (fleet_cluster_groups, fleet_partitions_flagged) always cover everything.

Blind is not OK: a group the newest collection of its cluster did not back shows verdict BLIND
(fleetkit.collection.blind.shown_status, as on the page). Only names, verdicts and numbers are
published: never an error text, a collection's blind line or anything from a connection.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.samples import Sample

from fleetkit.collection.blind import parse_time, shown_status
from fleetkit.core.kafka_names import printed_host
from fleetkit.metrics.names import METRICS
from fleetkit.metrics.settings import limits, name_sets

log = logging.getLogger(__name__)

CLUSTER_STATES = ("OK", "BLIND", "FAILING", "STALE", "NEVER")


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


class Section:
    """The per-partition metrics of one version of the read model (FleetView.current_version: the
    newest collections and stuck run) and their encodings: built once per collection, encoded once
    per format, and reused by every scrape until a newer collection or stuck run is written (a
    100,000-partition fleet is about 370,000 series: seconds to build and encode, while Prometheus
    scrapes every 15 to 60 s and the data changes once per collection)."""

    def __init__(self, version: tuple, params: tuple, families: list, left_out: dict[str, int]):
        self.version, self.params, self.families, self.left_out = version, params, families, left_out
        self._encoded: dict = {}
        self._encoders: dict = {}  # content type -> the encoder asked for it (to encode a successor alike)
        self._lock = threading.Lock()

    def collect(self):
        return iter(self.families)

    #: encodings kept (Prometheus asks for one format, compressed; another scraper for another)
    MAX_ENCODINGS = 4

    def encode(self, encoder, content_type: str, deflated: bool = False):
        """The families encoded by `encoder` (a prometheus_client encoder; choose_encoder makes a
        new one per call), once per content type (format, version and escaping): bytes, or with
        `deflated` an exposition.Deflated of them."""
        from fleetkit.metrics.exposition import Deflated, registry_of

        with self._lock:
            key = (content_type, deflated)
            body = self._encoded.get(key)
            if body is None:
                plain = self._encoded.get((content_type, False)) or encoder(registry_of(self))
                body = Deflated(plain) if deflated else plain
                while len(self._encoded) >= self.MAX_ENCODINGS:
                    del self._encoded[next(iter(self._encoded))]
                self._encoded[key] = body
                self._encoders[content_type] = encoder
            return body

    def encode_like(self, other: "Section") -> None:
        """Encode as `other` was asked to be (its formats, compressed or not): a section built off
        the request path is ready for the next scrape."""
        for content_type, deflated in list(other._encoded):
            encoder = other._encoders.get(content_type)
            if encoder is not None:
                self.encode(encoder, content_type, deflated)


_section: Section | None = None
_section_lock = threading.Lock()
_building: set[tuple] = set()  # versions being built off the request path


def build_section(view, clusters: list[str], version: tuple, params: tuple) -> Section:
    sets, max_parts, max_groups = params
    fams = _Families()
    cur = view.current_partitions(clusters, version)
    left_out = FleetCollector.build_partitions(fams, cur, sets, max_parts, max_groups)
    return Section(version, params, list(fams), left_out)


def _refresh(view, clusters: list[str], version: tuple, params: tuple, serving: Section) -> None:
    """Build the section of a newer `version` in a thread, encoded as `serving` is, then serve it."""
    with _section_lock:
        if version in _building:
            return
        _building.add(version)

    def build():
        global _section
        try:
            section = build_section(view, clusters, version, params)
            section.encode_like(serving)
            with _section_lock:
                if _section is serving:  # (not replaced meanwhile by a build on the request path)
                    _section = section
        except Exception as e:  # noqa: BLE001 - the next scrape tries again; the served one stays
            log.warning("fleet metrics: building the partitions of the newest collection failed: %s: %s",
                        type(e).__name__, e)
        finally:
            with _section_lock:
                _building.discard(version)

    threading.Thread(target=build, name="fleet-metrics-refresh", daemon=True).start()


class FleetCollector:
    """prometheus_client collector: `registry.register(FleetCollector(view, fleet))`.

    view: a fleetkit.fleetview.FleetView; fleet: the fleet file (fleetkit.core.fleet.Fleet) or a
    callable returning it (read on every scrape; None: no per-cluster metrics)."""

    def __init__(self, view, fleet=None, max_partitions: int | None = None, max_groups: int | None = None,
                 now=time.time, refresh_in_background: bool = False):
        self.view, self._fleet, self.now = view, fleet, now
        self.refresh_in_background = refresh_in_background
        self.max_partitions, self.max_groups = max_partitions, max_groups
        #: the per-partition section of the last collect(); `section_apart`: collect() leaves its
        #: families out (exposition.scrape appends the section's cached encoding instead)
        self.section: Section | None = None
        self.section_apart = False

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
        sets = name_sets()
        for source, part in (("clusters", lambda: self._clusters(out, now, seen)),
                             ("stuck", lambda: self._stuck(out, seen, max_parts, max_groups)),
                             ("collections", lambda: self._partitions(out, seen, sets, max_parts, max_groups)),
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
        if self.section is not None and not self.section_apart:
            yield from self.section.families

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
            data = {c: t.column(c).to_pylist() for c in ("cluster", "group", "source", "status", "rebalance_storm")
                    if c in cols}
            none = [None] * n
            for cl, g, src, st, storm in zip(data["cluster"], data["group"], data.get("source", none),
                                             data.get("status", none), data.get("rebalance_storm", none)):
                labels = [label(cl), label(g), src or "kafka"]
                out.add("fleet_group_verdict", labels + [shown_status(st or "OK", g, seen.get(cl))], 1)
                out.add("fleet_group_rebalance_storm", labels, int(bool(storm)))
        out.add("fleet_metrics_series_left_out", ["group"], idx.size - n)
        for cl, counts in self._shown_counts(idx, seen).items():
            for verdict, k in sorted(counts.items()):
                out.add("fleet_cluster_groups", [label(cl), verdict], k)
        # flagged partitions, worst first
        flagged = self.view.flagged_partitions()
        for r in flagged.rows[:max_parts]:
            out.add("fleet_partition_verdict", [label(r["cluster"]), label(r["group"]), r["source"] or "kafka",
                                                label(r["topic"]), str(r["partition"]), r["status"] or "UNKNOWN"], 1)
        for (cl, st), k in sorted(Counter((r["cluster"], r["status"]) for r in flagged.rows).items(),
                                  key=lambda x: (str(x[0][0]), str(x[0][1]))):
            out.add("fleet_partitions_flagged", [label(cl), st or "UNKNOWN"], k)

    def _partitions(self, out: _Families, seen: dict, sets: tuple[str, ...], max_parts: int,
                    max_groups: int) -> None:
        """The per-partition section (Section), built once per version of the read model: on the
        request path the first time; after that, with `refresh_in_background` (the api-server), a
        newer collection's is built in a thread while the scrape gets the one before
        (fleet_metrics_partitions_behind 1), so no scrape waits for seconds of building."""
        global _section
        self.section = None
        clusters = list(seen)
        version = self.view.current_version(clusters)
        params = (sets, max_parts, max_groups)
        with _section_lock:
            section = _section
        usable = section is not None and section.params == params and section.version[:2] == version[:2]
        behind = 0
        if usable and section.version != version and self.refresh_in_background:
            _refresh(self.view, clusters, version, params, section)
            behind = 1
        elif not usable or section.version != version:
            section = build_section(self.view, clusters, version, params)
            with _section_lock:
                _section = section
        self.section = section
        for kind, n in section.left_out.items():
            out.add("fleet_metrics_series_left_out", [kind], n)
        out.add("fleet_metrics_partitions_behind", [], behind)

    @staticmethod
    def build_partitions(out: _Families, cur, sets: tuple[str, ...], max_parts: int,
                          max_groups: int) -> dict[str, int]:
        """Every partition of the newest collections (kafka-lag-exporter's and KMinion's names), worst
        first up to max_parts; the group aggregates over every partition, up to max_groups groups.
        Returns what the limits left out: {"partition": n, "group_lag": n}."""
        c = cur.columns
        lx, km = "kafka-lag-exporter" in sets, "kminion" in sets
        add = out.add
        done: set[tuple] = set()
        published = 0
        tps: dict[tuple, list] = {}  # (cluster, topic, partition) -> [log start, log end]
        groups: dict[tuple, list] = {}  # (cluster, group, source) -> [sum, max, max seconds, simple, state]
        topics: dict[tuple, list] = {}  # (cluster, group, source, topic) -> [lag sum, offset sum, assigned]
        for i in range(cur.size):
            cl, g, src, topic, p = c["cluster"][i], c["group"][i], c["source"][i], c["topic"][i], c["partition"][i]
            key = (cl, src, g, topic, p)
            if key in done:  # (one row per partition: a store read twice in one collection)
                continue
            done.add(key)
            lag, secs, assigned = c["lag"][i], c["lag_seconds"][i], c["assigned"][i]
            committed = c["committed_offset"][i]
            gk = (cl, g, src)
            agg = groups.get(gk)
            if agg is None:
                agg = groups[gk] = [0, None, None, True, c["group_state"][i]]
            if lag is not None:
                agg[0] += lag
                agg[1] = lag if agg[1] is None else max(agg[1], lag)
            kind = c["lag_seconds_kind"][i]
            if secs is not None and kind not in (None, "unknown"):
                agg[2] = secs if agg[2] is None else max(agg[2], secs)
            if assigned or src != "kafka" or agg[4] != "Empty":
                agg[3] = False
            tk = gk + (topic,)
            t = topics.get(tk)
            if t is None:
                t = topics[tk] = [0, 0, 0]
            t[0] += lag or 0
            t[1] += committed or 0
            t[2] += 1 if assigned else 0
            if published >= max_parts:
                continue
            published += 1
            lcl, lg, ltopic, lp = label(cl), label(g), label(topic), str(p)
            if lx:
                labels = [lcl, lg, ltopic, lp, label(printed_host(c["member_host"][i], src)), label(c["member_id"][i]),
                          label(c["member_client_id"][i]), src]
                if committed is not None:
                    add("kafka_consumergroup_group_offset", labels, committed)
                if lag is not None:
                    add("kafka_consumergroup_group_lag", labels, lag)
                if secs is not None and kind not in (None, "unknown"):
                    add("kafka_consumergroup_group_lag_seconds", labels + [kind], secs)
            if km and src == "kafka" and lag is not None:
                add("kminion_kafka_consumer_group_topic_partition_lag", [lcl, lg, ltopic, lp], lag)
            marks = tps.get((lcl, ltopic, lp))
            if marks is None:
                marks = tps[(lcl, ltopic, lp)] = [None, None]
            start, end = c["log_start_offset"][i], c["log_end_offset"][i]
            if start is not None:
                marks[0] = start if marks[0] is None else min(marks[0], start)
            if end is not None:
                marks[1] = end if marks[1] is None else max(marks[1], end)
        left_parts = max(0, len(done) - max_parts)
        sums: dict[tuple, list] = {}
        for (cl, topic, p), (start, end) in tps.items():
            if lx and end is not None:
                add("kafka_partition_latest_offset", [cl, topic, p], end)
            if lx and start is not None:
                add("kafka_partition_earliest_offset", [cl, topic, p], start)
            if km:
                if end is not None:
                    add("kminion_kafka_topic_partition_high_water_mark", [cl, topic, p], end)
                if start is not None:
                    add("kminion_kafka_topic_partition_low_water_mark", [cl, topic, p], start)
                s = sums.setdefault((cl, topic), [0, 0])
                s[0] += start or 0
                s[1] += end or 0
        for (cl, topic), (low, high) in sums.items():
            add("kminion_kafka_topic_low_water_mark_sum", [cl, topic], low)
            add("kminion_kafka_topic_high_water_mark_sum", [cl, topic], high)
        # groups in the order they first appear (worst first), at most max_groups
        shown = set(list(groups)[:max_groups])
        for (cl, g, src), (total, most, most_secs, simple, state) in groups.items():
            if (cl, g, src) not in shown:
                continue
            lcl, lg = label(cl), label(g)
            if lx:
                add("kafka_consumergroup_group_sum_lag", [lcl, lg, src], total)
                if most is not None:
                    add("kafka_consumergroup_group_max_lag", [lcl, lg, "true" if simple else "false", src], most)
                if most_secs is not None:
                    add("kafka_consumergroup_group_max_lag_seconds", [lcl, lg, "true" if simple else "false", src],
                        most_secs)
            if km and src == "kafka":
                add("kminion_kafka_consumer_group_info", [lcl, lg, label(state or "Unknown")],
                    int(state == "Stable"))
        for (cl, g, src, topic), (lag_sum, offset_sum, held) in topics.items():
            if (cl, g, src) not in shown:
                continue
            lcl, lg, ltopic = label(cl), label(g), label(topic)
            if lx:
                add("kafka_consumergroup_group_topic_sum_lag", [lcl, lg, ltopic, src], lag_sum)
            if km and src == "kafka":
                add("kminion_kafka_consumer_group_topic_lag", [lcl, lg, ltopic], lag_sum)
                add("kminion_kafka_consumer_group_topic_offset_sum", [lcl, lg, ltopic], offset_sum)
                add("kminion_kafka_consumer_group_topic_assigned_partitions", [lcl, lg, ltopic], held)
        return {"partition": left_parts, "group_lag": len(groups) - len(shown)}

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

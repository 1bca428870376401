"""Burrow's v3 read API over the fleet page's read model: the routes, and Burrow 1.x's JSON key for key.

Burrow's answers (core/internal/httpserver/kafka.go and structs.go, core/protocol/evaluator.go and
storage.go of Burrow 1.2.1) are an envelope, {"error", "message", <the payload>, "request": {"url",
"host"}}, around:

  /v3/kafka                                   "clusters": [names]
  /v3/kafka/<c>                               "module": the cluster module (class-name, servers,
                                              client-profile, topic-refresh, offset-refresh)
  /v3/kafka/<c>/topic                         "topics": [names]
  /v3/kafka/<c>/topic/<t>                     "offsets": [log end offset per partition]
  /v3/kafka/<c>/topic/<t>/consumers           "consumers": [groups with a commit on the topic]
  /v3/kafka/<c>/consumer                      "consumers": [groups]
  /v3/kafka/<c>/consumer/<g>                  "topics": {topic: [per partition: "offsets" (the
                                              ring: {"offset", "timestamp", "lag"}), "owner",
                                              "client_id", "current-lag"]}
  /v3/kafka/<c>/consumer/<g>/status, /lag     "status": {"cluster", "group", "status", "complete",
                                              "partitions" (/status: those worse than OK; /lag: all),
                                              "partition_count", "maxlag", "totallag"}

A name Burrow does not know is a 404 with {"error": true, "message": <Burrow's words>} (a group's
status: 200's shape with status NOTFOUND); a path that is none of these is Burrow's catch-all 404
(its text/plain body). Data: the newest stuck run (`FleetView`), the fleet file's clusters and the
blind rule (fleetkit.collection.blind); the words from fleetkit.burrow.status. Names are taken
exactly as the cluster has them, and looked up only among those the fleet file and the newest run
hold: a name reaches no path of the data root.
"""

from __future__ import annotations

import json
import socket
from typing import NamedTuple

from fleetkit.burrow import status as words
from fleetkit.collection.blind import current_state, parse_time, shown_status
from fleetkit.fleetview import GROUP_RANK

#: Burrow's default `intervals`: the offsets a partition's ring holds at most
RING = 10
#: Burrow's catch-all answer to a path it has no route for (404, text/plain, as http.Error writes it)
INVALID = '{"error":true,"message":"invalid request type","result":{}}\n'


class Answer(NamedTuple):
    status: int
    body: bytes
    content_type: str


def split_path(raw: bytes, prefix: bytes) -> list[str] | None:
    """The segments after `prefix` of a request's path as sent (percent-encoded), each decoded on
    its own: a name holding "/" (sent as %2F) stays one segment. UTF-8, with a lone surrogate written
    as its three bytes (surrogatepass); a segment that is no such text becomes an `Undecodable`,
    which matches no name. None when the path does not start with the prefix."""
    from urllib.parse import unquote_to_bytes

    if not raw.startswith(prefix):
        return None
    rest = raw[len(prefix):]
    if not rest.startswith(b"/"):
        return [] if not rest else None
    out: list[str] = []
    for part in rest[1:].split(b"/"):
        data = unquote_to_bytes(part)
        try:
            out.append(data.decode("utf-8", "surrogatepass"))
        except UnicodeDecodeError:
            out.append(Undecodable(data.decode("utf-8", "surrogateescape")))
    return out


class Undecodable(str):
    """A path segment that is not text: echoed in a 404 (escaped), never matched to a name."""


def _ms(when) -> int:
    t = parse_time(when)
    return 0 if t is None else int(t.timestamp() * 1000)


def _lag(value) -> int:
    """Burrow's lag: records behind, 0 when unknown or when the offset is past the log end."""
    return max(0, int(value)) if value is not None else 0


class BurrowAPI:
    """The answers of one request: `BurrowAPI(view, fleet).answer(segments, url)`.

    view: a fleetkit.fleetview.FleetView; fleet: the fleet file (fleetkit.core.fleet.Fleet);
    host: `request.host` (Burrow's: the server's host name); interval: seconds between collections
    (the cluster module's topic-refresh and offset-refresh; default FLEET_COLLECTION_INTERVAL)."""

    def __init__(self, view, fleet, host: str | None = None, interval: float | None = None):
        self.view, self.fleet = view, fleet
        self.host = socket.gethostname() if host is None else host
        self._interval = interval
        self.clusters = {c.name: c for c in fleet.clusters}

    # -- the envelope --------------------------------------------------------------------------------
    def _json(self, code: int, url: str, message: str, error: bool = False, **payload) -> Answer:
        doc = {"error": error, "message": message, **payload, "request": {"url": url, "host": self.host}}
        # ASCII only: a lone surrogate in a name stays a valid \\u escape
        return Answer(code, json.dumps(doc, separators=(",", ":")).encode("ascii"), "application/json")

    def _not_found(self, url: str, message: str) -> Answer:
        return self._json(404, url, message, error=True)

    def _known(self, cluster: str) -> bool:
        return not isinstance(cluster, Undecodable) and cluster in self.clusters

    def answer(self, segments: list[str] | None, url: str) -> Answer:
        s = segments or []
        if s[:2] != ["v3", "kafka"] or len(s) > 6:
            return Answer(404, INVALID.encode(), "text/plain; charset=utf-8")
        if len(s) == 2:
            return self._json(200, url, "cluster list returned", clusters=list(self.clusters))
        cluster = s[2]
        if len(s) == 3:
            return self.cluster_detail(cluster, url)
        kind, rest = s[3], s[4:]
        if kind == "topic" and not rest:
            return self.topic_list(cluster, url)
        if kind == "topic" and len(rest) == 1:
            return self.topic_detail(cluster, rest[0], url)
        if kind == "topic" and len(rest) == 2 and rest[1] == "consumers":
            return self.topic_consumers(cluster, rest[0], url)
        if kind == "consumer" and not rest:
            return self.consumer_list(cluster, url)
        if kind == "consumer" and len(rest) == 1:
            return self.consumer_detail(cluster, rest[0], url)
        if kind == "consumer" and len(rest) == 2 and rest[1] in ("status", "lag"):
            return self.consumer_status(cluster, rest[0], url, every=rest[1] == "lag")
        return Answer(404, INVALID.encode(), "text/plain; charset=utf-8")

    # -- clusters and topics -------------------------------------------------------------------------
    def cluster_detail(self, cluster: str, url: str) -> Answer:
        """Burrow's cluster module: what the fleet file says of the cluster. Servers and the
        connection's TLS and SASL settings live in an Airflow connection and are not published."""
        if not self._known(cluster):
            return self._not_found(url, "cluster module not found")
        c = self.clusters[cluster]
        every = int(self.interval())
        module = {"class-name": "kafka", "servers": [],
                  "client-profile": {"name": c.kafka_conn_id, "client-id": "", "kafka-version": c.kafka_version,
                                     "tls": None, "sasl": None},
                  "topic-refresh": every, "offset-refresh": every}
        return self._json(200, url, "cluster module detail returned", module=module)

    def interval(self) -> float:
        from fleetkit.core.settings import collection_interval

        return collection_interval() if self._interval is None else self._interval

    def topic_list(self, cluster: str, url: str) -> Answer:
        if not self._known(cluster):
            return self._not_found(url, "cluster not found")
        topics = sorted(self.view.topics().log_end.get(cluster, {}))
        return self._json(200, url, "topic list returned", topics=topics)

    def topic_detail(self, cluster: str, topic: str, url: str) -> Answer:
        """The log end offset of each partition; -1 for a partition no group of the run reads."""
        parts = self.view.topics().log_end.get(cluster, {}).get(topic) if self._known(cluster) else None
        if parts is None:
            return self._not_found(url, "cluster or topic not found")
        offsets = [parts.get(p, -1) for p in range(max(parts, default=-1) + 1)]
        return self._json(200, url, "topic offsets returned", offsets=offsets)

    def topic_consumers(self, cluster: str, topic: str, url: str) -> Answer:
        if not self._known(cluster):
            return self._not_found(url, "cluster not found")
        groups = sorted(self.view.topics().groups.get(cluster, {}).get(topic, ()))
        return self._json(200, url, "consumers of topic returned", consumers=groups)

    # -- groups --------------------------------------------------------------------------------------
    def consumer_list(self, cluster: str, url: str) -> Answer:
        """The groups of the cluster with a commit in the newest stuck run (a NO_COMMIT group is one
        Burrow never saw), each name once (one name in two offset stores is one Burrow group)."""
        import pyarrow.compute as pc

        if not self._known(cluster):
            return self._not_found(url, "cluster not found")
        t = self.view.groups().table
        names: list[str] = []
        if t is not None:
            mine = t.filter(pc.equal(t.column("cluster"), cluster))
            if "status" in mine.column_names:
                mine = mine.filter(pc.fill_null(pc.not_equal(mine.column("status"), "NO_COMMIT"), True))
            names = sorted(set(mine.column("group").to_pylist()) - {None})
        return self._json(200, url, "consumer list returned", consumers=names)

    def _partitions(self, cluster: str, group: str) -> dict[str, dict[int, dict]]:
        """topic -> partition -> the group's finding (with its lag series `points`); where one
        partition is in two offset stores, the worse verdict."""
        if not self._known(cluster) or isinstance(group, Undecodable):
            return {}
        out: dict[str, dict[int, dict]] = {}
        for f in self.view.partitions(cluster, group):
            parts = out.setdefault(f["topic"], {})
            old = parts.get(f["partition"])
            rank = GROUP_RANK.get(f.get("status"), len(GROUP_RANK))
            if old is None or rank < GROUP_RANK.get(old.get("status"), len(GROUP_RANK)):
                parts[f["partition"]] = f
        if all(f.get("status") == "NO_COMMIT" for parts in out.values() for f in parts.values()):
            return {}  # no commit at all: a group Burrow never saw
        return out

    def _widths(self, cluster: str, topics) -> dict[str, int]:
        """Partitions per topic: as many as the newest run saw of the topic (Burrow lists every
        partition of a topic the group commits to, those without a commit with no offsets)."""
        known = self.view.topics().log_end.get(cluster, {})
        return {t: max([*known.get(t, {}), *parts]) + 1 for t, parts in topics.items()}

    @staticmethod
    def ring(f: dict | None) -> list[dict]:
        """A partition's offsets, oldest first, at most RING: the lag series' snapshots where the
        run keeps one (flagged partitions), else the newest committed offset as of the run."""
        if f is None or f.get("committed_offset") is None:
            return []
        points = [p for p in f.get("points") or [] if p.get("committed_offset") is not None]
        if points:
            return [{"offset": p["committed_offset"], "timestamp": _ms(p.get("t")), "lag": _lag(p.get("lag"))}
                    for p in points[-RING:]]
        return [{"offset": f["committed_offset"], "timestamp": _ms(f.get("window_end")), "lag": _lag(f.get("lag"))}]

    def consumer_detail(self, cluster: str, group: str, url: str) -> Answer:
        topics = self._partitions(cluster, group)
        if not topics:
            return self._not_found(url, "cluster or consumer not found")
        widths = self._widths(cluster, topics)
        out = {}
        for topic in sorted(topics):
            parts = topics[topic]
            out[topic] = [{"offsets": self.ring(parts.get(p)), "owner": "", "client_id": "",
                           "current-lag": _lag(parts[p].get("lag")) if p in parts else 0}
                          for p in range(widths[topic])]
        return self._json(200, url, "consumer detail returned", topics=out)

    def consumer_status(self, cluster: str, group: str, url: str, every: bool = False) -> Answer:
        """/status (`every` False: only the partitions worse than OK) and /lag (every partition)."""
        topics = self._partitions(cluster, group)
        if not topics:
            status = {"cluster": cluster, "group": group, "status": "NOTFOUND", "complete": 1.0, "partitions": [],
                      "partition_count": 0, "maxlag": None, "totallag": 0}
            return self._json(404, url, "consumer status returned", status=status)
        state = current_state(self.view.collection_status(cluster))
        blind = shown_status("OK", group, state) == "BLIND"
        widths = self._widths(cluster, topics)
        parts, maxlag = [], None
        for topic in sorted(topics):
            for p in range(widths[topic]):
                f = topics[topic].get(p)
                ring = self.ring(f)
                verdict = f.get("status") if f else "NO_COMMIT"
                entry = {"topic": topic, "partition": p, "owner": "", "client_id": "",
                         "status": words.partition_status(verdict, blind and bool(ring)),
                         "start": ring[0] if ring else None, "end": ring[-1] if ring else None,
                         "current_lag": _lag(f.get("lag")) if f else 0,
                         "complete": words.partition_complete(verdict) if ring else 0.0}
                parts.append(entry)
                if maxlag is None or entry["current_lag"] > maxlag["current_lag"]:
                    maxlag = entry
        complete = sum(1 for e in parts if e["complete"] == 1.0) / len(parts)
        status = {"cluster": cluster, "group": group, "status": words.group_status(e["status"] for e in parts),
                  "complete": complete,
                  "partitions": parts if every else [e for e in parts if words.RANK[e["status"]] > words.RANK["OK"]],
                  "partition_count": len(parts), "maxlag": maxlag, "totallag": sum(e["current_lag"] for e in parts)}
        message = "consumer status returned"
        if blind:
            message += (f": the newest collection of the cluster did not see this group ({state['state']}): "
                        f"partitions last judged OK show ERR")
        return self._json(200, url, message, status=status)

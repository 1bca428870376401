"""Collect one cluster's consumer-group state into dataset rows (the "collect" stage).

No analysis happens here: rows describe what the cluster said, when it said it.

Which groups: those the cluster lists, plus those seen in earlier collections (kept in a small
state file under the data root), plus those named in the fleet file, plus, on brokers before
0.10.1, the groups with live commits in __consumer_offsets. Kafka 0.9 forgets a group when its last
member leaves (ListGroups stops listing it, describe says Dead) and never lists a group that commits
without joining (assign + commit: Flink, Spark, MirrorMaker-style tools, offset resets) while their
committed offsets stay readable until they expire. From 0.10.1 on the brokers list such groups
(Empty) and the listing is enough. KIP-848 consumer groups (Kafka 4) are described through
ConsumerGroupDescribe (clients.kafka); `group_type` says which protocol a group uses.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from fleetkit.clients.kafka import GroupDescription, KafkaCluster, description_from_answer
from fleetkit.clients.offsets_leaders import partition_leaders
from fleetkit.clients.zookeeper import ZooKeeperCluster
from fleetkit.collection.rebalances import consumer_group_counters
from fleetkit.core.datasets import DataRoot, iso_z, prune, utcnow, write_collection
from fleetkit.core.errors import NotAuthorized, blind_summary
from fleetkit.core.fleet import Cluster
from fleetkit.core.kafka_names import CONSUMER_PROTOCOL_ASSIGNOR, OFFSETS_TOPIC
from fleetkit.core.kafka_names import REBALANCING_STATES as REBALANCING

#: the first Kafka version whose brokers list groups that only commit (they keep them, Empty)
LISTS_COMMIT_ONLY_GROUPS_SINCE = (0, 10, 1)
#: message format v1 (0.10.0) added record timestamps; 0.9's records carry none
RECORD_TIMESTAMPS_SINCE = (0, 10, 0)
#: records read per collection for their timestamps (the time lag's refinement), in at most this
#: many reads (one consumer each; a read takes one position per partition)
RECORD_TIMESTAMP_BUDGET = 100
RECORD_TIMESTAMP_READS = 3

log = logging.getLogger(__name__)

#: A group not listed and without committed offsets for this long is forgotten (offsets retention
#: defaults to one day; a week of margin keeps groups of clusters configured with longer ones).
FORGET_AFTER = dt.timedelta(days=8)
DEFAULT_RETENTION_DAYS = 30


@dataclass
class CollectionResult:
    cluster: str
    observed_at: dt.datetime
    rows: dict[str, list[dict]]
    groups: list[str]
    problems: list[str] = field(default_factory=list)
    known_groups: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    #: what the principal was refused (missing ACLs): groups, topics, the cluster it could not see
    refusals: list[NotAuthorized] = field(default_factory=list)
    #: groups whose committed offsets could not be read for another reason -> the error answered
    unread: dict[str, str] = field(default_factory=dict)
    #: wall seconds per step of the whole collection (collect_rows, collect_and_write), in order
    steps: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        counts = ", ".join(f"{k}={len(v)}" for k, v in self.rows.items())
        blind = f", {len(self.unseen_groups)} group(s) not seen" if self.unseen_groups else ""
        split = f" ({', '.join(f'{k} {v:.1f}s' for k, v in self.steps.items())})" if self.steps else ""
        return (f"cluster {self.cluster}: {len(self.groups)} groups, rows {counts}, "
                f"{len(self.problems)} problem(s){blind}, {self.seconds:.1f}s{split}")

    def timed(self, step: str, since: float) -> float:
        """Add the wall time since `since` (time.monotonic()) to `step`; returns now."""
        now = time.monotonic()
        self.steps[step] = self.steps.get(step, 0.0) + (now - since)
        return now

    @property
    def blind(self) -> bool:
        """Something was refused: the rows do not show all the cluster holds (never "OK")."""
        return bool(self.refusals)

    @property
    def unseen_groups(self) -> list[str]:
        return list(dict.fromkeys(r.resource_name for r in self.refusals if r.resource_type == "group"))

    def refuse(self, refusal: NotAuthorized | None) -> None:
        if refusal is not None and not any(str(r) == str(refusal) for r in self.refusals):
            self.refusals.append(refusal)

    def blind_lines(self, first: int = 3) -> list[str]:
        """One line per kind of refusal: groups (count, the first names, the first refusal), then
        each other resource."""
        groups = [r for r in self.refusals if r.resource_type == "group"]
        lines = [f"cluster {self.cluster}: " + blind_summary("group", groups, first)] if groups else []
        lines += [f"cluster {self.cluster}: {r}" for r in self.refusals if r.resource_type != "group"]
        return lines


def member_of(desc: GroupDescription | None, tp: tuple[str, int]):
    """The live member whose assignment holds one partition of a described group, or None."""
    if desc is None or desc.error is not None:
        return None
    return next((m for m in desc.members if m.assignment and tp in m.assignment), None)


def assignment_of(desc: GroupDescription | None, tp: tuple[str, int]) -> tuple[bool | None, str | None, str | None]:
    """(assigned, member client id, member host) for one partition of a described group.

    assigned is True when a live member's assignment holds the partition; False when the group
    has no live members or none of them holds it; None when unknown (describe failed, or 0.9
    omitted assignments because the group is rebalancing).
    """
    if desc is None or desc.error is not None:
        return None, None, None
    if not desc.members:
        return False, None, None
    m = member_of(desc, tp)
    if m is not None:
        return True, m.client_id, m.host
    if desc.state in REBALANCING or any(m.assignment is None for m in desc.members):
        return None, None, None
    return False, None, None


def member_epoch_of(desc: GroupDescription | None, tp: tuple[str, int]) -> int | None:
    """The KIP-848 epoch of the member whose assignment holds the partition (None: classic group,
    or no member holds it)."""
    if desc is None or desc.error is not None:
        return None
    return next((m.member_epoch for m in desc.members if m.assignment and tp in m.assignment), None)


def update_known_groups(known: dict[str, str], listed: set[str], with_offsets: set[str],
                        now: dt.datetime) -> dict[str, str]:
    """Remember groups seen listed or with committed offsets; forget those gone for FORGET_AFTER."""
    out = dict(known)
    stamp = iso_z(now)
    for g in listed | with_offsets:
        out[g] = stamp
    for g, seen in list(out.items()):
        try:
            seen_at = dt.datetime.fromisoformat(seen.replace("Z", "+00:00"))
        except (ValueError, AttributeError):
            seen_at = now
        if now - seen_at > FORGET_AFTER:
            del out[g]
    return out


def collect_cluster(cluster: Cluster, kafka: KafkaCluster, zk: ZooKeeperCluster | None,
                    known_groups: dict[str, str] | None = None,
                    now: dt.datetime | None = None, committed: set[str] | None = None,
                    only: list[str] | None = None) -> CollectionResult:
    """`committed`: groups with live commits the listing may miss (collect_and_write reads them from
    __consumer_offsets on brokers before 0.10.1). `only`: just these groups, and just their
    offsets_snapshots rows (fleetctl lag: no listing, no coordinator or partition-state rows)."""
    t0 = time.monotonic()
    known_groups = dict(known_groups or {})
    problems: list[str] = []
    committed = set(committed or ())

    listing = kafka.list_groups_typed() if only is None else []
    listed = {g for g, _, _ in listing}
    listed_types = {g: t for g, _, t in listing if t}
    groups = sorted(listed | set(known_groups) | set(cluster.groups) | committed) if only is None else sorted(set(only))
    log.info("cluster %s: %d groups listed, %d to collect (known %d, fleet file %d, with commits in %s %d)",
             cluster.name, len(listed), len(groups), len(known_groups), len(cluster.groups), OFFSETS_TOPIC,
             len(committed))

    observed_at = now or utcnow()
    if only is None:
        # the describe (the wire probe) and the offset fetch (the admin client, created by the
        # listing) wait on the brokers, not on each other: both at once
        with ThreadPoolExecutor(2, thread_name_prefix="collect") as pool:
            described = pool.submit(kafka.describe_with_coordinators, groups)
            fetched = pool.submit(kafka.committed_offsets, groups)
            descs, answers = described.result()
            offsets = fetched.result()
    else:
        descs, answers = kafka.describe_with_coordinators(groups)
        offsets = kafka.committed_offsets(groups)
    refusals: list[NotAuthorized] = []
    unread: dict[str, str] = {}
    if only is None:
        refusal = kafka.listing_refusal()
        if refusal is not None:
            refusals.append(refusal)
    for g in groups:  # ListGroups may list groups the principal may not describe: each one is named
        d, got = descs.get(g), offsets.get(g)
        refusal = kafka.refused(d.error if d is not None else None, g, "DescribeGroups") or kafka.refused(
            got if isinstance(got, str) else None, g, "OffsetFetch")
        if refusal is not None:
            refusals.append(refusal)
        elif isinstance(got, str):
            unread[g] = got

    # which (topic, partition) each group has: commits plus live assignments
    per_group: dict[str, set[tuple[str, int]]] = {}
    with_offsets: set[str] = set()
    for g in groups:
        parts: set[tuple[str, int]] = set()
        got = offsets.get(g)
        if isinstance(got, str):
            problems.append(f"group {g!r}: committed offsets not readable ({got}); no snapshot rows for it")
            continue
        if got:
            parts |= set(got)
            if any(v is not None for v in got.values()):
                with_offsets.add(g)
        d = descs.get(g)
        if d is not None:
            for m in d.members:
                parts |= set(m.assignment or ())
        per_group[g] = parts

    all_parts = sorted({tp for parts in per_group.values() for tp in parts})
    pool = ThreadPoolExecutor(1, thread_name_prefix="collect") if only is None else None
    state_problems: list[str] = []
    state_refusals: list[NotAuthorized] = []
    if pool is not None:
        # the partition states (ZooKeeper or metadata) need only the topics: read beside the log offsets
        topics = sorted({OFFSETS_TOPIC} | {t for t, _ in all_parts})
        states = pool.submit(partition_state_rows, cluster, kafka, zk, topics, observed_at, state_problems,
                             state_refusals)
        pool.shutdown(wait=False)
    try:
        log_offsets = kafka.log_offsets(all_parts)
    except BaseException:
        if pool is not None:
            states.cancel()
            pool.shutdown(wait=True)
        raise
    for tp, (_, _, err) in log_offsets.items():
        refusal = kafka.refused(err, tp[0], "ListOffsets")
        if refusal is not None and not any(r.resource == refusal.resource for r in refusals):
            refusals.append(refusal)
        if err:
            problems.append(f"partition {tp[0]}-{tp[1]}: log offsets not readable ({err}); "
                            "log_start/log_end left null")

    snapshots = []
    for g in groups:
        if g not in per_group:
            continue
        d = descs.get(g)
        group_offsets = offsets.get(g) or {}
        state = d.state if d is not None else "Unknown"
        group_type = listed_types.get(g) or (d.group_type if d is not None else None)
        # KIP-848 groups: the group epoch and the departures counter the storm verdict reads
        counters = None
        if group_type == "consumer" and d is not None and d.error is None:
            counters = consumer_group_counters(d.group_epoch, len(d.members))
        for tp in sorted(per_group[g]):
            start, end, _ = log_offsets.get(tp, (None, None, None))
            assigned, client_id, host = assignment_of(d, tp)
            snapshots.append({
                "cluster": cluster.name, "group": g, "topic": tp[0], "partition": tp[1],
                "observed_at": observed_at, "committed_offset": group_offsets.get(tp),
                "log_start_offset": start, "log_end_offset": end, "group_state": state,
                "assigned": assigned, "member_client_id": client_id, "member_host": host,
                "group_type": group_type, "member_epoch": member_epoch_of(d, tp),
                "member_id": getattr(member_of(d, tp), "member_id", None),
            })
            if counters is not None:
                snapshots[-1].update(generation=counters[0], rejoins=counters[1],
                                     assignor=CONSUMER_PROTOCOL_ASSIGNOR + (d.assignor or ""))

    if only is not None:
        result = CollectionResult(cluster=cluster.name, observed_at=observed_at,
                                  rows={"offsets_snapshots": snapshots}, groups=groups, problems=problems,
                                  known_groups=known_groups, refusals=refusals, unread=unread)
        result.seconds = time.monotonic() - t0
        return result

    coordinators = coordinator_rows(cluster.name, kafka, groups, descs, observed_at, problems, answers=answers)

    partition_rows = states.result()
    problems.extend(state_problems)
    refusals.extend(state_refusals)

    result = CollectionResult(
        cluster=cluster.name, observed_at=observed_at,
        rows={"offsets_snapshots": snapshots, "partition_state": partition_rows,
              "group_coordinators": coordinators},
        groups=groups, problems=problems,
        known_groups=update_known_groups(known_groups, listed, with_offsets, observed_at), refusals=refusals,
        unread=unread,
    )
    result.seconds = time.monotonic() - t0
    return result


def coordinator_rows(cluster: str, kafka: KafkaCluster, groups: list[str], descs: dict | None,
                     observed_at: dt.datetime, problems: list[str], answers: dict | None = None) -> list[dict]:
    """group_coordinators rows: the coordinator the cluster names for each group and the error the
    group's lookup or that coordinator's describe answers (kafka_wire; `answers` when already
    probed). Falls back to the admin client's describe (coordinator known only when describe
    succeeds) where the wire client cannot log in (SASL GSSAPI / OAUTHBEARER)."""
    if answers is None and descs is None:
        # one pass: the probe's lookup and describe, KIP-848 groups described again (clients.kafka)
        descs, answers = kafka.describe_with_coordinators(groups)
    elif answers is None:
        answers = kafka.coordinators(groups)
    if descs is None:
        descs = (kafka.describe_groups(groups) if answers is None
                 else {g: description_from_answer(a) for g, a in answers.items()})
    rows = []
    for g in groups:
        d = (descs or {}).get(g)
        a = answers.get(g) if answers is not None else None
        if a is not None:
            coordinator, error = a.coordinator_id, a.error
            state = d.state if d is not None and not d.error else (a.state or "Unknown")
            members = len(d.members) if d is not None and not d.error else (len(a.members) if not a.error else None)
        else:
            coordinator = d.coordinator_id if d else None
            error = d.error if d else "NO_ANSWER"
            state, members = (d.state, len(d.members)) if d else ("Unknown", None)
        rows.append({"cluster": cluster, "group": g, "observed_at": observed_at, "coordinator_id": coordinator,
                     "error": error, "state": state, "members": members})
        if error:
            problems.append(f"group {g!r}: coordinator {coordinator if coordinator is not None else '?'} "
                            f"answered {error}")
    return rows


def partition_state_rows(cluster: Cluster, kafka: KafkaCluster, zk: ZooKeeperCluster | None,
                         topics: list[str], observed_at: dt.datetime, problems: list[str],
                         refusals: list | None = None) -> list[dict]:
    """partition_state rows of `topics` (fleetkit.clients.offsets_leaders: ZooKeeper when the
    cluster has one, else metadata); what could not be read goes to `problems`."""
    return [{"cluster": cluster.name, "topic": s.topic, "partition": s.partition, "observed_at": observed_at,
             "leader": s.leader, "isr": list(s.isr), "leader_epoch": s.leader_epoch,
             "controller_epoch": s.controller_epoch, "source": s.source}
            for s in partition_leaders(kafka, zk, topics, problems, refusals)]


def state_path(root: DataRoot, cluster: str) -> str:
    return root.join("_state", f"cluster={cluster}", "known_groups.json")


def status_path(root: DataRoot, cluster: str) -> str:
    return root.join("_state", f"cluster={cluster}", "collection_status.json")


def collection_status(root: DataRoot, cluster: str) -> dict:
    """A cluster's collection_status.json ({} before its first collection)."""
    return root.read_json(status_path(root, cluster), default={}) or {}


def blind_alerted_path(root: DataRoot) -> str:
    """The clusters whose blind episode was alerted (fleetkit.collection.blind.episode_alerts)."""
    return root.join("_state", "blind_alerted.json")


def record_status(root: DataRoot, cluster: str, ok: dict | None = None, failed: dict | None = None) -> None:
    """Keep the newest successful collection (`ok`) and the newest failure (`failed`) of a cluster
    for the fleet page: {"ok": {...}, "failed": {...}}."""
    doc = collection_status(root, cluster)
    if ok is not None:
        doc["ok"] = ok
    if failed is not None:
        doc["failed"] = failed
    root.write_json_atomic(status_path(root, cluster), doc)


def record_reads(rows: list[dict], budget: int,
                 max_reads: int = RECORD_TIMESTAMP_READS) -> list[dict[tuple[str, int], int]]:
    """The reads `add_record_timestamps` makes: the distinct (topic, partition, committed offset) of
    Kafka-stored rows with lag > 0 and the offset inside the log, the largest lags first, at most
    `budget` of them, packed into at most `max_reads` rounds of one position per partition (a
    consumer holds one); a partition with more offsets than rounds keeps its largest lags."""
    wanted: dict[tuple[str, int, int], int] = {}
    for r in rows:
        c, start, end = r.get("committed_offset"), r.get("log_start_offset"), r.get("log_end_offset")
        if (r.get("source") or "kafka") != "kafka" or c is None or end is None or c >= end:
            continue
        if start is not None and c < start:
            continue
        key = (r["topic"], r["partition"], c)
        wanted[key] = max(wanted.get(key, 0), end - c)
    rounds: list[dict[tuple[str, int], int]] = []
    for t, p, c in sorted(wanted, key=lambda k: (-wanted[k], k))[:max(0, budget)]:
        for positions in rounds:
            if (t, p) not in positions:
                positions[(t, p)] = c
                break
        else:
            if len(rounds) < max_reads:
                rounds.append({(t, p): c})
    return rounds


def add_record_timestamps(cluster: str, kafka: KafkaCluster, rows: list[dict],
                          budget: int = RECORD_TIMESTAMP_BUDGET) -> int:
    """Fill `committed_record_timestamp` (the timestamp of the record at the committed offset, the
    next one the group reads) of Kafka-stored rows with lag > 0, for at most `budget` positions a
    collection (`record_reads`); groups at the same offset of a partition share one read. Returns
    how many rows got one. The time lag trusts it only inside the bracket the log end history
    gives (fleetkit.stuck.timelag)."""
    rounds = record_reads(rows, budget)
    found: dict[tuple[str, int, int], float] = {}
    for positions in rounds:
        for (t, p), ts in kafka.record_timestamps(positions, timeout=3.0).items():
            if ts is not None:
                found[(t, p, positions[(t, p)])] = ts
    n = 0
    for r in rows:
        ts = found.get((r["topic"], r["partition"], r.get("committed_offset")))
        if ts is not None and (r.get("source") or "kafka") == "kafka":
            r["committed_record_timestamp"] = dt.datetime.fromtimestamp(ts, dt.timezone.utc)
            n += 1
    log.info("cluster %s: record timestamps found for %d of %d position(s) read (budget %d), %d row(s)",
             cluster, len(found), sum(len(r) for r in rounds), budget, n)
    return n


def collect_recorded(cluster: Cluster, root: DataRoot, opened, retention_days: int = DEFAULT_RETENTION_DAYS
                     ) -> "CollectionResult":
    """Collect one cluster into the datasets under `root` (all or nothing) through `opened()`, a
    context manager giving (kafka, zk or None, offset-store clients or None) -- the Airflow
    connections' or the CLI's. A failure is recorded in the cluster's collection_status.json (the
    fleet page and the report show it) and raised naming the cluster; an unexpected one (a kazoo
    session lost, a broker dropping mid-request) as ClusterUnreachable, its cause kept."""
    from fleetkit.core.errors import (AuthenticationFailed, ClusterUnreachable, FleetConfigError,
                                      TlsHandshakeFailed)

    known = (ClusterUnreachable, FleetConfigError, AuthenticationFailed, NotAuthorized, TlsHandshakeFailed)
    try:
        try:
            with opened() as (kafka, zk, stores):
                return collect_and_write(cluster, kafka, zk, root, retention_days=retention_days, store_clients=stores)
        except known:
            raise
        except Exception as e:
            raise ClusterUnreachable(f"collection of cluster {cluster.name!r} failed, nothing written: "
                                     f"{type(e).__name__}: {e}") from e
    except known as e:
        try:  # the fleet page shows the newest failure; a data root that cannot take it changes nothing here
            record_status(root, cluster.name, failed={"at": iso_z(utcnow()), "error": str(e)[:2000]})
        except Exception as status_error:  # noqa: BLE001
            log.warning("cluster %s: the collection failure could not be recorded: %s", cluster.name, status_error)
        raise


def collect_and_write(cluster: Cluster, kafka: KafkaCluster, zk: ZooKeeperCluster | None,
                      root: DataRoot, retention_days: int = DEFAULT_RETENTION_DAYS,
                      now: dt.datetime | None = None, store_clients: dict | None = None) -> CollectionResult:
    """Collect one cluster and append the rows to the datasets under `root`, all or nothing.
    store_clients: started kazoo clients of the cluster's offset_stores (collection.zk_offsets)."""
    from fleetkit.collection.blind import blind_status
    from fleetkit.core.datasets import warm_up_conversion

    t0 = time.monotonic()
    warm_up_conversion()  # pyarrow's first conversion imports pandas: done while the brokers answer
    result = collect_rows(cluster, kafka, zk, root, now=now, store_clients=store_clients)
    t = time.monotonic()
    write_collection(root, cluster.name, result.observed_at, result.rows)
    root.write_json_atomic(state_path(root, cluster.name), result.known_groups)
    result.timed("write", t)
    result.seconds = time.monotonic() - t0
    record_status(root, cluster.name, ok={"observed_at": iso_z(result.observed_at), "groups": len(result.groups),
                                          "seconds": round(result.seconds, 1), "problems": result.problems[:50],
                                          "not_seen": [str(r) for r in result.refusals[:50]],
                                          **blind_status(result)})
    for dataset in result.rows:
        for removed in prune(root, dataset, cluster.name, retention_days):
            log.info("pruned %s (older than %d days)", removed, retention_days)
    return result


def collect_rows(cluster: Cluster, kafka: KafkaCluster, zk: ZooKeeperCluster | None, root: DataRoot,
                 now: dt.datetime | None = None, store_clients: dict | None = None) -> CollectionResult:
    """What a scheduled collection reads, without writing the datasets: every group (the known ones
    from `root`), commit times and rebalance history from __consumer_offsets (whose read position
    and fold `root` keeps), record timestamps, the offset stores. fleetctl stuck judges these rows
    the way the scheduled run does."""
    from fleetkit.collection.zk_offsets import add_store_rows

    from fleetkit.collection.offsets_topic import add_commit_times, commit_index
    from fleetkit.collection.rebalances import add_generations

    from fleetkit.collection.offsets_topic import CommitIndex

    t0 = time.monotonic()
    known = root.read_json(state_path(root, cluster.name), default={}) or {}
    committed: set[str] = set()
    problems: list[str] = []
    refused: list[NotAuthorized] = []
    index_seconds = 0.0

    def index_or_blind() -> CommitIndex:
        # the principal may not read __consumer_offsets: the rows are collected without what it
        # tells (commit times, rebalances, groups only it knows), and the run says so (blind)
        nonlocal index_seconds
        started = time.monotonic()
        try:
            return commit_index(cluster, kafka, root)
        except NotAuthorized as e:
            refused.append(e)
            return CommitIndex(set(), {}, [], {})
        finally:
            index_seconds += time.monotonic() - started

    if cluster.version_tuple < LISTS_COMMIT_ONLY_GROUPS_SINCE:
        # the groups that commit without joining, which the listing misses
        before = index_or_blind()
        committed, problems = before.groups, before.problems
    t = time.monotonic()
    result = collect_cluster(cluster, kafka, zk, known_groups=known, now=now, committed=committed)
    result.steps["groups"] = time.monotonic() - t
    # every generation: each partition's commit times (the stuck rules' rhythm), read after the
    # offsets so that the index covers the commits the snapshot saw
    index = index_or_blind()
    result.steps["commit index"] = index_seconds
    for r in refused:
        result.refuse(r)
    result.problems[:0] = problems + [p for p in index.problems if p not in problems]
    timed = add_commit_times(result.rows["offsets_snapshots"], index.times)
    add_generations(result.rows["offsets_snapshots"], index.generations)
    log.info("cluster %s: commit times known for %d of %d snapshot row(s)", cluster.name, timed,
             len(result.rows["offsets_snapshots"]))
    t = time.monotonic()
    if cluster.version_tuple >= RECORD_TIMESTAMPS_SINCE:
        add_record_timestamps(cluster.name, kafka, result.rows["offsets_snapshots"], RECORD_TIMESTAMP_BUDGET)
        t = result.timed("record timestamps", t)
    add_store_rows(cluster, kafka, store_clients, result.rows, result.observed_at, result.problems)
    if cluster.offset_stores:
        result.timed("offset stores", t)
    result.seconds = time.monotonic() - t0
    return result

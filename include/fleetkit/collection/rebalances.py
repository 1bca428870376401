"""Rebalances of classic-protocol groups, from the group-metadata records of __consumer_offsets.

The coordinator writes a group-metadata record each time a rebalance completes (a new generation
with its members and the assignor chosen, `protocol`), when a group empties (no members), and when
a static member is replaced without a rebalance (same generation, new member id). Folded in log
order (`fold_generations`, run by the collection's incremental read of the topic every run), they
tell what snapshots sampled every few seconds cannot:

* ``generation``  how many rebalances: the job counts its growth over the window;
* ``rejoins``     how often a consumer left and came back as a new member (a cumulative count per
                  group): one client identity (its group.instance.id, else client.id@host) seen
                  leaving and then joining again; a first join or a member that never returns is no
                  rejoin, and a static member replaced within its session timeout is no departure;
* ``rejoin_cause`` of the latest rejoin, from how long the member stayed:
    poll_interval  it stayed about its rebalance timeout (the client's max.poll.interval.ms):
                   evicted for not polling while processing one poll's records;
    restart        a dynamic member stayed less than that: restarts, crashes, session timeouts;
    session        a static member (group.instance.id) that still left: its session timed out
                   before it came back;
* ``assignor``    the group's protocol name (range, roundrobin, sticky: eager, every rebalance
                  revokes every partition; cooperative-sticky: only the moved ones; the storm
                  verdict and its fix: fleetkit.stuck.rules.storm_verdict).

KIP-848 consumer groups (group.protocol=consumer, Kafka 4) write other records and are read from
ConsumerGroupDescribe instead (`consumer_group_counters`, filled in by the collection for each
described group): the coordinator bumps the group epoch by one whenever a member joins (a new
member's subscription) and whenever one leaves or is fenced (a leave heartbeat, its session or
rebalance timeout expiring), and never for a steady group nor for a static member back within its
session. With M the members the describe lists and E the group epoch:

* ``generation``  E: its growth over the window counts joins plus departures;
* ``rejoins``     (E - M) // 2, a counter of departures (a departure raises it by one, a join leaves
                  it as it is, a steady group keeps it): the verdict takes the lesser of the
                  departures and the joins in the window as the members that left and came back, so
                  scaling out or in is no churn;
* ``assignor``    ``consumer:`` and the server assignor (uniform, range): the storm verdict's sign
                  that these are epoch counters, and no eager assignor (KIP-848 never stops a group).

Times are the record's current_state_timestamp (value version 2+, Kafka 2.1 and later); older
brokers (0.9, 0.10) write none, so there a record's time is the collection that read it and the
cause is coarse (docs/stuck.md).
"""

from __future__ import annotations

#: rejoins and departures remembered per group
KEPT = 50
#: a group whose last record is older than this is forgotten (ms)
FORGET_AFTER_MS = 7 * 24 * 3600 * 1000


def client_key(member: dict) -> str:
    """The identity that survives a restart: the static instance id, else client.id@host."""
    inst = member.get("group_instance_id")
    if inst:
        return f"instance:{inst}"
    return f"client:{member.get('client_id')}@{member.get('client_host')}"


def cause_of(tenure_ms: float, rebalance_timeout_ms: int | None, session_timeout_ms: int | None,
             static: bool) -> str:
    """Why a member that came back had left, from how long it had stayed (module docstring)."""
    if static:
        return "session"
    if rebalance_timeout_ms and rebalance_timeout_ms > 0:
        slack = 2 * (session_timeout_ms or 0) + 10_000
        if 0.8 * rebalance_timeout_ms <= tenure_ms <= 2 * rebalance_timeout_ms + slack:
            return "poll_interval"
    return "restart"


def fold_generations(state: dict[str, dict], rows: list[dict], observed_ms: int) -> None:
    """Apply group-metadata rows (collection.offsets_topic.record_row's, log order) to `state`
    {group: {"generation", "at", "assignor", "members": {member id: [key, joined ms, rebalance
    timeout, session timeout, static]}, "departed": {key: [left ms, tenure ms, rebalance timeout,
    session timeout, static]}, "rejoins", "cause", "cause_at"}}."""
    for r in rows:
        if r.get("key_version") != 2 or r.get("group") is None:
            continue
        g = r["group"]
        if r.get("tombstone"):
            state.pop(g, None)
            continue
        at = r.get("state_timestamp")
        at = int(at) if at is not None and at > 0 else int(observed_ms)
        s = state.setdefault(g, {"generation": None, "at": at, "assignor": None, "members": {}, "departed": {},
                                 "rejoins": 0, "cause": None, "cause_at": None})
        members = {m.get("member_id"): m for m in (r.get("members") or []) if m.get("member_id")}
        before: dict[str, list] = s["members"]
        same_generation = s["generation"] is not None and r.get("generation") == s["generation"]
        kept_keys = {client_key(m) for m in members.values()}
        # departures: members gone. A member replaced by a new member id of the same identity without
        # a new generation is none (a static member back within its session); with a new generation
        # it is a departure and a rejoin folded into one rebalance (a quick restart)
        for mid, (key, joined, rt, st, static) in before.items():
            if mid not in members and not (same_generation and key in kept_keys):
                s["departed"][key] = [at, max(0, at - joined), rt, st, static]
        now: dict[str, list] = {}
        for mid, m in members.items():
            key = client_key(m)
            if mid in before:
                now[mid] = before[mid]
                continue
            replaced = next((v for v in before.values() if v[0] == key), None) if same_generation else None
            if replaced is not None:  # same seat, no rebalance
                now[mid] = [key, replaced[1], m.get("rebalance_timeout"), m.get("session_timeout"),
                            bool(m.get("group_instance_id"))]
                continue
            gone = s["departed"].pop(key, None)
            if gone is not None:
                left, tenure, rt, st, static = gone
                s["rejoins"] += 1
                s["cause"], s["cause_at"] = cause_of(tenure, rt, st, static), at
            now[mid] = [key, at, m.get("rebalance_timeout"), m.get("session_timeout"),
                        bool(m.get("group_instance_id"))]
        s["members"] = now
        if len(s["departed"]) > KEPT:
            s["departed"] = dict(sorted(s["departed"].items(), key=lambda kv: kv[1][0])[-KEPT:])
        s["generation"], s["at"] = r.get("generation"), at
        if r.get("protocol"):
            s["assignor"] = r["protocol"]


def prune(state: dict[str, dict], now_ms: int) -> None:
    for g in [g for g, s in state.items() if now_ms - (s.get("at") or 0) > FORGET_AFTER_MS]:
        del state[g]


def consumer_group_counters(group_epoch: int | None, members: int) -> tuple[int, int] | None:
    """(generation, rejoins) of a KIP-848 group's snapshot rows: its group epoch and the departures
    counter (group epoch - members) // 2 (module docstring); None when the epoch is not known."""
    if group_epoch is None or group_epoch < 0:
        return None
    return group_epoch, max(0, group_epoch - members) // 2


def add_generations(snapshots: list[dict], state: dict[str, dict]) -> int:
    """Fill generation / rejoins / rejoin_cause / assignor of Kafka-stored snapshot rows of classic
    groups the records know; returns how many rows. Rows of KIP-848 groups (group_type consumer) keep
    the counters the describe gave them (`consumer_group_counters`), even when records of an earlier
    classic life of the group are known."""
    n = 0
    for row in snapshots:
        if (row.get("source") or "kafka") != "kafka" or row.get("group_type") == "consumer":
            continue
        s = state.get(row["group"])
        if s is None or s.get("generation") is None:
            continue
        row["generation"], row["rejoins"] = s["generation"], s["rejoins"]
        row["rejoin_cause"], row["assignor"] = s.get("cause"), s.get("assignor")
        n += 1
    return n

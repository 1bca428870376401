"""Rebalance history from group-metadata records (collection.rebalances) and the storm verdict
(fleetkit.stuck.rules.storm_verdict / storm): the variants of the slow-processing incident."""

from __future__ import annotations

import datetime as dt

from fleetkit.collection.rebalances import (add_generations, cause_of, client_key, consumer_group_counters,
                                            fold_generations)
from fleetkit.stuck import rules as stuck

G = "storm 'grp' $(x) ĝ"


def member(mid, client, instance=None, rt=6000, st=6000):
    return {"member_id": mid, "client_id": client, "client_host": "/127.0.0.1", "group_instance_id": instance,
            "rebalance_timeout": rt, "session_timeout": st}


T0_MS = 1_790_000_000_000


def gen(generation, at_ms, *members, protocol="range", group=G):
    """A group-metadata record_row at T0 + at_ms (None: a record without current_state_timestamp)."""
    return {"key_version": 2, "group": group, "generation": generation, "protocol": protocol if members else None,
            "state_timestamp": None if at_ms is None else T0_MS + at_ms, "members": list(members),
            "tombstone": False}


def fold(*rows, observed_ms=10**9):
    state: dict = {}
    fold_generations(state, list(rows), observed_ms)
    return state


def test_poll_interval_evictions_are_rejoins_with_that_cause():
    b, c = member("b1", "b"), member("c1", "c")
    s = fold(gen(1, 0, member("a1", "a"), b, c),
             gen(2, 7_000, b, c),                      # a evicted after ~max.poll.interval.ms (6 s)
             gen(3, 8_000, member("a2", "a"), b, c),   # and back as a new member
             gen(4, 15_000, b, c),
             gen(5, 16_000, member("a3", "a"), b, c))[G]
    assert (s["generation"], s["rejoins"], s["cause"], s["assignor"]) == (5, 2, "poll_interval", "range")


def test_restarts_of_dynamic_members_are_restart_rejoins():
    b = member("b1", "b", rt=300_000)
    s = fold(gen(1, 0, member("a1", "a", rt=300_000), b), gen(2, 5_000, b),
             gen(3, 6_000, member("a2", "a", rt=300_000), b))[G]
    assert (s["rejoins"], s["cause"]) == (1, "restart")


def test_a_restart_inside_one_rebalance_is_a_departure_and_a_rejoin():
    b = member("b1", "b", rt=300_000)
    s = fold(gen(1, 0, member("a1", "a", rt=300_000), b), gen(2, 4_000, member("a2", "a", rt=300_000), b),
             gen(3, 8_000, member("a3", "a", rt=300_000), b))[G]
    assert (s["generation"], s["rejoins"], s["cause"]) == (3, 2, "restart")


def test_static_member_replaced_within_its_session_is_no_departure():
    a1, a2, b = member("a1", "a", "inst-a"), member("a2", "a", "inst-a"), member("b1", "b", "inst-b")
    s = fold(gen(1, 0, a1, b), gen(1, 5_000, a2, b), gen(1, 9_000, member("a3", "a", "inst-a"), b))[G]
    assert (s["generation"], s["rejoins"], s["cause"]) == (1, 0, None)
    assert sorted(s["members"]) == ["a3", "b1"]


def test_static_member_that_timed_out_rejoins_with_cause_session():
    b = member("b1", "b", "inst-b")
    s = fold(gen(1, 0, member("a1", "a", "inst-a"), b), gen(2, 10_000, b),
             gen(3, 30_000, member("a2", "a", "inst-a"), b))[G]
    assert (s["rejoins"], s["cause"]) == (1, "session")


def test_first_joins_emptying_and_tombstones():
    a, b = member("a1", "a"), member("b1", "b")
    s = fold(gen(1, 0, a), gen(2, 1_000, a, b), gen(3, 2_000))  # joins, then everybody leaves
    assert (s[G]["generation"], s[G]["rejoins"], s[G]["members"], s[G]["assignor"]) == (3, 0, {}, "range")
    fold_generations(s, [{"key_version": 2, "group": G, "tombstone": True}], 0)
    assert G not in s


def test_records_without_state_timestamp_take_the_read_time():
    row = gen(1, None, member("a1", "a"))
    assert fold(row, observed_ms=123_000)[G]["at"] == 123_000
    # offset commits and KIP-848 records leave the history alone
    assert fold({"key_version": 1, "group": G, "topic": "t"}, {"key_version": 3, "group": G}) == {}


def test_cause_of_tenure_against_the_rebalance_timeout():
    assert cause_of(6_500, 6_000, 6_000, False) == "poll_interval"
    assert cause_of(2_000, 6_000, 6_000, False) == "restart"       # well under max.poll.interval.ms
    assert cause_of(200_000, 6_000, 6_000, False) == "restart"     # stayed far longer
    assert cause_of(6_500, 6_000, 6_000, True) == "session"
    assert cause_of(6_500, None, 6_000, False) == "restart"         # 0.9: no rebalance timeout in v0 records
    assert client_key(member("x", "c", "i")) == "instance:i" and client_key(member("x", "c")) == "client:c@/127.0.0.1"


def test_add_generations_fills_kafka_rows_of_known_groups():
    state = fold(gen(1, 0, member("a1", "a")), gen(2, 7_000), gen(3, 8_000, member("a2", "a")))
    rows = [{"group": G, "source": None}, {"group": G, "source": "zookeeper"}, {"group": "other", "source": "kafka"}]
    assert add_generations(rows, state) == 1
    assert (rows[0]["generation"], rows[0]["rejoins"], rows[0]["rejoin_cause"], rows[0]["assignor"]) == \
        (3, 1, "poll_interval", "range")
    assert "generation" not in rows[1] and "generation" not in rows[2]


def test_storm_verdict_names_the_fix_that_matches_the_evidence():
    poll = stuck.storm_verdict(2, 0, 4, 2, "poll_interval", "range")
    assert (poll.storm, poll.kind, poll.group_wide_stop) == (True, "poll_interval", True)
    assert "max.poll.records" in poll.fix and "max.poll.interval.ms" in poll.fix and "cooperative-sticky" in poll.fix
    coop = stuck.storm_verdict(2, 0, 4, 2, "poll_interval", "cooperative-sticky")
    assert (coop.storm, coop.group_wide_stop) == (True, False)
    assert "max.poll.records" in coop.fix and "whole group" not in coop.fix
    restart = stuck.storm_verdict(2, 0, 4, 3, "restart", "roundrobin")
    assert restart.kind == "restart" and "group.instance.id" in restart.fix
    assert "session.timeout.ms" in stuck.storm_verdict(2, 0, 4, 2, "session", None).fix
    assert stuck.storm_verdict(2, 0, 2, 1, "restart", "range").storm is False      # one restart is no storm
    assert stuck.storm_verdict(5, 0, 0, 0, None, "range") == stuck.Storm(False, None, 0, 0, True, None)
    states = stuck.storm_verdict(3, 2, 0, 0, None, None)                             # no records: the old rule
    assert (states.storm, states.kind, states.group_wide_stop) == (True, "rebalancing", None)


def test_storm_from_snapshot_rows_counts_growth_within_the_window():
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)

    def row(sec, partition, generation, rejoins, cause):
        return {"observed_at": t0 + dt.timedelta(seconds=sec), "partition": partition, "group_state": "Stable",
                "generation": generation, "rejoins": rejoins, "rejoin_cause": cause, "assignor": "range"}

    # two snapshots: 10 rejoins before the window count for nothing, 2 inside it make a storm
    rows = [row(0, 0, 20, 10, "restart"), row(0, 1, 20, 10, "restart"),
            row(10, 0, 24, 12, "poll_interval"), row(10, 1, 24, 12, "poll_interval")]
    v = stuck.storm(rows)
    assert (v.storm, v.kind, v.rebalances, v.rejoins) == (True, "poll_interval", 4, 2)
    assert stuck.storm(rows[:2]).storm is False


# -- KIP-848 consumer groups: the group epoch and the departures counter (ConsumerGroupDescribe) -------
def kip848(events, members=0, epoch=0):
    """The (generation, rejoins) a KIP-848 group's rows get after each event: "join" (a new member: the
    coordinator bumps the epoch), "leave" (a member leaves or is fenced: bumped too), "static_back" (a
    static member replaced within its session: no bump), "steady" (a heartbeat: nothing)."""
    out = []
    for e in events:
        if e == "join":
            epoch, members = epoch + 1, members + 1
        elif e == "leave":
            epoch, members = epoch + 1, members - 1
        out.append(consumer_group_counters(epoch, members))
    return out


def kip848_rows(counters, assignor="consumer:uniform", state="Stable"):
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return [{"observed_at": t0 + dt.timedelta(seconds=10 * i), "partition": p, "group_state": state,
             "generation": g, "rejoins": r, "rejoin_cause": None, "assignor": assignor}
            for i, (g, r) in enumerate(counters) for p in (0, 1)]


def test_consumer_group_counters_count_departures_not_joins():
    assert consumer_group_counters(None, 3) is None and consumer_group_counters(-1, 0) is None
    steps = kip848(["join", "join", "join"])                   # three first joins: no departure
    assert [r for _, r in steps] == [0, 0, 0] and steps[-1][0] == 3
    steps = kip848(["leave", "join", "leave", "join"], members=3, epoch=3)
    assert [r for _, r in steps] == [1, 1, 2, 2]               # each departure one, each join none


def test_add_generations_leaves_kip848_rows_alone():
    state = fold(gen(1, 0, member("a1", "a")), gen(2, 7_000), gen(3, 8_000, member("a2", "a")))
    row = {"group": G, "source": "kafka", "group_type": "consumer", "generation": 40, "rejoins": 7,
           "assignor": "consumer:uniform"}
    assert add_generations([row], state) == 0
    assert (row["generation"], row["rejoins"], row["assignor"]) == (40, 7, "consumer:uniform")


def test_kip848_churn_is_a_member_churn_storm():
    # a member restarting (or evicted after max.poll.interval.ms) twice: leave, join, leave, join
    v = stuck.storm(kip848_rows([(3, 0)] + kip848(["leave", "join", "leave", "join"], members=3, epoch=3)))
    assert (v.storm, v.kind, v.rebalances, v.rejoins, v.group_wide_stop) == (True, "member_churn", 4, 2, False)
    assert "max.poll.interval.ms" in v.fix and "group.instance.id" in v.fix
    assert "group.consumer.session.timeout.ms" in v.fix and "cooperative-sticky" not in v.fix
    # the verdict from the window's facts: epoch growth and departures
    assert stuck.storm_verdict(2, 0, 6, 3, None, "consumer:uniform").kind == "member_churn"
    assert stuck.storm_verdict(2, 0, 6, 3, None, "consumer:uniform").rejoins == 3
    assert stuck.storm_verdict(2, 0, 4, 2, None, "consumer:").storm is True     # assignor not said


def test_steady_kip848_groups_are_never_storms():
    steady = stuck.storm(kip848_rows([(5, 1)] * 12))
    assert steady == stuck.Storm(False, None, 0, 0, False, None)
    # scaling out by four, then in by four: epoch up 8, but no member left and came back
    out = stuck.storm(kip848_rows([(2, 0)] + kip848(["join"] * 4, members=2, epoch=2)))
    assert (out.storm, out.rebalances, out.rejoins) == (False, 4, 0)
    back_in = stuck.storm(kip848_rows([(6, 0)] + kip848(["leave"] * 4, members=6, epoch=6)))
    assert (back_in.storm, back_in.rebalances, back_in.rejoins) == (False, 4, 0)
    # one restart is no storm; a static member back within its session moves nothing
    assert stuck.storm(kip848_rows([(3, 0)] + kip848(["leave", "join"], members=3, epoch=3))).storm is False
    assert stuck.storm(kip848_rows([(3, 0)] + kip848(["static_back"] * 5, members=3, epoch=3))).storm is False
    # the classic reading of the same numbers would call 2 rejoins a storm: KIP-848 rows are not read so
    assert stuck.storm_verdict(2, 0, 2, 2, None, "consumer:uniform").storm is False


def test_kip848_storm_report_phrase():
    from fleetkit.stuck import report

    g = {"storm_kind": "member_churn", "rejoins": 3, "rebalances": 6, "group_wide_stop": False}
    assert report.storm_what(g) == ("members of a KIP-848 consumer group leaving and joining again; 3 rejoin(s); "
                                    "group epoch up 6 in the window; no group-wide stop")


def test_kip848_storm_line_of_fleetctl():
    from fleetctl.incident import _storm_lines

    (line,) = _storm_lines([("g", stuck.storm_verdict(2, 0, 6, 3, None, "consumer:uniform"))])
    assert line.startswith("group g: rebalance storm (member_churn): group epoch up 6, 3 rejoin(s) in the window. Fix: ")
    (classic,) = _storm_lines([("g", stuck.storm_verdict(2, 0, 4, 2, "restart", "range"))])
    assert "4 rebalance(s), 2 rejoin(s)" in classic

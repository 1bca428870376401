"""Group-coordinator ownership: who should coordinate a group, who answers, and the verdict.

The expected coordinator of a group is the current leader of its __consumer_offsets partition
(fleetkit.core.partitioning.partition_for). What the cluster says comes from the coordinator lookup and
the named broker's own describe answer (fleetkit.clients.wire). The rules, first match wins:

    UNAVAILABLE  no leader for the partition, COORDINATOR_NOT_AVAILABLE, the coordinator
                 unreachable or no answer at all, or an error this table does not know
    LOADING      COORDINATOR_LOAD_IN_PROGRESS, or NOT_COORDINATOR from the broker that IS the
                 partition's leader (how 0.9 shows a load in progress)
    MISMATCH     the coordinator the cluster names is not the partition's current leader
    OK           the coordinator is the leader and it answers describe

A partition that has a leader but whose groups stay LOADING or UNAVAILABLE for longer than the
load-stuck threshold (default 5 minutes) after its last leader change (or, without a change in
the window, since they stopped being OK) is LOAD_STUCK. A partition without a leader stays
UNAVAILABLE: no broker is loading it.

This module is the one definition: the Spark job (spark_jobs/ownership.py) calls
`verdict` for every group observation and `partition_verdict` for every partition (Arrow UDFs); the
rule table is tests/unit/test_ownership_rules.py, and tests/spark checks the job gives the same answers.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

OK, MISMATCH, LOADING, UNAVAILABLE, LOAD_STUCK = "OK", "MISMATCH", "LOADING", "UNAVAILABLE", "LOAD_STUCK"
NO_GROUPS = "NO_GROUPS"
# worst first: a partition shows the worst verdict of its groups
SEVERITY = (LOAD_STUCK, UNAVAILABLE, LOADING, MISMATCH, OK, NO_GROUPS)
DEFAULT_LOAD_STUCK_SECONDS = 300
# a partition whose groups are in one of these (and that has a leader) waits for a load
WAITING = (LOADING, UNAVAILABLE)

LOAD_IN_PROGRESS = "COORDINATOR_LOAD_IN_PROGRESS"
NOT_COORDINATOR = "NOT_COORDINATOR"
# errors that mean "nobody serves this group right now"
UNAVAILABLE_ERRORS = ("COORDINATOR_NOT_AVAILABLE", "COORDINATOR_UNREACHABLE", "NO_ANSWER")


class Observation(NamedTuple):
    coordinator_id: int | None  # who the cluster names
    error: str | None           # the lookup's or the coordinator's error
    leader: int | None          # the group's partition leader at the same instant (-1: none)


def no_leader(o: Observation) -> bool:
    return o.leader is None or o.leader < 0


def coordinator_not_available(o: Observation) -> bool:
    return o.error is not None and (o.error in UNAVAILABLE_ERRORS or o.coordinator_id is None)


def load_in_progress(o: Observation) -> bool:
    return o.error == LOAD_IN_PROGRESS or (o.error == NOT_COORDINATOR and o.coordinator_id == o.leader)


def coordinator_is_not_leader(o: Observation) -> bool:
    return o.coordinator_id is not None and o.coordinator_id != o.leader


def other_error(o: Observation) -> bool:
    return o.error is not None or o.coordinator_id is None


RULES: tuple[tuple[str, Callable[[Observation], bool]], ...] = (
    (UNAVAILABLE, no_leader),
    (UNAVAILABLE, coordinator_not_available),
    (LOADING, load_in_progress),
    (MISMATCH, coordinator_is_not_leader),
    (UNAVAILABLE, other_error),
)


def verdict(coordinator_id: int | None, error: str | None, leader: int | None) -> str:
    o = Observation(coordinator_id, error, leader)
    for name, rule in RULES:
        if rule(o):
            return name
    return OK


def worst(verdicts) -> str:
    present = set(verdicts)
    for v in SEVERITY:
        if v in present:
            return v
    return NO_GROUPS


def partition_verdict(groups_worst: str | None, leader: int | None, waiting_seconds: int | None,
                      load_stuck_seconds: int = DEFAULT_LOAD_STUCK_SECONDS) -> str:
    """A partition's verdict: the worst verdict of the groups hashed onto it (`groups_worst`; None
    when it has none: UNAVAILABLE without a leader, else NO_GROUPS), LOAD_STUCK when that is
    LOADING or UNAVAILABLE although the partition has a leader, for more than `load_stuck_seconds`
    (`waiting_seconds`: since its last leader change, or since its groups stopped being OK)."""
    leaderless = no_leader(Observation(None, None, leader))
    current = groups_worst or (UNAVAILABLE if leaderless else NO_GROUPS)
    if current in WAITING and not leaderless and waiting_seconds is not None and waiting_seconds > load_stuck_seconds:
        return LOAD_STUCK
    return current

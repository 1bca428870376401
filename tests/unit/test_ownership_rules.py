"""The coordinator-ownership rule table (fleetkit.ownership.rules) without Spark: every verdict with
the case that gives it and why that is the right answer. The Spark job calls these same functions
(tests/spark/test_ownership.py checks it gives the same answers)."""

import pytest

from fleetkit.ownership import rules as ownership
from fleetkit.ownership.rules import LOAD_STUCK, LOADING, MISMATCH, NO_GROUPS, OK, UNAVAILABLE

# (coordinator the cluster names, error it answered, leader of the group's partition) -> verdict, why
GROUP_CASES = [
    ((1, None, 1), OK,
     "the named coordinator is the partition's leader and it answered describe: the group is served"),
    ((2, None, 1), MISMATCH,
     "the cluster names broker 2, but the partition's leader (the only broker that can coordinate the "
     "group) is broker 1: clients are sent to the wrong broker"),
    ((2, "NOT_COORDINATOR", 1), MISMATCH,
     "NOT_COORDINATOR from a broker that is NOT the leader is the mismatch itself, not a load"),
    ((1, "NOT_COORDINATOR", 1), LOADING,
     "NOT_COORDINATOR from the broker that IS the leader: how 0.9 answers while it loads the partition"),
    ((1, "COORDINATOR_LOAD_IN_PROGRESS", 1), LOADING,
     "the coordinator says so itself: it is reading the partition into its group cache"),
    ((2, "COORDINATOR_LOAD_IN_PROGRESS", 1), LOADING,
     "a load in progress wins over the mismatch: the rules are ordered, LOADING before MISMATCH"),
    ((None, "COORDINATOR_NOT_AVAILABLE", 1), UNAVAILABLE,
     "the lookup names no coordinator at all: nobody serves the group"),
    ((1, "COORDINATOR_UNREACHABLE", 1), UNAVAILABLE,
     "the named broker is the leader but cannot be reached: nobody serves the group"),
    ((1, "NO_ANSWER", 1), UNAVAILABLE,
     "the coordinator gave no answer at all: nobody serves the group"),
    ((1, None, -1), UNAVAILABLE,
     "the partition has no leader (-1): no broker can coordinate its groups, whatever is named"),
    ((1, None, None), UNAVAILABLE,
     "the partition's leader is unknown (no state at that instant): treated as no leader"),
    ((None, "INVALID_GROUP_ID", 1), UNAVAILABLE,
     "an error without a named coordinator: the lookup failed, nobody serves the group"),
    ((1, "INVALID_GROUP_ID", 1), UNAVAILABLE,
     "an error this table does not know, from the right broker: not served, and not a known load"),
    ((None, None, 1), UNAVAILABLE,
     "no coordinator named and no error: no answer to judge, so not served"),
]


@pytest.mark.parametrize("observation, expected, why", GROUP_CASES,
                         ids=[f"{o[0]}-{o[1]}-{o[2]}" for o, _, _ in GROUP_CASES])
def test_group_verdict(observation, expected, why):
    assert ownership.verdict(*observation) == expected, why


def test_every_group_verdict_has_a_case():
    assert {v for _, v, _ in GROUP_CASES} == {OK, MISMATCH, LOADING, UNAVAILABLE}


# (worst verdict of the partition's groups, leader, seconds waiting, threshold) -> verdict, why
PARTITION_CASES = [
    ((OK, 1, None, 300), OK, "every group on the partition is served"),
    ((MISMATCH, 1, None, 300), MISMATCH,
     "a group is sent to the wrong broker: that is not a load, the time does not make it LOAD_STUCK"),
    ((LOADING, 1, 120, 300), LOADING,
     "the new leader has been loading for 2 minutes, under the 5-minute threshold: still a normal load"),
    ((LOADING, 1, 300, 300), LOADING, "exactly at the threshold is not past it"),
    ((LOADING, 1, 420, 300), LOAD_STUCK,
     "a leader, and its groups loading for 7 minutes after the change, past the 5-minute threshold"),
    ((UNAVAILABLE, 1, 420, 300), LOAD_STUCK,
     "a leader that has not served its groups for 7 minutes: stuck whether they see a load or nothing"),
    ((UNAVAILABLE, -1, 420, 300), UNAVAILABLE,
     "no leader: no broker is loading the partition, so it is unavailable, never LOAD_STUCK"),
    ((LOADING, 1, None, 300), LOADING, "no start to count from (no change, never OK before): not judged stuck"),
    ((None, -1, None, 300), UNAVAILABLE, "no groups and no leader: the partition itself is unavailable"),
    ((None, None, None, 300), UNAVAILABLE, "no groups and an unknown leader: treated as no leader"),
    ((None, 2, None, 300), NO_GROUPS, "a leader but no group hashes onto the partition: nothing to judge"),
]


@pytest.mark.parametrize("facts, expected, why", PARTITION_CASES,
                         ids=[f"{f[0]}-{f[1]}-{f[2]}" for f, _, _ in PARTITION_CASES])
def test_partition_verdict(facts, expected, why):
    worst, leader, waited, threshold = facts
    assert ownership.partition_verdict(worst, leader, waited, threshold) == expected, why


def test_every_verdict_has_a_case():
    assert {v for _, v, _ in GROUP_CASES + PARTITION_CASES} == set(ownership.SEVERITY)


def test_worst_follows_severity():
    # a partition shows the worst verdict of its groups: nobody served beats a load beats a mismatch
    assert ownership.worst([OK, MISMATCH, LOADING]) == LOADING
    assert ownership.worst([OK, UNAVAILABLE, LOADING]) == UNAVAILABLE
    assert ownership.worst([OK, MISMATCH]) == MISMATCH
    assert ownership.worst([OK, OK]) == OK
    # no group at all: NO_GROUPS, the verdict of an empty partition
    assert ownership.worst([]) == NO_GROUPS


def test_the_recovery_plan_cites_a_run_never_a_path(tmp_path):
    """evidence_run is a ownership run id: whatever it holds, the folder stays under
    <data root>/reports/coordinator; the old free path param is refused."""
    from fleetkit.ownership.plan import RecoveryError, build_plan, evidence_folder

    base = tmp_path / "reports" / "coordinator"
    assert evidence_folder(str(tmp_path), "") == base / "latest"
    for run in ("manual__2026-11-28T10:00:00+00:00", "../../../etc", "/etc/passwd", ".."):
        folder = evidence_folder(str(tmp_path), run)
        assert folder.parent == base and folder.name not in ("..", "."), run
    with pytest.raises(RecoveryError, match="evidence_report .* is gone"):
        build_plan(None, None, None, str(tmp_path), {"evidence_report": "/etc"})

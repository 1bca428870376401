"""Burrow's status words from the toolkit's verdicts: the one table, and Burrow's roll-up.

Burrow 1.x orders its words from least to most bad (core/protocol/evaluator.go): NOTFOUND, OK, WARN,
ERR, STOP, STALL, REWIND. A partition is OK, WARN, STOP, STALL or REWIND; a group is NOTFOUND, OK,
WARN or ERR: the worst of its partitions, where STOP, STALL and REWIND count as ERR. Each partition's
word comes from its stuck verdict (fleetkit.stuck.rules), first match:

  verdict            partition  complete  why
  BLIND              ERR        as judged an OK (or not yet judged) partition of a group its cluster's newest
                                          collection did not see (fleetkit.collection.blind): never OK
  OK                 OK         1
  LAGGING            WARN       1         Burrow's WARN: progressing, lag not decreasing
  STALLED            STALL      1         Burrow's STALL: the offset does not move, a member is live
  STOPPED            STOP       1         Burrow's STOP: nobody consumes the partition
  FROZEN             STOP       1         nothing says whether it runs (a Storm spout Storm's state
                                          does not show): stopped or stuck
                                          cannot be told apart; alerted with STOPPED
                                          (deploy/prometheus/fleet-rules.yml), so the same word
  REWOUND            REWIND     1         Burrow's REWIND
  OUT_OF_RANGE       ERR        1         records deleted unread, or an offset past the log end: no
                                          partition word of Burrow's says it; ERR names no cause
  INSUFFICIENT_DATA  OK         0         Burrow's own answer for too short a history: OK, incomplete
  NO_COMMIT          OK         0         Burrow's entry of a partition without a commit (no offsets)
  anything else      ERR        1         a verdict this table does not know is never shown OK

A group none of whose partitions has a commit (all NO_COMMIT) is one Burrow never saw: NOTFOUND.
"""

from __future__ import annotations

#: Burrow's words, least bad first (StatusConstant 0..6)
WORDS = ("NOTFOUND", "OK", "WARN", "ERR", "STOP", "STALL", "REWIND")
RANK = {w: i for i, w in enumerate(WORDS)}
#: a partition's word for each stuck verdict (the module's table)
PARTITION = {"OK": "OK", "LAGGING": "WARN", "STALLED": "STALL", "STOPPED": "STOP", "FROZEN": "STOP",
             "REWOUND": "REWIND", "OUT_OF_RANGE": "ERR", "INSUFFICIENT_DATA": "OK", "NO_COMMIT": "OK"}
#: the verdicts of a partition not judged: Burrow's OK with `complete` 0
NOT_JUDGED = ("INSUFFICIENT_DATA", "NO_COMMIT")


def partition_status(verdict: str | None, blind: bool = False) -> str:
    """The Burrow word of a partition with this stuck verdict; `blind`: its group was not seen by its
    cluster's newest collection, so what would be OK is ERR."""
    word = PARTITION.get(verdict, "ERR")
    return "ERR" if blind and word == "OK" else word


def partition_complete(verdict: str | None) -> float:
    """Burrow's `complete` of a partition: 1.0 once judged, 0.0 while its history is too short."""
    return 0.0 if verdict in NOT_JUDGED else 1.0


def group_status(partition_words) -> str:
    """The group's word, as Burrow rolls it up: the worst partition word, STOP/STALL/REWIND as ERR;
    NOTFOUND without partitions."""
    worst = max((RANK[w] for w in partition_words), default=RANK["NOTFOUND"])
    return WORDS[min(worst, RANK["ERR"])]

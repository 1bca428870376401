"""The numbered rule table for stuck partitions: the correctness proof of fleetkit.stuck.rules.

Each case is a partition's snapshot history (window 10 minutes, as_of = the last snapshot unless
given) and the status the rules must give, with why that answer is right. The same table runs
through the pure rules (tests/unit) and through the Spark job (tests/spark).
"""

from __future__ import annotations

import datetime as dt

T0 = dt.datetime(2026, 1, 1, 12, 0, tzinfo=dt.timezone.utc)
WINDOW = dt.timedelta(minutes=10)


def snaps(*rows, step=60, start=0, **common):
    """rows: (committed, log_end) or (committed, log_end, extra dict); one per `step` seconds."""
    out = []
    for i, r in enumerate(rows):
        committed, log_end = r[0], r[1]
        extra = r[2] if len(r) > 2 else {}
        row = {"observed_at": T0 + dt.timedelta(seconds=start + i * step), "committed_offset": committed,
               "log_start_offset": 0, "log_end_offset": log_end, "group_state": "Stable", "assigned": True}
        row.update(common)
        row.update(extra)
        out.append(row)
    return out


LIVE = {"assigned": True, "group_state": "Stable"}
DEAD = {"assigned": False, "group_state": "Dead"}
EMPTY = {"assigned": False, "group_state": "Empty"}  # 0.10.1+ (and KIP-848 groups): a group without members

# (number, name, rows, expected status, why)
CASES = [
    (1, "no commit at all", snaps((None, 10), (None, 20), (None, 30)), "NO_COMMIT",
     "A group that never committed for the partition has nothing to judge; it is reported, not ranked."),
    (2, "retention deleted unread records",
     snaps((5, 100, {"log_start_offset": 0}), (5, 120, {"log_start_offset": 50}), **DEAD), "OUT_OF_RANGE",
     "Committed 5 is below log start 50: 45 records were deleted before the group read them."),
    (3, "committed above log end (topic recreated)", snaps((500, 600), (500, 20)), "OUT_OF_RANGE",
     "An offset beyond the log end cannot be fetched; the consumer will reset."),
    (4, "caught-up consumer that commits rarely (Burrow #123, #128 flagged STOP)",
     snaps((100, 100), (100, 100), step=600), "OK",
     "Lag 0 is OK whatever the commit interval: nothing is waiting to be consumed."),
    (5, "single snapshot", snaps((10, 50)), "INSUFFICIENT_DATA",
     "One snapshot cannot show movement."),
    (6, "two snapshots spanning less than half the window", snaps((10, 50), (10, 60), step=120), "INSUFFICIENT_DATA",
     "120 s of a 600 s window: a consumer committing every few minutes must not be called stuck."),
    (7, "offsets reset backwards", snaps((100, 200), (150, 210), (40, 220), (60, 230), step=100), "REWOUND",
     "150 -> 40: someone reset the group, or a consumer committed an old position."),
    (8, "poison record: alive, offset frozen", snaps((42, 60), (42, 70), (42, 80), (42, 90), step=100, **LIVE),
     "STALLED", "A live member holds the partition and the offset never moved while lag > 0."),
    (9, "stopped group on 0.9 (Dead, not Empty)", snaps((42, 60), (42, 70), (42, 80), step=150, **DEAD),
     "STOPPED", "No live member; the rule looks at assigned, not at the state name (0.9 says Dead)."),
    (10, "stopped with one zero-lag sample in the window (Burrow #290, #745 missed it)",
     snaps((100, 100), (100, 130), (100, 160), (100, 190), step=100, **DEAD), "STOPPED",
     "The first sample had lag 0, but the offset never moved since while the log grew by 90."),
    (11, "assignment unknown while rebalancing (assigned null)",
     snaps((7, 9), (7, 9), (7, 9), step=200, assigned=None, group_state="PreparingRebalance"), "STOPPED",
     "Without a member known to hold the partition the frozen offset counts as stopped (assigned is not true)."),
    (12, "consumer at half the produce rate (Burrow said OK; lag 99 -> 5,124 measured here)",
     snaps((1000, 1099), (2000, 3099), (3000, 5099), (4000, 7099), (5000, 10124), step=100), "LAGGING",
     "Lag grew by 5,025 while 9,025 records arrived: far above 5 % of what was produced."),
    (13, "lag climbing to 200k (Burrow #738 never warned)",
     snaps((0, 10_000), (10_000, 80_000), (20_000, 150_000), (30_000, 230_000), step=100), "LAGGING",
     "Lag 10,000 -> 200,000, never decreasing, while the consumer advanced."),
    (14, "healthy consumer whose lag wobbles with its commit interval",
     snaps((100, 130), (200, 220), (300, 340), (400, 420), (500, 540), step=100), "OK",
     "Lag goes up and down (30, 20, 40, 20, 40): it keeps pace."),
    (15, "lag grows but by less than 5 % of production",
     snaps((1000, 1100), (2000, 2110), (3000, 3120), (4000, 4125), step=100), "OK",
     "Lag 100 -> 125 while 3,025 records arrived: 0.8 %, within the commit wobble."),
    (16, "two snapshots only, offset advanced, lag growing", snaps((10, 100), (20, 300), step=400), "OK",
     "LAGGING needs 3 snapshots; two points cannot separate a trend from a wobble."),
    (17, "rows without a commit are ignored inside the window",
     snaps((None, 50), (42, 60), (None, 70), (42, 80), (42, 90), step=100, **LIVE), "STALLED",
     "Null-commit rows are skipped: three snapshots with the offset at 42 remain."),
    (18, "snapshots outside the window are ignored",
     snaps((900, 900), start=-3600, **LIVE) + snaps((100, 150), (100, 160), (100, 170), step=200, **LIVE), "STALLED",
     "The hour-old row with offset 900 is outside the window (it would make this REWOUND); inside, the "
     "offset sits at 100 with a live member."),
    (19, "dead consumer whose lag only grows (Burrow learns lag on commits only)",
     snaps((300, 400), (300, 700), (300, 1000), step=200, **DEAD), "STOPPED",
     "We read the log end every snapshot: lag grows 100 -> 700 with no commit and no member."),
    (20, "committed exactly at log start with records deleted before it", snaps((50, 100, {"log_start_offset": 50}),
                                                                                  (50, 120, {"log_start_offset": 50}),
                                                                                  (50, 140, {"log_start_offset": 50}),
                                                                                  step=200, **LIVE),
     "STALLED", "Offset 50 == log start 50 is in range; it never moved with a live member: stalled."),
    (21, "stopped group on 0.10.1+ (Empty, as 0.9's Dead)", snaps((42, 60), (42, 70), (42, 80), step=150, **EMPTY),
     "STOPPED", "Same as case 9: newer brokers keep the member-less group and call it Empty."),
    (22, "commit-only group (assign + commit, never joins) behind a log start that moved",
     snaps((5, 100, {"log_start_offset": 0}), (5, 120, {"log_start_offset": 50}), **EMPTY), "OUT_OF_RANGE",
     "Same as case 2 on every generation: committed 5 is below log start 50."),
    (23, "KIP-848 group reconciling while its member still holds the partition, offset frozen",
     snaps((42, 60), (42, 70), (42, 80), step=150, assigned=True, group_state="Reconciling"), "STALLED",
     "Reconciling is a KIP-848 rebalance, but the member's current assignment holds the partition: stalled."),
    (24, "KIP-848 group assigning, assignment unknown (assigned null), offset frozen",
     snaps((7, 9), (7, 9), (7, 9), step=200, assigned=None, group_state="Assigning"), "STOPPED",
     "As case 11 for a classic rebalance: no member known to hold the partition."),
    (25, "KIP-848 group that never committed", snaps((None, 10), (None, 20), (None, 30), group_state="Stable"),
     "NO_COMMIT", "As case 1: the no-commit verdict does not depend on the group's protocol."),
]

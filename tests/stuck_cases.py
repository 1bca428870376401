"""The numbered rule table for stuck partitions: the correctness proof of fleetkit.stuck.rules.

Each case is a partition's snapshot history (window 10 minutes, as_of = the last snapshot unless
given) and the status the rules must give, with why that answer is right. The same table runs
through the pure rules (tests/unit) and through the Spark job (tests/spark). Cases 26 on are the
early-detection cases (snapshots 10 s apart, far less history than half the window) and the
false-positive traps next to them; SINCE gives the `since` and `confidence` some of them must show.
Cases 40 on are the lag trend's (rule 8), simulated second by second (`consumer`) and also replayed
at every snapshot time: SLOWED says how soon LAGGING must come, NEVER_FLAGGED which are never flagged.
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


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def timed(committed_at: float, interval: float) -> dict:
    """The columns the collection fills from __consumer_offsets: when the offset took its value
    (seconds after T0) and the partition's typical seconds between offset changes."""
    return {"committed_at": at(committed_at), "commit_interval_seconds": float(interval)}


def series(offsets, log_end, step=10, extra=None, **common):
    """One snapshot per `step` seconds: committed offset offsets(t), log end log_end(t), plus
    extra(t) -> dict of more columns."""
    return snaps(*[(c, e, extra(i * step) if extra else {}) for i, (c, e) in
                   enumerate(zip(offsets, log_end))], step=step, **common)


def consumer(seconds, rate, capacity, commit_every, step=10, seed=0, bursts=None, **common):
    """A partition simulated second by second, one snapshot every `step` seconds (from 0 to `seconds`):
    a producer writing about rate(t) records a second (+-25 %, a seeded jitter, plus bursts[t]
    records at second t), a consumer processing up to capacity(t) records a second of what is there
    and committing its position every `commit_every` seconds."""
    import random

    rng = random.Random(seed)
    bursts = bursts or {}
    log_end = position = committed = 0
    rows = []
    for t in range(seconds + 1):
        if t % step == 0:
            rows.append((committed, log_end))
        log_end += round(rate(t) * rng.uniform(0.75, 1.25)) + bursts.get(t, 0)
        position = min(log_end, position + round(capacity(t) * rng.uniform(0.9, 1.1)))
        if t % commit_every == commit_every - 1:
            committed = position
    return snaps(*rows, step=step, **common)


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
     snaps((1000, 1099), (2000, 3099), (3000, 5099), (4000, 7099),
           (5000, 10124, {"committed_record_timestamp": at(150)}), step=100), "LAGGING",
     "Lag grew by 5,025 while 9,025 records arrived: far above 5 % of what was produced. (The record at "
     "5,000 carries timestamp +150 s, inside the bracket the log end history gives it (+100 s, +200 s]: "
     "its time lag is exact, 250 s.)"),
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
    # -- early detection: verdicts within a snapshot interval or two of the fault ---------------------
    (26, "fast committer stalls on a poison record (commit times known)",
     snaps((100, 110), (200, 215), (300, 310), (400, 420), (500, 530), (600, 640, timed(48, 3)),
           (600, 700, timed(48, 3)), step=10, **LIVE), "STALLED",
     "It commits every 3 s; offset 600 was committed at 48 s and work has waited there 12 s, seen by two "
     "snapshots: past max(snapshot interval 10 s, 2 x 3 s), long before half the window."),
    (27, "fast committer's consumer closed (commit times known)",
     snaps((100, 110), (200, 215), (300, 310), (400, 420), (500, 530), (600, 640, timed(48, 3)),
           (600, 700, {**timed(48, 3), **DEAD}), step=10, **LIVE), "STOPPED",
     "As case 26, but no member holds the partition at the last snapshot."),
    (28, "fast committer, only one snapshot at the frozen offset yet",
     snaps((100, 110), (200, 215), (300, 310), (400, 420), (500, 530), (600, 640, timed(48, 3)), step=10, **LIVE),
     "INSUFFICIENT_DATA",
     "One snapshot cannot tell a stall from a commit about to come; the next one decides."),
    (29, "stall seen by the snapshots alone (ZooKeeper-stored offsets: no commit times)",
     snaps((100, 110), (200, 215), (300, 310), (400, 420), (500, 530), (600, 640), (600, 700), (600, 760),
           step=10, **LIVE), "STALLED",
     "The offset changed at every snapshot (rhythm 10 s); it has now sat at 600 for three snapshots, 20 s "
     "counted from the first: past max(10 s, 2 x 10 s)."),
    (30, "slow committer: commits every 30 s under steady traffic (commit times known)",
     series([300 * (t // 30) for t in range(0, 330, 10)], [10 * t + 100 for t in range(0, 330, 10)],
            extra=lambda t: timed(30 * (t // 30), 30), **LIVE), "OK",
     "Its offset sits still for 30 s between commits while lag grows; that is its rhythm (threshold 60 s), "
     "and lag falls at every commit."),
    (31, "slow committer, snapshots alone", series([300 * (t // 30) for t in range(0, 330, 10)],
                                                 [10 * t + 100 for t in range(0, 330, 10)], **LIVE), "OK",
     "As case 30 without commit times: the snapshots see a change every 30 s, so 20 s at one offset is normal."),
    (32, "rare committer: commits only when a record arrives, one just arrived",
     series([5] * 31, [5] * 29 + [6, 6], extra=lambda t: timed(-100, 120), **LIVE), "INSUFFICIENT_DATA",
     "Caught up for 280 s, then one record waits 10 s: it commits about every 2 minutes, so nothing is "
     "late yet (before, the whole-window rule called this STALLED); a record waits at a frozen offset, so "
     "not \"keeping pace\" either: not judged yet."),
    (33, "rare committer, snapshots alone", series([5] * 31, [5] * 29 + [6, 6], **LIVE), "INSUFFICIENT_DATA",
     "As case 32 without commit times: one record has waited one snapshot interval, less than the two "
     "the rule asks for when the partition's rhythm is unknown: not judged yet."),
    (34, "healthy committer that missed one snapshot (commit every ~10 s, last one 17 s ago)",
     series([100 * i for i in range(31)] + [3100, 3100], [100 * i + 50 for i in range(33)],
            extra=lambda t: timed(303 if t >= 310 else t, 10), **LIVE), "OK",
     "Its rhythm is 10 s, so the threshold is 20 s: 17 s since the commit of 3100 is within it."),
    (35, "offsets reset backwards, seen at once", snaps((100, 200), (150, 210), (40, 220), step=10), "REWOUND",
     "A decrease needs two snapshots, not half a window: 150 -> 40."),
    (36, "fast committer caught up, then closed while the producer went on",
     snaps((100, 110), (200, 215), (300, 310), (400, 420), (500, 530), (600, 600, timed(48, 3)),
           (600, 610, timed(48, 3)), (600, 620, timed(48, 3)), step=10, **DEAD), "STOPPED",
     "Lag was 0 at 50 s, so work waits since the next snapshot (60 s): 10 s, seen twice, past max(10 s, 6 s)."),
    (37, "slow committer that really stopped moving (commit every 30 s, none for 70 s)",
     series([300] * 8, [400 + 100 * i for i in range(8)], extra=lambda t: timed(0, 30), **LIVE), "STALLED",
     "Two of its own commit intervals (60 s) have passed since its last commit with records waiting."),
    (38, "consumer restarted after a pause: its offset was committed long ago, history starts now",
     snaps((300, 400, timed(-300, 30)), (300, 500, timed(-300, 30)), (300, 600, timed(-300, 30)), step=10, **LIVE),
     "INSUFFICIENT_DATA",
     "Its commit is 5 minutes old, but no snapshot saw lag before 0 s: it may have been down until then and "
     "commits every 30 s, so 20 s without a commit is within its rhythm."),
    (39, "commit frozen while lag doubles, two snapshots 450 s apart, a live member",
     snaps((100, 200), (100, 300), step=450, **LIVE), "INSUFFICIENT_DATA",
     "The frozen-wait threshold (two snapshot intervals, 900 s) is not reached and LAGGING needs three "
     "snapshots; a frozen offset whose lag grew is never \"keeping pace\": not judged yet, frozen for 450 s."),
    # -- the lag trend: simulated partitions (`consumer`), a producer at about 20 records/s, a snapshot every 10 s --
    (40, "consumer slowed to half the production rate 60 s ago, commits every 7 s",
     consumer(600, lambda t: 20, lambda t: 40 if t < 540 else 10, 7, seed=40, **LIVE), "LAGGING",
     "Before the slow-down its lag wobbled between 0 and ~140 (a dip at each commit); since, it rose 137 -> 208 "
     "-> 333 -> 459 -> 507 -> 635. The strict rule (lag never decreased across the whole window) stays false for "
     "a whole window after such a slow-down: never LAGGING. The trend over the last 60 s (6 snapshot intervals "
     ">= 3 x (rhythm 7 s + 10 s)) rises and its floor rises third by third: LAGGING 50 s after the slow-down "
     "(SLOWED)."),
    (41, "half-rate consumer from its first snapshot, commits every 2 s (bench/stuck_latency.py's slow)",
     consumer(60, lambda t: 20, lambda t: 10, 2, seed=41, **LIVE), "LAGGING",
     "60 s of history is a fifth of the window: rule 5 called it INSUFFICIENT_DATA until 300 s had been collected "
     "(7.5 minutes with fleetctl's 15-minute window, never in the benchmark's 3 minutes). The trend needs its own "
     "60 s only: lag 0 -> 564 while 1,100 records arrived."),
    (42, "healthy consumer with bursty traffic: lag up and down around a level (commits every 7 s)",
     consumer(600, lambda t: 20, lambda t: 30, 7, seed=42, bursts={t: 300 for t in range(17, 600, 45)}, **LIVE),
     "OK", "300 extra records every 45 s lift the lag to ~300, it falls back to ~50 by the next burst: its floor "
     "does not rise from third to third, at no snapshot time (NEVER_FLAGGED)."),
    (43, "consumer catching up after a burst of 3,000 records (1.5 x the production rate, commits every 5 s)",
     consumer(600, lambda t: 20, lambda t: 30, 5, seed=43, bursts={300: 3000}, **LIVE), "OK",
     "The burst lifts the lag once (the floor rises into one third only), then the lag falls 100 a snapshot "
     "until it is 0: never LAGGING, also while it drains (NEVER_FLAGGED)."),
    (44, "consumer slowed to half rate 120 s ago, commits in steps every 30 s",
     consumer(600, lambda t: 20, lambda t: 40 if t < 480 else 10, 30, seed=44, **LIVE), "LAGGING",
     "Its lag falls at every commit (e.g. 706 -> 600, 1003 -> 896) but each floor is higher than the last: "
     "the trend spans 3 x (30 s + 10 s) so each third sees a snapshot after a commit; LAGGING 120 s after the "
     "slow-down (SLOWED)."),
]

#: case number -> (the slow-down, in seconds after T0; the verdict LAGGING must come at most this many
#: seconds after it, replaying the judgement at every snapshot time, and nothing be flagged before it)
SLOWED = {40: (540, 60), 41: (0, 60), 44: (480, 120)}
#: cases never flagged at any snapshot time of their history
NEVER_FLAGGED = (14, 15, 30, 31, 34, 42, 43)

#: case number -> (since, in seconds after T0; confidence)
SINCE = {
    26: (48, "medium"),    # since the commit of 600 (exact), 12 s < 2 x the 10 s threshold
    27: (48, "medium"),
    29: (50, "low"),       # the first snapshot at 600; rhythm from snapshots only
    36: (60, "medium"),    # lag 0 at 50 s: since the next snapshot
    37: (0, "medium"),     # 70 s of a 60 s threshold: not yet twice
    8: (0, "high"),        # whole window
    35: (None, "high"),
}

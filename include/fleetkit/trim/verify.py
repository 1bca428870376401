"""Verifying a __consumer_offsets trim: every group's committed offsets read back after the trim
against those read before it: none lost, none behind (a group may have moved on by itself: live
members, or standalone consumers that commit while their group is Empty).
"""

from __future__ import annotations

import logging
import time

from fleetkit.core.action import ClusterContext

log = logging.getLogger(__name__)


def compare_offsets(before: dict, after: dict, inactive: set[str]) -> list[str]:
    """Every group's offsets after the trim vs before: no offset may vanish or go back. Groups
    without live members (`inactive`) normally read back the same offset; one that moved forward
    was committed by the group itself (a standalone consumer) and is not a loss."""
    problems = []
    for g, offs in before.items():
        if isinstance(offs, str):
            continue
        now = after.get(g)
        if isinstance(now, str) or now is None:
            problems.append(f"group {g!r}: offsets not readable after the trim ({now})")
            continue
        for tp, off in offs.items():
            if off is None:
                continue
            got = now.get(tp)
            if got is None or got < off:
                problems.append(f"group {g!r} {tp[0]}-{tp[1]}: {off} before the trim, {got} after")
    return problems


def offsets_json(offs: dict) -> dict:
    return {g: (v if isinstance(v, str) else {f"{t}|{p}": o for (t, p), o in v.items()}) for g, v in offs.items()}


def offsets_from_json(doc: dict) -> dict:
    out = {}
    for g, v in doc.items():
        if isinstance(v, str):
            out[g] = v
        else:
            out[g] = {(k.rsplit("|", 1)[0], int(k.rsplit("|", 1)[1])): o for k, o in v.items()}
    return out


def all_groups(plan: dict) -> list[str]:
    return sorted({g for p in plan["details"]["trim_plan"]["partitions"] for g in p.get("groups", [])}
                  | set(plan["details"]["groups"]))


def read_offsets_when_loaded(ctx: ClusterContext, groups: list[str], timeout: float = 300) -> tuple[dict, float]:
    """Committed offsets of groups, retrying while the coordinator is still loading (0.9 answers
    NOT_COORDINATOR then). Returns (offsets, seconds waited)."""
    t0 = time.monotonic()
    while True:
        # 0.9 answers an offset fetch during a load with no offsets and no error, but describe
        # fails with NOT_COORDINATOR: wait for describe, then read
        loading = {g: d.error for g, d in ctx.kafka.describe_groups(groups).items() if d.error}
        offs = ctx.kafka.committed_offsets(groups) if not loading else {}
        failing = loading or {g: v for g, v in offs.items() if isinstance(v, str)}
        if not failing or time.monotonic() - t0 > timeout:
            if failing:
                log.warning("offsets still not readable after %.0f s: %s", timeout, dict(list(failing.items())[:5]))
            if not offs:
                offs = ctx.kafka.committed_offsets(groups)
            return offs, time.monotonic() - t0
        time.sleep(0.5)


def verify(ctx: ClusterContext, plan: dict, result: dict) -> list[str]:
    """The trim's effect: the offsets read back now against those execute read before."""
    after, _ = read_offsets_when_loaded(ctx, all_groups(plan))
    return compare_offsets(offsets_from_json(result.get("before") or {}), after, set(result.get("inactive", [])))

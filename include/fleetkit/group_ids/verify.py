"""Verifying group-id mapping writes: every changed path read back (``read_back``) and compared
with what the apply left (``verify``); a path written since by someone else is theirs (a note)."""

from __future__ import annotations

import logging
from typing import Iterable

from kazoo.exceptions import NoNodeError

from fleetkit.core.action import ClusterContext

log = logging.getLogger(__name__)


def read_back(client, paths: Iterable[str]) -> dict[str, tuple[str, int] | None]:
    """path -> (data, version) or None (absent), read concurrently (verification, tests)."""
    futs = {p: client.get_async(p) for p in paths}
    out = {}
    for p, fut in futs.items():
        try:
            data, stat = fut.get(timeout=30)
            out[p] = (data.decode("utf-8", errors="replace"), stat.version)
        except NoNodeError:
            out[p] = None
    return out


def verify(client, result_changed: list[dict]) -> tuple[list[str], list[str]]:
    """(problems, notes). A changed path reading back its planned state is fine; one at a newer
    version was written by someone else since (a note, not a problem: it is theirs)."""
    now = read_back(client, [c["path"] for c in result_changed])
    problems, notes = [], []
    for c in result_changed:
        cur = now[c["path"]]
        if c["op"] == "delete":
            if cur is not None:
                notes.append(f"{c['path']} exists again (re-created since, version {cur[1]})")
        elif cur is None:
            notes.append(f"{c['path']} was deleted since the write")
        elif cur[1] == c["new_version"] and cur[0] != c["after"]:
            problems.append(f"{c['path']} holds {cur[0]!r} at version {cur[1]}, expected {c['after']!r}")
        elif cur[1] != c["new_version"]:
            notes.append(f"{c['path']} was written since (version {cur[1]}, ours {c['new_version']})")
    return problems, notes


def verify_result(ctx: ClusterContext, plan: dict, result: dict) -> list[str]:
    """The runbook's verify stage: problems of the executed result; notes are logged."""
    problems, notes = verify(ctx.zk.client, result.get("changed_paths") or [])
    for n in notes:
        log.warning("written since by someone else (theirs stands): %s", n)
    return problems

"""Blind is not OK: what one cluster's collection could not see, and the cluster's state from it.

The one rule (used by the collect task, the stuck report and the fleet page):

* a collection is **blind** when the principal was refused something (a missing ACL:
  `CollectionResult.refusals`, named through `core.errors.blind_summary`), when some groups'
  committed offsets could not be read (`CollectionResult.unread`), or when it read no
  `offsets_snapshots` row although the cluster has groups (a listing filtered by ACLs answers
  empty, without an error);
* a cluster is **FAILING** when its newest collection attempt did not complete (unreachable, login
  refused: `collection_status.json`'s `failed` is newer than its `ok`), **STALE** when its newest
  collection is older than twice the collection interval (the schedule stopped, a collect task
  killed before it could say so), **BLIND** when its newest collection was blind, **NEVER** before
  its first collection, **OK** otherwise;
* a FAILING or STALE cluster's groups, and a BLIND cluster's groups that were not seen (all of them
  when the cluster itself was not seen), are never shown OK: they show BLIND.

Everything here is data from the clusters (names are hostile): callers escape it where they render it.
"""

from __future__ import annotations

import datetime as dt

from fleetkit.core.durations import short_duration
from fleetkit.core.errors import blind_summary, quoted_names
from fleetkit.core.render import visible_controls

#: the state a group's OK verdict shows when its cluster's collection did not see it
BLIND = "BLIND"
#: a cluster whose newest collection is older than twice the collection interval
STALE = "STALE"
#: group names kept in the status file per cluster (the line names the first few)
KEEP_GROUPS = 200


def blind_lines(result) -> list[str]:
    """What a collection (`fleetkit.collection.groups.CollectionResult`) did not see, one line per
    kind, without the cluster's name (callers prefix it): refused groups, each other refused
    resource, groups whose offsets were not readable, no rows at all. [] when it saw everything."""
    groups = [r for r in result.refusals if r.resource_type == "group"]
    lines = [blind_summary("group", groups)] if groups else []
    lines += [str(r) for r in result.refusals if r.resource_type != "group"]
    refused = set(result.unseen_groups)
    unread = [g for g in result.unread if g not in refused]
    if unread:
        lines.append(f"{len(unread)} group(s) not read ({quoted_names(unread)}): committed offsets not readable "
                     f"({visible_controls(result.unread[unread[0]])})")
    if result.groups and not result.rows.get("offsets_snapshots") and not lines:
        lines.append(f"no offsets_snapshots row read for {len(result.groups)} group(s) ({quoted_names(result.groups)})")
    return lines


def blind_status(result) -> dict:
    """What `collection_status.json`'s `ok` keeps of a collection's blindness: the lines, the groups
    not seen, and whether the cluster as a whole was not seen (its listing refused, or no rows)."""
    lines = blind_lines(result)
    unseen = list(dict.fromkeys(list(result.unseen_groups) + list(result.unread)))
    whole = bool(lines) and (any(r.resource_type == "cluster" for r in result.refusals)
                             or not result.rows.get("offsets_snapshots"))
    return {"blind": lines, "blind_groups": unseen[:KEEP_GROUPS], "blind_all": whole or len(unseen) > KEEP_GROUPS}


def cluster_state(status: dict, now: dt.datetime | None = None, interval: float | None = None) -> dict:
    """A cluster's state from its `collection_status.json` ({"ok": ..., "failed": ...}):
    {"state": OK | BLIND | FAILING | STALE | NEVER, "line": "blind: ..." or None, "groups": names
    not seen, "all": every group not seen}. STALE is judged only when given `now` and the collection
    `interval` (seconds). The line is one line, as the CLI says it (names escaped for a terminal;
    HTML escaping is the page's)."""
    ok, failed = status.get("ok") or {}, status.get("failed") or {}
    if failed and (not ok or str(failed.get("at", "")) > str(ok.get("observed_at", ""))):
        error = " ".join(str(failed.get("error") or "the collection failed").split())
        return {"state": "FAILING", "line": f"blind: {visible_controls(error)}", "groups": [], "all": True}
    if not ok:
        return {"state": "NEVER", "line": None, "groups": [], "all": True}
    age = _age_seconds(ok.get("observed_at"), now)
    if interval and age is not None and age > 2 * interval:
        return {"state": STALE, "all": True, "groups": [], "line": (
            f"stale: the newest collection is {short_duration(age)} old ({visible_controls(ok.get('observed_at'))}), "
            f"more than twice the {short_duration(interval)} collection interval: is fleet_maintenance running?")}
    lines = ok.get("blind") or []
    if not lines:
        return {"state": "OK", "line": None, "groups": [], "all": False}
    return {"state": BLIND, "line": f"blind: {'; '.join(lines)}", "groups": list(ok.get("blind_groups") or []), "all": bool(ok.get("blind_all"))}


def current_state(status: dict) -> dict:
    """cluster_state as of now, STALE judged against the deployment's collection interval
    (FLEET_COLLECTION_INTERVAL): what the fleet page, the report and the alerts show."""
    from fleetkit.core.settings import collection_interval

    return cluster_state(status, dt.datetime.now(dt.timezone.utc), collection_interval())


def parse_time(value) -> dt.datetime | None:
    """A status file's time (ISO-8601, Z or an offset; naive is UTC; a datetime as is), or None."""
    if not value:
        return None
    if isinstance(value, dt.datetime):
        t = value
    else:
        try:
            t = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
        except ValueError:
            return None
    return t.replace(tzinfo=dt.timezone.utc) if t.tzinfo is None else t


def _age_seconds(observed_at, now: dt.datetime | None) -> float | None:
    t = parse_time(observed_at) if now is not None else None
    return None if t is None else max(0.0, (now - t).total_seconds())


def shown_status(status: str, group: str, state: dict | None) -> str:
    """The verdict to show for a group of a cluster in `state` (cluster_state): an OK the cluster's
    newest collection could not back shows BLIND; every other verdict stays (a STOPPED group seen
    before is still worth a look)."""
    if status != "OK" or not state or state["state"] in ("OK", "NEVER"):
        return status
    return BLIND if state["all"] or group in state["groups"] else status


def episode_alerts(states: dict[str, dict], alerted: list[str]) -> tuple[list[str], list[str]]:
    """Once per episode: (the alert lines to send now, the clusters alerted in their current
    episode). An episode starts at the first blind (or failing) collection of a cluster and ends
    at its next OK one; a cluster alerted in its episode is not alerted again until it ends.
    `states`: name -> cluster_state; `alerted`: what the previous call returned."""
    blind = {n: s for n, s in states.items() if s["state"] in (BLIND, "FAILING", STALE)}
    lines = [f"{STALE if s['state'] == STALE else BLIND} {visible_controls(n)}: {s['line']}"
             for n, s in blind.items() if n not in alerted]
    # a cluster no longer in the fleet file, or NEVER collected, keeps its episode open
    still = [n for n in alerted if n in blind or n not in states or states[n]["state"] == "NEVER"]
    return lines, sorted(set(still) | set(blind))

"""The ownership check DAG's Airflow-facing bits: the leader-change assets (names and URIs) and
the watch payloads of the asset events behind a run. Which clusters a run checks, recording the
changes and the report are the library's (fleetkit.ownership.collect, fleetkit.ownership.report)."""

from __future__ import annotations

WATCH_ASSET_PREFIX = "kafka_leader_change__"


def asset_name(cluster: str) -> str:
    return f"{WATCH_ASSET_PREFIX}{cluster}"


def asset_uri(cluster: str) -> str:
    from urllib.parse import quote

    return f"x-kafka-leader-change://{quote(cluster, safe='')}"


def _asset_key(asset) -> tuple[str | None, str | None]:
    """(name, uri) of an asset key of `triggering_asset_events` (an Asset or an AssetUniqueKey)."""
    return getattr(asset, "name", None), getattr(asset, "uri", None)


def payload_problem(asset, payload, clusters: set[str]) -> str | None:
    """Why a leader-change payload is not taken, or None. Asset events can be posted through the
    REST API by anyone allowed to, so a payload counts only for its own asset's cluster, one the
    fleet file lists, in the shape the watch writes (integers where the watch writes integers)."""
    import datetime as dt

    if not isinstance(payload, dict):
        return "no watch payload"
    cluster = payload.get("cluster")
    if not isinstance(cluster, str) or cluster not in clusters:
        return f"cluster {cluster!r} is not in the fleet file"
    name, uri = _asset_key(asset)
    if name != asset_name(cluster) and uri != asset_uri(cluster):
        return f"posted to asset {name or uri!r}, not to cluster {cluster!r}'s own ({asset_name(cluster)!r})"
    changes = payload.get("changes")
    if not isinstance(changes, list):
        return "changes is not a list"
    for c in changes:
        if not isinstance(c, dict) or not all(type(c.get(k)) is int for k in (
                "partition", "from_leader", "to_leader", "from_epoch", "to_epoch")):
            return f"a change is not partition/leaders/epochs as integers: {c!r}"[:300]
        if not isinstance(c.get("isr"), list) or not all(type(b) is int for b in c["isr"]):
            return f"a change's isr is not a list of broker ids: {c.get('isr')!r}"[:300]
    try:
        dt.datetime.fromisoformat(str(payload.get("observed_at")).replace("Z", "+00:00"))
    except ValueError:
        return f"observed_at {payload.get('observed_at')!r} is not a time"[:300]
    return None


def events_from_context(context, clusters) -> tuple[list[dict], list[str]]:
    """(the watch payloads {"cluster", "changes", "observed_at"} of the asset events behind this run
    that pass payload_problem against the fleet file's `clusters`, one line per event refused)."""
    from fleetkit.core.render import visible_controls

    clusters = set(clusters)
    out, refused = [], []
    events = context.get("triggering_asset_events") or {}
    for asset, evs in events.items():
        for ev in evs:
            payload = (getattr(ev, "extra", None) or {}).get("payload")
            if payload is None:
                continue  # an event without a watch payload (e.g. posted to start a check)
            why = payload_problem(asset, payload, clusters)
            if why:
                name, uri = _asset_key(asset)
                refused.append(visible_controls(f"asset event of {name or uri!r} ignored: {why}"))
            else:
                out.append(payload)
    return out, refused

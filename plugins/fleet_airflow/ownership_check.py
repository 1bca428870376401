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


def events_from_context(context) -> list[dict]:
    """The watch payloads ({"cluster", "changes", "observed_at"}) of the asset events behind this run."""
    out = []
    events = context.get("triggering_asset_events") or {}
    for _asset, evs in events.items():
        for ev in evs:
            payload = (getattr(ev, "extra", None) or {}).get("payload")
            if isinstance(payload, dict) and payload.get("cluster"):
                out.append(payload)
    return out

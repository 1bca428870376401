"""Leader-change asset events are hostile input: anyone allowed to post an asset event through the
REST API can send any payload. Only a payload of the asset's own cluster, one the fleet file lists,
in the watch's shape, reaches the leader_changes dataset and the ownership check."""

from __future__ import annotations

from collections import namedtuple
from types import SimpleNamespace

from fleet_airflow.ownership_check import asset_name, asset_uri, events_from_context

FLEET = ["lab", "lab39"]
#: an asset key as Airflow gives it (hashable, with name and uri)
AssetKey = namedtuple("AssetKey", "name uri")


def change(**over) -> dict:
    return {"partition": 7, "from_leader": 0, "to_leader": 1, "from_epoch": 3, "to_epoch": 4, "isr": [0, 1], **over}


def payload(cluster="lab", **over) -> dict:
    return {"cluster": cluster, "changes": [change()], "observed_at": "2026-11-28T10:00:00Z", **over}


def context(*pairs) -> dict:
    """{asset: [event]} as Airflow gives `triggering_asset_events` (asset keys with name and uri)."""
    events = {}
    for cluster, pl in pairs:
        asset = AssetKey(asset_name(cluster), asset_uri(cluster))
        events.setdefault(asset, []).append(SimpleNamespace(extra={"payload": pl}))
    return {"triggering_asset_events": events}


def test_the_watch_payload_of_a_fleet_cluster_is_taken():
    got, refused = events_from_context(context(("lab", payload())), FLEET)
    assert got == [payload()] and refused == []


def test_a_cluster_name_that_is_a_path_is_refused():
    """Written as a path component it would leave the data root: never taken."""
    got, refused = events_from_context(context(("lab", payload("x/../../../etc"))), FLEET)
    assert got == [] and len(refused) == 1
    assert "'x/../../../etc' is not in the fleet file" in refused[0]


def test_a_payload_for_another_cluster_than_its_asset_is_refused():
    got, refused = events_from_context(context(("lab39", payload("lab"))), FLEET)
    assert got == [] and "not to cluster 'lab''s own" in refused[0]


def test_a_payload_not_in_the_watch_shape_is_refused():
    bad = [payload(changes="all"), payload(changes=[change(partition="7")]), payload(changes=[change(isr="0,1")]),
           payload(changes=[change(to_leader=True)]), payload(observed_at="yesterday"), "not a dict"]
    got, refused = events_from_context(context(*[("lab", b) for b in bad]), FLEET)
    assert got == [] and len(refused) == len(bad)


def test_a_refusal_line_shows_a_hostile_name_on_one_line():
    got, refused = events_from_context(context(("lab", payload("evil\nINFO all good\u202e"))), FLEET)
    assert got == [] and "\n" not in refused[0] and "\\u202e" in refused[0]


def test_an_event_without_a_payload_is_neither_taken_nor_refused():
    asset = AssetKey(asset_name("lab"), asset_uri("lab"))
    got, refused = events_from_context({"triggering_asset_events": {asset: [SimpleNamespace(extra={})]}}, FLEET)
    assert got == [] and refused == []

"""ownership's asset watchers: one per cluster of the fleet file, whatever its mode
(ZooKeeper watches on 0.9 and 3.9, Metadata polls on the 4.3 KRaft cluster)."""

from __future__ import annotations

import runpy
from pathlib import Path

import pytest

from tests.conftest import GENERATIONS, TEST_FLEET, write_fleet_file

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.airflow


def test_every_cluster_of_the_fleet_gets_a_leader_change_watcher(tmp_path, monkeypatch):
    fleet = write_fleet_file([TEST_FLEET[n] for n in GENERATIONS.values()], tmp_path / "fleet.yaml")
    monkeypatch.setenv("FLEET_FILE", str(fleet))
    module = runpy.run_path(str(REPO / "dags" / "ownership.py"))
    watchers = {a.name: a.watchers for a in module["ASSETS"]}
    assert set(watchers) == {f"kafka_leader_change__{n}" for n in GENERATIONS.values()}
    by_cluster = {w[0].trigger.cluster: w[0] for w in watchers.values()}
    assert by_cluster["lab43test"].name == "metadata_leader_epochs__lab43test"  # KRaft: no ZooKeeper
    assert by_cluster["labtest"].name == "zk_leader_epochs__labtest"
    assert by_cluster["lab39test"].name == "zk_leader_epochs__lab39test"
    for w in by_cluster.values():
        assert w.trigger.fleet_file == str(fleet) and w.trigger.poll_seconds == 2.0
    assert module["dag"].timetable is not None and len(module["ASSETS"]) == 3

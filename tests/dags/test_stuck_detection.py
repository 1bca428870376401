"""Stuck offsets found on the real lab through fleet_maintenance (dag.test): a consumer stuck on a
poison record is STALLED, a stopped group STOPPED, a topic whose retention deleted unread records
OUT_OF_RANGE, a healthy group OK."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml

from fleetkit.core.settings import run_folder
from fleetlab.traffic import ConsumerThread, commit, not_poison, produce, producer, wait_topic, POISON

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.airflow, pytest.mark.lab, pytest.mark.spark]


@pytest.fixture(scope="module")
def dag(dagbag):
    return dagbag.get_dag("fleet_maintenance")


def test_stuck_partitions_found_through_fleet_maintenance(dag, lab, tmp_path, unique, capfd, caplog,
                                                        monkeypatch):
    healthy_t, poison_t, stopped_t, retained_t = (unique(x) for x in ("healthy", "poison", "stopped", "retained"))
    healthy_g, poison_g, stopped_g, retained_g = (unique(x) for x in ("ok-grp", "poison-grp", "stopped-grp",
                                                                       "retained-grp"))
    # retention: tiny segments rolled every 2 s, deleted 3 s later (the lab checks every 10 s)
    lab.lab.create_topic(retained_t, 1, 1, {"segment.ms": 2000, "retention.ms": 3000})
    for t in (healthy_t, poison_t, stopped_t):
        wait_topic(lab.bootstrap, t)
    wait_topic(lab.bootstrap, retained_t, partitions=1)

    produce(lab.bootstrap, poison_t, {0: 5, 1: 5, 2: 5})
    prod = producer(lab.bootstrap)
    prod.produce(poison_t, value=POISON, partition=0)
    prod.flush(10)
    produce(lab.bootstrap, stopped_t, {0: 10, 1: 10, 2: 10})
    commit(lab.bootstrap, stopped_g, {(stopped_t, p): 4 for p in range(3)})
    produce(lab.bootstrap, retained_t, {0: 3})
    commit(lab.bootstrap, retained_g, {(retained_t, 0): 1})

    stop = threading.Event()

    def keep_producing():
        n = 0
        while not stop.is_set():
            for t in (healthy_t, poison_t, stopped_t):
                prod.produce(t, value=b"v%d" % n, partition=n % 3)
            prod.produce(retained_t, value=b"r%d" % n, partition=0)
            prod.poll(0)
            n += 1
            stop.wait(0.2)
        prod.flush(10)

    feeder = threading.Thread(target=keep_producing, daemon=True)
    consumers = [ConsumerThread(lab.bootstrap, healthy_g, [healthy_t], client_id="healthy-1"),
                 ConsumerThread(lab.bootstrap, poison_g, [poison_t], handle=not_poison, client_id="poison-1")]
    feeder.start()
    for c in consumers:
        c.start()

    fleet = lab.own_fleet()
    fleet["clusters"][0]["groups"] = [stopped_g, retained_g]  # no members: 0.9 does not list them
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet))
    data = tmp_path / "data"
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))  # deployment settings, not params
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    conf = {"window": "2m", "offsets_health": "never"}
    try:
        time.sleep(10)  # consumers join and catch up; the poison consumer hits its record
        runs = []
        for i in range(4):
            started = time.monotonic()
            dr = dag.test(run_conf=conf)
            states = {(ti.task_id, ti.map_index): ti.state for ti in dr.get_task_instances()}
            assert dr.state == "success", states
            runs.append(dr)
            if i < 3:  # four collections spanning 90 s: over half the 2 m window, however fast a run is
                time.sleep(max(0.0, 30 - (time.monotonic() - started)))
    finally:
        stop.set()
        for c in consumers:
            c.stop()
        feeder.join(10)

    out = run_folder(data / "reports", "stuck", runs[-1].run_id)
    findings = [json.loads(x) for x in (out / "findings.jsonl").read_text().splitlines()]
    by = {}
    for f in findings:
        by.setdefault(f["group"], {})[f["partition"]] = f
    assert {p: f["status"] for p, f in by[healthy_g].items()} == {0: "OK", 1: "OK", 2: "OK"}, by[healthy_g]
    assert by[poison_g][0]["status"] == "STALLED", by[poison_g][0]
    assert by[poison_g][0]["committed_offset"] == 5  # the poison record's offset
    assert {by[poison_g][p]["status"] for p in (1, 2)} == {"OK"}
    assert {p: f["status"] for p, f in by[stopped_g].items()} == {0: "STOPPED", 1: "STOPPED", 2: "STOPPED"}
    assert all(f["expires_in_seconds"] > 0 and f["offset_expires_at"] for f in by[stopped_g].values())
    assert by[retained_g][0]["status"] == "OUT_OF_RANGE", by[retained_g][0]
    assert by[retained_g][0]["log_start_offset"] > 1

    groups = {g["group"]: g for g in map(json.loads, (out / "groups.jsonl").read_text().splitlines())}
    assert groups[poison_g]["status"] == "STALLED" and groups[stopped_g]["status"] == "STOPPED"
    assert groups[healthy_g]["status"] == "OK" and groups[retained_g]["status"] == "OUT_OF_RANGE"

    html = (out / "report.html").read_text()
    md = (out / "report.md").read_text()
    assert "<svg" in html and poison_g in html and "Committed offset expires in" in html
    assert "**STALLED**" in md
    assert (data / "reports" / "stuck" / "latest" / "report.html").read_text() == html
    logs = "".join(capfd.readouterr()) + caplog.text
    assert "ALERT" in logs and f"STALLED labtest group '{poison_g}'" in logs

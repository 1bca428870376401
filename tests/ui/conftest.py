"""Fixtures of the tests under the real Airflow that more than one module uses."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
from pathlib import Path

import pytest

from fleetlab.traffic import ConsumerThread, commit, produce, wait_topic
from tests.helpers import wait_until
from tests.ui.approvals import fail_runs_in_progress

REPO = Path(__file__).resolve().parents[2]
# a group name with markup, quotes, shell characters and a 4-byte character (no control characters:
# the fleet page's test types it nowhere, it must arrive in the form exactly)
NAME = 'pay<b>ments</b> "q" \'s\' $(id) \U0001F600'


def stuck_member(lab, topic: str, group: str, client_id: str) -> ConsumerThread:
    """`topic` with 5 records on each of 3 partitions, `group` committed at 2 on each, and a started
    live member that never gets past its record: the committed offset stays at 2, lag 3."""
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 5, 1: 5, 2: 5})
    commit(lab.bootstrap, group, {(topic, p): 2 for p in range(3)})
    member = ConsumerThread(lab.bootstrap, group, [topic], handle=lambda msg: False, client_id=client_id)
    member.start()
    return member


@pytest.fixture
def stalled(lab, airflow_server, unique):
    """A STALLED group in the api-server's data root, judged by the stuck job."""
    from fleet_airflow import clusters, settings

    topic = unique("fleetpage")
    group = f"{NAME} {unique('g')}"
    member = stuck_member(lab, topic, group, "fleet-page-1")
    root = settings.data_root()  # the api-server's (the tests' FLEET_DATA_ROOT)
    api = airflow_server.api
    dag = "/api/v2/dags/fleet_maintenance"
    try:
        # the scheduled maintenance run writes the same reports/stuck/latest: paused, and none running,
        # while this test writes its own
        wait_until(lambda: api("GET", dag), 180, "fleet_maintenance parsed", interval=1,
                   retry_on=(urllib.error.HTTPError,))
        api("PATCH", dag, {"is_paused": True})

        # (DAGs start paused here; a run left by another test is not waited for)
        wait_until(lambda: fail_runs_in_progress(api, "fleet_maintenance"), 120,
                   "no fleet_maintenance run in progress", interval=2, retry_on=(urllib.error.HTTPError,))
        wait_until(lambda: member.assigned, 60, "the member assigned")
        snaps = []
        for i in range(3):
            snaps.append(clusters.collect(lab.cluster, root))
            if i < 2:
                time.sleep(4)
        out = Path(root) / "reports" / "stuck" / "latest"
        # judged as of the newest snapshot, over a window that holds the three (about 8 s apart, more
        # when a collection is slow)
        as_of = snaps[-1].observed_at.isoformat().replace("+00:00", "Z")
        window = int((snaps[-1].observed_at - snaps[0].observed_at).total_seconds()) + 2
        job = subprocess.run([sys.executable, str(REPO / "spark_jobs" / "stuck.py"), "--snapshots",
                              f"{root}/offsets_snapshots", "--out", str(out), "--window", f"{window}s", "--as-of", as_of,
                              "--master", "local[2]"],
                             capture_output=True, text=True, timeout=600, env={**os.environ, **settings.spark_env()})
        assert job.returncode == 0, job.stderr[-3000:]
        yield {"group": group, "topic": topic, "lab": lab}
    finally:
        member.stop()

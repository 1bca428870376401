"""LOAD_STUCK seen live: a bloated __consumer_offsets partition of the 0.9 lab cluster (mutual TLS,
ACLs) gets a new leader that is still loading it when the ownership check runs under the real
Airflow scheduler; the check's collection and Spark job judge the partition LOAD_STUCK, and the
run starts runbook_ownership for it, whose plan (dry run) is made and rendered from that evidence.
The check is the `ownership` DAG (`coordinator_ownership` is its deprecated id, the same tasks),
triggered through the REST API for the cluster; the scheduler runs its collection, its Spark job,
its report and its start_recovery.

How the stuck load is produced, by construction rather than by racing the check:

* Kafka 0.9.0.1's GroupMetadataManager loads a partition on its one scheduler thread in a loop
  that, while the read position is below the high watermark, reads at most
  `offsets.load.buffer.size` bytes from the position into a buffer of that size and advances the
  position past every whole message the buffer holds (ByteBufferMessageSet stops at an incomplete
  one; 0.9 has no "at least one message" read). A message larger than the buffer is never whole in
  it: the position stays, and the loop runs until the broker shuts down or stops leading the
  partition (the high watermark it reads is then -1). Meanwhile the broker is the partition's
  leader and answers NOT_COORDINATOR for its groups: the state of the incident, where a
  partition of hundreds of GB takes hours to load, made here to last for as long as the test
  looks, on a partition of a few MiB.
* The partition is bloated (fleetlab.arrange.bloat_offsets_partition, as bench/seed_incident.py
  bloats its one) with commits carrying METADATA_BYTES of commit metadata: records of more than
  2 KiB. The broker that becomes the new leader was restarted with `offsets.load.buffer.size`
  LOAD_BUFFER_BYTES (below one record; only for that broker and that start), then made the
  partition's leader (fleetkit.clients.leadership.move_leader: replicas reordered, a
  preferred-replica election). Its server.log says it began loading the partition, and never
  that it finished, before and after the check (asserted).
* The check runs with `load_stuck` 10s (the DAG's threshold, 5 min by default) and collects for
  `settle_seconds` 30 while the groups are not served: the groups are seen waiting for longer
  than the threshold, whatever the machine's load, because the load cannot end meanwhile.

Afterwards the lab is brought back: the partition's replica order and leader restored (the stuck
loop ends when the broker stops leading), the broker restarted with the lab's own properties, the
preferred leaders elected, and the groups are served again (asserted).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetkit.clients import leadership
from fleetkit.core import plans
from fleetkit.core.errors import FleetError
from fleetkit.core.kafka_names import OFFSETS_TOPIC
from fleetkit.core.settings import run_folder
from fleetlab.arrange import bloat_offsets_partition, commit_when_led, offsets_partition_bytes
from fleetlab.lab import log_grown_since

from tests.helpers import groups_on_partition, live_groups_on_partition, wait_until
from tests.ui.approvals import finished, task_log, task_states, trigger, wait_for

pytestmark = [pytest.mark.airflow, pytest.mark.lab, pytest.mark.spark, pytest.mark.timeout(1500)]
CHECK, RUNBOOK = "ownership", "runbook_ownership"
P = 17  # the partition: none of the other tests on the lab cluster picks it
BLOAT_BYTES = 8 * 2**20  # added to the partition (modest: the stuck load does not depend on the size)
METADATA_BYTES = 2048  # every bulk commit's metadata (0.9 takes up to offset.metadata.max.bytes, 4096)
LOAD_BUFFER_BYTES = 1024  # the new leader's offsets.load.buffer.size: below one bulk record
LOAD_STUCK = "10s"
CONF = {"cluster": "labtest", "window": "1h", "load_stuck": LOAD_STUCK, "settle_seconds": 30,
        "interval_seconds": 5, "recovery": "dry_run"}


def loading_lines(server_log: Path, mark) -> tuple[bool, bool]:
    """(began, finished) loading __consumer_offsets-P, from what the broker logged since `mark`."""
    grown = log_grown_since(server_log, mark, limit=1 << 28).decode(errors="replace")
    return (f"Loading offsets and group metadata from [{OFFSETS_TOPIC},{P}]" in grown,
            f"Finished loading offsets from [{OFFSETS_TOPIC},{P}]" in grown)


def verdicts(lab, groups: list[str]) -> dict[str, str]:
    """Each group's live verdict (fleetkit.ownership.collect.who through fleetctl's connection)."""
    from fleetctl.connect import connected
    from fleetkit.ownership.collect import who

    with connected(lab.cluster, 5.0, stores=False) as (kafka, zk, _):
        return {r["group"]: r["verdict"] for r in who(kafka, zk, groups)}


def back(lab, broker: int) -> bool:
    """`broker` (re)started is known to the controller (the brokers' metadata, which the controller
    sends, lists it: a reassignment naming it is not dropped as naming a dead broker) and in the
    ISR of P (the ISR alone may still hold it from before a restart quicker than the lag time)."""
    admin = lab.lab.admin()
    if broker not in admin.list_topics(timeout=10).brokers:
        return False
    with lab.zookeeper() as zk:
        return broker in leadership.state(zk, OFFSETS_TOPIC, P).isr


def restore(lab, original: list[int], broker: int, members: list) -> None:
    """The lab as it was: replica order and leader of P back, `broker` on the lab's own properties,
    the preferred leaders elected."""
    for m in members:
        m.stop()
    with lab.zookeeper() as zk:
        if leadership.assignment(zk, OFFSETS_TOPIC)[P] != original:
            leadership.reorder_replicas(zk, OFFSETS_TOPIC, P, original)
        leadership.preferred_election(zk, [(OFFSETS_TOPIC, P)])
    lab.lab.restart_broker(broker)
    wait_for(lambda: back(lab, broker), 180, f"broker {broker} back in the ISR of {OFFSETS_TOPIC}-{P}")
    with lab.zookeeper() as zk:
        leadership.elect_preferred_leaders(zk, OFFSETS_TOPIC)


def test_a_new_leader_still_loading_a_bloated_partition_is_load_stuck_and_recovery_is_planned(
        lab, airflow_server, unique):
    from fleet_airflow import clusters, settings

    api = airflow_server.api
    check = {"api": api, "airflow": airflow_server, "dag_id": CHECK, "conf": CONF}
    runbook = {"api": api, "airflow": airflow_server, "dag_id": RUNBOOK, "conf": {}}
    for dag_id in (CHECK, RUNBOOK):
        wait_for(lambda: api("GET", f"/api/v2/dags/{dag_id}"), 180, f"{dag_id} parsed by the dag-processor")

    with lab.zookeeper() as zk:
        leadership.elect_preferred_leaders(zk, OFFSETS_TOPIC)
        original = leadership.assignment(zk, OFFSETS_TOPIC)[P]
        before = leadership.state(zk, OFFSETS_TOPIC, P)
    new_leader = next(b for b in original if b != before.leader and b in before.isr)

    # the bloated partition: bulk groups committing with long metadata, then live groups on it
    bulk_topic, topic = unique("bloat"), unique("served")
    bulk = groups_on_partition(P, 50, 2, "load-stuck bulk {i} " + unique("b"))
    commit_when_led(lab.lab, bulk_topic, 50, {})
    grown_from = offsets_partition_bytes(lab.spec, P)
    bloat_offsets_partition(lab.lab, P, grown_from + BLOAT_BYTES, bulk, bulk_topic, 50, METADATA_BYTES, progress=False)
    size = offsets_partition_bytes(lab.spec, P)
    groups, members = live_groups_on_partition(lab, P, 2, "load-stuck 'ü😀' $(x) #{i} " + unique("g"), topic,
                                               "load-stuck")
    try:
        wait_for(lambda: set(verdicts(lab, groups).values()) == {"OK"}, 120, "the live groups served")
        # the groups known to the deployment's data root, as its maintenance collection leaves them
        # (once the new leader loads, no broker lists them)
        clusters.collect(lab.cluster, settings.data_root())

        server_log = lab.spec.broker_dir(new_leader) / "logs" / "server.log"
        lab.lab.restart_broker(new_leader, {"offsets.load.buffer.size": LOAD_BUFFER_BYTES})
        wait_for(lambda: back(lab, new_leader), 180, f"broker {new_leader} in the ISR of {OFFSETS_TOPIC}-{P}")
        mark = server_log.stat()

        def move():
            with lab.zookeeper() as zk:
                return leadership.move_leader(zk, OFFSETS_TOPIC, P, new_leader)

        # (a reassignment the controller dropped, e.g. met before it processed the broker's start, is
        # made again: the move is the arrangement, not what is tested)
        moved = wait_until(move, 120, f"{OFFSETS_TOPIC}-{P} moved to broker {new_leader}", interval=3,
                           retry_on=(FleetError,))
        assert moved["leader_after"] == new_leader and moved["epoch_after"] > before.leader_epoch
        wait_for(lambda: loading_lines(server_log, mark)[0], 60, f"broker {new_leader} loading {OFFSETS_TOPIC}-{P}")
        wait_for(lambda: set(verdicts(lab, groups).values()) == {"LOADING"}, 60, "the groups LOADING on the new leader")

        for dag_id in (CHECK, RUNBOOK):
            api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
        run_id = trigger(check)
        state = wait_for(lambda: finished(check, run_id), 900, "the ownership run to finish")
        assert state == "success", task_states(check, run_id)

        out = run_folder(Path(settings.data_root()) / "reports", "coordinator", run_id)
        parts = {r["partition"]: r for r in map(json.loads, (out / "partitions.jsonl").read_text().splitlines())
                 if r["cluster"] == "labtest"}
        stuck = parts[P]
        assert stuck["verdict"] == "LOAD_STUCK", stuck
        assert stuck["leader"] == new_leader and stuck["leader_epoch"] == moved["epoch_after"], stuck
        # the verdict carries the wait (past the run's 10 s threshold); the groups still loading:
        assert stuck["loading"] >= len(groups), stuck
        rows = {r["group"]: r for r in map(json.loads, (out / "groups.jsonl").read_text().splitlines())}
        for g in groups:
            assert rows[g]["partition"] == P and rows[g]["verdict"] == "LOADING", rows[g]
        report = (out / "report.md").read_text()
        assert "LOAD_STUCK" in report, report

        # start_recovery: runbook_ownership for P, citing this run, its plan made and stopped (dry run)
        def recovery():
            runs = api("GET", f"/api/v2/dags/{RUNBOOK}/dagRuns?limit=100")["dag_runs"]
            return next((r for r in runs if (r.get("conf") or {}).get("evidence_run") == run_id
                         and (r.get("conf") or {}).get("partition") == P), None)

        rec = wait_for(recovery, 120, f"a {RUNBOOK} run for partition {P} started by the check")
        assert rec["conf"]["action"] == "move_leader" and rec["conf"]["dry_run"] is True, rec["conf"]
        rec_id = rec["dag_run_id"]
        assert wait_for(lambda: finished(runbook, rec_id), 600, f"the {RUNBOOK} dry run") == "success", \
            task_states(runbook, rec_id)
        st = task_states(runbook, rec_id)
        assert st["plan"] == "success" and st["dry_run_stop"] == "success" and st["execute"] == "skipped", st
        plan, _ = plans.load(settings.plans_root(settings.data_root()), RUNBOOK, rec_id)
        d = plan["details"]
        assert d["partition"] == P and d["recovery_action"] == "move_leader" and d["leader"] == new_leader, d
        assert d["target"] != new_leader and d["target"] in d["isr"], d
        evidence = {e["label"]: e["value"] for e in plan["evidence"]}
        assert evidence["ownership check"].startswith("LOAD_STUCK; "), evidence
        for g in groups:
            assert evidence[f"group {g}"].endswith(": LOADING"), evidence
        # the plan as the approver reads it (Markdown: the names' special characters escaped)
        rendered = task_log(airflow_server, RUNBOOK, rec_id, "plan").replace("\\", "")
        assert "**ownership check**: LOAD_STUCK; not served for" in rendered, rendered[-3000:]
        assert f"Move leadership of {OFFSETS_TOPIC}-{P} from broker {new_leader} to broker {d['target']}" in rendered

        # still loading: the state the check judged was the stuck load, not a race with a slow one
        began, done = loading_lines(server_log, mark)
        assert began and not done, f"broker {new_leader} finished loading {OFFSETS_TOPIC}-{P}"
        assert set(verdicts(lab, groups).values()) == {"LOADING"}
        print(f"{OFFSETS_TOPIC}-{P}: {size / 2**20:.1f} MiB, leader {before.leader} -> {new_leader} "
              f"(epoch {moved['epoch_after']}), LOAD_STUCK after {stuck['not_ok_seconds']} s; "
              f"{RUNBOOK} {rec_id} planned {d['recovery_action']} to broker {d['target']}")
    finally:
        for dag_id in (CHECK, RUNBOOK):
            api("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": True})
        restore(lab, original, new_leader, members)

    # the lab is back: the old leader leads the partition again and has loaded it with the lab's buffer
    with lab.zookeeper() as zk:
        assert leadership.assignment(zk, OFFSETS_TOPIC)[P] == original
        assert leadership.state(zk, OFFSETS_TOPIC, P).leader == before.leader
    wait_for(lambda: set(verdicts(lab, groups).values()) == {"OK"}, 180, "the groups served again")

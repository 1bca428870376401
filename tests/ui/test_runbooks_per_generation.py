"""The destructive runbooks on every generation under the real scheduler, triggered through the REST
API by one user, approved in the browser by the other, rolled back with `fleetctl audit rollback`
where they can be: the state comes back exactly.

Offset resets on the secured generations (Kafka 3.9 in ZooKeeper mode, 4.3 in KRaft mode; the 0.9
cluster's runs are in test_approval_server.py): the execute step resets through the Admin API
(AlterConsumerGroupOffsets, which Kafka allows only while the group is Empty), as the runbooks'
own principal `fleet-runbook` (the cluster's runbook connection), while plan and verify read as
`fleet`. The stuck-partition skip on all three.

Offsets kept in ZooKeeper (the old consumer's /consumers and Storm spouts' znodes) on the
generations that have one, 0.9 and 3.9 (whose ZooKeeper requires a SASL login): the same flow,
the store declared in the deployment's fleet file for the test; the rollback puts every znode back
byte for byte (a Storm rollback is confirmed again with --topology-deactivated).

Coordinator recovery on 0.9, 3.9 and 4.3: move_leader (ZooKeeper reassignment, or the Admin API on
KRaft) and its rollback, trim_handover, and restart_broker on 3.9 and on the KRaft nodes with
the quorum check. Group-id reconciliation on 3.9's ZooKeeper: the scheduled DAG's unattended
create and the approved runbook. The fleet_maintenance run over all three."""

from __future__ import annotations

import contextlib
import datetime as dt
import html
import os
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import pytest

from fleetkit.core import audit
from fleetkit.core.datasets import DataRoot
from fleetlab.traffic import produce
from tests.conftest import GENERATIONS
from tests.helpers import commit_when_led, committed_offsets, wait_until
from tests.ui.approvals import (answer, approve_in_browser, finished, pending_approval, q, rolled_back_by_the_other_approver,
                                settle, task_states, trigger, unpause, wait_for)

pytestmark = [pytest.mark.airflow, pytest.mark.timeout(900)]
SECURED = ["3.9", "4.3"]


@pytest.fixture(params=SECURED, ids=[f"kafka-{g}" for g in SECURED])
def reset_case(request, lab_fleet, airflow_server, unique):
    handle = lab_fleet(GENERATIONS[request.param])
    spec = handle.spec
    topic, group = unique(f"gen-{spec.name}"), unique(f"gen-group ĝ {spec.name}")
    commit_when_led(handle.lab, topic, 3, {group: {0: 2, 1: 2, 2: 2}})  # as the lab's admin
    produce(handle.bootstrap, topic, {0: 10, 1: 10, 2: 10}, kafka_version=spec.kafka_version)
    conf = {"cluster": spec.name, "group": group, "topic": topic, "partitions": "0,1", "target": "offset 7",
            "dry_run": False}
    case = {"api": airflow_server.api, "dag_id": "runbook_stuck_reset", "conf": conf, "airflow": airflow_server,
            "root": DataRoot(os.environ["FLEET_DATA_ROOT"]), "handle": handle, "topic": topic, "group": group}
    unpause(case)
    return case


def offsets(case) -> dict[int, int]:
    h = case["handle"]
    return committed_offsets(h.bootstrap, case["group"], case["topic"], kafka_version=h.spec.kafka_version)


def test_reset_offsets_approved_in_the_browser_then_rolled_back(reset_case, monkeypatch, capsys):
    case, cluster = reset_case, reset_case["conf"]["cluster"]
    run_id = trigger(case, user="admin")
    detail = wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    assert f"reset_offsets on cluster {cluster}" in detail["subject"]
    assert [u["name"] for u in detail["assigned_users"]] == ["approver"]  # not the requester
    assert offsets(case) == {0: 2, 1: 2, 2: 2}  # nothing before the approval
    settle(case, run_id)
    approve_in_browser(case, run_id, "approver", ["What will change", f"{case['topic']}-0", f"{case['topic']}-1"],
                       screenshot=f"approval-page-{cluster}.png")
    assert wait_for(lambda: finished(case, run_id), 240, "the run to finish") == "success", task_states(case, run_id)
    assert offsets(case) == {0: 7, 1: 7, 2: 2}
    recs = audit.records(case["root"], cluster, run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("approved", "approver"),
                                                       ("executed", "approver"), ("verified", None)]
    executed = recs[2]

    # the rollback: triggered by the CLI as the caller ("approver"), approved by the other approver
    rollback_id = rolled_back_by_the_other_approver(case, executed["record_id"], monkeypatch, capsys)
    assert offsets(case) == {0: 2, 1: 2, 2: 2}  # exactly as before the first run
    events = [(r["event"], r["actor"]) for r in audit.records(case["root"], cluster, rollback_id)]
    assert events == [("planned", "approver"), ("approved", "admin"), ("executed", "admin"), ("verified", None)]


# -- offsets kept in ZooKeeper: the old consumer's /consumers and Storm spouts, on 0.9 and 3.9 ------
ZK_CASES = [("0.9", "zookeeper"), ("0.9", "storm"), ("3.9", "zookeeper"), ("3.9", "storm")]


@pytest.fixture(params=ZK_CASES, ids=[f"kafka-{g}-{store}" for g, store in ZK_CASES])
def zk_case(request, lab_fleet, airflow_server, unique):
    """A topic with 10 records per partition and offsets 2 / 4 of an old-consumer group or a Storm
    spout in the cluster's ZooKeeper (3.9's requires a SASL login), the store declared in the
    deployment's fleet file for the test (restored after it)."""
    import yaml

    from tests.integration.test_zk_offset_stores import storm_json

    generation, store = request.param
    handle = lab_fleet(GENERATIONS[generation])
    spec = handle.spec
    topic = unique(f"zk-{spec.name}")
    group = unique(f"old grp ü {spec.name}") if store == "zookeeper" else unique(f"spout é {spec.name}")
    root = "/consumers" if store == "zookeeper" else "/" + unique("storm")
    produce_when_led(handle, topic)
    zk = spec.zk_client()  # the brokers' user where ZooKeeper requires a login
    paths = {p: (f"{root}/{group}/offsets/{topic}/{p}" if store == "zookeeper" else f"{root}/{group}/partition_{p}")
             for p in (0, 1)}
    for p, o in {0: 2, 1: 4}.items():
        data = str(o).encode() if store == "zookeeper" else storm_json("t-1-1700000000", "topo / é", o, p, topic,
                                                                         "127.0.0.1", 9092)
        zk.create(paths[p], data, makepath=True)
    deployment = handle.fleet_file
    before = deployment.read_text()
    doc = yaml.safe_load(before)
    for entry in doc["clusters"]:
        if entry["name"] == spec.name:
            entry["offset_stores"] = [{"kind": store, "conn_id": spec.zk_conn_id, "chroot": spec.chroot, "root": root}]
    deployment.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    conf = {"cluster": spec.name, "source": store, "group": group, "topic": topic, "partitions": "0,1",
            "target": "offset 7", "dry_run": False}
    if store == "storm":
        conf["topology_deactivated"] = True
    case = {"api": airflow_server.api, "dag_id": "runbook_stuck_reset", "conf": conf, "airflow": airflow_server,
            "root": DataRoot(os.environ["FLEET_DATA_ROOT"]), "zk": zk, "paths": paths, "store": store,
            "topic": topic}
    try:
        unpause(case)
        yield case
    finally:
        deployment.write_text(before)
        zk.stop()
        zk.close()


def produce_when_led(handle, topic: str) -> None:
    """`topic` with 10 records on each of 3 partitions (as the lab's admin)."""
    spec = handle.spec
    if spec.modern:
        commit_when_led(handle.lab, topic, 3, {})
    else:
        from fleetlab.traffic import wait_topic

        wait_topic(handle.bootstrap, topic)
    produce(handle.bootstrap, topic, {0: 10, 1: 10, 2: 10}, kafka_version=spec.kafka_version)


def zk_offsets(case) -> dict[int, int]:
    import json

    out = {}
    for p, path in case["paths"].items():
        data = case["zk"].get(path)[0]
        out[p] = int(data) if case["store"] == "zookeeper" else json.loads(data)["offset"]
    return out


def test_zookeeper_offsets_reset_approved_in_the_browser_then_rolled_back(zk_case, monkeypatch, capsys):
    case, cluster = zk_case, zk_case["conf"]["cluster"]
    before = {p: case["zk"].get(path)[0] for p, path in case["paths"].items()}
    run_id = trigger(case, user="admin")
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    assert zk_offsets(case) == {0: 2, 1: 4}
    settle(case, run_id)
    approve_in_browser(case, run_id, "approver", ["What will change"])
    assert wait_for(lambda: finished(case, run_id), 240, "the run to finish") == "success", task_states(case, run_id)
    assert zk_offsets(case) == {0: 7, 1: 7}
    if case["store"] == "storm":  # only the JSON's offset changed
        assert case["zk"].get(case["paths"][0])[0] == before[0].replace(b'"offset":2,', b'"offset":7,')
    recs = audit.records(case["root"], cluster, run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("approved", "approver"),
                                                       ("executed", "approver"), ("verified", None)]

    flags = ["--topology-deactivated"] if case["store"] == "storm" else []  # Storm: confirmed again
    rolled_back_by_the_other_approver(case, recs[2]["record_id"], monkeypatch, capsys, *flags)
    # byte for byte as before the first run (Storm: the whole JSON)
    assert {p: case["zk"].get(path)[0] for p, path in case["paths"].items()} == before


# -- fleet_maintenance over the three generations at once --------------------------------------
def test_fleet_maintenance_judges_every_generation_and_the_fleet_page_shows_it(lab_fleet, airflow_server, unique):
    """One scheduled-DAG run under the real scheduler over the deployment's fleet file with the
    three clusters (0.9 on mutual TLS, 3.9 and 4.3 on SASL_SSL): every cluster collected, the Spark
    stuck job judges each cluster's stopped group (committed, behind, no member) STOPPED, the
    report names it, and the fleet page lists it under its cluster. The group committed a rhythm
    (four offsets 1 s apart) before it stopped, and two collections made before the run (the
    library's, as the scheduled runs before it would have made) give the run's own third one a
    history to judge."""
    import json
    import time

    from fleet_airflow import clusters, settings
    from fleetkit.core.settings import run_folder
    from tests.ui.test_fleet_page import get

    handles = [lab_fleet(GENERATIONS[g]) for g in GENERATIONS]  # the deployment's fleet file lists all three
    root = settings.data_root()
    stopped = {}
    for h in handles:
        topic, group = unique(f"fm-{h.spec.name}"), unique(f"fm stopped ĝ <i>{h.spec.name}</i>")
        # as the lab's admin: four commits 1 s apart give the partitions a rhythm, so the verdict does
        # not hang on how soon the scheduler starts the run (without one, the run's snapshots must
        # span half the window)
        commit_when_led(h.lab, topic, 3, {group: [{0: n, 1: n, 2: n} for n in (1, 2, 3, 4)]}, gap=1.0)
        produce(h.bootstrap, topic, {0: 10, 1: 10, 2: 10}, kafka_version=h.spec.kafka_version)
        stopped[h.spec.name] = group
    for i in range(2):
        for h in handles:
            clusters.collect(h.cluster, root)
        time.sleep(3)

    case = {"api": airflow_server.api, "dag_id": "fleet_maintenance", "airflow": airflow_server,
            "conf": {"window": "90s", "offsets_health": "never"}}
    unpause(case)
    try:
        run_id = trigger(case, user="admin")
        state = wait_for(lambda: finished(case, run_id), 420, "the fleet_maintenance run to finish")
    finally:  # no scheduled run after this one replaces reports/stuck/latest while the page is read
        case["api"]("PATCH", "/api/v2/dags/fleet_maintenance", {"is_paused": True})
    states = task_states(case, run_id)
    assert state == "success", states

    out = run_folder(Path(root) / "reports", "stuck", run_id)
    groups = [json.loads(line) for line in (out / "groups.jsonl").read_text().splitlines()]
    for name, group in stopped.items():
        (row,) = [g for g in groups if g["cluster"] == name and g["group"] == group]
        assert row["status"] == "STOPPED", row
    token = airflow_server.api_token()

    def page(name: str, status: str, group: str) -> str:
        code, body = get("/fleet/?" + urllib.parse.urlencode({"cluster": name, "status": status, "q": group[-12:]}),
                         token=token)
        assert code == 200, body[-2000:]
        return body

    for name, group in stopped.items():  # listed under its cluster as STOPPED (the name shown as text)
        assert html.escape(group, quote=False) in page(name, "STOPPED", group)
        assert html.escape(group, quote=False) not in page(name, "OK", group)


# -- runbook_ownership (move_leader) on 3.9 (ZooKeeper's /admin znodes) and 4.3 (Admin API)
OFFSETS = "__consumer_offsets"


@pytest.fixture(params=list(GENERATIONS), ids=[f"kafka-{g}" for g in GENERATIONS])
def recovery_case(request, lab_fleet, airflow_server, unique):
    yield from recovery_setup(request.param, lab_fleet, airflow_server, unique)


@pytest.fixture
def recovery_43(lab_fleet, airflow_server, unique):
    yield from recovery_setup("4.3", lab_fleet, airflow_server, unique)


@pytest.fixture
def recovery_39(lab_fleet, airflow_server, unique):
    yield from recovery_setup("3.9", lab_fleet, airflow_server, unique)


def recovery_setup(generation, lab_fleet, airflow_server, unique):
    """A live group on a secured cluster, leaders balanced; the move: its coordinator's partition
    led by the last replica instead of the first."""
    from fleetkit.clients import leadership
    from fleetkit.core.partitioning import partition_for
    from fleetlab.traffic import ConsumerThread
    from tests.helpers import LeadershipHandles

    handle = lab_fleet(GENERATIONS[generation])
    spec = handle.spec
    movers = LeadershipHandles(handle)
    leadership.elect_preferred_leaders(movers.admin, OFFSETS)
    topic, group = unique(f"rec-{spec.name}"), unique(f"recovery ĝ {spec.name}")
    commit_when_led(handle.lab, topic, 3, {})
    produce(handle.bootstrap, topic, {0: 3, 1: 3, 2: 3}, kafka_version=spec.kafka_version)
    member = ConsumerThread(handle.bootstrap, group, [topic], client_id=f"recovery-{spec.name}",
                            kafka_version=spec.kafka_version)
    member.start()
    p = partition_for(group, 50)
    original = leadership.assignment(movers.admin, OFFSETS)[p]
    conf = {"cluster": spec.name, "group": group, "partition": -1, "action": "move_leader",
            "target_broker": original[-1], "dry_run": False, "evidence_run": "", "replica_order": ""}
    case = {"api": airflow_server.api, "dag_id": "runbook_ownership", "conf": conf,
            "airflow": airflow_server, "root": DataRoot(os.environ["FLEET_DATA_ROOT"]), "handle": handle,
            "movers": movers, "partition": p, "original": original, "group": group}
    unpause(case)
    try:
        yield case
    finally:
        member.stop()
        try:
            if leadership.assignment(movers.admin, OFFSETS)[p] != original:
                leadership.reorder_replicas(movers.admin, OFFSETS, p, original)
            leadership.elect_preferred_leaders(movers.admin, OFFSETS)
        finally:
            movers.close()


def test_move_leader_approved_in_the_browser_then_rolled_back(recovery_case, monkeypatch, capsys):
    from fleetkit.clients import leadership

    case = recovery_case
    cluster, admin, p, original = case["conf"]["cluster"], case["movers"].admin, case["partition"], case["original"]
    target = original[-1]
    before = leadership.state(admin, OFFSETS, p)
    assert before.leader == original[0]

    run_id = trigger(case, user="admin")
    detail = wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    assert [u["name"] for u in detail["assigned_users"]] == ["approver"]
    assert leadership.state(admin, OFFSETS, p).leader == before.leader  # nothing before the approval
    settle(case, run_id)
    approve_in_browser(case, run_id, "approver", [f"{OFFSETS}-{p}", f"expected coordinator {before.leader}"],
                       screenshot=f"approval-move-leader-{cluster}.png")
    assert wait_for(lambda: finished(case, run_id), 240, "the run to finish") == "success", task_states(case, run_id)
    after = leadership.state(admin, OFFSETS, p)
    assert after.leader == target and after.leader_epoch > before.leader_epoch
    assert leadership.assignment(admin, OFFSETS)[p] == [target] + original[:-1]
    assert case["movers"].kafka.describe_groups([case["group"]])[case["group"]].coordinator_id == target
    recs = audit.records(case["root"], cluster, run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("approved", "approver"),
                                                       ("executed", "approver"), ("verified", None)]
    from fleetkit.core import plans

    plan, _ = plans.load(Path(case["root"].path) / "plans", case["dag_id"], run_id)
    assert plan["details"]["via"] == ("admin_api" if case["handle"].spec.kraft else "zookeeper")

    rolled_back_by_the_other_approver(case, recs[2]["record_id"], monkeypatch, capsys)
    assert leadership.assignment(admin, OFFSETS)[p] == original  # leader and order as before
    assert leadership.state(admin, OFFSETS, p).leader == before.leader


def test_trim_handover_starts_the_trim_runbook_as_the_requester(recovery_case):
    """trim_handover (dry run: it changes nothing itself) under the scheduler: the trim run it
    starts carries the partition and who asked, and a deployment's execution API gives the child
    run its parent's triggering user (dag.test() cannot show this)."""
    from fleetkit.core import plans

    case = dict(recovery_case, conf=dict(recovery_case["conf"], action="trim_handover", dry_run=True))
    run_id = trigger(case, user="admin")
    assert wait_for(lambda: finished(case, run_id), 300, "the hand-over run to finish") == "success", \
        task_states(case, run_id)
    states = task_states(case, run_id)
    assert states["start_trim_runbook"] == "success" and states["dry_run_stop"] == "skipped", states
    plan, _ = plans.load(Path(case["root"].path) / "plans", case["dag_id"], run_id)
    assert plan["changes"] == [] and plan["details"]["partition"] == case["partition"]
    runs = case["api"]("GET", "/api/v2/dags/runbook_trim/dagRuns?order_by=-id&limit=50")["dag_runs"]
    child = next(r for r in runs if r["run_type"] == "operator_triggered"
                 and r["conf"].get("cluster") == case["conf"]["cluster"])
    # ended here (a dry run of the trim is tested on its own): no later test's trim queues behind it
    case["api"]("PATCH", f"/api/v2/dags/runbook_trim/dagRuns/{q(child['dag_run_id'])}", {"state": "failed"})
    assert child["conf"] == {"cluster": case["conf"]["cluster"], "partitions": str(case["partition"]),
                             "dry_run": True, "requested_by": "admin"}, child
    assert child["triggering_user_name"] == "admin", child


def test_restart_broker_on_kraft_refused_without_quorum_then_approved_in_the_browser(lab_fleet, airflow_server,
                                                                                   recovery_43):
    """Kafka 4.3, three combined broker+controller nodes, under the scheduler: restart_broker of the
    coordinator's node, approved; a second voter stopped after the approval: the execute step's
    re-check refuses (one voter of three would be left) and nothing is stopped. With the quorum
    whole again, the next run approved in the browser restarts the node through the cluster's
    broker_control and verify sees it back in the ISR."""
    from fleetkit.clients import leadership
    from fleetkit.core import plans
    from fleetkit.ownership import execute as ownership_execute

    case = recovery_43
    admin, p, lab = case["movers"].admin, case["partition"], case["handle"].lab
    leader = leadership.state(admin, OFFSETS, p).leader
    other = next(b for b in range(3) if b != leader)
    conf = dict(case["conf"], action="restart_broker", target_broker=-1)

    run_id = trigger(dict(case, conf=conf), user="admin")
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    settle(case, run_id)
    plan, _ = plans.load(Path(case["root"].path) / "plans", case["dag_id"], run_id)
    assert plan["details"]["target"] == leader
    assert any("controller quorum" in c["what"] for c in plan["preconditions"]), plan["preconditions"]
    lab.stop_broker(other)  # after the plan, before the approval: the re-check must see it
    try:
        wait_until(lambda: ownership_execute.check(admin, plan) or None, 60, "the quorum check to see the stop")
        answer(case, run_id, "Approve", user="approver")
        assert wait_for(lambda: finished(case, run_id), 240, "the refused run to end") == "failed"
        recs = audit.records(case["root"], case["conf"]["cluster"], run_id)
        assert [r["event"] for r in recs] == ["planned", "approved", "refused"], recs
        assert f"stopping node {leader} (a controller voter) leaves 1 of 3 voters" in recs[-1]["message"], recs[-1]
        assert leader in admin.broker_ids()  # nothing was stopped
    finally:
        lab.start_broker(other)
    wait_until(lambda: set(admin.broker_ids()) == {0, 1, 2} or None, 120, "the stopped node back")
    assert restarted_after_approval_in_the_browser(case) == leader


def test_restart_broker_on_zookeeper_mode_approved_in_the_browser(recovery_39):
    """Kafka 3.9 in ZooKeeper mode (SASL_SSL + SCRAM, ACLs, SASL ZooKeeper), under the scheduler:
    restart_broker of the coordinator's broker (no controller quorum to check there), approved in
    the browser; a new broker process, back in the ISR, and the group's coordinator answers again."""
    from fleetkit.core import plans

    case = recovery_39
    leader = restarted_after_approval_in_the_browser(case)
    plan, _ = plans.load(Path(case["root"].path) / "plans", case["dag_id"], case["restart_run"])
    assert plan["details"]["target"] == leader
    assert not any("controller quorum" in c["what"] for c in plan["preconditions"]), plan["preconditions"]


def broker_pid(lab, broker_id: int) -> int | None:
    return next(r["pid"] for r in lab.status() if r["component"] == f"broker-{broker_id}")


def restarted_after_approval_in_the_browser(case) -> int:
    """restart_broker of the broker leading the group's offsets partition, triggered as admin and
    approved in the browser by approver: the run succeeds, the audit reads planned, approved,
    executed, verified (verify: the broker back in the ISR, the group's coordinator answering), a
    new process of the broker runs (the cluster's broker_control stopped and started it) and the
    group's coordinator answers. Returns the broker restarted (its run id in case["restart_run"])."""
    from fleetkit.clients import leadership

    admin, p, lab, group = case["movers"].admin, case["partition"], case["handle"].lab, case["group"]
    leader = leadership.state(admin, OFFSETS, p).leader
    pid = broker_pid(lab, leader)
    assert pid is not None
    run_id = case["restart_run"] = trigger(dict(case, conf=dict(case["conf"], action="restart_broker",
                                                                  target_broker=-1)), user="admin")
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    assert broker_pid(lab, leader) == pid  # nothing before the approval
    settle(case, run_id)
    approve_in_browser(case, run_id, "approver", ["What will change", f"{OFFSETS}-{p}"],
                       screenshot=f"approval-restart-broker-{case['conf']['cluster']}.png")
    assert wait_for(lambda: finished(case, run_id), 300, "the restart to finish") == "success", task_states(case, run_id)
    recs = audit.records(case["root"], case["conf"]["cluster"], run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("approved", "approver"),
                                                       ("executed", "approver"), ("verified", None)]
    assert recs[2]["details"]["result"]["restarted"] == leader
    assert broker_pid(lab, leader) not in (None, pid)
    assert leader in admin.broker_ids() and leader in leadership.state(admin, OFFSETS, p).isr
    described = case["movers"].kafka.describe_groups([group])[group]
    assert described.error is None and described.coordinator_id in admin.broker_ids(), described
    return leader


@contextlib.contextmanager
def kop_mappings_39(lab_fleet, unique, missing: int = 0, **settings):
    """KoP's client-to-group mappings in the 3.9 cluster's ZooKeeper (SASL login) under a root of
    their own, seeded by tests/kop_standin.py, a STAND-IN FOR KoP (KoP cannot run here): client
    `mism` mapped to a wrong group, `gone-1` to a group without members; a live group whose
    consumers are `mism` and `missing` clients without a mapping (`miss`, the first of them). The
    deployment's fleet file declares the root, a grace of 2 s and `settings` (restored after).
    Yields once every consumer is in the group and gone-1 is older than the grace."""
    import time
    import uuid

    import yaml

    from fleetlab.traffic import ConsumerThread
    from tests.helpers import admin_kafka
    from tests.kop_standin import kop_write

    handle = lab_fleet(GENERATIONS["3.9"])
    spec, host = handle.spec, "127.0.0.1"
    root = f"/client_group_id_{uuid.uuid4().hex[:8]}"
    topic, group, gone_group = unique("kopui"), unique("ui grp 'q' ünï"), unique("gone|grp")
    mism = f"mism-{uuid.uuid4().hex[:6]}"
    clients = [mism] + [f"miss{i}-{uuid.uuid4().hex[:6]}" for i in range(missing)]
    commit_when_led(handle.lab, topic, 3, {})
    zk = spec.zk_client()
    kop_write(zk, root, host, mism, "wrong-group")
    kop_write(zk, root, host, "gone-1", gone_group)
    paths = {n: f"{root}/{host}-{n}" for n in clients + ["gone-1"]}
    deployment = handle.fleet_file
    before = deployment.read_text()
    doc = yaml.safe_load(before)
    for entry in doc["clusters"]:
        if entry["name"] == spec.name:
            entry["group_id_mappings"] = {"root": root, "grace": "2s", **settings}
    deployment.write_text(yaml.safe_dump(doc, sort_keys=False, allow_unicode=True))
    members = [ConsumerThread(handle.bootstrap, group, [topic], client_id=c, kafka_version=spec.kafka_version)
               for c in clients]
    for m in members:
        m.start()
    kafka = admin_kafka(spec)
    try:
        wait_until(lambda: {m.client_id for m in kafka.describe_groups([group])[group].members} == set(clients)
                   or None, 90, "the consumers in their group")
        time.sleep(2.5)  # gone-1 is now older than the 2 s grace
        yield SimpleNamespace(spec=spec, zk=zk, root=root, paths=paths, group=group, gone_group=gone_group,
                              mism=mism, miss=clients[1] if missing else None)
    finally:
        for m in members:
            m.stop()
        kafka.close()
        deployment.write_text(before)
        zk.delete(root, recursive=True)
        zk.stop()
        zk.close()


def test_group_ids_on_3_9_approved_in_the_browser_then_rolled_back(lab_fleet, airflow_server, unique,
                                                                                monkeypatch, capsys):
    """The runbook under the scheduler (kop_mappings_39), approved in the browser, overwrites the
    mismatched mapping and deletes the stale one, each conditional on the version it read; the
    rollback approved by the other approver puts both back."""
    with kop_mappings_39(lab_fleet, unique) as kop:
        zk, paths, mism, group = kop.zk, kop.paths, kop.mism, kop.group
        case = {"api": airflow_server.api, "dag_id": "runbook_group_ids", "airflow": airflow_server,
                "root": DataRoot(os.environ["FLEET_DATA_ROOT"]), "conf": {"cluster": kop.spec.name, "dry_run": False}}
        unpause(case)
        run_id = trigger(case, user="admin")
        detail = wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
        assert [u["name"] for u in detail["assigned_users"]] == ["approver"]
        assert zk.get(paths[mism])[0].decode() == "wrong-group" and zk.exists(paths["gone-1"])  # nothing yet
        settle(case, run_id)
        approve_in_browser(case, run_id, "approver", ["What will change", paths[mism]],
                           screenshot="approval-group-ids-lab39test.png")
        assert wait_for(lambda: finished(case, run_id), 240, "the run to finish") == "success", task_states(case, run_id)
        assert zk.get(paths[mism])[0].decode() == group and zk.get(paths[mism])[1].version == 1
        assert zk.exists(paths["gone-1"]) is None
        recs = audit.records(case["root"], kop.spec.name, run_id)
        assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("approved", "approver"),
                                                           ("executed", "approver"), ("verified", None)]
        rolled_back_by_the_other_approver(case, recs[2]["record_id"], monkeypatch, capsys)
        assert zk.get(paths[mism])[0].decode() == "wrong-group"
        assert zk.get(paths["gone-1"])[0].decode() == kop.gone_group


def test_group_ids_scheduled_dag_creates_the_missing_mappings_on_3_9(lab_fleet, airflow_server, unique):
    """The scheduled group_ids DAG (not the runbook) under the scheduler, on a cluster whose fleet
    file entry says create_missing_unattended (kop_mappings_39): a run collects the 3.9 cluster's
    mappings through its SASL ZooKeeper, and its create_missing task creates the mapping of the live
    member that had none, audited as create_missing_group_ids by the scheduler. The mismatched and
    the stale mappings (the runbook's, after an approval) keep their data and version; nothing else
    appears under the root."""
    import json

    from fleetkit.core.settings import run_folder

    with kop_mappings_39(lab_fleet, unique, missing=1, create_missing_unattended=True) as kop:
        zk, paths, cluster = kop.zk, kop.paths, kop.spec.name
        kept = {n: zk.get(paths[n]) for n in (kop.mism, "gone-1")}
        assert zk.exists(paths[kop.miss]) is None
        case = {"api": airflow_server.api, "dag_id": "group_ids", "airflow": airflow_server,
                "root": DataRoot(os.environ["FLEET_DATA_ROOT"]), "conf": {}}
        case["since"] = dt.datetime.now(dt.timezone.utc)
        unpause(case)  # the scheduler may start the hour's run too (catchup off: the newest due one)
        try:
            run_id = trigger(case, user="admin")
            wait_for(lambda: finished(case, run_id), 420, "the group_ids run to finish")
            runs = wait_for(lambda: finished_group_ids_runs(case), 420, "every group_ids run to finish")
        finally:  # no hourly run after these, on a fleet file put back
            case["api"]("PATCH", "/api/v2/dags/group_ids", {"is_paused": True})
        for r in runs:
            states = task_states(case, r["dag_run_id"])
            assert r["state"] == "success" and states["create_missing"] == "success", (r, states)
        assert run_id in [r["dag_run_id"] for r in runs]

        assert zk.get(paths[kop.miss])[0].decode() == kop.group  # created unattended
        for n, (data, stat) in kept.items():  # destructive changes wait for the runbook: untouched
            now = zk.get(paths[n])
            assert (now[0], now[1].version, now[1].mtime) == (data, stat.version, stat.mtime), n
        assert sorted(zk.get_children(kop.root)) == sorted(p.rsplit("/", 1)[1] for p in paths.values())

        # created by one run, ours or the hour's when the scheduler started that one first
        created = [r for r in audit.records(case["root"], cluster)
                   if r["action"] == "create_missing_group_ids"
                   and paths[kop.miss] in [c["path"] for c in r["details"]["result"]["changed_paths"]]]
        assert [(r["dag_id"], r["event"], r["actor"]) for r in created] == \
            [("group_ids", "executed", "scheduler")], created
        assert created[0]["run_id"] in [r["dag_run_id"] for r in runs]
        changed = {c["path"]: (c["before"], c["after"]) for c in created[0]["details"]["result"]["changed_paths"]}
        assert changed == {paths[kop.miss]: (None, kop.group)}
        out = run_folder(Path(case["root"].path) / "reports", "group_ids", created[0]["run_id"])
        findings = {f["path"]: f for f in map(json.loads, (out / "findings.jsonl").read_text().splitlines())}
        assert {n: findings[paths[n]]["class"] for n in (kop.miss, kop.mism, "gone-1")} == \
            {kop.miss: "MISSING", kop.mism: "MISMATCHED", "gone-1": "STALE"}


def finished_group_ids_runs(case) -> list[dict] | None:
    """The group_ids runs queued since case["since"] once every one of them has finished, else None."""
    runs = [r for r in case["api"]("GET", "/api/v2/dags/group_ids/dagRuns?order_by=-id&limit=20")["dag_runs"]
            if r["queued_at"] and dt.datetime.fromisoformat(r["queued_at"]) >= case["since"]]
    return runs if runs and all(r["state"] in ("success", "failed") for r in runs) else None


@pytest.mark.parametrize("generation", list(GENERATIONS), ids=[f"kafka-{g}" for g in GENERATIONS])
def test_stuck_partition_skip_approved_in_the_browser(generation, lab_fleet, airflow_server, unique):
    """A consumer stuck on a poison record: four collections into the deployment's data root show it
    STALLED; runbook_stuck_skip under the scheduler diagnoses it (the record's offset and key,
    never its value) and, approved in the browser, skips the record (an offset commit on 0.9, the
    Admin API on 3.9 and 4.3, the group Empty as Kafka requires)."""
    from fleetlab.traffic import POISON, producer
    from tests.helpers import poisoned_consumer_collected

    handle = lab_fleet(GENERATIONS[generation])
    spec = handle.spec
    topic, group = unique(f"poisoned-{spec.name}"), unique(f"stuck ĝ {spec.name}")
    commit_when_led(handle.lab, topic, 3, {})
    produce(handle.bootstrap, topic, {0: 3, 1: 2, 2: 2}, kafka_version=spec.kafka_version)
    p = producer(handle.bootstrap, spec.kafka_version)
    p.produce(topic, value=POISON, key=b"poison-key", partition=0)
    p.flush(10)
    produce(handle.bootstrap, topic, {0: 4}, kafka_version=spec.kafka_version)  # records behind the poison one
    data = os.environ["FLEET_DATA_ROOT"]
    poisoned_consumer_collected(handle, topic, group, data, f"stuck-{spec.name}")
    frozen = committed_offsets(handle.bootstrap, group, topic, kafka_version=spec.kafka_version)
    assert frozen == {0: 3, 1: 2, 2: 2}, frozen

    case = {"api": airflow_server.api, "dag_id": "runbook_stuck_skip", "airflow": airflow_server,
            "root": DataRoot(data), "conf": {"cluster": spec.name, "group": group, "topic": topic, "partition": 0,
                                             "skip": 1, "window": "1m", "dry_run": False}}
    unpause(case)
    run_id = trigger(case, user="admin")
    wait_for(lambda: pending_approval(case, run_id), 180, "the approval request")
    settle(case, run_id)
    page = approve_in_browser(case, run_id, "approver", ["STALLED", "offset 3", "poison-key"],
                              screenshot=f"approval-stuck-{spec.name}.png")
    assert POISON.decode() not in page  # never the record's value
    assert wait_for(lambda: finished(case, run_id), 240, "the run to finish") == "success", task_states(case, run_id)
    assert committed_offsets(handle.bootstrap, group, topic, kafka_version=spec.kafka_version) == {0: 4, 1: 2, 2: 2}
    recs = audit.records(case["root"], spec.name, run_id)
    assert [(r["event"], r["actor"]) for r in recs] == [("planned", "admin"), ("approved", "approver"),
                                                       ("executed", "approver"), ("verified", None)]

"""Coordinator ownership against the real 3-broker lab: the computed partition's leader is the
coordinator the cluster names, for 200 random group names; the leader-change watch (the trigger
the triggerer runs) fires on a leader change and keeps working after its ZooKeeper session is
lost; moving leadership through /admin works and is verified."""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter

import pytest

from fleetkit.clients import leadership
from fleetkit.core.partitioning import partition_for
from fleetkit.ownership.collect import who
from fleetlab.lab import expire_zk_session
from tests.helpers import LeadershipHandles, fleet_kafka, runbook_kafka, wait_until

pytestmark = pytest.mark.lab
OFFSETS = "__consumer_offsets"


def balance_leaders(lab) -> dict[int, int]:
    """Preferred-replica election for every offsets partition: leaders spread over the 3 brokers.
    Returns once every broker's metadata names the leaders ZooKeeper does (a lab restarted on old
    data moves leaders here, and brokers learn of it a moment after ZooKeeper)."""
    with lab.zookeeper() as zk:
        leadership.elect_preferred_leaders(zk, OFFSETS)
        states, _ = zk.partition_states([OFFSETS])
    leaders = {s.partition: s.leader for s in states}
    admins = [lab.lab.admin(f"127.0.0.1:{lab.spec.broker_port(b)}") for b in range(lab.spec.brokers)]

    def brokers_agree() -> bool:
        for admin in admins:
            md = admin.list_topics(OFFSETS, timeout=10).topics[OFFSETS]
            if {p: pm.leader for p, pm in md.partitions.items()} != leaders:
                return False
        return True

    wait_until(brokers_agree, 60, "every broker's metadata to show the elected leaders")
    return leaders


def random_name(rnd: random.Random) -> str:
    pools = ["abcdefghijklmnopqrstuvwxyz0123456789-_.", "äöüßéçñ", "漢字仮名", "😀🧨𝄞🐘", " '\"$`;|&<>\\/"]
    body = "".join(rnd.choice(rnd.choice(pools)) for _ in range(rnd.randint(1, 30)))
    return f"{body}-{uuid.uuid4().hex[:4]}"


def test_200_random_groups_are_coordinated_by_their_partition_leader(lab):
    leaders = balance_leaders(lab)
    assert len(set(leaders.values())) == 3, leaders  # otherwise the check below proves little
    rnd = random.Random(20261121)
    groups = [random_name(rnd) for _ in range(200)]
    assert any(any(ord(c) > 0xFFFF for c in g) for g in groups) and any(not g.isascii() for g in groups)
    kafka = fleet_kafka(lab.spec)  # the toolkit's connection (mutual TLS as `fleet`)
    with lab.zookeeper() as zk:
        rows = who(kafka, zk, groups)
    # an independent reading of the same thing: librdkafka's own coordinator lookup (describe)
    described = kafka.describe_groups(groups)
    kafka.close()
    expected_brokers = Counter()
    for g, r in zip(groups, rows):
        p = partition_for(g, 50)
        assert r["partition"] == p and r["partitions"] == 50
        assert r["leader"] == leaders[p]
        assert r["coordinator_id"] == leaders[p], (g, r)
        assert described[g].coordinator_id == leaders[p], (g, described[g])
        assert r["verdict"] == "OK" and r["error"] is None
        expected_brokers[leaders[p]] += 1
    assert len(expected_brokers) == 3


def test_cli_who_prints_partition_leader_and_answer(lab):
    """The installed fleetctl: stdout holds exactly one tab-separated line per group."""
    import subprocess
    from pathlib import Path

    balance_leaders(lab)
    group = "who; rm -rf / 'ü😀'"
    fleetctl = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "fleetctl"
    proc = subprocess.run([str(fleetctl), "coordinator", "who", group, "--fleet", str(lab.fleet_file),
                           "--cluster", "labtest"], capture_output=True, text=True, timeout=120)
    out = proc.stdout.strip().splitlines()
    assert proc.returncode == 0 and len(out) == 1, (proc.stdout, proc.stderr[-2000:])
    fields = out[0].split("\t")
    with lab.zookeeper() as zk:
        st = leadership.state(zk, OFFSETS, partition_for(group, 50))
    assert fields[0] == group and fields[1] == str(partition_for(group, 50))
    assert fields[2:] == [f"leader={st.leader}", f"isr={','.join(map(str, st.isr))}", f"leader_epoch={st.leader_epoch}",
                          f"coordinator={st.leader}", "answer=Dead", "verdict=OK"]


def test_watch_fires_on_leader_change_and_survives_session_loss(lab):
    from fleet_airflow.triggers.leader_change import LeaderChangeTrigger

    balance_leaders(lab)

    async def scenario():
        trigger = LeaderChangeTrigger(cluster="labtest", fleet_file=str(lab.fleet_file), reconcile_seconds=600)
        events = trigger.run()
        pending = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(2)
        assert not pending.done(), "no leader changed, yet the watch fired"
        results = []
        for round_ in ("first", "after session loss"):
            if round_ == "after session loss":
                expire_zk_session(trigger.watch.zk.client, lab.spec.zk_hosts, **lab.spec.zk_login())
                deadline = time.monotonic() + 30
                while trigger.watch.sessions < 2 and time.monotonic() < deadline:
                    await asyncio.sleep(0.2)
                assert trigger.watch.sessions == 2, "the watch did not re-establish a session"
            with lab.zookeeper() as zk:
                p = 7 if round_ == "first" else 8
                st = leadership.state(zk, OFFSETS, p)
                target = next(b for b in st.isr if b != st.leader)
                t0 = time.monotonic()
                await asyncio.to_thread(leadership.move_leader, zk, OFFSETS, p, target)
            # on 0.9 the move is two changes of the state: the reassignment that puts `target` first
            # bumps the epoch (same leader), then the election moves the leader. Close together they
            # are one event; apart (a loaded machine) the first is an event of its own, for p alone.
            first = None
            while True:
                event = await asyncio.wait_for(pending, timeout=60)
                pending = asyncio.ensure_future(events.__anext__())
                changes = {c["partition"]: c for c in event.payload["changes"]}
                first = first or changes.get(p)
                if p in changes and changes[p]["to_leader"] == target:
                    break
                assert set(changes) == {p} and changes[p]["to_leader"] == st.leader, changes
            latency = time.monotonic() - t0
            print(f"watch fired {latency:.2f}s after the leader change ({round_})")
            assert first["from_leader"] == st.leader and first["from_epoch"] == st.leader_epoch, first
            assert changes[p]["to_epoch"] > changes[p]["from_epoch"] >= st.leader_epoch
            results.append(latency)  # how soon: bench/coordinator_watch.py, never asserted here
        pending.cancel()
        try:
            await pending
        except (asyncio.CancelledError, StopAsyncIteration):
            pass
        await events.aclose()
        return results

    asyncio.run(scenario())
    balance_leaders(lab)


def test_move_leader_refuses_a_replica_outside_the_isr_and_a_busy_controller(lab):
    balance_leaders(lab)
    with lab.zookeeper() as zk:
        with pytest.raises(Exception, match="not in the ISR"):
            leadership.move_leader(zk, OFFSETS, 3, 99)
        zk.client.create(leadership.ELECTION, b'{"version":1,"partitions":[]}')
        try:
            # the controller removes an election it has processed; create ours after it is gone
            deadline = time.monotonic() + 10
            while zk.client.exists(leadership.ELECTION) and time.monotonic() < deadline:
                time.sleep(0.1)
        finally:
            if zk.client.exists(leadership.ELECTION):
                zk.client.delete(leadership.ELECTION)
        before = leadership.assignment(zk, OFFSETS)[3]
        st = leadership.state(zk, OFFSETS, 3)
        target = next(b for b in st.isr if b != st.leader)
        res = leadership.move_leader(zk, OFFSETS, 3, target)
        assert res["leader_after"] == target and res["replicas_after"][0] == target
        assert sorted(res["replicas_after"]) == sorted(before)
    balance_leaders(lab)


def _restore(lab, partition: int, order: list[int]) -> None:
    with lab.zookeeper() as zk:
        leadership.reorder_replicas(zk, OFFSETS, partition, order)
    balance_leaders(lab)


def _plan(lab, zk, tmp_path, **params):
    from fleetkit.ownership.plan import build_plan

    kafka = fleet_kafka(lab.spec)  # the toolkit's connection (mutual TLS as `fleet`)
    try:
        return build_plan(lab.cluster, kafka, zk, str(tmp_path), {"action": "move_leader", **params})
    finally:
        kafka.close()


def test_a_move_sets_exactly_the_approved_order_journaled_and_its_rollback_restores_it(lab, tmp_path):
    """The plan holds the replica order; execute sets that order (here one whose first replica is not
    the new leader), journals each step, and the plan's rollback conf restores order and leader."""
    from fleetkit.core.journal import read_journal
    from fleetkit.ownership import execute as ownership_execute
    from fleetkit.ownership.verify import verify

    balance_leaders(lab)
    p = 5
    with lab.zookeeper() as zk:
        original = leadership.assignment(zk, OFFSETS)[p]
        a, b, c = original
        try:
            plan = _plan(lab, zk, tmp_path, partition=p, target_broker=b, replica_order=f"{c},{a},{b}")
            assert (plan["details"]["target"], plan["details"]["new_order"]) == (b, [c, a, b])
            res = ownership_execute.execute(zk, plan, journal_path=tmp_path / "move.jsonl")
            assert leadership.assignment(zk, OFFSETS)[p] == [c, a, b]
            assert leadership.state(zk, OFFSETS, p).leader == b
            assert (res["replicas_before"], res["replicas_after"], res["leader_after"]) == (original, [c, a, b], b)
            steps = [(e["step"], e["status"], e.get("after")) for e in read_journal(tmp_path / "move.jsonl").values()]
            assert steps == [("reorder_replicas", "done", [b, c, a]), ("preferred_election", "done", None),
                             ("reorder_replicas", "done", [c, a, b])]
            assert verify(None, zk, plan, timeout=5) == []
            # the rollback: the leader and the order from before, exactly
            conf = plan["rollback"]["conf"]
            assert (conf["target_broker"], conf["replica_order"]) == (a, f"{a},{b},{c}")
            back = _plan(lab, zk, tmp_path, **{k: v for k, v in conf.items() if k != "cluster"})
            ownership_execute.execute(zk, back, journal_path=tmp_path / "rollback.jsonl")
            assert leadership.assignment(zk, OFFSETS)[p] == original
            assert leadership.state(zk, OFFSETS, p).leader == a
        finally:
            if leadership.assignment(zk, OFFSETS)[p] != original:
                _restore(lab, p, original)


def test_execute_refuses_when_the_assignment_changed_since_the_plan(lab, tmp_path):
    from fleetkit.ownership import execute as ownership_execute
    from fleetkit.ownership.plan import RecoveryError

    balance_leaders(lab)
    p = 6
    with lab.zookeeper() as zk:
        original = leadership.assignment(zk, OFFSETS)[p]
        a, b, c = original
        try:
            plan = _plan(lab, zk, tmp_path, partition=p, target_broker=b)
            assert plan["details"]["new_order"] == [b, a, c]
            leadership.reorder_replicas(zk, OFFSETS, p, [a, c, b])  # someone else, between plan and execute
            with pytest.raises(RecoveryError, match=r"refused, nothing changed: .*replica assignment .* changed since "
                                                    r"the plan"):
                ownership_execute.execute(zk, plan)
            assert leadership.assignment(zk, OFFSETS)[p] == [a, c, b] and leadership.state(zk, OFFSETS, p).leader == a
        finally:
            _restore(lab, p, original)


# -- Kafka 3.9 (ZooKeeper mode) and 4.3 (KRaft) ------------------------------------------------
# what moves leadership per generation: ZooKeeper mode keeps the /admin znodes (0.9 above, 3.9);
# KRaft has no ZooKeeper: AlterPartitionReassignments on the wire + elect_leaders
MODERN = [pytest.param("lab39test", id="kafka-3.9-zookeeper"), pytest.param("lab43test", id="kafka-4.3-kraft")]


@pytest.fixture(params=MODERN)
def modern(request, lab_fleet):
    h = LeadershipHandles(lab_fleet(request.param))
    leadership.elect_preferred_leaders(h.admin, OFFSETS)
    yield h
    try:
        leadership.elect_preferred_leaders(h.admin, OFFSETS)
    finally:
        h.close()


def _other_isr(admin, p):
    st = leadership.state(admin, OFFSETS, p)
    return st, next(b for b in st.isr if b != st.leader)


def test_the_watch_fires_on_a_leader_change(modern):
    """3.9: the ZooKeeper watch; 4.3 (KRaft, no ZooKeeper): Metadata leader epochs polled every 2 s.
    (0.9: test_watch_fires_on_leader_change_and_survives_session_loss.)"""
    from fleet_airflow.triggers.leader_change import LeaderChangeTrigger
    from fleetkit.ownership.watch import LeaderEpochWatch, MetadataEpochPoll

    name = modern.handle.spec.name

    async def scenario():
        trigger = LeaderChangeTrigger(cluster=name, fleet_file=str(modern.handle.fleet_file), reconcile_seconds=600)
        events = trigger.run()
        started = time.monotonic()
        pending = asyncio.ensure_future(events.__anext__())
        await asyncio.sleep(2.5)
        assert not pending.done(), "no leader changed, yet the watch fired"
        assert isinstance(trigger.watch, MetadataEpochPoll if modern.zk is None else LeaderEpochWatch)
        p = 9
        st, target = _other_isr(modern.admin, p)
        original = leadership.assignment(modern.admin, OFFSETS)[p]
        t0 = time.monotonic()
        try:
            await asyncio.to_thread(leadership.move_leader, modern.admin, OFFSETS, p, target)
            event = await asyncio.wait_for(pending, timeout=60)
        finally:
            await events.aclose()
            # the replica order from before (the fixture's election then puts the leader back)
            await asyncio.to_thread(leadership.reorder_replicas, modern.admin, OFFSETS, p, original)
        latency = time.monotonic() - t0
        print(f"{name}: watch fired {latency:.2f}s after the leader change")
        changes = {c["partition"]: c for c in event.payload["changes"]}
        assert event.payload["cluster"] == name and event.payload["sessions"] == 1
        assert p in changes and (changes[p]["from_leader"], changes[p]["to_leader"]) == (st.leader, target)
        assert changes[p]["to_epoch"] > changes[p]["from_epoch"] == st.leader_epoch
        if modern.zk is None:
            # never more often than every 2 s: the first read, one per 2 s, one after the debounce
            assert trigger.watch.polls <= (time.monotonic() - started) / 2 + 2

    asyncio.run(scenario())


def test_ownership_answers_name_the_partition_leader(modern):
    """Every group of 30 named by the lookup on its partition's leader, which answers it: OK."""
    rnd = random.Random(39_43)
    groups = [random_name(rnd) for _ in range(30)]
    leaders = {p: s.leader for p, s in ((p, leadership.state(modern.admin, OFFSETS, p)) for p in range(50))}
    rows = who(modern.kafka, modern.zk, groups)
    for g, r in zip(groups, rows):
        p = partition_for(g, 50)
        assert (r["partition"], r["leader"], r["coordinator_id"], r["error"], r["verdict"]) == \
            (p, leaders[p], leaders[p], None, "OK"), (g, r)
    assert len({r["coordinator_id"] for r in rows}) == 3


def test_a_move_is_journaled_verified_and_rolled_back(modern, tmp_path):
    """The recovery's move on 3.9 (/admin znodes) and 4.3 (Admin API): exact leader and order read
    back, then the plan's rollback conf restores both."""
    from fleetkit.core.journal import read_journal
    from fleetkit.ownership import execute as ownership_execute
    from fleetkit.ownership.plan import build_plan
    from fleetkit.ownership.verify import verify

    h = modern.handle
    p = 11
    original = leadership.assignment(modern.admin, OFFSETS)[p]
    a, b, c = original
    try:
        plan = build_plan(h.cluster, modern.kafka, modern.zk, str(tmp_path),
                          {"action": "move_leader", "partition": p, "target_broker": b})
        assert plan["details"]["via"] == ("admin_api" if modern.zk is None else "zookeeper")
        assert (plan["details"]["leader"], plan["details"]["new_order"]) == (a, [b, a, c])
        assert ownership_execute.check(modern.admin, plan) == []
        ownership_execute.execute(modern.admin, plan, journal_path=tmp_path / "move.jsonl")
        assert leadership.assignment(modern.admin, OFFSETS)[p] == [b, a, c]
        assert leadership.state(modern.admin, OFFSETS, p).leader == b
        steps = [(e["step"], e["status"]) for e in read_journal(tmp_path / "move.jsonl").values()]
        assert steps == [("reorder_replicas", "done"), ("preferred_election", "done")]
        assert verify(modern.kafka, modern.zk, plan, timeout=20) == []
        # the plan is stale now: executing it again is refused, nothing changed
        with pytest.raises(Exception, match="refused, nothing changed"):
            ownership_execute.execute(modern.admin, plan)
        conf = plan["rollback"]["conf"]
        back = build_plan(h.cluster, modern.kafka, modern.zk, str(tmp_path),
                          {k: v for k, v in conf.items() if k != "cluster"})
        ownership_execute.execute(modern.admin, back, journal_path=tmp_path / "rollback.jsonl")
        assert leadership.assignment(modern.admin, OFFSETS)[p] == original
        assert leadership.state(modern.admin, OFFSETS, p).leader == a
    finally:
        if leadership.assignment(modern.admin, OFFSETS)[p] != original:
            leadership.reorder_replicas(modern.admin, OFFSETS, p, original)


def test_the_recovery_runbook_moves_leadership_and_rolls_back_on_kraft(dagbag, lab_fleet, tmp_path, unique,
                                                                       monkeypatch):
    """Kafka 4.3 in KRaft mode (no ZooKeeper): the same gate moves leadership through the Admin API
    (AlterPartitionReassignments + preferred election), verify sees the group served by the new
    leader, and the rollback conf restores leader and order. (0.9: tests/dags/
    test_runbook_ownership.py; 3.9 in ZooKeeper mode moves through the same /admin znodes
    as 0.9: test_a_move_is_journaled_verified_and_rolled_back.) Here, not in tests/dags: starting
    the KRaft cluster adds it to the shared fleet file, which the DAG tests expect to hold 0.9 only.
    The cluster is secured: until the fleet file names a runbook connection of its own, the runbook
    runs with a fleet file whose kafka_conn_id is the runbook principal's (fleet-runbook)."""
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot
    from fleetkit.core.journal import journal_path, read_journal
    from fleetlab.traffic import ConsumerThread, produce, wait_topic
    from fleetlab.hitl import Answerer
    from fleetlab.hitl import run_dag as run
    from fleetlab.hitl import task_states as states

    dag_id = "runbook_ownership"
    dag = dagbag.get_dag(dag_id)
    h = lab_fleet("lab43test")
    monkeypatch.setenv("FLEET_LOCK_DIR", str(tmp_path / "locks"))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(tmp_path / "data"))
    from tests.conftest import write_fleet_file

    monkeypatch.setenv("FLEET_FILE", str(write_fleet_file(h.spec, tmp_path / "fleet.yaml")))
    kafka = runbook_kafka(h.spec)  # the test's own moves (restoring the order) need Alter too
    admin = leadership.for_cluster(kafka, None)
    topic, group = unique("rec43"), unique("recovery 'ü😀' $x")
    version, login = h.spec.kafka_version, h.spec.security_config("admin")  # the lab's producer and member
    wait_topic(h.bootstrap, topic, kafka_version=version, security=login)
    produce(h.bootstrap, topic, {0: 3, 1: 3, 2: 3}, kafka_version=version, security=login)
    member = ConsumerThread(h.bootstrap, group, [topic], client_id="recovery-43", kafka_version=version,
                            security=login)
    member.start()
    p = partition_for(group, 50)
    original = leadership.assignment(admin, OFFSETS)[p]
    try:
        leadership.elect_preferred_leaders(admin, OFFSETS)
        time.sleep(3)
        before = leadership.state(admin, OFFSETS, p)
        target = original[-1]
        conf = {"cluster": "lab43test", "group": group, "partition": -1, "action": "move_leader",
                "target_broker": target, "dry_run": False, "evidence_run": "", "replica_order": ""}
        dr = run(dag, conf, Answerer(dag_id, "Approve"))
        assert dr.state == "success", states(dr)
        after = leadership.state(admin, OFFSETS, p)
        assert after.leader == target and after.leader_epoch > before.leader_epoch
        assert leadership.assignment(admin, OFFSETS)[p] == [target] + original[:-1]
        entries = read_journal(journal_path(tmp_path / "data", "ownership", dag_id, dr.run_id, "lab43test"))
        assert [(e.get("step"), e["status"]) for e in entries.values()] == [
            ("execute", "done"), ("reorder_replicas", "done"), ("preferred_election", "done")]
        recs = audit.records(DataRoot(tmp_path / "data"), "lab43test", dr.run_id)
        assert [r["event"] for r in recs] == ["planned", "approved", "executed", "verified"]
        assert kafka.describe_groups([group])[group].coordinator_id == target
        rollback = recs[2]["details"]["rollback"]["conf"]
        back = run(dag, dict(conf, **{k: v for k, v in rollback.items() if k != "cluster"}),
                   Answerer(dag_id, "Approve"))
        assert back.state == "success", states(back)
        assert leadership.assignment(admin, OFFSETS)[p] == original
        assert leadership.state(admin, OFFSETS, p).leader == before.leader
    finally:
        member.stop()
        if leadership.assignment(admin, OFFSETS)[p] != original:
            leadership.reorder_replicas(admin, OFFSETS, p, original)
        leadership.elect_preferred_leaders(admin, OFFSETS)
        kafka.close()

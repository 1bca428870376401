"""Group-id reconciliation against the real lab: real ZooKeeper (chroot /kafka), real consumers on
the 0.9 brokers. Mappings are written by tests/kop_standin.py, a STAND-IN FOR KoP (KoP cannot run
here). All consumers run on 127.0.0.1: distinct client ids stand for distinct hosts."""

from __future__ import annotations

import datetime as dt
import socket
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient
from kazoo.security import READ_ACL_UNSAFE, make_digest_acl

from fleetkit.core.journal import read_journal
from fleetkit.group_ids import collect as gi_collect
from fleetkit.group_ids import execute as gi_execute
from fleetkit.group_ids import rules as gi
from fleetkit.group_ids import verify as gi_verify
from fleetkit.clients.kafka import KafkaCluster
from fleetlab.lab import expire_zk_session
from fleetlab.traffic import ConsumerThread, wait_topic

from tests.helpers import admin_kafka
from tests.kop_standin import ConcurrentKoP, kop_write

pytestmark = pytest.mark.lab

HOST = "127.0.0.1"


@pytest.fixture
def zk(lab):
    c = KazooClient(hosts=f"{lab.spec.zk_hosts}{lab.spec.chroot}", timeout=10)
    c.start(timeout=15)
    yield c
    c.stop()
    c.close()


@pytest.fixture
def root(zk):
    r = f"/client_group_id_{uuid.uuid4().hex[:8]}"
    yield r
    zk.delete(r, recursive=True) if zk.connected and zk.exists(r) else None


def _kafka(lab) -> KafkaCluster:
    return admin_kafka(lab.spec)


def _state(zk, root) -> dict[str, str]:
    if not zk.exists(root):
        return {}
    return {n: zk.get(f"{root}/{n}")[0].decode() for n in zk.get_children(root)}


def _wait_members(kafka, want: dict[str, set[str]], timeout=90):
    deadline = time.monotonic() + timeout
    got = {}
    while time.monotonic() < deadline:
        got = {g: {m.client_id for m in d.members} for g, d in kafka.describe_groups(list(want)).items()}
        if got == want:
            return
        time.sleep(0.5)
    raise AssertionError(f"members never reached {want}: {got}")


def test_reconcile_real_consumers_exactly(lab, zk, root, unique, tmp_path):
    topic = unique("kop-topic")
    wait_topic(lab.bootstrap, topic)
    ga = unique("kop grp A 'ünï' $(x) a/b")
    gb = unique("kop-grp-B; rm -rf / #")
    miss_id = "miss 'x' $(y) ünï"
    clients = [(ga, "ok-1"), (ga, miss_id), (gb, "mism-1"), (ga, "dup-1"), (gb, "dup-1"), (gb, "slash/1")]
    # KoP stand-in state: the OK mapping, a mismatched one, the conflicting pair's, a stale one...
    kop_write(zk, root, HOST, "ok-1", ga)
    kop_write(zk, root, HOST, "mism-1", "wrong-group")
    kop_write(zk, root, HOST, "dup-1", ga)
    kop_write(zk, root, HOST, "gone-1", gb)
    threads = [ConsumerThread(lab.bootstrap, g, [topic], client_id=c) for g, c in clients]
    for t in threads:
        t.start()
    kafka = _kafka(lab)
    try:
        _wait_members(kafka, {ga: {"ok-1", miss_id, "dup-1"}, gb: {"mism-1", "dup-1", "slash/1"}})
        time.sleep(3.0)  # the stale znode is now older than the 2 s grace
        kop_write(zk, root, HOST, "young-1", ga)  # ... and a young one without member: OK
        now = dt.datetime.now(dt.timezone.utc)
        mappings, problems = gi_collect.read_mappings(zk, root, "labtest", now)
        assert problems == []
        members, _ = gi_collect.read_members(kafka, "labtest", now)
        members = [m for m in members if m["group"] in (ga, gb)]
        assert {m["client_host"] for m in members} == {HOST}  # 0.9's "/127.0.0.1" stripped
        findings = gi.diff(mappings, members, root, grace_seconds=2.0)
        got = {(f["class"], f["path"], f["group"], f["znode_group"]) for f in findings}
        p = lambda cid: f"{root}/{HOST}-{cid}"  # noqa: E731
        assert got == {
            ("OK", p("ok-1"), ga, ga),
            ("MISSING", p(miss_id), ga, None),
            ("MISMATCHED", p("mism-1"), gb, "wrong-group"),
            ("CONFLICT", p("dup-1"), None, ga),
            ("STALE", p("gone-1"), None, gb),
            ("OK", p("young-1"), None, ga),
            ("UNREPRESENTABLE", None, gb, None),
        }
        conflict = next(f for f in findings if f["class"] == "CONFLICT")
        assert conflict["groups"] == sorted([ga, gb]) and len(conflict["member_ids"]) == 2
        unrep = next(f for f in findings if f["class"] == "UNREPRESENTABLE")
        assert unrep["client_id"] == "slash/1" and "'/'" in unrep["reason"]
        stale = next(f for f in findings if f["class"] == "STALE")
        assert stale["znode_version"] == 0 and stale["age_seconds"] > 2.0

        ops = gi.ops_for(findings, ["MISSING", "MISMATCHED", "STALE"])
        journal = tmp_path / "journal.jsonl"
        res = gi_execute.apply(zk, ops, root, journal)
        assert (len(res.changed), res.skipped, res.errors, res.unknown) == (3, [], [], [])
        assert _state(zk, root) == {f"{HOST}-ok-1": ga, f"{HOST}-{miss_id}": ga, f"{HOST}-mism-1": gb,
                                    f"{HOST}-dup-1": ga, f"{HOST}-young-1": ga}
        assert zk.get(p("mism-1"))[1].version == 1
        # the journal: an intent before each write, its outcome after, before/after recorded
        entries = read_journal(journal)
        assert sorted((e["op"], e["status"], e["before"], e["after"]) for e in entries.values()) == sorted([
            ("create", "done", None, ga), ("set", "done", "wrong-group", gb), ("delete", "done", gb, None)])
        assert gi_verify.verify(zk, res.changed) == ([], [])
        # the next run sees only what is never written
        again = gi.diff(gi_collect.read_mappings(zk, root, "labtest", dt.datetime.now(dt.timezone.utc))[0], members, root, 2.0)
        assert sorted(f["class"] for f in again if f["class"] != "OK") == ["CONFLICT", "UNREPRESENTABLE"]
    finally:
        for t in threads:
            t.stop_event.set()
        for t in threads:
            t.join(15)
        kafka.close()


def _synthetic(zk, root, n):
    """n MISSING, n MISMATCHED and n STALE paths (members are rows here: this test is about the
    writes, real consumers are covered above)."""
    for i in range(n):
        kop_write(zk, root, "10.1.0.1", f"mism-{i}", "old-group")
        kop_write(zk, root, "10.1.0.1", f"stale-{i}", "gone-group")
    now = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=5)
    members = [{"group": "g", "client_host": "10.1.0.1", "client_id": f"{k}-{i}", "member_id": f"m{k}{i}"}
               for k in ("miss", "mism") for i in range(n)]
    mappings, _ = gi_collect.read_mappings(zk, root, "labtest", now)
    findings = gi.diff(mappings, members, root, grace_seconds=1.0)
    return gi.ops_for(findings, ["MISSING", "MISMATCHED", "STALE"])


def test_a_concurrent_kop_writer_is_never_overwritten_or_deleted(zk, root, lab):
    ops = _synthetic(zk, root, 300)
    assert len(ops) == 900
    raced = [o["path"] for o in ops[::2]]  # half of every class races with the KoP stand-in
    writer_zk = KazooClient(hosts=f"{lab.spec.zk_hosts}{lab.spec.chroot}", timeout=10)
    writer_zk.start(timeout=15)
    writer = ConcurrentKoP(writer_zk, raced)
    writer.start()
    try:
        time.sleep(0.2)
        res = gi_execute.apply(zk, ops, root, window=4)  # a narrow window keeps the race on for a while
    finally:
        writer.stop()
        writer_zk.stop()
        writer_zk.close()
    assert writer.error is None and writer.writes > 300
    assert res.errors == [] and res.unknown == [] and len(res.changed) + len(res.skipped) == 900
    assert res.skipped and {s["path"] for s in res.skipped} <= set(raced)
    state = gi_verify.read_back(zk, [o["path"] for o in ops])
    done = {c["path"] for c in res.changed}
    wrong = []
    for o in ops:
        cur = state[o["path"]]
        cur = cur[0] if cur else None
        # the writer's last write stands wherever it wrote; elsewhere the reconciliation's. The one
        # exception destroys nothing: a create of ours after the writer's delete
        want = writer.last[o["path"]] if o["path"] in writer.last else o["after"]
        recreated = o["op"] == "create" and o["path"] in done and want is None and cur == o["after"]
        if cur != want and not recreated:
            wrong.append((o["path"], o["op"], cur, want))
    assert wrong == []


@pytest.mark.parametrize("loss", ["connection", "session"])
def test_connection_lost_mid_apply_leaves_an_exact_record(lab, zk, root, tmp_path, loss):
    ops = [{"op": "create", "class": "MISSING", "path": f"{root}/10.2.0.1-c{i:05d}", "before": None, "after": "g",
            "version": None} for i in range(4000)]
    zk.ensure_path(root)
    journal = tmp_path / "journal.jsonl"
    cut = threading.Event()

    def drop_connection(sent):
        if sent >= 1200 and not cut.is_set():
            cut.set()
            if loss == "connection":
                zk._connection._socket.shutdown(socket.SHUT_RDWR)  # a real connection loss, the next window in flight
            else:
                expire_zk_session(zk, lab.spec.zk_hosts, **lab.spec.zk_login())  # the session (and everything in flight on it) is gone

    with pytest.raises(gi_execute.ApplyInterrupted) as e:
        gi_execute.apply(zk, ops, root, journal, window=200, on_sent=drop_connection)
    res = e.value.result
    assert res.interrupted and len(res.changed) >= 1000
    assert len(res.changed) + len(res.unknown) + len(res.not_started) + len(res.skipped) == 4000
    deadline = time.monotonic() + 15  # kazoo reconnects by itself (same session, or a new one after expiry)
    while not zk.connected and time.monotonic() < deadline:
        time.sleep(0.2)
    present = set(zk.get_children(root))
    done = {o["path"].rsplit("/", 1)[1] for o in res.changed}
    unknown = {o["path"].rsplit("/", 1)[1] for o in res.unknown}
    assert done <= present and present - done <= unknown  # nothing happened that the record does not say
    entries = read_journal(journal)
    assert {e["path"].rsplit("/", 1)[1] for e in entries.values() if e["status"] == "done"} == done
    assert all(e["status"] in ("done", "unknown", "not_sent", "intent") for e in entries.values())
    # the next run sees the truth and finishes the job
    mappings, _ = gi_collect.read_mappings(zk, root, "labtest", dt.datetime.now(dt.timezone.utc))
    members = [{"group": "g", "client_host": "10.2.0.1", "client_id": f"c{i:05d}", "member_id": "m"} for i in range(4000)]
    rest = gi.ops_for(gi.diff(mappings, members, root, 3600), ["MISSING"])
    assert len(rest) == 4000 - len(present)
    gi_execute.apply(zk, rest, root)
    assert len(zk.get_children(root)) == 4000


def test_missing_root_and_digest_acl(lab, root):
    hosts = f"{lab.spec.zk_hosts}{lab.spec.chroot}"
    authed = KazooClient(hosts=hosts, timeout=10, auth_data=[("digest", "kop:s3cret")])
    anon = KazooClient(hosts=hosts, timeout=10)
    authed.start(timeout=15)
    anon.start(timeout=15)
    try:
        now = dt.datetime.now(dt.timezone.utc)
        rows, problems = gi_collect.read_mappings(authed, root, "labtest", now)
        assert rows == [] and "does not exist" in problems[0]
        acl = [make_digest_acl("kop", "s3cret", all=True)]
        authed.create(root, b"", acl=acl)
        with pytest.raises(gi.ReconcileError, match="not authorised"):
            gi_collect.read_mappings(anon, root, "labtest", now)
        members = [{"group": "g 'q'", "client_host": "10.3.0.1", "client_id": "c1", "member_id": "m"}]
        ops = gi.ops_for(gi.diff([], members, root, 3600), ["MISSING"])
        refused = gi_execute.apply(anon, ops, root)  # refused by the server: reported, not raised, nothing written
        assert refused.changed == [] and [e["reason"] for e in refused.errors] == [
            f"ZooKeeper refused create on znode {root}/10.3.0.1-c1 (chroot {lab.spec.chroot}) for anonymous (no "
            "ZooKeeper authentication) (NoAuth: the znode's ACL does not grant it)"]
        res = gi_execute.apply(authed, ops, root)
        assert len(res.changed) == 1
        child = f"{root}/10.3.0.1-c1"
        # an authenticated writer: Kafka's secure policy, the creator (digest kop) all, the world read
        assert authed.get(child)[0] == "g 'q'".encode() and set(authed.get_acls(child)[0]) == {*acl, *READ_ACL_UNSAFE}
    finally:
        authed.delete(root, recursive=True) if authed.exists(root) else None
        authed.stop()
        anon.stop()


def test_fleetctl_groupids_diff_prints_findings_and_writes_nothing(lab, zk, root, tmp_path, capsys):
    import yaml

    from fleetctl import cli

    kop_write(zk, root, "10.4.0.1", "gone 'x' $(y)", "g\nnewline")
    fleet = lab.own_fleet()
    fleet["clusters"][0]["group_id_mappings"] = {"root": root, "grace": "0s"}
    f = tmp_path / "fleet.yaml"
    f.write_text(yaml.safe_dump(fleet))
    time.sleep(0.05)
    assert cli.main(["groupids", "diff", "--fleet", str(f), "--cluster", "labtest"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("STALE\t"))
    assert line.split("\t")[:5] == ["STALE", f"{root}/10.4.0.1-gone 'x' $(y)", "-", "g\\nnewline", "0"]
    assert zk.exists(f"{root}/10.4.0.1-gone 'x' $(y)") is not None  # a diff never writes


def test_rollback_delete_spares_a_znode_recreated_since(zk, root, tmp_path):
    """A rollback deletes what the run created only if it is still that znode: one KoP deleted and
    re-created since (version 0 again, new creation time) is skipped; an untouched one is deleted."""
    from tests.kop_standin import kop_delete

    members = [{"group": "g 'ü' $(x)", "client_host": "10.5.0.1", "client_id": c, "member_id": f"m-{c}"}
               for c in ("kept", "recreated")]
    ops = gi.ops_for(gi.diff([], members, root, 3600), ["MISSING"])
    res = gi_execute.apply(zk, ops, root, tmp_path / "run.jsonl")
    assert len(res.changed) == 2 and all(c["ctime_ms"] == zk.exists(c["path"]).ctime for c in res.changed)
    time.sleep(0.05)  # a distinct creation time (ms)
    kop_delete(zk, root, "10.5.0.1", "recreated")
    kop_write(zk, root, "10.5.0.1", "recreated", "g 'ü' $(x)")  # the client reconnected: KoP's own znode
    assert zk.exists(f"{root}/10.5.0.1-recreated").version == 0
    back = gi_execute.apply(zk, gi.rollback_ops(res.changed), root, tmp_path / "rollback.jsonl")
    assert [c["path"] for c in back.changed] == [f"{root}/10.5.0.1-kept"]
    assert [(s["path"], s["reason"]) for s in back.skipped] == [
        (f"{root}/10.5.0.1-recreated", "the znode was deleted and re-created since it was read: not touched")]
    assert _state(zk, root) == {"10.5.0.1-recreated": "g 'ü' $(x)"}


def test_writes_outside_the_root_are_refused(zk, root):
    """Every write is confined below the mapping root: the root itself, a sibling, '..' and '//'
    are refused before anything is sent, even with the right version and creation time."""
    sibling = f"{root}_sibling"
    zk.create(f"{root}/keep", b"g", makepath=True)
    zk.delete(f"{root}/keep")
    zk.create(f"{sibling}/10.6.0.1-c1", b"g", makepath=True)
    try:
        rstat, sstat = zk.exists(root), zk.exists(f"{sibling}/10.6.0.1-c1")
        ops = [{"op": "delete", "class": "STALE", "path": root, "before": "", "after": None,
                "version": rstat.version, "ctime_ms": rstat.ctime},
               {"op": "delete", "class": "STALE", "path": f"{sibling}/10.6.0.1-c1", "before": "g", "after": None,
                "version": sstat.version, "ctime_ms": sstat.ctime},
               {"op": "create", "class": "MISSING", "path": f"{root}/../{sibling.lstrip('/')}/x", "before": None,
                "after": "g", "version": None},
               {"op": "create", "class": "MISSING", "path": f"{root}//x", "before": None, "after": "g", "version": None}]
        res = gi_execute.apply(zk, ops, root)
        assert res.changed == [] and len(res.errors) == 4
        assert all(e["reason"].startswith("refused, never sent") for e in res.errors)
        assert zk.exists(root) is not None and zk.exists(f"{sibling}/10.6.0.1-c1") is not None
    finally:
        zk.delete(sibling, recursive=True)


def test_a_created_root_is_never_open(lab):
    """A missing mapping root (and a missing folder above it) is never created open to anyone: an
    authenticated writer gives it (and the mappings) creator-all + world-read, the one ACL rule of
    fleetkit.clients.zookeeper.new_znode_acl (tests/integration/test_zk_acls.py: the anonymous
    case, which copies the nearest existing parent's ACL)."""
    hosts = f"{lab.spec.zk_hosts}{lab.spec.chroot}"
    authed = KazooClient(hosts=hosts, timeout=10, auth_data=[("digest", "kop:s3cret")])
    anon = KazooClient(hosts=hosts, timeout=10)
    authed.start(timeout=15)
    anon.start(timeout=15)
    parent = f"/kop_{uuid.uuid4().hex[:8]}"
    root = f"{parent}/pulsar/client_group_id"
    acl = [make_digest_acl("kop", "s3cret", all=True)]
    try:
        authed.create(parent, b"", acl=acl)
        members = [{"group": "g", "client_host": "10.7.0.1", "client_id": "c1", "member_id": "m"}]
        res = gi_execute.apply(authed, gi.ops_for(gi.diff([], members, root, 3600), ["MISSING"]), root)
        assert len(res.changed) == 1
        for node in (f"{parent}/pulsar", root, f"{root}/10.7.0.1-c1"):
            assert set(authed.get_acls(node)[0]) == {*acl, *READ_ACL_UNSAFE}, node
        from kazoo.exceptions import NoAuthError

        with pytest.raises(NoAuthError):
            anon.create(f"{root}/10.7.0.1-intruder", b"x")
    finally:
        authed.delete(parent, recursive=True) if authed.exists(parent) else None
        authed.stop()
        anon.stop()


def test_a_kraft_cluster_has_no_mappings_section_and_diff_says_so(lab_fleet, tmp_path, capsys):
    """Kafka 4.3 in KRaft mode has no ZooKeeper, so no KoP mappings: `fleetctl groupids diff` exits
    0 saying so, and a fleet file giving it a mappings section is refused naming the field."""
    import yaml

    from fleetctl import cli
    from fleetkit.core.errors import FleetError
    from fleetkit.core.fleet import load_fleet

    h = lab_fleet("lab43test")
    assert cli.main(["groupids", "diff", "--fleet", str(h.fleet_file), "--cluster", "lab43test"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == f"cluster lab43test: {gi_collect.no_mappings(h.cluster)}"
    assert "no mappings section" in out and "KRaft" in out
    with pytest.raises(gi.ReconcileError, match="no mappings section"):
        gi_collect.collect(h.cluster, None, None)
    doc = yaml.safe_load(h.fleet_file.read_text())
    entry = next(c for c in doc["clusters"] if c["name"] == "lab43test")
    entry["group_id_mappings"] = {"root": "/client_group_id"}
    bad = tmp_path / "fleet.yaml"
    bad.write_text(yaml.safe_dump({**doc, "clusters": [entry]}))
    with pytest.raises(FleetError, match=r"group_id_mappings.*zookeeper"):
        load_fleet(bad)

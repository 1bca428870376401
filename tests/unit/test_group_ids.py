"""Group-id reconciliation, pure parts: the case table, names, plans, rechecks, rollback, fleet config."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetkit.group_ids import rules as gi
from fleetkit.group_ids.execute import recheck_members
from fleetkit.group_ids.rules import rollback_ops
from fleetkit.group_ids.report import render_report
from fleetkit.core.errors import FleetConfigError
from fleetkit.core.fleet import parse_fleet
from tests.group_id_cases import CASES, GRACE, ROOT, key, rows


@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]:02d}-{c[1]}" for c in CASES])
def test_case_table(case):
    number, _, members, znodes, expected, why = case
    zn, mem = rows(number, members, znodes)
    got = {key(f): f["class"] for f in gi.diff(zn, mem, ROOT, GRACE)}
    assert got == expected, why


def test_findings_name_group_member_path_and_version():
    zn, mem = rows(3, [("g1", "10.0.0.7", "c1")], {"10.0.0.7-c1": ("g0", 10)})
    (f,) = gi.diff(zn, mem, ROOT, GRACE)
    assert (f["path"], f["group"], f["client_host"], f["client_id"], f["znode_group"], f["znode_version"]) == \
        ("/client_group_id/10.0.0.7-c1", "g1", "10.0.0.7", "c1", "g0", 3)
    assert f["member_ids"] == ["c1-0"]


@pytest.mark.parametrize("host,cid,ok", [
    ("10.0.0.7", "c1", True), ("10.0.0.7", "", True), ("10.0.0.7", "a b'\"$;`|&<>", True), ("10.0.0.7", "ünï€", True),
    ("10.0.0.7", "a/b", False), ("10.0.0.7", "x\n", False), ("10.0.0.7", "x\x7f", False), ("10.0.0.7", "\ue000", False),
    ("10.0.0.7", "\ufff0", False), ("10.0.0.7", "🧨", False), ("", "c1", False), (None, "c1", False), ("10.0.0.7", None, False),
])
def test_name_problem(host, cid, ok):
    assert (gi.name_problem(host, cid) is None) == ok


def test_split_name_uses_the_first_dash():
    assert gi.split_name("10.0.0.7-orders-consumer-1") == ("10.0.0.7", "orders-consumer-1")
    assert gi.split_name("garbage") == ("garbage", "")


def _findings():
    members = [("g1", "10.0.0.7", "miss"), ("g1", "10.0.0.7", "mism"), ("g1", "10.0.0.7", "c"), ("g2", "10.0.0.7", "c")]
    znodes = {"10.0.0.7-mism": ("g0", 10), "10.0.0.7-old": ("gx", 99999), "10.0.0.7-c": ("g1", 99999)}
    zn, mem = rows(1, members, znodes)
    return gi.diff(zn, mem, ROOT, GRACE), mem


def test_ops_for_writes_only_what_is_asked_and_never_conflicts():
    findings, _ = _findings()
    ops = gi.ops_for(findings, ["MISSING", "MISMATCHED", "STALE"])
    assert [(o["op"], o["path"], o["before"], o["after"], o["version"]) for o in ops] == [
        ("create", "/client_group_id/10.0.0.7-miss", None, "g1", None),
        ("delete", "/client_group_id/10.0.0.7-old", "gx", None, 3),
        ("set", "/client_group_id/10.0.0.7-mism", "g0", "g1", 3),
    ]
    assert [o["op"] for o in gi.ops_for(findings, ["MISSING"])] == ["create"]
    with pytest.raises(gi.ReconcileError):
        gi.ops_for(findings, ["CONFLICT"])


def test_recheck_members_drops_ops_the_members_no_longer_justify():
    findings, mem = _findings()
    ops = gi.ops_for(findings, ["MISSING", "MISMATCHED", "STALE"])
    now = [m for m in mem if m["client_id"] != "miss"]  # the MISSING member left
    now.append(dict(mem[0], client_id="old", group="gx"))  # the STALE path's client came back
    keep, dropped = recheck_members(ops, now)
    assert [o["path"] for o in keep] == ["/client_group_id/10.0.0.7-mism"]
    assert sorted(o["path"] for o in dropped) == ["/client_group_id/10.0.0.7-miss", "/client_group_id/10.0.0.7-old"]


def test_rollback_ops_undo_each_change_conditionally():
    changed = [{"op": "create", "path": "/r/a", "before": None, "after": "g", "new_version": 0, "ctime_ms": 111},
               {"op": "set", "path": "/r/b", "before": "g0", "after": "g1", "new_version": 4, "ctime_ms": 222},
               {"op": "delete", "path": "/r/c", "before": "gx", "after": None, "new_version": None, "ctime_ms": 333}]
    assert [(o["op"], o["path"], o["after"], o["version"], o.get("ctime_ms")) for o in rollback_ops(changed)] == [
        ("delete", "/r/a", None, 0, 111), ("set", "/r/b", "g0", 4, 222), ("create", "/r/c", "gx", None, None)]


BASE = """
version: 1
clusters:
  - name: c1
    kafka_conn_id: k
    zookeeper: {conn_id: z, chroot: /kafka}
"""


def test_fleet_group_id_mappings_defaults_and_values():
    c = parse_fleet(BASE, "f.yaml", Path("/")).cluster("c1")
    assert c.group_id_mappings is None  # no section: the cluster has no KoP mappings, skipped
    c = parse_fleet(BASE + "    group_id_mappings: {}\n", "f.yaml", Path("/")).cluster("c1")
    assert (c.group_id_mappings.root, c.group_id_mappings.create_missing_unattended,
            c.group_id_mappings.grace_seconds) == ("/client_group_id", True, 3600.0)
    c = parse_fleet(BASE + "    group_id_mappings: {root: /kop/map, create_missing_unattended: false, grace: 90s}\n",
                    "f.yaml", Path("/")).cluster("c1")
    assert (c.group_id_mappings.root, c.group_id_mappings.create_missing_unattended,
            c.group_id_mappings.grace_seconds) == ("/kop/map", False, 90.0)


@pytest.mark.parametrize("section,field,msg", [
    ("{root: client_group_id}", "root", "must look like"),
    ("{root: /a/}", "root", "must look like"),
    ("{root: /a/../b}", "root", ". or .."),
    ("{grace: soon}", "grace", "is not a duration"),
    ("{create_missing_unattended: 'yes'}", "create_missing_unattended", "expected true or false"),
    ("{rooot: /x}", "group_id_mappings", "unknown field"),
])
def test_fleet_group_id_mappings_errors_name_file_and_field(section, field, msg):
    with pytest.raises(FleetConfigError) as e:
        parse_fleet(BASE + f"    group_id_mappings: {section}\n", "fleet.yaml", Path("/"))
    assert str(e.value).startswith("fleet.yaml: clusters[c1].group_id_mappings") and field in str(e.value)
    assert msg in str(e.value)


def test_fleet_group_id_mappings_need_zookeeper():
    with pytest.raises(FleetConfigError, match="needs the cluster's zookeeper section"):
        parse_fleet("version: 1\nclusters:\n  - {name: c1, kafka_conn_id: k, group_id_mappings: {}}\n", "f.yaml", Path("/"))


def test_report_escapes_hostile_names(tmp_path):
    import json

    hostile = "x | [link](http://evil.example) `code` <b>\n# head"
    f = {"cluster": "c1", "path": f"/client_group_id/10.0.0.7-{hostile}", "class": "MISSING", "reason": "r",
         "group": hostile, "groups": [hostile], "client_host": "10.0.0.7", "client_id": hostile, "member_ids": [],
         "znode_group": None, "znode_version": None, "ctime_ms": None, "mtime": None, "age_seconds": None}
    (tmp_path / "findings.jsonl").write_text(json.dumps(f) + "\n")
    (tmp_path / "summary.json").write_text(json.dumps({"clusters": {"c1": {"MISSING": 1, "OK": 3}}}))
    text = render_report(tmp_path).read_text()
    assert "| MISSING | 1 |" in text and "| OK | 3 |" in text
    assert "[link](" not in text and "<b>" not in text and "`code`" not in text and "\n# head" not in text


def test_recheck_skips_ops_of_groups_that_cannot_be_described_now():
    findings, mem = _findings()
    ops = gi.ops_for(findings, ["MISSING", "MISMATCHED", "STALE"])
    now = mem + [{"group": "gx", "client_host": None, "client_id": None, "member_id": None}]
    keep, dropped = recheck_members(ops, now)
    assert [o["path"] for o in dropped] == ["/client_group_id/10.0.0.7-old"]
    assert "could not be described" in dropped[0]["reason"] and len(keep) == 2


# -- the one executor (runbook and unattended writer), against an in-memory ZooKeeper ---------------
class _Fut:
    def __init__(self, value=None, exc=None):
        self.value, self.exc = value, exc

    def get(self, timeout=None):
        if self.exc:
            raise self.exc
        return self.value


class _FakeZK:
    """The few kazoo calls apply makes; `lose_at` raises ConnectionLoss on that many-th send."""

    def __init__(self, lose_at: int | None = None):
        self.nodes: dict[str, tuple[str, int]] = {}
        self.sent, self.lose_at = 0, lose_at

    def get_acls(self, path):
        from kazoo.exceptions import NoNodeError

        if path != "/" and path not in self.nodes:
            raise NoNodeError()
        return ["acl"], None

    def create(self, path, data, acl=None, makepath=False):
        self.nodes[path] = (data.decode(), 0)

    def exists_async(self, path):
        return _Fut(None)

    def create_async(self, path, data, acl=None):
        from kazoo.exceptions import ConnectionLoss, NodeExistsError

        self.sent += 1
        if self.lose_at is not None and self.sent >= self.lose_at:
            raise ConnectionLoss()
        if path in self.nodes:
            return _Fut(exc=NodeExistsError())
        self.nodes[path] = (data.decode(), 0)
        return _Fut(path)


class _FakeKafka:
    """Members as (group, host, client id); `list_errors`: brokers that did not answer ListGroups
    (their groups are left out of the listing, as librdkafka does)."""

    def __init__(self, members: list[tuple[str, str, str]], list_errors: list[str] = (), unlisted=()):
        self.members, self.list_errors, self.unlisted = members, list(list_errors), set(unlisted)

    def list_groups(self, errors=None):
        if errors is not None:
            errors.extend(self.list_errors)
        return [(g, "consumer") for g in sorted({g for g, _, _ in self.members} - self.unlisted)]

    def describe_groups(self, groups):
        from types import SimpleNamespace as NS

        return {g: NS(error=None, members=[NS(client_id=c, host=h, member_id=f"{c}-m") for gg, h, c in self.members
                                           if gg == g]) for g in groups}


def _missing_ops():
    zn, mem = rows(2, [("g1", "10.0.0.7", "stays"), ("g1", "10.0.0.7", "left")], {})
    return gi.ops_for(gi.diff(zn, mem, ROOT, GRACE), ["MISSING"])


def test_execute_ops_rechecks_members_applies_and_journals(tmp_path):
    from fleetkit.core.journal import read_journal
    from fleetkit.group_ids.execute import execute_ops, journal_path

    zk = _FakeZK()
    res = execute_ops(zk, _FakeKafka([("g1", "10.0.0.7", "stays")]), "c1", _missing_ops(), ROOT,
                      data_root=str(tmp_path), dag_id="d", run_id="r", action="create_missing_group_ids")
    assert [c["path"] for c in res.changed] == [f"{ROOT}/10.0.0.7-stays"]
    assert [s["path"] for s in res.skipped] == [f"{ROOT}/10.0.0.7-left"]
    assert "live member groups are now none" in res.skipped[0]["reason"]
    assert zk.nodes[f"{ROOT}/10.0.0.7-stays"] == ("g1", 0) and f"{ROOT}/10.0.0.7-left" not in zk.nodes
    journal = journal_path(str(tmp_path), "d", "r", "c1")
    assert res.journal == str(journal)
    assert [e["status"] for e in read_journal(journal).values()] == ["done", "done"]  # create_root, then ours


def test_execute_ops_without_recheck_reads_no_members(tmp_path):
    from fleetkit.group_ids.execute import execute_ops

    res = execute_ops(_FakeZK(), None, "c1", _missing_ops(), ROOT, data_root=str(tmp_path), dag_id="d",
                      run_id="r", action="reconcile_group_ids", recheck=False)
    assert len(res.changed) == 2 and res.skipped == []


def test_execute_ops_interrupted_leaves_an_audit_record_and_raises(tmp_path):
    from fleetkit.core import audit
    from fleetkit.core.datasets import DataRoot
    from fleetkit.group_ids.execute import ApplyInterrupted, execute_ops

    kafka = _FakeKafka([("g1", "10.0.0.7", "stays"), ("g1", "10.0.0.7", "left")])
    with pytest.raises(ApplyInterrupted) as e:
        execute_ops(_FakeZK(lose_at=2), kafka, "c1", _missing_ops(), ROOT, data_root=str(tmp_path), dag_id="d",
                    run_id="r", action="create_missing_group_ids", actor="scheduler")
    assert (len(e.value.result.changed), len(e.value.result.not_started)) == (1, 1)
    (rec,) = audit.records(DataRoot(str(tmp_path)), "c1", "r")
    assert (rec["action"], rec["event"], rec["actor"], rec["details"]["partial"]) == \
        ("create_missing_group_ids", "failed", "scheduler", True)
    assert rec["message"].startswith("INTERRUPTED: ZooKeeper connection lost mid-apply")


# -- a partial group listing: every group of the cluster is unknown -----------------------------
def test_a_partial_listing_marks_the_whole_cluster_unknown():
    from fleetkit.group_ids.collect import read_members

    kafka = _FakeKafka([("g1", "10.0.0.7", "c1"), ("g2", "10.0.0.7", "c2")],
                       list_errors=["KafkaError{code=_TRANSPORT,val=-195,str=\"broker 2 down\"}"], unlisted={"g2"})
    members, problems = read_members(kafka, "c1", None)
    assert [m for m in members if gi.is_unknown_marker(m)] == [
        {"cluster": "c1", "observed_at": None, "group": None, "client_id": None, "client_host": None, "member_id": None}]
    assert gi.ALL_GROUPS in gi.unknown_groups(members)
    assert "listing the groups partly failed" in problems[0] and "broker 2 down" in problems[0]
    # c2 (of the unlisted g2) has an old znode, and so has a client of the listed g1 that left
    zn, _ = rows(1, [], {"10.0.0.7-c2": ("g2", 99999), "10.0.0.7-gone": ("g1", 99999)})
    got = {f["path"]: f["class"] for f in gi.diff(zn, members, ROOT, GRACE)}
    assert got == {f"{ROOT}/10.0.0.7-c1": "MISSING", f"{ROOT}/10.0.0.7-c2": "OK", f"{ROOT}/10.0.0.7-gone": "OK"}
    # the same findings without the failed broker: both old znodes are STALE
    full, _ = read_members(_FakeKafka([("g1", "10.0.0.7", "c1")]), "c1", None)
    assert sorted(f["class"] for f in gi.diff(zn, full, ROOT, GRACE)) == ["MISSING", "STALE", "STALE"]


def test_recheck_after_a_partial_listing_keeps_only_creates():
    findings, mem = _findings()
    ops = gi.ops_for(findings, ["MISSING", "MISMATCHED", "STALE"])
    keep, dropped = recheck_members(ops, mem + [gi.unknown_marker("case-01", None, gi.ALL_GROUPS)])
    assert [o["op"] for o in keep] == ["create"]
    assert sorted(o["op"] for o in dropped) == ["delete", "set"]
    assert all("listing the groups partly failed" in o["reason"] for o in dropped)


# -- every write confined below the mapping root ---------------------------------------------------
@pytest.mark.parametrize("path", [
    "/client_group_id", "/client_group_id/", "/client_group_id/../zookeeper", "/client_group_id/..",
    "/client_group_id/.", "/client_group_id//x", "//client_group_id/x", "/client_group_id/a/b",
    "/client_group_idx/y", "/brokers/ids/1", "client_group_id/x", "", None,
])
def test_apply_refuses_every_path_not_directly_below_the_root(tmp_path, path):
    from fleetkit.core.journal import read_journal
    from fleetkit.group_ids.execute import apply, outside_root

    assert outside_root(path, ROOT) is not None
    zk = _FakeZK()
    ok = {"op": "create", "class": "MISSING", "path": f"{ROOT}/10.0.0.7-c 'x' ..", "before": None, "after": "g",
          "version": None}
    bad = [dict(ok, path=path), {"op": "delete", "class": "STALE", "path": path, "before": "g", "after": None,
                                 "version": 0, "ctime_ms": 1}]
    res = apply(zk, bad + [ok], ROOT, tmp_path / "j.jsonl")
    assert [c["path"] for c in res.changed] == [ok["path"]]
    assert len(res.errors) == 2 and all("refused, never sent" in e["reason"] for e in res.errors)
    assert zk.sent == 1 and set(zk.nodes) == {ROOT, ok["path"]}
    assert sorted(e["status"] for e in read_journal(tmp_path / "j.jsonl").values() if e["seq"] >= 0) == \
        ["done", "error", "error"]


def test_apply_never_sets_or_deletes_a_znode_whose_ctime_is_unknown():
    from fleetkit.group_ids.execute import apply

    class ZK(_FakeZK):
        def delete_async(self, path, version=-1):
            raise AssertionError("sent")

        set_async = delete_async

    ops = [{"op": "delete", "class": "ROLLBACK", "path": f"{ROOT}/a", "before": "g", "after": None, "version": 0},
           {"op": "set", "class": "ROLLBACK", "path": f"{ROOT}/b", "before": "g", "after": "h", "version": 2,
            "ctime_ms": None}]
    res = apply(ZK(), ops, ROOT)
    assert res.changed == [] and [s["path"] for s in res.skipped] == [f"{ROOT}/a", f"{ROOT}/b"]
    assert all("creation time is not known" in s["reason"] for s in res.skipped)


def test_run_journals_in_the_gates_journal(tmp_path):
    from types import SimpleNamespace as NS

    from fleetkit.core.action import ClusterContext
    from fleetkit.core.journal import read_journal
    from fleetkit.group_ids.execute import run

    gate_journal = tmp_path / "gate" / "execute.jsonl"
    zk = _FakeZK()
    ctx = ClusterContext(NS(name="c1"), _FakeKafka([("g1", "10.0.0.7", "stays"), ("g1", "10.0.0.7", "left")]),
                         NS(client=zk), journal_path=str(gate_journal))
    plan = {"dag_id": "d", "run_id": "r", "details": {"ops": _missing_ops(), "root": ROOT,
                                                      "data_root": str(tmp_path / "data")}}
    out = run(ctx, plan)
    assert out["journal"] == str(gate_journal) and out["changed"] == 2
    assert sorted(e["path"] for e in read_journal(gate_journal).values() if e["status"] == "done" and e["seq"] >= 0) \
        == [f"{ROOT}/10.0.0.7-left", f"{ROOT}/10.0.0.7-stays"]
    assert not (tmp_path / "data" / "journals").exists()


def test_run_interrupted_under_the_gate_leaves_the_record_to_the_gate(tmp_path):
    from types import SimpleNamespace as NS

    from fleetkit.core import audit
    from fleetkit.core.action import ClusterContext
    from fleetkit.core.datasets import DataRoot
    from fleetkit.core.journal import summary
    from fleetkit.group_ids.execute import ApplyInterrupted, run

    gate_journal = tmp_path / "execute.jsonl"
    ctx = ClusterContext(NS(name="c1"), _FakeKafka([("g1", "10.0.0.7", "stays"), ("g1", "10.0.0.7", "left")]),
                         NS(client=_FakeZK(lose_at=2)), journal_path=str(gate_journal))
    plan = {"dag_id": "d", "run_id": "r", "details": {"ops": _missing_ops(), "root": ROOT,
                                                      "data_root": str(tmp_path)}}
    with pytest.raises(ApplyInterrupted):
        run(ctx, plan)
    assert audit.records(DataRoot(str(tmp_path)), "c1", "r") == []  # the gate writes `failed` from the journal
    account = summary(gate_journal)
    assert [e["path"] for e in account["done"] if e["seq"] >= 0] == [f"{ROOT}/10.0.0.7-left"]

"""Pure parts of the approval gate: plan digests, locks, reset targets, audit, the CLI's rollback."""

import json

import pytest

from fleetkit.core import audit
from fleetkit.core import plans
from fleetkit.core.datasets import DataRoot
from fleetkit.core.errors import FleetConfigError, FleetError
from fleetkit.core.locks import ClusterLock, ClusterLocked
from fleetkit.stuck.plan import ResetError, Target, new_offset, parse_partitions, parse_target

PLAN = {"action": "reset_offsets", "cluster": "lab", "title": "t", "preconditions": [],
        "changes": [{"target": "t-0", "before": 1, "after": 2}], "rollback": {"how": "x"}}


def test_digest_is_canonical_and_changes_with_any_edit(tmp_path):
    reordered = json.loads(json.dumps(PLAN, sort_keys=False))
    assert plans.digest(PLAN) == plans.digest(dict(reversed(list(reordered.items()))))
    path, d = plans.store(tmp_path, "dag", "manual__2026-01-01T00:00:00+00:00", PLAN)
    assert path.name == "plan.json" and "+" not in str(path) and ":" not in path.parent.name
    loaded, d2 = plans.load(tmp_path, "dag", "manual__2026-01-01T00:00:00+00:00")
    assert loaded == PLAN and d2 == d and d.startswith("sha256:") and len(d) == 7 + 64
    edited = dict(PLAN, changes=[{"target": "t-0", "before": 1, "after": 3}])
    path.write_text(json.dumps(edited))
    assert plans.load(tmp_path, "dag", "manual__2026-01-01T00:00:00+00:00")[1] != d


def test_plan_errors(tmp_path):
    with pytest.raises(plans.PlanError, match="missing rollback"):
        plans.validate({k: v for k, v in PLAN.items() if k != "rollback"})
    with pytest.raises(plans.PlanError, match="no stored plan"):
        plans.load(tmp_path, "dag", "run")


def test_lock_is_exclusive_reentrant_and_released_only_by_its_owner(tmp_path):
    a, b = ClusterLock(tmp_path, "lab"), ClusterLock(tmp_path, "lab")
    a.acquire("dag/run1", "dag", "run1")
    a.acquire("dag/run1", "dag", "run1")  # a retried task of the same run
    with pytest.raises(ClusterLocked, match="locked by another destructive runbook: DAG 'dag' run 'run1'"):
        b.acquire("dag/run2", "dag", "run2")
    assert b.release("dag/run2") is False and a.holder()["run_id"] == "run1"
    assert a.release("dag/run1") is True and a.holder() is None
    b.acquire("dag/run2")
    assert ClusterLock(tmp_path, "other").holder() is None  # per cluster


@pytest.mark.parametrize("text, target", [
    ("earliest", Target("earliest")), ("LATEST", Target("latest")), ("offset 42", Target("offset", 42)),
    (" skip 1 ", Target("skip", 1)), ("restore", None), ("shift -5", Target("shift", -5)),
    ("shift +3", Target("shift", 3)),
    ("datetime 2026-11-29T10:00:00Z", Target("datetime", 1795946400000, text="2026-11-29T10:00:00Z")),
    ("datetime 2026-11-29T10:00:00", Target("datetime", 1795946400000, text="2026-11-29T10:00:00")),  # UTC
    ("datetime 2026-11-29T11:00:00+01:00", Target("datetime", 1795946400000, text="2026-11-29T11:00:00+01:00")),
    ("duration 2h", Target("duration", 7_200_000, text="2h")),
    ("duration PT1H30M", Target("duration", 5_400_000, text="PT1H30M")),
    ("duration P1DT2H", Target("duration", 93_600_000, text="P1DT2H")),
])
def test_parse_target(text, target):
    if target is None:
        assert parse_target(text, {"0": "5", 1: 7}) == Target("restore", offsets={0: 5, 1: 7})
    else:
        assert parse_target(text) == target


@pytest.mark.parametrize("text, message", [
    ("skip 0", "positive"), ("skip -1", "positive"), ("offset -3", "cannot be negative"), ("middle", "is not one of"),
    ("restore", "needs the offsets param"), ("", "is not one of"), ("offset 1; rm -rf /", "is not one of"),
    ("shift 0", "other than 0"), ("datetime yesterday", "not an ISO 8601 time"),
    ("duration soon", "not a duration"), ("duration P", "not a duration"), ("duration 0s", "longer than zero"),
])
def test_parse_target_errors(text, message):
    with pytest.raises(ResetError, match=message):
        parse_target(text)


def test_partitions_and_new_offsets():
    assert parse_partitions("all") is None and parse_partitions(None) is None and parse_partitions("") is None
    assert parse_partitions("2, 0,2") == [0, 2] and parse_partitions([1]) == [1]
    with pytest.raises(ResetError, match="partition numbers"):
        parse_partitions("zero")
    assert new_offset(Target("skip", 1), 0, 41, 0, 100) == 42
    assert new_offset(Target("earliest"), 0, 41, 5, 100) == 5
    assert new_offset(Target("latest"), 0, None, 5, 100) == 100
    with pytest.raises(ResetError, match="no committed offset to skip"):
        new_offset(Target("skip", 1), 0, None, 0, 100)
    with pytest.raises(ResetError, match=r"outside the log \[5, 100\]"):
        new_offset(Target("offset", 3), 0, 10, 5, 100)
    # shift: kept within the log, as kafka-consumer-groups --shift-by does
    assert new_offset(Target("shift", -5), 0, 41, 0, 100) == 36
    assert new_offset(Target("shift", -50), 0, 41, 10, 100) == 10
    assert new_offset(Target("shift", 80), 0, 41, 0, 100) == 100
    with pytest.raises(ResetError, match="no committed offset to shift"):
        new_offset(Target("shift", 1), 0, None, 0, 100)
    # datetime / duration: the first record at or after the time; none that new: the log end
    at = Target("datetime", 1795946400000, text="2026-11-29T10:00:00Z")
    assert new_offset(at, 0, 41, 0, 100, 57) == 57
    assert new_offset(at, 0, 41, 0, 100, None) == 100
    assert new_offset(Target("duration", 1000, text="1s"), 0, None, 20, 100, 3) == 20  # before a moved log start


def test_audit_records_and_cli_rollback(tmp_path, capsys):
    from fleetctl.cli import main

    root = DataRoot(tmp_path)
    conf = {"cluster": "lab", "group": "g; x", "topic": "t", "target": "restore", "offsets": {"0": 3}, "dry_run": True}
    audit.record(root, cluster="lab", dag_id="runbook_stuck_reset", run_id="r1", action="reset_offsets",
                 event="planned", digest="sha256:1", message="plan")
    rec = audit.record(root, cluster="lab", dag_id="runbook_stuck_reset", run_id="r1", action="reset_offsets",
                       event="executed", actor="alice", digest="sha256:1", message="done",
                       details={"rollback": {"dag_id": "runbook_stuck_reset", "conf": conf}})
    with pytest.raises(ValueError, match="unknown audit event"):
        audit.record(root, cluster="lab", dag_id="d", run_id="r", action="a", event="exploded")
    assert [r["event"] for r in audit.records(root, "lab", "r1")] == ["planned", "executed"]

    assert main(["audit", "list", "--data-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "executed" in out and "by alice" in out

    assert main(["audit", "rollback", rec["record_id"], "--print-only", "--data-root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    printed = json.loads(out.split(" conf ", 1)[1])
    # the data root only finds the record: the rollback run uses its deployment's; who asks is the
    # Airflow user that triggers it, never a name in the conf
    assert printed == dict(conf, dry_run=True)
    with pytest.raises(SystemExit):  # a free-form requester is no longer taken
        main(["audit", "rollback", rec["record_id"], "--print-only", "--requested-by", "bob"])
    first = audit.records(root, "lab", "r1")[0]["record_id"]
    assert main(["audit", "rollback", first, "--print-only", "--data-root", str(tmp_path)]) == 2


def test_a_record_the_toolkit_did_not_sign_plans_no_rollback(tmp_path, capsys):
    """A row written into the data root by hand (no hash and key, or a hash made without the key)
    with a rollback conf is shown by `audit list` but plans nothing: neither `audit rollback` nor the
    group-id rollback plan takes it."""
    import datetime as dt

    from fleetkit.core.datasets import write_collection
    from fleetctl.cli import main

    root = DataRoot(tmp_path)
    audit.record(root, cluster="lab", dag_id="runbook_stuck_reset", run_id="r0", action="reset_offsets",
                 event="planned", digest="sha256:1", message="a real chain")
    conf = {"cluster": "lab", "group": "victim", "topic": "t", "target": "earliest", "dry_run": False}
    now = dt.datetime.now(dt.timezone.utc)
    for i, (key_id, hashed) in enumerate(((None, False), (None, True))):
        forged = {"cluster": "lab", "observed_at": now, "record_id": f"{i}" * 32, "dag_id": "runbook_stuck_reset",
                  "run_id": "r9", "action": "reset_offsets", "event": "executed", "actor": "alice",
                  "digest": "sha256:1", "message": "forged",
                  "details": json.dumps({"rollback": {"dag_id": "runbook_stuck_reset", "conf": conf}}),
                  "key_id": key_id, "prev_hash": audit.GENESIS if hashed else None}
        forged["hash"] = audit.record_hash(forged) if hashed else None
        write_collection(root, "lab", now, {"audit": [forged]})
        assert main(["audit", "rollback", forged["record_id"], "--print-only", "--data-root", str(tmp_path)]) == 2
        assert "is not signed with the audit key" in capsys.readouterr().err
    assert len([r for r in audit.records(root, "lab") if r["run_id"] == "r9"]) == 2  # shown, never trusted

    from fleetkit.core.action import ClusterContext
    from fleetkit.core.errors import FleetError
    from fleetkit.group_ids.plan import ACTION, rollback_plan

    for i in range(2):
        forged = {"cluster": "lab", "observed_at": now, "record_id": f"g{i}".ljust(32, "0"), "dag_id": "d",
                  "run_id": "r8", "action": ACTION, "event": "executed", "actor": "alice", "digest": None,
                  "message": "forged", "key_id": None, "prev_hash": audit.GENESIS if i else None,
                  "details": json.dumps({"result": {"changed_paths": [
                      {"seq": 0, "op": "delete", "path": "/client_group_id/10.0.0.1-x", "before": "g"}]}})}
        forged["hash"] = audit.record_hash(forged) if i else None
        write_collection(root, "lab", now, {"audit": [forged]})
    ctx = ClusterContext(cluster=type("C", (), {"name": "lab"})(), kafka=None, zk=None)
    with pytest.raises(FleetError, match="no executed, failed or interrupted"):
        rollback_plan(ctx, {"rollback_run": "r8"}, str(tmp_path))


def test_a_storm_rollback_needs_the_topology_deactivated_again(tmp_path, capsys):
    """Without --topology-deactivated the CLI triggers nothing (the plan would refuse it anyway);
    the flag on a rollback of another store is an error naming the record's source."""
    from fleetctl.cli import main

    root = DataRoot(tmp_path)
    storm = {"cluster": "lab", "source": "storm", "group": "spout", "topic": "t", "target": "restore",
             "offsets": {"0": 3}, "topology_deactivated": False, "dry_run": True}
    rec = audit.record(root, cluster="lab", dag_id="runbook_stuck_reset", run_id="r1", action="reset_offsets",
                       event="executed", actor="alice", digest="sha256:1", message="done",
                       details={"rollback": {"dag_id": "runbook_stuck_reset", "conf": storm}})
    capsys.readouterr()
    assert main(["audit", "rollback", rec["record_id"], "--execute", "--data-root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: a Storm spout's offsets are rolled back only with the topology deactivated")
    assert "--topology-deactivated" in err and "triggered" not in err
    kafka = audit.record(root, cluster="lab", dag_id="runbook_stuck_reset", run_id="r2", action="reset_offsets",
                         event="executed", actor="alice", digest="sha256:2", message="done",
                         details={"rollback": {"dag_id": "runbook_stuck_reset",
                                               "conf": dict(storm, source="kafka")}})
    assert main(["audit", "rollback", kafka["record_id"], "--topology-deactivated", "--data-root", str(tmp_path)]) == 2
    assert "is a reset_offsets of source kafka" in capsys.readouterr().err


# -- who may approve ---------------------------------------------------------------------------
def test_requesters_are_the_named_one_and_the_triggering_user():
    from fleetkit.core.runbook import requesters

    assert requesters({"requested_by": "alice"}, "admin") == ("alice", "admin")
    assert requesters({"requested_by": " alice "}, "alice") == ("alice",)
    assert requesters({}, "admin") == ("admin",) and requesters(None, "admin") == ("admin",)
    assert requesters({"requested_by": "alice"}, None) == ("alice",)
    assert requesters({}, None) == () and requesters(None, "") == ()  # asset-triggered, scheduled parent
    for bad in ("", "  ", ["alice"], 3):
        with pytest.raises(FleetError, match="conf key 'requested_by' must be a user name"):
            requesters({"requested_by": bad}, "admin")


HOSTILE = "x'; $(rm -rf /) {{ 7*7 }} ü\n"


@pytest.mark.parametrize("approver, requested, problem", [
    ("bob", ("alice",), None),
    ("bob", (), None),                                   # nobody asked: any listed approver
    ("alice", ("alice",), "self-approval: 'alice' requested this run"),
    ("alice", ("carol", "alice"), "self-approval: 'alice' requested this run"),
    ("mallory", ("alice",), "'mallory' is not an approver of cluster 'lab' (f.yaml: clusters[lab].approvers: alice, bob)"),
    (HOSTILE, (), "is not an approver"),
    (None, (), "names no approver"), ("", ("alice",), "names no approver"),
])
def test_approver_problem(approver, requested, problem):
    from fleetkit.core.runbook import approver_problem

    got = approver_problem(approver, ("alice", "bob"), requested, "lab", "f.yaml")
    assert (got is None) if problem is None else (problem in got)


def test_eligible_approvers_leave_out_the_requesters():
    from fleetkit.core.runbook import eligible_approvers

    assert eligible_approvers(("alice", "bob", "carol"), ("bob", "dag_test")) == ["alice", "carol"]
    assert eligible_approvers(("alice",), ("alice",)) == []


def test_no_approvers_names_file_cluster_and_field(tmp_path):
    from fleetkit.core.fleet import load_fleet

    from fleetkit.core.runbook import require_approvers

    path = tmp_path / "fleet.yaml"
    path.write_text("version: 1\nclusters:\n  - {name: lab, kafka_conn_id: k}\n  - {name: two, kafka_conn_id: k, approvers: [a]}\n")
    fleet = load_fleet(path)
    with pytest.raises(FleetConfigError) as e:
        require_approvers(fleet.cluster("lab"), str(path))
    msg = str(e.value)
    assert msg.startswith(f"{path}: clusters[lab].approvers:") and "'approvers'" in msg
    assert "required for destructive runbooks" in msg
    assert require_approvers(fleet.cluster("two"), str(path)) == ("a",)


def test_the_conf_may_not_name_deployment_settings():
    from fleet_airflow.settings import deployment_keys_in

    assert deployment_keys_in({"cluster": "lab", "dry_run": False}) is None and deployment_keys_in(None) is None
    msg = deployment_keys_in({"fleet_file": "/tmp/mine.yaml", "data_root": "/tmp/x"})
    assert "'fleet_file', 'data_root'" in msg and "FLEET_FILE" in msg and "FLEET_DATA_ROOT" in msg


def test_runbook_params_hold_no_deployment_settings():
    from fleet_airflow.gate import runbook_dag_args

    args = runbook_dag_args("d", "desc", "doc", {})
    assert set(args["params"]) == {"cluster", "dry_run", "approval_timeout"}
    assert "Who approves" in args["doc_md"] and "fleet_settings" in args["user_defined_macros"]


def test_deployment_macros_read_the_environment_when_rendered(monkeypatch):
    from fleet_airflow import settings

    monkeypatch.setenv("FLEET_DATA_ROOT", "/srv/fleet data")
    monkeypatch.setenv("FLEET_FILE", "/etc/fleet.yaml")
    d = settings.DEPLOYMENT_MACROS["fleet_settings"]
    assert (d.data_root, d.fleet_file) == ("/srv/fleet data", "/etc/fleet.yaml")


def test_a_reset_plan_as_kafka_consumer_groups_csv_and_back(tmp_path, capsys, monkeypatch):
    """`fleetctl runbook plan ... --csv` writes kafka-consumer-groups' --export format; `runbook start
    --offsets-csv` reads it (its --from-file format, with or without the group column) as target restore."""
    import argparse

    from fleetctl.cli import main
    from fleetctl.runbook_cmds import _conf
    from fleetkit.core import plans
    from fleetkit.stuck.plan import offsets_from_csv, plan_csv

    plan = {"action": "reset_offsets", "cluster": "lab", "title": "Reset offsets of group g on orders (shift -5)",
            "created_at": "2026-11-29T10:00:00Z", "preconditions": [], "risks": [], "rollback": {},
            "changes": [{"target": "orders-0", "before": 41, "after": 36}, {"target": "orders-2", "before": 7,
                                                                              "after": 2}],
            "details": {"group": "g", "topic": "orders", "target": "shift -5", "partitions": [
                {"partition": 0, "new": 36}, {"partition": 2, "new": 2}]}}
    assert plan_csv(plan) == "orders,0,36\norders,2,2\n"
    assert offsets_from_csv(plan_csv(plan), "g", "orders") == {"0": 36, "2": 2}
    assert offsets_from_csv("g,orders,1,5\n\n", "g", "orders") == {"1": 5}
    for text, message in [("other,0,1", "topic 'other', not 'orders'"), ("h,orders,0,1", "group 'h', not 'g'"),
                          ("orders,x,1", "must be numbers"), ("orders,0,1\norders,0,2", "partition 0 given twice"),
                          ("orders,0", "2 fields"), ("", "holds no offsets"), ("orders,0,-1", "cannot be negative")]:
        with pytest.raises(ResetError, match=message):
            offsets_from_csv(text, "g", "orders")

    root = tmp_path / "data"
    monkeypatch.setenv("FLEET_DATA_ROOT", str(root))
    monkeypatch.delenv("FLEET_PLANS_DIR", raising=False)
    from fleetkit.core import settings

    plans.store(settings.plans_root(str(root)), "runbook_stuck_reset", "manual__1", plan)
    assert main(["runbook", "plan", "runbook_stuck_reset", "manual__1", "--csv"]) == 0
    exported = capsys.readouterr().out
    assert exported == "orders,0,36\norders,2,2\n"
    assert main(["runbook", "plan", "runbook_stuck_reset", "manual__1"]) == 0
    text = capsys.readouterr().out
    assert "shift -5" in text and "orders-2" in text
    assert main(["runbook", "plan", "runbook_stuck_reset", "manual__2"]) == 2  # no plan stored: bad input, named

    csv_file = tmp_path / "offsets.csv"
    csv_file.write_text(exported)
    args = argparse.Namespace(conf='{"group": "g", "topic": "orders"}', param=["cluster=lab"], cluster=None,
                              execute=False, offsets_csv=str(csv_file))
    assert _conf(args) == {"group": "g", "topic": "orders", "cluster": "lab", "target": "restore",
                           "offsets": {"0": 36, "2": 2}, "partitions": "all", "dry_run": True}

"""DAG tests: the DagBag loads cleanly; fleet_maintenance runs end to end against the lab."""

from __future__ import annotations

import json

import pytest
import yaml

from fleetkit.core.datasets import DataRoot, read_dataset
from tests.helpers import fleet_with_stopped_group, mapped_task_states

pytestmark = pytest.mark.airflow


def test_dagbag_has_no_import_errors(dagbag):
    assert dagbag.import_errors == {}
    assert "fleet_maintenance" in dagbag.dag_ids
    assert {"group_ids", "runbook_group_ids"} <= set(dagbag.dag_ids)
    for dag_id in dagbag.dag_ids:
        dag = dagbag.get_dag(dag_id)
        assert dag.doc_md and len(dag.doc_md) > 200, f"{dag_id} needs doc_md"


def test_the_fleet_pages_runbook_forms_come_from_the_dags_params(dagbag):
    """The page reads each runbook's Params (the serialized DAG's in the api-server): every field it
    shows is a param of the DAG, typed and described there."""
    from fleetkit.fleetview import RUNBOOK_FORMS, form_fields

    forms = {}
    for dag_id in RUNBOOK_FORMS:
        params = dagbag.get_dag(dag_id).params
        forms[dag_id] = {f.name: f for f in form_fields(dag_id, {
            n: {**params.get_param(n).schema, "description": params.get_param(n).description} for n in params})}
        undescribed = [n for n in RUNBOOK_FORMS[dag_id] if not params.get_param(n).description]
        assert undescribed == [], f"{dag_id}: params the form shows without a description: {undescribed}"
    stuck, reset = forms["runbook_stuck_skip"], forms["runbook_stuck_reset"]
    assert [(f.kind, f.minimum) for f in (stuck["partition"], stuck["skip"], stuck["dry_run"])] == [
        ("integer", 0), ("integer", 1), ("boolean", None)]
    assert (reset["partitions"].kind, reset["source"].kind, reset["cluster"].help) == (
        "string", "string", "cluster name from the fleet file")

def test_each_renamed_dag_is_kept_under_its_old_id_as_a_deprecated_alias(tmp_path, airflow_db):
    """A deployment upgraded from the release before the renames (its dags folder holds the old
    ids' loaders): `fleetctl deploy dags` keeps them and adds the new ids, and each old id is bagged
    from its own loader with the new one's tasks and params, tagged deprecated, never scheduled,
    saying what it was renamed to."""
    from airflow.dag_processing.dagbag import DagBag

    from fleet_airflow import dag_files
    from fleet_airflow.dag_files import RENAMED

    folder = tmp_path / "dags"
    folder.mkdir()
    for old in RENAMED:
        (folder / f"{old}.py").write_text(dag_files.loader_text(old))
    actions = {o.path.stem: o.action for o in dag_files.install(folder)}
    assert {actions[old] for old in RENAMED} == {"unchanged"} and {actions[new] for new in RENAMED.values()} == {
        "written"}
    dagbag = DagBag(dag_folder=str(folder))
    assert dagbag.import_errors == {}
    for old, new in RENAMED.items():
        alias, current = dagbag.get_dag(old), dagbag.get_dag(new)
        assert alias is not None and current is not None, old
        assert sorted(alias.task_ids) == sorted(current.task_ids) and set(alias.params) == set(current.params), old
        assert "deprecated" in alias.tags and "deprecated" not in current.tags, old
        assert type(alias.timetable).__name__ == "NullTimetable", old  # never scheduled
        note = f"renamed to {new}; this id is kept for one release and will be removed"
        assert note in alias.description and note in alias.doc_md, old
        assert alias.fileloc.endswith(f"/{old}.py") and current.fileloc.endswith(f"/{new}.py"), old



def test_fleet_maintenance_schedule(dagbag):
    """The deployment's collection interval is the schedule (the tests' deployment collects hourly;
    the 5 min default and other intervals: tests/unit/test_deployment_settings.py)."""
    import os

    assert os.environ["FLEET_COLLECTION_INTERVAL"] == "1h"
    dag = dagbag.get_dag("fleet_maintenance")
    assert dag.schedule == "0 * * * *"
    assert dag.catchup is False


def test_group_ids_schedule(dagbag):
    dag = dagbag.get_dag("group_ids")
    assert dag.schedule == "@hourly" and dag.catchup is False
    runbook = dagbag.get_dag("runbook_group_ids")
    assert runbook.schedule is None and runbook.params["dry_run"] is True



SCHEDULED = ["fleet_maintenance", "ownership", "group_ids"]


@pytest.mark.parametrize("dag_id", SCHEDULED)
def test_the_fleet_file_and_the_data_root_are_no_params(dagbag, dag_id):
    """Deployment settings on every DAG: the trigger form offers neither, templates read them from
    the deployment (``{{ fleet_settings.* }}``) and no template or task reads them from params."""
    dag = dagbag.get_dag(dag_id)
    assert not {"fleet_file", "data_root"} & set(dag.params), sorted(dag.params)
    assert "fleet_settings" in (dag.user_defined_macros or {})
    for task in dag.tasks:
        fields = " ".join(str(getattr(task, f, "")) for f in task.template_fields)
        fields += " ".join(str(v) for v in getattr(task, "partial_kwargs", {}).values())
        assert "params.fleet_file" not in fields and "params.data_root" not in fields, task.task_id
    assert "`fleet_file`, `data_root`" not in dag.doc_md and "`FLEET_DATA_ROOT`" in dag.doc_md


@pytest.mark.parametrize("dag_id", SCHEDULED)
@pytest.mark.parametrize("key", ["fleet_file", "data_root"])
def test_a_run_whose_conf_names_a_deployment_setting_is_refused(dagbag, dag_id, key, tmp_path, monkeypatch,
                                                                 capfd):
    """Airflow accepts conf keys that are not params: such a run fails in every task that starts
    (the first one, and the analyses that run after a failed upstream), saying why, and nothing
    is read or written, neither where the conf points nor in the deployment's data root."""
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    monkeypatch.setenv("FLEET_FILE", str(tmp_path / "no-fleet.yaml"))  # never read either
    value = str(elsewhere) if key == "data_root" else str(elsewhere / "fleet.yaml")
    dr = dagbag.get_dag(dag_id).test(run_conf={key: value})
    states = mapped_task_states(dr)
    assert dr.state == "failed" and "success" not in states.values(), states
    first = "which_clusters" if dag_id == "ownership" else "list_clusters"
    assert states[(first, -1)] == "failed", states
    out, err = capfd.readouterr()
    assert f"REFUSED, nothing read or written: the run conf names '{key}'" in out + err
    assert "FLEET_DATA_ROOT" in out + err
    assert not elsewhere.exists()
    # (the reports web app, a plugin loaded with Airflow, creates <data root>/reports empty)
    assert not [p for p in data.rglob("*") if not p.is_dir()], sorted(data.rglob("*"))


def test_the_trim_runbook_refuses_such_a_conf_before_it_collects(dagbag, tmp_path, monkeypatch, capfd):
    """The trim runbook collects and analyses before the gate's plan (which refuses and audits such
    a run): those tasks refuse too, before reading or writing anything."""
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))
    dr = dagbag.get_dag("runbook_trim").test(run_conf={"cluster": "labtest", "data_root": str(elsewhere)})
    states = mapped_task_states(dr)
    assert dr.state == "failed" and "success" not in states.values(), states
    assert states[("collect_offsets", -1)] == "failed", states
    out, err = capfd.readouterr()
    assert "REFUSED, nothing read or written: the run conf names 'data_root'" in out + err
    assert not elsewhere.exists()
    assert not [p for p in data.rglob("*") if p.is_file() and "audit" not in p.parts], sorted(data.rglob("*"))


def test_fleet_maintenance_end_to_end(dagbag, lab, tmp_path, unique, monkeypatch):
    topic, group = unique("dagtopic"), unique("dag-group")
    fleet_file = fleet_with_stopped_group(lab, tmp_path, topic, group)
    data = tmp_path / "data"
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))  # deployment settings, not params
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))

    dag = dagbag.get_dag("fleet_maintenance")
    dr = dag.test(run_conf={"offsets_health": "always"})
    assert dr.state == "success", mapped_task_states(dr)
    assert mapped_task_states(dr) == {("list_clusters", -1): "success", ("collect", 0): "success",
                           ("analyse_stuck", -1): "success", ("report_stuck", -1): "success",
                           ("collect_offsets", 0): "success", ("health_due", -1): "success",
                           ("trim_health", -1): "success",
                           ("report_offsets", -1): "success", ("all_clusters_collected", -1): "success"}
    # the offsets pipeline saw this group's commits in __consumer_offsets and judged every replica
    recs = [r for r in read_dataset(DataRoot(data), "offsets_topic_records").to_pylist() if r["group"] == group]
    assert sorted((r["topic_partition"], r["committed_offset"]) for r in recs if r["key_version"] == 1) == [(0, 6), (2, 0)]
    out = next((data / "reports" / "offsets").iterdir())
    health = [json.loads(x) for x in (out / "health.jsonl").read_text().splitlines()]
    assert len(health) == 150 and {h["verdict"] for h in health} == {"HEALTHY"}  # 50 partitions x 3 replicas
    assert "No plan: every partition is healthy." in (out / "offsets_health.md").read_text()
    assert json.loads((out / "trim_plan.json").read_text()) is not None  # written by trim_health --trim-plan
    rows = [r for r in read_dataset(DataRoot(data), "offsets_snapshots").to_pylist() if r["group"] == group]
    assert sorted((r["partition"], r["committed_offset"], r["log_end_offset"]) for r in rows) == [(0, 6, 6), (2, 0, 1)]


def test_an_unreachable_cluster_fails_only_its_own_task(dagbag, lab, tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("AIRFLOW_CONN_DOWN_KAFKA",
                       json.dumps({"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:9",
                                                                   "socket.connection.setup.timeout.ms": 2000}}))
    fleet = lab.own_fleet()
    fleet["clusters"].append({"name": "down", "kafka_version": "0.9.0.1", "kafka_conn_id": "down_kafka"})
    fleet_file = tmp_path / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump(fleet))
    data = tmp_path / "data"
    monkeypatch.setenv("FLEET_FILE", str(fleet_file))
    monkeypatch.setenv("FLEET_DATA_ROOT", str(data))

    dag = dagbag.get_dag("fleet_maintenance")
    dr = dag.test(run_conf={"offsets_health": "never"})
    states = mapped_task_states(dr)
    assert states[("collect", 0)] == "success"   # labtest
    assert states[("collect", 1)] == "failed"    # down
    assert states[("analyse_stuck", -1)] == "success"  # the analysis still runs on what was collected
    assert states[("report_stuck", -1)] == "success"
    assert states[("all_clusters_collected", -1)] == "upstream_failed"
    assert dr.state == "failed"
    root = DataRoot(data)
    assert root.files("offsets_snapshots", "labtest") and not root.files("offsets_snapshots", "down")
    # the task's failure names the cluster and its bootstrap servers (dag.test logs in-process)
    out, err = capfd.readouterr()
    assert "cluster 'down' (bootstrap servers 127.0.0.1:9) did not answer" in out + err

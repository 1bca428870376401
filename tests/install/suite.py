"""The checks every supported Airflow passes with the toolkit installed from its wheel (imported by
test_install_<version>.py, whose `deployment` fixture is that Airflow's deployment).

Order matters: the last test restarts the api-server without FLEET_FILE."""

from __future__ import annotations

import json
import time
import urllib.parse
from pathlib import Path

import yaml

from fleetlab.traffic import commit, produce, wait_topic

from tests.alert_standins import PagerDutyProxy, Receiver
from tests.install import installed
from tests.helpers import committed_offsets

DAGS = sorted(["fleet_maintenance", "group_ids", "ownership", "runbook_group_ids", "runbook_ownership",
               "runbook_stuck_reset", "runbook_stuck_skip", "runbook_trim"])
RUNBOOKS = [d for d in DAGS if d.startswith("runbook_")]

DAGBAG = """
import json
try:
    from airflow.dag_processing.dagbag import DagBag  # Airflow 3.2+
except ImportError:
    from airflow.models.dagbag import DagBag
bag = DagBag(dag_folder={folder!r})  # AIRFLOW__CORE__LOAD_EXAMPLES=False
print(json.dumps({{"dags": sorted(bag.dags), "errors": {{k: v.strip().splitlines()[-1] for k, v in bag.import_errors.items()}},
                  "filelocs": sorted({{d.fileloc for d in bag.dags.values()}})}}))
"""


def _dagbag(deployment, env=None) -> dict:
    out = deployment.python(DAGBAG.format(folder=str(deployment.home / "dags")), env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_installed_from_site_packages_with_nothing_of_the_checkout(deployment):
    out = deployment.python(
        "import json, sys, importlib, importlib.metadata as md\n"
        "mods = {m: importlib.import_module(m).__file__ for m in "
        "('fleetkit', 'fleet_airflow', 'fleet_spark_jobs', 'fleet_dags', 'fleetctl')}\n"
        "from fleetkit.core.render import environment\n"
        "try:\n    importlib.import_module('fleetlab'); lab = True\nexcept ImportError:\n    lab = False\n"
        "print(json.dumps({'mods': mods, 'path': sys.path, 'templates': environment().list_templates(), "
        "'lab': lab, 'version': md.version('kafka-fleet-toolkit'), 'airflow': md.version('apache-airflow')}))")
    doc = json.loads(out.stdout.strip().splitlines()[-1])
    print(doc)
    site = str(deployment.venv)
    assert all(f.startswith(site) for f in doc["mods"].values()), doc["mods"]
    assert not [p for p in doc["path"] if p.startswith(str(installed.REPO))], doc["path"]
    assert "plan.md.j2" in doc["templates"] and "fleet_page.html.j2" in doc["templates"]
    assert doc["lab"] is False  # the lab is not part of what a team installs
    assert doc["airflow"] == installed.AIRFLOW[deployment.key][0]


def test_the_dagbag_has_no_import_errors(deployment):
    bag = _dagbag(deployment)
    assert bag["errors"] == {}
    assert bag["dags"] == DAGS
    # each DAG is the loader fleetctl deploy dags wrote, in the deployment's own dags folder
    assert bag["filelocs"] == sorted(str(deployment.home / "dags" / f"{d}.py") for d in DAGS)


def test_airflow_sees_the_provider_and_the_plugin(deployment):
    providers = json.loads(deployment.run("airflow", "providers", "list", "-o", "json").stdout)
    assert "kafka-fleet-toolkit" in {p["package_name"] for p in providers}
    hooks = deployment.run("airflow", "providers", "hooks", "-o", "json").stdout
    assert "fleet_airflow.hooks.zookeeper.ZooKeeperHook" in hooks
    triggers = deployment.run("airflow", "providers", "triggers", "-o", "json").stdout
    assert "fleet_airflow.triggers.leader_change" in triggers
    plugins = deployment.run("airflow", "plugins", "-o", "json").stdout
    assert "kafka_fleet_toolkit" in plugins


def test_the_plugins_pages_and_metrics_load(deployment):
    token = deployment.token("admin")
    status, body = deployment.get("/fleet/", token)
    assert status == 200 and "labtest" in body, body[:2000]
    status, body = deployment.get("/fleet/metrics", token)
    assert status == 200 and "fleet_cluster" in body, body[:2000]
    assert deployment.get("/fleet/", None)[0] == 401  # behind the api-server's own login
    status, _ = deployment.get("/fleet-reports/", token)
    assert status in (200, 404)  # served (an empty reports folder has no index), never an error


def test_fleetctl_help_runbook_list_and_deploy_check(deployment):
    assert "runbook" in deployment.run("fleetctl", "--help").stdout
    env = dict(deployment.env, FLEET_AIRFLOW_URL=deployment.url, FLEET_AIRFLOW_USER="admin",
               FLEET_AIRFLOW_PASSWORD=deployment.passwords["admin"])
    out = deployment.run("fleetctl", "runbook", "list", env=env)
    print(out.stdout)
    assert all(r in out.stdout for r in RUNBOOKS)
    listed = json.loads(deployment.run("fleetctl", "runbook", "list", "--json", env=env).stdout)
    assert sorted(r["dag_id"] for r in listed) == RUNBOOKS
    assert all("cluster" in r["params"] and r["params"]["dry_run"] is True for r in listed)
    check = deployment.run("fleetctl", "deploy", "check")
    assert "fleet file: 1 cluster(s): labtest" in check.stdout and "audit key: set" in check.stdout


def _run_state(deployment, dag_id: str) -> tuple[str, str]:
    token = deployment.token("admin")
    status, body = deployment.get(f"/api/v2/dags/{dag_id}/dagRuns?order_by=-run_after&limit=1", token)
    assert status == 200, body
    run = json.loads(body)["dag_runs"][0]
    return run["dag_run_id"], run["state"]


def test_fleet_maintenance_runs_once_against_the_lab(deployment, lab, unique):
    topic, group = unique("dist-maint"), unique("dist-maint-group")  # a fleet has consumers
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 5, 1: 5, 2: 5})
    commit(lab.bootstrap, group, {(topic, 0): 2, (topic, 1): 5, (topic, 2): 0})
    out = deployment.run("airflow", "dags", "test", "fleet_maintenance", "-c",
                         json.dumps({"window": "2m", "offsets_health": "always"}), timeout=1200)
    run_id, state = _run_state(deployment, "fleet_maintenance")
    print(out.stdout[-3000:], out.stderr[-3000:])
    assert state == "success", (run_id, out.stdout[-3000:], out.stderr[-3000:])
    data = deployment.root / "data"
    assert list((data / "offsets_snapshots").rglob("*.parquet")), "no snapshot written"
    assert list((data / "reports" / "stuck").rglob("report.html")), "no stuck report"
    assert list((data / "reports" / "offsets").rglob("*.md")), "no offsets health report"
    # nothing it wrote names the checkout's code or environment
    assert installed.files_naming([data, deployment.home], installed.CHECKOUT_CODE) == []


def test_the_approval_gate_works_on_this_airflow(deployment, lab, unique):
    """A real reset through runbook_stuck_reset under this Airflow's own scheduler and triggerer:
    started with `fleetctl runbook start --execute` as admin (the requester), it waits for an
    approval; approver (not the requester) approves it through the REST API; the offsets move as
    planned. (Airflow 3.1's `dags test` cannot run an approval task: its in-process trigger finds no
    response record and fails, so the real components run it, as in production.) The approvers are
    told through this Airflow's Slack and PagerDuty providers (stand-ins on 127.0.0.1: a receiver as
    the webhook, an HTTPS proxy as events.pagerduty.com; tests/alert_standins.py), with the link."""
    topic, group = unique("dist-reset"), unique("dist-group")
    wait_topic(lab.bootstrap, topic)
    produce(lab.bootstrap, topic, {0: 10, 1: 10, 2: 10})
    commit(lab.bootstrap, group, {(topic, 0): 3, (topic, 1): 5, (topic, 2): 10})
    env = dict(deployment.env, FLEET_AIRFLOW_URL=deployment.url, FLEET_AIRFLOW_USER="admin",
               FLEET_AIRFLOW_PASSWORD=deployment.passwords["admin"])
    fleet_file = Path(deployment.env["FLEET_FILE"])
    fleet_text = fleet_file.read_text()
    saved_env = dict(deployment.env)
    slack, pagerduty = Receiver().start(), PagerDutyProxy(deployment.root / "alert-pki").start()
    doc = yaml.safe_load(fleet_text)
    doc["alerts"] = {"slack_webhook_conn_id": "notice_slack", "pagerduty_conn_id": "notice_pagerduty"}
    fleet_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    deployment.env.update({**pagerduty.env(), "AIRFLOW_CONN_NOTICE_SLACK": json.dumps(
        {"conn_type": "slackwebhook", "password": slack.url("/services/T0/B0/installSecret")}),
        "AIRFLOW_CONN_NOTICE_PAGERDUTY": json.dumps({"conn_type": "pagerduty_events", "password": "installRoutingKey"})})
    deployment.start_scheduler()
    try:
        out = deployment.run("fleetctl", "runbook", "start", "runbook_stuck_reset", "--cluster", "labtest",
                             "--param", f"group={group}", "--param", f"topic={topic}", "--param", "partitions=0,1",
                             "--param", "target=skip 1", "--execute", "--unpause", env=env)
        print(out.stdout)
        run_id = out.stdout.split("as admin: ", 1)[1].split()[0]
        token = deployment.token("approver")
        base = f"/api/v2/dags/runbook_stuck_reset/dagRuns/{urllib.parse.quote(run_id, safe='')}"
        pending = _wait(lambda: json.loads(deployment.get(f"{base}/hitlDetails?response_received=false",
                                                          token)[1]).get("hitl_details"), 600, "an approval")
        assert [u["id"] for u in pending[0]["assigned_users"]] == ["approver"]  # never the requester
        _settle(deployment, token, base, run_id)
        status, body = deployment.get(f"{base}/taskInstances/approve/-1/hitlDetails", token, method="PATCH",
                                      body={"chosen_options": ["Approve"], "params_input": {}})
        assert status == 200, body
        state = _wait(lambda: (lambda st: st if st in ("success", "failed") else None)(
            json.loads(deployment.get(base, token)[1])["state"]), 600, "the run to end")
        status_out = deployment.run("fleetctl", "runbook", "status", "runbook_stuck_reset", run_id, env=env,
                                    check=False)
        print(status_out.stdout)
        assert state == "success", status_out.stdout
    finally:
        deployment.stop_components()
        deployment.env.clear()
        deployment.env.update(saved_env)
        fleet_file.write_text(fleet_text)
        slack.stop()
        pagerduty.stop()
    assert committed_offsets(lab.bootstrap, group, topic) == {0: 4, 1: 6, 2: 10}
    link = f"{deployment.url}/dags/runbook_stuck_reset/runs/{urllib.parse.quote(run_id, safe='')}/tasks/approve/required_actions"
    (post,) = slack.requests
    assert post["json"]["text"].endswith(f"\n<{link}|Approve or reject in Airflow>"), post["json"]["text"]
    (event,) = pagerduty.events()
    assert event["routing_key"] == "installRoutingKey" and event["links"][0]["href"] == link


def _wait(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = fn()
        if got:
            return got
        time.sleep(2)
    raise AssertionError(f"{what} did not come in {timeout:.0f}s")


def _settle(deployment, token, base: str, run_id: str) -> None:
    """An approver answers once the approval task is parked and the scheduler has processed the
    executor event of the run that parked it (tests/ui/approvals.py says why)."""
    _wait(lambda: json.loads(deployment.get(f"{base}/taskInstances/approve", token)[1]).get("state")
          in ("deferred", "awaiting_input"), 120, "the approval task to park")
    log = deployment.home / "logs" / "scheduler.out"
    event = f"task_id='approve', run_id='{run_id}', try_number=1"
    _wait(lambda: any("Received executor event" in line and event in line
                      for line in log.read_text(errors="replace").splitlines()), 120,
          "the scheduler to process the parking run's executor event")
    time.sleep(1)


def test_without_the_fleet_file_every_entry_point_stops_with_one_line(deployment):
    env = {k: v for k, v in deployment.env.items() if k != "FLEET_FILE"}
    line = "FLEET_FILE is not set"
    bag = _dagbag(deployment, env)
    assert bag["dags"] == [] and len(bag["errors"]) == len(DAGS)
    assert all(line in e for e in bag["errors"].values()), bag["errors"]
    for argv in (["stuck", "--cluster", "labtest"], ["audit", "list"], ["deploy", "check"],
                 ["collect", "--cluster", "labtest"]):
        out = deployment.run("fleetctl", *argv, env=env, check=False)
        errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error: ")]
        print(argv, out.returncode, out.stderr[-500:])
        assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr[-3000:]
        assert len(errors) == 1 and line in errors[0], out.stderr[-3000:]
    # the plugin loads, and its pages say what is missing
    deployment.stop_api()
    deployment.start_api(env=env)
    token = deployment.token("admin")
    for path in ("/fleet/", "/fleet/metrics", "/fleet-reports/stuck/latest/report.html"):
        status, body = deployment.get(path, token)
        assert status == 503 and line in body, (path, status, body[:500])

"""The fleet's metrics where SREs look: a real Prometheus (Debian's package, on loopback at the
port plan's `prometheus` port) scrapes the real api-server's /fleet/metrics with a Bearer token from
/auth/token, loads deploy/prometheus/fleet-rules.yml, and sends the alerts to a real Alertmanager
(the plan's `alertmanager` port, unclustered): an approval waiting for two hours, and a live
consumer on the lab stuck on its record, judged STALLED by the real stuck job (tests/ui/conftest.py's
`stalled`: a group name with markup, quotes, shell characters and an emoji), whose verdict and lag
series Prometheus stores with the right labels and whose FleetGroupStalled alert reaches
Alertmanager. The rules' `for` durations are promtool's to test (fleet-rules.test.yml): here
FleetGroupStalled fires at its first evaluation. Both servers are stopped by PID (SIGTERM, then
SIGKILL after a timeout)."""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import yaml

from fleetlab import ports
from tests.helpers import wait_until

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.airflow, pytest.mark.lab, pytest.mark.spark, pytest.mark.timeout(900)]


def _get(url: str, token: str | None = None, accept: str | None = None) -> tuple[int, bytes, dict]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    if accept:
        req.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "wb")
    return subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _stop(proc: subprocess.Popen, timeout: float = 15) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture
def waiting_approval():
    """An approval record unanswered for two hours in the api-server's plans folder (removed after)."""
    from fleetkit.core.runbook import approval_path, write_approval
    from fleetkit.core.settings import data_root, plans_root

    plans = plans_root(data_root())
    run_id = f"manual__metrics-test-{os.getpid()}"
    requested = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2)).isoformat().replace("+00:00", "Z")
    path = write_approval(plans, "runbook_stuck_skip", run_id,
                          {"dag_id": "runbook_stuck_skip", "run_id": run_id, "answer": None,
                           "requested_at": requested})
    yield path
    shutil.rmtree(approval_path(plans, "runbook_stuck_skip", run_id).parent, ignore_errors=True)


@pytest.fixture
def prometheus_and_alertmanager(airflow_server, waiting_approval, tmp_path):
    for exe in ("prometheus", "prometheus-alertmanager"):
        if shutil.which(exe) is None:
            pytest.fail(f"{exe} is not installed: `make system-deps` installs it")
    plan = ports.tests()
    token = airflow_server.api_token("admin")
    api = f"127.0.0.1:{os.environ['FLEET_AIRFLOW_PORT']}"
    (tmp_path / "alertmanager.yml").write_text(
        "route: {receiver: fleet, group_wait: 1s, group_interval: 1s}\nreceivers: [{name: fleet}]\n")
    (tmp_path / "token").write_text(token)
    doc = yaml.safe_load((REPO / "deploy" / "prometheus" / "fleet-rules.yml").read_text())
    for rule in doc["groups"][0]["rules"]:
        if rule.get("alert") == "FleetGroupStalled":
            rule["for"] = "0s"  # (its 15m is tested by promtool)
    rules = tmp_path / "fleet-rules.yml"
    rules.write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "prometheus.yml").write_text(json.dumps({
        "global": {"scrape_interval": "2s", "evaluation_interval": "2s"},
        "rule_files": [str(rules)],
        "alerting": {"alertmanagers": [{"static_configs": [{"targets": [f"127.0.0.1:{plan.alertmanager}"]}]}]},
        "scrape_configs": [{"job_name": "kafka-fleet", "metrics_path": "/fleet/metrics",
                            "authorization": {"credentials_file": str(tmp_path / "token")},
                            # (a label Prometheus adds, as kubernetes_sd adds `namespace` where
                            # kafka-lag-exporter's dashboard expects it)
                            "static_configs": [{"targets": [api], "labels": {"namespace": "kafka-fleet"}}]}]}))
    am = _start(["prometheus-alertmanager", f"--config.file={tmp_path / 'alertmanager.yml'}",
                 f"--storage.path={tmp_path / 'am-data'}", f"--web.listen-address=127.0.0.1:{plan.alertmanager}",
                 "--cluster.listen-address="], tmp_path / "alertmanager.log")
    prom = _start(["prometheus", f"--config.file={tmp_path / 'prometheus.yml'}",
                   f"--storage.tsdb.path={tmp_path / 'prom-data'}", f"--web.listen-address=127.0.0.1:{plan.prometheus}"],
                  tmp_path / "prometheus.log")
    try:
        for name, port in (("Alertmanager", plan.alertmanager), ("Prometheus", plan.prometheus)):
            # both listen before they are ready: until then their API answers 503 Service Unavailable
            wait_until(lambda port=port: _get(f"http://127.0.0.1:{port}/-/ready")[0] == 200, timeout=90, interval=0.5,
                       what=f"{name} ready", retry_on=(OSError,))
        yield {"prometheus": f"http://127.0.0.1:{plan.prometheus}", "alertmanager": f"http://127.0.0.1:{plan.alertmanager}",
               "token": token, "api": f"http://{api}", "logs": tmp_path}
    finally:
        _stop(prom)
        _stop(am)


def wait_scraped(s) -> None:
    def scraped():
        up = _query(s["prometheus"], 'up{job="kafka-fleet"}')
        return up and up[0]["value"][1] == "1"
    try:
        wait_until(scraped, timeout=90, interval=1, what="Prometheus scraping /fleet/metrics",
                   retry_on=(OSError,))
    except Exception:
        print((s["logs"] / "prometheus.log").read_text()[-3000:])
        print(_get(f"{s['prometheus']}/api/v1/targets")[1][:2000])
        raise


def wait_partitions_of(s, group: str, topic: str) -> None:
    """Until Prometheus has the group's partitions: the api-server builds a newer collection's
    per-partition series off the request path, so the scrape that finds it still has the ones
    before (fleet_metrics_partitions_behind 1)."""
    def present():
        rows = _query(s["prometheus"], f'kafka_consumergroup_group_lag{{cluster_name="labtest", topic="{topic}"}}')
        return len([r for r in rows if r["metric"]["group"] == group]) == 3
    wait_until(present, timeout=90, interval=1, what="the group's partitions in Prometheus", retry_on=(OSError,))


def alerts_at(s, name: str) -> list[dict]:
    status, body, _ = _get(f"{s['alertmanager']}/api/v2/alerts")
    return [a for a in json.loads(body) if a["labels"].get("alertname") == name] if status == 200 else []


def _query(base: str, promql: str) -> list[dict]:
    status, body, _ = _get(f"{base}/api/v1/query?{urllib.parse.urlencode({'query': promql})}")
    assert status == 200, body[:500]
    return json.loads(body)["data"]["result"]


def test_prometheus_scrapes_with_a_token_and_alertmanager_gets_the_alert(prometheus_and_alertmanager):
    s = prometheus_and_alertmanager
    # the endpoint itself: no token 401, the token 200 in OpenMetrics as Prometheus asks for it
    assert _get(f"{s['api']}/fleet/metrics")[0] == 401
    status, body, headers = _get(f"{s['api']}/fleet/metrics", s["token"], "application/openmetrics-text; version=1.0.0")
    assert status == 200 and headers["content-type"].startswith("application/openmetrics-text"), body[:300]

    wait_scraped(s)
    waiting = _query(s["prometheus"], "fleet_pending_approval_oldest_age_seconds")
    assert waiting and float(waiting[0]["value"][1]) > 3600
    assert _query(s["prometheus"], 'fleet_metrics_source_up{source="approvals"}')[0]["value"][1] == "1"

    try:
        alerts = wait_until(lambda: alerts_at(s, "FleetApprovalWaiting"), timeout=90, interval=1,
                            what="FleetApprovalWaiting at Alertmanager", retry_on=(OSError,))
    except Exception:
        print((s["logs"] / "alertmanager.log").read_text()[-3000:])
        raise
    assert alerts[0]["labels"]["severity"] == "warning" and alerts[0]["status"]["state"] == "active"



def test_a_stalled_consumer_is_a_series_and_its_alert_reaches_alertmanager(stalled, prometheus_and_alertmanager):
    s, group, topic = prometheus_and_alertmanager, stalled["group"], stalled["topic"]
    wait_scraped(s)
    wait_partitions_of(s, group, topic)
    verdicts = _query(s["prometheus"], 'fleet_group_verdict{cluster_name="labtest", verdict="STALLED"} == 1')
    mine = [r["metric"] for r in verdicts if r["metric"].get("group") == group]
    assert mine and mine[0]["source"] == "kafka", [r["metric"].get("group") for r in verdicts]
    # each partition: committed 2, log end 5, nothing processed since
    lags = {r["metric"]["partition"]: r["value"][1] for r in
            _query(s["prometheus"], f'kafka_consumergroup_group_lag{{cluster_name="labtest", topic="{topic}"}}')
            if r["metric"]["group"] == group}
    assert lags == {"0": "3", "1": "3", "2": "3"}, lags
    stalled_parts = _query(s["prometheus"], f'fleet_partition_verdict{{topic="{topic}", verdict="STALLED"}}')
    assert {r["metric"]["partition"] for r in stalled_parts if r["metric"]["group"] == group}

    def fired():
        return [a for a in alerts_at(s, "FleetGroupStalled") if a["labels"].get("group") == group]
    try:
        alert = wait_until(fired, timeout=90, interval=1, what="FleetGroupStalled at Alertmanager",
                           retry_on=(OSError,))[0]
    except Exception:
        print((s["logs"] / "alertmanager.log").read_text()[-3000:])
        raise
    assert alert["labels"]["cluster_name"] == "labtest" and alert["labels"]["severity"] == "page"
    assert alert["annotations"]["summary"].endswith(" on labtest is STALLED"), alert["annotations"]


#: the queries of kafka-lag-exporter's Grafana dashboard (grafana/Kafka_Lag_Exporter_Dashboard.json in
#: its repository: every panel's target, and its template variables' label_values queries written as
#: series queries), with Grafana's variables
LAG_EXPORTER_DASHBOARD = [
    'kafka_consumergroup_group_max_lag_seconds{namespace="$namespace",cluster_name="$cluster_name",'
    'group=~"$consumer_group"}',
    'kafka_consumergroup_group_lag_seconds{namespace="$namespace",cluster_name="$cluster_name",'
    'group=~"$consumer_group"}',
    'kafka_consumergroup_group_max_lag{namespace="$namespace",cluster_name="$cluster_name",group=~"$consumer_group"}',
    'max(kafka_consumergroup_group_lag_seconds{namespace="$namespace",cluster_name="$cluster_name",'
    'group=~"$consumer_group"}) by (group)',
    'sum(kafka_consumergroup_group_offset{namespace="$namespace",cluster_name="$cluster_name",'
    'group=~"$consumer_group"})',
    'sum((kafka_consumergroup_group_offset{namespace="$namespace",cluster_name="$cluster_name",'
    'group=~"$consumer_group"} * 0)\n+ on(namespace,cluster_name,topic,partition) '
    'kafka_partition_latest_offset{namespace="$namespace",cluster_name="$cluster_name"})',
    'count by (namespace) (kafka_consumergroup_group_lag)',
    'count by (cluster_name) (kafka_consumergroup_group_lag{namespace="$namespace"})',
    'count by (group) (kafka_consumergroup_group_lag{namespace="$namespace",cluster_name="$cluster_name"})',
]
#: threshold alerts as kafka-lag-exporter's users write them (its README's metrics, by their labels)
LAG_EXPORTER_ALERTS = [
    'kafka_consumergroup_group_max_lag{cluster_name="$cluster_name"} > 2',
    'kafka_consumergroup_group_max_lag_seconds{cluster_name="$cluster_name"} >= 0',
    'kafka_consumergroup_group_lag{cluster_name="$cluster_name",topic=~"$topic"} > 0',
    'sum by (cluster_name, group, topic) (kafka_consumergroup_group_topic_sum_lag{cluster_name="$cluster_name"}) > 8',
    'kafka_consumergroup_group_sum_lag{cluster_name="$cluster_name"} > 8',
    'kafka_partition_latest_offset{cluster_name="$cluster_name",topic=~"$topic"} '
    '- on(cluster_name, topic, partition) kafka_partition_earliest_offset > 0',
]
#: KMinion's consumer-group dashboard and alerts, written from its metrics reference (docs/metrics.md
#: in its repository; its dashboards are published on grafana.com, which is not reachable here)
KMINION_QUERIES = [
    'sum(kminion_kafka_consumer_group_topic_lag{group_id=~"$consumer_group"}) by (group_id, topic_name)',
    'kminion_kafka_consumer_group_topic_partition_lag{group_id=~"$consumer_group",topic_name=~"$topic"}',
    'kminion_kafka_consumer_group_topic_offset_sum{group_id=~"$consumer_group"}',
    'kminion_kafka_consumer_group_topic_assigned_partitions{group_id=~"$consumer_group"}',
    'kminion_kafka_consumer_group_info{group_id=~"$consumer_group"}',
    'kminion_kafka_topic_partition_high_water_mark{topic_name=~"$topic"}',
    'kminion_kafka_topic_partition_low_water_mark{topic_name=~"$topic"}',
    'sum(kminion_kafka_topic_high_water_mark_sum{topic_name=~"$topic"}) by (topic_name)',
    'sum by (group_id, topic_name) (kminion_kafka_consumer_group_topic_lag{group_id=~"$consumer_group"}) > 8',
]


def _promql_string(value: str) -> str:
    """A value inside a PromQL double-quoted string."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def test_kafka_lag_exporters_and_kminions_dashboards_and_alerts_see_a_lagging_group(
        stalled, prometheus_and_alertmanager):
    """Every query of kafka-lag-exporter's dashboard, its users' threshold alerts and KMinion's
    consumer-group queries, run by a real Prometheus scraping the tests' api-server, returns the
    lagging group of the lab (a live consumer stuck with lag 3 on each of 3 partitions): what a team
    switching from either exporter keeps seeing. The group's name has markup, quotes, shell
    characters and an emoji: matched with a regex as Grafana's multi-value variables are."""
    s, group, topic = prometheus_and_alertmanager, stalled["group"], stalled["topic"]
    wait_scraped(s)
    wait_partitions_of(s, group, topic)
    values = {"$namespace": "kafka-fleet", "$cluster_name": "labtest",
              "$consumer_group": _promql_string(re.escape(group)), "$topic": _promql_string(re.escape(topic))}
    failed = []
    for query in LAG_EXPORTER_DASHBOARD + LAG_EXPORTER_ALERTS + KMINION_QUERIES:
        promql = query
        for var, v in values.items():
            promql = promql.replace(var, v)
        result = _query(s["prometheus"], promql)
        if not result:
            failed.append(query)
            continue
        labelled = [r["metric"] for r in result if "group" in r["metric"] or "group_id" in r["metric"]]
        if labelled and not [m for m in labelled if group in (m.get("group"), m.get("group_id"))]:
            failed.append(f"{query} (not the lagging group: {labelled[:3]})")
    assert failed == [], "queries with no data for the lagging group:\n" + "\n".join(failed)
    # the member holding each partition, as kafka-lag-exporter labels it
    lag = _query(s["prometheus"], f'kafka_consumergroup_group_lag{{cluster_name="labtest",topic="{topic}"}}')
    mine = [r["metric"] for r in lag if r["metric"]["group"] == group]
    assert len(mine) == 3 and all(m["client_id"] == "fleet-page-1" and m["consumer_id"].startswith("fleet-page-1")
                                  and m["member_host"] == "/127.0.0.1" for m in mine), mine
    top = _query(s["prometheus"], f'kafka_consumergroup_group_max_lag{{cluster_name="labtest",'
                                  f'group="{_promql_string(group)}"}}')
    assert [r["value"][1] for r in top] == ["3"] and top[0]["metric"]["is_simple_consumer"] == "false"

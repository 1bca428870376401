"""The cluster profile's configuration, without starting anything: ports from the port plan,
loopback everywhere, Redis without persistence, the Airflow settings of each profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetkit.core.errors import FleetError
from fleetlab import airflow_services as services
from fleetlab import ports, redis_server, spark_cluster


def test_redis_config_is_loopback_on_the_plan_port_without_persistence(tmp_path):
    spec = redis_server.RedisSpec(home=tmp_path / "redis", port=ports.tests().redis)
    lines = redis_server.config_text(spec).splitlines()
    assert "bind 127.0.0.1" in lines and f"port {ports.tests().redis}" in lines
    assert 'save ""' in lines and "appendonly no" in lines and "daemonize no" in lines
    assert f"dir {tmp_path / 'redis'}" in lines
    assert spec.url() == f"redis://127.0.0.1:{ports.tests().redis}/0"


def test_spark_daemons_bind_loopback_on_the_plan_ports(tmp_path):
    plan = ports.PortPlan(31000)
    spec = spark_cluster.SparkClusterSpec.from_plan(tmp_path, plan, workers=2)
    master = spark_cluster.argv(spec, "master")
    assert master[1] == spark_cluster.MASTER_CLASS
    assert master[master.index("--host") + 1] == "127.0.0.1"
    assert master[master.index("--port") + 1] == str(plan.spark_master) == "38077"
    assert master[master.index("--webui-port") + 1] == str(plan.spark_master_ui) == "39180"
    for i in range(2):
        worker = spark_cluster.argv(spec, f"worker-{i}")
        assert worker[1] == spark_cluster.WORKER_CLASS and worker[-1] == f"spark://127.0.0.1:{plan.spark_master}"
        assert worker[worker.index("--host") + 1] == "127.0.0.1"
        assert worker[worker.index("--port") + 1] == str(plan.spark_worker(i))
        assert worker[worker.index("--webui-port") + 1] == str(plan.spark_worker_ui(i))
        assert worker[worker.index("--cores") + 1] == "1" and worker[worker.index("--memory") + 1] == "1g"
    used = {plan.spark_master, plan.spark_master_ui, *spec.worker_ports, *spec.worker_ui_ports}
    assert len(used) == 6 and not used & {7077, 8080, 8081, 6066}
    env = spark_cluster.daemon_env(spec, {"PATH": "/usr/bin", "PYTHONPATH": "/somewhere/include"})
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1" and "PYTHONPATH" not in env


def test_jobs_on_the_cluster_run_executors_on_the_second_venv(tmp_path):
    spec = spark_cluster.SparkClusterSpec.from_plan(tmp_path, ports.PortPlan(31000))
    defaults = spark_cluster.spark_defaults(spec)
    assert defaults["spark.pyspark.python"] == str(spark_cluster.EXEC_VENV / "bin" / "python")
    assert defaults["spark.pyspark.driver.python"].endswith("/.venv/bin/python")
    assert spark_cluster.submit_env(spec) == {"SPARK_CONF_DIR": str(tmp_path / "conf")}


def test_exec_venv_versions_are_the_lock_pins(tmp_path):
    versions = spark_cluster.locked_versions()
    assert set(versions) == {"pyspark", "pandas", "pyarrow", "numpy"}
    lock = (Path(__file__).resolve().parents[2] / "requirements.lock").read_text().splitlines()
    for name, version in versions.items():
        assert f"{name}=={version}" in lock
    bad = tmp_path / "requirements.lock"
    bad.write_text("pyspark==4.2.0\n")
    with pytest.raises(FleetError, match=r"no pinned version of pandas, pyarrow, numpy"):
        spark_cluster.locked_versions(bad)


def test_profiles(monkeypatch):
    monkeypatch.delenv("FLEET_PROFILE", raising=False)
    assert services.profile() == "embedded"
    assert services.profile_env() == {"AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                                      "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "30"}
    monkeypatch.setenv("FLEET_PROFILE", "cluster")
    assert services.profile() == "cluster"
    with pytest.raises(FleetError, match=r"unknown Airflow profile 'k8s'.*embedded, cluster"):
        services.profile("k8s")

    plan = services.port_plan()
    assert plan == ports.tests()  # fleetlab.harness puts the api-server on the tests' port
    env = services.profile_env("cluster")
    assert env["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"
    assert env["AIRFLOW__CELERY__BROKER_URL"] == f"redis://127.0.0.1:{plan.redis}/0"
    assert env["AIRFLOW__CELERY__RESULT_BACKEND"].startswith("db+postgresql+psycopg2://")
    assert f"@127.0.0.1:{services.pg_spec().port}/" in env["AIRFLOW__CELERY__RESULT_BACKEND"]
    conn = json.loads(env["AIRFLOW_CONN_SPARK_DEFAULT"])
    assert (conn["host"], conn["port"]) == ("spark://127.0.0.1", plan.spark_master)
    assert env["SPARK_CONF_DIR"] == str(services.cluster_home() / "spark" / "conf")


def test_celery_workers_have_their_own_names_and_log_ports():
    names = services.celery_hostnames()
    assert len(set(names)) == services.CELERY_WORKERS == 2
    envs = [services.celery_worker_env(i) for i in range(2)]
    assert [e["FLEET_CELERY_HOSTNAME"] for e in envs] == names
    assert [int(e["AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT"]) for e in envs] == \
        [services.port_plan().celery_log_server(0), services.port_plan().celery_log_server(1)]
    assert {e["AIRFLOW__CORE__HOSTNAME_CALLABLE"] for e in envs} == {"fleetlab.celery_worker.hostname"}
    # the workers' command lines are retitled by Celery but keep the node name: the PID check
    assert services._marker("celery-worker-1") == names[1]

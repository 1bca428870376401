"""Fixtures of the install tests: the wheel built once per session, and per supported Airflow a
deployment of it outside the checkout (tests/install/installed.py), with its api-server running."""

from __future__ import annotations

import json
import secrets

import pytest
import yaml

from tests.conftest import SHARD, TEST_PG, TEST_PORTS
from tests.install import installed


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    """(wheel, sdist) of the checkout, built once."""
    return installed.build(tmp_path_factory.mktemp("dist"))


def _fresh_database(name: str) -> str:
    """A database of its own in the tests' PostgreSQL, dropped first if an earlier session left it."""
    from psycopg2 import sql

    from fleetlab import postgres

    spec = postgres.PgSpec(home=TEST_PG.home, port=TEST_PG.port, database=name)
    conn = postgres._connect(spec)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    finally:
        conn.close()
    postgres.ensure_database(spec)
    return spec.url()


def make_deployment(key: str, built, lab, tmp_path_factory) -> installed.Deployment:
    wheel, _ = built
    root = tmp_path_factory.mktemp(f"deployment-{key}")
    assert installed.REPO not in root.parents, f"{root} must be outside the checkout"
    venv = installed.make_venv(root / "venv", wheel, key)
    dep = installed.Deployment(key=key, venv=venv, home=root / "airflow", root=root,
                               port=TEST_PORTS.installed_api(installed.AIRFLOW[key][2]))
    (dep.home / "logs").mkdir(parents=True)
    (dep.home / "locks").mkdir()  # the lock folder (FLEET_LOCK_DIR's default), made by the deployment
    (root / "data").mkdir()
    # the fleet file of the deployment: the lab's 0.9 cluster, its brokers' log dirs (read locally)
    # and its approvers; no broker_control (nothing here restarts brokers)
    entry = lab.spec.fleet_cluster()
    entry.pop("broker_control", None)
    entry["approvers"] = ["admin", "approver"]
    fleet_file = root / "fleet.yaml"
    fleet_file.write_text(yaml.safe_dump({"version": 1, "clusters": [entry]}, sort_keys=False))
    dep.passwords = {"admin": secrets.token_urlsafe(12), "approver": secrets.token_urlsafe(12)}
    (dep.home / "passwords.json").write_text(json.dumps(dep.passwords))
    # the deployment's Spark: local, on loopback (a deployment names its master in this connection)
    spark = {"AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
             "SPARK_LOCAL_IP": "127.0.0.1"}
    settings = {**spark, "FLEET_FILE": str(fleet_file), "FLEET_DATA_ROOT": str(root / "data"),
                "AIRFLOW_VAR_FLEET_AUDIT_KEY": f"dist:{secrets.token_hex(32)}",
                **installed.copy_connection_files(lab.spec.connection_env(), root / "credentials")}
    dep.env = installed.base_env(dep, _fresh_database(f"airflow_dist_{key}_{SHARD}"), settings)
    dep.run("airflow", "db", "migrate", timeout=900)
    dep.run("fleetctl", "deploy", "dags", dep.home / "dags")
    dep.run("airflow", "dags", "reserialize", timeout=900)
    dep.start_api()
    return dep


def deployment_fixture(key: str):
    """The module-scoped `deployment` fixture of one supported Airflow (a test module per Airflow,
    so that `--dist loadfile` installs each on its own worker)."""

    @pytest.fixture(scope="module")
    def deployment(built, lab, airflow_db, tmp_path_factory):
        dep = make_deployment(key, built, lab, tmp_path_factory)
        try:
            yield dep
        finally:
            dep.stop_api()

    return deployment

"""The deployment's configuration (fleetkit.core.settings), the DAG loaders a deployment installs
(fleet_airflow.dag_files) and what the package registers with Airflow (provider_info)."""

from __future__ import annotations

import datetime as dt
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from fleetkit.core import settings
from fleetkit.core.errors import FleetConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean(monkeypatch):
    for s in settings.SETTINGS:
        monkeypatch.delenv(s.name, raising=False)
    monkeypatch.delenv("AIRFLOW_HOME", raising=False)
    return monkeypatch


@pytest.mark.parametrize("name,read", [("FLEET_FILE", settings.fleet_file), ("FLEET_DATA_ROOT", settings.data_root)])
def test_a_missing_required_setting_is_one_line_naming_it(clean, name, read):
    with pytest.raises(settings.MissingSetting) as e:
        read()
    assert str(e.value).startswith(f"{name} is not set (") and "\n" not in str(e.value)
    assert e.value.setting == name
    clean.setenv(name, "   ")  # blank is not set
    with pytest.raises(settings.MissingSetting):
        read()
    clean.setenv(name, "/srv/fleet/x")
    assert read() == "/srv/fleet/x"


def test_require_names_the_first_missing_and_nothing_falls_back_to_a_lab(clean):
    with pytest.raises(settings.MissingSetting, match="^FLEET_FILE is not set"):
        settings.require()
    clean.setenv("FLEET_FILE", "/etc/fleet.yaml")
    with pytest.raises(settings.MissingSetting, match="^FLEET_DATA_ROOT is not set"):
        settings.require()
    clean.setenv("FLEET_DATA_ROOT", "/srv/data")
    settings.require()
    assert "home" not in dir(settings)  # no installation root guessed from where the code lies


def test_the_lock_folder_needs_a_setting_or_an_airflow_home(clean):
    with pytest.raises(settings.MissingSetting, match="^FLEET_LOCK_DIR is not set"):
        settings.lock_dir()
    clean.setenv("AIRFLOW_HOME", "/opt/airflow")
    assert settings.lock_dir() == "/opt/airflow/locks"
    clean.setenv("FLEET_LOCK_DIR", "/shared/locks")
    assert settings.lock_dir() == "/shared/locks"


@pytest.mark.parametrize("interval,schedule,text", [
    ("5m", "*/5 * * * *", "5m"),  # divides an hour: on the clock
    ("1m", "* * * * *", "1m"),
    ("60m", "0 * * * *", "1h"),
    ("2h", "0 */2 * * *", "2h"),
    ("7m", dt.timedelta(minutes=7), "7m"),  # does not divide an hour: the interval itself
    ("90s", dt.timedelta(seconds=90), "90s"),
    ("5h", dt.timedelta(hours=5), "5h"),  # does not divide a day
])
def test_one_collection_interval_drives_the_schedule_and_the_staleness(clean, interval, schedule, text):
    clean.setenv("FLEET_COLLECTION_INTERVAL", interval)
    assert settings.collection_schedule() == schedule
    assert settings.collection_interval_text() == text


def test_a_bad_interval_or_retention_is_named(clean):
    clean.setenv("FLEET_COLLECTION_INTERVAL", "0s")
    with pytest.raises(FleetConfigError, match="FLEET_COLLECTION_INTERVAL"):
        settings.collection_interval()
    clean.setenv("FLEET_RETENTION_DAYS", "soon")
    with pytest.raises(FleetConfigError, match="FLEET_RETENTION_DAYS='soon' is not a whole number"):
        settings.retention_days()


def test_describe_says_what_is_missing(clean):
    clean.setenv("FLEET_FILE", "/etc/fleet.yaml")
    rows = {name: value for name, value, _ in settings.describe()}
    assert rows["FLEET_FILE"] == "/etc/fleet.yaml"
    assert rows["FLEET_DATA_ROOT"] == "NOT SET (required)"
    assert rows["FLEET_SPARK_CONN_ID"] == "(default: spark_default)"


def test_the_dag_schedule_follows_the_setting(clean, tmp_path):
    """fleet_maintenance, parsed in a fresh interpreter with FLEET_COLLECTION_INTERVAL=10m, runs every
    10 minutes (no second place to keep equal by hand)."""
    code = ("from fleet_dags.fleet_maintenance import dag; t = dag.timetable; "
            "print(getattr(t, '_expression', None) or getattr(t, 'expression', None) or t.summary)")
    env = {"PATH": "/usr/bin:/bin", "FLEET_FILE": str(tmp_path / "f.yaml"), "FLEET_DATA_ROOT": str(tmp_path),
           "FLEET_COLLECTION_INTERVAL": "10m", "AIRFLOW_HOME": str(tmp_path / "home"),
           "AIRFLOW__CORE__LOAD_EXAMPLES": "False"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "*/10 * * * *"


# -- the DAG files of a deployment -------------------------------------------------------------------
def test_the_loaders_name_only_the_installed_package(tmp_path):
    from fleet_airflow import dag_files

    modules = dag_files.dag_modules()
    assert "fleet_maintenance" in modules and "runbook_trim" in modules and "__init__" not in modules
    assert modules == sorted(p.stem for p in (REPO / "dags").glob("*.py") if p.stem != "__init__")
    out = dag_files.install(tmp_path / "dags")
    current = [m for m in modules if m not in dag_files.RENAMED]  # a new deployment: the current ids only
    assert {o.action for o in out} == {"written"} and sorted(o.path.stem for o in out) == current
    text = (tmp_path / "dags" / "fleet_maintenance.py").read_text()
    assert text.splitlines()[-1] == "from fleet_dags.fleet_maintenance import dag  # noqa: F401"
    assert str(REPO) not in text
    # Airflow's parsing heuristic finds both words in a loader
    assert "airflow" in text.lower() and "dag" in text.lower()
    assert {o.action for o in dag_files.install(tmp_path / "dags")} == {"unchanged"}


def test_an_upgraded_deployment_keeps_its_loaders_of_renamed_dags_for_a_release(tmp_path):
    from fleet_airflow import dag_files

    folder = tmp_path / "dags"
    folder.mkdir()
    old = next(iter(dag_files.RENAMED))
    (folder / f"{old}.py").write_text(dag_files.loader_text(old) + "# an earlier release's loader\n")
    out = {o.path.stem: o.action for o in dag_files.install(folder)}
    assert out[old] == "updated" and out[dag_files.RENAMED[old]] == "written"  # kept, and the new id added
    assert (folder / f"{old}.py").read_text() == dag_files.loader_text(old)
    assert all(out.get(o) is None for o in dag_files.RENAMED if o != old)  # no other old id appears


def test_a_teams_own_file_is_left_alone_and_stale_loaders_go(tmp_path):
    from fleet_airflow import dag_files

    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "fleet_maintenance.py").write_text("# our own DAG of the same name\n")
    (folder / "retired_dag.py").write_text(dag_files.loader_text("retired_dag"))
    (folder / "unrelated.py").write_text("# another team's DAG\n")
    out = {o.path.name: o.action for o in dag_files.install(folder, check=True)}
    assert out["fleet_maintenance.py"] == "refused" and out["retired_dag.py"] == "stale"
    assert (folder / "retired_dag.py").exists()  # --check changes nothing
    out = {o.path.name: o.action for o in dag_files.install(folder)}
    assert out["fleet_maintenance.py"] == "refused" and not (folder / "retired_dag.py").exists()
    assert (folder / "fleet_maintenance.py").read_text() == "# our own DAG of the same name\n"
    assert (folder / "unrelated.py").exists()
    assert {o.path.name: o.action for o in dag_files.install(folder, force=True)}["fleet_maintenance.py"] == "updated"


def test_the_provider_info_names_what_exists():
    from fleet_airflow.provider_info import get_provider_info

    info = get_provider_info()
    modules = [m for section in ("hooks", "operators", "triggers") for entry in info[section]
               for m in entry["python-modules"]]
    assert "fleet_airflow.hooks.zookeeper" in modules and "fleet_airflow.triggers.leader_change" in modules
    for m in modules:
        assert importlib.util.find_spec(m) is not None, m
    for dotted in info["notifications"] + info["extra-links"] + [c["hook-class-name"] for c in info["connection-types"]]:
        module, _, name = dotted.rpartition(".")
        assert importlib.util.find_spec(module) is not None, dotted
        assert f"class {name}(" in Path(importlib.util.find_spec(module).origin).read_text(), dotted
    assert info["versions"] and info["versions"][0] != "0+unknown"  # the installed distribution's version

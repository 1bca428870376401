"""Folder names from run ids, DAG ids and cluster names: one-to-one, never `.`, `..`, empty or
holding `/`, readable, and unchanged for plain names."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings as hsettings
from hypothesis import strategies as st

from fleetkit.core import plans
from fleetkit.core.journal import journal_path
from fleetkit.core.locks import ClusterLock
from fleetkit.core.settings import MAX_COMPONENT, component_value, run_folder, safe_component

# what Airflow lets through in a run id, and worse: separators, dots, ~, %, unicode, surrogates
HOSTILE = st.text(alphabet=st.sampled_from(list("abAB09_-.~:+/ %\\\x00\n'\"{}$`*?") + ["é", "Ω", "🙂", "\ud800"]),
                  min_size=1, max_size=40)
ANY = st.one_of(HOSTILE, st.text(min_size=1, max_size=300))


def check_component(name: str) -> None:
    assert name not in ("", ".", "..")
    assert "/" not in name and "\x00" not in name and "\\" not in name
    assert not name.startswith(".")
    assert re.fullmatch(r"[A-Za-z0-9_.~-]+", name), name
    assert len(name) <= MAX_COMPONENT


@hsettings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ANY, min_size=2, max_size=6, unique=True))
def test_distinct_values_give_distinct_components(values):
    names = [safe_component(v) for v in values]
    for n in names:
        check_component(n)
    assert len(set(names)) == len(values), dict(zip(values, names))


@hsettings(max_examples=1000, deadline=None)
@given(ANY)
def test_a_component_reads_back_as_its_value(value):
    name = safe_component(value)
    check_component(name)
    if "~~" in name:  # shortened: only the hash tells it apart
        assert len(name) == MAX_COMPONENT or len(safe_component(value)) <= MAX_COMPONENT
        with pytest.raises(ValueError, match="shortened"):
            component_value(name)
    else:
        assert component_value(name) == value


@pytest.mark.parametrize("a, b", [
    ("a:b", "a_b"), ("a+b", "a_b"), ("a b", "a_b"), ("a::b", "a:b"), ("x.", "x"), ("_x", "x"), (".x", "x"),
    ("manual__2024-05-01T10:15:00+00:00", "manual__2024-05-01T10_15_00_00_00"),
    ("a/b", "a_b"), ("a~3Ab", "a:b"), ("é", "e"), ("..", "."), ("~2E", "."),
])
def test_former_collisions_are_apart(a, b):
    assert safe_component(a) != safe_component(b)


@pytest.mark.parametrize("value", [
    "lab", "prod-eu", "fleet_maintenance", "runbook_trim", "latest", "stuck", "run..1", "x.y", "a_b",
    "scheduled__2024-01-01T00_00_00_00_00",
])
def test_plain_names_keep_their_name(value):
    assert safe_component(value) == value


@pytest.mark.parametrize("value, name", [
    ("manual__2024-05-01T10:15:00.123456+00:00", "manual__2024-05-01T10~3A15~3A00.123456~2B00~3A00"),
    ("..", "~2E."),
    (".", "~2E"),
    ("../../etc", "~2E.~2F..~2Fetc"),
    ("zürich", "z~C3~BCrich"),
    ("~", "~7E"),
])
def test_readable_escapes(value, name):
    assert safe_component(value) == name


def test_long_values_are_shortened_apart():
    a, b = "r" * 300 + "a", "r" * 300 + "b"
    assert len(safe_component(a)) == MAX_COMPONENT
    assert safe_component(a) != safe_component(b)
    assert safe_component(a).startswith("r" * 100) and "~~" in safe_component(a)
    # a shortened name never equals the full name of a shorter value
    assert safe_component("r" * MAX_COMPONENT) == "r" * MAX_COMPONENT
    assert safe_component("r" * (MAX_COMPONENT + 1)) != "r" * MAX_COMPONENT


def test_empty_is_refused():
    with pytest.raises(ValueError, match="empty"):
        safe_component("")
    with pytest.raises(plans.PlanError):
        plans.plan_path("/p", "dag", "")


def test_every_caller_stays_inside_its_folder(tmp_path):
    run = "../../../etc/passwd"
    for path in (run_folder(tmp_path, "stuck", run), plans.plan_path(tmp_path, "..", run),
                 journal_path(tmp_path, "trim", "..", run, ".."), ClusterLock(str(tmp_path), "..").path):
        assert path.resolve().is_relative_to(tmp_path.resolve()), path
        assert ".." not in path.relative_to(tmp_path).parts


def test_plans_of_colliding_run_ids_stay_apart(tmp_path):
    plan = {"action": "a", "cluster": "c", "title": "t", "preconditions": [], "changes": [], "rollback": {}}
    plans.store(tmp_path, "d", "r:1", dict(plan, run_id="r:1"))
    plans.store(tmp_path, "d", "r_1", dict(plan, run_id="r_1"))
    assert plans.load(tmp_path, "d", "r:1")[0]["run_id"] == "r:1"
    assert plans.load(tmp_path, "d", "r_1")[0]["run_id"] == "r_1"


def test_a_plan_stored_under_the_former_folder_name_is_found_when_it_is_this_runs(tmp_path):
    run = "manual__2024-05-01T10:15:00+00:00"
    old = tmp_path / "runbook_x" / "manual__2024-05-01T10_15_00_00_00" / "plan.json"
    old.parent.mkdir(parents=True)
    plan = {"action": "a", "cluster": "c", "title": "t", "preconditions": [], "changes": [], "rollback": {},
            "dag_id": "runbook_x", "run_id": run}
    old.write_text(json.dumps(plan))
    loaded, digest = plans.load(tmp_path, "runbook_x", run)
    assert loaded == plan and digest == plans.digest(plan)
    # the same former folder never answers for another run that mapped to it
    with pytest.raises(plans.PlanError, match="no stored plan"):
        plans.load(tmp_path, "runbook_x", "manual__2024-05-01T10+15+00+00+00")

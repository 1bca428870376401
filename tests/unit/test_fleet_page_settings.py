"""The fleet page's runbook POST: where it posts the run (the configured API base URL, never the
request's host) and its anti-forgery check on values a forged post may send."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "plugins"))

from fleet_airflow.fleet_page import _csrf, _csrf_ok, api_base_url  # noqa: E402


@pytest.mark.parametrize("env, expected", [
    ({"AIRFLOW__API__BASE_URL": "https://airflow.example.com/"}, "https://airflow.example.com"),
    ({"AIRFLOW__API__BASE_URL": "https://example.com/airflow"}, "https://example.com/airflow"),
    ({"AIRFLOW__API__BASE_URL": "", "AIRFLOW__API__HOST": "127.0.0.1", "AIRFLOW__API__PORT": "18080"},
     "http://127.0.0.1:18080"),
    ({"AIRFLOW__API__BASE_URL": "", "AIRFLOW__API__HOST": "0.0.0.0", "AIRFLOW__API__PORT": "8080"},
     "http://127.0.0.1:8080"),
    ({"AIRFLOW__API__BASE_URL": "", "AIRFLOW__API__HOST": "::", "AIRFLOW__API__PORT": "8080"},
     "http://[::1]:8080"),
    ({"AIRFLOW__API__BASE_URL": "", "AIRFLOW__API__HOST": "10.0.0.5", "AIRFLOW__API__PORT": "9090"},
     "http://10.0.0.5:9090"),
])
def test_the_runs_go_to_the_configured_api_base_url(monkeypatch, env, expected):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert api_base_url() == expected


@pytest.mark.parametrize("sent", [None, "", "x", "é", "\u202e" * 64, "\U0001F600", "\udcff", _csrf("other-token")])
def test_a_missing_forged_or_non_ascii_csrf_is_refused_without_an_error(sent):
    assert _csrf_ok(sent, "the-token") is False


def test_the_session_csrf_is_accepted():
    assert _csrf_ok(_csrf("the-token"), "the-token") is True

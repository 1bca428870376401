"""fleetctl runbook: what it sends Airflow, and what it says when it cannot (no Airflow here: the
REST API itself is exercised by tests/install against each supported Airflow)."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fleetkit.core.errors import FleetError

from fleetctl.runbook_cmds import _conf

FLEETCTL = Path(sys.executable).parent / "fleetctl"


def args(**kw) -> argparse.Namespace:
    base = {"conf": None, "param": None, "cluster": None, "execute": False}
    return argparse.Namespace(**{**base, **kw})


def test_a_run_is_a_dry_run_unless_execute():
    assert _conf(args(cluster="prod")) == {"cluster": "prod", "dry_run": True}
    assert _conf(args(cluster="prod", execute=True)) == {"cluster": "prod", "dry_run": False}
    # --execute wins over a conf that says otherwise; a conf alone may say false
    assert _conf(args(conf='{"dry_run": true}', execute=True))["dry_run"] is False
    assert _conf(args(conf='{"dry_run": false}'))["dry_run"] is False


def test_params_are_json_values_else_text_and_win_over_conf():
    got = _conf(args(conf='{"partition": 1, "group": "a"}', param=["partition=3", "group=billing; rm -rf /",
                                                                   "target=skip 1", "offsets={\"0\": 5}"]))
    assert got == {"partition": 3, "group": "billing; rm -rf /", "target": "skip 1", "offsets": {"0": 5},
                   "dry_run": True}


@pytest.mark.parametrize("kw,message", [
    ({"conf": "{not json"}, "--conf '{not json': not JSON"),
    ({"conf": "[1, 2]"}, "must be a JSON object"),
    ({"param": ["novalue"]}, "--param 'novalue': write it as name=value"),
])
def test_bad_input_is_named(kw, message):
    with pytest.raises(FleetError, match=message.replace("[", r"\[").replace("{", r"\{")):
        _conf(args(**kw))


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_an_airflow_that_does_not_answer_is_exit_4_in_one_line(tmp_path):
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FLEET_AIRFLOW_URL": f"http://127.0.0.1:{_closed_port()}",
           "AIRFLOW_API_TOKEN": "x.eyJzdWIiOiJhbGljZSJ9.y"}
    out = subprocess.run([str(FLEETCTL), "runbook", "list"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    errors = [ln for ln in out.stderr.splitlines() if ln.startswith("error: ")]
    assert out.returncode == 4 and len(errors) == 1, out.stderr
    assert "did not answer" in errors[0] and "Traceback" not in out.stderr


def test_who_acts_must_be_given_not_guessed(tmp_path):
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FLEET_AIRFLOW_URL": "http://127.0.0.1:9"}
    out = subprocess.run([str(FLEETCTL), "runbook", "start", "runbook_stuck_reset", "--cluster", "x"],
                         capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 2 and "acts in Airflow as you" in out.stderr and "Traceback" not in out.stderr


def test_a_token_names_its_own_user_whatever_the_environment_says(monkeypatch):
    """FLEET_AIRFLOW_USER beside a token is not who acts: the token's user is (Airflow signed it)."""
    import base64
    import json

    from fleetctl.airflow_api import login

    claims = base64.urlsafe_b64encode(json.dumps({"sub": "1", "name": "mallory"}).encode()).decode().rstrip("=")
    monkeypatch.setenv("AIRFLOW_API_TOKEN", f"x.{claims}.y")
    monkeypatch.setenv("FLEET_AIRFLOW_USER", "alice")
    assert login(prompt=False).user == "mallory"

"""deploy/prometheus/fleet-rules.yml: valid for Prometheus (`promtool check rules`), its alerts fire
when and only when their test file says (`promtool test rules`), and every metric the rules read
is one the fleet publishes. promtool comes from Debian's `prometheus` package (`make system-deps`):
without it this test fails, it does not skip."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetkit.metrics import METRICS

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"


def promtool(*args: str) -> str:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is not installed: `make system-deps` (Debian's prometheus package) installs it")
    r = subprocess.run([exe, *args], cwd=RULES, capture_output=True, text=True, timeout=120)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"promtool {' '.join(args)} failed ({r.returncode}):\n{out}"
    return out


def test_promtool_checks_the_rules():
    assert "SUCCESS: 12 rules found" in promtool("check", "rules", "fleet-rules.yml")


def test_promtool_unit_tests_of_the_alerts_pass():
    assert "SUCCESS" in promtool("test", "rules", "fleet-rules.test.yml")


def test_every_alert_is_tested_and_reads_only_published_metrics():
    rules = yaml.safe_load((RULES / "fleet-rules.yml").read_text())["groups"][0]["rules"]
    tests = yaml.safe_load((RULES / "fleet-rules.test.yml").read_text())["tests"]
    fired = {t["alertname"] for g in tests for t in g["alert_rule_test"] if t["exp_alerts"]}
    assert {r["alert"] for r in rules} == fired
    for r in rules:
        names = set(re.findall(r"\b((?:fleet|kafka)_[a-z_]+)\b", r["expr"]))
        assert names and names <= set(METRICS), (r["alert"], names - set(METRICS))

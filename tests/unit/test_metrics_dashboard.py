"""deploy/grafana/fleet-dashboard.json: valid JSON, and every metric its PromQL reads is one the
fleet publishes (fleetkit.metrics.METRICS, kafka-lag-exporter's compatible names included)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetkit.metrics import METRICS

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "fleet-dashboard.json"
#: PromQL words that are not metric names
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
            "offset", "inf", "nan"}


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads: identifiers left once strings, label matchers,
    grouping clauses, range selectors, function calls, keywords, numbers and $variables are gone."""
    e = re.sub(r'"(?:\\.|[^"\\])*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\$\{?\w+\}?", " ", e)
    e = re.sub(r"\b[a-zA-Z_:][\w:]*\s*\(", "(", e)  # function names
    return {w for w in re.findall(r"\b[a-zA-Z_:][\w:]*\b", e) if w.lower() not in KEYWORDS}


def expressions(dash: dict) -> list[str]:
    out = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if var.get("type") == "query" and q:
            out += re.findall(r"label_values\(\s*([^,)]+)", q)
    return out


@pytest.mark.parametrize("expr, names", [
    ('sum by (verdict) (fleet_cluster_groups{cluster_name=~"$cluster"})', {"fleet_cluster_groups"}),
    ('topk(20, kafka_consumergroup_group_lag{group="a b"}) / ignoring(kind) x_total[5m]',
     {"kafka_consumergroup_group_lag", "x_total"}),
    ("fleet_collection_interval_seconds * 2", {"fleet_collection_interval_seconds"}),
])
def test_the_expression_reader(expr, names):
    assert metric_names(expr) == names


def test_every_dashboard_metric_is_published():
    dash = json.loads(DASHBOARD.read_text())
    exprs = expressions(dash)
    assert len(exprs) >= 15
    used = set().union(*(metric_names(e) for e in exprs))
    assert used - set(METRICS) == set(), f"the dashboard reads metrics nobody publishes: {used - set(METRICS)}"
    # the compatible names are on it, so kafka-lag-exporter's users find theirs
    assert {"kafka_consumergroup_group_lag", "kafka_consumergroup_group_lag_seconds"} <= used
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_docs_name_every_published_metric_and_every_alert():
    import yaml

    repo = DASHBOARD.parents[2]
    doc = (repo / "docs" / "metrics.md").read_text()
    assert [n for n in METRICS if f"`{n}`" not in doc] == []
    rules = yaml.safe_load((repo / "deploy" / "prometheus" / "fleet-rules.yml").read_text())["groups"][0]["rules"]
    assert [r["alert"] for r in rules if f"`{r['alert']}`" not in doc] == []

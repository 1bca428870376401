"""The benchmark scripts are run by hand, not by the suite: every name they import from the project
(fleetctl, fleetkit, fleetlab) must still exist, or a refactor breaks them unseen."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PROJECT = ("fleetctl", "fleetkit", "fleetlab")


def project_imports(path: Path) -> list[tuple[str, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in PROJECT:
            out += [(node.module, a.name) for a in node.names]
        elif isinstance(node, ast.Import):
            out += [(a.name, "") for a in node.names if a.name.split(".")[0] in PROJECT]
    return out


@pytest.mark.parametrize("script", sorted(p.name for p in (REPO / "bench").glob("*.py")))
def test_a_benchmark_imports_only_names_the_project_has(script):
    missing = []
    for module, name in project_imports(REPO / "bench" / script):
        m = importlib.import_module(module)
        if name and not hasattr(m, name):
            try:
                importlib.import_module(f"{module}.{name}")
            except ImportError:
                missing.append(f"{module}.{name}")
    assert not missing, f"bench/{script} imports names the project no longer has: {missing}"


def test_the_check_sees_a_missing_name(tmp_path):
    script = tmp_path / "x.py"
    script.write_text("from fleetctl.incident import red\nimport fleetkit.core.datasets\n")
    assert ("fleetctl.incident", "red") in project_imports(script)
    assert not hasattr(importlib.import_module("fleetctl.incident"), "red")

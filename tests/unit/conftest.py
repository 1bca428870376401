"""Unit tests run side by side (pytest-xdist): each gets an audit heads folder of its own, so two
tests auditing a cluster of the same name in their own data roots never see each other's chain
head (a deployment has one data root and one heads folder)."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def own_audit_heads(tmp_path_factory, monkeypatch):
    monkeypatch.setenv("FLEET_AUDIT_HEADS_DIR", str(tmp_path_factory.mktemp("audit-heads")))

"""The toolkit installed from its wheel into the newest supported Airflow (tests/install/installed.py
says which release and how the rest is resolved), run as a deployment outside the checkout."""

from __future__ import annotations

import pytest

from tests.install.conftest import make_deployment
from tests.install.suite import *  # noqa: F401,F403 - the checks every supported Airflow passes

KEY = "newest"
pytestmark = [pytest.mark.airflow, pytest.mark.lab, pytest.mark.timeout(2400)]


@pytest.fixture(scope="module")
def deployment(built, lab, airflow_db, tmp_path_factory):
    dep = make_deployment(KEY, built, lab, tmp_path_factory)
    try:
        yield dep
    finally:
        dep.stop_api()

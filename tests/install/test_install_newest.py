"""The toolkit installed from its wheel into the newest supported Airflow (tests/install/installed.py
says which release and how the rest is resolved), run as a deployment outside the checkout."""

from __future__ import annotations

import pytest

from tests.install.conftest import deployment_fixture
from tests.install.suite import *  # noqa: F401,F403 - the checks every supported Airflow passes

pytestmark = [pytest.mark.airflow, pytest.mark.lab, pytest.mark.timeout(2400)]

deployment = deployment_fixture("newest")

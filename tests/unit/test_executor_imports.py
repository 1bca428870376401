"""What Spark executors import must need only pyspark, pandas, pyarrow and numpy: the cluster
profile's executors run a Python with nothing else (no PyYAML, Jinja2, kazoo, confluent-kafka,
Airflow), and the project's code reaches them only as py_files."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: the modules whose functions the Spark jobs run inside executors (UDFs, mapInPandas)
EXECUTOR_MODULES = ["fleetkit.stuck.rules", "fleetkit.trim.rules", "fleetkit.ownership.rules",
                    "fleetkit.group_ids.rules", "fleetkit.core.partitioning", "fleetkit.core.datasets",
                    "fleetkit.stuck.stages", "fleetkit.stuck.columnar"]
NOT_ON_EXECUTORS = ["yaml", "jinja2", "kazoo", "confluent_kafka", "airflow", "psutil"]


@pytest.mark.parametrize("module", EXECUTOR_MODULES)
def test_executor_side_modules_import_without_the_driver_only_packages(module):
    blocker = "; ".join(f"sys.modules[{name!r}] = None" for name in NOT_ON_EXECUTORS)
    code = f"import sys; {blocker}; import {module}"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": str(REPO / "include"), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr[-2000:]

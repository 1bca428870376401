"""The deployment's configuration, read in one place: what the toolkit takes from the deployment
it is installed in, never from a trigger's params and never guessed from where its code lies.

Every setting is an environment variable, the same on every host of a deployment (scheduler,
dag-processor, triggerer, api-server, every worker, and the shells `fleetctl` runs in). SETTINGS
below lists them; `fleetctl deploy check` prints what a host sees. A required setting that is
missing stops whatever needs it with one line naming it (MissingSetting); nothing falls back to a
lab or to a folder beside the code.

The audit key is an Airflow Variable read from the environment (AIRFLOW_VAR_FLEET_AUDIT_KEY,
fleetkit.core.audit); the Kafka, ZooKeeper and Spark endpoints are Airflow connections named by
the fleet file and FLEET_SPARK_CONN_ID.
"""

from __future__ import annotations

import hashlib
import os
import string
from dataclasses import dataclass
from pathlib import Path

from fleetkit.core.errors import FleetConfigError

_SAFE_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
ESCAPE = "~"
MAX_COMPONENT = 200  # well below the 255 bytes most file systems allow in a name
_HASH_CHARS = 16


@dataclass(frozen=True)
class Setting:
    name: str
    required: bool
    default: str | None
    means: str


#: every deployment setting, in the order docs/deploy.md explains them
SETTINGS = (
    Setting("FLEET_FILE", True, None, "the fleet file: the clusters, their connection ids and approvers"),
    Setting("FLEET_DATA_ROOT", True, None, "the data root: datasets, reports, plans, quarantine (a folder "
            "every host reaches, or a Spark/pyarrow URI)"),
    Setting("FLEET_DATA_ROOT_CONN_ID", False, None, "the Airflow connection (type aws: login = access key id, "
            "password = secret access key, extra endpoint_url, region_name) of an object store data root (s3://); "
            "unset: the AWS SDK's own credentials"),
    Setting("FLEET_COLLECTION_INTERVAL", False, "5m", "time between scheduled collections: fleet_maintenance's "
            "schedule, and a cluster whose newest collection is older than twice this is STALE"),
    Setting("FLEET_SPARK_CONN_ID", False, "spark_default", "the Airflow connection spark-submit uses (its master, "
            "deploy mode, queue)"),
    Setting("FLEET_SPARK_JARS", False, None, "jars spark-submit adds (--jars, comma-separated paths on the "
            "workers): for an s3:// data root, hadoop-aws of Spark's Hadoop and its AWS SDK bundle"),
    Setting("FLEET_SPARK_PYTHON", False, None, "the Python of the Spark executors (PYSPARK_PYTHON); unset: "
            "Spark's own default"),
    Setting("FLEET_RETENTION_DAYS", False, "30", "days of dataset partitions kept"),
    Setting("FLEET_LOCK_DIR", False, "$AIRFLOW_HOME/locks", "the per-cluster run locks: one folder every worker "
            "and fleetctl share, outside the data root"),
    Setting("FLEET_AUDIT_HEADS_DIR", False, "<lock dir>/audit-heads", "the audit chains' signed heads, outside "
            "the data root"),
    Setting("FLEET_STATE_CONN_ID", False, None, "the Airflow connection (type postgres) of the shared run state: "
            "locks, execution journals and audit heads in that database, shared by every host; unset: local files "
            "(FLEET_LOCK_DIR, <data root>/journals, FLEET_AUDIT_HEADS_DIR)"),
    Setting("FLEET_PLANS_DIR", False, "<data root>/plans", "stored plans"),
    Setting("FLEET_QUARANTINE_DIR", False, "<data root>/quarantine", "segment files moved out by a trim"),
)
_BY_NAME = {s.name: s for s in SETTINGS}


class MissingSetting(FleetConfigError):
    """A required deployment setting is not set; its message is one line naming it."""

    def __init__(self, name: str, why: str | None = None):
        setting = _BY_NAME.get(name)
        means = why or (setting.means if setting else "")
        super().__init__(f"{name} is not set ({means}): set it on every host of the deployment (docs/deploy.md)")
        self.setting = name


def _value(name: str) -> str | None:
    value = os.environ.get(name)
    return value.strip() if value and value.strip() else None


def required(name: str) -> str:
    value = _value(name)
    if value is None:
        raise MissingSetting(name)
    return value


def fleet_file() -> str:
    return required("FLEET_FILE")


def data_root() -> str:
    return required("FLEET_DATA_ROOT")


def data_root_conn_id() -> str | None:
    """FLEET_DATA_ROOT_CONN_ID: the connection of an object store data root, or None."""
    return _value("FLEET_DATA_ROOT_CONN_ID")


def under_root(base: str, *parts: str) -> str:
    """A path below a data root folder or URI (pathlib would fold an URI's `//`)."""
    if "://" in base:
        return "/".join([base.rstrip("/"), *parts])
    return str(Path(base).joinpath(*parts))


def require() -> None:
    """Every required setting is set (MissingSetting for the first one that is not): what an entry
    point checks before it does anything."""
    for s in SETTINGS:
        if s.required:
            required(s.name)


def whole_number(name: str, default: int, minimum: int = 0) -> int:
    """A whole-number setting (`default` when unset); FleetConfigError naming it when it is not one
    or is below `minimum`."""
    value = _value(name)
    if value is None:
        return default
    try:
        n = int(value)
    except ValueError:
        raise FleetConfigError(f"{name}={value!r} is not a whole number") from None
    if n < minimum:
        raise FleetConfigError(f"{name}={value!r} must be {minimum} or more")
    return n


def retention_days() -> int:
    return whole_number("FLEET_RETENTION_DAYS", 30, minimum=1)


def collection_interval() -> float:
    """Seconds between scheduled collections (FLEET_COLLECTION_INTERVAL, a duration such as 5m)."""
    from fleetkit.core.durations import parse_duration_seconds

    value = _value("FLEET_COLLECTION_INTERVAL") or "5m"
    try:
        seconds = parse_duration_seconds(value)
    except ValueError as e:
        raise FleetConfigError(f"FLEET_COLLECTION_INTERVAL: {e}") from None
    if seconds <= 0:
        raise FleetConfigError(f"FLEET_COLLECTION_INTERVAL: {value!r} must be longer than 0 s")
    return seconds


def collection_schedule(seconds: float | None = None):
    """fleet_maintenance's schedule for the collection interval: a cron expression on the clock when
    the interval divides an hour (5m: ``*/5 * * * *``) or a day (2h: ``0 */2 * * *``), else the
    interval itself (a timedelta)."""
    import datetime as dt

    seconds = collection_interval() if seconds is None else seconds
    whole = int(seconds)
    if whole == seconds and whole % 60 == 0:
        minutes = whole // 60
        if minutes < 60 and 60 % minutes == 0:
            return "* * * * *" if minutes == 1 else f"*/{minutes} * * * *"
        if minutes % 60 == 0 and 24 % (minutes // 60) == 0:
            hours = minutes // 60
            return "0 * * * *" if hours == 1 else f"0 */{hours} * * *"
    return dt.timedelta(seconds=seconds)


def collection_interval_text(seconds: float | None = None) -> str:
    """The interval as a duration the DAGs' params take (``5m``, ``90s``, ``2h``)."""
    seconds = collection_interval() if seconds is None else seconds
    whole = int(seconds)
    if whole != seconds:
        return f"{seconds}s"
    if whole % 3600 == 0:
        return f"{whole // 3600}h"
    return f"{whole // 60}m" if whole % 60 == 0 else f"{whole}s"


def spark_conn_id() -> str:
    return _value("FLEET_SPARK_CONN_ID") or "spark_default"


def spark_python() -> str | None:
    return _value("FLEET_SPARK_PYTHON")


def plans_root(data_root_: str | None = None) -> str:
    """Plans live beside the datasets: <data root>/plans/<dag>/<run>/plan.json."""
    return _value("FLEET_PLANS_DIR") or under_root(data_root_ or data_root(), "plans")


def quarantine_root(data_root_: str | None = None) -> Path:
    """Where a trim moves segment files of brokers on the worker's own disk: FLEET_QUARANTINE_DIR, else
    <data root>/quarantine; a data root on an object store holds no moved files (MissingSetting)."""
    if _value("FLEET_QUARANTINE_DIR"):
        return Path(_value("FLEET_QUARANTINE_DIR"))
    root = str(data_root_ or data_root())
    if "://" in root:
        raise MissingSetting("FLEET_QUARANTINE_DIR", f"the trim's quarantine, a local folder: the data root {root} "
                             "is an object store, where segment files cannot be moved")
    return Path(root) / "quarantine"


def lock_dir() -> str:
    if _value("FLEET_LOCK_DIR"):
        return _value("FLEET_LOCK_DIR")
    if _value("AIRFLOW_HOME"):
        return str(Path(_value("AIRFLOW_HOME")) / "locks")
    raise MissingSetting("FLEET_LOCK_DIR", "the folder of the per-cluster run locks, shared by every worker and "
                                           "fleetctl (default $AIRFLOW_HOME/locks, and AIRFLOW_HOME is not set either)")


def state_conn_id() -> str | None:
    """FLEET_STATE_CONN_ID: the connection of the shared run state (fleetkit.core.state), or None."""
    return _value("FLEET_STATE_CONN_ID")


def describe() -> list[tuple[str, str, str]]:
    """(name, value or what is missing, meaning) of every setting as this process sees it."""
    out = []
    for s in SETTINGS:
        value = _value(s.name)
        if value is None:
            value = "NOT SET (required)" if s.required else f"(default: {s.default or 'unset'})"
        out.append((s.name, value, s.means))
    return out


def safe_component(value: str) -> str:
    """A path component made from a run id, DAG id or cluster name, one-to-one: distinct values
    give distinct components, never empty, `.`, `..` or holding `/`.

    Letters, digits, `_`, `-` and `.` stay (a leading `.` does not); every other byte of the UTF-8
    form is written `~XX` (hex), so `manual__2024-05-01T10:15:00+00:00` becomes
    `manual__2024-05-01T10~3A15~3A00~2B00~3A00` and `component_value` reads it back. A name
    longer than MAX_COMPONENT keeps its first characters, then `~~` and 16 hex digits of the
    SHA-256 of the value. ValueError for the empty string."""
    value = str(value)
    if not value:
        raise ValueError("cannot make a file name from an empty value")
    out = []
    for i, ch in enumerate(value):
        if ch in _SAFE_CHARS and not (i == 0 and ch == "."):
            out.append(ch)
        else:
            out.extend(f"{ESCAPE}{b:02X}" for b in ch.encode("utf-8", "surrogatepass"))
    name = "".join(out)
    if len(name) <= MAX_COMPONENT:
        return name
    head = name[:MAX_COMPONENT - 2 - _HASH_CHARS]
    cut = head.rfind(ESCAPE, len(head) - 2)
    if cut >= 0:  # never split an escape
        head = head[:cut]
    return f"{head}{ESCAPE}{ESCAPE}{hashlib.sha256(value.encode('utf-8', 'surrogatepass')).hexdigest()[:_HASH_CHARS]}"


def component_value(name: str) -> str:
    """The value safe_component made `name` from; ValueError for a shortened name (`~~`) or one
    safe_component cannot have made."""
    if ESCAPE * 2 in name:
        raise ValueError(f"{name!r} was shortened: its value is not in the name")
    raw = bytearray()
    i = 0
    while i < len(name):
        ch = name[i]
        if ch == ESCAPE:
            hx = name[i + 1:i + 3]
            if len(hx) != 2 or any(c not in "0123456789ABCDEF" for c in hx):
                raise ValueError(f"{name!r}: bad escape at {i}")
            raw.append(int(hx, 16))
            i += 3
        elif ch in _SAFE_CHARS:
            raw += ch.encode()
            i += 1
        else:
            raise ValueError(f"{name!r}: {ch!r} is never left as is")
    value = bytes(raw).decode("utf-8", "surrogatepass")
    if safe_component(value) != name:
        raise ValueError(f"{name!r} is not the component of {value!r}")
    return value


def run_folder(base, *parts: str):
    """The folder of one run's output under `base`: each part (kind, DAG id, run id) made a path
    component by safe_component. The one naming of run folders (reports, plans, journals, trims).
    A Path for a local base, a URI string for an object store's, a DataPath for a DataPath."""
    names = [safe_component(p) for p in parts]
    if "://" in str(base) and isinstance(base, str):
        return under_root(base, *names)
    if _is_data_path(base):
        return base.joinpath(*names)
    return Path(base).joinpath(*names)


def _is_data_path(value) -> bool:
    from fleetkit.core.datasets import DataPath

    return isinstance(value, DataPath)


def newest_in_runs(base, name: str):
    """The newest <base>/<run>/<name> by modification time (a run's report or job output), or
    None. A run folder removed (retention) between the listing and the look is skipped. A base on
    an object store (a URI or a DataPath): fleetkit.core.datasets.newest_in_runs (a DataPath)."""
    import stat

    if "://" in str(base) or _is_data_path(base):
        from fleetkit.core.datasets import newest_in_runs as newest_on_store

        return newest_on_store(base, name)
    base = Path(base)
    best, best_mtime = None, None
    if not base.is_dir():
        return None
    for p in base.glob(f"*/{name}"):
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if stat.S_ISREG(st.st_mode) and (best_mtime is None or st.st_mtime > best_mtime):
            best, best_mtime = p, st.st_mtime
    return best


def newest_trim_health(data_root):
    """The newest trim_health result (the trim's analysis, read by the coordinator check):
    <data root>/reports/offsets/<run>/health.jsonl, or None."""
    import os

    return newest_in_runs(os.path.join(str(data_root), "reports", "offsets"), "health.jsonl")

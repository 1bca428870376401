"""Where things live: the fleet file, the data root and the folders below it (plans, reports,
quarantine), the lock folder. One module, read from the environment, no Airflow.

Environment variables (all optional):
  FLEET_HOME            the installation root (default: found from this file)
  FLEET_FILE            the fleet file (default: include/fleets/lab.yaml)
  FLEET_DATA_ROOT       the data root, a folder or a Spark/pyarrow URI (default: FLEET_HOME/data)
  FLEET_RETENTION_DAYS  days of dataset partitions to keep (default 30)
  FLEET_COLLECTION_INTERVAL  the time between scheduled collections, as fleet_maintenance's schedule
                        runs them (default 5m): a cluster whose newest collection is older than
                        twice this is shown stale
  FLEET_PLANS_DIR       stored plans (default: <data root>/plans)
  FLEET_QUARANTINE_DIR  quarantined segment files (default: <data root>/quarantine)
  FLEET_LOCK_DIR        per-cluster lock files (default: $AIRFLOW_HOME/locks, else FLEET_HOME/.locks);
                        it must be shared by every worker that can run a destructive runbook
"""

from __future__ import annotations

import hashlib
import os
import string
from pathlib import Path

_SAFE_CHARS = frozenset(string.ascii_letters + string.digits + "_.-")
ESCAPE = "~"
MAX_COMPONENT = 200  # well below the 255 bytes most file systems allow in a name
_HASH_CHARS = 16


def home() -> Path:
    return Path(os.environ.get("FLEET_HOME") or Path(__file__).resolve().parents[3])


def fleet_file() -> str:
    return os.environ.get("FLEET_FILE") or str(home() / "include" / "fleets" / "lab.yaml")


def data_root() -> str:
    return os.environ.get("FLEET_DATA_ROOT") or str(home() / "data")


def retention_days() -> int:
    return int(os.environ.get("FLEET_RETENTION_DAYS", "30"))


def collection_interval() -> float:
    """Seconds between scheduled collections (FLEET_COLLECTION_INTERVAL, a duration such as 5m)."""
    from fleetkit.core.durations import parse_duration_seconds

    value = os.environ.get("FLEET_COLLECTION_INTERVAL") or "5m"
    try:
        seconds = parse_duration_seconds(value)
    except ValueError as e:
        raise ValueError(f"FLEET_COLLECTION_INTERVAL: {e}") from None
    if seconds <= 0:
        raise ValueError(f"FLEET_COLLECTION_INTERVAL: {value!r} must be longer than 0 s")
    return seconds


def plans_root(data_root_: str | None = None) -> str:
    """Plans live beside the datasets: <data root>/plans/<dag>/<run>/plan.json."""
    return os.environ.get("FLEET_PLANS_DIR") or str(Path(data_root_ or data_root()) / "plans")


def quarantine_root(data_root_: str | None = None) -> Path:
    return Path(os.environ.get("FLEET_QUARANTINE_DIR") or Path(data_root_ or data_root()) / "quarantine")


def lock_dir() -> str:
    if os.environ.get("FLEET_LOCK_DIR"):
        return os.environ["FLEET_LOCK_DIR"]
    if os.environ.get("AIRFLOW_HOME"):
        return str(Path(os.environ["AIRFLOW_HOME"]) / "locks")
    return str(home() / ".locks")


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


def run_folder(base: str | os.PathLike, *parts: str) -> Path:
    """The folder of one run's output under `base`: each part (kind, DAG id, run id) made a path
    component by safe_component. The one naming of run folders (reports, plans, journals, trims)."""
    return Path(base).joinpath(*(safe_component(p) for p in parts))


def newest_in_runs(base: str | os.PathLike, name: str) -> Path | None:
    """The newest <base>/<run>/<name> by modification time (a run's report or job output), or
    None. A run folder removed (retention) between the listing and the look is skipped."""
    import stat

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

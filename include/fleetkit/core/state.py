"""Where a run's shared state lives: the per-cluster locks, the execution journals and the audit
chains' signed heads. One store per process, chosen by the deployment (FLEET_STATE_CONN_ID):

* unset: files on this host (`FileState`, the default of a one-host deployment): lock files in the
  lock folder (FLEET_LOCK_DIR), journals as JSON Lines under <data root>/journals (fsync), heads
  in the heads folder (FLEET_AUDIT_HEADS_DIR);
* set: the PostgreSQL database of that Airflow connection (`fleetkit.core.state_postgres`), which
  every Airflow host and fleetctl reach: two workers on two hosts share one lock, and `fleetctl
  trim resume` on another host reads the same journal.

The locks (fleetkit.core.locks), the journal (fleetkit.core.journal) and the audit chain
(fleetkit.core.audit) keep their rules; a store only keeps their records. A store answers:

* locks, addressed by a `ref` (`lock_ref(lock_dir, identity)`: a file, or the identity's row):
  `lock_create` (atomic: False when held), `lock_read`, `lock_release` (only by its owner),
  `lock_clear` (kept as a record), `locks_held`, `lock_where` (for messages);
* journals, keyed by their path (journal_path): `journal_writer` (`write(lines, sync)` returns once
  the lines are durable), `journal_lines` (in the order written), `journal_exists`;
* audit heads of (data root id, cluster): `chain_lock` (serializes appends), `head_read`,
  `head_write`, `head_delete`, `sealed_exists`, `sealed_read`, `sealed_write`, `registry_read`,
  `registry_update`, `head_clusters` and their `*_where` for messages.

Who chooses: `current()` is the store installed for the process (`install`, what the Airflow
adapter does: fleet_airflow.clusters.install_state); without one, the files when
FLEET_STATE_CONN_ID is unset, else the connection read from its AIRFLOW_CONN_<ID> variable in JSON
form; a connection only Airflow can resolve and no store installed is an error naming it (never
a silent fall-back to local files).
"""

from __future__ import annotations

import datetime as dt
import errno
import fcntl
import hashlib
import json
import logging
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from fleetkit.core.durable import fsync_dir, replace_file
from fleetkit.core.errors import FleetConfigError, FleetError
# the database's settings: beside the store, so the PostgreSQL store imports them and not this module
from fleetkit.core.state_db import (CHAIN_LOCK_TIMEOUT_S, DEFAULT_SCHEMA, LIBPQ_EXTRA, _SCHEMA_NAME,  # noqa: F401
                                    StateDB, StateUnreachable, db_from_connection)

log = logging.getLogger(__name__)

_TAIL_CHUNK = 64 * 1024


# -- which store -----------------------------------------------------------------------------------
_installed = None


def install(store) -> None:
    """Make `store` the process's store (None: back to choosing from the settings)."""
    global _installed
    _installed = store


def installed():
    """The store installed for this process, or None."""
    return _installed


def open_store(db: StateDB | None):
    """The store of a database (None: the local files)."""
    if db is None:
        return FILES
    from fleetkit.core.state_postgres import PostgresState

    return PostgresState(db)


def current():
    """The store of this process (see the module's doc)."""
    if _installed is not None:
        return _installed
    from fleetkit.core.connections import env_name, from_env
    from fleetkit.core.settings import state_conn_id

    conn_id = state_conn_id()
    if conn_id is None:
        return FILES
    conn = from_env(conn_id)
    if conn is None:
        raise FleetConfigError(f"FLEET_STATE_CONN_ID={conn_id!r}: this process has not opened the shared run state "
                               f"and cannot read that connection without Airflow (no {env_name(conn_id)} in JSON "
                               "form): define it there, or open it through Airflow (fleet_airflow.clusters."
                               "install_state); local files are never used instead")
    store = open_store(db_from_connection(conn_id, conn.conn_type, conn.host, conn.port, conn.login, conn.password,
                                          conn.schema, conn.extra))
    install(store)
    return store


# -- the local files -------------------------------------------------------------------------------
def lock_file_name(identity: str) -> str:
    """A readable, collision-free file name for an identity."""
    from fleetkit.core.settings import safe_component

    return f"{safe_component(identity)[:100]}-{hashlib.sha256(identity.encode('utf-8')).hexdigest()[:12]}.lock"


def recover_torn_tail(path: str | os.PathLike) -> Path | None:
    """If the file does not end with a newline, cut its partial last line off (the bytes after the
    last newline), keeping them in `<name>.torn-<UTC time>` beside it. Returns that file, or None
    when the tail was whole."""
    path = Path(path)
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return None
        cut, end = 0, size
        while end > 0:  # the last newline, read backwards a chunk at a time
            start = max(0, end - _TAIL_CHUNK)
            f.seek(start)
            at = f.read(end - start).rfind(b"\n")
            if at >= 0:
                cut = start + at + 1
                break
            end = start
        f.seek(cut)
        torn = f.read()
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        sidecar = path.with_name(f"{path.name}.torn-{stamp}")
        with open(sidecar, "xb") as side:
            side.write(torn)
            side.flush()
            os.fsync(side.fileno())
        f.truncate(cut)
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(path.parent)
    log.warning("journal %s ended with a torn line (%d bytes, a writer killed mid-write): cut off before appending, "
                "kept in %s", path, len(torn), sidecar.name)
    return sidecar


class _FileJournalWriter:
    """Append-only JSON Lines in one file (created with its folder fsynced; a torn tail cut off first)."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT
        try:
            fd = os.open(self.path, flags | os.O_EXCL, 0o644)
            created = True
        except FileExistsError:
            recover_torn_tail(self.path)
            fd = os.open(self.path, flags, 0o644)
            created = False
        self._f = os.fdopen(fd, "a", encoding="utf-8")
        if created:
            fsync_dir(self.path.parent)

    def write(self, lines: list[str], sync: bool = True) -> None:
        for line in lines:
            self._f.write(line + "\n")
        self._f.flush()
        if sync:
            os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f:
            self._f.close()
            self._f = None


class FileState:
    """The shared state as files on this host (the code of the one-host deployment)."""

    shared = False
    name = "files"

    def describe(self) -> str:
        return "local files (FLEET_LOCK_DIR, <data root>/journals, FLEET_AUDIT_HEADS_DIR)"

    # -- locks: one file per identity in the lock folder
    def lock_ref(self, lock_dir: str | os.PathLike, identity: str) -> Path:
        return Path(lock_dir) / lock_file_name(identity)

    def lock_where(self, ref: Path) -> str:
        return f"lock file {ref}"

    def lock_create(self, ref: Path, doc: dict) -> bool:
        ref.parent.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(ref, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(ref.parent)  # the lock file's name too, not only its content
        return True

    def lock_read(self, ref: Path) -> dict | None:
        try:
            return json.loads(ref.read_text())
        except FileNotFoundError:
            return None
        except ValueError:
            return {"owner": "unreadable lock file"}

    def lock_release(self, ref: Path, owner: str) -> bool:
        h = self.lock_read(ref)
        if h is None or h.get("owner") != owner:
            return False
        ref.unlink(missing_ok=True)
        fsync_dir(ref.parent)
        return True

    def lock_clear(self, ref: Path) -> tuple[dict | None, str]:
        """The lock file moved to <lock dir>/cleared/ (kept as a record): (its holder, where kept)."""
        cleared = ref.parent / "cleared"
        h = self.lock_read(ref)
        if h is None:
            return None, str(cleared)
        cleared.mkdir(parents=True, exist_ok=True)
        stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%S%fZ")
        try:
            os.replace(ref, cleared / f"{ref.stem}.{stamp}.lock")
        except FileNotFoundError:
            return None, str(cleared)
        fsync_dir(cleared)
        fsync_dir(ref.parent)
        return h, str(cleared)

    def locks_held(self, lock_dir: str | os.PathLike) -> list[tuple[Path, dict]]:
        out = []
        for p in sorted(Path(lock_dir).glob("*.lock")):
            try:
                doc = json.loads(p.read_text())
            except FileNotFoundError:
                continue
            except ValueError:
                doc = {"owner": "unreadable lock file"}
            out.append((p, doc))
        return out

    def locks_where(self, lock_dir: str | os.PathLike) -> str:
        return f"lock folder {lock_dir}"

    # -- journals: JSON Lines files
    def journal_writer(self, path: str | os.PathLike) -> _FileJournalWriter:
        return _FileJournalWriter(path)

    def journal_lines(self, path: str | os.PathLike) -> Iterator[str]:
        try:
            f = open(path, encoding="utf-8")
        except FileNotFoundError:
            return
        with f:
            yield from f

    def journal_exists(self, path: str | os.PathLike) -> bool:
        return Path(path).exists()

    # -- audit heads: files in the heads folder, one folder per data root
    def heads_dir(self) -> Path:
        """FLEET_AUDIT_HEADS_DIR, default <lock dir>/audit-heads (outside the data root)."""
        from fleetkit.core.settings import lock_dir

        return Path(os.environ.get("FLEET_AUDIT_HEADS_DIR") or Path(lock_dir()) / "audit-heads")

    def root_folder(self, rid: str) -> Path:
        """<heads dir>/<last part of the data root>-<hash of the whole root>/"""
        from fleetkit.core.settings import safe_component

        try:
            readable = safe_component(rid.rstrip("/").rsplit("/", 1)[-1])[:60]
        except ValueError:
            readable = "root"
        return self.heads_dir() / f"{readable}-{_short(rid)}"

    def _chain_file(self, rid: str, cluster: str, suffix: str) -> Path:
        return self.root_folder(rid) / f"{_name(cluster)}{suffix}"

    def head_where(self, rid: str, cluster: str) -> Path:
        return self._chain_file(rid, cluster, ".head.json")

    def sealed_where(self, rid: str, cluster: str) -> Path:
        return self._chain_file(rid, cluster, ".sealed.json")

    def registry_where(self, rid: str) -> Path:
        return self.root_folder(rid) / "chains.json"

    @contextmanager
    def chain_lock(self, rid: str, cluster: str):
        """An exclusive fcntl.flock on the chain's lock file, held for the append."""
        lock_path = self._chain_file(rid, cluster, ".lock")
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(lock_path, os.O_CREAT | os.O_RDWR, 0o644)
        deadline = time.monotonic() + CHAIN_LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except OSError as e:
                if e.errno not in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                    os.close(fd)
                    raise
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise FleetError(f"audit of cluster {cluster!r}: the append lock {lock_path} was "
                                     f"held for more than {CHAIN_LOCK_TIMEOUT_S:.0f}s by another process") from None
                time.sleep(0.005)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def head_read(self, rid: str, cluster: str) -> dict | None:
        path = self.head_where(rid, cluster)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError as e:
            raise FleetError(f"audit head file {path} is not valid JSON ({e}); "
                             "check the audit with `fleetctl audit verify`") from None

    def head_write(self, rid: str, cluster: str, doc: dict) -> None:
        path = self.head_where(rid, cluster)
        folder = path.parent
        if not folder.is_dir():
            folder.mkdir(parents=True, exist_ok=True)
            fsync_dir(folder.parent)
        # flushed with its folder: a head lost in a crash would read as a deleted one (re-anchored)
        replace_file(path, json.dumps(doc, sort_keys=True, indent=1).encode("utf-8"))

    def head_delete(self, rid: str, cluster: str) -> None:
        self.head_where(rid, cluster).unlink(missing_ok=True)

    def sealed_exists(self, rid: str, cluster: str) -> bool:
        return self.sealed_where(rid, cluster).exists()

    def sealed_read(self, rid: str, cluster: str) -> dict | None:
        try:
            return json.loads(self.sealed_where(rid, cluster).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None

    def sealed_write(self, rid: str, cluster: str, doc: dict) -> None:
        replace_file(self.sealed_where(rid, cluster), json.dumps(doc, sort_keys=True, indent=1).encode("utf-8"))

    def registry_read(self, rid: str) -> dict | None:
        try:
            return json.loads(self.registry_where(rid).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except ValueError:
            return {"clusters": {}, "unreadable": True}

    def registry_update(self, rid: str, update: Callable[[dict | None], dict]) -> None:
        """Replace the registry with update(registry now), under the registry's own lock."""
        path = self.registry_where(rid)
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(path.with_suffix(".lock"), os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            doc = update(self.registry_read(rid))
            replace_file(path, json.dumps(doc, sort_keys=True, indent=1).encode("utf-8"))
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)

    def head_clusters(self, rid: str) -> set[str]:
        """The clusters with a head in this data root's heads folder."""
        names = set()
        folder = self.root_folder(rid)
        if folder.is_dir():
            for p in folder.glob("*.head.json"):
                try:
                    names.add(json.loads(p.read_text(encoding="utf-8"))["cluster"])
                except (ValueError, KeyError, OSError):
                    names.add(p.name)
        return names


def _short(value: str) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:16]


def _name(value: str) -> str:
    from fleetkit.core.settings import safe_component

    try:
        readable = safe_component(value)[:60]
    except ValueError:
        readable = "x"
    return f"{readable}-{_short(value)}"


#: the one file store (stateless: where it looks comes from its arguments and the settings)
FILES = FileState()

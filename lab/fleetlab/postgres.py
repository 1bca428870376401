"""A private PostgreSQL cluster for Airflow's metadata database.

Debian's server package provides the binaries (outside PATH: `pg_config --bindir` or
/usr/lib/postgresql/N/bin); the cluster itself is created with `initdb` under the Airflow home
(.airflow/postgres for the demo, .airflow-test/postgres for the tests), listens on 127.0.0.1 only
on a non-default port with no Unix socket, and is started and stopped by PID like every other
lab process. The package's own cluster on 5432 is never used.

`initdb` and `postgres` refuse to run as root: as root they run as the `postgres` system user
(created by the Debian package) on a data folder that user owns. Authentication is scram-sha-256
with a password generated once and kept beside the data folder (mode 0600).
"""

from __future__ import annotations

import hashlib
import logging
import os
import pwd
import re
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from fleetlab import procs
from fleetkit.core.errors import FleetError

log = logging.getLogger(__name__)

SUPERUSER = "fleet"


class PostgresError(FleetError):
    pass


@dataclass(frozen=True)
class PgSpec:
    """One cluster: `home` holds data/ (the cluster), password, postgres.pid and postgres.log."""

    home: Path
    port: int
    database: str
    #: the address it listens on and is reached at; `netns`: the lab host it runs in (fleetlab.hosts)
    host: str = "127.0.0.1"
    netns: str | None = None

    @property
    def password_file(self) -> Path:
        return self.home / "password"

    @property
    def pid_file(self) -> Path:
        return self.home / "postgres.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "postgres.log"

    @property
    def data_dir(self) -> Path:
        return _data_dir(self.home)

    def password(self) -> str:
        """The superuser's password, generated on first use (so a URL can be built before the
        cluster exists)."""
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            pw = secrets.token_urlsafe(24)
            tmp = self.password_file.with_suffix(".tmp")
            tmp.write_text(pw + "\n")
            os.chmod(tmp, 0o600)
            tmp.replace(self.password_file)
            return pw

    def url(self, driver: str = "psycopg2") -> str:
        return f"postgresql+{driver}://{SUPERUSER}:{self.password()}@{self.host}:{self.port}/{self.database}"


def bindir() -> Path:
    """The folder holding initdb and postgres (Debian keeps them outside PATH)."""
    candidates: list[Path] = []
    env = os.environ.get("FLEET_PG_BINDIR")
    if env:
        candidates.append(Path(env))
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if out.returncode == 0 and out.stdout.strip():
            candidates.append(Path(out.stdout.strip()))

    def version(p: Path) -> int:
        m = re.search(r"/(\d+)/bin$", str(p))
        return int(m.group(1)) if m else 0

    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=version, reverse=True)
    for c in candidates:
        if (c / "initdb").exists() and (c / "postgres").exists():
            return c
    raise PostgresError("the PostgreSQL server is not installed (no initdb/postgres found via pg_config "
                        "--bindir or /usr/lib/postgresql/*/bin): run `make setup`, which installs "
                        "Debian's postgresql package, or set FLEET_PG_BINDIR")


def _server_user() -> pwd.struct_passwd | None:
    """The user the server runs as: None (this user) unless we are root."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(os.environ.get("FLEET_PG_USER", "postgres"))
    except KeyError:
        raise PostgresError("running as root, PostgreSQL needs an unprivileged user to run as, and the "
                            "`postgres` user does not exist: install Debian's postgresql package "
                            "(`make setup`) or set FLEET_PG_USER") from None


def _traversable_by(path: Path, user: pwd.struct_passwd) -> bool:
    for p in [path, *path.parents]:
        try:
            st = p.stat()
        except FileNotFoundError:
            continue
        if st.st_uid == user.pw_uid:
            ok = st.st_mode & 0o100
        elif st.st_gid == user.pw_gid:
            ok = st.st_mode & 0o010
        else:
            ok = st.st_mode & 0o001
        if not ok:
            return False
    return True


def _data_dir(home: Path) -> Path:
    """home/data, unless the server's user cannot reach it (a checkout below a private folder,
    run as root): then a folder in that user's home, named after the checkout, and a note in
    home/data-location so it is found again."""
    user = _server_user()
    wanted = home / "data"
    if user is None or _traversable_by(home, user):
        return wanted
    digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
    return Path(user.pw_dir) / "fleetkit-clusters" / digest


def _popen_user_kwargs() -> dict:
    user = _server_user()
    if user is None:
        return {}
    return {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []}


def _prepare_dir(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True)
    user = _server_user()
    if user is not None:
        os.chown(path, user.pw_uid, user.pw_gid)
    os.chmod(path, 0o700)


def init(spec: PgSpec) -> bool:
    """Create the cluster once. Returns True when it was created now."""
    data = spec.data_dir
    if (data / "PG_VERSION").exists():
        return False
    bins = bindir()
    password = spec.password()
    if data != spec.home / "data":
        log.warning("the server user cannot reach %s; the cluster lives in %s instead", spec.home, data)
        (spec.home / "data-location").write_text(str(data) + "\n")
    if data.exists() and any(data.iterdir()):
        raise PostgresError(f"{data} is not empty but holds no PostgreSQL cluster (no PG_VERSION): "
                            "move it away and try again")
    _prepare_dir(data)
    # the password file must be readable by the server user: a private file inside its own folder
    pwfile = data.parent / f".pw-{os.getpid()}"
    pwfile.write_text(password + "\n")
    user = _server_user()
    if user is not None:
        os.chown(pwfile, user.pw_uid, user.pw_gid)
    os.chmod(pwfile, 0o600)
    try:
        out = subprocess.run(
            [str(bins / "initdb"), "-D", str(data), "-U", SUPERUSER, f"--pwfile={pwfile}",
             "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "--encoding=UTF8", "--locale=C.UTF-8"],
            capture_output=True, text=True, cwd="/", **_popen_user_kwargs())
    finally:
        pwfile.unlink(missing_ok=True)
    if out.returncode != 0:
        raise PostgresError(f"initdb of {data} failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    log.info("created a PostgreSQL cluster in %s", data)
    return True


def _marker(spec: PgSpec) -> str:
    return str(spec.data_dir)


def running(spec: PgSpec) -> int | None:
    return procs.owned_pid(spec.pid_file, _marker(spec))


def up(spec: PgSpec, timeout: float = 60) -> None:
    """Create (once), start and wait for the cluster, then create the database if missing."""
    init(spec)
    if running(spec) is None:
        if procs.port_open(spec.host, spec.port):
            raise PostgresError(f"port {spec.host}:{spec.port} is taken by another process: the PostgreSQL "
                                f"of {spec.home} cannot start there")
        # a postmaster.pid left by a killed server is cleaned up by postgres itself
        argv = [str(bindir() / "postgres"), "-D", str(spec.data_dir), "-p", str(spec.port), *_hba(spec),
                "-c", f"listen_addresses={spec.host}", "-c", "unix_socket_directories=",
                "-c", "max_connections=300", "-c", "shared_buffers=64MB",
                # a lab database: losing the last commits in a crash is fine, a corrupt one is not
                "-c", "synchronous_commit=off"]
        procs.start(argv, spec.pid_file, spec.log_file, cwd="/", netns=spec.netns, **_popen_user_kwargs())
    _wait_ready(spec, timeout)
    ensure_database(spec)


def _hba(spec: PgSpec) -> list[str]:
    """On a lab host (fleetlab.hosts): the clients are the other lab hosts, on the host's own subnet
    (`samenet`), each with the password; initdb's pg_hba.conf takes loopback only."""
    if not spec.netns:
        return []
    hba = spec.data_dir / "fleetlab_hba.conf"
    hba.write_text("# written by fleetlab.postgres: the lab hosts' subnet, password (SCRAM) only\n"
                   "host all all samenet scram-sha-256\n")
    user = _server_user()
    if user is not None:
        os.chown(hba, user.pw_uid, user.pw_gid)
    os.chmod(hba, 0o600)
    return ["-c", f"hba_file={hba}"]


def _connect(spec: PgSpec, dbname: str = "postgres", timeout: int = 3):
    import psycopg2

    return psycopg2.connect(host=spec.host, port=spec.port, user=SUPERUSER, password=spec.password(),
                            dbname=dbname, connect_timeout=timeout)


def _wait_ready(spec: PgSpec, timeout: float) -> None:
    import psycopg2

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        if running(spec) is None:
            raise PostgresError(f"PostgreSQL of {spec.home} exited during start-up; last lines of "
                                f"{spec.log_file}:\n{_tail(spec.log_file)}")
        try:
            _connect(spec, timeout=2).close()
            return
        except psycopg2.OperationalError as e:
            last = str(e).strip()
        time.sleep(0.3)
    raise PostgresError(f"PostgreSQL on {spec.host}:{spec.port} did not accept connections in {timeout:.0f}s "
                        f"({last}); log: {spec.log_file}")


def ensure_database(spec: PgSpec) -> None:
    from psycopg2 import sql

    conn = _connect(spec)
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute("SELECT 1 FROM pg_database WHERE datname = %s", (spec.database,))
            if cur.fetchone() is None:
                cur.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(spec.database)))
                log.info("created database %s", spec.database)
    finally:
        conn.close()


def down(spec: PgSpec, timeout: float = 30) -> str:
    """Fast shutdown (SIGINT: open sessions are ended, no waiting for clients), SIGKILL after
    `timeout`."""
    import signal

    return procs.stop(spec.pid_file, _marker(spec), timeout=timeout, sig=signal.SIGINT)


def remove_relocated(home: Path) -> str:
    """Before a throw-away home (a test's, a benchmark's) is discarded: remove its cluster's data
    when it lives outside the home (_data_dir: in the server user's home), which would otherwise
    outlive it. Refused while that cluster runs. Returns what was done, for the log."""
    home = Path(home)
    data = _data_dir(home)
    if data == home / "data" or not data.exists():
        return "no relocated data"
    spec = PgSpec(home=home, port=0, database="postgres")
    if running(spec) is not None:
        raise PostgresError(f"PostgreSQL of {home} still runs: stop it before removing its data ({data})")
    shutil.rmtree(data)
    return f"removed its data in {data}"


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"

"""A private Redis server: the Celery broker of the cluster profile.

Debian's `redis-server` binary runs with a configuration file written here (never the package's
service or its /etc/redis/redis.conf): bound to 127.0.0.1 on the port plan's port
(fleetlab.ports.PortPlan.redis), no persistence (a broker of a lab: queued task messages are
re-sent by the scheduler after a restart), in the foreground (`daemonize no`) so it is started
and stopped by PID like every other lab process, working folder and log under its own home
(.airflow/cluster/redis for the demo, .airflow-test/cluster/redis for the tests).
"""

from __future__ import annotations

import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from fleetkit.core.errors import FleetError
from fleetlab import procs


class RedisError(FleetError):
    pass


@dataclass(frozen=True)
class RedisSpec:
    home: Path
    port: int
    #: the address it binds and is reached at; `netns`: the lab host it runs in (fleetlab.hosts)
    host: str = "127.0.0.1"
    netns: str | None = None

    @property
    def config_file(self) -> Path:
        return self.home / "redis.conf"

    @property
    def pid_file(self) -> Path:
        return self.home / "redis.pid"

    @property
    def log_file(self) -> Path:
        return self.home / "redis.log"

    @property
    def password_file(self) -> Path:
        return self.home / "password"

    def password(self) -> str | None:
        """On a lab host (reached over the lab's network) Redis requires a password, generated once
        (0600 beside the config); on loopback none (protected mode keeps it local)."""
        if not self.netns:
            return None
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            return self.password_file.read_text().strip()
        except FileNotFoundError:
            import secrets

            pw = secrets.token_urlsafe(24)
            with os.fdopen(os.open(self.password_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
                f.write(pw + "\n")
            return pw

    def url(self, db: int = 0) -> str:
        """The broker URL (with the password, when there is one: give it through the environment only)."""
        pw = self.password()
        return f"redis://{':' + pw + '@' if pw else ''}{self.host}:{self.port}/{db}"

    @property
    def where(self) -> str:
        """host:port, for messages (never the URL: it may hold the password)."""
        return f"{self.host}:{self.port}"


def binary() -> str:
    found = shutil.which("redis-server") or ("/usr/bin/redis-server" if Path("/usr/bin/redis-server").exists() else None)
    if not found:
        raise RedisError("redis-server is not installed (the Celery broker of the cluster profile): run "
                         "`make setup`, which installs Debian's redis-server package")
    return found


def config_text(spec: RedisSpec) -> str:
    """The server's whole configuration."""
    return "\n".join([
        "# written by fleetlab.redis_server: the Celery broker of the cluster profile",
        f"bind {spec.host}",
        f"port {spec.port}",
        "protected-mode yes",
        *([f"requirepass {spec.password()}"] if spec.password() else []),
        "daemonize no",
        # the command line keeps the config path: it is how the PID file is checked to be ours
        "set-proc-title no",
        'save ""',
        "appendonly no",
        f"dir {spec.home}",
        'logfile ""',  # standard output, appended to redis.log
        "databases 4",
        "",
    ])


def _marker(spec: RedisSpec) -> str:
    return str(spec.config_file)


def running(spec: RedisSpec) -> int | None:
    return procs.owned_pid(spec.pid_file, _marker(spec))


def ping(spec: RedisSpec, timeout: float = 1.0) -> bool:
    import redis

    try:
        return bool(redis.Redis(host=spec.host, port=spec.port, password=spec.password(), socket_timeout=timeout,
                                socket_connect_timeout=timeout).ping())
    except redis.RedisError:
        return False


def up(spec: RedisSpec, timeout: float = 30) -> int:
    """Start the server (unless ours already runs) and wait until it answers PING. Returns its PID."""
    pid = running(spec)
    if pid is None:
        if procs.port_open(spec.host, spec.port):
            raise RedisError(f"port {spec.host}:{spec.port} is taken by another process: the Redis of "
                             f"{spec.home} cannot start there")
        spec.home.mkdir(parents=True, exist_ok=True)
        with os.fdopen(os.open(spec.config_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as f:
            f.write(config_text(spec))  # 0600: it may hold the password
        pid = procs.start([binary(), str(spec.config_file)], spec.pid_file, spec.log_file, cwd=str(spec.home),
                          netns=spec.netns)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if running(spec) is None:
            raise RedisError(f"redis-server of {spec.home} exited during start-up; last lines of "
                             f"{spec.log_file}:\n{_tail(spec.log_file)}")
        if ping(spec):
            return pid
        time.sleep(0.2)
    raise RedisError(f"redis-server on {spec.host}:{spec.port} did not answer PING in {timeout:.0f}s; "
                     f"log: {spec.log_file}")


def down(spec: RedisSpec, timeout: float = 15) -> str:
    """SIGTERM (Redis exits at once: nothing to save), SIGKILL after `timeout`."""
    return procs.stop(spec.pid_file, _marker(spec), timeout=timeout, sig=signal.SIGTERM)


def _tail(path: Path, n: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"

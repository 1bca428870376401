"""Start and stop local server processes by PID file (never by name)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a zombie child counts as gone
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().split(b")")[-1].split()[0] != b"Z"
    except OSError:
        return True


def read_pid(pid_file: Path) -> int | None:
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def owned_pid(pid_file: Path, marker: str) -> int | None:
    """The PID in pid_file if that process is alive and its command line holds `marker`.

    The marker (e.g. the lab folder) guards against signalling an unrelated process that reused
    a stale PID.
    """
    pid = read_pid(pid_file)
    if pid is None or not pid_alive(pid):
        return None
    if marker:
        # the Java launcher may re-exec itself right after start: its cmdline reads empty for a
        # moment, so an empty read is retried before it counts as "not ours"
        for _ in range(20):
            line = cmdline(pid)
            if line or not pid_alive(pid):
                break
            time.sleep(0.05)
        if marker not in line:
            return None
    return pid


def start(argv: list[str], pid_file: Path, log_file: Path, env: dict | None = None,
          cwd: str | None = None) -> int:
    log_file.parent.mkdir(parents=True, exist_ok=True)
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True)
    pid_file.write_text(str(proc.pid))
    return proc.pid


def stop(pid_file: Path, marker: str, timeout: float = 30.0) -> str:
    """SIGTERM the process in pid_file, SIGKILL after `timeout`. Returns what happened."""
    pid = owned_pid(pid_file, marker)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return "not running"
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            _reap(pid)
            pid_file.unlink(missing_ok=True)
            return f"stopped (pid {pid})"
        time.sleep(0.2)
    os.kill(pid, signal.SIGKILL)
    for _ in range(50):
        if not pid_alive(pid):
            break
        time.sleep(0.1)
    _reap(pid)
    pid_file.unlink(missing_ok=True)
    return f"killed after {timeout:.0f}s (pid {pid})"


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_port_free(host: str, port: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not port_open(host, port, 0.2):
            return True
        time.sleep(0.2)
    return False

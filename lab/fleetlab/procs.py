"""Start and stop local server processes by PID file (never by name)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from pathlib import Path


def jvm_flags(default: tuple[str, ...] = ()) -> list[str]:
    """The GC and JIT flags of a lab JVM (Kafka, ZooKeeper, the Spark cluster's daemons and
    executors): FLEET_LAB_JVM_OPTS (space-separated) when set, in place of `default`. The tests set
    it to the serial GC and the quick JIT only: their labs start and stop many times and idle in
    between, where those cost a fraction of the CPU. Unset (the demo, the benchmarks): `default`."""
    extra = os.environ.get("FLEET_LAB_JVM_OPTS")
    return extra.split() if extra is not None else list(default)


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


def in_netns(argv: list[str], netns: str | None, popen_kwargs: dict) -> list[str]:
    """argv run inside the network namespace `netns` (a lab host, fleetlab.hosts): `ip netns exec`
    enters it and execs argv, so the PID stays the one recorded. Dropping root (popen's user= /
    group=) then happens after entering, with setpriv: `ip netns exec` itself needs root."""
    if not netns:
        return argv
    user, group = popen_kwargs.pop("user", None), popen_kwargs.pop("group", None)
    popen_kwargs.pop("extra_groups", None)
    drop = (["setpriv", f"--reuid={user}", f"--regid={group if group is not None else user}", "--clear-groups"]
            if user is not None else [])
    return ["ip", "netns", "exec", netns, *drop, *argv]


def start(argv: list[str], pid_file: Path, log_file: Path, env: dict | None = None,
          cwd: str | None = None, netns: str | None = None, **popen_kwargs) -> int:
    """Start argv in its own session (so its PID is also its process group's id), output appended
    to log_file. popen_kwargs go to subprocess.Popen (user=/group= to drop root, say); `netns`: run
    it inside that lab host's network namespace."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    argv = in_netns(argv, netns, popen_kwargs)
    with open(log_file, "ab") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True, **popen_kwargs)
    pid_file.write_text(str(proc.pid))
    return proc.pid


def group_members(pgid: int) -> list[int]:
    """Live processes whose process group is `pgid` (what start() launched and its children)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # fields after the command: state, ppid, pgrp, ...
        if int(fields[2]) == pgid and fields[0] != b"Z":
            members.append(int(entry.name))
    return members


def stop(pid_file: Path, marker: str, timeout: float = 30.0, sig: int = signal.SIGTERM,
         group: bool = False) -> str:
    """Send `sig` (SIGTERM) to the process in pid_file, SIGKILL after `timeout`. Returns what
    happened.

    With group=True the process's own group (start() makes it a session leader, so the group id
    is the PID we recorded) is stopped too: children it left behind (Airflow's LocalExecutor
    workers, say) get SIGTERM once the leader is gone and SIGKILL after a short grace."""
    pid = owned_pid(pid_file, marker)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return "not running"
    os.kill(pid, sig)
    deadline = time.monotonic() + timeout
    result = None
    while time.monotonic() < deadline:
        if not pid_alive(pid):
            _reap(pid)
            result = f"stopped (pid {pid})"
            break
        time.sleep(0.2)
    if result is None:
        _kill(pid, group)
        for _ in range(50):
            if not pid_alive(pid):
                break
            time.sleep(0.1)
        _reap(pid)
        result = f"killed after {timeout:.0f}s (pid {pid})"
    if group:
        left = group_members(pid)
        if left:
            _signal_group(pid, signal.SIGTERM)
            grace = time.monotonic() + 10
            while group_members(pid) and time.monotonic() < grace:
                time.sleep(0.2)
            if group_members(pid):
                _signal_group(pid, signal.SIGKILL)
            result += f", {len(left)} left-behind child process(es) of its group stopped"
    pid_file.unlink(missing_ok=True)
    return result


def _kill(pid: int, group: bool) -> None:
    if group:
        _signal_group(pid, signal.SIGKILL)
    else:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


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


def memory_mb(pid: int) -> tuple[float, float] | None:
    """(resident, peak resident) of a live process in MiB, from /proc/<pid>/status (VmRSS, VmHWM)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0]) / 1024
    if "VmRSS" not in values:
        return None
    return values["VmRSS"], values.get("VmHWM", values["VmRSS"])

"""An OpenSSH server in a lab host, so the toolkit reaches a broker's host the way production does
(`access: ssh` in the fleet file: the trim's file work and broker_control over SSH).

Debian's /usr/sbin/sshd, run in the foreground (`sshd -D -e -f <its own config>`) inside the lab
host's network namespace (`ip netns exec`, as fleetlab.hosts.Hosts.run starts a process there),
listening on that host's address only. Everything it uses lives in its folder under the lab:
its own host key, a client key generated for the toolkit, the authorized_keys holding only that
key, its config (key-only login of the user running the lab, no passwords, no forwarding, SFTP
in-process), its log and PID file. Nothing system-wide changes: no user is created, /etc/ssh is
neither read nor written, no service is started. sshd insists on its privilege-separation folder
/run/sshd, which a machine without a running OpenSSH service lacks: the server gets it inside a
mount namespace of its own (a private tmpfs on /run holding /run/sshd, the lab hosts' /run/netns
bound back), so the machine's /run is never touched. Stopped by PID (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import getpass
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from fleetkit.core.errors import LabError

SSHD = "/usr/sbin/sshd"
PORT = 22

#: run in the server's own mount namespace before exec'ing sshd: /run/sshd on a private tmpfs
BOOT = r"""
import os, subprocess, sys
if not os.path.isdir("/run/sshd"):
    keep = os.path.join(sys.argv[1], "netns-mount")
    os.makedirs(keep, exist_ok=True)
    def mount(*args):
        subprocess.run(["mount", *args], check=True)
    has_netns = os.path.isdir("/run/netns")
    if has_netns:
        mount("--rbind", "/run/netns", keep)
    mount("-t", "tmpfs", "-o", "mode=0755,size=1m", "fleetlab-sshd", "/run")
    os.mkdir("/run/sshd", 0o755)
    if has_netns:
        os.mkdir("/run/netns", 0o755)
        mount("--move", keep, "/run/netns")
os.execv(sys.argv[2], sys.argv[2:])
"""


@dataclass
class Sshd:
    """One lab host's sshd: `folder` its files, `address` / `netns` the lab host's."""

    folder: Path
    address: str
    netns: str | None
    port: int = PORT
    user: str = ""

    def __post_init__(self):
        self.folder = Path(self.folder)
        self.user = self.user or getpass.getuser()

    @property
    def host_key(self) -> Path:
        return self.folder / "ssh_host_ed25519_key"

    @property
    def client_key(self) -> Path:
        return self.folder / "client_ed25519_key"

    @property
    def pid_file(self) -> Path:
        return self.folder / "sshd.pid"

    @property
    def log_file(self) -> Path:
        return self.folder / "sshd.log"

    @property
    def config_file(self) -> Path:
        return self.folder / "sshd_config"

    def host_key_line(self) -> str:
        """The host's public key as a connection pins it: "ssh-ed25519 AAAA..." (no comment)."""
        return " ".join(Path(f"{self.host_key}.pub").read_text().split()[:2])

    def ensure_keys(self) -> None:
        """The host key and the toolkit's client key (generated once, kept in the folder, 0600)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        os.chmod(self.folder, 0o700)
        for key in (self.host_key, self.client_key):
            if not key.exists():
                out = subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fleetlab", "-f", str(key)],
                                     capture_output=True, text=True, stdin=subprocess.DEVNULL)
                if out.returncode != 0:
                    raise LabError(f"ssh-keygen for {key} failed: {out.stderr.strip()}")
        (self.folder / "authorized_keys").write_text(Path(f"{self.client_key}.pub").read_text())

    def config(self) -> str:
        f = self.folder
        return "\n".join([
            f"Port {self.port}",
            f"ListenAddress {self.address}",
            f"HostKey {self.host_key}",
            f"PidFile {self.pid_file}",
            f"AuthorizedKeysFile {f / 'authorized_keys'}",
            f"AllowUsers {self.user}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "PermitRootLogin prohibit-password",
            "UsePAM no",
            "StrictModes no",  # its files sit in the lab folder, below /tmp, not in a home folder
            "AllowTcpForwarding no",
            "AllowAgentForwarding no",
            "X11Forwarding no",
            "PermitTunnel no",
            "PermitUserEnvironment no",
            "PrintMotd no",
            "Subsystem sftp internal-sftp",
            "LogLevel INFO",
        ]) + "\n"

    def running(self) -> int | None:
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read()  # sshd rewrites its title: "sshd: /usr/sbin/sshd -D -e -f <config> [listener] ..."
        except OSError:
            return None
        return pid if str(self.config_file).encode() in cmd else None

    def start(self, timeout: float = 20.0) -> int:
        """Start the server (its keys first) inside the lab host; its PID once it accepts connections."""
        pid = self.running()
        if pid:
            return pid
        self.ensure_keys()
        self.config_file.write_text(self.config())
        argv = ["unshare", "--mount", "--propagation", "slave",
                sys.executable, "-c", BOOT, str(self.folder), SSHD, "-D", "-e", "-f", str(self.config_file)]
        if self.netns:
            argv = ["ip", "netns", "exec", self.netns, *argv]
        with open(self.log_file, "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    start_new_session=True)
        self.pid_file.write_text(str(proc.pid))  # every step execs: this is sshd's PID
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise LabError(f"sshd of {self.address} exited with {proc.returncode}: "
                               f"{self.log_file.read_text()[-1500:].strip()}")
            if _port_open(self.address, self.port):
                return proc.pid
            time.sleep(0.1)
        self.stop()
        raise LabError(f"sshd of {self.address} does not listen on port {self.port} after {timeout:.0f} s "
                       f"({self.log_file})")

    def stop(self, timeout: float = 10.0) -> str:
        pid = self.running()
        if pid is None:
            self.pid_file.unlink(missing_ok=True)
            return "not running"
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.1)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
        try:
            os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            pass
        self.pid_file.unlink(missing_ok=True)
        return f"stopped (pid {pid})"

    def connection(self) -> dict:
        """An Airflow connection (type ssh) reaching this host as the lab's user, with the client
        key's file and the host key pinned."""
        return {"conn_type": "ssh", "host": self.address, "port": self.port, "login": self.user,
                "extra": {"key_file": str(self.client_key), "host_key": self.host_key_line()}}

    def connection_json(self) -> str:
        return json.dumps(self.connection())


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _port_open(host: str, port: int) -> bool:
    import socket

    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False

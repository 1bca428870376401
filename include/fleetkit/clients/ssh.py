"""SSH to a broker host (paramiko): commands as argv lists and SFTP, for the brokers a fleet file
reaches with `access: ssh` (their files: clients/broker_files.SshBrokerFiles; their
broker_control commands: clients/broker_control.CommandBrokerControl).

Built from `SshSettings`, a plain settings object (no Airflow here; the adapter
fleet_airflow.clusters turns an Airflow connection of type ssh into one with
`connection_settings`). Rules:

* the host key is always verified: the connection pins the host's public key(s) (`host_key`),
  paramiko's RejectPolicy refuses any other, and a connection without one is refused before a
  byte is sent. A missing or wrong host key is a one-line SshError naming the connection and the
  host, never accepted;
* key authentication only (a private key given as text or as a key file, optionally with a
  passphrase); no agent, no ~/.ssh lookups;
* a command is an argv list joined with shlex.join: every element reaches the remote shell as one
  quoted word, so no name from a cluster or a fleet file is ever interpreted by it;
* every command has a timeout; a failure carries the last lines of its stderr; no secret (key,
  passphrase) is ever in a message, a log line or a repr.
"""

from __future__ import annotations

import base64
import io
import logging
import shlex
import socket
import time
from dataclasses import dataclass, field

from fleetkit.core.errors import FleetConfigError, FleetError

log = logging.getLogger(__name__)

DEFAULT_PORT = 22
DEFAULT_CONNECT_TIMEOUT = 15.0
DEFAULT_COMMAND_TIMEOUT = 600.0
#: stderr lines an error message keeps
TAIL_LINES = 10


class SshError(FleetError):
    """An SSH connection or a command over it failed (one line naming the connection and the host)."""


@dataclass(frozen=True)
class SshSettings:
    """How to reach one broker host. `host_keys`: the host's public key(s), each "<type> <base64>"
    (as in known_hosts, without the host name) or a bare base64 blob. The secrets (private_key,
    passphrase) are kept out of repr."""

    conn_id: str
    host: str
    username: str
    port: int = DEFAULT_PORT
    private_key: str | None = field(default=None, repr=False)
    key_file: str | None = None
    passphrase: str | None = field(default=None, repr=False)
    host_keys: tuple[str, ...] = ()
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    command_timeout: float = DEFAULT_COMMAND_TIMEOUT

    @property
    def where(self) -> str:
        return f"ssh connection {self.conn_id!r} ({self.username}@{self.host}:{self.port})"


# -- an Airflow-shaped connection (type ssh) to settings ------------------------------------------
#: extras of the Airflow SSH provider this client understands; the others it names are refused
#: only where they would weaken the host key check (no_host_key_check, allow_host_key_change)
KNOWN_EXTRAS = {"private_key", "key_file", "private_key_passphrase", "host_key", "conn_timeout", "timeout",
                "cmd_timeout", "look_for_keys", "compress", "disabled_algorithms", "ciphers", "keepalive_interval",
                "banner_timeout", "auth_timeout"}


def _true(value) -> bool:
    return str(value).strip().lower() in ("true", "1", "yes", "on")


def connection_settings(conn_id: str, host: str | None, port: int | None, login: str | None, password: str | None,
                        extra: dict | None, conn_type: str | None = "ssh") -> SshSettings:
    """SshSettings from an Airflow connection's fields, as the Airflow SSH provider names its extras
    (`private_key` PEM text or `key_file`, `private_key_passphrase`, `host_key`, `conn_timeout`,
    `cmd_timeout`). Key-only: a password is refused, as are `no_host_key_check` and
    `allow_host_key_change` set true. FleetConfigError naming the connection and the field."""
    where = f"ssh connection {conn_id!r}"
    extra = dict(extra or {})
    if conn_type not in (None, "", "ssh"):
        raise FleetConfigError(f"{where}: connection type is {conn_type!r}, expected 'ssh'")
    if not host:
        raise FleetConfigError(f"{where}: host is empty (the broker host's name or address)")
    if not login:
        raise FleetConfigError(f"{where}: login is empty (the user the toolkit logs in as on the broker host)")
    if password:
        raise FleetConfigError(f"{where}: holds a password; broker hosts are reached with a key only "
                               "(extra private_key or key_file): remove the password")
    for flag in ("no_host_key_check", "allow_host_key_change"):
        if _true(extra.get(flag, False)):
            raise FleetConfigError(f"{where}: extra {flag} is true; the toolkit always verifies the broker host's "
                                   "key: set it false and give the host's public key as extra host_key")
    unknown = sorted(set(extra) - KNOWN_EXTRAS - {"no_host_key_check", "allow_host_key_change"})
    if unknown:
        raise FleetConfigError(f"{where}: unknown extra field(s) {unknown} (known: {sorted(KNOWN_EXTRAS)})")
    private_key, key_file = extra.get("private_key") or None, extra.get("key_file") or None
    if not private_key and not key_file:
        raise FleetConfigError(f"{where}: no key: give extra private_key (the PEM text) or key_file (its path)")
    if private_key and key_file:
        raise FleetConfigError(f"{where}: give one of extra private_key and key_file, not both")
    raw_keys = extra.get("host_key") or ""
    if isinstance(raw_keys, (list, tuple)):
        raw_keys = "\n".join(raw_keys)
    host_keys = tuple(ln.strip() for ln in str(raw_keys).splitlines() if ln.strip())
    if not host_keys:
        raise FleetConfigError(f"{where}: no extra host_key: give the broker host's public key "
                               "(e.g. the content of /etc/ssh/ssh_host_ed25519_key.pub without its comment)")
    for k in host_keys:
        host_key_object(k, where)  # refuses a malformed one now, with the connection named

    def number(name: str, default: float) -> float:
        value = extra.get(name, default)
        try:
            out = float(value)
        except (TypeError, ValueError):
            raise FleetConfigError(f"{where}: extra {name} must be a number of seconds, got {value!r}") from None
        if out <= 0:
            raise FleetConfigError(f"{where}: extra {name} must be positive, got {value!r}")
        return out

    try:
        port_ = int(port) if port not in (None, "") else DEFAULT_PORT
    except (TypeError, ValueError):
        raise FleetConfigError(f"{where}: port must be a number, got {port!r}") from None
    return SshSettings(conn_id=conn_id, host=str(host), username=str(login), port=port_,
                       private_key=private_key, key_file=key_file,
                       passphrase=extra.get("private_key_passphrase") or None, host_keys=host_keys,
                       connect_timeout=number("conn_timeout", number("timeout", DEFAULT_CONNECT_TIMEOUT)),
                       command_timeout=number("cmd_timeout", DEFAULT_COMMAND_TIMEOUT))


def host_key_object(text: str, where: str):
    """A paramiko PKey of one pinned host key ("<type> <base64>" or bare base64)."""
    import paramiko

    parts = text.split()
    blob_text = parts[1] if len(parts) >= 2 else parts[0]
    try:
        blob = base64.b64decode(blob_text.encode(), validate=True)
        key_type = paramiko.Message(blob).get_text()
        if len(parts) >= 2 and parts[0] != key_type:
            raise ValueError(f"says {parts[0]} but holds a {key_type} key")
        return paramiko.PKey.from_type_string(key_type, blob)
    except Exception as e:  # noqa: BLE001 (binascii, paramiko's own, UnknownKeyType)
        raise FleetConfigError(f"{where}: host_key {text[:40]!r}... is not a public key paramiko reads: "
                               f"{type(e).__name__}: {e}") from None


def fingerprint(key) -> str:
    return f"{key.get_name()} {key.fingerprint}"


def command_line(argv: list[str] | tuple[str, ...]) -> str:
    """The one string sent to the remote shell: each argv element quoted (shlex.join)."""
    if not isinstance(argv, (list, tuple)) or not argv or not all(isinstance(a, str) for a in argv):
        raise ValueError(f"a command is a non-empty list of strings, got {argv!r}")
    return shlex.join(argv)


@dataclass
class Result:
    argv: list[str]
    returncode: int
    stdout: bytes
    stderr: bytes

    @property
    def text(self) -> str:
        return self.stdout.decode(errors="replace")

    def tail(self) -> str:
        err = self.stderr.decode(errors="replace").strip() or self.stdout.decode(errors="replace").strip()
        return "\n".join(err.splitlines()[-TAIL_LINES:])


class SshSession:
    """One SSH connection to a broker host: `run` / `check` for commands, `sftp` for files. Opens
    on first use; reopens when the transport died (a long wait while a broker restarts)."""

    def __init__(self, settings: SshSettings):
        self.settings = settings
        self._client = None
        self._sftp = None

    def __repr__(self) -> str:
        return f"SshSession({self.settings.where})"

    # -- connecting -------------------------------------------------------------------------------
    def _pkey(self):
        import paramiko

        s = self.settings
        if s.private_key:
            text = s.private_key
        else:
            try:
                with open(s.key_file) as f:
                    text = f.read()
            except FileNotFoundError:
                raise SshError(f"{s.where}: key_file {s.key_file} does not exist") from None
            except (OSError, UnicodeDecodeError) as e:
                raise SshError(f"{s.where}: key_file {s.key_file} cannot be read: {type(e).__name__}") from None
        for cls in (paramiko.Ed25519Key, paramiko.ECDSAKey, paramiko.RSAKey):
            try:
                return cls.from_private_key(io.StringIO(text), password=s.passphrase)
            except paramiko.PasswordRequiredException:
                raise SshError(f"{s.where}: the private key is encrypted and no private_key_passphrase is "
                               "given") from None
            except (paramiko.SSHException, ValueError, TypeError, IndexError):
                continue
        raise SshError(f"{s.where}: the private key cannot be read (not an Ed25519, ECDSA or RSA private key, "
                       "or a wrong passphrase)")

    def client(self):
        import paramiko

        if self._client is not None and self._client.get_transport() is not None \
                and self._client.get_transport().is_active():
            return self._client
        self.close()
        s = self.settings
        if not s.host_keys:
            raise SshError(f"{s.where}: no host key pinned for {s.host}: refusing to connect (give the host's "
                           "public key as the connection's extra host_key)")
        client = paramiko.SSHClient()
        client.set_missing_host_key_policy(paramiko.RejectPolicy())
        name = s.host if s.port == DEFAULT_PORT else f"[{s.host}]:{s.port}"
        pinned = [host_key_object(k, s.where) for k in s.host_keys]
        for key in pinned:
            client.get_host_keys().add(name, key.get_name(), key)
        pkey = self._pkey()
        try:
            client.connect(s.host, port=s.port, username=s.username, pkey=pkey, timeout=s.connect_timeout,
                           banner_timeout=s.connect_timeout, auth_timeout=s.connect_timeout,
                           allow_agent=False, look_for_keys=False)
        except paramiko.BadHostKeyException as e:
            client.close()
            raise SshError(f"{s.where}: host {s.host}:{s.port} presented host key {fingerprint(e.key)}, not the "
                           f"pinned {', '.join(fingerprint(k) for k in pinned)}: refusing to connect "
                           "(a changed host or a man in the middle)") from None
        except paramiko.SSHException as e:
            client.close()
            text = str(e)
            if "not found in known_hosts" in text:  # RejectPolicy: the host offered no key of a pinned type
                raise SshError(f"{s.where}: host {s.host}:{s.port} offered no host key of the pinned type(s) "
                               f"({', '.join(k.get_name() for k in pinned)}): refusing to connect") from None
            if isinstance(e, paramiko.AuthenticationException):
                raise SshError(f"{s.where}: host {s.host}:{s.port} refused the key of user {s.username!r}") from None
            raise SshError(f"{s.where}: {type(e).__name__}: {text.splitlines()[0] if text else ''}") from None
        except (socket.timeout, TimeoutError):
            client.close()
            raise SshError(f"{s.where}: no answer from {s.host}:{s.port} within {s.connect_timeout:.0f} s") from None
        except OSError as e:
            client.close()
            raise SshError(f"{s.where}: cannot connect to {s.host}:{s.port}: {e.strerror or e}") from None
        client.get_transport().set_keepalive(15)
        self._client = client
        return client

    def close(self) -> None:
        if self._sftp is not None:
            try:
                self._sftp.close()
            except Exception:  # noqa: BLE001 (closing a dead channel)
                pass
            self._sftp = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def __enter__(self) -> "SshSession":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- commands ---------------------------------------------------------------------------------
    def run(self, argv: list[str], timeout: float | None = None, stdin: bytes | None = None) -> Result:
        """Run argv on the host (quoted: command_line), wait for it at most `timeout` seconds (the
        connection's cmd_timeout by default). SshError when it cannot run or outlives the timeout."""
        line = command_line(argv)
        timeout = self.settings.command_timeout if timeout is None else timeout
        client = self.client()
        chan = client.get_transport().open_session(timeout=self.settings.connect_timeout)
        try:
            chan.settimeout(1.0)
            chan.exec_command(line)
            if stdin:
                chan.sendall(stdin)
            chan.shutdown_write()
            out, err = bytearray(), bytearray()
            deadline = time.monotonic() + timeout
            while True:
                while chan.recv_ready():
                    out += chan.recv(65536)
                while chan.recv_stderr_ready():
                    err += chan.recv_stderr(65536)
                if chan.exit_status_ready() and not chan.recv_ready() and not chan.recv_stderr_ready():
                    break
                if time.monotonic() > deadline:
                    raise SshError(f"{self.settings.where}: {line} did not finish within {timeout:.0f} s")
                time.sleep(0.02)
            rc = chan.recv_exit_status()
        finally:
            chan.close()
        return Result(list(argv), rc, bytes(out), bytes(err))

    def check(self, argv: list[str], timeout: float | None = None, what: str | None = None) -> Result:
        """run, and SshError (with the stderr tail) unless it exits 0."""
        res = self.run(argv, timeout=timeout)
        if res.returncode != 0:
            tail = res.tail()
            raise SshError(f"{what or self.settings.where}: {command_line(argv)} failed with exit code "
                           f"{res.returncode} on {self.settings.host}" + (f"\n{tail}" if tail else ""))
        return res

    # -- files ------------------------------------------------------------------------------------
    def sftp(self):
        """The session's SFTP client (stat, listdir, open, rename, mkdir, remove)."""
        if self._sftp is None or self._client is None or not self._client.get_transport().is_active():
            self._sftp = self.client().open_sftp()
            self._sftp.get_channel().settimeout(self.settings.command_timeout)
        return self._sftp

"""SSH to broker hosts, the pure parts: a command's argv quoted for the remote shell (no element is
ever interpreted by it), an Airflow ssh connection turned into settings (key only, the host key
pinned, the flags that would weaken it refused in one line), no secret in a repr or an error, and
a broker with access: ssh never reached without its connection."""

from __future__ import annotations

import shlex
import subprocess

import paramiko
import pytest

from fleetkit.clients.broker_control import BrokerControlError, control_for
from fleetkit.clients.broker_hosts import BrokerHosts
from fleetkit.clients.broker_files import LocalBrokerFiles, SshBrokerFiles
from fleetkit.clients.ssh import SshSession, SshSettings, command_line, connection_settings
from fleetkit.core.errors import FleetConfigError
from fleetkit.core.fleet import Broker, BrokerControlSettings

HOSTILE = ["$(touch /tmp/x)", "a;b", "it's", 'say "hi"', "`id`", "x|y&z", "back\\slash", "new\nline", "*", "~",
           "", " lead", "$HOME", "a>b"]


@pytest.mark.parametrize("arg", HOSTILE)
def test_every_argv_element_reaches_the_remote_shell_as_one_word(arg, tmp_path):
    """What the remote shell sees (POSIX sh, as sshd runs it) is exactly the argv given."""
    marker = tmp_path / "marker"
    line = command_line(["printf", "%s\\0", arg, f"$(touch {marker})"])
    out = subprocess.run(["sh", "-c", line], capture_output=True, check=True).stdout
    assert out.split(b"\0")[:-1] == [arg.encode(), f"$(touch {marker})".encode()]
    assert not marker.exists()
    assert shlex.split(line) == ["printf", "%s\\0", arg, f"$(touch {marker})"]


def test_a_command_is_a_list_of_strings():
    for bad in ([], "ls -l", ["ls", 3], None):
        with pytest.raises(ValueError):
            command_line(bad)


def _pub(key) -> str:
    return f"{key.get_name()} {key.get_base64()}"


@pytest.fixture(scope="module")
def host_key():
    return paramiko.Ed25519Key.from_private_key(__import__("io").StringIO(_ed25519_pem()))


def _ed25519_pem() -> str:
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    return Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                      serialization.NoEncryption()).decode()


def test_an_airflow_ssh_connection_becomes_settings(host_key):
    pem = _ed25519_pem()
    s = connection_settings("b0_ssh", "10.1.2.3", 2222, "kafka-ops", None,
                            {"private_key": pem, "host_key": _pub(host_key), "conn_timeout": "5", "cmd_timeout": 30})
    assert (s.host, s.port, s.username, s.connect_timeout, s.command_timeout) == \
        ("10.1.2.3", 2222, "kafka-ops", 5.0, 30.0)
    assert s.host_keys == (_pub(host_key),) and s.private_key == pem
    assert pem not in repr(s) and "private_key=" not in repr(s)
    # key_file, several host keys (one per line), a bare base64 blob, the default port
    s = connection_settings("b1_ssh", "h", None, "u", "", {"key_file": "/keys/id", "private_key_passphrase": "pp",
                                                          "host_key": f"{_pub(host_key)}\n{host_key.get_base64()}",
                                                          "no_host_key_check": "false"})
    assert s.port == 22 and s.key_file == "/keys/id" and len(s.host_keys) == 2 and "pp" not in repr(s)


@pytest.mark.parametrize("change, expected", [
    ({"password": "secret"}, "holds a password; broker hosts are reached with a key only"),
    ({"extra": {"no_host_key_check": True}}, "extra no_host_key_check is true"),
    ({"extra": {"allow_host_key_change": "true"}}, "extra allow_host_key_change is true"),
    ({"extra": {"host_key": ""}}, "no extra host_key"),
    ({"extra": {"host_key": "ssh-ed25519 not-base64!"}}, "host_key 'ssh-ed25519 not-base64!'"),
    ({"extra": {"private_key": None}}, "no key: give extra private_key"),
    ({"extra": {"key_file": "/k"}}, "give one of extra private_key and key_file"),
    ({"extra": {"proxy_command": "nc %h %p"}}, "unknown extra field(s) ['proxy_command']"),
    ({"extra": {"cmd_timeout": "soon"}}, "extra cmd_timeout must be a number"),
    ({"host": ""}, "host is empty"),
    ({"login": None}, "login is empty"),
    ({"port": "ssh"}, "port must be a number"),
    ({"conn_type": "http"}, "connection type is 'http'"),
])
def test_a_connection_that_would_weaken_the_check_or_is_incomplete_is_refused(host_key, change, expected):
    pem = _ed25519_pem()
    args = {"host": "h", "port": 22, "login": "u", "password": None, "conn_type": "ssh",
            "extra": {"private_key": pem, "host_key": _pub(host_key)}}
    extra = dict(args["extra"], **change.pop("extra", {}))
    args.update(change, extra={k: v for k, v in extra.items() if v is not None})
    with pytest.raises(FleetConfigError) as e:
        connection_settings("b0_ssh", args["host"], args["port"], args["login"], args["password"], args["extra"],
                            args["conn_type"])
    msg = str(e.value)
    assert msg.startswith("ssh connection 'b0_ssh'") and expected in msg and "\n" not in msg
    assert pem not in msg and "secret" not in msg


def test_a_key_that_cannot_be_read_is_named_without_its_content(host_key, tmp_path):
    pem = _ed25519_pem()
    s = SshSettings("b0_ssh", "127.0.0.1", "u", private_key=pem.replace("A", "B", 5), host_keys=(_pub(host_key),))
    with pytest.raises(Exception) as e:
        SshSession(s)._pkey()
    assert "b0_ssh" in str(e.value) and "cannot be read" in str(e.value) and "BEGIN" not in str(e.value)
    s = SshSettings("b0_ssh", "127.0.0.1", "u", key_file=str(tmp_path / "nope"), host_keys=(_pub(host_key),))
    with pytest.raises(Exception, match="key_file .* does not exist"):
        SshSession(s)._pkey()


class FakeCluster:
    def __init__(self, brokers, control=None):
        self.name, self.brokers, self.broker_control = "c1", brokers, control


def test_a_broker_with_access_ssh_is_never_reached_without_its_connection(tmp_path):
    cluster = FakeCluster([Broker(0, (str(tmp_path / "d0"),)), Broker(1, ("/var/lib/kafka/data",), "ssh", "b1_ssh")],
                          BrokerControlSettings(stop=("true",), start=("true",), cwd=str(tmp_path)))
    hosts = BrokerHosts(cluster)
    assert isinstance(hosts.files(0), LocalBrokerFiles) and isinstance(hosts.files(7), LocalBrokerFiles)
    with pytest.raises(FleetConfigError, match="broker 1 is access: ssh .*'b1_ssh'.* no way to resolve"):
        hosts.files(1)
    control = control_for(cluster)
    control.stop(0)  # a local broker: its command runs here
    with pytest.raises(FleetConfigError, match="broker 1 is access: ssh"):
        control.stop(1)  # never here instead of on its host
    seen = []
    hosts = BrokerHosts(cluster, lambda conn_id: seen.append(conn_id) or SshSettings(conn_id, "h", "u"))
    assert isinstance(hosts.files(1), SshBrokerFiles) and seen == ["b1_ssh"]
    assert hosts.files(1).session is hosts.session(1) and seen == ["b1_ssh"]  # one session per connection


def test_a_session_without_a_pinned_host_key_refuses_before_connecting():
    s = SshSettings("b1_ssh", "192.0.2.1", "u", private_key="x")
    with pytest.raises(Exception) as e:
        SshSession(s).client()
    assert str(e.value) == ("ssh connection 'b1_ssh' (u@192.0.2.1:22): no host key pinned for 192.0.2.1: refusing "
                            "to connect (give the host's public key as the connection's extra host_key)")
    assert BrokerControlError  # (imported: the remote control's errors are BrokerControlErrors)

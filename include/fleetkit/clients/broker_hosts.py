"""Where each broker of a cluster is reached for its files and its broker_control commands: this
machine (the fleet file's `access: local`) or the broker's host over SSH (`access: ssh`, the
broker's `ssh_conn_id`). One object per cluster and run: SSH sessions open on first use, one per
connection, and close with `close()` (or the `with` block).

The SSH settings of a connection id come from `ssh_settings` (a callable the adapter gives:
fleet_airflow.clusters.broker_hosts resolves Airflow connections); without it a broker with
`access: ssh` is refused with one line, never reached some other way.
"""

from __future__ import annotations

from typing import Callable

from fleetkit.clients.broker_files import BrokerFiles, LocalBrokerFiles, SshBrokerFiles
from fleetkit.clients.ssh import SshSession, SshSettings
from fleetkit.core.errors import FleetConfigError


class BrokerHosts:
    def __init__(self, cluster, ssh_settings: Callable[[str], SshSettings] | None = None):
        self.cluster = cluster
        self.ssh_settings = ssh_settings
        self._sessions: dict[str, SshSession] = {}

    def _broker(self, broker_id: int):
        return next((b for b in self.cluster.brokers if b.id == int(broker_id)), None)

    def remote(self, broker_id: int) -> bool:
        """The broker is reached over SSH (access: ssh)."""
        b = self._broker(broker_id)
        return b is not None and b.access == "ssh"

    def session(self, broker_id: int) -> SshSession | None:
        """The SSH session to the broker's host, or None for a broker of this machine (access: local,
        or not listed in the fleet file: its paths are this machine's)."""
        b = self._broker(broker_id)
        if b is None or b.access != "ssh":
            return None
        if self.ssh_settings is None:
            raise FleetConfigError(f"cluster {self.cluster.name!r}: broker {b.id} is access: ssh (connection "
                                   f"{b.ssh_conn_id!r}) but this run has no way to resolve SSH connections")
        if b.ssh_conn_id not in self._sessions:
            self._sessions[b.ssh_conn_id] = SshSession(self.ssh_settings(b.ssh_conn_id))
        return self._sessions[b.ssh_conn_id]

    def files(self, broker_id: int) -> BrokerFiles:
        """The broker's files: LocalBrokerFiles, or SshBrokerFiles on its host."""
        b = self._broker(broker_id)
        session = self.session(broker_id)
        if session is None:
            return LocalBrokerFiles(b.log_dirs if b is not None else ())
        return SshBrokerFiles(session, b.log_dirs, b.id)

    def close(self) -> None:
        for s in self._sessions.values():
            s.close()
        self._sessions.clear()

    def __enter__(self) -> "BrokerHosts":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def local_hosts(cluster) -> BrokerHosts:
    """Every broker on this machine; a broker with access: ssh is refused when reached."""
    return BrokerHosts(cluster)

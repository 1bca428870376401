"""Stopping, starting and reconfiguring brokers with the commands a cluster's `broker_control`
names in the fleet file (systemctl over ssh, a container tool, or `fleetlab ...` for the lab):
argv lists, placeholders filled inside each element, run without a shell in the fleet file's
folder. A cluster without broker_control has no control: its brokers are restarted by hand.

A broker with `access: ssh` in the fleet file has its commands run on its own host, over its SSH
connection (fleetkit.clients.broker_hosts.BrokerHosts, fleetkit.clients.ssh): the same argv,
quoted element by element (shlex.join) for the remote shell, in the SSH user's home folder (give
absolute paths), with the same timeout.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from dataclasses import dataclass
from typing import Any, Protocol

from fleetkit.core.errors import FleetError
from fleetkit.core.fleet import BrokerControlSettings

log = logging.getLogger(__name__)


class BrokerControlError(FleetError):
    """A broker_control command failed, could not run or outlived its timeout."""


class BrokerControl(Protocol):
    def stop(self, broker_id: int) -> None: ...
    def start(self, broker_id: int) -> None: ...
    def set_config(self, broker_id: int, props: dict) -> None: ...


@dataclass
class CommandBrokerControl:
    """Stops, starts and reconfigures brokers with the commands of a cluster's `broker_control`
    (fleet file): argv lists, placeholders filled inside each element, run without a shell in the
    fleet file's folder. A command that fails or outlives its timeout raises BrokerControlError."""

    settings: BrokerControlSettings
    cluster: str = ""
    #: where each broker is reached (fleetkit.clients.broker_hosts.BrokerHosts): a broker with
    #: access: ssh runs its commands on its host; None: every command runs on this machine
    hosts: Any = None

    def _run(self, command: str, **values) -> str:
        argv = self.settings.argv(command, **values)
        shown = shlex.join(argv)
        what = f"cluster {self.cluster!r} broker_control.{command}"
        session = self.hosts.session(values["broker"]) if self.hosts is not None else None
        if session is not None:
            return self._run_remote(session, argv, what)
        log.info("%s: %s", what, shown)
        try:
            out = subprocess.run(argv, cwd=self.settings.cwd, stdin=subprocess.DEVNULL, capture_output=True,
                                 text=True, timeout=self.settings.timeout_seconds, shell=False)
        except subprocess.TimeoutExpired:
            raise BrokerControlError(f"{what} did not finish within {self.settings.timeout_seconds:.0f} s: {shown}") from None
        except OSError as e:
            raise BrokerControlError(f"{what} cannot run {shown} (in {self.settings.cwd}): {e.strerror or e}") from None
        if out.returncode != 0:
            tail = "\n".join((out.stderr.strip() or out.stdout.strip()).splitlines()[-10:])
            raise BrokerControlError(f"{what} failed with exit code {out.returncode}: {shown}" + (f"\n{tail}" if tail else ""))
        return out.stdout.strip()

    def _run_remote(self, session, argv: list[str], what: str) -> str:
        from fleetkit.clients.ssh import SshError, command_line

        shown = command_line(argv)
        where = f"{session.settings.host} ({session.settings.conn_id})"
        log.info("%s on %s: %s", what, where, shown)
        try:
            res = session.run(argv, timeout=self.settings.timeout_seconds)
        except SshError as e:
            raise BrokerControlError(f"{what} on {where}: {e}") from None
        if res.returncode != 0:
            tail = res.tail()
            raise BrokerControlError(f"{what} on {where} failed with exit code {res.returncode}: {shown}"
                                     + (f"\n{tail}" if tail else ""))
        return res.text.strip()

    def stop(self, broker_id: int) -> None:
        log.info("broker %d stopped: %s", broker_id, self._run("stop", broker=broker_id))

    def start(self, broker_id: int) -> None:
        log.info("broker %d started: %s", broker_id, self._run("start", broker=broker_id))

    def set_config(self, broker_id: int, props: dict) -> None:
        if self.settings.set_config is None:
            raise BrokerControlError(f"cluster {self.cluster!r}: broker_control has no set_config command in the fleet file, "
                            f"so broker {broker_id} cannot get {props}; add one, or set it by hand and re-plan")
        for key, value in props.items():
            self._run("set_config", broker=broker_id, key=key, value=value)
        log.info("broker %d config %s (applies at the next start)", broker_id, props)


def control_for(cluster, hosts=None) -> CommandBrokerControl | None:
    """The broker control of a fleet-file cluster, or None when it has no broker_control. `hosts`
    (BrokerHosts): where the brokers are; a cluster with access: ssh brokers needs it (without it
    their commands would run on the wrong machine: refused when one is reached)."""
    if getattr(cluster, "broker_control", None) is None:
        return None
    if hosts is None and any(getattr(b, "access", "local") == "ssh" for b in getattr(cluster, "brokers", ())):
        from fleetkit.clients.broker_hosts import local_hosts

        hosts = local_hosts(cluster)  # refuses an access: ssh broker with one line when it is reached
    return CommandBrokerControl(cluster.broker_control, cluster.name, hosts)


# -- stopping a KRaft node keeps the metadata quorum ----------------------------------------------
def quorum_problems(voters: dict[int, int], high_watermark: int, stopping: list[int], max_lag: int = 1000,
                    last_fetch: dict[int, int] | None = None, max_fetch_age_ms: int = 5000) -> list[str]:
    """KRaft clusters of combined broker+controller nodes: stopping a node also stops a controller
    voter. For each node to stop (one at a time), the voters left running and caught up must still
    be a majority of all voters, or the metadata quorum (and every broker with it) stalls.

    `voters`: {id: log end offset, -1 unknown}; caught up: within max_lag of the quorum's high
    watermark. `last_fetch`: {id: last fetch in ms on the leader's clock, -1 unknown}
    (DescribeQuorum v1+): a voter whose last fetch is more than max_fetch_age_ms older than the
    newest (the leader's own, its current time) is not running, however recent its log end (the
    log end of a voter stopped a second ago still looks caught up). Followers fetch continuously
    and a voter silent for controller.quorum.fetch.timeout.ms (2 s by default) is considered gone
    by the quorum itself."""
    n = len(voters)
    need = n // 2 + 1
    fetched = {v: t for v, t in (last_fetch or {}).items() if t is not None and t >= 0}
    newest = max(fetched.values(), default=None)
    silent = {v for v, t in fetched.items() if newest - t > max_fetch_age_ms}
    up = {v for v, leo in voters.items() if leo >= 0 and high_watermark - leo <= max_lag} - silent
    out = []
    for b in stopping:
        if b not in voters:
            continue
        left = sorted(up - {b})
        if len(left) < need:
            behind = sorted(set(voters) - up - silent)
            out.append(f"stopping node {b} (a controller voter) leaves {len(left)} of {n} voters running and caught "
                       f"up ({left}); the metadata quorum needs {need}"
                       + (f" (voters not fetching for over {max_fetch_age_ms / 1000:g} s: {sorted(silent)})"
                          if silent else "")
                       + (f" (voters not caught up: {behind})" if behind else ""))
    return out


def stop_problems(kafka, stopping: list[int]) -> list[str]:
    """Why stopping each of `stopping` (one at a time) would lose a KRaft cluster's metadata quorum,
    asked of the cluster now (DescribeQuorum on the wire, through `kafka`'s connection); one line
    when the quorum cannot be described (nothing is stopped on a quorum nobody could see)."""
    from fleetkit.clients import wire_logs

    try:
        q = wire_logs.describe_quorum(kafka.bootstrap, kafka.timeout, security=kafka.wire_security)
    except ConnectionError as e:
        return [f"the controller quorum could not be described (DescribeQuorum): {e}"]
    return quorum_problems(dict(q.voters), q.high_watermark, stopping, last_fetch=dict(q.voter_last_fetch))

"""Stopping, starting and reconfiguring brokers with the commands a cluster's `broker_control`
names in the fleet file (systemctl over ssh, a container tool, or `fleetctl lab ...` for the lab):
argv lists, placeholders filled inside each element, run without a shell in the fleet file's
folder. A cluster without broker_control has no control: its brokers are restarted by hand.
"""

from __future__ import annotations

import logging
import shlex
import subprocess
from dataclasses import dataclass
from typing import Protocol

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

    def _run(self, command: str, **values) -> str:
        argv = self.settings.argv(command, **values)
        shown = shlex.join(argv)
        what = f"cluster {self.cluster!r} broker_control.{command}"
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


def control_for(cluster) -> CommandBrokerControl | None:
    """The broker control of a fleet-file cluster, or None when it has no broker_control."""
    if getattr(cluster, "broker_control", None) is None:
        return None
    return CommandBrokerControl(cluster.broker_control, cluster.name)

"""The lab on several hosts: Linux network namespaces the lab creates and removes itself.

Each lab host is a network namespace with one interface (`eth0`, a veth) plugged into a bridge the
lab creates, and one address from a private /24 checked unused on this machine at start (no
address, route or rule of the machine's own overlaps it). The machine's side of the bridge holds
the subnet's first address, so the lab's own tools (fleetlab, the tests) reach every host; nothing
is ever bound to a host interface, and loopback is each namespace's own.

What it creates is written to `hosts.json` in the lab folder before it is created, so `down()`
removes everything (the processes running inside the namespaces by PID, SIGTERM then SIGKILL;
the namespaces; the veths; the bridge), also after a crash: `up()` first removes what a previous
run left behind. Needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN), as `ip netns` does.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

STATE_FILE = "hosts.json"
#: where the lab looks for a free /24 (private, away from the usual container and VPN ranges)
CANDIDATES = tuple(ipaddress.ip_network(f"10.{a}.{b}.0/24") for a in (213, 231, 247) for b in range(16, 240, 8))
HOST_NAME = re.compile(r"^[a-z][a-z0-9]{0,9}$")


class HostsError(RuntimeError):
    pass


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip", *(("-n", netns) if netns else ()), *args]
    res = subprocess.run(argv, capture_output=True, text=True)
    if check and res.returncode != 0:
        raise HostsError(f"{' '.join(argv)}: {res.stderr.strip() or res.returncode}")
    return res


def used_networks() -> list[ipaddress.IPv4Network]:
    """The IPv4 networks this machine already uses: its addresses and every route of every table."""
    nets = []
    for entry in json.loads(_ip("-j", "-4", "addr").stdout or "[]"):
        for a in entry.get("addr_info", []):
            nets.append(ipaddress.ip_network(f"{a['local']}/{a['prefixlen']}", strict=False))
    for r in json.loads(_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]"):
        dst = r.get("dst")
        if dst and dst != "default":
            nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
    return nets


def free_subnet(used: list[ipaddress.IPv4Network], candidates=CANDIDATES) -> ipaddress.IPv4Network:
    """The first candidate /24 that overlaps nothing in `used`."""
    for net in candidates:
        if not any(net.overlaps(u) for u in used):
            return net
    raise HostsError(f"no free private /24 among {len(candidates)} candidates ({candidates[0]} ...): "
                     "this machine's addresses and routes cover them all")


def tag_for(folder: Path) -> str:
    """Six hex digits naming this lab folder's bridge, veths and namespaces (several labs on one
    machine never share them; interface names stay within Linux's 15 characters)."""
    return hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:6]


@dataclass
class Hosts:
    """The namespaces of one lab folder."""

    folder: Path

    @property
    def state_file(self) -> Path:
        return self.folder / STATE_FILE

    @property
    def tag(self) -> str:
        return tag_for(self.folder)

    def state(self) -> dict:
        try:
            return json.loads(self.state_file.read_text())
        except (OSError, ValueError):
            return {}

    def _save(self, state: dict) -> None:
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=1, sort_keys=True))
        os.replace(tmp, self.state_file)

    def netns(self, host: str) -> str:
        return f"fleet-{self.tag}-{host}"

    def address(self, host: str) -> str:
        try:
            return self.state()["hosts"][host]["address"]
        except KeyError:
            raise HostsError(f"no lab host {host!r} in {self.state_file} (is the hosts profile up?)") from None

    def gateway(self) -> str:
        """The machine's own address on the lab's bridge (how fleetlab and the tests reach the hosts)."""
        return self.state()["gateway"]

    def up(self, names: list[str]) -> dict[str, str]:
        """Create one namespace per name, on a fresh bridge and subnet; {name: address}."""
        for n in names:
            if not HOST_NAME.match(n):
                raise HostsError(f"lab host name {n!r}: 1 to 10 lowercase letters and digits, starting with a letter")
        if len(set(names)) != len(names) or len(names) > 200:
            raise HostsError(f"lab host names must be distinct, at most 200: {names}")
        self.folder.mkdir(parents=True, exist_ok=True)
        if self.state():
            self.down()  # what an earlier run (perhaps a crashed one) left
        subnet = free_subnet(used_networks())
        addrs = list(subnet.hosts())
        bridge = f"flb{self.tag}"
        state = {"subnet": str(subnet), "bridge": bridge, "gateway": str(addrs[0]), "hosts": {}}
        self._save(state)  # intent first: a crash from here on is cleaned up by down()
        _ip("link", "add", bridge, "type", "bridge")
        _ip("addr", "add", f"{addrs[0]}/{subnet.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i, name in enumerate(names, start=1):
            ns, veth, peer = self.netns(name), f"flv{self.tag}{i:02d}", f"flp{self.tag}{i:02d}"
            state["hosts"][name] = {"netns": ns, "veth": veth, "address": str(addrs[i])}
            self._save(state)
            _ip("netns", "add", ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
            _ip("link", "set", peer, "netns", ns)
            _ip("link", "set", peer, "name", "eth0", netns=ns)
            _ip("addr", "add", f"{addrs[i]}/{subnet.prefixlen}", "dev", "eth0", netns=ns)
            _ip("link", "set", "eth0", "up", netns=ns)
            _ip("link", "set", "lo", "up", netns=ns)
            _ip("link", "set", veth, "master", bridge)
            _ip("link", "set", veth, "up")
        return {n: h["address"] for n, h in state["hosts"].items()}

    def pids(self, host: str) -> list[int]:
        """Processes running in a lab host's namespace."""
        res = _ip("netns", "pids", self.netns(host), check=False)
        return [int(p) for p in res.stdout.split() if p.isdigit()]

    def run(self, host: str, argv: list[str], **popen_kwargs) -> subprocess.Popen:
        """Start argv inside a lab host (its own network: its address, its own loopback)."""
        self.address(host)  # refuses a host that is not up
        return subprocess.Popen(["ip", "netns", "exec", self.netns(host), *argv], **popen_kwargs)

    def stop_processes(self, host: str, timeout: float = 10.0) -> list[int]:
        """SIGTERM every process in the host's namespace, SIGKILL what is left after `timeout`."""
        pids = self.pids(host)
        for pid in pids:
            _signal(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.pids(host) and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.pids(host):
            _signal(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while self.pids(host) and time.monotonic() < deadline:
            time.sleep(0.05)
        return pids

    def kill_host(self, host: str) -> list[int]:
        """SIGKILL every process of a lab host at once (a host that dies), the namespace kept."""
        pids = self.pids(host)
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        return pids

    def down(self) -> list[str]:
        """Remove everything hosts.json records (processes, namespaces, veths, bridge); what was done."""
        state = self.state()
        done = []
        for name, h in (state.get("hosts") or {}).items():
            ns = h.get("netns", "")
            if not ns.startswith(f"fleet-{self.tag}-"):
                continue  # never touch a namespace this lab did not name
            if ns in _netns_list():
                stopped = self.stop_processes(name)
                _ip("netns", "del", ns, check=False)
                done.append(f"{name}: namespace {ns} removed" + (f" ({len(stopped)} processes stopped)"
                                                                 if stopped else ""))
            veth = h.get("veth", "")
            if veth.startswith(f"flv{self.tag}") and _link_exists(veth):
                _ip("link", "del", veth, check=False)
        bridge = state.get("bridge", "")
        if bridge == f"flb{self.tag}" and _link_exists(bridge):
            _ip("link", "del", bridge, check=False)
            done.append(f"bridge {bridge} ({state.get('subnet')}) removed")
        self.state_file.unlink(missing_ok=True)
        return done


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def _netns_list() -> set[str]:
    return {line.split()[0] for line in _ip("netns", "list", check=False).stdout.splitlines() if line.strip()}


def _link_exists(name: str) -> bool:
    return _ip("link", "show", name, check=False).returncode == 0

"""A lab broker whose port is held by a client socket when it starts (the kernel handed that port
to a connection as its local port) fails to bind; the lab stops the failed process by PID and
starts it again once the port is free, at the first start (`Lab.up`) and at a restart
(`Lab.start_broker`). A one-broker Kafka 0.9.0.1 lab of its own; the port is held by a real
connected socket on 127.0.0.1 (no SO_REUSEADDR, as a client's; taking it waits out the TIME_WAITs
of the broker's last connections, up to a minute), released after the broker has logged its
BindException.
"""

from __future__ import annotations

import logging
import shutil
import socket
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleetlab.lab import Lab, LabSpec
from tests.conftest import TEST_PORTS, state_dir

REPO = Path(__file__).resolve().parents[2]
SPEC = LabSpec(lab_dir=str(state_dir(".lab-bind")), name="bindlab", **TEST_PORTS.cluster("bindlab"), brokers=1)
SERVER_LOG = SPEC.broker_dir(0) / "logs" / "server.log"


def bind_failures() -> int:
    """Across server.log and the files log4j rolled it into at each hour (a test that spans the
    hour counts both sides)."""
    logs = [SERVER_LOG, *SERVER_LOG.parent.glob(SERVER_LOG.name + ".*")] if SERVER_LOG.exists() else []
    return sum(p.read_bytes().count(b"Address already in use") for p in logs)


@contextmanager
def port_held_by_a_client(port: int, timeout: float = 90):
    """A connected client socket whose local port is `port`, closed once the broker has logged one
    more bind failure than now (or after `timeout`). Yields a dict telling whether that happened."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client = socket.socket()  # no SO_REUSEADDR: a connected socket then blocks a listener's bind
    deadline = time.monotonic() + 90
    while True:  # without SO_REUSEADDR, bind waits out the TIME_WAITs of the broker's last connections
        try:
            client.bind(("127.0.0.1", port))
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(1)
    client.connect(listener.getsockname())
    peer, _ = listener.accept()
    before = bind_failures()
    seen = {"bind_failed_while_held": False}
    done = threading.Event()

    def release():
        deadline = time.monotonic() + timeout
        while not done.is_set() and time.monotonic() < deadline:
            if bind_failures() > before:
                seen["bind_failed_while_held"] = True
                break
            time.sleep(0.2)
        peer.close()  # the accepting side closes first: the TIME_WAIT stays on its port, not on `port`
        client.close()
        listener.close()

    t = threading.Thread(target=release, daemon=True)
    t.start()
    try:
        yield seen
    finally:
        done.set()
        t.join(timeout + 5)


@pytest.fixture(scope="module")
def bind_lab():
    lab = Lab(SPEC)
    lab.down()
    shutil.rmtree(SPEC.lab_dir, ignore_errors=True)
    try:
        yield lab
    finally:
        lab.down()  # the folder stays (its logs name why a start failed); the next run clears it


def answering(lab: Lab) -> bool:
    return next(r for r in lab.status() if r["component"] == "broker-0")["answering"]


def test_a_broker_port_held_by_a_client_at_start_and_at_restart(bind_lab, caplog):
    lab = bind_lab
    caplog.set_level(logging.WARNING, logger="fleetlab.lab")
    port = SPEC.broker_port(0)
    with port_held_by_a_client(port) as held:
        lab.up()
    assert held["bind_failed_while_held"], f"the broker never logged a bind failure; see {SERVER_LOG}"
    assert answering(lab)
    assert "was taken by another socket" in caplog.text
    first = bind_failures()

    caplog.clear()
    lab.stop_broker(0)
    with port_held_by_a_client(port) as held:
        lab.start_broker(0)
    assert held["bind_failed_while_held"] and bind_failures() > first
    assert answering(lab)
    assert "was taken by another socket" in caplog.text

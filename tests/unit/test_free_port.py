"""free_port draws loopback ports below the kernel's ephemeral range, where no outgoing
connection's source port can take them between the draw and the server's bind (a Sentinel test
once lost its port that way), and never hand out a port twice while its server may not have
bound it yet (CI once saw a Sentinel given its master's port)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import pytest

from scheduler.testing import controlplane
from scheduler.testing.controlplane import free_port


def _ephemeral_low() -> int:
    return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])


def test_ports_are_below_the_ephemeral_range_and_free() -> None:
    low = _ephemeral_low()
    ports = {free_port() for _ in range(50)}
    assert all(10_000 <= p < low for p in ports), sorted(ports)
    assert len(ports) > 40  # drawn at random, not the same port again and again
    for port in list(ports)[:5]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", port))  # free when it was handed out


def test_a_port_drawn_twice_is_handed_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = free_port(), free_port()  # free now (nothing binds them in between)

    # The same port drawn twice (two free_port calls before either server binds), then
    # another.
    sequence = [first, first, second]

    class Draws(random.Random):
        def randrange(self, *args: object, **kwargs: object) -> int:
            return sequence.pop(0)

    monkeypatch.setattr(controlplane.random, "Random", Draws)
    monkeypatch.setattr(controlplane, "_handed", controlplane.collections.deque(maxlen=8))
    assert free_port() == first
    assert free_port() == second

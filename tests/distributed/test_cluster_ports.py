"""The coordinator's port: chosen where no connection is handed it, and replaced once when
it was taken anyway before the coordinator could listen on it. (A port taken on every
start: test_multiprocess.py::test_a_coordinator_whose_port_is_taken_is_reported.)
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator

import pytest
from _support import launcher_targets as targets

from datarax.distributed import _launcher, free_port, launch_local
from datarax.distributed._ports import LOWEST, ephemeral_range


def test_the_port_is_below_the_range_handed_to_connections() -> None:
    first, last = ephemeral_range()
    if sys.platform.startswith("linux"):
        with open("/proc/sys/net/ipv4/ip_local_port_range") as ports:
            assert (first, last) == tuple(int(port) for port in ports.read().split())
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST <= port < first for port in ports), sorted(ports)
    assert len(ports) > 1  # chosen at random: two launchers seldom pick the same
    # What a connection is handed, and what bind to port 0 gets, is in that range.
    with socket.create_server(("127.0.0.1", 0)) as server, socket.socket() as client:
        client.connect(server.getsockname())
        assert first <= client.getsockname()[1] <= last
        assert first <= server.getsockname()[1] <= last


@pytest.fixture
def taken_port() -> Iterator[int]:
    """A port of 127.0.0.1 that a socket listens on until the test ends."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        yield taken.getsockname()[1]


@pytest.mark.multihost
def test_a_coordinator_port_taken_meanwhile_is_replaced(
    taken_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    ports = iter([taken_port, free_port()])
    monkeypatch.setattr(_launcher, "free_port", lambda: next(ports))
    with pytest.warns(RuntimeWarning, match=rf"could not start on 127.0.0.1:{taken_port} "):
        runs = launch_local(targets.combine, args=(1, 2), devices_per_process=1, timeout_s=90)
    assert [run.value["value"] for run in runs] == [3, 4]

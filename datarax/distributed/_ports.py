"""A port for a local cluster's coordinator that nothing else is handed meanwhile.

Between choosing a free port and the coordinator listening on it, process 0 starts
Python and imports JAX: seconds on a loaded machine. A port from the ephemeral range
(the one the system hands out to every outgoing connection and every ``bind`` to port
0, gloo's own sockets included) can be taken in that gap, and the coordinator then
fails to start (jax 0.7 raises; newer jax raises or crashes with SIGSEGV). So the port
is chosen below that range, where only a program that names the port binds it; the
range is read from ``/proc/sys/net/ipv4/ip_local_port_range`` on Linux, and elsewhere
is taken to be IANA's 49152-65535 (macOS and Windows use it).
"""

from __future__ import annotations

import random
import socket

from datarax._syscompat import proc_local_port_range

LOWEST = 10_000  # below: ports that well-known services and development servers use
_IANA_EPHEMERAL = (49152, 65535)
_TRIES = 100


def ephemeral_range() -> tuple[int, int]:
    """The ports this machine hands out for outgoing connections, first and last."""
    return proc_local_port_range() or _IANA_EPHEMERAL


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_port() -> int:
    """A TCP port of 127.0.0.1 that nothing uses now, below the ephemeral range.

    Chosen at random below the range the system hands out for outgoing connections
    and for ``bind`` to port 0, so that no connection is given it before the
    coordinator listens on it. When that range starts too low to leave room (fewer
    than 1,000 ports above 10,000), a port the system picks.

    Example:
        >>> 10_000 <= free_port() < ephemeral_range()[0]
        True
    """
    first_ephemeral = ephemeral_range()[0]
    if first_ephemeral - LOWEST >= 1_000:
        for _ in range(_TRIES):
            port = random.randrange(LOWEST, first_ephemeral)
            if _bindable(port):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]

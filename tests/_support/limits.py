"""Limits for tests of bounded work: a hang limit in seconds, and a call's memory peak.

Memory is what such tests measure; time is only a generous limit that stops a call
that hangs (the machines that run the tests are shared and loaded).
"""

from __future__ import annotations

import signal
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any


class TooSlow(BaseException):
    """Raised by the alarm; a BaseException, so that no ``except Exception`` hides it."""


@contextmanager
def time_limit(seconds: int) -> Iterator[None]:
    def stop(*_: Any) -> None:
        raise TooSlow(f"the call ran past {seconds} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def peak_bytes(call: Callable[[], Any], seconds: int) -> tuple[Any, int]:
    """What `call()` returned (or the TypeError/ValueError it raised) and the most
    memory it held at once, by tracemalloc; a call running past `seconds` fails."""
    tracemalloc.start()
    try:
        with time_limit(seconds):
            try:
                result = call()
            except (TypeError, ValueError) as error:
                result = error
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()

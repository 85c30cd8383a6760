"""Checks the arguments of `datarax.distributed.launch_local` before any process starts.

Each check raises a `TypeError` (wrong kind of value) or a `ValueError` (out of
range) that names the argument, what it may be and the value received. A variable in
`env` that the launcher sets itself may only be given the value the launcher gives it.
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from datarax.distributed._descendants import MARK_VARIABLE
from datarax.errors import EnvironmentVariableError

MAX_PROCESSES = 64  # each is a Python interpreter with its own JAX runtime
MAX_DEVICES_PER_PROCESS = 512  # simulated CPU devices, each with its own buffers
MAX_INIT_TIMEOUT_S = 3600


@dataclasses.dataclass(frozen=True)
class Options:
    """`launch_local`'s arguments, checked and in the types the launcher uses."""

    num_processes: int
    devices_per_process: int
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    timeout_s: float
    init_timeout_s: int
    shutdown_timeout_s: int
    env: dict[str, str]


def _shown(value: object) -> str:
    """`value`'s repr, shortened, and its type."""
    return f"{reprlib.repr(value)} ({type(value).__name__})"


def _count(name: str, value: object, most: int, why: str) -> int:
    allowed = f"{name} must be a positive int (1 to {most})"
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{allowed}, got {_shown(value)}.")
    number = int(value)
    if number < 1:
        raise ValueError(f"{allowed}, got {number}.")
    if number > most:
        raise ValueError(f"{allowed}, got {number}. {why}")
    return number


def _seconds(name: str, value: object, allowed: str, fits: Callable[[float], bool]) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be {allowed}, got {_shown(value)}.")
    number = float(value)
    if not fits(number):  # NaN fails every comparison, so it lands here
        raise ValueError(f"{name} must be {allowed}, got {reprlib.repr(value)}.")
    return number


DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# The variables the launcher sets for its processes: the one value each may be given
# (None: none), and why.
_LAUNCHER_SETS = {
    "JAX_PLATFORMS": (
        "cpu",
        "the processes of a local cluster run on simulated CPU devices and join through "
        "gloo's CPU collectives, whatever chips this machine has (docs/laptop_to_pod.md "
        "shows the same code on a pod's chips)",
    ),
    "JAX_CPU_COLLECTIVES_IMPLEMENTATION": ("gloo", "the processes join through gloo"),
    "PYTHONUNBUFFERED": (
        "1",
        "the launcher needs each process's output unbuffered, so that a process that "
        "crashes still shows its last lines",
    ),
    MARK_VARIABLE: (
        None,
        "the launcher marks every process of a run with it, to find and stop what they start",
    ),
}


def _refuse_launcher_values(env: Mapping[str, str], devices_per_process: int) -> None:
    """Refuses a value that the launcher would replace with its own, saying why."""
    count = str(devices_per_process)
    for name, value in env.items():
        if name == "XLA_FLAGS":
            flags = [f for f in value.split() if f.startswith(f"{DEVICE_COUNT_FLAG}=")]
            if any(flag != f"{DEVICE_COUNT_FLAG}={count}" for flag in flags):
                raise EnvironmentVariableError(
                    f"env['XLA_FLAGS'] sets {flags[-1]}, but devices_per_process={count} "
                    "sets each process's devices: pass devices_per_process instead and "
                    "leave the flag out (the other flags reach every process).",
                    variable=name,
                    value=value,
                )
            continue
        if name == "JAX_NUM_CPU_DEVICES":
            allowed, why = count, f"devices_per_process={count} sets each process's devices"
        elif name in _LAUNCHER_SETS:
            allowed, why = _LAUNCHER_SETS[name]
        else:
            continue
        if value != allowed:
            may = "cannot be set" if allowed is None else f"may only be {allowed!r}"
            raise EnvironmentVariableError(
                f"env[{name!r}] {may} (got {reprlib.repr(value)}): {why}.",
                variable=name,
                value=value,
            )


def _environment(env: object, devices_per_process: int) -> dict[str, str]:
    if env is None:
        return {}
    if not isinstance(env, Mapping):
        raise TypeError(
            "env must be a mapping of str names to str values, such as "
            f"{{'XLA_FLAGS': '--xla_dump_to=/tmp/dump'}}, got {_shown(env)}."
        )
    for name, value in env.items():
        if not isinstance(name, str) or not isinstance(value, str):
            raise TypeError(
                "env must map str names to str values, got the entry "
                f"{_shown(name)}: {_shown(value)}. Write numbers as strings, e.g. '1'."
            )
        if not name or "=" in name or "\0" in name or "\0" in value:
            raise ValueError(
                "env names must be non-empty and free of '=' and NUL, and values free of "
                f"NUL, got the entry {name!r}: {reprlib.repr(value)}."
            )
    _refuse_launcher_values(env, devices_per_process)
    return dict(env)


def _arguments(args: object, kwargs: object, script: bool) -> tuple[tuple[Any, ...], dict]:
    if isinstance(args, (str, bytes)) or not isinstance(args, Sequence):
        raise TypeError(
            "args must be a tuple or list of the target's positional arguments, got "
            f"{_shown(args)}. For a single argument write args=(value,)."
        )
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, Mapping) or not all(isinstance(key, str) for key in kwargs):
        raise TypeError(f"kwargs must be a mapping of str names to values, got {_shown(kwargs)}.")
    if script and kwargs:
        raise ValueError(
            "kwargs are passed to a function target; a script gets only args, as strings "
            f"in sys.argv[1:]. Got kwargs={reprlib.repr(kwargs)}; pass them in args instead."
        )
    return tuple(args), dict(kwargs)


def _whole_seconds(name: str, value: object) -> int:
    """`value` rounded up, checked to be from 1 to `MAX_INIT_TIMEOUT_S` seconds."""
    return math.ceil(
        _seconds(
            name,
            value,
            f"a number of seconds from 1 to {MAX_INIT_TIMEOUT_S}",
            lambda s: 1 <= s <= MAX_INIT_TIMEOUT_S,
        )
    )


def check(
    *,
    script: bool,
    num_processes: object,
    devices_per_process: object,
    args: object,
    kwargs: object,
    timeout_s: object,
    init_timeout_s: object,
    shutdown_timeout_s: object,
    env: object,
) -> Options:
    """Every argument of `launch_local` but the target, checked; `script`: a script target.

    Raises:
        TypeError: an argument has the wrong type (a bool is not an int here).
        ValueError: an argument is out of its range.
        EnvironmentVariableError: `env` gives a variable that the launcher sets itself
            a value other than the launcher's (a `ValueError` too).
    """
    positional, keywords = _arguments(args, kwargs, script)
    devices = _count(
        "devices_per_process",
        devices_per_process,
        MAX_DEVICES_PER_PROCESS,
        "They are simulated CPU devices, each with its own buffers; 1 to 8 per process "
        "is plenty to see how data is split.",
    )
    return Options(
        num_processes=_count(
            "num_processes",
            num_processes,
            MAX_PROCESSES,
            "Each process is a Python interpreter with its own JAX runtime (a few hundred "
            "MB); 2 to 8 processes already show everything a pod does.",
        ),
        devices_per_process=devices,
        args=positional,
        kwargs=keywords,
        timeout_s=_seconds(
            "timeout_s", timeout_s, "a finite number of seconds > 0", lambda s: 0 < s < math.inf
        ),
        init_timeout_s=_whole_seconds("init_timeout_s", init_timeout_s),
        shutdown_timeout_s=_whole_seconds("shutdown_timeout_s", shutdown_timeout_s),
        env=_environment(env, devices),
    )

"""Real profiles of a training step, stored for tutorial 13 (``13.collective_hidden``).

Each ``<name>.json`` beside this module holds the XLA operations that one profile shows
for every device: a data-parallel step (``data_parallel``: the batch split over the 8
devices, the parameters replicated, the gradients summed by an all-reduce) and an FSDP
step (``fsdp``: the parameters split too, gathered by all-gathers before they are used),
each of a multilayer perceptron 64 -> 512 -> 512 -> 10 on 1024 rows. The file says how
and with which versions it was recorded (``about``); ``python -m datarax_course.traces``
records both again with the JAX installed, on 8 accelerators where the machine has
them, else on 8 simulated CPU devices.

Only what the lesson reads is kept, in a compact form: one row per event, ``[name,
thread, start_us, duration_us, device]``, threads renumbered 0, 1, ..., times in
microseconds from the first event kept. ``device`` is the device whose operation it
was (the trace's ``device_ordinal``), or None for the executor's own events
(``ThunkExecutor::Execute``), which run on the same threads and hold a device's
operations. `stored` turns the rows back into the dicts that the lesson's
``read_trace`` makes of a trace file: a ``name``, a ``thread``, a ``start_us``, a
``duration_us`` and ``args``, where an operation's ``args`` hold its
``device_ordinal`` (a string, as in the trace) and its ``hlo_op``.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

NAMES = ("data_parallel", "fsdp")  # the stored profiles
COLUMNS = ["name", "thread", "start_us", "duration_us", "device"]
EXECUTOR = "ThunkExecutor::Execute"  # the executor's event that holds a device's operations

Event = dict[str, Any]


def read(name: str) -> dict[str, Any]:
    """The stored profile `name` as its file holds it: ``about``, ``columns``, ``events``.

    Raises:
        ValueError: `name` is not one of `NAMES`.
    """
    if name not in NAMES:
        raise ValueError(f"no stored profile is named {name!r}; the profiles are {list(NAMES)}.")
    text = resources.files(__name__).joinpath(f"{name}.json").read_text(encoding="utf-8")
    return json.loads(text)


def events_of(rows: list[list[Any]]) -> list[Event]:
    """The events of `rows` (the compact form) as the lesson's ``read_trace`` gives them.

    Example:
        >>> rows = [["dot.6", 0, 12.5, 40.0, 3], ["ThunkExecutor::Execute", 0, 10.0, 90.0, None]]
        >>> events_of(rows)  # doctest: +NORMALIZE_WHITESPACE
        [{'name': 'dot.6', 'thread': 0, 'start_us': 12.5, 'duration_us': 40.0,
          'args': {'device_ordinal': '3', 'hlo_op': 'dot.6'}},
         {'name': 'ThunkExecutor::Execute', 'thread': 0, 'start_us': 10.0,
          'duration_us': 90.0, 'args': {}}]
    """
    events = []
    for name, thread, start_us, duration_us, device in rows:
        args = {} if device is None else {"device_ordinal": str(device), "hlo_op": name}
        events.append(
            {
                "name": name,
                "thread": thread,
                "start_us": start_us,
                "duration_us": duration_us,
                "args": args,
            }
        )
    return events


def stored(name: str) -> list[Event]:
    """The events of stored profile `name`, a fresh list of fresh dicts at every call.

    Example:
        >>> events = stored("data_parallel")
        >>> any(event["name"].startswith("all-reduce") for event in events)
        True
    """
    return events_of(read(name)["events"])


def about(name: str) -> dict[str, Any]:
    """How stored profile `name` was recorded: the step, the versions, the devices."""
    return dict(read(name)["about"])

"""The message `datarax.distributed.launch_local` raises when a process fails."""

from __future__ import annotations

import pickle
import re
import signal
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_TAIL_LINES = 25
_NATIVE_FRAME = re.compile(r"^\s*@\s+0x")  # a C++ stack frame of a failed check


def read_record(path: Path) -> tuple[str, Any] | None:
    """A worker's ``("ok", value)`` or ``("error", traceback)``; None if it wrote none."""
    if not path.exists():
        return None
    try:
        return pickle.loads(path.read_bytes())
    except Exception as error:
        return "error", f"TypeError: its return value cannot be unpickled here ({error})."


def tail(text: str) -> str:
    """The last lines of a process's output, indented, without native stack frames."""
    lines = [line for line in text.splitlines() if line.strip() and not _NATIVE_FRAME.match(line)]
    return textwrap.indent("\n".join(lines[-_TAIL_LINES:]) or "(no output)", "    | ")


def how_it_ended(code: int | None) -> str:
    """'exited with code 1', 'was killed by SIGKILL', or still running."""
    if code is None:
        return "was still running; the launcher stopped it"
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def report(
    first: int | None,
    reason: str,
    codes: Sequence[int | None],
    records: Sequence[tuple[str, Any] | None],
    outputs: Sequence[str],
    stages: Sequence[str],
) -> tuple[int, str]:
    """(the process to blame, the message): what it did, its output, and the others.

    `first` is the first process seen failing (None after a time-out); `stages` says
    how far each got: 'starting', 'joining' (inside jax.distributed.initialize) or
    'joined'. A process that never reached initialize is blamed before the processes
    that then timed out waiting for it.
    """
    count = len(codes)
    never_started = [i for i, stage in enumerate(stages) if stage == "starting"]
    if "joined" not in stages and never_started:
        culprit = never_started[0]
    elif first is None:  # a time-out: blame the first process still in its target
        running = [i for i, code in enumerate(codes) if code is None]
        culprit = next((i for i in running if records[i] is None), running[0] if running else 0)
    else:
        culprit = first
    lines = [f"Local JAX cluster failed: {reason}."] if reason else []
    record = records[culprit]
    if culprit in never_started and "joined" not in stages:
        lines.append(
            f"Process {culprit} of {count} never joined the cluster: it did not get as far "
            f"as jax.distributed.initialize, and {how_it_ended(codes[culprit])}."
        )
    else:
        if record is not None and record[0] == "error":
            last_line = record[1].strip().splitlines()[-1]
            lines.append(f"Process {culprit} of {count} raised {last_line}")
        else:
            lines.append(f"Process {culprit} of {count} {how_it_ended(codes[culprit])}.")
        if culprit == 0 and stages[0] == "joining" and not never_started:
            lines.append(
                "Process 0 runs the coordinator and failed before the cluster formed, which "
                "happens when its port was taken meanwhile. Run again for a new port."
            )
    lines.append(f"Last lines of process {culprit}'s output:\n{tail(outputs[culprit])}")
    for index in range(count):
        if index != culprit:
            if codes[index] is None and records[index] is not None:
                state = "had returned and was waiting for the others; the launcher stopped it"
            else:
                state = "finished" if codes[index] == 0 else how_it_ended(codes[index])
            note = "" if stages[index] == "joined" else " (it never joined the cluster)"
            lines.append(f"Process {index} {state}{note}.")
    return culprit, "\n".join(lines)

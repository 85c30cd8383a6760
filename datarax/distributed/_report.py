"""The message `datarax.distributed.launch_local` raises when a process fails.

A failed run's output is capped at every step: at most the last `OUTPUT_BYTES` of
each process's output file are read, and the message shows at most `_TAIL_LINES`
lines of it, each cut to `_LINE_CHARS` characters with a note of how much was cut.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

OUTPUT_BYTES = 64 * 1024
_TAIL_LINES = 25
_LINE_CHARS = 500
_NATIVE_FRAME = re.compile(r"^\s*@\s+0x")  # a C++ stack frame of a failed check
# What the gloo CPU collectives print as each process connects to its peers, in pieces:
# two threads' lines can interleave, even inside one line.
_GLOO_CONNECTED = re.compile(
    r"\[Gloo\] Rank \d+ is connected to \d+ peer ranks\. "
    r"Expected number of connected peer ranks is : \d+\n?"
)
_GLOO_WORDS = re.compile(
    r"\[Gloo\] Rank | is connected to | peer ranks\. |Expected number of connected peer ranks is : "
)


def without_gloo_lines(text: str) -> str:
    """`text` without gloo's "[Gloo] Rank 0 is connected to 3 peer ranks" lines.

    Whole messages are removed until none is left (one may sit inside another); then
    every line made only of pieces of such messages goes too.
    """
    previous = None
    while previous != text:
        previous, text = text, _GLOO_CONNECTED.sub("", text)
    return "".join(
        line
        for line in text.splitlines(keepends=True)
        if not _GLOO_WORDS.search(line) or re.sub(r"\d+", "", _GLOO_WORDS.sub("", line)).strip()
    )


def read_record(path: Path) -> tuple[str, Any] | None:
    """A worker's ``("ok", value)`` or ``("error", traceback)``; None if it wrote none."""
    if not path.exists():
        return None
    try:
        return pickle.loads(path.read_bytes())
    except Exception as error:
        return "error", f"TypeError: its return value cannot be unpickled here ({error})."


def read_output(path: Path, limit: int = OUTPUT_BYTES) -> str:
    """The last `limit` bytes of an output file, after a note of how many came before."""
    try:
        with open(path, "rb") as file:
            size = file.seek(0, os.SEEK_END)
            start = max(0, size - limit)
            file.seek(start)
            data = file.read(size - start)
    except FileNotFoundError:
        return ""
    text = data.decode(errors="replace")
    return f"[the first {start:,} bytes of this output are left out]\n{text}" if start else text


def clip(line: str) -> str:
    """`line`, cut to `_LINE_CHARS` characters with a note when it is longer."""
    if len(line) <= _LINE_CHARS:
        return line
    return f"{line[:_LINE_CHARS]} [... {len(line) - _LINE_CHARS:,} more characters cut]"


def tail(text: str) -> str:
    """The last lines of a process's output, clipped and indented, without native frames."""
    lines = [line for line in text.splitlines() if line.strip() and not _NATIVE_FRAME.match(line)]
    shown = "\n".join(clip(line) for line in lines[-_TAIL_LINES:])
    return textwrap.indent(shown or "(no output)", "    | ")


# Signals a process raises against itself when its native code fails: a crash.
_CRASHES = {
    "SIGSEGV": (
        "a segmentation fault",
        "native code (JAX, XLA, gloo or another compiled extension) read or wrote memory "
        "it may not",
    ),
    "SIGBUS": (
        "a bus error",
        "native code touched memory that is not there, such as a mapped file that shrank "
        "or a full /dev/shm",
    ),
    "SIGILL": ("an illegal instruction", "usually native code built for a newer CPU than this one"),
    "SIGFPE": ("an arithmetic fault", "usually an integer division by zero in native code"),
}
# What the signals that other processes send usually mean.
_KILLS = {
    "SIGKILL": (
        "SIGKILL cannot be caught and comes from outside the process: the kernel's "
        "out-of-memory killer (look for 'Out of memory' in `dmesg`), `kill -9`, or a "
        "job scheduler."
    ),
    "SIGTERM": "SIGTERM asks a process to end: another process sent it (`kill`, a scheduler).",
    "SIGINT": "SIGINT is an interrupt, as from Ctrl-C.",
    "SIGHUP": "SIGHUP is sent when a process's terminal or session ends.",
}


def signal_name(code: int | None) -> str | None:
    """The name of the signal that ended a process with exit `code` (-11: 'SIGSEGV')."""
    if code is None or code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def how_it_ended(code: int | None) -> str:
    """'exited with code 1', 'crashed with SIGSEGV, a segmentation fault', 'was killed by
    SIGKILL', 'aborted with SIGABRT', or still running."""
    if code is None:
        return "was still running; the launcher stopped it"
    name = signal_name(code)
    if name is None:
        return f"exited with code {code}"
    if name in _CRASHES:
        return f"crashed with {name}, {_CRASHES[name][0]}"
    if name == "SIGABRT":
        return "aborted with SIGABRT"
    return f"was killed by {name}"


def what_it_means(code: int | None) -> str:
    """A sentence on what the signal that ended a process usually means; '' for none."""
    name = signal_name(code)
    if name in _CRASHES:
        return (
            f"A crash: {_CRASHES[name][1]}; not a Python exception. Its last lines below "
            "show how far it got. Run it again: a crash at the same place again is a bug "
            "in that native code, to report with those lines."
        )
    if name == "SIGABRT":
        return (
            "It ended itself through abort(): a check in native code failed (its last "
            "lines say which); JAX ends a process this way when a peer is gone."
        )
    return _KILLS.get(name or "", "")


def _returned(record: tuple[str, Any] | None) -> bool:
    return record is not None and record[0] == "ok"


def killed_from_outside(code: int | None) -> bool:
    """Whether an exit code says a signal ended the process, other than SIGABRT.

    SIGKILL (the OOM killer, a preempted host, ``kill -9``), a crash (SIGSEGV) and the
    like end a process whatever its peers do. SIGABRT is how JAX ends a process whose
    peer is gone, so it is a consequence as often as a cause.
    """
    return code is not None and code < 0 and -code != signal.SIGABRT


def _culprit(
    first: int | None,
    codes: Sequence[int | None],
    records: Sequence[tuple[str, Any] | None],
    stages: Sequence[str],
    exit_order: Sequence[int] = (),
) -> int:
    never_started = [i for i, stage in enumerate(stages) if stage == "starting"]
    if "joined" not in stages and never_started:
        return never_started[0]
    if first is not None and not _returned(records[first]):
        # A process killed by a signal, or one that exited with code 0 before returning
        # (JAX never ends a process whose peer is gone that way), is the cause of its
        # peers' errors, not their consequence, even when, under load, a peer's exit
        # was seen first.
        ranked = [*exit_order, *range(len(codes))]
        unreturned = [i for i in ranked if not _returned(records[i])]
        killed = [i for i in unreturned if killed_from_outside(codes[i])]
        left_early = [i for i in unreturned if codes[i] == 0]
        return (killed or left_early or [first])[0]
    # A time-out, or the first process to fail had returned and then gave up waiting
    # for the others at shutdown: blame the first whose target never returned.
    unfinished = [i for i in range(len(codes)) if not _returned(records[i])]
    still_running = [i for i in unfinished if codes[i] is None]
    return (still_running or unfinished or [first or 0])[0]


def _state(code: int | None, record: tuple[str, Any] | None) -> str:
    """How a process other than the culprit ended."""
    if _returned(record):
        if code is None:
            return "had returned and was waiting for the others; the launcher stopped it"
        if code != 0:
            return f"returned, then {how_it_ended(code)} while waiting for the others"
        return "finished"
    if code == 0:
        return "exited with code 0 without returning a result"
    return how_it_ended(code)


def coordinator_failed(codes: Sequence[int | None], stages: Sequence[str]) -> bool:
    """Whether process 0 ended inside jax.distributed.initialize before any process
    joined: its coordinator did not start, which is what a taken port does (jax 0.7
    raises, newer jax raises or crashes with SIGSEGV)."""
    return codes[0] is not None and stages[0] == "joining" and "joined" not in stages


def _coordinator(attempts: int) -> str:
    if attempts > 1:
        return (
            f"Process 0 runs the coordinator, and it failed to start {attempts} times, on a "
            "new port each time: a port taken meanwhile does this, but seldom twice in a "
            "row, so its last lines below likely give another reason."
        )
    return (
        "Process 0 runs the coordinator and failed before the cluster formed, which "
        "happens when its port was taken meanwhile. Run again for a new port."
    )


def report(
    first: int | None,
    reason: str,
    codes: Sequence[int | None],
    records: Sequence[tuple[str, Any] | None],
    outputs: Sequence[str],
    stages: Sequence[str],
    exit_order: Sequence[int] = (),
    attempts: int = 1,
) -> tuple[int, str]:
    """(the process to blame, the message): what it did, its output, and the others.

    `first` is the first process seen failing (None after a time-out); `stages` says
    how far each got: 'starting', 'joining' (inside jax.distributed.initialize) or
    'joined'; `exit_order` lists the processes in the order their exits were seen. A
    process that never reached initialize is blamed before the processes that then
    timed out waiting for it; a process killed by a signal other than SIGABRT, then one
    that exited with code 0 before its target returned, before those that then raised,
    exited with an error or aborted (the first such one seen, when several were); and a
    process whose target never returned before one that returned and then gave up
    waiting for it. `attempts` says how many times the cluster was started.
    """
    count = len(codes)
    culprit = _culprit(first, codes, records, stages, exit_order)
    never_started = [i for i, stage in enumerate(stages) if stage == "starting"]
    lines = [f"Local JAX cluster failed: {reason}."] if reason else []
    record, code = records[culprit], codes[culprit]
    if culprit in never_started and "joined" not in stages:
        lines.append(
            f"Process {culprit} of {count} never joined the cluster: it did not get as far "
            f"as jax.distributed.initialize, and {how_it_ended(code)}."
        )
    else:
        if record is not None and record[0] == "error":
            last_line = record[1].strip().splitlines()[-1]
            lines.append(f"Process {culprit} of {count} raised {clip(last_line)}")
        elif code == 0 and record is None:
            lines.append(
                f"Process {culprit} of {count} exited with code 0 before its target "
                "returned: something in it ended the process early (os._exit, or a "
                "library that exits), so it wrote no result."
            )
        else:
            lines.append(f"Process {culprit} of {count} {how_it_ended(code)}.")
            if not (culprit == 0 and coordinator_failed(codes, stages)) and what_it_means(code):
                lines.append(what_it_means(code))
        if culprit == 0 and coordinator_failed(codes, stages):
            lines.append(_coordinator(attempts))
        gave_up = [i for i in range(count) if _returned(records[i]) and codes[i] != 0]
        if record is None and gave_up:
            who = f"process {gave_up[0]}" if len(gave_up) == 1 else f"processes {gave_up}"
            lines.append(f"Its target never returned, and {who}, done, gave up waiting for it.")
    lines.append(f"Last lines of process {culprit}'s output:\n{tail(outputs[culprit])}")
    for index in range(count):
        if index != culprit:
            note = "" if stages[index] == "joined" else " (it never joined the cluster)"
            lines.append(f"Process {index} {_state(codes[index], records[index])}{note}.")
    return culprit, "\n".join(lines)

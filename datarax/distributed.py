"""A JAX cluster on one machine: N processes on 127.0.0.1, each with K CPU devices.

`launch_local` starts the processes, joins them into one JAX cluster with
``jax.distributed.initialize`` (gloo CPU collectives, cluster auto-detection off,
short timeouts), runs a function or a script on every process and returns what each
returned and printed. It is how the tests and tutorials exercise multi-host code
without a pod. When a process raises, crashes, is killed or never joins, it stops
the others and raises `ClusterError` naming that process, with the tail of its
output, a few seconds later; it never leaves a process behind.
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from datarax._cluster_report import read_record, report

_GRACE_S = 2.0  # after a failure, how long the others get to finish on their own


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    """What one process of the cluster returned and printed."""

    process_index: int
    value: Any
    output: str


class ClusterError(RuntimeError):
    """A process of a local cluster failed; `process_index` names the first one.

    Attributes:
        process_index: the process that failed first (None when all timed out).
        outputs: every process's output, in process order.
    """

    def __init__(self, message: str, process_index: int | None, outputs: Sequence[str]):
        super().__init__(message)
        self.process_index = process_index
        self.outputs = list(outputs)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _check_positive(name: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}.")


def _describe_target(target: Callable[..., Any] | str | os.PathLike[str]) -> tuple[str, Any]:
    """How a worker finds the target: a script path, a pickled reference, or source."""
    if isinstance(target, (str, os.PathLike)):
        path = Path(target).resolve()
        if path.suffix != ".py" or not path.is_file():
            raise ValueError(
                f"target {str(target)!r} is not a .py file; pass a script or a function."
            )
        return "script", str(path)
    if not callable(target):
        raise TypeError(f"target must be a function or a path to a .py script, got {target!r}.")
    name = getattr(target, "__name__", "")
    qualname = getattr(target, "__qualname__", "")
    if name == "<lambda>" or "<locals>" in qualname or getattr(target, "__closure__", None):
        raise TypeError(
            f"target {qualname or target!r} is a lambda or a nested function; each process "
            "imports or re-creates it on its own, so define it with `def` at the top level "
            "of a module or a notebook cell, with its imports inside its body."
        )
    main = sys.modules.get("__main__")
    main_spec = getattr(main, "__spec__", None)
    if (  # defined in a module run as `python -m name`, so importable by that name
        main_spec is not None and getattr(target, "__globals__", None) is vars(main)
    ):
        return "import", (main_spec.name, qualname)
    if getattr(target, "__module__", None) != "__main__":
        try:  # found by module and name, so every process can import it
            return "reference", pickle.dumps(target)
        except (pickle.PicklingError, AttributeError, TypeError):
            pass  # defined somewhere unimportable (a doctest, an exec): send its source
    try:
        source = textwrap.dedent(inspect.getsource(target))
    except (OSError, TypeError) as error:
        raise TypeError(
            f"The source of {qualname} cannot be found ({error}); define it in a notebook "
            "cell or a module, or pass a script path."
        ) from None
    return "source", (source, name)


def _worker_env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = dict(os.environ)
    flags = [f for f in env.get("XLA_FLAGS", "").split() if "device_count" not in f]
    env["XLA_FLAGS"] = " ".join(flags)
    env["JAX_PLATFORMS"] = "cpu"  # workers never claim an accelerator, even on a TPU VM
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra or {})
    return env


def _stage(job_dir: Path, index: int) -> str:
    """How far process `index` got: 'starting', 'joining' or 'joined'."""
    for stage in ("joined", "joining"):
        if (job_dir / f"{stage}-{index}").exists():
            return stage
    return "starting"


def _watch(
    processes: Sequence[subprocess.Popen[bytes]],
    job_dir: Path,
    timeout_s: float,
    join_deadline_s: float,
) -> tuple[int | None, str]:
    """Waits until all exit, one fails (then `_GRACE_S` more), or time runs out."""
    start = time.monotonic()
    first, reason, failed_at = None, "", None
    while True:
        codes = [process.poll() for process in processes]
        now = time.monotonic()
        if first is None:
            failed = [index for index, code in enumerate(codes) if code not in (None, 0)]
            if failed:
                first, failed_at = failed[0], now
        if all(code is not None for code in codes):
            break
        if first is None and now - start > join_deadline_s:
            missing = [i for i in range(len(processes)) if not (job_dir / f"joined-{i}").exists()]
            if missing:
                first, failed_at = missing[0], now
                reason = (
                    f"processes {missing} never joined the cluster within {join_deadline_s:g} s"
                )
        if failed_at is not None and now - failed_at > _GRACE_S:
            break
        if now - start > timeout_s:
            reason = reason or f"the cluster did not finish within {timeout_s:g} s"
            break
        time.sleep(0.05)
    return first, reason


def _stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """Kills each worker's whole process group: the worker and whatever it started."""
    for process in processes:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
    for process in processes:
        process.wait()


def launch_local(
    target: Callable[..., Any] | str | os.PathLike[str],
    *,
    num_processes: int = 2,
    devices_per_process: int = 2,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    timeout_s: float = 120.0,
    init_timeout_s: int = 30,
    env: Mapping[str, str] | None = None,
) -> list[ProcessResult]:
    """Runs `target` on every process of a fresh local JAX cluster; returns each result.

    Starts `num_processes` Python processes, each with `devices_per_process`
    simulated CPU devices (``JAX_PLATFORMS=cpu``), joined as one cluster on a free
    port of 127.0.0.1. Inside, ``jax.process_count()`` is `num_processes` and
    ``jax.devices()`` lists all processes' devices. The processes are gone when this
    returns or raises.

    Args:
        target: a function, called as ``target(*args, **kwargs)`` on every process, or
            the path of a ``.py`` script, run as ``__main__`` with ``sys.argv[1:] =
            args``. A function from an importable module is imported by each process;
            one defined in a notebook or ``__main__`` is re-created from its source, so
            it must do its own imports. Its return value must pickle.
        num_processes: how many processes (JAX hosts).
        devices_per_process: simulated CPU devices in each process.
        args: positional arguments for the target (they must pickle).
        kwargs: keyword arguments for a function target.
        timeout_s: the most the whole run may take before everything is stopped.
        init_timeout_s: how long processes wait for each other to join.
        env: extra environment variables for the processes.

    Returns:
        One `ProcessResult` per process, in process order: the target's return value
        (None for a script) and everything the process printed.

    Raises:
        ClusterError: a process raised, crashed, was killed, never joined, or the run
            exceeded `timeout_s`; the message names the process and shows the tail of
            its output. Raised within ``_GRACE_S`` (2) seconds of the failure.
        TypeError, ValueError: the target or a count is not usable.

    Example:
        >>> def hello():
        ...     import jax
        ...     return jax.process_index(), jax.process_count(), jax.device_count()
        >>> [r.value for r in launch_local(hello, num_processes=2, devices_per_process=2)]
        [(0, 2, 4), (1, 2, 4)]
    """
    _check_positive("num_processes", num_processes)
    _check_positive("devices_per_process", devices_per_process)
    port = free_port()
    job = {
        "target": _describe_target(target),
        "args": tuple(args),
        "kwargs": dict(kwargs or {}),
        "coordinator_address": f"127.0.0.1:{port}",
        "num_processes": num_processes,
        "devices_per_process": devices_per_process,
        "init_timeout_s": int(init_timeout_s),
        "heartbeat_timeout_s": 10,
        "shutdown_timeout_s": 10,
        "sys_path": [entry for entry in sys.path if entry],
    }
    with tempfile.TemporaryDirectory(prefix="datarax-cluster-") as tmp:
        job_dir = Path(tmp)
        (job_dir / "job.pkl").write_bytes(pickle.dumps(job))
        log_paths = [job_dir / f"output-{i}.txt" for i in range(num_processes)]
        processes: list[subprocess.Popen[bytes]] = []
        try:
            for index, log_path in enumerate(log_paths):
                with open(log_path, "wb") as log:
                    processes.append(
                        subprocess.Popen(
                            [sys.executable, "-m", "datarax._cluster_worker", tmp, str(index)],
                            stdin=subprocess.DEVNULL,
                            stdout=log,
                            stderr=subprocess.STDOUT,
                            env=_worker_env(env),
                            start_new_session=True,
                        )
                    )
            first, reason = _watch(processes, job_dir, timeout_s, init_timeout_s + 15.0)
            codes = [process.poll() for process in processes]  # None: still running
        finally:
            _stop(processes)
        outputs = [path.read_text(errors="replace") for path in log_paths]
        records = [read_record(job_dir / f"result-{i}.pkl") for i in range(num_processes)]
        stages = [_stage(job_dir, i) for i in range(num_processes)]
    values = [record[1] for record in records if record is not None and record[0] == "ok"]
    if first is not None or reason or len(values) != num_processes:
        culprit, message = report(first, reason, codes, records, outputs, stages)
        raise ClusterError(message, culprit, outputs)
    return [
        ProcessResult(index, value, output)
        for index, (value, output) in enumerate(zip(values, outputs, strict=True))
    ]

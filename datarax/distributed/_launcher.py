"""A JAX cluster on one machine: N processes on 127.0.0.1, each with K CPU devices.

`launch_local` starts the processes, joins them into one JAX cluster with
``jax.distributed.initialize`` (gloo CPU collectives, cluster auto-detection off,
short timeouts), runs a function or a script on every process and returns what each
returned and printed. It is how the tests and tutorials exercise multi-host code
without a pod. When a process raises, crashes, is killed, leaves without a result or
never joins, it stops the others and raises `ClusterError` naming that process, with
the tail of its output, a few seconds later; a process killed by a signal is named
before the peers that then failed because it was gone. It never leaves a process
behind, not even when the launching process itself is killed (a Jupyter kernel
restart), and on Linux not what the processes started either, even what left their
process group.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from datarax.distributed import _args, _descendants
from datarax.distributed._args import DEVICE_COUNT_FLAG
from datarax.distributed._ports import free_port
from datarax.distributed._report import (
    coordinator_failed,
    read_output,
    read_record,
    report,
    signal_name,
    without_gloo_lines,
)
from datarax.distributed._watch import Workers, stage, stop, watch
from datarax.errors import ClusterError

_STARTS = 2  # a coordinator whose port was taken meanwhile gets one more, on a new port


@dataclasses.dataclass(frozen=True)
class ProcessResult:
    """What one process of the cluster returned and printed."""

    process_index: int
    value: Any
    output: str


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


def _worker_env(extra: Mapping[str, str], devices_per_process: int) -> dict[str, str]:
    """This process's environment, with `extra` and the launcher's settings on top.

    XLA_FLAGS are `extra`'s if it has them, else this process's, with the device-count
    flag set to `devices_per_process` (this process's own count is not the workers').
    """
    env = {**os.environ, **extra}
    flags = [f for f in env.get("XLA_FLAGS", "").split() if not f.startswith(DEVICE_COUNT_FLAG)]
    env["XLA_FLAGS"] = " ".join([*flags, f"{DEVICE_COUNT_FLAG}={devices_per_process}"])
    env["JAX_PLATFORMS"] = "cpu"  # workers never claim an accelerator, even on a TPU VM
    env["JAX_NUM_CPU_DEVICES"] = str(devices_per_process)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def launch_local(
    target: Callable[..., Any] | str | os.PathLike[str],
    *,
    num_processes: int = 2,
    devices_per_process: int = 2,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    timeout_s: float = 120.0,
    init_timeout_s: float = 30,
    shutdown_timeout_s: float = 10,
    env: Mapping[str, str] | None = None,
    verbose: bool = False,
) -> list[ProcessResult]:
    """Runs `target` on every process of a fresh local JAX cluster; returns each result.

    Starts `num_processes` Python processes, each with `devices_per_process`
    simulated CPU devices (``JAX_PLATFORMS=cpu``), joined as one cluster on a free
    port of 127.0.0.1 (`free_port`). Inside, ``jax.process_count()`` is
    `num_processes` and ``jax.devices()`` lists all processes' devices. The processes
    are gone when this returns or raises, and so is every process they started. When
    every target has returned but a process does not exit (an exit hook that hangs),
    it is stopped `shutdown_timeout_s` plus 2 s later and the results are returned.
    When process 0 fails inside ``jax.distributed.initialize`` before any process has
    joined (its coordinator did not start, as when its port was taken meanwhile), no
    target has run yet, so the cluster is started once more on a new port, within the
    same `timeout_s`, with a `RuntimeWarning`.

    Args:
        target: a function, called as ``target(*args, **kwargs)`` on every process, or
            the path of a ``.py`` script, run as ``__main__`` with ``sys.argv[1:] =
            args``. A function from an importable module is imported by each process;
            one defined in a notebook or ``__main__`` is re-created from its source, so
            it must do its own imports. Its return value must pickle.
        num_processes: how many processes (JAX hosts), from 1 to 64: each is a
            Python interpreter with its own JAX runtime.
        devices_per_process: simulated CPU devices in each process, from 1 to 512.
        args: a tuple or list of positional arguments for the target (they must
            pickle).
        kwargs: keyword arguments for a function target (a script takes none).
        timeout_s: the most the whole run may take before everything is stopped, in
            seconds: finite and above 0.
        init_timeout_s: how long processes wait for each other to join, from 1 to
            3600 seconds (rounded up to whole seconds).
        shutdown_timeout_s: how long a process that has returned waits for the others
            before the cluster gives up on them, from 1 to 3600 seconds (rounded up).
        env: environment variables for the processes, str names to str values, on
            top of this process's environment. ``XLA_FLAGS`` replaces this process's
            flags; a device-count flag in it must say `devices_per_process`, which the
            launcher adds. ``JAX_PLATFORMS`` may only be ``'cpu'``, and the variables
            the launcher sets itself (``JAX_NUM_CPU_DEVICES``,
            ``JAX_CPU_COLLECTIVES_IMPLEMENTATION``, ``PYTHONUNBUFFERED``,
            ``DATARAX_CLUSTER_RUN``) only the value it gives them.
        verbose: keep the lines the gloo CPU collectives print as each process
            connects to its peers ("[Gloo] Rank 0 is connected to 3 peer ranks ...")
            in the outputs; by default they are left out.

    Returns:
        One `ProcessResult` per process, in process order: the target's return value
        (None for a script) and everything the process printed (without gloo's
        connection lines, unless `verbose`).

    Raises:
        ClusterError: a process raised, crashed, was killed, exited without a result,
            never joined, or the run exceeded `timeout_s`; the message names the
            process, says what the signal that ended it usually means (a crash such as
            SIGSEGV, or a kill such as SIGKILL; also in ``signal``) and shows the last
            25 lines of its output, each cut to 500 characters. Raised within 2
            seconds of the failure, or once a process already ending has ended (at
            most 10 s more), so that it is named with its own signal.
        EnvironmentVariableError: `env` sets a variable that the launcher sets, to
            another value (a `ValueError`); nothing was started.
        TypeError, ValueError: an argument is not usable; nothing was started.

    Example:
        >>> def hello():
        ...     import jax
        ...     return jax.process_index(), jax.process_count(), jax.device_count()
        >>> [r.value for r in launch_local(hello, num_processes=2, devices_per_process=2)]
        [(0, 2, 4), (1, 2, 4)]
    """
    if not isinstance(verbose, bool):
        raise TypeError(f"verbose must be True or False, got {verbose!r}.")
    shown: Callable[[str], str] = (lambda text: text) if verbose else without_gloo_lines
    script = isinstance(target, (str, os.PathLike))
    options = _args.check(
        script=script,
        num_processes=num_processes,
        devices_per_process=devices_per_process,
        args=args,
        kwargs=kwargs,
        timeout_s=timeout_s,
        init_timeout_s=init_timeout_s,
        shutdown_timeout_s=shutdown_timeout_s,
        env=env,
    )
    job = {
        "target": _describe_target(target),
        "args": options.args,
        "kwargs": options.kwargs,
        "num_processes": options.num_processes,
        "devices_per_process": options.devices_per_process,
        "init_timeout_s": options.init_timeout_s,
        "heartbeat_timeout_s": 10,
        "shutdown_timeout_s": options.shutdown_timeout_s,
        "sys_path": [entry for entry in sys.path if entry],
    }
    try:
        pickle.dumps(job)
    except Exception as error:
        raise TypeError(
            f"args and kwargs must pickle, since each process gets its own copy: {error}"
        ) from None
    deadline = time.monotonic() + options.timeout_s
    for start in range(1, _STARTS + 1):
        address = f"127.0.0.1:{free_port()}"
        outcome = _start({**job, "coordinator_address": address}, options, shown, start)
        if isinstance(outcome, list):
            return outcome
        error, coordinator_failed = outcome
        left_s = deadline - time.monotonic()
        if start == _STARTS or not coordinator_failed or left_s <= 0:
            raise error
        warnings.warn(
            f"The local cluster's coordinator could not start on {address} (a port taken "
            "meanwhile fails this way); starting the cluster again on a new port.",
            RuntimeWarning,
            stacklevel=2,
        )
        options = dataclasses.replace(options, timeout_s=left_s)
    raise AssertionError("unreachable: the last start returns or raises")


def _start(
    job: dict[str, Any], options: _args.Options, shown: Callable[[str], str], attempt: int
) -> list[ProcessResult] | tuple[ClusterError, bool]:
    """Runs the cluster once: its results, or the error to raise and whether it was the
    coordinator that could not start (see `coordinator_failed`)."""
    count = options.num_processes
    with tempfile.TemporaryDirectory(prefix="datarax-cluster-") as tmp:
        job_dir = Path(tmp)
        (job_dir / "job.pkl").write_bytes(pickle.dumps(job))
        log_paths = [job_dir / f"output-{i}.txt" for i in range(count)]
        first, reason, codes, order = _run(job_dir, log_paths, options)
        records = [read_record(job_dir / f"result-{i}.pkl") for i in range(count)]
        stages = [stage(job_dir, i) for i in range(count)]
        values = [record[1] for record in records if record is not None and record[0] == "ok"]
        if first is not None or reason or len(values) != count:
            outputs = [shown(read_output(path)) for path in log_paths]
            culprit, message = report(
                first, reason, codes, records, outputs, stages, exit_order=order, attempts=attempt
            )
            error = ClusterError(
                message,
                process_index=culprit,
                outputs=outputs,
                signal=signal_name(codes[culprit]),
            )
            return error, culprit == 0 and coordinator_failed(codes, stages)
        outputs = [shown(path.read_text(errors="replace")) for path in log_paths]
    return [
        ProcessResult(index, value, output)
        for index, (value, output) in enumerate(zip(values, outputs, strict=True))
    ]


def _run(
    job_dir: Path, log_paths: Sequence[Path], options: _args.Options
) -> tuple[int | None, str, list[int | None], list[int]]:
    """Starts the processes, watches them and stops what is left of them.

    Each process inherits the read end of a pipe whose write end only this process
    holds, so it sees end-of-file and stops itself when this process dies.
    """
    watch_read, watch_write = os.pipe()  # neither end is inherited unless passed
    processes: list[subprocess.Popen[bytes]] = []
    workers = Workers(processes, mark=str(job_dir))
    command = [sys.executable, "-m", "datarax.distributed._worker", str(job_dir)]
    env = {
        **_worker_env(options.env, options.devices_per_process),
        _descendants.MARK_VARIABLE: str(job_dir),
    }
    try:
        for index, log_path in enumerate(log_paths):
            with open(log_path, "wb") as log:
                processes.append(
                    subprocess.Popen(
                        [*command, str(index), str(watch_read)],
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        env=env,
                        start_new_session=True,
                        pass_fds=(watch_read,),
                    )
                )
        os.close(watch_read)
        watch_read = -1
        join_deadline_s = options.init_timeout_s + 15.0
        return watch(
            workers, job_dir, options.timeout_s, join_deadline_s, options.shutdown_timeout_s
        )
    finally:
        stop(workers)
        for end in (watch_read, watch_write):
            if end >= 0:
                os.close(end)

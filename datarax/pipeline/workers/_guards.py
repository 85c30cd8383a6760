"""Clear errors for the two ways a script breaks a pipeline's worker processes.

**A script without ``if __name__ == "__main__":``.** A worker process starts fresh
(forked from a forkserver), and before anything else it imports the script the
pipeline's process runs, as a module named ``__mp_main__``, so that the functions and
classes the script defines can be unpickled there: the script's top-level code runs
again in every worker. If that code iterates a pipeline with workers, every worker
would start workers of its own, and they theirs. `leave_if_importing_main` (called when
such a pipeline is iterated) ends a process that is still importing its parent's
script, before it starts any worker, with the exit code `NO_MAIN_GUARD_EXIT` and a
message on its stderr. The pipeline's process sees a worker's pipe close, reads its
workers' exit codes from their processes, finds that code among them and raises the
error that names the fix (`raise_if_no_main_guard`) instead of "a worker died".

How a process knows it is importing its parent's script: while a ``spawn`` or
``forkserver`` child prepares (imports the parent's ``__main__``, unpickles what it is to
run), multiprocessing marks its process object, and reads the same mark to refuse
starting a process from there (`datarax._syscompat.importing_main` reads it).
`multiprocessing.parent_process()` is still None at that point, and
``sys.modules["__main__"]`` is not yet the script, so neither tells.

**JAX in a worker.** The pipeline's process holds the host's accelerator: on a TPU
host, JAX in a worker left to choose fails with "The TPU is already in use by process
...". So JAX in a worker runs on CPU only: `run_jax_on_cpu` sets it,
before the worker unpickles the source and stages, and before the script is imported
again when the worker was forked from the forkserver this library started (which
imports `datarax.pipeline.workers._preload` first: every process forked from that
forkserver, also one a user starts from it later, runs JAX on CPU). A host stage must
return host data (numpy): `check_jax_in_worker`, after the source is read and after each
stage, raises an error naming the stage when a stage returned jax.Arrays, or when JAX
started a backend other than CPU in the worker. Asking JAX's platform costs about a
microsecond a check (less once JAX has started on CPU); looking for jax.Arrays among a
batch's leaves, a few microseconds a stage.
"""

from __future__ import annotations

import multiprocessing.forkserver
import os
import sys
from collections.abc import Iterable
from typing import Any

import jax

from datarax._compat import backends_started
from datarax._syscompat import importing_main, running_inside
from datarax.errors import NoMainGuardError, WorkerArrayError, WorkerDeviceError

# The exit code of a process that left because it was importing its parent's script.
NO_MAIN_GUARD_EXIT = 87
# What the first check of a batch names: what ran in the worker before any batch.
AT_START = (
    "the worker's start (the script's top-level code, which every worker runs again, or "
    "the unpickling of the source and stages)"
)
_MAIN_GUARD = 'if __name__ == "__main__":'
_parent_backend: str | None = None  # in a worker: the JAX platform of the pipeline's process
_on_cpu = False  # in a worker: JAX started its backends, on CPU (they start once: it stays so)


def _script(main_name: str) -> str:
    path = getattr(sys.modules.get(main_name), "__file__", None)
    return str(path) if path else "the script"


def leave_if_importing_main(doing: str) -> None:
    """Ends this process, with `NO_MAIN_GUARD_EXIT`, when it is a child still importing
    its parent's script, whose code is `doing` what must not happen there, e.g.
    ``"iterates a Pipeline with workers=2, which would start workers in every worker"``."""
    if not importing_main():
        return
    message = (
        f"datarax: this process was started by multiprocessing (a pipeline worker, say) "
        f"and runs the top-level code of {_script('__mp_main__')} again, as every such "
        f"process does on starting, and that code {doing}. Put the script's code under "
        f"`{_MAIN_GUARD}` (functions and classes the stages use may stay at the top), or "
        f"use workers=0. This process exits with code {NO_MAIN_GUARD_EXIT}.\n"
    )
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is sys.stderr:
                stream.write(message)
            stream.flush()
        except (OSError, ValueError, AttributeError):  # closed or absent: exit all the same
            pass
    # Not sys.exit: the forkserver's child turns a SystemExit into exit code 1.
    os._exit(NO_MAIN_GUARD_EXIT)


def raise_if_no_main_guard(exit_codes: Iterable[int | None], error: BaseException) -> None:
    """Raises the error naming the missing main guard when a worker left because it was
    importing the script (`leave_if_importing_main`); `error` is the pool's."""
    exit_codes = list(exit_codes)
    if NO_MAIN_GUARD_EXIT not in exit_codes:
        return
    raise NoMainGuardError(
        f"The pipeline's worker processes ended as they started: each runs the top-level "
        f"code of {_script('__main__')} again on starting (a new process imports the "
        "script that started it, to find the functions and classes it defines), and that "
        "code iterates a Pipeline with workers, which would start workers in every "
        f"worker, without end. Put the code that builds and iterates the pipeline under "
        f"`{_MAIN_GUARD}` (the stages' functions and classes may stay at the top), or "
        "use workers=0.",
        exit_codes=exit_codes,
    ) from error


def started_platform() -> str | None:
    """The platform JAX runs on in this process (``"tpu"``, ``"gpu"``, ``"cpu"``), or
    None while JAX has started no backend. Starts none: in the pipeline's process that
    could take the accelerator before ``jax.distributed.initialize``."""
    return jax.default_backend() if backends_started() else None


def run_jax_on_cpu(parent: str | None) -> None:
    """In a worker, before anything in it uses JAX: JAX runs on CPU only here, and
    processes the worker starts inherit that. `parent` is `started_platform` of the
    pipeline's process, for the errors of `check_jax_in_worker`."""
    global _parent_backend
    _parent_backend = parent
    os.environ["JAX_PLATFORMS"] = "cpu"
    if not backends_started():  # once started, it changes nothing: the check tells
        jax.config.update("jax_platforms", "cpu")


def in_forkserver() -> bool:
    """Whether this code runs inside multiprocessing's forkserver loading its preloads."""
    return running_inside(getattr(multiprocessing.forkserver.main, "__code__", None))


def _devices() -> str:
    if _parent_backend and _parent_backend != "cpu":
        return f"this host's {_parent_backend.upper()} belongs to the pipeline's process"
    return "the devices belong to the pipeline's process"


def check_jax_in_worker(what: str, batch: Any = None) -> None:
    """In a worker, after `what` ran (``stages[1]``; `AT_START`; the source's
    ``__getitem__``): raises when JAX started a backend other than CPU here, or when
    `batch` holds jax.Arrays.

    Raises:
        WorkerDeviceError: JAX runs on another platform than CPU in this worker.
        WorkerArrayError: `batch` holds jax.Arrays.
    """
    global _on_cpu
    platform = None if _on_cpu else started_platform()
    if platform == "cpu":
        _on_cpu = True
    elif platform is not None:
        raise WorkerDeviceError(
            f"{what} started JAX on {platform.upper()} in a pipeline worker process, but "
            f"workers run JAX on CPU only: {_devices()}. Host "
            "stages must return numpy arrays: do JAX work on the batch after it is placed "
            "(device_stages with sharding=, or your step), keep top-level JAX code of a "
            f"script under `{_MAIN_GUARD}`, or use workers=0.",
            stage=what,
            platform=platform,
        )
    if batch is None:
        return
    leaves = [leaf for leaf in jax.tree_util.tree_leaves(batch) if isinstance(leaf, jax.Array)]
    if leaves:
        places = sorted({device.platform.upper() for device in leaves[0].sharding.device_set})
        raise WorkerArrayError(
            f"{what} returned jax.Arrays in a pipeline worker process (on {', '.join(places)} "
            f"there), whose devices are not this program's: {_devices()}, and workers run "
            "JAX on CPU only. Host stages must return numpy arrays "
            "(np.asarray); a stage that places batches on devices (a sharder's shard) or "
            "computes with JAX belongs in device_stages, after the placement, or in a "
            "pipeline with workers=0.",
            stage=what,
        )

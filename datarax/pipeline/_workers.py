"""Host work on every core: a `Pipeline`'s reading and host stages in worker processes.

With ``workers=N`` a pipeline hands the making of each host batch (reading its rows
from the source, then every host stage) to a `concurrent.futures.ProcessPoolExecutor`
of N processes, started from a ``forkserver`` (never ``fork``: forking a process in
which JAX runs threads is unsafe). The source and stages are pickled once, when the
pipeline is built, and unpickled once per worker; a task is then only the row indices
of one batch, and its answer the batch, pickled back. The parent keeps the order: it
asks for batch k and for a bounded number after it (``2 * N`` in flight), and takes
them back in order, so the batches are the ones ``workers=0`` makes.

The workers start at the pipeline's first batch and serve all its epochs. None
outlives its use: the pool is stopped when the pipeline is collected (a worker still at
work `_CLOSE_GRACE_S` later is terminated, so a stage that never returns does not hold
it up) and at exit. At exit, Python's own handler for process pools runs first and
waits for the batches in flight: a stage that never returns then holds up exit, unless
the pipeline was deleted before. A stage in a worker
must return host data: jax.Arrays there are an error naming the stage. A
worker ignores Ctrl-C (the parent handles it and closes the pool), and a thread in
each worker ends it within `_WATCH_S` once the pipeline's process is gone, even
after a SIGKILL; the forkserver then exits too.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import pickletools
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

import jax

from datarax.pipeline._sources import Rows, read_rows

_WATCH_S = 0.2  # how often a worker checks that its parent is still there
_AHEAD_PER_WORKER = 2  # batches in flight per worker
_CLOSE_GRACE_S = 1.0  # how long a closing pool's workers may take to finish their batch
_context = multiprocessing.get_context("forkserver")
_work: tuple[Any, tuple[Callable[[Any], Any], ...]] | None = None  # (source, stages), per worker


def _refusal(name: str, what: object, why: str) -> TypeError:
    return TypeError(
        f"workers= runs the source and host stages in other processes, which receive them "
        f"pickled, but {name} ({type(what).__name__} {what!r:.60}) {why}. Define it as a "
        "top-level function or class in a module (a .py file) you import, or use workers=0 "
        "to run it in this process."
    )


def pickled_for_workers(source: Any, stages: Sequence[Callable[[Any], Any]]) -> bytes:
    """`source` and `stages` pickled for the workers.

    Raises:
        TypeError: one of them cannot be pickled, or is defined in an interactive
            ``__main__`` (a notebook cell), which a worker process cannot import.
    """
    main = sys.modules.get("__main__")
    # A worker re-imports a script's __main__ by its path, but not a notebook's, an
    # interactive session's or a module's run with -m.
    unimportable = not hasattr(main, "__file__") or getattr(main, "__spec__", None) is not None
    # Protocol 2 names every global a pickle needs in its GLOBAL opcodes, which is how
    # a reference to __main__ is found; otherwise the default protocol. Each part is
    # pickled once: the payload is the list of the parts' pickles.
    protocol = 2 if unimportable else pickle.DEFAULT_PROTOCOL
    parts = []
    for name, what in (("source", source), *((f"stages[{i}]", s) for i, s in enumerate(stages))):
        try:
            part = pickle.dumps(what, protocol=protocol)
        except Exception as error:  # pickle raises several types: each one is this refusal
            raise _refusal(name, what, f"cannot be pickled ({error})") from error
        if unimportable and "__main__" in _modules_named(part):
            why = "is defined in __main__ (a notebook, a session or a module run with -m)"
            raise _refusal(name, what, why)
        parts.append(part)
    return pickle.dumps(parts)


def _modules_named(payload: bytes) -> set[str]:
    """The modules a protocol-2 pickle imports to load (its GLOBAL opcodes)."""
    return {
        str(argument).split(" ")[0]
        for opcode, argument, _ in pickletools.genops(payload)
        if opcode.name == "GLOBAL"
    }


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return False  # the number now belongs to another user's process
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc (macOS): os.kill said it exists


def _watch_parent(parent: int) -> None:
    # Not os.getppid(): a forkserver's child has the forkserver as parent, and the
    # forkserver lives as long as its children do.
    while _alive(parent):
        time.sleep(_WATCH_S)
    os._exit(0)  # the pipeline's process is gone: nobody wants the batches any more


def _start_worker(payload: bytes, parent: int) -> None:
    global _work
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which closes us
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    source, *stages = (pickle.loads(part) for part in pickle.loads(payload))
    _work = source, tuple(stages)


def _make_batch(rows: Rows) -> Any:
    """In a worker: the rows read from the source, through every host stage."""
    from datarax.pipeline._pipeline import call_stage, stop_iteration_error

    assert _work is not None, "the worker was not started by _start_worker"
    source, stages = _work
    try:
        batch = read_rows(source, rows)
    except StopIteration as error:
        raise stop_iteration_error("the source's __getitem__", error) from error
    for position, stage in enumerate(stages):
        try:
            batch = call_stage(stage, f"stages[{position}]", batch)
            if any(isinstance(leaf, jax.Array) for leaf in jax.tree_util.tree_leaves(batch)):
                raise TypeError(
                    f"stages[{position}] returned jax.Arrays in a pipeline worker process, "
                    "whose devices are not this program's: a stage that places batches on "
                    "devices (a sharder's shard) belongs in device_stages, or in a pipeline "
                    "with workers=0."
                )
        except Exception as error:
            error.add_note(f"Raised by stages[{position}] in a pipeline worker process.")
            if not _round_trips(error):
                raise RuntimeError(
                    f"stages[{position}] raised {error!r} in a pipeline worker process, an "
                    "exception that cannot be rebuilt from its pickle to reach you here "
                    "(it needs arguments its args do not hold). Run with workers=0 to get "
                    "it as it is."
                ) from None
            raise
    return batch


def _round_trips(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # any failure to rebuild it means the parent could not either
        return False
    return True


class HostWorkers:
    """`workers` processes making a pipeline's host batches, ahead of the parent, in order.

    `batch` returns batch `index` of `epoch` and keeps the next ones in flight; a
    batch whose making raised is forgotten, so asking again makes it again.
    """

    def __init__(self, payload: bytes, workers: int):
        self._payload, self._workers = payload, workers
        self._pool: ProcessPoolExecutor | None = None  # started at the first batch
        self._ahead = _AHEAD_PER_WORKER * workers
        self._pending: dict[tuple[int, int], Future[Any]] = {}

    def batch(self, epoch: int, index: int, end: int, rows_of: Callable[[int], Rows]) -> Any:
        """Batch `index` of `epoch` (of `end` batches); `rows_of(k)` are batch k's rows."""
        wanted = {(epoch, k) for k in range(index, min(index + self._ahead, end))}
        for key in [key for key in self._pending if key not in wanted]:
            self._pending.pop(key).cancel()  # another epoch or position: not needed now
        if self._pool is None:
            # Set only when workers are used: the forkserver then starts with the
            # library imported, so every worker forked from it starts in milliseconds.
            _context.set_forkserver_preload([__name__])
            self._pool = ProcessPoolExecutor(
                self._workers,
                mp_context=_context,
                initializer=_start_worker,
                initargs=(self._payload, os.getpid()),
            )
        try:
            for key in sorted(wanted - self._pending.keys()):
                self._pending[key] = self._pool.submit(_make_batch, rows_of(key[1]))
            return self._pending.pop((epoch, index)).result()
        except BrokenProcessPool as error:
            self.close()
            raise RuntimeError(
                "A pipeline worker process died (killed, out of memory, or it could not "
                "unpickle the source or a stage). The next next() starts new workers; "
                "workers=0 runs everything in this process."
            ) from error

    def close(self) -> None:
        """Stops the workers: they finish the batches handed to them, or are terminated
        after `_CLOSE_GRACE_S`."""
        for future in self._pending.values():
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            pool, self._pool = self._pool, None
            # Read before shutdown, which drops them.
            processes = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            # A worker ends once the batches already handed to it are made. One that is
            # still at work after the grace period is terminated: the pool's exit
            # handler would otherwise wait for a stage that never returns. Not at once:
            # a worker killed while it sends a batch would leave the pool's reader
            # waiting for the rest of it.
            deadline = time.monotonic() + _CLOSE_GRACE_S
            for process in processes:
                process.join(max(0.0, deadline - time.monotonic()))
                if process.is_alive():
                    process.terminate()

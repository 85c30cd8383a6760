"""Host work on every core: a `Pipeline`'s reading and host stages in worker processes.

With ``workers=N`` a pipeline hands the making of each host batch (reading its rows
from the source, then every host stage) to a `concurrent.futures.ProcessPoolExecutor`
of N processes, started from a ``forkserver`` (never ``fork``: forking a process in
which JAX runs threads is unsafe). The source and stages are pickled once, when the
pipeline is built, and unpickled once per worker, an array over a memory-mapped file
travelling as the file's path (`datarax.pipeline._shared_sources`), not as its bytes; a
task is then only the row indices of one batch and a shared-memory slot to write it
into, and its answer the batch's structure, its numpy arrays in the slot
(`datarax.pipeline._shared_batches`). The parent keeps the order: it asks for batch k
and for a bounded number after it (``2 * N`` in flight, running on into the next
epoch), and takes them back in order, so the batches are the ones ``workers=0`` makes.

The workers start at the pipeline's first batch and serve all its epochs. Each runs its
own copy of the source and stages, unpickled from the pickle made when the pipeline was
built: state a stage changes as it runs (a counter, its own random generator, an
``nnx.Rngs``) changes in that worker's copy only, and which worker makes which batch is
not fixed. None outlives its use: the pool is closed when the pipeline is collected. A
closing pool's workers get `_CLOSE_GRACE_S` to finish the batch they are making, then
SIGTERM, then after as long again SIGKILL, so a stage that never returns, even one that
ignores SIGTERM, does not hold up a deleted pipeline. At exit with the pipeline still
alive, Python's own handler for process pools runs first and waits for the batches in
flight: such a stage then holds up exit. A worker runs JAX on CPU only, and a stage in a
worker must return host data: jax.Arrays there are an error naming the stage, and so is
JAX started on another platform; a script that would start workers again in every
worker (no ``if __name__ == "__main__":``) is an error that says so
(`datarax.pipeline._worker_checks`). A worker ignores Ctrl-C (the
parent handles it and closes the pool), and a thread in each worker ends it within
`_WATCH_S` once the pipeline's process is gone, even after a SIGKILL; the forkserver
then exits too. The pool's own threads start with every asynchronous signal blocked, so
a Ctrl-C reaches the main thread (see `_signals_left_to_the_main_thread`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import pickle
import pickletools
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.process import BaseProcess
from typing import Any

from datarax.pipeline._shared_batches import Answer, Lent, Slots, WorkerSide, delete_files_of
from datarax.pipeline._shared_sources import SourceFileChangedError, dumps_for_workers
from datarax.pipeline._sources import Rows, read_rows
from datarax.pipeline._worker_checks import (
    AT_START,
    check_jax_in_worker,
    raise_if_no_main_guard,
    run_jax_on_cpu,
    started_platform,
    worker_exit_codes,
)

_WATCH_S = 0.2  # how often a worker checks that its parent is still there
_AHEAD_PER_WORKER = 2  # batches in flight per worker
_CLOSE_GRACE_S = 1.0  # how long a closing pool's workers may take to finish their batch
_context = multiprocessing.get_context("forkserver")
_work: tuple[Any, tuple[Callable[[Any], Any], ...]] | None = None  # (source, stages), per worker
_unusable: SourceFileChangedError | None = None  # in a worker: why its source could not load
_side = WorkerSide()  # in a worker: the slots it writes batches into
# Raised by a fault in the thread at fault: left unblocked, so that thread still dies of it.
_FAULTS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT}


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
            part = dumps_for_workers(what, protocol)
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
    delete_files_of(parent)  # its batch slots: nobody else will delete them now
    os._exit(0)  # the pipeline's process is gone: nobody wants the batches any more


@contextlib.contextmanager
def _signals_left_to_the_main_thread() -> Iterator[None]:
    """Threads started inside this block never take an asynchronous signal (Ctrl-C,
    SIGTERM, ...): a thread keeps the signal mask of the thread that started it.

    The kernel hands a signal sent to a process to any of its threads that does not block
    it. Python runs the handler in the main thread, but a call blocked there (reading
    stdin, waiting for a batch) is interrupted only when the kernel picked the main
    thread: a signal another thread took leaves it blocked, the KeyboardInterrupt pending
    until the call returns by itself, or never. The pool's threads wake at every batch
    that comes back, so under load they are there to take one.
    """
    if not hasattr(signal, "pthread_sigmask"):  # Windows, which has no forkserver either
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - _FAULTS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _start_worker(payload: bytes, parent: int, backend: str | None) -> None:
    global _work, _unusable
    run_jax_on_cpu(backend)  # first: unpickling the source and stages may use JAX
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which closes us
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:
        source, *stages = (pickle.loads(part) for part in pickle.loads(payload))
    except SourceFileChangedError as error:
        # Raised by every batch asked for, so that it reaches the caller as it is: an
        # initializer that raises only breaks the pool, which says a worker died.
        _unusable = error
        return
    _work = source, tuple(stages)


def _make_batch(rows: Rows, slot: Lent | None) -> Answer:
    """In a worker: the rows read from the source, through every host stage, written
    into `slot`."""
    from datarax.pipeline._pipeline import call_stage, stop_iteration_error

    if _unusable is not None:
        raise SourceFileChangedError(*_unusable.args, path=_unusable.path)
    assert _work is not None, "the worker was not started by _start_worker"
    source, stages = _work
    check_jax_in_worker(AT_START)
    try:
        batch = read_rows(source, rows)
    except StopIteration as error:
        raise stop_iteration_error("the source's __getitem__", error) from error
    check_jax_in_worker("the source's __getitem__")
    for position, stage in enumerate(stages):
        where = f"stages[{position}]"
        try:
            batch = call_stage(stage, where, batch)
            check_jax_in_worker(where, batch)
        except Exception as error:
            error.add_note(
                f"Raised by {where} in a pipeline worker process, where JAX runs on CPU only."
            )
            if not _round_trips(error):
                raise RuntimeError(
                    f"stages[{position}] raised {error!r} in a pipeline worker process, an "
                    "exception that cannot be rebuilt from its pickle to reach you here "
                    "(it needs arguments its args do not hold). Run with workers=0 to get "
                    "it as it is."
                ) from None
            raise
    return _side.answer(batch, slot)


def _round_trips(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # any failure to rebuild it means the parent could not either
        return False
    return True


class HostWorkers:
    """`workers` processes making a pipeline's host batches, ahead of the parent, in order.

    `batch` returns batch `index` of `epoch` and keeps the next ones in flight, into the
    next epoch; a batch whose making raised is forgotten, so asking again makes it again.
    Batches come back through shared memory (`datarax.pipeline._shared_batches`).
    """

    def __init__(self, payload: bytes, workers: int):
        self._payload, self._workers = payload, workers
        self._pool: ProcessPoolExecutor | None = None  # started at the first batch
        self._slots = Slots()
        self._ahead = _AHEAD_PER_WORKER * workers
        self._pending: dict[tuple[int, int], tuple[Future[Answer], Lent | None]] = {}

    def batch(
        self,
        epoch: int,
        index: int,
        end: int,
        next_end: int,
        rows_of: Callable[[int, int], Rows],
    ) -> Any:
        """Batch `index` of `epoch`, which has `end` batches (the next epoch `next_end`);
        `rows_of(e, k)` are the rows of batch k of epoch e."""
        wanted = self._wanted(epoch, index, end, next_end)
        for key in [key for key in self._pending if key not in wanted]:
            self._forget(key)  # another epoch or position: not needed now
        if self._pool is None:
            # Set only when workers are used: the forkserver then starts with the
            # library imported, so every worker forked from it starts in milliseconds.
            # Started here, before any signal is blocked: its workers take its mask.
            # The first preload sets JAX to CPU in the forkserver, so in every worker.
            _context.set_forkserver_preload(["datarax.pipeline._forkserver_preload", __name__])
            multiprocessing.forkserver.ensure_running()
            self._pool = ProcessPoolExecutor(
                self._workers,
                mp_context=_context,
                initializer=_start_worker,
                initargs=(self._payload, os.getpid(), started_platform()),
            )
        try:
            self._submit(wanted, rows_of)
            task, lent = self._pending.pop((epoch, index))
            try:
                answer = task.result()
            except BaseException:
                self._slots.give_back(lent)
                raise
            batch = self._slots.batch(answer, lent)
            # The batches after it go now: the first batch, made alone, told the slots' size.
            self._submit(self._wanted(epoch, index + 1, end, next_end), rows_of)
            return batch
        except BrokenProcessPool as error:
            exit_codes = worker_exit_codes(self._pool)  # before close() drops the workers
            self.close()
            raise_if_no_main_guard(exit_codes, error)
            raise RuntimeError(
                "A pipeline worker process died (killed, out of memory, or it could not "
                "unpickle the source or a stage). The next next() starts new workers; "
                "workers=0 runs everything in this process."
            ) from error

    def _wanted(self, epoch: int, index: int, end: int, next_end: int) -> list[tuple[int, int]]:
        """The (epoch, batch) to have in flight from batch `index` of `epoch` on. Until a
        first batch has told the slots' size, that one alone: those asked for meanwhile
        would come back pickled, the slow way for large arrays."""
        ahead = self._ahead if self._slots.sized else 1
        wanted = [(epoch, k) for k in range(index, min(end, index + ahead))]
        return wanted + [(epoch + 1, k) for k in range(min(next_end, ahead - len(wanted)))]

    def _submit(self, wanted: list[tuple[int, int]], rows_of: Callable[[int, int], Rows]) -> None:
        """Hands the workers every batch of `wanted` not in flight yet, each with a slot."""
        assert self._pool is not None, "submitted before the pool started"
        with _signals_left_to_the_main_thread():  # the pool starts its threads in submit
            for key in wanted:
                if key not in self._pending:
                    lent = self._slots.lend()
                    self._pending[key] = self._pool.submit(_make_batch, rows_of(*key), lent), lent

    def _forget(self, key: tuple[int, int]) -> None:
        """Drops the task for `key`; its slot comes back once the task ends or is cancelled."""
        task, lent = self._pending.pop(key)
        task.cancel()
        slots = self._slots
        task.add_done_callback(lambda _: slots.give_back(lent))

    def close(self) -> None:
        """Stops the workers: they finish the batches handed to them, or get SIGTERM after
        `_CLOSE_GRACE_S`, then SIGKILL after as long again. Deletes the slots' files."""
        for key in list(self._pending):
            self._forget(key)
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        # Read before shutdown, which drops them.
        processes = list((getattr(pool, "_processes", None) or {}).values())
        pool.shutdown(wait=False, cancel_futures=True)
        # A worker ends once the batches already handed to it are made. Not stopped at
        # once: a worker killed while it sends a batch would leave the pool's reader
        # waiting for the rest. One still at work after the grace is terminated, and one
        # that ignores SIGTERM is killed: the pool's thread waits for its batch until the
        # process is gone, and at exit Python's handler for process pools waits for that
        # thread.
        for process in _alive_after_grace(processes):
            process.terminate()
        for process in _alive_after_grace(processes):
            process.kill()
            process.join(_CLOSE_GRACE_S)
        self._slots.close()
        self._slots = Slots()  # for the workers the next batch starts


def _alive_after_grace(processes: Sequence[BaseProcess]) -> list[BaseProcess]:
    """The `processes` still running `_CLOSE_GRACE_S` from now (sooner once all ended)."""
    deadline = time.monotonic() + _CLOSE_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    return [process for process in processes if process.is_alive()]

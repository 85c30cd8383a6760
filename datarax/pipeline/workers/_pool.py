"""The pipeline's side of its worker processes: a pool that makes host batches ahead, in
order, and closes without leaving anything behind.

`HostWorkers` hands each batch (its rows and a shared-memory slot to write it into) to a
`concurrent.futures.ProcessPoolExecutor` of N processes started from a ``forkserver``
(never ``fork``: forking a process in which JAX runs threads is unsafe). It asks for
batch k and for a bounded number after it (``2 * N`` in flight, running on into the next
epoch), and takes them back in order, so the batches are the ones ``workers=0`` makes.
A batch whose making raised is forgotten: asking again makes it again.

The pool starts at the first batch and is closed when the pipeline is collected. A
closing pool's workers get `CLOSE_GRACE_S` to finish the batch they are making, then
SIGTERM, then after as long again SIGKILL, so a stage that never returns, even one that
ignores SIGTERM, does not hold up a deleted pipeline. At exit with the pipeline still
alive, Python's own handler for process pools runs first and waits for the batches in
flight: such a stage then holds up exit. The pool's own threads start with every
asynchronous signal blocked, so a Ctrl-C reaches the main thread
(`_signals_left_to_the_main_thread`).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.process import BaseProcess
from typing import Any

from datarax._syscompat import pool_processes
from datarax.errors import WorkerError
from datarax.pipeline._sources import Rows
from datarax.pipeline.workers._guards import (
    raise_if_no_main_guard,
    started_platform,
    worker_exit_codes,
)
from datarax.pipeline.workers._slots import Answer, Lent, Slots
from datarax.pipeline.workers._worker import make_batch, start_worker

AHEAD_PER_WORKER = 2  # batches in flight per worker
CLOSE_GRACE_S = 1.0  # how long a closing pool's workers may take to finish their batch
_context = multiprocessing.get_context("forkserver")
# Raised by a fault in the thread at fault: left unblocked, so that thread still dies of it.
_FAULTS = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL, signal.SIGABRT}
_PRELOAD = ["datarax.pipeline.workers._preload", "datarax.pipeline.workers._worker"]


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


class HostWorkers:
    """`workers` processes making a pipeline's host batches, ahead of the parent, in order.

    `batch` returns batch `index` of `epoch` and keeps the next ones in flight, into the
    next epoch; a batch whose making raised is forgotten, so asking again makes it again.
    Batches come back through shared memory (`datarax.pipeline.workers._slots`).
    """

    def __init__(self, payload: bytes, workers: int):
        self._payload, self._workers = payload, workers
        self._pool: ProcessPoolExecutor | None = None  # started at the first batch
        self._slots = Slots()
        self._ahead = AHEAD_PER_WORKER * workers
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
            _context.set_forkserver_preload(_PRELOAD)
            multiprocessing.forkserver.ensure_running()
            self._pool = ProcessPoolExecutor(
                self._workers,
                mp_context=_context,
                initializer=start_worker,
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
            raise WorkerError(
                "A pipeline worker process died (killed, out of memory, or it could not "
                "unpickle the source or a stage). The next next() starts new workers; "
                "workers=0 runs everything in this process.",
                exit_codes=exit_codes,
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
                    self._pending[key] = self._pool.submit(make_batch, rows_of(*key), lent), lent

    def _forget(self, key: tuple[int, int]) -> None:
        """Drops the task for `key`; its slot comes back once the task ends or is cancelled."""
        task, lent = self._pending.pop(key)
        task.cancel()
        slots = self._slots
        task.add_done_callback(lambda _: slots.give_back(lent))

    def close(self) -> None:
        """Stops the workers: they finish the batches handed to them, or get SIGTERM after
        `CLOSE_GRACE_S`, then SIGKILL after as long again. Deletes the slots' files."""
        for key in list(self._pending):
            self._forget(key)
        if self._pool is None:
            return
        pool, self._pool = self._pool, None
        # Read before shutdown, which drops them.
        processes = pool_processes(pool)
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
            process.join(CLOSE_GRACE_S)
        self._slots.close()
        self._slots = Slots()  # for the workers the next batch starts


def _alive_after_grace(processes: Sequence[BaseProcess]) -> list[BaseProcess]:
    """The `processes` still running `CLOSE_GRACE_S` from now (sooner once all ended)."""
    deadline = time.monotonic() + CLOSE_GRACE_S
    for process in processes:
        process.join(max(0.0, deadline - time.monotonic()))
    return [process for process in processes if process.is_alive()]

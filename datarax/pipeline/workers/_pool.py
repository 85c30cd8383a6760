"""The pipeline's side of its worker processes: a small pool that makes host batches
ahead, in order, and closes without leaving anything behind.

`HostWorkers` starts N worker processes (`WorkerProcess`: from a ``forkserver``, each
joined to this process by a pipe and nothing else, no named semaphores that a killed
process would leave in ``/dev/shm``). It sends each worker up to `AHEAD_PER_WORKER`
tasks (the rows of a batch and a slot to write it into), asks for batch k and the ones
after it, and reads the answers back in order, so the batches are the ones
``workers=0`` makes. A batch whose making raised is forgotten:
asking again makes it again. Waiting for an answer happens in the calling thread, so a
Ctrl-C interrupts it. The workers start at the first batch asked for, or, with
`start_in_background`, from a thread while the caller goes on: each says it is ready
once it has loaded the source and stages, and `ready` tells, without waiting, whether
all have. A worker that dies is noticed at once, by its exit or its broken
pipe: the call raises `WorkerError`, and the next one starts new workers, as it does
after a Ctrl-C that cut a message short (which leaves that pipe out of step).

Each worker leads its own process group, holding whatever its stages start. Closing
(when the pipeline is collected, or at exit, before multiprocessing's own exit handler)
asks each worker to stop, gives the busy ones `CLOSE_GRACE_S`, then kills every
worker's group, so neither a stage that never returns nor a process a stage started
outlives the pipeline.
"""

from __future__ import annotations

import atexit
import contextlib
import itertools
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from datarax.errors import WorkerError
from datarax.pipeline._options import Workers
from datarax.pipeline._sources import EpochRows, Rows
from datarax.pipeline._timing import BatchTimes
from datarax.pipeline.workers._guards import raise_if_no_main_guard
from datarax.pipeline.workers._process import PRELOAD, WorkerProcess, context
from datarax.pipeline.workers._slots import Lent, Slots

AHEAD_PER_WORKER = 2  # tasks sent to a worker before its first answer comes back
CLOSE_GRACE_S = 1.0  # how long a closing pool's busy workers may take to stop
_open: weakref.WeakSet[HostWorkers] = weakref.WeakSet()  # pools to close at exit
Key = tuple[int, int]  # (epoch, batch)
RowsOf = Callable[[int, int], Rows | EpochRows]  # the rows of batch k of epoch e


@dataclass
class _Task:
    number: int
    worker: WorkerProcess
    lent: Lent | None


class HostWorkers:
    """Worker processes making a pipeline's host batches, ahead of the pipeline, in order.

    `batch` returns batch `index` of `epoch` and keeps the next ones in flight (into the
    next epoch too, with ``read_next_epoch``). `payload` is the pickled source and stages.
    """

    def __init__(self, payload: bytes, options: Workers):
        assert isinstance(options.count, int) and options.count > 0, options
        self._payload, self._options, self._count = payload, options, options.count
        self._processes: list[WorkerProcess] = []  # started at the first batch
        self._slots = Slots()
        self._pending: dict[Key, _Task] = {}  # in flight, by batch
        self._answers: dict[int, tuple[bool, Any]] = {}  # read ahead of their turn
        self._abandoned: dict[int, Lent | None] = {}  # sent, then no longer wanted
        self._numbers = itertools.count()
        self._starter: threading.Thread | None = None  # starting the workers in the background

    def start_in_background(self) -> None:
        """Starts the workers from a thread of its own, so the caller goes on meanwhile;
        `ready` says when they can take batches. Should the start fail, the first batch
        asked for starts them again, and raises as a start there would."""
        self._starter = threading.Thread(
            target=self._start_quietly, name="datarax-pipeline-workers-start", daemon=True
        )
        _open.add(self)  # closed at exit even while starting
        self._starter.start()

    def _start_quietly(self) -> None:
        with contextlib.suppress(Exception):  # raised again by the first batch (see above)
            self._start()

    def ready(self) -> bool:
        """Whether every worker has started and loaded the source and stages (or ended,
        which the first batch asked for reports), without waiting."""
        if self._starter is not None and self._starter.is_alive():
            return False
        try:
            return all([worker.poll_ready() for worker in self._processes])  # every one read
        except BaseException:
            if any(worker.torn for worker in self._processes):
                self.close(grace_s=0)  # a pipe out of step: the next batch starts anew
            raise

    def batch(
        self,
        epoch: int,
        index: int,
        end: int,
        next_end: int,
        rows_of: RowsOf,
        times: BatchTimes,
    ) -> Any:
        """Batch `index` of `epoch`, which has `end` batches (the next epoch `next_end`);
        `rows_of(e, k)` are the rows of batch k of epoch e. Its times go to `times`.

        Raises:
            WorkerError: a worker died; the next call starts new ones.
        """
        try:
            return self._batch((epoch, index), end, next_end, rows_of, times)
        except BaseException:
            if any(worker.torn for worker in self._processes):
                self.close(grace_s=0)  # a pipe out of step: the next call starts anew
            raise

    def _batch(self, key: Key, end: int, next_end: int, rows_of: RowsOf, times: BatchTimes) -> Any:
        epoch, index = key
        self._join_starter()
        wanted = self._wanted(epoch, index, end, next_end)
        for key in [key for key in self._pending if key not in wanted]:
            self._abandon(self._pending.pop(key))
        starting = not self._processes
        if starting:
            self._start()
        self._send(wanted, rows_of)
        while (epoch, index) not in self._pending:  # every worker busy with older tasks
            self._receive(min(self._processes, key=lambda process: process.sent[0]))
            self._send(wanted, rows_of)
        task = self._pending.pop((epoch, index))
        waiting = time.perf_counter()
        try:
            succeeded, answer = self._answer(task)
        except BaseException:  # a Ctrl-C, say: its answer may still come
            self._abandon(task)
            raise
        if not succeeded:
            self._slots.give_back(task.lent)
            raise answer
        unpacking = time.perf_counter()
        batch = self._slots.batch(answer, task.lent)
        times.read, times.stages, into_slot = answer.seconds
        if starting:  # the first answer waited for the workers to start
            times.start = unpacking - waiting
        else:
            times.wait = unpacking - waiting
        times.move = into_slot + time.perf_counter() - unpacking
        times.copied = answer.copied
        self._send(self._wanted(epoch, index + 1, end, next_end), rows_of)
        return batch

    def _join_starter(self) -> None:
        """Waits for a start in the background to end (unless this is its thread: a
        pipeline collected there closes its pool)."""
        starter, self._starter = self._starter, None
        if starter is not None and starter is not threading.current_thread():
            starter.join()

    def _wanted(self, epoch: int, index: int, end: int, next_end: int) -> list[Key]:
        ahead = AHEAD_PER_WORKER * self._count
        wanted = [(epoch, k) for k in range(index, min(end, index + ahead))]
        if self._options.read_next_epoch:
            wanted += [(epoch + 1, k) for k in range(min(next_end, ahead - len(wanted)))]
        return wanted

    def _start(self) -> None:
        # Set only when workers are used: the forkserver then starts with the library
        # imported, so every worker forked from it starts in milliseconds; its first
        # preload sets JAX to CPU there, so in every worker.
        context.set_forkserver_preload(PRELOAD)
        multiprocessing.forkserver.ensure_running()
        self._processes = [WorkerProcess(self._payload, self._options) for _ in range(self._count)]
        _open.add(self)

    def _send(self, wanted: list[Key], rows_of: RowsOf) -> None:
        """Sends every batch of `wanted` not in flight yet to the least busy worker."""
        self._read_abandoned()
        for key in wanted:
            if key in self._pending:
                continue
            worker = min(self._processes, key=lambda process: len(process.sent))
            if len(worker.sent) >= AHEAD_PER_WORKER:
                return
            number, rows, lent = next(self._numbers), rows_of(*key), self._slots.lend()
            try:
                worker.send((number, rows, lent, self._slots.prefix))
            except OSError as error:  # the worker is gone (killed, say)
                raise self._died(error) from error
            worker.sent.append(number)
            self._pending[key] = _Task(number, worker, lent)

    def _read_abandoned(self) -> None:
        """Reads, without waiting, the answers that have come back to abandoned tasks at the
        head of a worker's queue: nobody else asks for them, and until they are read that
        worker counts as busy and takes no new task."""
        for worker in self._processes:
            while (
                worker.sent
                and worker.sent[0] in self._abandoned
                and worker.poll_ready()  # its first message says it is ready, not an answer
                and worker.connection.poll()
            ):
                self._receive(worker)

    def _abandon(self, task: _Task) -> None:
        """`task` is no longer wanted: its slots come back once its answer does."""
        if task.number in self._answers:
            self._discard(self._answers.pop(task.number), task.lent)
        else:
            self._abandoned[task.number] = task.lent

    def _discard(self, reply: tuple[bool, Any], lent: Lent | None) -> None:
        succeeded, answer = reply
        self._slots.discard(answer if succeeded else None, lent)

    def _answer(self, task: _Task) -> tuple[bool, Any]:
        """The answer to `task`, reading those sent before it to its worker first."""
        while task.number not in self._answers:
            self._receive(task.worker)
        return self._answers.pop(task.number)

    def _receive(self, worker: WorkerProcess) -> None:
        """Reads `worker`'s next answer: kept for its task, or discarded if abandoned."""
        try:
            number, succeeded, answer = worker.receive()
        except (EOFError, OSError) as error:
            raise self._died(error) from error
        assert worker.sent.popleft() == number, "a worker answered out of order"
        if number in self._abandoned:
            self._discard((succeeded, answer), self._abandoned.pop(number))
        else:
            self._answers[number] = succeeded, answer

    def _died(self, error: BaseException) -> WorkerError:
        """Closes the pool after a worker died; the error to raise (or the error naming a
        missing main guard, raised here)."""
        for worker in self._processes:
            worker.process.join(0.5)  # its exit code, once it has one
        codes = [worker.process.exitcode for worker in self._processes]
        self.close()
        raise_if_no_main_guard(codes, error)
        return WorkerError(
            f"A pipeline worker process died (exit codes {codes}: killed, out of memory, "
            "or it could not unpickle the source or a stage). The next next() starts new "
            "workers; workers=0 runs everything in this process.",
            exit_codes=codes,
        )

    def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Stops the workers and whatever their stages started, and deletes the slots.

        A worker told to stop ends its whole process group once the task at hand is
        done; one still busy after `grace_s` has its group killed from here (at once
        with ``grace_s=0``, which sends nothing down the pipes)."""
        self._join_starter()
        processes, self._processes = self._processes, []
        for worker in processes if grace_s else ():
            with contextlib.suppress(OSError):
                worker.connection.send(None)
        deadline = time.monotonic() + grace_s
        sentinels = [worker.process.sentinel for worker in processes]
        while sentinels and time.monotonic() < deadline:
            ended = multiprocessing.connection.wait(sentinels, deadline - time.monotonic())
            sentinels = [sentinel for sentinel in sentinels if sentinel not in ended]
        for worker in processes:
            if worker.process.is_alive():
                with contextlib.suppress(OSError):  # ended meanwhile, with its group
                    os.killpg(worker.process.pid, signal.SIGKILL)  # type: ignore[arg-type]
            worker.process.join(CLOSE_GRACE_S)
            worker.connection.close()
        self._pending.clear()
        self._answers.clear()
        self._abandoned.clear()
        self._slots.close()
        self._slots = Slots()  # for the workers the next batch starts
        _open.discard(self)


@atexit.register
def _close_all() -> None:
    """At exit, before multiprocessing's own handler (which would wait for the workers to
    finish their batches, forever for a stage that never returns): close every pool."""
    for workers in list(_open):
        workers.close()

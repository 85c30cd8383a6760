"""What runs inside a pipeline's worker process: its start, its loop, and the making of
a batch.

A worker starts with the pipeline's process's environment as it was when the pool
started, JAX on CPU only, glibc told to keep freed memory (`Workers.keep_freed_memory`),
and its own process group; it ignores Ctrl-C (the pipeline's process handles it and
closes the pool) and unpickles the source and stages once, then says it is `READY`
(whether they loaded or not: a failure to load is the answer to every task). It then
answers tasks in the order they come: the rows of one batch and a slot to write it into
(`datarax.pipeline.workers._slots`). Its answers go out through a thread of their own,
so the worker reads its next task while an answer waits for the pipeline's process to
read it: neither process blocks writing to the pipe while the other does (a task of a
shuffled batch holds its rows, an answer the pickled part of its batch: each may be
larger than the pipe holds). A stage's ``sys.exit`` or ``KeyboardInterrupt`` ends the
batch, not the worker: it comes back as a `WorkerError` naming the stage. It watches the
pipeline's process: once that is gone, even killed, or runs another program, it deletes
that process's slot files, once that process's lock is free
(`datarax.pipeline.workers._owners`: a broken pipe can come before the lock is), and
ends its process group. Asked to stop, it ends its process group too, so nothing its
stages started outlives it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import pickle
import queue
import select
import signal
import threading
import time
from multiprocessing.connection import Connection
from typing import Any

import jax

from datarax._syscompat import proc_stat
from datarax.errors import NotPicklableError, WorkerError
from datarax.pipeline._memory import keep_freed_memory
from datarax.pipeline._options import Workers
from datarax.pipeline._outputs import lending
from datarax.pipeline._sources import Rows, read_rows
from datarax.pipeline._stages import call_stage
from datarax.pipeline.workers._guards import AT_START, check_jax_in_worker, run_jax_on_cpu
from datarax.pipeline.workers._owners import pid_prefix, sweep_after
from datarax.pipeline.workers._slots import Answer, Lent
from datarax.pipeline.workers._worker_side import WorkerSide

READY = b"ready"  # a worker's first message: it has loaded the source and stages (or failed to)
WATCH_S = 0.2  # without pidfd: how often a worker checks that its pipeline's process lives
LEAVE_WAIT_S = 5.0  # how long a worker whose pipe broke waits for its pipeline's lock
_side = WorkerSide()


def _end_group() -> None:
    """Ends this worker and every process in its group (what its stages started); only
    this worker when it leads no group of its own (its start failed before)."""
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpid(), signal.SIGKILL)
    os._exit(0)


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the number is another user's
        return False
    stat = proc_stat(pid)
    return stat is None or stat.state != "Z"  # without /proc, os.kill said it exists


def _wait_for_exit(pid: int) -> None:
    """Returns once process `pid` has ended (at once through a pidfd where Linux has one)."""
    with contextlib.suppress(AttributeError, OSError):
        descriptor = os.pidfd_open(pid)  # Linux 5.3+: readable once the process ends
        select.select([descriptor], [], [])
        return
    while _alive(pid):
        time.sleep(WATCH_S)


def _leave(files: str, wait_s: float) -> None:
    """Ends this worker's group; first deletes the slot files of every owner proven gone,
    after waiting at most `wait_s` for the pipeline's process (whose files are named
    starting with `files`) to free its lock: once gone, nobody else would delete them."""
    sweep_after(files, wait_s)
    _end_group()


def _watch_parent(parent: int, files: str) -> None:
    # Not os.getppid(): a forkserver's child has the forkserver as parent, and the
    # forkserver lives as long as its children do.
    _wait_for_exit(parent)
    _leave(files, LEAVE_WAIT_S)  # nobody wants the batches any more


def _start(
    payload: bytes,
    parent: int,
    files: str,
    backend: str | None,
    environment: dict[str, str],
    keep: int,
) -> tuple[Any, tuple[Any, ...]] | Exception:
    """Sets this worker up; its source and stages, or why they could not be loaded."""
    os.environ.clear()
    os.environ.update(environment)
    run_jax_on_cpu(backend)  # first: unpickling the source and stages may use JAX
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is for the parent, which closes us
    os.setpgrp()
    if keep:
        keep_freed_memory(keep)
    threading.Thread(target=_watch_parent, args=(parent, files), daemon=True).start()
    try:
        source, *stages = (pickle.loads(part) for part in pickle.loads(payload))
    except Exception as error:  # raised by every batch asked for, to reach the caller
        error.add_note("Raised in a pipeline worker process loading the source and stages.")
        return error
    return source, tuple(stages)


class _Replies:
    """Sends a worker's answers, pickled, in order, from a thread of its own: the worker
    goes on reading tasks while the pipeline's process has yet to read an answer."""

    def __init__(self, connection: Connection):
        self._connection = connection
        self._queue: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        threading.Thread(target=self._send_all, daemon=True).start()

    def put(self, reply: bytes) -> None:
        self._queue.put(reply)

    def _send_all(self) -> None:
        with contextlib.suppress(OSError):  # the pipe broke: the main loop sees it too
            while True:
                self._connection.send_bytes(self._queue.get())


def serve(
    connection: Connection,
    payload: bytes,
    parent: int,
    backend: str | None,
    environment: dict[str, str],
    options: Workers,
) -> None:
    """A worker's life: set up, then answer each task until told to stop (None)."""
    files = pid_prefix(parent)  # read now, while the pipeline's process is there
    work = _start(payload, parent, files, backend, environment, options.keep_freed_memory)
    last = "the source's __getitem__"
    if isinstance(work, tuple) and work[1]:
        last = f"stages[{len(work[1]) - 1}]"
    wait_s = 0.0  # told to stop: the pipeline's process lives on and deletes its files
    try:
        connection.send_bytes(READY)  # before any answer: the pool may now send it batches
        replies = _Replies(connection)
        while True:
            task = connection.recv()  # EOFError once the pipeline's process is gone
            if task is None:  # told to stop
                return
            number, rows, lent, prefix = task
            try:
                reply = number, True, make_batch(work, rows, lent, prefix)
            except Exception as error:
                reply = number, False, error
            replies.put(_pickled(reply, last))
    except (EOFError, OSError):  # the pipe broke: the pipeline's process is gone or going
        wait_s = LEAVE_WAIT_S
    finally:  # whatever ended the loop, nothing this worker started outlives it
        connection.close()
        _leave(files, wait_s)


def make_batch(
    work: tuple[Any, tuple[Any, ...]] | Exception,
    rows: Rows,
    lent: Lent | None,
    prefix: str,
) -> Answer:
    """The rows read from the source, through every host stage, written into `lent`."""
    if isinstance(work, Exception):
        raise work.with_traceback(None)
    source, stages = work
    check_jax_in_worker(AT_START)
    start = time.perf_counter()
    try:
        batch = read_rows(source, rows)
    except (KeyboardInterrupt, SystemExit, GeneratorExit) as error:
        raise _exit_in_worker("the source's __getitem__", error) from None
    read = time.perf_counter()
    check_jax_in_worker("the source's __getitem__")
    with lending(_side.begin(lent)):  # output_array makes its arrays in the slot
        batch = _run_stages(stages, batch)
    made = time.perf_counter()
    answer = _side.answer(batch, lent, prefix)
    seconds = (read - start, made - read, time.perf_counter() - made)
    return dataclasses.replace(answer, seconds=seconds)


def _run_stages(stages: tuple[Any, ...], batch: Any) -> Any:
    """`batch` through every stage, each error naming its stage."""
    for position, stage in enumerate(stages):
        where = f"stages[{position}]"
        try:
            batch = call_stage(stage, where, batch)
            check_jax_in_worker(where, batch)
        except (KeyboardInterrupt, SystemExit, GeneratorExit) as error:
            raise _exit_in_worker(where, error) from None
        except Exception as error:
            error.add_note("It ran in a pipeline worker process, where JAX runs on CPU only.")
            if not _round_trips(error):
                raise WorkerError(
                    f"{where} raised {error!r} in a pipeline worker process, an exception "
                    "that cannot be rebuilt from its pickle to reach you here (it needs "
                    "arguments its args do not hold). Run with workers=0 to get it as it is."
                ) from None
            raise
    return batch


def _exit_in_worker(where: str, error: BaseException) -> WorkerError:
    """The error that reports `where`'s ``sys.exit`` (or KeyboardInterrupt) in a worker."""
    if isinstance(error, SystemExit):
        code = error.code
        what = f"called sys.exit({code!r})"
        codes = [code] if isinstance(code, int) else []
    else:
        what, codes = f"raised {type(error).__name__}", []
    return WorkerError(
        f"{where} {what} in a pipeline worker process: that ends this batch, not the "
        "worker or your program, and the batch is not consumed (the next next() makes it "
        "again). To stop on a bad batch, raise an exception, which reaches you with its "
        "type; or use workers=0, where the stages run in this process and sys.exit ends it.",
        exit_codes=codes,
    )


def _unpicklable(tree: Any) -> str:
    """The path of the first leaf of `tree` that cannot be pickled (empty: the whole)."""
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        try:
            pickle.dumps(leaf)
        except Exception:  # pickle raises several types: any means this leaf
            return jax.tree_util.keystr(path)
    return ""


def _pickled(reply: tuple[int, bool, Any], last: str) -> bytes:
    """`reply` pickled; an answer that cannot be pickled becomes the error that says why
    (`last` names the stage that made the batch)."""
    try:
        return pickle.dumps(reply)
    except (pickle.PicklingError, TypeError, AttributeError) as error:
        number, succeeded, answer = reply
        if succeeded:
            where = _unpicklable(answer.batch)
            what = f"batch{where}, returned by {last}," if where else f"the batch {last} returned"
        else:
            what = f"the error {answer!r}"
        return pickle.dumps(
            (
                number,
                False,
                NotPicklableError(
                    f"{what} cannot be pickled to come back from a pipeline worker process "
                    f"({type(error).__name__}: {error}). Host stages must return host data "
                    "(numpy arrays, numbers, strings, lists and dicts of them), not "
                    "generators, lambdas or open files; or use workers=0.",
                    part="the batch" if succeeded else "an error",
                ),
            )
        )


def _round_trips(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # any failure to rebuild it means the parent could not either
        return False
    return True

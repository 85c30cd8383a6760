"""What runs inside a pipeline's worker process: its start, and the making of a batch.

A worker starts with JAX on CPU only, ignores Ctrl-C (the pipeline's process handles it
and closes the pool), unpickles the source and stages once, and watches the pipeline's
process: within `WATCH_S` of that process being gone, even killed, it deletes the
process's batch slots and exits. Each task is the rows of one batch and a slot to
write it into (`datarax.pipeline.workers._slots`).
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
import time
from typing import Any

from datarax._syscompat import proc_stat
from datarax.errors import SourceFileChangedError, WorkerError
from datarax.pipeline._sources import Rows, read_rows
from datarax.pipeline._stages import Stages, call_stage
from datarax.pipeline.workers._guards import AT_START, check_jax_in_worker, run_jax_on_cpu
from datarax.pipeline.workers._slots import Answer, Lent, WorkerSide, delete_files_of

WATCH_S = 0.2  # how often a worker checks that the pipeline's process is still there
_work: tuple[Any, Stages] | None = None  # (source, stages), once per worker
_unusable: SourceFileChangedError | None = None  # why the source could not load here
_side = WorkerSide()  # the slots this worker writes batches into


def _alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed but not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, PermissionError):  # gone, or the number is another user's
        return False
    stat = proc_stat(pid)
    return stat is None or stat.state != "Z"  # without /proc, os.kill said it exists


def _watch_parent(parent: int) -> None:
    # Not os.getppid(): a forkserver's child has the forkserver as parent, and the
    # forkserver lives as long as its children do.
    while _alive(parent):
        time.sleep(WATCH_S)
    delete_files_of(parent)  # its batch slots: nobody else will delete them now
    os._exit(0)  # the pipeline's process is gone: nobody wants the batches any more


def start_worker(payload: bytes, parent: int, backend: str | None) -> None:
    """The pool's initializer: `payload` is the pickled source and stages, `parent` the
    pipeline's process and `backend` the platform JAX runs on there."""
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
    _work = source, Stages("stages", stages)


def make_batch(rows: Rows, slot: Lent | None) -> Answer:
    """The rows read from the source, through every host stage, written into `slot`."""
    if _unusable is not None:
        raise _unusable.with_traceback(None)
    assert _work is not None, "the worker was not started by start_worker"
    source, stages = _work
    check_jax_in_worker(AT_START)
    batch = read_rows(source, rows)
    check_jax_in_worker("the source's __getitem__")
    for position, stage in enumerate(stages.stages):
        where = f"stages[{position}]"
        try:
            batch = call_stage(stage, where, batch)
            check_jax_in_worker(where, batch)
        except Exception as error:
            error.add_note("It ran in a pipeline worker process, where JAX runs on CPU only.")
            if not _round_trips(error):
                raise WorkerError(
                    f"{where} raised {error!r} in a pipeline worker process, an exception "
                    "that cannot be rebuilt from its pickle to reach you here (it needs "
                    "arguments its args do not hold). Run with workers=0 to get it as it is."
                ) from None
            raise
    return _side.answer(batch, slot)


def _round_trips(error: BaseException) -> bool:
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # any failure to rebuild it means the parent could not either
        return False
    return True

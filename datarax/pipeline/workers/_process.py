"""One worker process of a pipeline, and the forkserver every such process starts from.

`WorkerProcess` starts a process from a ``forkserver`` (never ``fork``: forking a process
in which JAX runs threads is unsafe), joined to this process by one pipe and nothing
else, and sends tasks and reads answers through it, noting a message cut short (the pipe
is then out of step). `task_pool` starts processes of the same kind for one-off jobs.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import multiprocessing
import multiprocessing.connection
import os
import pickle
from collections.abc import Iterator
from typing import Any

from datarax.pipeline._options import Workers
from datarax.pipeline.workers._guards import started_platform
from datarax.pipeline.workers._worker import READY, serve

context = multiprocessing.get_context("forkserver")
PRELOAD = ["datarax.pipeline.workers._preload", "datarax.pipeline.workers._worker"]


def usable_cores() -> int:
    """The cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def task_pool(count: int) -> concurrent.futures.ProcessPoolExecutor:
    """`count` processes for one-off jobs (a store's shards written, a plan's blocks),
    forked from the forkserver that starts a pipeline's workers, so JAX runs on CPU in
    each; the caller closes it (``with task_pool(n) as pool:``)."""
    context.set_forkserver_preload(PRELOAD)
    return concurrent.futures.ProcessPoolExecutor(count, mp_context=context)


class WorkerProcess:
    """One worker process, the pipe to it, and the tasks sent to it, in order."""

    def __init__(self, payload: bytes, options: Workers):
        ours, theirs = context.Pipe(duplex=True)
        environment = dict(os.environ)  # as it is now: the forkserver's may be older
        self.process = context.Process(
            target=serve,
            args=(theirs, payload, os.getpid(), started_platform(), environment, options),
            name="datarax-pipeline-worker",
            daemon=True,
        )
        self.process.start()
        theirs.close()
        self.connection = ours
        self.sent: collections.deque[int] = collections.deque()
        self.torn = False  # a message to or from it was cut short: the pipe is out of step
        self.ready = False  # it said it loaded the source and stages (or it ended)

    def poll_ready(self) -> bool:
        """Whether the worker has loaded the source and stages, without waiting. One that
        ended counts as ready: asking it for a batch then raises as it would have."""
        if not self.ready and self.connection.poll():
            try:
                with self._whole():
                    self._greeted(self.connection.recv_bytes())
            except (EOFError, OSError):
                self.ready = True
        return self.ready

    def _greeted(self, message: bytes) -> None:
        assert message == READY, "a worker answered before it said it was ready"
        self.ready = True

    def send(self, task: Any) -> None:
        """Sends `task`; blocks until the worker has read all but what the pipe holds.

        Raises:
            OSError: the worker is gone.
        """
        with self._whole():
            self.connection.send(task)

    def receive(self) -> tuple[int, bool, Any]:
        """The next answer: (task number, whether it succeeded, answer or exception).

        Raises:
            EOFError: the worker ended before it answered.
        """
        while True:
            ready = multiprocessing.connection.wait([self.connection, self.process.sentinel])
            if self.connection not in ready and not self.connection.poll():
                raise EOFError
            with self._whole():
                answer = self.connection.recv_bytes()
            if self.ready:
                return pickle.loads(answer)
            self._greeted(answer)

    @contextlib.contextmanager
    def _whole(self) -> Iterator[None]:
        """Marks the pipe `torn` when a message is interrupted (by a Ctrl-C, say): one cut
        short would leave the pipe out of step."""
        try:
            yield
        except (EOFError, OSError):  # the worker is gone: nothing more goes through
            raise
        except BaseException:
            self.torn = True
            raise

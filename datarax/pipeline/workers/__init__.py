"""Host work on every core: a `Pipeline`'s reading and host stages in worker processes.

With ``Pipeline(..., workers=N)`` the making of each host batch (reading its rows from
the source, then every host stage) runs in N worker processes, a few batches ahead and
in order, so the batches are the ones ``workers=0`` makes. One job per module:

- `_pickling`: the source and stages pickled once, when the pipeline is built (with
  ``"auto"``, when it chooses workers); an array over a memory-mapped file travels as
  the file's path, not as its bytes. `_refusals`: what to change when they cannot be.
- `_pool`: the pipeline's side, `HostWorkers`, which keeps batches in flight, takes them
  back in order and closes the pool without leaving anything behind.
- `_process`: one worker process and the pipe to it, started from the forkserver;
  `task_pool`, the same kind of processes for one-off jobs (a token store written, a
  plan computed).
- `_worker`: what runs in a worker: its start, and the making of one batch.
- `_slots`: batches come back through shared-memory slots, one copy, never pickled;
  `_worker_side`: a worker's side of them, where `output_array` makes a stage's output
  in the slot itself, so that array is not copied at all.
  `_owners`: whose slot files are whose, and when an owner is gone, proven by the lock
  it holds for its life.
- `_guards`: JAX on CPU only in a worker, host data out of its stages, and a clear
  error for a script without ``if __name__ == "__main__":``; `_preload` sets JAX to CPU
  in the forkserver that starts every worker.

Each worker runs its own copy of the source and stages: state a stage changes as it
runs (a counter, its own random generator, an ``nnx.Rngs``) changes in that worker's
copy only, and which worker makes which batch is not fixed, so draw randomness from the
rows instead. Private attributes of the standard library these modules need are read
through `datarax._syscompat`.
"""

from datarax.pipeline.workers._guards import leave_if_importing_main as leave_if_importing_main
from datarax.pipeline.workers._pickling import pickled_for_workers as pickled_for_workers
from datarax.pipeline.workers._pool import HostWorkers as HostWorkers
from datarax.pipeline.workers._process import task_pool as task_pool
from datarax.pipeline.workers._process import usable_cores as usable_cores

__all__ = [
    "HostWorkers",
    "leave_if_importing_main",
    "pickled_for_workers",
    "task_pool",
    "usable_cores",
]

"""Data-parallel training that runs unchanged on a laptop, under launch_local, and on a pod.

Every process builds the same global pipeline over the same source; each reads only
the rows its devices hold, and the batch arrives as global arrays. After every step
the model's parameters and the pipeline's position go into one Orbax checkpoint, so
a job that is preempted resumes at exactly the next batch, on any number of
processes.

    python examples/train_data_parallel.py --steps 8 --checkpoint-dir /tmp/ckpt

On a cluster, start it once per host (see docs/laptop_to_pod.md); on one machine,
`datarax.distributed.launch_local("examples/train_data_parallel.py", args=[...])`.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import Checkpoints, Pipeline

ROWS, FEATURES = 256, 4
TRUE_WEIGHTS = np.array([1.5, -2.0, 0.5, 3.0], np.float32)


def join_cluster() -> None:
    """Joins the cluster this process was started in; alone, runs as one process."""
    if jax.distributed.is_initialized():  # launch_local has joined it already
        return
    try:
        jax.distributed.initialize()  # finds its peers on Cloud TPU, SLURM, Kubernetes
    except (ValueError, RuntimeError) as error:
        print(f"No cluster found ({error}); running as a single process.")


def source() -> dict[str, np.ndarray]:
    """The same global data set on every host (a stand-in for files on shared storage)."""
    features = np.random.default_rng(0).normal(size=(ROWS, FEATURES)).astype(np.float32)
    return {"id": np.arange(ROWS, dtype=np.int32), "x": features, "y": features @ TRUE_WEIGHTS}


@jax.jit
def train_step(params: dict[str, jax.Array], batch: dict[str, jax.Array]) -> Any:
    def loss(p: dict[str, jax.Array]) -> jax.Array:
        return jnp.mean((batch["x"] @ p["w"] + p["b"] - batch["y"]) ** 2)

    value, grads = jax.value_and_grad(loss)(params)
    return jax.tree.map(lambda p, g: p - 0.05 * g, params, grads), value


def _host(params: dict[str, jax.Array]) -> dict[str, list[float] | float]:
    """The replicated parameters as plain numbers, read from this host's copy."""
    return {name: np.asarray(value.addressable_data(0)).tolist() for name, value in params.items()}


def train(
    steps: int,
    batch_size: int = 32,
    checkpoint_dir: str | None = None,
    save_every: int = 1,
    preempt_after: int | None = None,
    log_rows: str | None = None,
) -> dict[str, Any]:
    """Trains until `steps` steps are done in all, resuming from `checkpoint_dir`."""
    mesh = jax.make_mesh((jax.device_count(),), ("data",))
    batches = NamedSharding(mesh, P("data"))
    replicated = NamedSharding(mesh, P())
    params = jax.device_put(
        {"w": np.zeros(FEATURES, np.float32), "b": np.zeros((), np.float32)}, replicated
    )
    pipeline = Pipeline(
        source=source(), batch_size=batch_size, shuffle=True, rngs=nnx.Rngs(0), sharding=batches
    )
    checkpoints = Checkpoints(checkpoint_dir) if checkpoint_dir else None
    done = 0
    if checkpoints is not None and checkpoints.latest_step() is not None:
        params, done = checkpoints.restore(model=params, pipeline=pipeline)
    if jax.process_index() == 0:
        count = jax.process_count()
        print(
            f"{count} process{'es' * (count > 1)}, {jax.device_count()} devices, from step {done}"
        )
    iterator = iter(pipeline)
    while done < steps:
        try:
            batch = next(iterator)
        except StopIteration:  # the epoch is over: the next iter() starts the next one
            iterator = iter(pipeline)
            continue
        params, loss = train_step(params, batch)
        done += 1
        rows = np.asarray(multihost_utils.process_allgather(batch["id"], tiled=True)).tolist()
        if log_rows and jax.process_index() == 0:
            line = {"step": done, "rows": rows, "loss": float(loss), "params": _host(params)}
            with open(log_rows, "a") as log:
                log.write(json.dumps(line) + "\n")
        if checkpoints is not None and done % save_every == 0:
            checkpoints.save(done, model=params, pipeline=pipeline)
        if done == preempt_after:  # a preemption, for the tests and tutorial
            multihost_utils.sync_global_devices("step logged")  # every host got this far
            if jax.process_index() == jax.process_count() - 1:
                os.kill(os.getpid(), signal.SIGKILL)
    if checkpoints is not None:
        checkpoints.close()
    return {"steps": done, "params": _host(params), "state": pipeline.get_state()}


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--checkpoint-dir", default=None)
    parser.add_argument("--save-every", type=int, default=1, help="steps between checkpoints")
    parser.add_argument("--preempt-after", type=int, default=None, help="kill the last process")
    parser.add_argument("--log-rows", default=None, help="append each step's rows (JSON lines)")
    args = parser.parse_args(argv)
    join_cluster()
    result = train(
        args.steps,
        args.batch_size,
        args.checkpoint_dir,
        args.save_every,
        args.preempt_after,
        args.log_rows,
    )
    if jax.process_index() == 0:
        print("done:", result["steps"], "steps, w =", np.round(result["params"]["w"], 3).tolist())
    return result


if __name__ == "__main__":
    main()

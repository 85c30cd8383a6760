"""Data-parallel training that runs unchanged on a laptop, under launch_local, and on a pod.

Every process builds the same global pipeline over the same source; each reads only
the rows its devices hold, and the batch arrives as global arrays. After every step
the model's parameters and the pipeline's position go into one Orbax checkpoint, so
a job that is preempted resumes from its last checkpoint, on any number of processes:
the steps after that checkpoint run again, on the same rows.

    python examples/train_data_parallel.py --steps 8 --checkpoint-dir /tmp/ckpt
    python examples/train_data_parallel.py --data my_data --inputs image --targets label
    python examples/train_data_parallel.py --mesh data=4,model=2

`--data DIR` trains on your own data: one `.npy` file per field, all with the same
number of rows, memory-mapped so that each host reads only the rows it holds. Without
it, the example makes a small synthetic data set. `--mesh` names the mesh's axes and
their sizes (one size may be -1: the devices left). The devices are taken in process
order and the axes laid over them in the order written, the first outermost, so the
first axis is the one that spans the hosts. The batch is split over `data` and
repeated over every other axis; the parameters are replicated.

On a cluster, start it once per host (see docs/laptop_to_pod.md); on one machine,
`datarax.distributed.launch_local("examples/train_data_parallel.py", args=[...])`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.experimental import multihost_utils
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import Checkpoints, Pipeline

ROWS, FEATURES = 256, 4
TRUE_WEIGHTS = np.array([1.5, -2.0, 0.5, 3.0], np.float32)
DATA_AXIS = "data"


def join_cluster() -> None:
    """Joins the cluster this process was started in; alone, runs as one process."""
    if jax.distributed.is_initialized():  # launch_local has joined it already
        return
    try:
        jax.distributed.initialize()  # finds its peers on Cloud TPU, SLURM, Kubernetes
    except (ValueError, RuntimeError) as error:
        print(f"No cluster found ({error}); running as a single process.")


def synthetic() -> dict[str, np.ndarray]:
    """The same global data set on every host (a stand-in for files on shared storage)."""
    features = np.random.default_rng(0).normal(size=(ROWS, FEATURES)).astype(np.float32)
    return {"x": features, "y": features @ TRUE_WEIGHTS}


def load_folder(folder: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """Every `.npy` file of `folder`, memory-mapped, as {file name without .npy: array}."""
    path = Path(folder)
    if not path.is_dir():
        raise ValueError(f"--data {str(folder)!r} is not a folder.")
    files = sorted(path.glob("*.npy"))
    if not files:
        raise ValueError(
            f"--data {str(folder)!r} has no .npy file; save one per field, e.g. "
            'np.save(folder / "image.npy", images).'
        )
    fields = {file.stem: np.load(file, mmap_mode="r") for file in files}
    counts = {name: (len(array) if array.ndim else 0) for name, array in fields.items()}
    first = files[0].stem
    for file in files:
        if counts[file.stem] != counts[first]:
            raise ValueError(
                f"{file} has {counts[file.stem]} rows but {files[0]} has {counts[first]}: "
                "every .npy file of --data must have one row per example, the same number."
            )
    return fields


def parse_mesh(text: str) -> dict[str, int]:
    """'data=4,model=2' as {'data': 4, 'model': 2}, in the order written."""
    axes: dict[str, int] = {}
    for part in text.split(","):
        name, equals, size = part.strip().partition("=")
        name = name.strip()
        if not equals or not name.isidentifier():
            raise argparse.ArgumentTypeError(
                f"{part.strip()!r} is not NAME=SIZE; write e.g. --mesh data=4,model=2."
            )
        if name in axes:
            raise argparse.ArgumentTypeError(f"the axis {name!r} is named twice in {text!r}.")
        try:
            axes[name] = int(size)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"the size of {name!r} must be a whole number or -1, got {size.strip()!r}."
            ) from None
        if axes[name] == 0 or axes[name] < -1:
            raise argparse.ArgumentTypeError(
                f"the size of {name!r} must be 1 or more, or -1 for the devices left; "
                f"got {axes[name]}."
            )
    if list(axes.values()).count(-1) > 1:
        raise argparse.ArgumentTypeError(f"only one axis may have size -1 in {text!r}.")
    if DATA_AXIS not in axes:
        raise argparse.ArgumentTypeError(
            f"{text!r} has no {DATA_AXIS!r} axis, which the batch is split over; add one, "
            "e.g. data=-1."
        )
    return axes


def build_mesh(axes: dict[str, int], devices: Sequence[Any] | None = None) -> Mesh:
    """The mesh `axes` describes, over `devices` (all of them) in process order."""
    found = sorted(devices or jax.devices(), key=lambda d: (d.process_index, d.id))
    known = math.prod(size for size in axes.values() if size != -1)
    sizes = {name: (len(found) // known if size == -1 else size) for name, size in axes.items()}
    if math.prod(sizes.values()) != len(found) or len(found) % known:
        shown = ",".join(f"{name}={size}" for name, size in axes.items())
        raise ValueError(
            f"--mesh {shown} does not fit the {len(found)} device{'s' * (len(found) != 1)} "
            f"of this job: the sizes must multiply to {len(found)} (one may be -1)."
        )
    grid = np.array(found, dtype=object).reshape(tuple(sizes.values()))
    return Mesh(grid, tuple(sizes))


def spanning_hosts(mesh: Mesh) -> list[str]:
    """The mesh axes along which the devices belong to different processes."""
    hosts = np.vectorize(lambda d: d.process_index)(mesh.devices)
    return [
        name for axis, name in enumerate(mesh.axis_names) if (np.diff(hosts, axis=axis) != 0).any()
    ]


def model_view(inputs: str, targets: str) -> Any:
    """The stage that makes the model's `x` (rows, features) and `y` (rows,) in float32."""

    def view(batch: dict[str, Any]) -> dict[str, np.ndarray]:
        x, y = batch["fields"][inputs], batch["fields"][targets]
        return {
            "row": batch["row"],
            "x": np.asarray(x, np.float32).reshape(len(x), -1),
            "y": np.asarray(y, np.float32).reshape(len(y)),
        }

    return view


def _check_fields(fields: dict[str, Any], inputs: str, targets: str) -> int:
    """The number of input features; an error naming the fields when one is missing."""
    for option, name in (("--inputs", inputs), ("--targets", targets)):
        if name not in fields:
            raise ValueError(
                f"{option} {name!r} is not a field of the data; its fields are "
                f"{sorted(fields)} (one per .npy file)."
            )
    if math.prod(fields[targets].shape[1:]) != 1:
        raise ValueError(
            f"--targets {targets!r} must hold one number per row, but its rows have shape "
            f"{fields[targets].shape[1:]}."
        )
    return math.prod(fields[inputs].shape[1:])


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
    *,
    data: str | None = None,
    mesh: dict[str, int] | None = None,
    inputs: str = "x",
    targets: str = "y",
) -> dict[str, Any]:
    """Trains until `steps` steps are done in all, resuming from `checkpoint_dir`."""
    fields = load_folder(data) if data is not None else synthetic()
    features = _check_fields(fields, inputs, targets)
    grid = build_mesh(mesh or {DATA_AXIS: -1})
    batches = NamedSharding(grid, P(DATA_AXIS))  # split over data, repeated over the rest
    replicated = NamedSharding(grid, P())
    params = jax.device_put(
        {"w": np.zeros(features, np.float32), "b": np.zeros((), np.float32)}, replicated
    )
    rows_in_source = len(next(iter(fields.values())))
    pipeline = Pipeline(
        source={"row": np.arange(rows_in_source, dtype=np.int32), "fields": fields},
        stages=[model_view(inputs, targets)],
        batch_size=batch_size,
        shuffle=True,
        rngs=nnx.Rngs(0),
        sharding=batches,
    )
    checkpoints = Checkpoints(checkpoint_dir) if checkpoint_dir else None
    done = 0
    if checkpoints is not None and checkpoints.latest_step() is not None:
        params, done = checkpoints.restore(model=params, pipeline=pipeline)
    if jax.process_index() == 0:
        count, devices = jax.process_count(), jax.device_count()
        print(
            f"{count} process{'es' * (count > 1)}, {devices} device{'s' * (devices > 1)}, "
            f"from step {done}"
        )
        across = spanning_hosts(grid)
        print(
            f"mesh {dict(grid.shape)}; the batch is split over {DATA_AXIS!r}; "
            + (f"axes across hosts: {', '.join(across)}" if across else "one host")
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
        rows = np.asarray(multihost_utils.process_allgather(batch["row"], tiled=True)).tolist()
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
    parser.add_argument("--data", default=None, help="a folder of .npy files, one per field")
    parser.add_argument("--inputs", default="x", help="the field the model reads (.npy name)")
    parser.add_argument("--targets", default="y", help="the field it predicts, one per row")
    parser.add_argument(
        "--mesh",
        type=parse_mesh,
        default=None,
        help="axes and sizes, first axis outermost, e.g. data=4,model=2 (default data=-1)",
    )
    args = parser.parse_args(argv)
    join_cluster()
    result = train(
        args.steps,
        args.batch_size,
        args.checkpoint_dir,
        args.save_every,
        args.preempt_after,
        args.log_rows,
        data=args.data,
        mesh=args.mesh,
        inputs=args.inputs,
        targets=args.targets,
    )
    if jax.process_index() == 0:
        weights = np.round(result["params"]["w"], 3).tolist()
        shown = f"{weights[:4]}"[:-1] + (", ...]" if len(weights) > 4 else "]")
        steps = result["steps"]
        print(f"done: {steps} step{'s' * (steps != 1)}, w = {shown}")
    return result


if __name__ == "__main__":
    main()

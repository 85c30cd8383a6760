"""Checkers for tutorial 03 (uneven batches): padding a batch for a sharding, and a
padded mean whose gradient stays finite.

The cases use the devices at hand; the right padding is read off JAX's placement
(``devices_indices_map``) and the right mean is computed on the host from the real
rows alone.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from datarax.sharding import pad_to_multiple
from datarax_course._answers import observed
from datarax_course._cases import draw
from datarax_course._checks import device_spans
from datarax_course._core import call, exercise
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._nb01 import mesh_2d, spec_text
from datarax_course._values import array, items, reject


def _rows() -> NamedSharding:
    """Rows over every device, on an Auto mesh: the gradient of an answer that ignores its
    inputs then needs no mesh context."""
    made = jax.make_mesh((len(jax.devices()),), ("data",))
    mesh = Mesh(made.devices, made.axis_names, axis_types=(AxisType.Auto,))
    return NamedSharding(mesh, PartitionSpec("data"))


@exercise(
    "03.mean_log",
    idea="divide by the number of real rows, and mind the gradient: masking log's result "
    "after the fact does not stop log(0) from poisoning it.",
    method="first replace the padding values by a harmless one (jnp.where(mask, values, 1.0)),"
    " take the log of that, mask the logs, sum, and divide by jnp.sum(mask).",
)
def _mean_log(answer: Any) -> Feedback:
    count = len(jax.devices())
    rng = draw("03.mean_log")
    drawn_rows = int(rng.integers(1, 5)) * count + int(rng.integers(1, count))
    low = float(rng.integers(1, 10)) / 10
    cases = ((3 * count + 1, 0.5, 4.0), (drawn_rows, low, low + float(rng.integers(1, 8))))
    for real_rows, low, high in cases:  # never a multiple of the device count: padding rows
        feedback = _mean_log_case(answer, np.linspace(low, high, real_rows, dtype=np.float32))
        if feedback is not None:
            return feedback
    return right("the mean over real rows is exact and its gradient finite, 0 at padding rows.")


def _mean_log_case(answer: Any, values: np.ndarray) -> Feedback | None:
    """What is wrong with the answer's mean log of `values`, padded; None when right."""
    real_rows = len(values)
    padded, mask = pad_to_multiple(values, len(jax.devices()))
    padded = jax.device_put(padded, _rows())
    mask = jax.device_put(mask, _rows())
    expected = float(np.mean(np.log(values)))

    def traced(values: Any, mask: Any) -> Any:  # one compile for the value and gradient
        result = call(answer, values, mask)
        scalar = isinstance(result, (jax.Array, float, np.floating)) and np.shape(result) == ()
        if not scalar or not jnp.issubdtype(jnp.result_type(result), jnp.floating):
            raise reject("mean_log's result", result, "one floating-point number (a jnp scalar)")
        return result

    got, gradient = observed(jax.jit(jax.value_and_grad(traced)), padded, mask)
    gradient = np.asarray(gradient)
    if not np.isclose(float(got), expected, rtol=1e-5):
        mean_of_all = float(np.sum(np.log(values))) / padded.shape[0]
        why = (
            " That is the sum over real rows divided by the padded length; divide by the "
            "number of real rows, sum(mask)."
            if np.isclose(float(got), mean_of_all, rtol=1e-5)
            else ""
        )
        return wrong(
            f"with {real_rows} real rows padded to {padded.shape[0]}, the mean log over the "
            f"real rows is {expected:.6f}, but your function returned {float(got):.6f}.{why}"
        )
    bad = int(np.sum(~np.isfinite(gradient)))
    if bad:
        return wrong(
            f"the value is right, but its gradient has {bad} NaN or inf entries, at the "
            "padding rows: the where picked 0 for them, yet the gradient of log at 0 is "
            "infinite, and 0 x inf is NaN. Keep log from ever seeing the padding."
        )
    real = np.asarray(mask)
    exact = np.zeros(padded.shape, np.float64)
    exact[real] = 1.0 / (real_rows * np.asarray(padded)[real])
    if not np.allclose(gradient, exact, rtol=1e-4, atol=1e-7):
        return wrong(
            "the value is right, but its gradient is not that of the mean over the real "
            "rows: padding rows must get gradient 0, real row i 1 / (n * values[i])."
        )
    return None


def _pad_cases() -> list[tuple[str, Mesh, PartitionSpec]]:
    count = len(jax.devices())
    flat = jax.make_mesh((count,), ("data",))
    grid = mesh_2d(list(np.asarray(flat.devices).ravel()))
    shape = grid.devices.shape
    return [
        (f"a ({count},) mesh", flat, PartitionSpec("data")),
        (f"a {shape} mesh", grid, PartitionSpec("data")),
        (f"a {shape} mesh", grid, PartitionSpec("model", None)),
        (f"a {shape} mesh", grid, PartitionSpec(("data", "model"))),
        (f"a {shape} mesh", grid, PartitionSpec(None, "data")),
        (f"a {shape} mesh", grid, PartitionSpec()),
    ]


@exercise(
    "03.pad_for",
    idea="only the mesh axes that split the rows (dimension 0) matter.",
    method="spec[0] names none, one or a tuple of mesh axes (a spec may also be empty); "
    "the multiple is the product of mesh.shape[axis] over them, 1 for none: "
    "pad_to_multiple(batch, that product).",
)
def _pad_for(answer: Any) -> Feedback:
    count = len(jax.devices())
    rng = draw("03.pad_for")
    for rows in (3 * count + 1, int(rng.integers(1, 5)) * count + int(rng.integers(1, count))):
        feedback = _pad_for_rows(answer, rows)
        if feedback is not None:
            return feedback
    return right("every batch places with the least padding, on 1D and 2D meshes.")


def _pad_for_rows(answer: Any, rows: int) -> Feedback | None:
    """What is wrong with padding a batch of `rows` rows on every case; None when right."""
    width = 2 * len(jax.devices())  # every leaf splits along any mesh axis in dimension 1 too
    features = np.arange(rows * width, dtype=np.float32).reshape(rows, width)
    batch = {"x": features, "y": np.arange(rows * width).reshape(rows, width) % 7}
    for where, mesh, spec in _pad_cases():
        sharding = NamedSharding(mesh, spec)
        blocks = _row_blocks(sharding)
        needed = -(-rows // blocks) * blocks
        got = call(answer, {key: leaf.copy() for key, leaf in batch.items()}, mesh, spec)
        case = f"{rows} rows with {spec_text(spec)} on {where}"
        padded, mask = _padded(got, batch)
        padded_rows = {len(leaf) for leaf in padded.values()}
        if padded_rows != {needed}:
            return wrong(
                f"for {case}, the rows are split into {blocks} blocks, so {needed} rows "
                f"suffice; your batch has {sorted(padded_rows)} rows."
            )
        if mask.tolist() != [True] * rows + [False] * (needed - rows):
            return wrong(f"for {case}, the mask must be True for the {rows} real rows only.")
        if not np.array_equal(padded["x"][:rows], batch["x"]):
            return wrong(f"for {case}, the real rows must come first, unchanged.")
        jax.device_put(padded, sharding)  # places, or the checker itself is wrong
    return None


def _padded(got: Any, batch: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], Any]:
    """(padded batch, mask) read from pad_for's result, leaves shaped like the batch's."""
    expected = "(padded_batch, mask), as pad_to_multiple returns"
    padded, mask = items(got, "pad_for's result", expected, length=2)
    if not isinstance(padded, dict) or set(padded) != set(batch):
        raise reject("pad_for's padded batch", padded, f"a dict with the keys {sorted(batch)}")
    for key, leaf in batch.items():
        if not isinstance(padded[key], np.ndarray) or padded[key].shape[1:] != leaf.shape[1:]:
            shape = ("?", *leaf.shape[1:])
            raise reject(f"padded batch[{key!r}]", padded[key], f"an array of shape {shape}")
    mask = array(mask, "pad_for's mask", "an array of booleans, one per row")
    return padded, mask


def _row_blocks(sharding: NamedSharding) -> int:
    """How many blocks dimension 0 is split into, read off JAX's placement of a probe."""
    probe = (len(jax.devices()) * 4,) * max(1, len(sharding.spec))
    return len({block[0] for block in device_spans(sharding, probe).values()})

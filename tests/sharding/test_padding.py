"""pad_to_multiple: padded rows are zero, the mask marks the real rows, metrics stay exact."""

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import ArraySharder, pad_to_multiple


@pytest.mark.parametrize(
    ("rows", "multiple", "padded_rows"), [(10, 8, 16), (16, 8, 16), (0, 8, 0), (1, 1, 1)]
)
def test_pads_to_the_next_multiple(rows: int, multiple: int, padded_rows: int) -> None:
    batch = {"image": np.ones((rows, 2, 2), np.float32), "label": np.arange(rows)}
    padded, mask = pad_to_multiple(batch, multiple)
    assert padded["image"].shape == (padded_rows, 2, 2)
    assert mask.tolist() == [True] * rows + [False] * (padded_rows - rows)
    assert padded["image"][rows:].sum() == 0
    np.testing.assert_array_equal(padded["label"][:rows], batch["label"])
    assert batch["image"].shape == (rows, 2, 2)


def test_masked_mean_is_exact_after_sharding() -> None:
    values = np.random.default_rng(0).normal(size=10).astype(np.float32)
    padded, mask = pad_to_multiple({"v": values, "mask_src": values}, 8)
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    placed = ArraySharder().shard({"v": padded["v"], "mask": mask}, sharding)
    masked_mean = jax.jit(lambda b: (b["v"] * b["mask"]).sum() / b["mask"].sum())(placed)
    np.testing.assert_allclose(float(masked_mean), values.mean(), rtol=1e-6)


@pytest.mark.parametrize("multiple", [0, -2, 1.5])
def test_rejects_bad_multiple(multiple) -> None:
    error = TypeError if isinstance(multiple, float) else ValueError
    with pytest.raises(error, match=r"multiple must be an int in \[1, 1048576\] .*got"):
        pad_to_multiple({"x": np.zeros(3)}, multiple)


def test_rejects_ragged_and_scalar_leaves() -> None:
    with pytest.raises(ValueError, match="differ in their number of rows"):
        pad_to_multiple({"a": np.zeros(3), "b": np.zeros(4)}, 2)
    with pytest.raises(ValueError, match=r"batch\['s'\] is 0-d"):
        pad_to_multiple({"a": np.zeros(3), "s": np.float32(1)}, 2)

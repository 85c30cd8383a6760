"""The epoch order is a seeded permutation computed per position: a bijection of every
size, the same wherever it is built from the same seed, spread like a random one, and
no array of the source's length behind it."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
from flax import nnx

from datarax.pipeline import Pipeline
from datarax.pipeline._permutation import Permutation


@pytest.mark.parametrize("size", [0, 1, 2, 3, 4, 5, 7, 8, 9, 255, 256, 257, 1000, 65_537])
def test_every_size_is_permuted_and_one_position_agrees_with_many(size: int) -> None:
    order = Permutation(size, [7, size])
    every = order[:]
    assert every.dtype == np.int64 and sorted(every.tolist()) == list(range(size))
    picked = np.arange(size)[::3]
    assert order[picked].tolist() == every[::3].tolist() == [order.one(p) for p in picked]


def test_the_order_follows_from_the_seed_alone() -> None:
    assert Permutation(1000, [1, 2])[:].tolist() == Permutation(1000, [1, 2])[:].tolist()
    assert Permutation(1000, [1, 2])[:].tolist() != Permutation(1000, [1, 3])[:].tolist()


def test_where_an_item_lands_is_spread_evenly_over_seeds() -> None:
    """Over 4,000 seeds, each of 8 items lands in each of 8 places about 500 times: a
    chi-square statistic far below what an order with structure would give."""
    size, seeds = 8, 4000
    landed = np.zeros((size, size))
    for seed in range(seeds):
        landed[np.arange(size), Permutation(size, [seed])[:]] += 1
    expected = seeds / size
    chi_square = float(((landed - expected) ** 2 / expected).sum())
    assert chi_square < 100, chi_square  # 49 degrees of freedom: the 0.999 quantile is 85


def test_positions_out_of_range_are_refused() -> None:
    with pytest.raises(IndexError, match=r"positions must be in \[0, 5\)"):
        Permutation(5, [0])[np.array([0, 5])]


class _Huge:
    """A source of a trillion records, each made from its index."""

    def __len__(self) -> int:
        return 10**12

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        return {"x": np.array([index])}


def test_a_shuffled_pipeline_over_a_trillion_rows_holds_no_order_array() -> None:
    pipeline = Pipeline(source=_Huge(), batch_size=4, shuffle=True, rngs=nnx.Rngs(0))
    tracemalloc.start()
    try:
        batch = next(iter(pipeline))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak
    rows = batch["x"][:, 0].tolist()
    assert len(set(rows)) == 4 and all(0 <= row < 10**12 for row in rows)

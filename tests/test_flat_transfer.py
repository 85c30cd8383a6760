"""`ArraySharder.shard(..., send_flat=True)`: the same arrays, sent as (rows, rest) to TPUs.

The TPU path runs here on CPU devices by naming "cpu" among the platforms that get flat
copies; what it wins on a real TPU is measured in benchmarks/tpu_copy.py
(docs/benchmarks/tpu_copy.md).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding, SingleDeviceSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import ArraySharder, _flat_transfer


def _batch() -> dict[str, object]:
    rng = np.random.default_rng(0)
    return {
        "image": rng.integers(0, 256, (16, 6, 5, 3), dtype=np.uint8),
        "mask": np.ones((16, 4, 2), bool),
        "label": np.arange(16),
        "already_placed": jax.numpy.zeros((16, 2, 2, 2)),
        "step": 3,
    }


def _same(placed: dict, expected: dict) -> None:
    for name, leaf in expected.items():
        assert placed[name].shape == leaf.shape, name
        assert placed[name].dtype == leaf.dtype, name
        assert placed[name].sharding.is_equivalent_to(leaf.sharding, leaf.ndim), name
        np.testing.assert_array_equal(np.asarray(placed[name]), np.asarray(leaf), err_msg=name)


@pytest.mark.parametrize("flat_here", [False, True], ids=["cpu-as-is", "cpu-as-if-tpu"])
@pytest.mark.parametrize("spec", [P("data"), P()])
def test_send_flat_gives_what_shard_gives(monkeypatch, flat_here: bool, spec: P) -> None:
    sent: list[tuple[int, ...]] = []
    device_put = jax.device_put

    def spy(leaves, shardings):
        sent.extend(np.shape(leaf) for leaf in leaves)
        return device_put(leaves, shardings)

    if flat_here:
        monkeypatch.setattr(_flat_transfer, "FLAT_PLATFORMS", ("cpu",))
    monkeypatch.setattr(_flat_transfer.jax, "device_put", spy)
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), spec)
    batch = _batch()
    expected = ArraySharder().shard(batch, sharding)
    _same(ArraySharder().shard(batch, sharding, send_flat=True), expected)
    image_sent = (16, 90) if flat_here else (16, 6, 5, 3)
    mask_sent = (16, 8) if flat_here else (16, 4, 2)
    assert image_sent in sent and mask_sent in sent
    assert (16, 2, 2, 2) in sent  # a jax leaf is never reshaped on the host


def test_send_flat_onto_one_device(monkeypatch) -> None:
    monkeypatch.setattr(_flat_transfer, "FLAT_PLATFORMS", ("cpu",))
    one = SingleDeviceSharding(jax.devices()[3])
    image = np.arange(2 * 3 * 4 * 5, dtype=np.float32).reshape(2, 3, 4, 5)
    placed = ArraySharder().shard({"image": image}, one, send_flat=True)["image"]
    assert placed.devices() == {jax.devices()[3]} and placed.shape == image.shape
    np.testing.assert_array_equal(np.asarray(placed), image)


def test_a_sharding_that_splits_a_later_dimension_is_refused_everywhere() -> None:
    mesh = jax.make_mesh((4, 2), ("data", "model"))
    batch = {"image": np.zeros((8, 4, 4, 3), np.uint8), "mask": np.ones((8, 2), bool)}
    before = {name: leaf.copy() for name, leaf in batch.items()}
    with pytest.raises(
        ValueError, match=r"batch\['image'\] \(shape \(8, 4, 4, 3\)\) cannot be sent flat"
    ):
        ArraySharder().shard(batch, NamedSharding(mesh, P("data", "model")), send_flat=True)
    for name, leaf in batch.items():
        np.testing.assert_array_equal(leaf, before[name])
    # rank 2 and below travel as they are, so a 2-D split is fine
    placed = ArraySharder().shard(
        {"table": np.zeros((8, 4))}, NamedSharding(mesh, P("data", "model")), send_flat=True
    )
    assert placed["table"].sharding.spec == P("data", "model")


@pytest.mark.parametrize("value", ["yes", 1, None])
def test_send_flat_accepts_only_a_bool(value) -> None:
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    with pytest.raises(TypeError, match="send_flat"):
        ArraySharder().shard({"x": np.zeros((8, 2, 2))}, sharding, send_flat=value)


def test_07_quotes_the_recorded_tpu_copies() -> None:
    """The TPU v5e figures tutorial 07 draws beside a CPU run are docs/benchmarks/tpu_copy.json's,
    and on that TPU sending flat was the faster way (the claim the lesson makes)."""
    root = Path(__file__).resolve().parents[1]
    recorded = json.loads((root / "docs/benchmarks/tpu_copy.json").read_text())
    assert recorded["platform"] == "tpu"
    copies = {name: copy["ms"] for name, copy in recorded["copies"].items()}
    text = (root / "tutorials/07_performance.md").read_text()
    quoted = dict(re.findall(r'^    "([^"]+)": ([\d.]+),$', text, re.MULTILINE))
    assert len(quoted) == 5, "tutorial 07 no longer quotes the recorded TPU copies"
    for name, ms in quoted.items():
        key = name if name in copies else f"ArraySharder.{name}"
        assert float(ms) == round(copies[key], 1), name
    assert copies["the same bytes, flat (256, 150528)"] < copies["uint8 (256, 224, 224, 3)"] / 3
    assert recorded["send_flat_speedup_on_device"] > 3

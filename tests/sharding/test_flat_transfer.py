"""`ArraySharder.shard(..., send_flat=...)`: the same arrays, sent to TPUs as (rows, rest)
and, bound for one chip, in pieces joined there.

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
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import datarax
from datarax._compat import single_device_sharding
from datarax.sharding import ArraySharder, _flat_transfer


def _as_if_tpu(monkeypatch) -> None:
    """CPU devices get what TPUs get; the plans made before (for CPU) are forgotten."""
    monkeypatch.setattr(_flat_transfer, "FLAT_PLATFORMS", ("cpu",))
    datarax.clear_caches()


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
        _as_if_tpu(monkeypatch)
    else:
        datarax.clear_caches()
    monkeypatch.setattr(_flat_transfer.jax, "device_put", spy)
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), spec)
    batch = _batch()
    expected = ArraySharder().shard(batch, sharding, send_flat=False)
    _same(ArraySharder().shard(batch, sharding, send_flat=True), expected)
    sent.clear()
    _same(ArraySharder().shard(batch, sharding), expected)  # "auto", the default
    image_sent = (16, 90) if flat_here else (16, 6, 5, 3)
    mask_sent = (16, 8) if flat_here else (16, 4, 2)
    assert image_sent in sent and mask_sent in sent
    assert (16, 2, 2, 2) in sent  # a jax leaf is never reshaped on the host


def test_send_flat_onto_one_device(monkeypatch) -> None:
    _as_if_tpu(monkeypatch)
    one = single_device_sharding(jax.devices()[3])
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
def test_send_flat_accepts_only_a_bool_or_auto(value) -> None:
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    with pytest.raises(TypeError, match=r"send_flat must be True, False or 'auto', got"):
        ArraySharder().shard({"x": np.zeros((8, 2, 2))}, sharding, send_flat=value)


def test_07_quotes_the_recorded_tpu_copies() -> None:
    """The TPU v5e figures tutorial 07 draws beside a CPU run are docs/benchmarks/tpu_copy.json's,
    and on that TPU sending flat was the faster way (the claim the lesson makes)."""
    root = Path(__file__).resolve().parents[2]
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
    assert (
        copies["ArraySharder.shard, uint8 (256, 224, 224, 3)"]
        < copies["the same bytes, flat (256, 150528)"]
    )
    assert recorded["auto_speedup_on_device"] > 3


def _spy(monkeypatch) -> list[tuple[int, ...]]:
    """The shapes `jax.device_put` is handed by the transfer module."""
    sent: list[tuple[int, ...]] = []
    device_put = jax.device_put

    def spy(leaves, shardings):
        sent.extend(np.shape(leaf) for leaf in leaves)
        return device_put(leaves, shardings)

    monkeypatch.setattr(_flat_transfer.jax, "device_put", spy)
    return sent


def test_on_cpu_devices_auto_places_every_leaf_as_it_is(monkeypatch) -> None:
    sent = _spy(monkeypatch)
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    ArraySharder().shard({"image": np.zeros((16, 6, 5, 3), np.uint8)}, sharding)
    assert sent == [(16, 6, 5, 3)]


def test_auto_sends_a_leaf_that_cannot_go_flat_as_it_is(monkeypatch) -> None:
    _as_if_tpu(monkeypatch)
    sent = _spy(monkeypatch)
    sharding = NamedSharding(jax.make_mesh((4, 2), ("data", "model")), P("data", "model"))
    batch = {"image": np.arange(8 * 4 * 4 * 3, dtype=np.uint8).reshape(8, 4, 4, 3)}
    placed = ArraySharder().shard(batch, sharding)
    assert sent == [(8, 4, 4, 3)] and placed["image"].sharding.spec == P("data", "model")
    np.testing.assert_array_equal(np.asarray(placed["image"]), batch["image"])


def test_a_large_leaf_bound_for_one_chip_crosses_in_pieces_joined_there(monkeypatch) -> None:
    _as_if_tpu(monkeypatch)
    monkeypatch.setattr(_flat_transfer, "PIECES_FROM_BYTES", 1024)
    monkeypatch.setattr(_flat_transfer, "PIECE_BYTES", 256)
    sent = _spy(monkeypatch)
    one = single_device_sharding(jax.devices()[5])
    batch = {
        "image": np.arange(16 * 6 * 5 * 3, dtype=np.uint8).reshape(16, 6, 5, 3),  # 1,440 B
        "strided": np.arange(16 * 160, dtype=np.int32).reshape(16, 160)[:, ::2],  # not C
        "label": np.arange(16, dtype=np.int32),
    }
    for send_flat in ("auto", True):
        sent.clear()
        placed = ArraySharder().shard(batch, one, send_flat=send_flat)
        pieces = [shape for shape in sent if shape[1:] == (90,)]  # blocks of (rows, rest)
        assert len(pieces) == 6 and sum(rows for rows, _ in pieces) == 16  # round(1440 / 256)
        assert (16, 80) in sent  # not contiguous: as it is, never copied on the host
        for name, leaf in batch.items():
            assert placed[name].devices() == {jax.devices()[5]}, name
            assert placed[name].shape == leaf.shape and placed[name].dtype == leaf.dtype
            np.testing.assert_array_equal(np.asarray(placed[name]), leaf, err_msg=name)


@pytest.mark.parametrize("send_flat", ["auto", True])
def test_a_leaf_without_elements_crosses_as_it_is(monkeypatch, send_flat) -> None:
    _as_if_tpu(monkeypatch)
    sharding = NamedSharding(jax.make_mesh((8,), ("data",)), P("data"))
    placed = ArraySharder().shard({"boxes": np.zeros((8, 0, 3))}, sharding, send_flat=send_flat)
    assert placed["boxes"].shape == (8, 0, 3) and placed["boxes"].sharding.spec == P("data")

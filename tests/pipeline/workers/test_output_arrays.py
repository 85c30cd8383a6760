"""`output_array`: a stage's output made in the slot that carries it, so it crosses from a
worker with no copy; the same values as ``workers=0``; plain arrays anywhere else."""

from __future__ import annotations

import pickle
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from _support.output_stages import ObjectsOnce, WiderFrom, flip_into_output
from test_shared_batches import _mapped

from datarax.errors import OutputArrayError
from datarax.pipeline import Pipeline, Workers, output_array, output_like
from datarax.pipeline._outputs import lending
from datarax.pipeline.workers._slots import Slots
from datarax.pipeline.workers._worker_side import WorkerSide

IMAGES = np.arange(96 * 8 * 8 * 3, dtype=np.uint8).reshape(96, 8, 8, 3)


def _images(workers: int | Workers, stages: tuple = (flip_into_output,)) -> Pipeline:
    source = {"image": IMAGES, "label": np.arange(96)}
    return Pipeline(source=source, stages=list(stages), batch_size=8, workers=workers)


def test_arrays_a_stage_makes_in_the_slot_are_not_copied_and_come_back_exact() -> None:
    slots, side = Slots(), WorkerSide()
    slots._recent.append(4096)  # as after a first batch: the next task gets a page
    lent = slots.lend()
    with lending(side.begin(lent)):
        images = output_like(IMAGES[:8])
        images[...] = IMAGES[:8] * 2
        scratch = output_array((100,), np.float64)  # made, not returned: copies nothing
        scratch[...] = 1
    labels = np.arange(8)
    batch = {"image": images, "tail": images[2:], "strided": images[:, ::2], "label": labels}

    answer = side.answer(batch, lent, slots.prefix)
    back = slots.batch(answer, lent)

    # Only what the stage returned without output_array was copied: the labels and the
    # strided view (not C-contiguous, so not a run of the slot).
    assert answer.slot == lent
    assert answer.copied == labels.nbytes + images[:, ::2].nbytes
    np.testing.assert_array_equal(back["image"], IMAGES[:8] * 2)
    np.testing.assert_array_equal(back["tail"], (IMAGES[:8] * 2)[2:])
    np.testing.assert_array_equal(back["strided"], (IMAGES[:8] * 2)[:, ::2])
    np.testing.assert_array_equal(back["label"], labels)
    assert all(_mapped(back[key]) for key in ("image", "tail", "strided", "label"))
    slots.close()


def test_workers_give_the_batches_of_workers_0_and_copy_only_the_other_leaves() -> None:
    reference = list(_images(0))
    pipeline = _images(Workers(1))
    batches = list(pipeline)

    assert len(batches) == len(reference) == 12
    for ours, theirs in zip(batches, reference, strict=True):
        np.testing.assert_array_equal(ours["image"], theirs["image"])
        np.testing.assert_array_equal(ours["label"], theirs["label"])
        assert ours["image"].dtype == np.uint8 and _mapped(ours["image"])
    # The first two tasks go out before any batch's size is known, with no slot: those
    # batches are copied whole. From then on only the labels are.
    image, label = batches[0]["image"].nbytes, batches[0]["label"].nbytes
    report = pipeline.time_report()
    assert report.batches == 12
    assert report.copied_mb * 1e6 * 12 == pytest.approx(2 * image + 12 * label)


def test_an_output_larger_than_the_slot_is_a_plain_array_and_the_values_hold() -> None:
    source = {"x": np.arange(64)}
    stage = WiderFrom(row=40, width=512)  # batches 5 to 7 outgrow the slots of 0 to 4
    reference = list(Pipeline(source=source, stages=[stage], batch_size=8))
    pipeline = Pipeline(source=source, stages=[stage], batch_size=8, workers=1)

    batches = list(pipeline)

    for ours, theirs in zip(batches, reference, strict=True):
        np.testing.assert_array_equal(ours["x"], theirs["x"])
    assert [batch["x"].shape[1] for batch in batches] == [1] * 5 + [512] * 3


@pytest.mark.parametrize("workers", [0, 1])
def test_an_object_output_array_names_the_stage_and_the_batch_is_made_again(
    workers: int, tmp_path: Path
) -> None:
    source = {"x": np.arange(32)}
    stage = ObjectsOnce(tmp_path / "asked")
    pipeline = Pipeline(source=source, stages=[stage], batch_size=8, workers=workers)
    iterator = iter(pipeline)

    with pytest.raises(OutputArrayError, match=r"output_array\(\(8, 3\), object\)") as raised:
        next(iterator)

    assert raised.value.stage == "stages[0]" and raised.value.dtype == "object"
    assert "24 of them" in str(raised.value) and "np.empty" in str(raised.value)
    assert "Raised by stages[0] of the pipeline." in raised.value.__notes__
    assert pipeline.get_state()["batch_index"] == 0  # not consumed
    assert next(iterator)["x"].tolist() == list(range(8))


def test_outside_a_worker_the_arrays_are_plain_and_objects_are_refused() -> None:
    made = output_array((2, 3), np.float32)
    like = output_like(jnp.zeros((4,), jnp.bfloat16))

    assert type(made) is np.ndarray and made.shape == (2, 3) and made.dtype == np.float32
    assert made.flags.c_contiguous and made.flags.writeable and made.base is None
    assert like.shape == (4,) and like.dtype == jnp.bfloat16
    assert output_array(5, np.int8).shape == (5,)
    with pytest.raises(OutputArrayError) as raised:
        output_like(np.empty(3, object))
    assert raised.value.stage == ""
    assert pickle.loads(pickle.dumps(raised.value)).dtype == "object"

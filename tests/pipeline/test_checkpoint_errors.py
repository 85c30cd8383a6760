"""What a checkpoint cannot hold or restore is refused with a typed error naming it:
a model Orbax cannot save (before anything is written), a restore template of other
leaves or shapes, a damaged step; and ``~`` in a folder is the home folder."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from flax import nnx

from datarax.errors import (
    CheckpointDamagedError,
    CheckpointTemplateError,
    LeafTypeError,
    LeafValueError,
)
from datarax.pipeline import Checkpoints, Pipeline

LOCK = ".datarax-save.lock"
SAVED = {"w": np.arange(3.0, dtype=np.float32), "b": {"c": np.ones((2, 2), np.float32)}}


def _pipeline(batches: int = 0) -> Pipeline:
    pipeline = Pipeline(source={"x": np.arange(8.0)}, batch_size=2)
    iterator = iter(pipeline)
    for _ in range(batches):
        next(iterator)
    return pipeline


def _saved(folder: Path, steps: tuple[int, ...] = (1,)) -> Path:
    with Checkpoints(folder, max_to_keep=5) as checkpoints:
        for step in steps:
            checkpoints.save(
                step, model=jax.tree.map(jax.numpy.asarray, SAVED), pipeline=_pipeline(step)
            )
    return folder


# Templates of other leaves or shapes.


@pytest.mark.parametrize(
    ("template", "missing", "unexpected", "shapes"),
    [
        ({"w": np.zeros(4), "b": {"c": np.zeros((2, 2))}}, (), (), {"model['w']": ((3,), (4,))}),
        ({"w": np.zeros(3)}, ("model['b']['c']",), (), {}),
        ({**SAVED, "z": np.zeros(1)}, (), ("model['z']",), {}),
        ({"w": np.zeros(3), "b": [np.zeros((2, 2))]}, ("model['b']['c']",), ("model['b'][0]",), {}),
        ({}, ("model['b']['c']", "model['w']"), (), {}),
        (
            {"w": 0.0, "b": {"c": jax.ShapeDtypeStruct((2, 3), np.float32)}},
            (),
            (),
            {
                "model['w']": ((3,), ()),
                "model['b']['c']": ((2, 2), (2, 3)),
            },
        ),
    ],
)
def test_a_template_of_other_leaves_or_shapes_is_refused_naming_them(
    tmp_path: Path, template: Any, missing: tuple, unexpected: tuple, shapes: dict
) -> None:
    """Orbax raised a bare ValueError about tree structures or 'Requested shape'."""
    pipeline = _pipeline(3)
    checkpoints = Checkpoints(_saved(tmp_path))
    with checkpoints, pytest.raises(CheckpointTemplateError) as refused:
        checkpoints.restore(model=template, pipeline=pipeline)
    error = refused.value
    assert isinstance(error, ValueError)
    assert (error.step, error.missing, error.unexpected, error.shapes) == (
        1,
        missing,
        unexpected,
        shapes,
    )
    for name in (*missing, *unexpected, *shapes):
        assert name in str(error)
    assert "Build the template as the saved model was built" in str(error)
    assert pipeline.get_state()["batch_index"] == 3  # the pipeline was left where it was
    assert pickle.loads(pickle.dumps(error)).shapes == shapes


def test_an_nnx_model_of_other_sizes_is_refused_naming_each_variable(tmp_path: Path) -> None:
    with Checkpoints(tmp_path) as checkpoints:
        model = nnx.Linear(2, 3, rngs=nnx.Rngs(0))
        checkpoints.save(1, model=nnx.state(model), pipeline=_pipeline())
        wider = nnx.state(nnx.Linear(2, 4, rngs=nnx.Rngs(0)))
        with pytest.raises(CheckpointTemplateError) as refused:
            checkpoints.restore(model=wider)
    assert refused.value.shapes == {
        "model['bias'].value": ((3,), (4,)),
        "model['kernel'].value": ((2, 3), (2, 4)),
    }
    assert "model['kernel'].value was saved with shape (2, 3) but is (2, 4)" in str(refused.value)


def _values(leaf: Any) -> np.ndarray:
    """A leaf's values; a PRNG key array's key data."""
    if jax.numpy.issubdtype(leaf.dtype, jax.dtypes.prng_key):
        return np.asarray(jax.random.key_data(leaf))
    return np.asarray(leaf)


def test_templates_that_fit_restore(tmp_path: Path) -> None:
    """Other dtypes, ShapeDtypeStructs, numpy arrays, and PRNG keys in an nnx state."""

    class Model(nnx.Module):
        def __init__(self, seed: int):
            self.linear = nnx.Linear(2, 3, rngs=nnx.Rngs(seed))
            self.dropout = nnx.Dropout(0.5, rngs=nnx.Rngs(seed + 1))

    saved = nnx.state(Model(0))
    with Checkpoints(tmp_path) as checkpoints:
        checkpoints.save(1, model={"model": saved, **SAVED}, pipeline=_pipeline())
        template = {
            "model": nnx.state(Model(5)),
            "w": jax.ShapeDtypeStruct((3,), np.int32),
            "b": {"c": np.zeros((2, 2), np.float64)},
        }
        restored, step = checkpoints.restore(model=template)
    assert step == 1 and restored["w"].dtype == np.int32
    np.testing.assert_array_equal(np.asarray(restored["w"]), [0, 1, 2])
    for got, want in zip(jax.tree.leaves(restored["model"]), jax.tree.leaves(saved), strict=True):
        np.testing.assert_array_equal(_values(got), _values(want))


def test_a_template_leaf_that_is_no_array_is_refused(tmp_path: Path) -> None:
    checkpoints = Checkpoints(_saved(tmp_path))
    with checkpoints, pytest.raises(LeafTypeError, match=r"model\['w'\] is a str") as refused:
        checkpoints.restore(model={"w": "weights", "b": {"c": np.zeros((2, 2))}})
    assert refused.value.leaf == "model['w']"


# Models that a checkpoint cannot hold: refused before anything is written.

_DELETED = jax.numpy.ones(2)
_DELETED.delete()


@pytest.mark.parametrize(
    ("model", "error", "leaf", "match"),
    [
        ({}, ValueError, None, "model holds no arrays to save: got {}"),
        (None, ValueError, None, "model holds no arrays to save: got None"),
        ({"w": None}, ValueError, None, "model holds no arrays to save"),
        ({"w": np.ones(2), "name": "cat"}, LeafTypeError, "model['name']", "is a str: 'cat'"),
        ({"raw": b"ab"}, LeafTypeError, "model['raw']", "is a bytes"),
        ({"z": 1 + 2j}, LeafTypeError, "model['z']", r"np\.asarray\(value\)"),
        ({"ids": np.array(["a", "b"])}, LeafTypeError, "model['ids']", "has dtype <U1"),
        ({"o": np.array([object()])}, LeafTypeError, "model['o']", "has dtype object"),
        ({"s": jax.ShapeDtypeStruct((2,), np.float32)}, LeafTypeError, "model['s']", "holds none"),
        ({"gone": _DELETED}, LeafTypeError, "model['gone']", "is a deleted jax.Array"),
        ({"e": np.zeros((0, 3))}, LeafValueError, "model['e']", r"shape \(0, 3\), no elements"),
        ({"big": 2**70}, LeafValueError, "model['big']", "beyond the 64-bit range"),
    ],
)
def test_a_model_a_checkpoint_cannot_hold_is_refused_before_writing(
    tmp_path: Path, model: Any, error: type, leaf: str | None, match: str
) -> None:
    """Each was a CheckpointSaveError that advised freeing disk space."""
    with Checkpoints(_saved(tmp_path)) as checkpoints:
        with pytest.raises(error, match=match) as refused:
            checkpoints.save(2, model=model, pipeline=_pipeline())
        assert not isinstance(refused.value, OSError)
        assert "Free space" not in str(refused.value)
        assert getattr(refused.value, "leaf", None) == leaf
        assert sorted(os.listdir(tmp_path)) == [LOCK, "1"] and checkpoints.latest_step() == 1


@pytest.mark.parametrize(
    "leaf",
    [
        True,
        7,
        1.5,
        np.float16(1),
        np.bool_(False),
        np.ones(2, np.complex64),
        jax.numpy.ones(2, jax.numpy.bfloat16),
        jax.random.key(0),
        np.arange(3, dtype=">i4"),
    ],
    ids=lambda leaf: type(leaf).__name__ + str(getattr(leaf, "dtype", "")),
)
def test_arrays_and_numbers_that_orbax_saves_are_saved(tmp_path: Path, leaf: Any) -> None:
    with Checkpoints(tmp_path) as checkpoints:
        checkpoints.save(1, model={"leaf": leaf}, pipeline=_pipeline())
        restored, _ = checkpoints.restore(model=None)
    assert np.shape(restored["leaf"]) == np.shape(leaf)


# Damaged steps.


def _pipeline_file(step_folder: Path) -> Path:
    """The file that holds the pipeline's state in a step's folder, found by its text."""
    files = [path for path in (step_folder / "pipeline").iterdir() if path.is_file()]
    return next(path for path in files if "batch_index" in path.read_text())


def _cut_short(step_folder: Path) -> None:
    state = _pipeline_file(step_folder)
    state.write_text(state.read_text()[:20])


def _not_a_state(step_folder: Path) -> None:
    _pipeline_file(step_folder).write_text(json.dumps([1, 2]))


def _empty(step_folder: Path) -> None:
    for path in step_folder.iterdir():
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def _model_files_emptied(step_folder: Path) -> None:
    for path in (step_folder / "model").iterdir():
        if path.is_file():
            path.write_bytes(b"")


@pytest.mark.parametrize(
    ("damage", "item", "builtin", "match"),
    [
        (_cut_short, "pipeline", ValueError, "holds a pipeline state that is not JSON"),
        (_not_a_state, "pipeline", ValueError, "holds a pipeline state that no save writes"),
        (lambda folder: shutil.rmtree(folder / "pipeline"), "pipeline", KeyError, "is missing"),
        (lambda folder: shutil.rmtree(folder / "model"), "model", KeyError, "is missing"),
        (_empty, "model", KeyError, r"is missing \(it holds the model's arrays\)"),
        (_model_files_emptied, "model", KeyError, "has no readable list of arrays"),
    ],
    ids=["cut short", "not a state", "no pipeline", "no model", "emptied", "model emptied"],
)
@pytest.mark.parametrize("with_pipeline", [True, False])
def test_a_damaged_step_is_refused_naming_what_is_wrong(
    tmp_path: Path, damage: Any, item: str, builtin: type, match: str, with_pipeline: bool
) -> None:
    """A raw JSONDecodeError or KeyError before, with or without `pipeline=`."""
    _saved(tmp_path, steps=(1, 2))
    damage(tmp_path / "2")
    pipeline = _pipeline(3)
    with Checkpoints(tmp_path) as checkpoints:
        with pytest.raises(CheckpointDamagedError, match=match) as refused:
            checkpoints.restore(model=SAVED, pipeline=pipeline if with_pipeline else None)
        error = refused.value
        assert isinstance(error, builtin) and (error.step, error.path) == (
            2,
            str(tmp_path / "2" / item),
        )
        assert str(error).startswith(f"Step 2 cannot be restored: {tmp_path / '2' / item}")
        assert "Restore another step (step=..., saved: [1])" in str(error)
        assert pipeline.get_state()["batch_index"] == 3
        restored, step = checkpoints.restore(model=SAVED, step=1, pipeline=pipeline)
    assert step == 1 and pipeline.get_state()["batch_index"] == 1
    np.testing.assert_array_equal(restored["w"], SAVED["w"])
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.step, copy.path, str(copy)) == (error.step, error.path, str(error))


# The home folder.


def test_a_leading_tilde_is_the_home_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It made a folder named '~' in the current directory."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    with Checkpoints("~/runs/one") as checkpoints:
        assert checkpoints.directory == str(home / "runs" / "one")
        checkpoints.save(1, model={"w": np.ones(2)}, pipeline=_pipeline())
    assert (home / "runs" / "one" / "1").is_dir() and os.listdir(work) == []


def test_a_tilde_naming_no_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match=r"has no user 'no-such-user-x7'.*Write '\./~no-such"):
        Checkpoints("~no-such-user-x7/runs")
    assert os.listdir(tmp_path) == []

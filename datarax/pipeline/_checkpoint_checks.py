"""What a checkpoint's folder, model and restore template may be.

Each check runs before Orbax reads or writes anything, and raises an error that
names the folder or the leaf at fault:

- `checkpoint_directory`: the folder of a `Checkpoints`, with ``~`` expanded as a
  shell would, or refused;
- `check_model`: a model to save holds at least one leaf, and each leaf is an array
  or a number that Orbax can store;
- `check_template`: a model template to restore into has the saved leaves, each of
  the saved shape (`CheckpointTemplateError` lists what differs).
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from datarax._trees import flatten_with_names, flatten_with_path, leaf_name
from datarax.errors import CheckpointTemplateError, LeafTypeError, LeafValueError

# Orbax globs inside the directory's path, so these would make it miss (or match) files;
# TensorStore reads a backslash as a folder separator where "/" is the separator.
_PATTERN_CHARACTERS = "*?[" + ("\\" if os.sep == "/" else "")
_INT64 = np.iinfo(np.int64)


def checkpoint_directory(directory: Any) -> str:
    """`directory` as a string, absolute when local; refuses what cannot be a folder.

    A leading ``~`` or ``~user`` is that home folder, as a shell reads it; one that
    names no user here is refused. Remote locations (``gs://...``) are kept as given.
    """
    if not isinstance(directory, (str, os.PathLike)):
        raise TypeError(
            f"directory must be a str or os.PathLike path, got {type(directory).__name__}: "
            f"{directory!r:.100}."
        )
    path = os.fspath(directory)
    if not isinstance(path, str):
        raise TypeError(f"directory must be a text path, got bytes: {path!r:.100}.")
    if not path.strip() or "\0" in path:
        raise ValueError(
            f"directory must name a folder for the checkpoints, e.g. 'checkpoints' or "
            f"'gs://bucket/run', got {path!r:.100}. (An empty path would write into the "
            "current directory.)"
        )
    if "://" not in path:  # Orbax takes remote locations (gs://...) as they are
        if path.startswith("~"):
            path = os.path.expanduser(path)
            if path.startswith("~"):
                user = path[1:].split(os.sep)[0]
                raise ValueError(
                    f"directory {path!r} starts with '~{user}', but this machine has no "
                    f"user {user!r} whose home folder it could be. Write './{path}' for a "
                    "folder of that name here, or the full path."
                )
        path = os.path.abspath(path)
    found = [f"'{character}'" for character in _PATTERN_CHARACTERS if character in path]
    if found:
        raise ValueError(
            f"directory '{path}' contains {', '.join(found)}, which Orbax reads as a file "
            "pattern (a backslash as a folder separator), so its steps could not be found "
            "again. Name the folder without them, e.g. 'run-lr0.1' instead of 'run[lr=0.1]'."
        )
    if os.path.exists(path) and not os.path.isdir(path):
        raise ValueError(f"directory {path!r} exists and is not a folder.")
    return path


def _is_number_dtype(dtype: Any) -> bool:
    return bool(jax.numpy.issubdtype(dtype, np.number) or jax.numpy.issubdtype(dtype, np.bool_))


def _check_leaf(name: str, leaf: Any, template: bool) -> None:
    """Raises LeafTypeError or LeafValueError when Orbax cannot save `leaf` (or, for a
    `template`, cannot restore into it)."""
    if template and isinstance(leaf, jax.ShapeDtypeStruct):
        return
    if isinstance(leaf, jax.ShapeDtypeStruct):
        raise LeafTypeError(
            f"{name} is a jax.ShapeDtypeStruct, which describes an array but holds none. "
            "Save the arrays themselves; a ShapeDtypeStruct belongs in restore's template.",
            leaf=name,
        )
    if isinstance(leaf, jax.Array) and not template and leaf.is_deleted():
        raise LeafTypeError(
            f"{name} is a deleted jax.Array (its memory was freed, e.g. donated to a "
            "jitted step): save the arrays that step returned instead.",
            leaf=name,
        )
    if isinstance(leaf, (np.ndarray, np.generic)) and not _is_number_dtype(leaf.dtype):
        raise LeafTypeError(
            f"{name} has dtype {leaf.dtype}, which a checkpoint cannot hold: only bool "
            "and number dtypes. Encode it as numbers, or keep it outside the checkpoint.",
            leaf=name,
        )
    if isinstance(leaf, (jax.Array, np.ndarray, np.generic)):
        if not template and leaf.size == 0:
            raise LeafValueError(
                f"{name} has shape {leaf.shape}, no elements, and Orbax saves no empty "
                "arrays. Leave it out of the saved model, or give it one element.",
                leaf=name,
            )
        return
    if isinstance(leaf, bool | float) or (
        isinstance(leaf, numbers.Integral) and _INT64.min <= int(leaf) <= _INT64.max
    ):
        return
    if isinstance(leaf, numbers.Integral):
        raise LeafValueError(
            f"{name} is the int {leaf}, beyond the 64-bit range a checkpoint holds. "
            "Store it as a string elsewhere, or split it into smaller ints.",
            leaf=name,
        )
    kinds = "a jax.Array, a numpy array, a number or a jax.ShapeDtypeStruct"
    if not template:
        kinds = "a jax.Array, a numpy array or a number"
    hint = " (a complex number as np.asarray(value))" if isinstance(leaf, complex) else ""
    raise LeafTypeError(
        f"{name} is a {type(leaf).__name__}: {leaf!r:.60}. Each leaf of "
        f"{'the template' if template else 'a saved model'} must be {kinds}; keep other "
        f"values outside the checkpoint{hint}.",
        leaf=name,
    )


def check_model(model: Any) -> None:
    """Refuses a model that Orbax cannot save, naming the leaf: no leaf at all, text,
    objects, empty arrays.

    Raises:
        ValueError: the model has no leaf (None, ``{}``).
        LeafTypeError, LeafValueError: a leaf is not an array or number Orbax can save.

    Example:
        >>> check_model({"w": np.zeros(2), "name": "cat"})
        Traceback (most recent call last):
        datarax.errors.LeafTypeError: model['name'] is a str: 'cat'. Each leaf ...
    """
    leaves = flatten_with_names(model, "model")[0]
    if not leaves:
        raise ValueError(
            f"model holds no arrays to save: got {model!r:.100}. Pass the model's arrays, "
            "e.g. nnx.state(model) or a dict of jax.Arrays."
        )
    for name, leaf in leaves:
        _check_leaf(name, leaf, template=False)


def _stored_shape(leaf: Any) -> tuple[int, ...]:
    """The shape Orbax stores for `leaf`: a PRNG key array as its key data."""
    dtype = getattr(leaf, "dtype", None)
    if dtype is not None and jax.numpy.issubdtype(dtype, jax.dtypes.prng_key):
        return tuple(jax.eval_shape(jax.random.key_data, leaf).shape)
    return tuple(np.shape(leaf))


def _key(path: Sequence[Any]) -> tuple[str, ...]:
    """A key path as Orbax names it on disk: dict keys, attribute names, indices."""
    return tuple(
        str(next(getattr(part, a) for a in ("key", "name", "idx") if hasattr(part, a)))
        for part in path
    )


def check_template(template: Any, saved: Any, step: int) -> None:
    """Raises CheckpointTemplateError when `template` has other leaves than the tree
    `saved` (Orbax's description of a saved model), or a leaf of another shape."""
    wanted, stored = {}, {}
    for path, leaf in flatten_with_path(template, "model")[0]:
        _check_leaf(leaf_name(path, "model"), leaf, template=True)
        wanted[_key(path)] = (leaf_name(path, "model"), leaf)
    for path, leaf in jax.tree_util.tree_flatten_with_path(saved)[0]:
        stored[_key(path)] = (leaf_name(path, "model"), leaf)
    missing = [name for key, (name, _) in stored.items() if key not in wanted]
    unexpected = [name for key, (name, _) in wanted.items() if key not in stored]
    shapes = {}
    for key, (name, leaf) in wanted.items():
        saved_shape = getattr(stored.get(key, (None, None))[1], "shape", None)
        if saved_shape is not None and tuple(saved_shape) != _stored_shape(leaf):
            shapes[name] = (tuple(saved_shape), _stored_shape(leaf))
    if not (missing or unexpected or shapes):
        return
    parts = [f"{name} was saved with shape {a} but is {b} here" for name, (a, b) in shapes.items()]
    if missing:
        parts.append(f"saved but not in the template: {', '.join(missing)}")
    if unexpected:
        parts.append(f"in the template but not saved: {', '.join(unexpected)}")
    raise CheckpointTemplateError(
        f"The model given to restore does not match the one saved at step {step}: "
        f"{'; '.join(parts)}. Build the template as the saved model was built (the same "
        "keys and shapes), e.g. the same model class with the same sizes.",
        step=step,
        missing=missing,
        unexpected=unexpected,
        shapes=shapes,
    )

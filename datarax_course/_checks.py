"""The course's own argument checks, on the library's public names only.

The figures and checkers take their arguments in the library's words: each check
returns the value it accepted (as a plain Python type) or raises a `TypeError` (the
wrong kind of value) or a `ValueError` (the right kind, out of range), naming the
argument, what is allowed and what it got. The library keeps its own checks private;
these are the course's copies of the ones it needs, with the same wording.
"""

from __future__ import annotations

import collections.abc
import importlib
import math
import numbers
import sys
from collections.abc import Sequence
from typing import Any, TypeGuard

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from datarax.errors import LeafShapeError, LeafTypeError, MeshError

Spans = tuple[tuple[int, int], ...]  # a block: (start, stop) in every dimension


def check_int(
    name: str, value: Any, *, minimum: int = 1, maximum: int | None = None, meaning: str = ""
) -> int:
    """Returns `value` as an int when it is an integer in [minimum, maximum].

    Bools are not ints here; numpy integers are.

    Raises:
        TypeError: `value` is not an integer.
        ValueError: `value` is outside the range.

    Example:
        >>> check_int("batch_size", np.int64(4))
        4
    """
    allowed = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
    what = f"{name} must be an int {allowed}" + (f" ({meaning})" if meaning else "")
    if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what}, got {type(value).__name__}: {value!r:.100}.")
    number = int(value)
    if number < minimum or (maximum is not None and number > maximum):
        raise ValueError(f"{what}, got {value!r}.")
    return number


def check_bool(name: str, value: Any) -> bool:
    """Returns `value` when it is a bool; ``"no"`` or 0 are not accepted as False.

    Example:
        >>> check_bool("shuffle", True)
        True
    """
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__}: {value!r}.")
    return bool(value)


def check_number(
    name: str,
    value: Any,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    meaning: str = "",
) -> float:
    """Returns `value` as a float when it is a real number in [minimum, maximum].

    Without bounds any finite number is taken; NaN and infinity never are, and bools
    are not numbers here.

    Raises:
        TypeError: `value` is not a real number.
        ValueError: `value` is outside the range, NaN or infinite.

    Example:
        >>> check_number("width", 8, minimum=2, maximum=40, meaning="inches")
        8.0
    """
    bounded = minimum is not None and maximum is not None
    allowed = f" in [{minimum:g}, {maximum:g}]" if bounded else ""
    what = f"{name} must be a {'' if bounded else 'finite '}number"
    what += (f" of {meaning}" if meaning else "") + allowed
    if not isinstance(value, numbers.Real) or isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{what}, got {type(value).__name__}: {value!r:.100}.")
    low = -sys.float_info.max if minimum is None else minimum
    high = sys.float_info.max if maximum is None else maximum
    number: Any = value  # compared before float(), which overflows on huge ints
    if not low <= number <= high:  # False for NaN
        raise ValueError(f"{what}, got {value!r:.100}.")
    return float(value)


def check_str(
    name: str, value: Any, *, choices: Sequence[str] = (), optional: bool = False
) -> str | None:
    """Returns `value` when it is a string (one of `choices`, when given), or None when
    `optional` allows it.

    Example:
        >>> check_str("unit", "ms", choices=("ms", "s"))
        'ms'
    """
    if value is None and optional:
        return None
    if choices:
        listed = ", ".join(map(repr, choices[:-1])) + f" or {choices[-1]!r}"
        what = f"{name} must be {listed if len(choices) > 1 else repr(choices[0])}"
    else:
        what = f"{name} must be a string"
    what += " or None" if optional else ""
    if not isinstance(value, str):
        raise TypeError(f"{what}, got {type(value).__name__}: {value!r:.100}.")
    if choices and value not in choices:
        raise ValueError(f"{what}, got {value!r:.100}.")
    return value


def check_strings(name: str, value: Any) -> tuple[str, ...]:
    """Returns `value` as a tuple when it is a non-empty list or tuple of strings.

    Example:
        >>> check_strings("lanes", ["input", "step"])
        ('input', 'step')
    """
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise TypeError(
            f"{name} must be a list or tuple of strings, got {type(value).__name__}: "
            f"{value!r:.100}; e.g. {name}=['a', 'b']."
        )
    if not value:
        raise ValueError(f"{name} must hold at least one string, got {value!r}.")
    for number, item in enumerate(value):
        check_str(f"{name}[{number}]", item)
    return tuple(value)


def check_mapping(name: str, value: Any, form: str) -> collections.abc.Mapping[Any, Any]:
    """Returns `value` when it is a non-empty mapping; `form` shows the one expected.

    Example:
        >>> check_mapping("strips", {"a": [0]}, "{label: owner of each row}")
        {'a': [0]}
    """
    if not isinstance(value, collections.abc.Mapping) or not value:
        raise TypeError(
            f"{name} must be a non-empty mapping {form}, got {type(value).__name__}: "
            f"{value!r:.100}."
        )
    return value


def is_sequence(value: Any) -> TypeGuard[Sequence[Any]]:
    """Whether `value` is a list, tuple or other `Sequence` that is not text.

    Example:
        >>> is_sequence([1, 2]), is_sequence("12"), is_sequence(b"12")
        (True, False, False)
    """
    return isinstance(value, Sequence) and not isinstance(value, (str, bytes))


def require(module: str, extra: str, needed_by: str) -> None:
    """Checks that `module` imports, or raises an ImportError that names the extra of
    ``datarax-sharding`` to install.

    Raises:
        ImportError: `module` is not installed; the message gives the pip command.

    Example:
        >>> require("no_such_module", "viz", "this example")
        Traceback (most recent call last):
        ...
        ImportError: this example needs no_such_module, ...: pip install 'datarax-sharding[viz]'
    """
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        if error.name is not None and error.name.partition(".")[0] != module.partition(".")[0]:
            raise  # the module is there; something it imports is not
        raise ImportError(
            f"{needed_by} needs {module}, which is not installed: "
            f"pip install 'datarax-sharding[{extra}]'"
        ) from error


def check_not_deleted(name: str, leaf: Any) -> None:
    """Raises TypeError when `leaf` is a jax.Array that was deleted or donated."""
    if isinstance(leaf, jax.Array) and leaf.is_deleted():
        raise LeafTypeError(
            f"{name} is a jax.Array that has been deleted or donated (shape {leaf.shape}), "
            "so it holds no data any more. Pass the array a jitted step returned instead "
            "of one it consumed with donate_argnums, or keep a copy.",
            leaf=name,
        )


def spec_axis_names(entry: Any) -> tuple[str, ...]:
    """The mesh axis names one PartitionSpec entry shards over (empty for None).

    Example:
        >>> spec_axis_names(("data", "model")), spec_axis_names(None)
        (('data', 'model'), ())
    """
    if entry is None or entry is PartitionSpec.UNCONSTRAINED:
        return ()
    if isinstance(entry, (tuple, list)):
        return tuple(entry)
    return (entry,)


def check_spec_against_mesh(spec: PartitionSpec, mesh_shape: dict[str, int]) -> None:
    """Raises MeshError (a ValueError) if `spec` names an axis the mesh lacks or uses one
    twice."""
    seen: set[str] = set()
    for entry in spec:
        for name in spec_axis_names(entry):
            if name not in mesh_shape:
                raise MeshError(
                    f"PartitionSpec {spec} names mesh axis {name!r}, but the mesh has "
                    f"axes {dict(mesh_shape)}. Use one of {tuple(mesh_shape)} or build "
                    "the mesh with that axis name."
                )
            if name in seen:
                raise MeshError(
                    f"PartitionSpec {spec} uses mesh axis {name!r} more than once; each "
                    "mesh axis can shard at most one array dimension."
                )
            seen.add(name)


def device_spans(sharding: Sharding, shape: tuple[int, ...]) -> dict[Any, Spans]:
    """Every device's block of a `shape` array: ``{device: ((start, stop), ...)}``."""
    placed = sharding.devices_indices_map(tuple(shape))
    return {
        device: tuple(part.indices(size)[:2] for part, size in zip(index, shape, strict=True))
        for device, index in placed.items()
    }


def describe_axes(names: Sequence[str]) -> str:
    """``mesh axis 'data'`` or ``mesh axes ('data', 'model')``."""
    return f"mesh axis {names[0]!r}" if len(names) == 1 else f"mesh axes {tuple(names)}"


def ways_out(dim: int, size: int) -> str:
    """What to do when dimension `dim` does not split into `size` equal parts."""
    if dim == 0:
        return (
            f"Use a batch size that is a multiple of {size}, pad the batch and carry a mask "
            "(datarax.sharding.pad_to_multiple), or drop the remainder in the pipeline "
            "(drop_remainder=True)."
        )
    return (
        f"Pad or crop dimension {dim} to a multiple of {size}, shard it over mesh axes "
        "whose sizes divide it, or leave it unsplit (None in that PartitionSpec entry)."
    )


def named_leaf_sharding(
    name: str, shape: tuple[int, ...], sharding: NamedSharding
) -> NamedSharding:
    """The sharding for one leaf, after checking rank and divisibility.

    A spec shorter than the leaf's rank shards its leading axes; a rank-0 leaf (a
    python number or 0-d array) has nothing to split and is replicated.
    """
    spec = sharding.spec
    if not shape:
        return NamedSharding(sharding.mesh, PartitionSpec())
    if len(spec) > len(shape):
        raise LeafShapeError(
            f"{name} has shape {shape} (rank {len(shape)}), but the PartitionSpec {spec} "
            f"has {len(spec)} entries. Use a spec with at most {len(shape)} entries "
            f"(trailing dimensions are replicated when left out), or reshape {name}.",
            leaf=name,
            shape=shape,
            dim=len(shape),
        )
    try:
        sharding.shard_shape(shape)
    except ValueError:
        mesh_shape = dict(sharding.mesh.shape)
        for dim, entry in enumerate(spec):
            names = spec_axis_names(entry)
            size = math.prod(mesh_shape[n] for n in names)
            if shape[dim] % size:
                what = f"{shape[dim]} rows" if dim == 0 else f"size {shape[dim]} in dimension {dim}"
                raise LeafShapeError(
                    f"{name} has {what} (shape {shape}), which cannot be split evenly over "
                    f"{describe_axes(names)} ({size} devices). " + ways_out(dim, size),
                    leaf=name,
                    shape=shape,
                    dim=dim,
                    axes=names,
                    parts=size,
                ) from None
        raise
    return sharding

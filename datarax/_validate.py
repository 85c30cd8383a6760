"""Argument checks that need no JAX: ints, numbers, strings, bools, mappings, shapes,
process indices and axis rules, each with one wording wherever it applies.

Every check returns the value it accepted (as a plain Python type) or raises a
`TypeError` (the wrong kind of value) or a `ValueError` (the right kind, out of range),
naming the argument, what is allowed and what it got. Imported by every wing, the
cluster launcher's worker included, which must not import JAX before its settings.
"""

from __future__ import annotations

import collections.abc
import numbers
import sys
from collections.abc import Mapping, Sequence
from typing import Any, TypeGuard

import numpy as np

MeshAxes = str | tuple[str, ...] | None
AxisRules = Mapping[str, MeshAxes] | Sequence[tuple[str, MeshAxes]]


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
    try:
        return float(value)
    except OverflowError:  # an int beyond any float
        raise ValueError(f"{what}, got {value!r:.100}, more than a float holds.") from None


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


def check_shape(name: str, value: Any) -> tuple[int, ...]:
    """Returns `value` as a tuple of ints >= 0 (an array's shape).

    Example:
        >>> check_shape("global_shape", [16, np.int64(3)])
        (16, 3)
    """
    if not is_sequence(value):
        raise TypeError(
            f"{name} must be a tuple of ints, one size per dimension, got "
            f"{type(value).__name__}: {value!r:.100}; e.g. {name}=(16, 3)."
        )
    return tuple(check_int(f"{name}[{dim}]", size, minimum=0) for dim, size in enumerate(value))


def check_process(process_index: Any, process_count: Any) -> tuple[int, int]:
    """Returns ``(index, count)`` after checking that ``0 <= index < count``."""
    count = check_int("process_count", process_count)
    index = check_int("process_index", process_index, minimum=0)
    if index >= count:
        raise ValueError(
            f"process_index must be in [0, {count - 1}] for process_count={count}, got {index}."
        )
    return index, count


def check_axis_rules(axis_rules: Any) -> tuple[tuple[str, MeshAxes], ...] | None:
    """Returns logical-to-mesh axis rules as a tuple of pairs (hashable), or None.

    A mapping or a sequence of ``(logical name, mesh axes)`` pairs is taken; a list of
    mesh axes becomes a tuple.

    Raises:
        TypeError: an entry is not a pair whose first item is a string, or its mesh axes
            are not a string, None, or a list or tuple of strings.

    Example:
        >>> check_axis_rules({"batch": "data", "embed": ["model", "fsdp"]})
        (('batch', 'data'), ('embed', ('model', 'fsdp')))
    """
    if axis_rules is None:
        return None
    items = axis_rules.items() if isinstance(axis_rules, Mapping) else axis_rules
    rules: list[tuple[str, MeshAxes]] = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(
                "axis_rules must map logical axis names to mesh axes, e.g. "
                f"{{'batch': 'data', 'embed': None}}; got the entry {item!r}."
            )
        logical, mesh_axes = item
        if isinstance(mesh_axes, list):
            mesh_axes = tuple(mesh_axes)
        names = mesh_axes if isinstance(mesh_axes, tuple) else (mesh_axes,)
        if mesh_axes is not None and not all(isinstance(name, str) for name in names):
            raise TypeError(
                f"axis_rules maps {logical!r} to {mesh_axes!r}; a logical axis maps to a mesh "
                "axis name (a string), several (a list or tuple of strings), or None "
                "(not sharded), e.g. ('batch', 'data')."
            )
        rules.append((logical, mesh_axes))
    return tuple(rules)

"""Reading the reader's answer as plain values before any comparison.

A checker never compares the reader's objects directly: an object's ``==`` may say
anything, a generator may never end and a list nested ten thousand deep may exhaust
the stack. `plain` copies an answer into plain Python and numpy values (numbers,
strings, lists, tuples, dicts, sets, numpy arrays), reading every container through its
built-in type's own methods, within a bound on depth and size; anything else is turned
down with a message (`Rejected`). The functions below it read the kinds of answer the
exercises ask for: a number, a whole number, a sequence, an array.
"""

from __future__ import annotations

import itertools
import reprlib
from typing import Any

import jax
import numpy as np

from datarax_course._feedback import Rejected, wrong

MAX_DEPTH = 8  # the deepest answer asked for is a pair of a dict of arrays and a mask
MAX_ITEMS = 1_000_000  # elements of arrays and containers, all together


def reject(what: str, value: Any, expected: str) -> Rejected:
    """`Rejected` saying that `what` (of kind `value`) is not `expected`."""
    return Rejected(wrong(f"{what} should be {expected}; it is {describe(value)}."))


def describe(value: Any) -> str:
    """A short, safe description of any value: its type, and for plain values the value.

    Example:
        >>> describe([1, 2])
        'a list: [1, 2]'
        >>> describe(object())
        'an object'
    """
    kind = type(value).__name__
    article = "an" if kind[:1].lower() in "aeiou" else "a"
    if value is None or type(value) in (bool, int, float, str, list, tuple, dict, set):
        return f"{article} {kind}: {shown(value)}"
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        return f"{article} {kind} of shape {np.shape(value)} and dtype {value.dtype}"
    return f"{article} {kind}"


_SHORT = reprlib.Repr()
_SHORT.maxlevel, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxdict = 3, 8, 8, 6
_SHORT.maxset, _SHORT.maxstring, _SHORT.maxother, _SHORT.maxlong = 8, 60, 80, 40


def shown(value: Any) -> str:
    """A repr of a plain value short enough for a message (huge numbers included).

    Example:
        >>> shown(10**5000)
        'an integer of about 5001 digits'
    """
    if isinstance(value, int) and value.bit_length() > 128:
        return f"an integer of about {int(value.bit_length() * 0.30103) + 1} digits"
    try:
        return _SHORT.repr(value)
    except Exception:  # a value the repr cannot show: its type will do
        return type(value).__name__


def plain(value: Any, what: str, expected: str) -> Any:
    """`value` as plain Python and numpy values, read without calling its own methods.

    Args:
        value: what the reader's function returned.
        what: how to name it in a message ("host_fraction's result").
        expected: what the exercise asks for ("a number between 0 and 1").

    Returns:
        The same value as built-in scalars, lists, tuples, dicts, sets and numpy arrays.

    Raises:
        Rejected: a value of another type, nested deeper than `MAX_DEPTH` or with more
            than `MAX_ITEMS` elements in all.

    Example:
        >>> import numpy as np
        >>> plain((np.int64(3), [1.5]), "the result", "a pair")
        (3, [1.5])
    """
    return _Reader(what, expected).read(value, 0)


class _Reader:
    def __init__(self, what: str, expected: str) -> None:
        self.what, self.expected, self.left = what, expected, MAX_ITEMS

    def spend(self, count: int) -> None:
        self.left -= count
        if self.left < 0:
            raise Rejected(
                wrong(
                    f"{self.what} has more than {MAX_ITEMS:,} elements; it should be "
                    f"{self.expected}."
                )
            )

    def read(self, value: Any, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise Rejected(
                wrong(
                    f"{self.what} is nested more than {MAX_DEPTH} levels deep; it should be "
                    f"{self.expected}."
                )
            )
        if value is None or isinstance(value, (bool, np.bool_)):
            return None if value is None else bool(value)
        for kind in (int, float, str):  # exact copies, whatever a subclass overrides
            if isinstance(value, kind):
                return getattr(kind, f"__{kind.__name__}__")(value)
        if isinstance(value, np.generic):
            return value.item() if value.dtype.kind in "biufc" else self.refuse(value)
        if isinstance(value, (np.ndarray, jax.Array)):
            return self.array(value, depth)
        if isinstance(value, range):
            try:
                self.spend(len(value))
            except OverflowError:  # longer than a C size: far too long
                self.spend(MAX_ITEMS + 1)
            return list(value)
        return self.container(value, depth)

    def array(self, value: Any, depth: int) -> Any:
        self.spend(int(np.prod(np.shape(value), dtype=np.float64)))
        try:
            copy = np.array(value, copy=True, subok=False)
        except Exception:  # a tracer, a deleted jax array: nothing to read
            return self.refuse(value)
        if copy.dtype.kind == "O":
            return self.read(copy.tolist(), depth)
        return copy if copy.dtype.kind in "biuf" else self.refuse(value)

    def container(self, value: Any, depth: int) -> Any:
        readers: tuple[tuple[Any, Any], ...] = (
            (list, list),
            (tuple, tuple),
            (set, set),
            (frozenset, set),
            (dict, dict),
        )
        for kind, made in readers:
            if isinstance(value, kind):
                contents: Any = value  # read through the built-in type's own methods
                size = kind.__len__(contents)
                self.spend(size)
                if kind is dict:
                    pairs = dict.items(contents)
                    return {
                        self.key(k, depth): self.read(v, depth + 1)
                        for k, v in itertools.islice(pairs, size)
                    }
                items = itertools.islice(kind.__iter__(contents), size)
                read = [self.read(item, depth + 1) for item in items]
                return self.hashable(read) if made is set else made(read)
        return self.refuse(value)

    def key(self, key: Any, depth: int) -> Any:
        return self.hashable([self.read(key, depth + 1)]).pop()

    def hashable(self, items: list[Any]) -> set[Any]:
        try:
            return set(items)
        except TypeError:
            raise Rejected(
                wrong(
                    f"{self.what} holds lists or arrays as keys or set members; it should "
                    f"be {self.expected}."
                )
            ) from None

    def refuse(self, value: Any) -> Any:
        raise reject(self.what, value, self.expected)


def number(value: Any, what: str) -> float:
    """The reader's number as a float: a Python, numpy or JAX scalar (0-d arrays too).

    Example:
        >>> import jax.numpy as jnp
        >>> number(jnp.float32(0.5), "the result")
        0.5
    """
    read = plain(value, what, "a number")
    if isinstance(read, np.ndarray) and read.shape == ():
        read = read.item()
    if isinstance(read, bool) or not isinstance(read, (int, float)):
        raise reject(what, read, "a number")
    try:
        return float(read)
    except OverflowError:
        raise reject(what, read, "a number of a sensible size") from None


def whole(value: Any, what: str) -> int:
    """The reader's whole number as an int (``3``, ``3.0``, ``np.int64(3)``, a 0-d array).

    Example:
        >>> whole(3.0, "the count")
        3
    """
    read = plain(value, what, "a whole number")
    if isinstance(read, np.ndarray) and read.shape == ():
        read = read.item()
    if isinstance(read, float) and read.is_integer():
        return int(read)
    if isinstance(read, bool) or not isinstance(read, int):
        raise reject(what, read, "a whole number")
    if abs(read) >= 2**63:
        raise reject(what, read, "a whole number of a sensible size (below 2**63)")
    return read


def items(value: Any, what: str, expected: str, length: int | None = None) -> list[Any]:
    """The reader's sequence (a list, tuple or array) as a list of plain values.

    Example:
        >>> items((1, 2), "the bounds", "a pair (start, stop)", length=2)
        [1, 2]
    """
    read = plain(value, what, expected)
    if isinstance(read, np.ndarray) and read.ndim >= 1:
        read = list(read)
    if not isinstance(read, (list, tuple)) or (length is not None and len(read) != length):
        raise reject(what, read, expected)
    return list(read)


def array(value: Any, what: str, expected: str, integer: bool = False) -> np.ndarray:
    """The reader's array (or list of numbers) as a numpy array of numbers.

    Example:
        >>> array([3, 1], "the rows", "a list of row numbers", integer=True)
        array([3, 1])
    """
    read = plain(value, what, expected)
    if isinstance(read, (list, tuple)):
        try:
            read = np.array(read)
        except ValueError:  # ragged lists
            raise reject(what, read, expected) from None
    if isinstance(read, np.ndarray) and integer and read.size == 0:
        return read.astype(int)
    if not isinstance(read, np.ndarray) or read.dtype.kind not in ("iu" if integer else "biuf"):
        raise reject(what, read, expected)
    return read

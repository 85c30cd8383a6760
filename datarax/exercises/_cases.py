"""Where a checker's cases and right answers come from.

A checker draws its cases from `draw`: in a notebook the same *public* cases every
time, when grading *secret* ones, from a seed the grader picks after the notebook has
run (`drawing`). Where the right answer is what the library or JAX does, the checker
asks them. Where it is a formula of the lesson's own, the checker calls the reader's
function on every case first, then asks `reference` for the right answers: the
grader's answer keys (`datarax.exercises._keys`, loaded by the grader alone and left
out of what a graded notebook can import), or, in a notebook, the table of the keys'
answers to the public cases (`datarax.exercises._tables`).
"""

from __future__ import annotations

import contextlib
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import jax
import numpy as np

from datarax.exercises import _answers

PUBLIC_SEED = 0  # the notebooks' cases; the grader draws a seed for each submission


class _Draw:
    seed: int | None = None  # None: the public cases


def draw(name: str) -> np.random.Generator:
    """The random source of exercise `name`'s drawn cases: the public cases in a notebook,
    the grader's secret ones inside `drawing`.

    Example:
        >>> int(draw("00.example").integers(100)) == int(draw("00.example").integers(100))
        True
    """
    seed = PUBLIC_SEED if _Draw.seed is None else _Draw.seed
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def public() -> bool:
    """Whether the checkers draw the notebooks' public cases (outside `drawing`)."""
    return _Draw.seed is None


@contextlib.contextmanager
def drawing(seed: int) -> Iterator[None]:
    """Every checker draws its cases from `seed` inside the block (the grader's side)."""
    saved, _Draw.seed = _Draw.seed, seed
    try:
        yield
    finally:
        _Draw.seed = saved


class NotJudgedHere(Exception):
    """Raised by `reference` in a graded notebook's kernel: the reader's function has been
    called on every case, and the grader, not the kernel, knows the right answers."""


class Unavailable(Exception):
    """The right answers to these cases are not known here; carries what to tell the reader."""


_KEYS: dict[str, Callable[..., Any]] = {}  # filled by datarax.exercises._keys (the grader's)


def reference(name: str, cases: Sequence[tuple[str, tuple[Any, ...]]]) -> list[Any]:
    """The right answers to `cases` of exercise `name`, each given as (text, key arguments):
    from the answer key where the grader loaded it, else from the table of the public
    cases. Call it only after the reader's function has answered every case.

    Raises:
        NotJudgedHere: in a kernel being graded (its calls are recorded; the grader judges).
        Unavailable: the cases are not the public ones the table holds.
    """
    if name in _KEYS:
        return [_KEYS[name](*arguments) for _, arguments in cases]
    if _answers.recording_now():
        raise NotJudgedHere(name)
    from datarax.exercises._tables import TABLES

    table = TABLES.get(name, {})
    texts = [text for text, _ in cases]
    if not public() or table.get("cases") != texts:
        raise Unavailable(
            f"the right answers to {name}'s cases are tabulated for the notebooks' 8 devices, "
            f"and these cases differ (this runtime has {len(jax.devices())} devices): run the "
            "notebook's device set-up cell, setup_devices(8), first."
        )
    return list(table["expected"])

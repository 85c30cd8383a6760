"""Where a checker's cases and right answers come from.

A checker draws its cases from `draw`: in a notebook the same *public* cases every
time, when grading *secret* ones, from a seed the grader picks after the notebook has
run (`drawing`). Where the right answer is what the library does with the reader's
inputs, the checker asks it. Otherwise the checker calls the reader's function on every
case first, and only then finds the right answers in the answer keys
(`datarax_course._keys`, left out of what a graded notebook can import):

- for a formula of the lesson's own, `reference` gives them: the grader's keys, or, in a
  notebook, the table of the keys' answers to the public cases (the course's data file
  ``answer_keys.json``);
- for what the judging machine computes (XLA's count, Flax's mask, a compiled text's
  collectives, JAX's shard shapes, a loop timed), `counted` finds the keys' code where
  it is installed, and `counted_here` hands it over once every case is answered, or
  stops a graded kernel there, where the grader computes it in its own process.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import zlib
from collections.abc import Callable, Iterator, Sequence
from importlib import resources
from typing import Any

import jax
import numpy as np

from datarax_course import _answers

ANSWER_KEYS = "answer_keys.json"  # beside this module, written by datarax_course._keys
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


_KEYS: dict[str, Callable[..., Any]] = {}  # filled by datarax_course._keys (the grader's)


@functools.cache
def answer_tables() -> dict[str, dict[str, list[Any]]]:
    """{exercise: {"cases": texts, "expected": answers}}: the answer keys' answers to the
    public cases, read once from the course's data file ``answer_keys.json``."""
    text = resources.files("datarax_course").joinpath(ANSWER_KEYS).read_text(encoding="utf-8")
    return json.loads(text)


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
    table = answer_tables().get(name, {})
    texts = [text for text, _ in cases]
    if not public() or table.get("cases") != texts:
        raise Unavailable(
            f"the right answers to {name}'s cases are tabulated for the notebooks' 8 devices, "
            f"and these cases differ (this runtime has {len(jax.devices())} devices): run the "
            "notebook's device set-up cell, setup_devices(8), first."
        )
    return list(table["expected"])


def counted(name: str) -> Callable[..., Any] | None:
    """The answer keys' code that computes exercise `name`'s right answers on the judging
    machine, where the keys are installed (the grader's process, a reader's own
    installation); None in a graded kernel's copy of the course, which has no keys."""
    try:
        keys = importlib.import_module("datarax_course._keys")
    except ImportError:
        return None
    return keys.COUNTS[name]


def counted_here(name: str, found: Callable[..., Any] | None) -> Callable[..., Any]:
    """`found` (what `counted` gave), once the reader's function has answered every case.

    Raises:
        NotJudgedHere: in a kernel being graded (its calls are recorded; the grader judges).
        Unavailable: this copy of the course has no answer keys to compute with.
    """
    if _answers.recording_now():
        raise NotJudgedHere(name)
    if found is None:
        raise Unavailable(
            f"this copy of the course has no answer keys to judge {name} with (a kernel "
            "being graded): the grader computes the right answers itself, in its own process."
        )
    return found

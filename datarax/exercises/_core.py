"""The exercise form: a checker says what is right or wrong with the reader's answer.

A checker is registered under a name (``"02.shard_shapes"``: notebook, then
exercise) with `exercise`. `check(name, answer)` runs it and prints feedback: what is
right, or the first thing that is wrong and a hint. It never raises because of the
answer (an unanswered placeholder, an exception inside the answer), so a notebook runs
top to bottom before the reader has written anything; it returns a `Feedback` whose
truth value says whether the answer is right, so a solution cell can
``assert check(...)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

Checker = Callable[[Any], "Feedback"]
_CHECKERS: dict[str, tuple[Checker, str]] = {}


class NotAnswered(Exception):  # a signal that the placeholder is still there, not an error
    """Raised inside a checker when the answer is still the placeholder."""


@dataclasses.dataclass(frozen=True)
class Feedback:
    """Whether an answer is right, and what to tell the reader."""

    ok: bool
    message: str

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        return ("Right: " if self.ok else "Not yet: ") + self.message

    def _ipython_display_(self) -> None:
        """Shows nothing: `check` has printed the feedback already."""


def right(message: str) -> Feedback:
    """The answer is right; `message` says what it got right."""
    return Feedback(True, message)


def wrong(message: str) -> Feedback:
    """The answer is wrong; `message` says what is wrong and hints at the way."""
    return Feedback(False, message)


def exercise(name: str, hint: str) -> Callable[[Checker], Checker]:
    """Registers a checker under `name`, with the hint shown for an unanswered placeholder."""

    def register(checker: Checker) -> Checker:
        _CHECKERS[name] = (checker, hint)
        return checker

    return register


def answered(value: Any) -> Any:
    """`value`, unless it is a placeholder (``...`` or None): then `NotAnswered`."""
    if value is Ellipsis or value is None:
        raise NotAnswered
    return value


def call(answer: Any, *args: Any, **kwargs: Any) -> Any:
    """Calls the reader's function; a placeholder result or NotImplementedError means
    "not answered yet"."""
    if not callable(answer):
        return answered(answer)
    try:
        return answered(answer(*args, **kwargs))
    except NotImplementedError:
        raise NotAnswered from None


def check(name: str, answer: Any, *, quiet: bool = False) -> Feedback:
    """Checks the reader's `answer` to exercise `name`, prints the feedback, returns it.

    Example:
        >>> from datarax import exercises
        >>> bool(exercises.check("00.example", lambda n: n * 2, quiet=True))
        True
        >>> print(exercises.check("00.example", lambda n: ..., quiet=True))
        Not yet: not answered yet. Hint: return n doubled.
    """
    if name not in _CHECKERS:
        raise ValueError(f"No exercise is called {name!r}; there are {sorted(_CHECKERS)}.")
    checker, hint = _CHECKERS[name]
    try:
        feedback = checker(answer)
    except NotAnswered:
        feedback = wrong(f"not answered yet. Hint: {hint}")
    except Exception as error:  # the reader's code raised: report it, don't stop the notebook
        feedback = wrong(f"your answer raised {type(error).__name__}: {error}. Hint: {hint}")
    if not quiet:
        print(feedback)
    return feedback


@exercise("00.example", hint="return n doubled.")
def _example(answer: Any) -> Feedback:
    """The smallest checker: it shows the shape every checker takes."""
    for n in (0, 3, -2):
        got = call(answer, n)
        if got != 2 * n:
            return wrong(f"for n={n} your function returned {got!r}; expected {2 * n}.")
    return right("it doubles every number tried.")

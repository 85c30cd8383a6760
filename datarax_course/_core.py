"""The exercise form: a checker says what is right or wrong with the reader's answer.

A checker is registered under a name (``"02.memory"``: notebook, then exercise) with
`exercise`, together with a hint in two steps: the *idea* and the *method*.
`check(name, answer)` runs it and prints feedback. It never raises because of the
answer, so a notebook runs top to bottom before the reader has written anything; it
returns a `Feedback` whose truth value says whether the answer is right, so a solution
cell can ``assert check(...)``. Who is answerable for what:

- the placeholder (``...``, or a function returning it or raising NotImplementedError)
  is "not answered yet", with the idea;
- a function that returns None is asked whether it forgot ``return``;
- an exception while the reader's function runs is reported as the reader's;
- an answer of the wrong form (a string for a number, a generator, a list nested
  10,000 deep) is turned down by `plain` and the functions built on it, within bounded
  time and memory; answers are compared as plain values, never with their own ``==``;
- a call to a library function the exercise asks to do without (`Ban`) is turned down;
- any other exception is the checker's own bug, and says so.

Hints come in two steps: the first time an answer is not yet right, the feedback ends
with the idea; from the second such answer to the same exercise on (or with
``hint=2``), it adds the method.

A checker draws its cases, and finds right answers that are not the library's, through
`datarax_course._cases`.

Every call of the reader's function goes through `datarax_course._answers.outcome`,
which lets the grader (``datarax-grade``, ``grader/`` in the repository) record what
the function returned in a student's kernel and judge those values in its own process.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from datarax_course._answers import Unreplayable, outcome
from datarax_course._cases import NotJudgedHere, Unavailable, draw
from datarax_course._checks import check_bool, check_int, check_str
from datarax_course._feedback import (
    AnswerRaised,
    Feedback,
    Forbidden,
    MissingReturn,
    NotAnswered,
    Rejected,
    right,
    wrong,
)
from datarax_course._values import whole

Checker = Callable[[Any], Feedback]


Cases = Callable[[], Sequence[tuple[str, tuple[Any, ...]]]]


@dataclasses.dataclass(frozen=True)
class Exercise:
    """A registered checker, its hint in two steps, and, for an exercise whose right
    answers come from `reference`, its cases as (text, answer key's arguments)."""

    checker: Checker
    idea: str
    method: str
    cases: Cases | None = None


_CHECKERS: dict[str, Exercise] = {}
_MISSES: dict[str, int] = {}  # exercise -> answers not yet right, for the hint's step


def exercise(
    name: str, *, idea: str, method: str, cases: Cases | None = None
) -> Callable[[Checker], Checker]:
    """Registers a checker under `name`, with its hint: the `idea`, then the `method`;
    `cases` for a checker whose right answers come from `reference`."""

    def register(checker: Checker) -> Checker:
        _CHECKERS[name] = Exercise(checker, idea, method, cases)
        return checker

    return register


@dataclasses.dataclass(frozen=True)
class Ban:
    """A library function that an exercise asks the reader to do without.

    While the reader's function runs, ``owner.name`` is replaced by a stand-in that
    raises `Forbidden`; ``name="__code__"`` replaces a function's code, which reaches
    every reference to that function, however it was imported.
    """

    owner: Any
    name: str
    label: str


def keys_banned(found: Callable[..., Any] | None, label: str) -> tuple[Ban, ...]:
    """The answer keys' own code (`found`, from `datarax_course._cases.counted`), banned
    while the reader's function runs; nothing where this copy of the course has no keys.

    Example:
        >>> keys_banned(None, "the checker's own count")
        ()
    """
    return () if found is None else (Ban(found, "__code__", label),)


def _stand_in(*args: Any, **kwargs: Any) -> Any:  # replaces a banned function's code
    raise __import__("datarax_course._feedback", fromlist=["Forbidden"]).Forbidden("LABEL")


def _stand_in_code(label: str) -> Any:
    """`_stand_in`'s code, naming `label`: a function's code runs with its own module's
    globals, so the stand-in reaches `Forbidden` through ``__import__``."""
    code = _stand_in.__code__
    return code.replace(co_consts=tuple(label if c == "LABEL" else c for c in code.co_consts))


@contextlib.contextmanager
def _banned(bans: Sequence[Ban]) -> Iterator[None]:
    saved = []
    for ban in bans:
        own = ban.name == "__code__" or ban.name in vars(ban.owner)
        saved.append((ban, own, getattr(ban.owner, ban.name)))

        def refuse(*args: Any, _label: str = ban.label, **kwargs: Any) -> Any:
            raise Forbidden(_label)

        stand_in = _stand_in_code(ban.label) if ban.name == "__code__" else refuse
        setattr(ban.owner, ban.name, stand_in)
    try:
        yield
    finally:
        for ban, own, original in reversed(saved):
            if own:
                setattr(ban.owner, ban.name, original)
            else:
                delattr(ban.owner, ban.name)


def call(answer: Any, *args: Any, bans: Sequence[Ban] = (), **kwargs: Any) -> Any:
    """Calls the reader's function `answer`, telling the reader's errors from the checker's.

    Raises:
        NotAnswered: the placeholder (``...`` returned, NotImplementedError raised).
        MissingReturn: the function returned None.
        AnswerRaised: the function raised.
        Rejected: `answer` is not a function, or it called a banned function.

    Example:
        >>> call(lambda n: n + 1, 1)
        2
        >>> call(lambda n: None, 1)
        Traceback (most recent call last):
        datarax_course._feedback.MissingReturn
    """
    return outcome(lambda: _run(answer, args, kwargs, bans))


def _run(answer: Any, args: tuple[Any, ...], kwargs: dict[str, Any], bans: Sequence[Ban]) -> Any:
    if answer is Ellipsis or answer is None:
        raise NotAnswered
    if not callable(answer):
        raise Rejected(
            wrong(
                "pass your function itself, as in check(name, my_function), not what it "
                f"returns; you passed {type(answer).__name__}."
            )
        )
    try:
        with _banned(bans):
            result = answer(*args, **kwargs)
    except NotImplementedError:
        raise NotAnswered from None
    except Forbidden as error:
        label = error.label or " or ".join(ban.label for ban in bans)
        raise Rejected(
            wrong(f"your function used {label}, which this exercise asks you to do without.")
        ) from None
    except Exception as error:
        raise AnswerRaised(error) from error
    if result is Ellipsis:
        raise NotAnswered
    if result is None:
        raise MissingReturn
    return result


def _hinted(message: str, step: int, entry: Exercise) -> str:
    hint = f" Hint: {entry.idea}"
    return message + hint + (f" Method: {entry.method}" if step >= 2 else "")


def _judge(name: str, answer: Any, hint: int | None) -> Feedback:
    entry = _CHECKERS[name]
    try:
        feedback = entry.checker(answer)
    except NotAnswered:
        return wrong(_hinted("not answered yet.", hint or 1, entry))
    except MissingReturn:
        feedback = wrong("your function returned None: did you forget `return`?")
    except Rejected as rejected:
        feedback = rejected.feedback
    except AnswerRaised as raised:
        feedback = wrong(f"your function raised {raised}.")
    except Unavailable as unavailable:
        return Feedback(False, str(unavailable))
    except (Unreplayable, NotJudgedHere):
        raise
    except Exception as error:  # not the reader's: the checker's own code failed
        return Feedback(
            False,
            f"this is a bug in the checker of {name!r}, not in your answer; please report "
            f"it: {type(error).__name__}: {error}",
            checker_bug=True,
        )
    if feedback.ok:
        return feedback
    _MISSES[name] = _MISSES.get(name, 0) + 1
    return wrong(_hinted(feedback.message, hint or _MISSES[name], entry))


def check(name: str, answer: Any, *, quiet: bool = False, hint: int | None = None) -> Feedback:
    """Checks the reader's `answer` to exercise `name`, prints the feedback, returns it.

    Args:
        name: the exercise, as in the notebook (``"03.pad_for"``).
        answer: the reader's function.
        quiet: return the feedback without printing it.
        hint: 1 to end a "not yet" with the idea only, 2 to add the method; by default
            the first answer that is not yet right gets the idea, later ones the method.

    Example:
        >>> import datarax_course
        >>> bool(datarax_course.check("00.example", lambda n: n * 2, quiet=True))
        True
        >>> print(datarax_course.check("00.example", lambda n: ..., quiet=True))
        Not yet: not answered yet. Hint: a number and its double.
        >>> print(datarax_course.check("00.example", lambda n: None, quiet=True, hint=2))
        Not yet: your function returned None: did you forget `return`?
        Hint: a number and its double. Method: return n * 2.
    """
    check_str("name", name)
    check_bool("quiet", quiet)
    if hint is not None:
        check_int("hint", hint, maximum=2, meaning="1: the idea only, 2: the method too")
    if name not in _CHECKERS:
        raise ValueError(f"No exercise is called {name!r}; there are {sorted(_CHECKERS)}.")
    feedback = _judge(name, answer, hint)
    if not quiet:
        print(feedback)
    return feedback


@exercise("00.example", idea="a number and its double.", method="return n * 2.")
def _example(answer: Any) -> Feedback:
    """The smallest checker: it shows the shape every checker takes."""
    for n in (0, 3, -2, int(draw("00.example").integers(-99, 100))):
        got = whole(call(answer, n), f"your function's result for n={n}")
        if got != 2 * n:
            return wrong(f"for n={n} your function returned {got}; expected {2 * n}.")
    return right("it doubles every number tried.")

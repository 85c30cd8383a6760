"""The two halves of judging a submission: `harvest` in its kernel, `judged` in the grader.

Both draw the checkers' cases from the same secret seed, which the grader picks and
hands to the kernel only after the student's notebook has run (`_cases.drawing`), so no
cell of the notebook knew the cases. `harvest` runs, in the student's kernel, each
exercise's checker on the student's function while `datarax_course._answers`
records what the function returned, and writes the record as JSON; where the right
answers are the answer keys', which the kernel cannot import, the checker stops once
every case has been answered. `judged` runs the same checker in the grader's own
process, on the same cases, with the answer keys loaded: it computes the right answers
there and takes nothing from the kernel but the values the function returned. What the
kernel's own checks printed or claimed plays no part. The grader reaches both through
the course's public module, `datarax_course.grading`.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax

from datarax_course import _cases, _core
from datarax_course._answers import Unreplayable, recording, replaying
from datarax_course._feedback import Feedback


def harvest(functions: dict[str, str], namespace: Mapping[str, Any], seed: int, out: str) -> None:
    """Records, for each exercise, what the function named for it in `namespace` returned
    on the cases drawn from `seed`; writes ``{"devices": count, "answers": {exercise:
    steps}}`` to `out`."""
    answers = {}
    with _cases.drawing(seed):
        for exercise, name in functions.items():
            with recording() as steps, contextlib.suppress(Exception):
                _core._CHECKERS[exercise].checker(namespace.get(name))
            answers[exercise] = steps
    record = {"devices": len(jax.devices()), "answers": answers}
    Path(out).write_text(json.dumps(record), encoding="utf-8")


def judged(exercise: str, steps: Any, seed: int) -> Feedback | None:
    """The checker's verdict, with the idea as hint, on the recorded `steps` of the cases
    drawn from `seed`; None when the record does not answer the checker's cases.

    Example:
        >>> with _cases.drawing(7):
        ...     n = int(_cases.draw("00.example").integers(-99, 100))
        >>> steps = [{"value": 2 * x} for x in (0, 3, -2, n)]
        >>> print(judged("00.example", steps, 7))
        Right: it doubles every number tried.
        >>> judged("00.example", [{"value": 0}], 7) is None
        True
    """
    if exercise not in _core._CHECKERS or not isinstance(steps, list):
        return None
    with _cases.drawing(seed), replaying(steps):
        try:
            return _core._judge(exercise, None, hint=1)
        except (Unreplayable, _cases.NotJudgedHere):
            return None

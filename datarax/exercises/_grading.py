"""The two halves of judging a submission: `harvest` in its kernel, `judged` in the grader.

`harvest` runs, in the student's kernel after the notebook, each exercise's checker on
the student's function while `datarax.exercises._answers` records what the function
returned, and writes the record as JSON. `judged` runs the same checker in the grader's
own process on that record: the checker computes its right answers there, and the
kernel supplies nothing but the values the student's function returned. What the
kernel's own checks printed or claimed plays no part.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import jax

from datarax.exercises import _core
from datarax.exercises._answers import Unreplayable, recording, replaying
from datarax.exercises._feedback import Feedback


def harvest(functions: dict[str, str], namespace: dict[str, Any], out: str) -> None:
    """Records, for each exercise, what the function named for it in `namespace` returned
    to its checker; writes ``{"devices": count, "answers": {exercise: steps}}`` to `out`."""
    answers = {}
    for exercise, name in functions.items():
        jax.clear_caches()  # a jitted answer traces again, so the watch sees what it runs
        with recording() as steps, contextlib.suppress(Exception):
            _core._CHECKERS[exercise].checker(namespace.get(name))
        answers[exercise] = steps
    record = {"devices": len(jax.devices()), "answers": answers}
    Path(out).write_text(json.dumps(record), encoding="utf-8")


def judged(exercise: str, steps: Any) -> Feedback | None:
    """The checker's verdict on the recorded `steps`, with the idea as hint; None when the
    record does not answer the checks the checker makes.

    Example:
        >>> print(judged("00.example", [{"value": 0}, {"value": 6}, {"value": -4}]))
        Right: it doubles every number tried.
        >>> judged("00.example", [{"value": 0}]) is None
        True
    """
    if exercise not in _core._CHECKERS or not isinstance(steps, list):
        return None
    with replaying(steps):
        try:
            return _core._judge(exercise, None, hint=1)
        except Unreplayable:
            return None

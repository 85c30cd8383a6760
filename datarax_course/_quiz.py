"""A quiz's answer, shown only once the reader has given theirs.

A quiz in the notebooks ends with a cell in which the reader writes their answer
(``...`` until they do) and a cell that calls `reveal` with what the library computes.
Until every blank is filled in, `reveal` shows nothing of the library's values; then it
shows both side by side. The cell's code computes the answer, so the computation itself
is in sight, but what it prints is not, which is the point of the quiz.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from datarax_course._feedback import Rejected
from datarax_course._values import plain, shown


def _agree(mine: Any, actual: Any) -> bool:
    """Whether two plain values agree (numbers to float rounding, arrays elementwise)."""
    if isinstance(mine, (list, tuple)) and isinstance(actual, (list, tuple)):
        return len(mine) == len(actual) and all(map(_agree, mine, actual))
    if isinstance(mine, (int, float, np.ndarray)) and isinstance(actual, (int, float, np.ndarray)):
        return bool(np.shape(mine) == np.shape(actual) and np.allclose(mine, actual))
    return type(mine) is type(actual) and mine == actual


def reveal(answer: Mapping[str, Any], actual: Mapping[str, Any]) -> bool:
    """Prints `actual` beside the reader's `answer`, once every answer is filled in.

    Args:
        answer: the reader's answers by name, ``...`` for one not given yet.
        actual: the same names, with what the library computes.

    Returns:
        Whether the reader has answered every question (not whether rightly).

    Example:
        >>> reveal({"rows on host 7": ...}, {"rows on host 7": (875, 1000)})
        Answer the quiz first: replace every ... in your answer (1 left), then run this cell.
        False
        >>> reveal({"rows on host 7": (875, 1000)}, {"rows on host 7": (875, 1000)})
        rows on host 7: you said (875, 1000); the library says (875, 1000): agreed
        True
    """
    missing = sorted(set(actual) - set(answer))
    blank = [name for name, value in answer.items() if value is Ellipsis]
    if missing or blank:
        left = len(blank) + len(missing)
        named = f" (add {', '.join(missing)})" if missing else ""
        print(
            f"Answer the quiz first: replace every ... in your answer ({left} left){named}, "
            "then run this cell."
        )
        return False
    for name, value in actual.items():
        truth = plain(value, name, "a value")
        try:
            mine = plain(answer[name], f"your {name}", "a value")
        except Rejected as rejected:
            print(f"{name}: {rejected.feedback.message}; the library says {shown(truth)}")
            continue
        verdict = "agreed" if _agree(mine, truth) else "they differ"
        print(f"{name}: you said {shown(mine)}; the library says {shown(truth)}: {verdict}")
    return True

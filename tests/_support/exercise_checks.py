"""What the tutorials' checkers must say of an answer: right, wrong with its mistake
named, or not answered yet."""

from __future__ import annotations

from typing import Any

from datarax_course import check


def judges_right_wrong_and_placeholder(name: str, solution: Any, mistake: Any, named: str) -> None:
    """Checker `name` accepts `solution`, refuses `mistake` with `named` in its message,
    and calls a function that returns ``...`` not answered yet, with a hint."""
    assert check(name, solution, quiet=True)
    told = check(name, mistake, quiet=True)
    assert not told and named in told.message, told.message
    waiting = check(name, lambda *args: ..., quiet=True)
    assert not waiting and waiting.message.startswith("not answered yet. Hint:")

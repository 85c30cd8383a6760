"""What a checker says (`Feedback`), and the signals a checker raises on the way.

The signals tell `check` who is answerable for a result: `NotAnswered` (the
placeholder is still there), `MissingReturn` (the reader's function returned None),
`AnswerRaised` (the reader's function raised), `Forbidden` (it called a function the
exercise asks it to do without) and `Rejected` (the answer has the wrong form). Any
other exception inside a checker is the checker's own bug.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Feedback:
    """Whether an answer is right, and what to tell the reader.

    ``bool(feedback)`` is whether the answer is right, so a solution cell can
    ``assert check(...)``. `checker_bug` marks feedback about an error in the checker's
    own code, which says nothing about the answer.

    Example:
        >>> print(Feedback(False, "the mask is missing."))
        Not yet: the mask is missing.
    """

    ok: bool
    message: str
    checker_bug: bool = False

    def __bool__(self) -> bool:
        return self.ok

    def __str__(self) -> str:
        if self.checker_bug:
            return "Checker error: " + self.message
        return ("Right: " if self.ok else "Not yet: ") + self.message

    def _ipython_display_(self) -> None:
        """Shows nothing: `check` has printed the feedback already."""


def right(message: str) -> Feedback:
    """The answer is right; `message` says what it got right.

    Example:
        >>> right("all 8 cases agree.").ok
        True
    """
    return Feedback(True, message)


def wrong(message: str) -> Feedback:
    """The answer is not right yet; `message` says what is wrong.

    Example:
        >>> wrong("the mask is missing.").ok
        False
    """
    return Feedback(False, message)


class NotAnswered(Exception):  # a signal that the placeholder is still there, not an error
    """Raised inside a checker when the answer is still the placeholder."""


class MissingReturn(Exception):  # a signal about the answer, not an error
    """Raised inside a checker when the reader's function returned None."""


class AnswerRaised(Exception):
    """Raised inside a checker when the reader's function raised `error`."""

    def __init__(self, error: BaseException) -> None:
        try:
            said = str(error)
        except Exception:  # an exception whose own message fails
            said = "(its message could not be read)"
        said = said if len(said) <= 500 else said[:500] + "..."
        super().__init__(f"{type(error).__name__}: {said}")
        self.error = error


class Forbidden(Exception):
    """Raised by a library function that the exercise asks the reader to do without."""

    def __init__(self, label: str = "") -> None:
        super().__init__(label)
        self.label = label


class Rejected(Exception):  # carries feedback about the answer's form, not an error
    """Raised inside a checker when the answer cannot be read; carries the feedback."""

    def __init__(self, feedback: Feedback) -> None:
        super().__init__(feedback.message)
        self.feedback = feedback

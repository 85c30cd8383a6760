"""The course's contract with the grader: everything ``datarax-grade`` may use of the course.

The grader (``datarax-grade``, the ``datarax-grader`` distribution in the repository's
``grader/`` folder) depends on this module alone, never on the course's private
modules, and on a version of the course's distribution (``datarax-sharding``) of the
same minor release as itself, so that a course that no longer offers what the grader
calls is refused by pip, not found out in a student's kernel while grading. Who calls
what, and in which process:

In the grader's own process, once, before the first submission:

- `exercises`: the names of the exercises a notebook can hold (``"07.epoch_ms"``), to
  match against a notebook's number and its ``check("NN.name", ...)`` calls;
- `keys_file`: the answer keys' file, which the grader leaves out of the library a
  graded kernel imports (a fresh copy per submission), so no kernel can import a key;
- `load_keys`: gives the checkers of the grader's process the answer keys.

In the student's kernel, after every cell of the notebook has run: the grader's last
cell imports `harvest` from this module (the kernel's copy of it) and calls it with the
exercises' function names, the notebook's namespace, the secret seed of the cases and
the file to write. It runs each exercise's checker on the student's function and
records only what the function returned, case by case.

Back in the grader's process, for each exercise: `judged` runs the same checker on the
same cases (the same seed) with the answer keys loaded, on the recorded values alone,
and returns its verdict, a `Feedback`. Nothing else the kernel printed or wrote counts.

Example:
    The whole round trip, in one process (the grader's two halves in one):

    >>> import json, tempfile
    >>> record = Path(tempfile.mkdtemp()) / "answers.json"
    >>> def double(n):
    ...     return 2 * n
    >>> harvest({"00.example": "double"}, {"double": double}, 7, record)
    >>> answers = json.loads(record.read_text())["answers"]
    >>> print(judged("00.example", answers["00.example"], 7))
    Right: it doubles every number tried.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from datarax_course import _core, _grading
from datarax_course._feedback import Feedback

__all__ = ["Feedback", "exercises", "harvest", "judged", "keys_file", "load_keys"]

# The answer keys' module: imported by `load_keys` alone, and only where it exists (the
# grader's process, a reader's own installation), never when this module is imported,
# since a graded kernel imports this module from a copy of the course without it.
_KEYS_MODULE = "datarax_course._keys"


def exercises() -> list[str]:
    """The name of every exercise a notebook can hold (``"NN.name"``, NN its notebook),
    sorted; the worked example of `datarax_course.check`'s documentation, notebook 00's,
    which no notebook holds, left out. Called in the grader's process.

    Example:
        >>> names = exercises()
        >>> "07.epoch_ms" in names, "00.example" in names, names == sorted(names)
        (True, False, True)
    """
    return sorted(name for name in _core._CHECKERS if not name.startswith("00."))


def harvest(
    functions: Mapping[str, str],
    namespace: Mapping[str, Any],
    seed: int,
    out: str | os.PathLike[str],
) -> None:
    """Records what the student's functions return on the secret cases; called in the
    student's kernel, after the notebook, by the grader's last cell.

    For each ``exercise: name`` of `functions`, runs the exercise's checker on
    ``namespace[name]`` (the notebook's ``globals()``; a missing name counts as not
    answered) on the cases drawn from `seed`, and records each value the function
    returned. Writes ``{"devices": the kernel's device count, "answers": {exercise:
    the recorded steps}}`` to `out` as JSON; the checkers' verdicts in the kernel play
    no part. See the module's example.
    """
    _grading.harvest(dict(functions), namespace, seed, os.fspath(out))


def judged(exercise: str, steps: Any, seed: int) -> Feedback | None:
    """The checker's verdict on what `harvest` recorded for `exercise` (`steps`, as read
    back from its JSON), on the cases drawn from `seed`, with the idea as hint; None
    when the record does not answer the checker's cases (cut short, or forged). Called
    in the grader's process, after `load_keys`.

    Example:
        >>> judged("00.example", [{"value": 0}], 7) is None
        True
        >>> judged("99.none", [], 7) is None
        True
    """
    return _grading.judged(exercise, steps, seed)


def keys_file() -> Path:
    """The file of the answer keys, a module of the course that the grader leaves out of
    the library a graded kernel imports. Called in the grader's process (a kernel's copy
    of the course has no such file).

    Example:
        >>> import datarax_course
        >>> keys_file().parent == Path(datarax_course.__file__).parent
        True
        >>> keys_file().suffix
        '.py'
    """
    spec = importlib.util.find_spec(_KEYS_MODULE)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no answer keys here ({_KEYS_MODULE})", name=_KEYS_MODULE)
    return Path(spec.origin)


def load_keys() -> None:
    """Gives the checkers in this process the answer keys, so that `judged` computes the
    right answers of the secret cases. Called once, in the grader's process; raises
    ImportError where the keys are not installed (a graded kernel)."""
    keys = importlib.import_module(_KEYS_MODULE)
    keys.load()

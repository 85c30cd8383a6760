"""Every checker is honest about who is answerable: a missing `return` is named as such,
answers are compared as values (an object whose `==` is always True gets nowhere), numpy
and JAX scalars count as numbers, junk answers are turned down within bounded time and
memory without a false "your function raised", functions an exercise asks to do without
are refused, and an error in a checker's own code is reported as the checker's bug.
"""

import contextlib
import json
import math
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import nbformat
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.sharding import RowLedger, pad_to_multiple, shard_bounds
from datarax_course import _answers, _cases, _core, _keys, check
from datarax_course._feedback import Feedback

ROOT = Path(__file__).parents[2]

NAMES = sorted(_core._CHECKERS)


class AlwaysEqual:
    """Equal to everything, hashable, a number, a sequence of anything."""

    def __eq__(self, other: object) -> bool:
        return True

    def __hash__(self) -> int:
        return 0

    def __float__(self) -> float:
        return 0.5

    def __int__(self) -> int:
        return 1

    def __len__(self) -> int:
        return 3

    def __iter__(self):
        return iter([AlwaysEqual(), AlwaysEqual(), AlwaysEqual()])


class EqualList(list):
    """A list whose `==` is always True: read as the plain list it holds."""

    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = None  # type: ignore[assignment]


def _deep(levels: int) -> list:
    nested: list = []
    for _ in range(levels):
        nested = [nested]
    return nested


def _looped() -> list:
    loop: list = []
    loop.append(loop)
    return loop


JUNK: dict[str, Callable[[], Any]] = {
    "str": lambda: "0.5",
    "bytes": lambda: b"\x00\x01",
    "dict": lambda: {"a": 1},
    "set": lambda: {1, 2},
    "list 10,000 deep": lambda: _deep(10_000),
    "list holding itself": _looped,
    "nan": lambda: float("nan"),
    "inf": lambda: float("inf"),
    "negative": lambda: -1,
    "huge int": lambda: 10**10_000,
    "object": object,
    "generator": lambda: (n for n in range(3)),
    "a million references to a million-long list": lambda: [[0] * 10**6] * 10**6,
    "10**12-long range": lambda: range(10**12),
    "10**20-long range": lambda: range(10**20),
    "10**10-element array view": lambda: np.broadcast_to(np.float32(0), (10**10,)),
    "complex": lambda: 1j,
    "ragged list": lambda: [[1], [1, 2]],
    "always-equal object": AlwaysEqual,
    "list with an always-equal ==": lambda: EqualList([AlwaysEqual()]),
    "a function": lambda: print,
}


def _honest_rejection(feedback: Feedback) -> None:
    assert not feedback, feedback
    assert not feedback.checker_bug, feedback
    assert "raised" not in feedback.message, feedback
    assert len(feedback.message) < 2000, feedback.message[:300]


@pytest.mark.parametrize("junk", sorted(JUNK))
@pytest.mark.parametrize("name", NAMES)
def test_junk_answers_are_turned_down_honestly(name: str, junk: str) -> None:
    value = JUNK[junk]()
    _honest_rejection(check(name, lambda *args, **kwargs: value, quiet=True))


@pytest.mark.parametrize("name", NAMES)
def test_a_function_without_return_is_asked_about_return(name: str) -> None:
    def forgot(*args: Any, **kwargs: Any) -> None:
        _ = args

    feedback = check(name, forgot, quiet=True)
    assert not feedback and "forget `return`" in feedback.message, feedback


@pytest.mark.parametrize("name", NAMES)
def test_the_placeholder_is_not_answered_yet_and_never_raises(name: str) -> None:
    for placeholder in (..., None, lambda *args: ...):
        feedback = check(name, placeholder, quiet=True)
        assert not feedback and feedback.message.startswith("not answered yet."), feedback


@pytest.mark.parametrize("name", NAMES)
def test_a_raising_function_is_the_readers_error(name: str) -> None:
    def raises(*args: Any) -> Any:
        return 1 / 0

    feedback = check(name, raises, quiet=True)
    assert not feedback and not feedback.checker_bug
    assert "your function raised ZeroDivisionError" in feedback.message, feedback


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


def test_an_exception_without_a_readable_message_is_still_the_readers() -> None:
    def raises(*args: Any) -> Any:
        raise Unprintable

    feedback = check("07.epoch_ms", raises, quiet=True)
    assert not feedback.checker_bug and "your function raised Unprintable" in feedback.message


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("value", [42, "host_fraction"], ids=["number", "str"])
def test_passing_a_value_instead_of_the_function_is_explained(name: str, value: Any) -> None:
    feedback = check(name, value, quiet=True)
    assert not feedback and "pass your function itself" in feedback.message, feedback


# Numbers: Python, numpy and JAX scalars, and 0-d arrays, all count. --------------------


def _notebook_solutions() -> dict[str, Callable[..., Any]]:
    """Exercise name -> the function its notebook's hidden solution cell defines."""
    namespace: dict[str, Any] = {"np": np, "math": math, "jax": jax, "jnp": jnp, "P": P}
    namespace["time"] = time
    namespace.update(NamedSharding=NamedSharding, pad_to_multiple=pad_to_multiple)
    namespace.update(shard_bounds=shard_bounds)
    solutions = {}
    for notebook in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb")):
        cells = nbformat.read(notebook, as_version=4).cells
        for number, cell in enumerate(cells[:-1]):
            name = re.match(r'check\("([\w.]+)"', cell.source)
            hidden = cells[number + 1]
            if name and hidden.source.startswith("# @title Solution"):
                defined = re.search(r"^def (\w+)\(", hidden.source, re.MULTILINE)
                assert defined, hidden.source
                exec(hidden.source, namespace)  # the notebook's own solution
                solutions[name.group(1)] = namespace[defined.group(1)]
    return solutions


SOLUTIONS = _notebook_solutions()
# Judged against a loop the checker times: tests/course/test_real_exercises.py checks it
# on a stand-in clock, so that no test here depends on how busy the machine is, and holds
# on the real clock that a loop timed instead of predicted is refused (the source and the
# step a prediction is handed give two batches and two steps).
TIMED = {"07.predicted_epoch"}
UNTIMED = sorted(set(SOLUTIONS) - TIMED)
AS_SCALARS = {
    "numpy scalars": (np.int64, np.float64, np.bool_),
    "jax scalars": (jnp.int32, jnp.float32, jnp.asarray),
    "0-d arrays": (np.asarray, jnp.asarray, jnp.asarray),
}


def _scalars(value: Any, kinds: tuple[Callable, Callable, Callable]) -> Any:
    """`value` with every Python number (dict keys aside) made a numpy or JAX scalar."""
    whole, real, truth = kinds
    if isinstance(value, bool):
        return truth(value)
    if isinstance(value, int):
        return whole(value)
    if isinstance(value, float):
        return real(value)
    if isinstance(value, (list, tuple)):
        return type(value)(_scalars(item, kinds) for item in value)
    if isinstance(value, dict):
        return {key: _scalars(item, kinds) for key, item in value.items()}
    return value


def test_every_exercise_has_a_solution_to_try() -> None:
    assert sorted(SOLUTIONS) == [name for name in NAMES if name != "00.example"]


@pytest.mark.parametrize("kind", sorted(AS_SCALARS))
@pytest.mark.parametrize("name", UNTIMED)
def test_the_notebooks_solutions_pass_with_numpy_and_jax_scalars(name: str, kind: str) -> None:
    solution = SOLUTIONS[name]

    def answer(*args: Any) -> Any:
        return _scalars(solution(*args), AS_SCALARS[kind])

    assert check(name, answer, quiet=True)


def test_a_fraction_that_is_not_a_number_is_turned_down() -> None:
    feedback = check("01.host_fraction", lambda *args: np.array([0.5]), quiet=True)
    assert not feedback and "should be a number" in feedback.message


# "Without X": the function the prompt rules out is refused, and restored afterwards. ---


def test_memory_without_placing_anything() -> None:
    def memory(shape, dtype, mesh, spec):
        per_device = math.prod(NamedSharding(mesh, spec).shard_shape(shape)) * dtype.itemsize
        return per_device, 1, per_device * mesh.size

    feedback = check("02.memory", memory, quiet=True)
    assert not feedback and "shard_shape" in feedback.message and "without" in feedback.message
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    assert NamedSharding(mesh, P("data")).shard_shape((8 * mesh.size,)) == (8,)


def test_devices_holding_without_devices_indices_map() -> None:
    def devices_holding(mesh, spec, shape, index):
        placed = NamedSharding(mesh, spec).devices_indices_map(shape)
        return {d.id for d, where in placed.items() if all(w.start is None for w in where)}

    feedback = check("02.devices_holding", devices_holding, quiet=True)
    assert not feedback and "devices_indices_map" in feedback.message


def test_host_bounds_without_shard_bounds_however_it_is_imported() -> None:
    from datarax.sharding import shard_bounds as renamed

    feedback = check("04.host_bounds", lambda n, i, c, d: renamed(n, i, c, d), quiet=True)
    assert not feedback and "shard_bounds" in feedback.message, feedback
    assert shard_bounds(10, 1, 3, drop_remainder=False) == (4, 7)


def test_host_rows_without_row_ledger() -> None:
    def host_rows(sharding, num_rows, host_of, host):
        return RowLedger(sharding, num_rows, host_of=host_of).rows_of_host(host)

    feedback = check("08.host_rows", host_rows, quiet=True)
    assert not feedback and "RowLedger" in feedback.message, feedback
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    assert RowLedger(NamedSharding(mesh, P("data")), 8).row_count(0) == 8


# Hints; the checker's own bugs; copies of its answer; recorded answers. ---------------


def test_the_hint_gives_the_idea_first_then_the_method(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_core, "_MISSES", {})
    first = check("00.example", lambda n: n + 1, quiet=True)
    assert "Hint: a number and its double." in first.message and "Method" not in first.message
    second = check("00.example", lambda n: n + 1, quiet=True)
    assert "Method: return n * 2." in second.message
    monkeypatch.setattr(_core, "_MISSES", {})
    asked = check("00.example", lambda n: n + 1, quiet=True, hint=2)
    assert "Method: return n * 2." in asked.message


def test_an_error_in_the_checker_is_reported_as_the_checkers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(answer: Any) -> Feedback:
        _core.call(answer, 1)
        return {}["missing"]

    monkeypatch.setitem(_core._CHECKERS, "00.broken", _core.Exercise(broken, "i", "m"))
    feedback = check("00.broken", lambda n: n, quiet=True)
    assert not feedback and feedback.checker_bug
    assert "bug in the checker" in feedback.message and "KeyError" in feedback.message
    assert str(feedback).startswith("Checker error:")
    assert "your function raised" not in feedback.message


@pytest.mark.parametrize(
    "answer",
    [
        lambda s, i, n, p: (s + i) * n if not p else i + s + (n - 1) * max(s, i),
        lambda s, i, n, p: s * n,
        lambda s, i, n, p: (x for x in ()),
        lambda s, i, n, p: None,
        lambda s, i, n, p: 1 / 0,
        ...,
    ],
    ids=["right", "wrong", "generator", "none", "raises", "placeholder"],
)
def test_recorded_answers_replay_to_the_same_verdict(
    answer: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the grader does: record in the student's kernel, which has no answer keys,
    then judge the record, read as JSON, with the keys; the verdict is the notebook's."""
    here_in_notebook = _core._judge("07.epoch_ms", answer, hint=1)
    with _answers.recording() as steps, contextlib.suppress(Exception):
        _core._CHECKERS["07.epoch_ms"].checker(answer)
    record = json.loads(json.dumps(steps))
    monkeypatch.setattr(_cases, "_KEYS", dict(_keys.KEYS))
    with _answers.replaying(record):
        judged = _core._judge("07.epoch_ms", None, hint=1)
    assert (judged.ok, judged.message) == (here_in_notebook.ok, here_in_notebook.message)


@pytest.mark.parametrize("name", UNTIMED)
def test_every_notebooks_solution_is_right_when_replayed(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every checker's values survive the trip as JSON: arrays with their sharding, a
    jitted gradient, an expected ValueError; recorded without the keys, judged with them."""
    with _answers.recording() as steps, contextlib.suppress(_cases.NotJudgedHere):
        _core._CHECKERS[name].checker(SOLUTIONS[name])
    monkeypatch.setattr(_cases, "_KEYS", dict(_keys.KEYS))
    with _answers.replaying(json.loads(json.dumps(steps))):
        replayed = _core._judge(name, None, hint=1)
    assert replayed, replayed


def test_a_record_cut_short_or_forged_cannot_pass() -> None:
    right_steps = [{"value": 420.0}, {"value": 255.0}]  # the first case's two answers
    with _answers.replaying(right_steps), pytest.raises(_answers.Unreplayable):
        _core._judge("07.epoch_ms", None, hint=1)
    with (
        _answers.replaying([{"value": {"eval": "print(1)"}}]),
        pytest.raises(_answers.Unreplayable),
    ):
        _core._judge("07.epoch_ms", None, hint=1)

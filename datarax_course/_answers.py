"""What the reader's functions returned, recorded where they ran and replayed elsewhere.

Every checker reaches the reader's code through `outcome` (``call`` and `observed` go
through it). Normally `outcome` just runs it. While `recording` is on, the first
`outcome` of each step also writes down what came back: the value, read as plain data
(`encode`: numbers, strings, containers, numpy arrays, JAX arrays with their mesh and
spec; any other object as its type's name), or the signal it raised (not answered,
missing return, raised, rejected). While `replaying` is on, `outcome` runs nothing and
hands back the next recorded step instead (`decode`), so the same checker can judge, in
another process, the values that the reader's code returned in a kernel; when the
recorded steps run out, it raises `Unreplayable`.

The record is JSON: it can be read without running anything it holds.
"""

from __future__ import annotations

import builtins
import contextlib
import re
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec

from datarax_course._feedback import AnswerRaised, MissingReturn, NotAnswered, Rejected, wrong
from datarax_course._values import _Reader

_Result = TypeVar("_Result")
_MESSAGE_LIMIT = 500  # characters of a recorded message kept


class Unreplayable(Exception):
    """The recorded steps ran out, or one could not be read: the checks did not run in
    the kernel as they do in the grader."""


class _State:
    recording: list[Any] | None = None
    replaying: Iterator[Any] | None = None
    depth = 0  # outcomes nested inside a recorded one run as they are


@contextlib.contextmanager
def recording() -> Iterator[list[Any]]:
    """Records every outcome in the list it yields (the kernel's side)."""
    saved, _State.recording = _State.recording, []
    try:
        yield _State.recording
    finally:
        _State.recording = saved


def recording_now() -> bool:
    """Whether the reader's results are being recorded (in a kernel being graded)."""
    return _State.recording is not None


@contextlib.contextmanager
def replaying(steps: list[Any]) -> Iterator[None]:
    """Answers every outcome from `steps`, in order (the grader's side)."""
    saved, _State.replaying = _State.replaying, iter(steps)
    try:
        yield
    finally:
        _State.replaying = saved


def outcome(run: Callable[[], _Result]) -> _Result:
    """`run()`, recorded or replayed as the module's state says (see the module's doc)."""
    if _State.replaying is not None:
        step = next(_State.replaying, None)
        if step is None:
            raise Unreplayable("the kernel recorded fewer results than the checks asked for")
        return _replayed(step)
    if _State.recording is None or _State.depth:
        return run()
    _State.depth += 1
    try:
        value = run()
        step = {"value": encode(value)}
    except (NotAnswered, MissingReturn, AnswerRaised, Rejected) as signal:
        _State.recording.append(_signal(signal))
        raise
    finally:
        _State.depth -= 1
    _State.recording.append(step)
    return _replayed(step)  # the kernel's checker goes on with what the grader will see


def observed(function: Callable[..., _Result], *args: Any) -> _Result:
    """``function(*args)`` as one recorded step, for a checker that runs the reader's
    function inside a JAX transformation (its value and gradient are what is recorded).

    Example:
        >>> observed(lambda n: n + 1, 1)
        2
    """
    return outcome(lambda: function(*args))


def _signal(signal: Exception) -> dict[str, Any]:
    if isinstance(signal, NotAnswered):
        return {"signal": "not answered"}
    if isinstance(signal, MissingReturn):
        return {"signal": "missing return"}
    if isinstance(signal, AnswerRaised):
        error = signal.error
        base = next(k for k in type(error).__mro__ if vars(builtins).get(k.__name__) is k)
        kind = {"type": type(error).__name__, "base": base.__name__}
        return {"signal": "raised", **kind, "text": _said(error)}
    assert isinstance(signal, Rejected)
    return {"signal": "rejected", "message": signal.feedback.message[:_MESSAGE_LIMIT]}


def _said(error: BaseException) -> str:
    try:
        return str(error)[:_MESSAGE_LIMIT]
    except Exception:  # an exception whose own message fails
        return "(its message could not be read)"


def _replayed(step: Any) -> Any:
    kind = step.get("signal") if isinstance(step, dict) else None
    if kind == "not answered":
        raise NotAnswered
    if kind == "missing return":
        raise MissingReturn
    try:
        if kind is None:
            return decode(step["value"])
        text = str(step["text" if kind == "raised" else "message"])[:_MESSAGE_LIMIT]
        raised = _raised(step["type"], step["base"], text) if kind == "raised" else None
    except Exception as problem:  # whatever the kernel wrote, it is only data to the grader
        raise Unreplayable(f"a recorded result could not be read: {problem!r:.200}") from None
    if raised is not None:
        raise AnswerRaised(raised)
    if kind == "rejected":
        raise Rejected(wrong(text))
    raise Unreplayable(f"a recorded result could not be read: {kind!r:.100}")


def _raised(name: Any, base: Any, text: str) -> Exception:
    """A stand-in for the reader's exception: its class's name, the built-in exception
    it derives from (so a checker can ask for a ValueError), and its message."""
    builtin = vars(builtins).get(str(base))
    if not (isinstance(builtin, type) and issubclass(builtin, Exception)):
        builtin = Exception
    try:
        return _named(name, builtin)(text)
    except Exception:  # a built-in exception that takes other arguments
        return _named(name, Exception)(text)


def _named(name: Any, base: type) -> type:
    """A stand-in class called `name` (an identifier), so messages name the reader's type."""
    text = str(name)
    clean = text if re.fullmatch(r"[A-Za-z_]\w{0,59}", text) else "object"
    return type(clean, (base,), {})


class _Opaque:
    def __init__(self, name: str) -> None:
        self.name = name


class _Placed:
    def __init__(self, data: np.ndarray, sharding: Any) -> None:
        self.data, self.sharding = data, sharding


class _Keeper(_Reader):
    """`plain`'s reader, keeping a JAX array's placement and any other object's type name."""

    def array(self, value: Any, depth: int) -> Any:
        data = super().array(value, depth)
        if isinstance(value, jax.Array) and isinstance(data, np.ndarray):
            return _Placed(data, _sharding(value))
        return data

    def refuse(self, value: Any) -> Any:
        return _Opaque(type(value).__name__)


def _sharding(value: jax.Array) -> Any:
    sharding = value.sharding
    if not isinstance(sharding, NamedSharding):
        return None
    mesh = sharding.mesh
    return {
        "devices": np.vectorize(lambda d: d.id, otypes=[int])(mesh.devices).tolist(),
        "axes": list(mesh.axis_names),
        "types": [kind.name for kind in mesh.axis_types],
        "spec": [list(e) if isinstance(e, tuple) else e for e in sharding.spec],
    }


def encode(value: Any) -> Any:
    """`value` as JSON-ready data, read as `plain` reads it.

    Raises:
        Rejected: the value is nested too deep or holds too many elements.

    Example:
        >>> encode((1, [2.5, "a"]))
        {'tuple': [1, {'list': [2.5, 'a']}]}
        >>> decode(encode({"n": np.int32(3)}))
        {'n': 3}
    """
    return _tagged(_Keeper("your function's result", "a value").read(value, 0))


def _tagged(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.ndarray):
        return {
            "array": value.dtype.str,
            "shape": list(value.shape),
            "data": value.ravel().tolist(),
        }
    if isinstance(value, _Placed):
        return {"jax": _tagged(value.data), "sharding": value.sharding}
    if isinstance(value, _Opaque):
        return {"object": value.name}
    if isinstance(value, dict):
        return {"dict": [[_tagged(k), _tagged(v)] for k, v in value.items()]}
    kind = {list: "list", tuple: "tuple", set: "set"}[type(value)]
    return {kind: [_tagged(item) for item in value]}


def decode(data: Any) -> Any:
    """The value `encode` wrote down: built-in containers, numpy and JAX arrays, and for
    any other object a stand-in instance of a class of the same name."""
    if data is None or isinstance(data, (bool, int, float, str)):
        return data
    if not isinstance(data, dict) or len(data) not in (1, 2, 3):
        raise ValueError(f"not a recorded value: {type(data).__name__}")
    if "array" in data:
        flat = np.array(data["data"], dtype=np.dtype(data["array"]))
        if np.dtype(data["array"]).kind not in "biuf":
            raise ValueError("a recorded array of another kind than numbers")
        return flat.reshape([int(n) for n in data["shape"]])
    if "jax" in data:
        return _placed(decode(data["jax"]), data["sharding"])
    if "object" in data:
        return _named(data["object"], object)()
    if "dict" in data:
        return {decode(k): decode(v) for k, v in data["dict"]}
    (kind, items), *_ = data.items()
    made = {"list": list, "tuple": tuple, "set": set}[kind]
    return made(decode(item) for item in items)


def _placed(data: np.ndarray, sharding: Any) -> jax.Array:
    if sharding is None:
        return jax.numpy.asarray(data)
    by_id = {device.id: device for device in jax.devices()}
    ids = np.array(sharding["devices"], dtype=int)
    devices = np.vectorize(lambda i: by_id[int(i)], otypes=[object])(ids)
    kinds = tuple(AxisType[name] for name in sharding["types"])
    mesh = Mesh(devices, tuple(sharding["axes"]), axis_types=kinds)
    spec = PartitionSpec(*(tuple(e) if isinstance(e, list) else e for e in sharding["spec"]))
    return jax.device_put(data, NamedSharding(mesh, spec))

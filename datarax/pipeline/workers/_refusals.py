"""Why a pipeline's source or stage cannot reach its worker processes, said so that the
user knows what to change.

Two answers. A part that holds or reads a device, sharding, mesh, jax.Array or sharder
(the `Pipeline` docstring's own ``lambda b: sharder.shard(b, sharding)`` among them) is
refused with the way to place batches that works with workers: ``sharding=`` on the
pipeline (device stages run on the placed batch), or ``prefetch_to_device``. Anything
else is refused naming the innermost part that cannot be pickled, with the way to make
it picklable: a top-level function or class in a module.

What a function reads is looked up in its closure and in its module's globals, only to
word this error: nothing is decided by it.
"""

from __future__ import annotations

import functools
import pickle
import types
from typing import Any

import jax

from datarax.errors import NotPicklableError
from datarax.sharding._base import SharderModule

_DEVICE_KINDS = (jax.Device, jax.sharding.Sharding, jax.sharding.Mesh, jax.Array)
_PLACING_KINDS = (*_DEVICE_KINDS, SharderModule)
_SEARCH_DEPTH = 4  # how deep into a part `_culprit` looks for what cannot be pickled
_PLACE_INSTEAD = (
    "Pass sharding= to the Pipeline instead: it places each batch after the host stages, "
    "and device_stages run on the placed batch; or place with "
    "prefetch_to_device(..., sharding=...), or use workers=0."
)


def refusal(part: str, what: object, why: str) -> NotPicklableError:
    """The refusal of `part` (`what`), which `why` says cannot reach a worker."""
    placing = _placing(what)
    if placing:
        return _places(part, placing)
    return NotPicklableError(
        f"workers= runs the source and host stages in other processes, which receive them "
        f"pickled, but {part} ({type(what).__name__} {what!r:.60}) {why}. Define it as a "
        "top-level function or class in a module (a .py file) you import, or use workers=0 "
        "to run it in this process.",
        part=part,
    )


def not_pickled(part: str, what: object, error: Exception) -> NotPicklableError:
    """The refusal of `part`, which pickle refused with `error`, naming what inside it
    cannot be pickled.

    Example:
        >>> sharding = jax.sharding.SingleDeviceSharding(jax.devices()[0])
        >>> error = not_pickled("stages[0]", lambda b: jax.device_put(b, sharding), TypeError())
        >>> str(error).split(",")[0]
        'stages[0] reads sharding (SingleDeviceSharding)'
    """
    path, culprit = _culprit(what, part)
    if isinstance(culprit, _DEVICE_KINDS):
        return NotPicklableError(
            f"{path} is a {type(culprit).__name__}, which cannot reach a pipeline's worker "
            "processes: devices, shardings and jax.Arrays belong to this process. "
            + _PLACE_INSTEAD,
            part=part,
        )
    placing = _placing(culprit)
    if placing:
        return _places(path, placing, part)
    inner = f" ({path} is a {type(culprit).__name__})" if path != part else ""
    return refusal(part, what, f"cannot be pickled{inner}: {error}")


def _places(path: str, placing: list[str], part: str | None = None) -> NotPicklableError:
    named = " and ".join([", ".join(placing[:-1]), placing[-1]] if placing[1:] else placing)
    return NotPicklableError(
        f"{path} reads {named}, which belong to this process's devices: a pipeline's "
        "worker processes run the host stages on CPU and cannot place batches on them. "
        + _PLACE_INSTEAD,
        part=part or path,
    )


def _inside(value: Any) -> list[tuple[str, Any]]:
    """What `value` holds, each with the path a user would write to reach it."""
    if isinstance(value, functools.partial):
        return [
            (".func", value.func),
            *((f".args[{i}]", arg) for i, arg in enumerate(value.args)),
            *((f".keywords[{k!r}]", arg) for k, arg in value.keywords.items()),
        ]
    if isinstance(value, dict):
        return [(f"[{key!r}]", item) for key, item in value.items()]
    if isinstance(value, (list, tuple)):
        return [(f"[{i}]", item) for i, item in enumerate(value)]
    return [(f".{name}", item) for name, item in getattr(value, "__dict__", {}).items()]


def _culprit(value: Any, path: str, depth: int = _SEARCH_DEPTH) -> tuple[str, Any]:
    """The innermost part of `value` that cannot be pickled, and its path."""
    if depth:
        for step, item in _inside(value):
            try:
                pickle.dumps(item)
            except Exception:  # pickle raises several types: any means this part
                return _culprit(item, path + step, depth - 1)
    return path, value


def _reads(function: types.FunctionType) -> list[tuple[str, Any]]:
    """The names `function` reads from its closure and its module's globals, with their
    values (those of the functions defined inside it included)."""
    found = []
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (), strict=True):
        try:
            found.append((name, cell.cell_contents))
        except ValueError:  # a cell not filled yet
            continue
    names: set[str] = set()
    codes = [function.__code__]
    while codes:
        code = codes.pop()
        names.update(code.co_names)
        codes += [const for const in code.co_consts if isinstance(const, types.CodeType)]
    found += [
        (name, function.__globals__[name]) for name in sorted(names & function.__globals__.keys())
    ]
    return found


def _placing(what: object) -> list[str]:
    """What a function `what` reads that places batches on devices, each as ``name
    (Kind)``; empty for anything else."""
    if isinstance(what, functools.partial):
        what = what.func
    if not isinstance(what, types.FunctionType):
        return []
    return [
        f"{name} ({type(value).__name__})"
        for name, value in _reads(what)
        if isinstance(value, _PLACING_KINDS)
    ]

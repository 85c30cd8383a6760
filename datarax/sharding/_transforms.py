"""The jitted ``shard_map`` behind `SharderModule.parallel_transform`, cached safely.

A transform is compiled once per (function, mesh, specs) and reused, but the cache
never keeps a function alive: it is keyed weakly on the function (or on the object
a bound method belongs to), so a closure the caller drops is freed with its compiled
transform. An ``nnx.Module``, or a method of one, is split into its graph and its
state, and the state is passed in on every call, so a module whose parameters changed
gives the new result. A function that reaches a module through its closure, its
defaults, the globals it names, a partial's arguments or its object's attributes is
traced again on every call, since a cached trace would hold the module's old
parameters.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import inspect
import types
import weakref
from collections.abc import Callable
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, PartitionSpec

_MODULE_CACHE_SIZE = 64
_by_owner: weakref.WeakKeyDictionary[Any, dict[tuple[Any, ...], Callable[[Any], Any]]] = (
    weakref.WeakKeyDictionary()
)
_by_graph: collections.OrderedDict[tuple[Any, ...], Callable[..., Any]] = collections.OrderedDict()


def _compile(body: Callable[..., Any], mesh: Mesh, in_specs: tuple[Any, ...], out: Any) -> Any:
    return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_specs, out_specs=out))


def _module_transform(
    module: nnx.Module,
    method: Callable[..., Any] | None,
    mesh: Mesh,
    in_spec: PartitionSpec,
    out_spec: PartitionSpec,
) -> Callable[[Any], Any]:
    graphdef, state = nnx.split(module)
    key = (graphdef, method, mesh, in_spec, out_spec)
    compiled = _by_graph.pop(key, None)
    if compiled is None:

        def body(module_state: Any, block: Any) -> Any:
            merged = nnx.merge(graphdef, module_state)
            return (merged if method is None else types.MethodType(method, merged))(block)

        compiled = _compile(body, mesh, (PartitionSpec(), in_spec), out_spec)
    _by_graph[key] = compiled
    while len(_by_graph) > _MODULE_CACHE_SIZE:
        _by_graph.popitem(last=False)
    return lambda placed: compiled(state, placed)


def _held(fn: Any) -> list[Any]:
    """What `fn` holds directly: a partial's function and arguments; a function's
    closure, defaults and the globals it names; an object's attributes."""
    if isinstance(fn, functools.partial):
        return [fn.func, *fn.args, *fn.keywords.values()]
    if inspect.ismethod(fn):
        return [*_held(fn.__func__), *getattr(fn.__self__, "__dict__", {}).values()]
    if not inspect.isfunction(fn):
        return list(getattr(fn, "__dict__", {}).values())
    held = [*(fn.__defaults__ or ())]
    held += [fn.__globals__[name] for name in fn.__code__.co_names if name in fn.__globals__]
    for cell in fn.__closure__ or ():
        with contextlib.suppress(ValueError):  # an empty cell: a name not bound yet
            held.append(cell.cell_contents)
    return held


def per_device_transform(
    fn: Callable[[Any], Any], mesh: Mesh, in_spec: PartitionSpec, out_spec: PartitionSpec
) -> Callable[[Any], Any]:
    """A jitted function that runs `fn` on every device's block of its argument."""
    if isinstance(fn, nnx.Module):
        return _module_transform(fn, None, mesh, in_spec, out_spec)
    owner, method = (fn.__self__, fn.__func__) if inspect.ismethod(fn) else (fn, None)
    if isinstance(owner, nnx.Module):
        return _module_transform(owner, method, mesh, in_spec, out_spec)
    if any(isinstance(item, nnx.Module) for item in _held(fn)):
        return _compile(fn, mesh, (in_spec,), out_spec)
    key = (method, mesh, in_spec, out_spec)
    try:
        per_owner = _by_owner.setdefault(owner, {})
        cached = per_owner.get(key)
    except TypeError:  # not weakly referenceable, or unhashable: compile every time
        return _compile(fn, mesh, (in_spec,), out_spec)
    if cached is None:
        reference = weakref.ref(owner)

        def body(block: Any) -> Any:  # holds the function weakly; it is alive when traced
            target: Any = reference()
            return (target if method is None else types.MethodType(method, target))(block)

        cached = per_owner[key] = _compile(body, mesh, (in_spec,), out_spec)
    return cached

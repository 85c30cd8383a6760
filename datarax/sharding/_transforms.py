"""The jitted ``shard_map`` behind `SharderModule.parallel_transform`.

The rule for reuse, stated once: a compiled transform is reused only when `fn` is an
``nnx.Module`` or a method of one, and then the module's state is an argument of every
call (as with ``nnx.jit``), so new parameters give new results; any other callable is
traced again on every call, so whatever it reads (a module through a list, a dict, a
global, a closure or a partial, or any other value) is read afresh. Nothing is decided
by looking inside `fn`.

Not ``nnx.jit(nnx.shard_map(...))``, which flax 0.11.2 (the floor) can do: it costs
40-70% more per call (flax 0.11.2 and 0.12.8, measured on 8 CPU devices), writes the
module's changed state back (here such changes are dropped) and refuses a state
changed differently on each device (a BatchNorm in training, say), which runs here.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any

import jax
from flax import nnx
from jax.sharding import Mesh, PartitionSpec

from datarax._caches import BoundedCache

_by_graph: BoundedCache[Callable[..., Any]] = BoundedCache("compiled module transforms", 64)


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
    compiled = _by_graph.get(key)
    if compiled is None:

        def body(module_state: Any, block: Any) -> Any:
            merged = nnx.merge(graphdef, module_state)
            return (merged if method is None else types.MethodType(method, merged))(block)

        compiled = _compile(body, mesh, (PartitionSpec(), in_spec), out_spec)
        _by_graph.put(key, compiled)
    return lambda placed: compiled(state, placed)


def per_device_transform(
    fn: Callable[[Any], Any], mesh: Mesh, in_spec: PartitionSpec, out_spec: PartitionSpec
) -> Callable[[Any], Any]:
    """A jitted function that runs `fn` on every device's block of its argument."""
    if isinstance(fn, nnx.Module):
        return _module_transform(fn, None, mesh, in_spec, out_spec)
    if inspect.ismethod(fn) and isinstance(fn.__self__, nnx.Module):
        return _module_transform(fn.__self__, fn.__func__, mesh, in_spec, out_spec)
    return _compile(fn, mesh, (in_spec,), out_spec)

"""`SharderModule`: the base of every sharder, with logical axis names and shard_map."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from datarax.sharding._checks import check_spec_against_mesh
from datarax.sharding._transforms import per_device_transform

MeshAxes = str | tuple[str, ...] | None
AxisRules = Mapping[str, MeshAxes] | Sequence[tuple[str, MeshAxes]]


def _normalize_rules(axis_rules: AxisRules | None) -> tuple[tuple[str, MeshAxes], ...] | None:
    if axis_rules is None:
        return None
    items = axis_rules.items() if isinstance(axis_rules, Mapping) else axis_rules
    rules: list[tuple[str, MeshAxes]] = []
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)):
            raise TypeError(
                "axis_rules must map logical axis names to mesh axes, e.g. "
                f"{{'batch': 'data', 'embed': None}}; got the entry {item!r}."
            )
        logical, mesh_axes = item
        if isinstance(mesh_axes, list):
            mesh_axes = tuple(mesh_axes)
        rules.append((logical, mesh_axes))
    return tuple(rules)


class SharderModule(nnx.Module):
    """Base class of the sharders: logical axis names, shardings and shard_map.

    Sharding is deterministic, so `rngs` is accepted for a uniform constructor and
    otherwise unused.

    Args:
        axis_rules: optional logical-to-mesh axis rules, as a mapping or a sequence
            of pairs, e.g. ``{"batch": "data", "length": None}``. Without rules,
            logical names are used as mesh axis names unchanged.
        rngs: accepted and unused.

    Example:
        >>> sharder = ArraySharder(axis_rules={"batch": "data", "pixels": None})
        >>> sharder.get_partition_spec(("batch", "pixels")) == P("data", None)
        True
    """

    def __init__(self, *, axis_rules: AxisRules | None = None, rngs: nnx.Rngs | None = None):
        del rngs
        self.axis_rules = _normalize_rules(axis_rules)

    def get_partition_spec(self, logical_spec: Sequence[str | None]) -> PartitionSpec:
        """Translates logical axis names to a PartitionSpec of mesh axes.

        Raises:
            ValueError: a logical name has no rule (when rules were given).
        """
        if isinstance(logical_spec, str):
            logical_spec = (logical_spec,)
        if self.axis_rules is None:
            return PartitionSpec(*logical_spec)
        rules = dict(self.axis_rules)
        entries: list[MeshAxes] = []
        for name in logical_spec:
            if name is None:
                entries.append(None)
            elif name in rules:
                entries.append(rules[name])
            else:
                raise ValueError(
                    f"Logical axis {name!r} has no rule; the rules cover "
                    f"{sorted(rules)}. Add ({name!r}, <mesh axis or None>) to axis_rules."
                )
        return PartitionSpec(*entries)

    def get_named_sharding(self, mesh: Mesh, logical_spec: Sequence[str | None]) -> NamedSharding:
        """A NamedSharding on `mesh` for a spec written in logical axis names."""
        spec = self.get_partition_spec(logical_spec)
        check_spec_against_mesh(spec, dict(mesh.shape))
        return NamedSharding(mesh, spec)

    def shard(self, batch: Any, sharding: Sharding) -> Any:
        """Places `batch` on devices; each sharder defines what that means."""
        raise NotImplementedError(f"{type(self).__name__} does not implement shard().")

    def shard_with_logical_names(
        self, batch: Any, mesh: Mesh, logical_spec: Sequence[str | None]
    ) -> Any:
        """`shard` with a spec written in logical axis names (see `axis_rules`)."""
        return self.shard(batch, self.get_named_sharding(mesh, logical_spec))

    def parallel_transform(
        self,
        batch: Any,
        fn: Callable[[Any], Any],
        mesh: Mesh,
        in_spec: PartitionSpec,
        out_spec: PartitionSpec | None = None,
    ) -> Any:
        """Runs `fn` on every device's shard of `batch` with `jax.shard_map`.

        `batch` is first placed with ``NamedSharding(mesh, in_spec)``; `fn` sees the
        per-device block of every leaf and returns blocks laid out as `out_spec`
        (default: `in_spec`). The jitted transform is cached per (fn, mesh, specs),
        without keeping `fn` alive; an ``nnx.Module`` is called with its current
        state every time. No ``with mesh:`` or ``jax.set_mesh`` is needed.

        Example:
            >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
            >>> x = np.arange(16.0).reshape(len(jax.devices()), -1)
            >>> y = ArraySharder().parallel_transform(x, lambda b: b - b.mean(), mesh, P("data"))
            >>> float(abs(y).sum()) > 0
            True
        """
        if not isinstance(in_spec, PartitionSpec):
            raise TypeError(
                f"in_spec must be a jax.sharding.PartitionSpec, got {type(in_spec).__name__}."
            )
        check_spec_against_mesh(in_spec, dict(mesh.shape))
        out_spec = in_spec if out_spec is None else out_spec
        if not callable(fn):
            raise TypeError(f"fn must be a callable block -> block, got {type(fn).__name__}.")
        placed = self.shard(batch, NamedSharding(mesh, in_spec))
        return per_device_transform(fn, mesh, in_spec, out_spec)(placed)

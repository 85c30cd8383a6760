"""`SharderModule`: the base of every sharder, with logical axis names and shard_map."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec, Sharding

from datarax._deprecated import UNSET, ConfigProperty, SharderModuleConfig, from_config
from datarax._trees import flatten_with_names
from datarax._validate import AxisRules, MeshAxes
from datarax.errors import LeafShapeError
from datarax.sharding._sharding_checks import check_spec_against_mesh
from datarax.sharding._transforms import per_device_transform


class SharderModule(nnx.Module, ConfigProperty):
    """Base class of the sharders: logical axis names, shardings and shard_map.

    Settings come as keywords. Sharding is deterministic, so `rngs` is accepted for a
    uniform constructor and otherwise unused; `name` is kept as ``self.name``.

    Args:
        config: deprecated: the settings as a `SharderModuleConfig` (the original
            datarax API's form), or None. Pass them as keywords instead.
        axis_rules: optional logical-to-mesh axis rules, as a mapping or a sequence
            of pairs, e.g. ``{"batch": "data", "length": None}``. Without rules,
            logical names are used as mesh axis names unchanged.
        rngs: accepted and unused.
        name: an optional name for the module.

    Example:
        >>> sharder = ArraySharder(axis_rules={"batch": "data", "pixels": None})
        >>> sharder.get_partition_spec(("batch", "pixels")) == P("data", None)
        True
    """

    def __init__(
        self,
        config: SharderModuleConfig | None = None,
        *,
        axis_rules: AxisRules | None = None,
        rngs: nnx.Rngs | None = None,
        name: str | None = None,
    ):
        del rngs
        self.axis_rules = from_config(config, SharderModuleConfig, axis_rules, UNSET)[0]
        self.name = name

    def get_partition_spec(
        self, logical_spec: PartitionSpec | Sequence[str | None] | str
    ) -> PartitionSpec:
        """Translates logical axis names to a PartitionSpec of mesh axes.

        A `PartitionSpec` already names mesh axes and is returned unchanged.

        Raises:
            TypeError: `logical_spec` is not a PartitionSpec, a name, or a list or tuple
                of names (strings) and None.
            ValueError: a logical name has no rule (when rules were given).
        """
        if isinstance(logical_spec, PartitionSpec):
            return logical_spec
        if isinstance(logical_spec, str):
            logical_spec = (logical_spec,)
        if not isinstance(logical_spec, (list, tuple)) or not all(
            name is None or isinstance(name, str) for name in logical_spec
        ):
            raise TypeError(
                "logical_spec must be a PartitionSpec, a logical axis name, or a list or tuple "
                f"of names and None (one per dimension), e.g. ('batch', None); got "
                f"{type(logical_spec).__name__}: {logical_spec!r:.60}."
            )
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
        in_spec: PartitionSpec | tuple[str | None, ...],
        out_spec: PartitionSpec | tuple[str | None, ...] | None = None,
    ) -> Any:
        """Runs `fn` on every device's shard of `batch` with `jax.shard_map`.

        A spec is a `PartitionSpec`, or a tuple of logical axis names that the axis
        rules translate. `batch` is first placed with ``NamedSharding(mesh,
        in_spec)``; `fn` sees the per-device block of every leaf and returns blocks
        laid out as `out_spec` (default: `in_spec`). No ``with mesh:`` or
        ``jax.set_mesh`` is needed.

        The compiled transform is reused only when `fn` is an ``nnx.Module`` or a
        method of one, whose state is then passed in on every call, so changed
        parameters give the new result; any other callable is traced again on every
        call, so what it reads through a closure, a list, a dict or a global is
        always read afresh. For speed, pass the module (or its method) itself.

        Example:
            >>> mesh = jax.make_mesh((len(jax.devices()),), ("data",))
            >>> x = np.arange(16.0).reshape(len(jax.devices()), -1)
            >>> y = ArraySharder().parallel_transform(x, lambda b: b - b.mean(), mesh, P("data"))
            >>> float(abs(y).sum()) > 0
            True
        """
        in_spec = self._spec("in_spec", in_spec)
        check_spec_against_mesh(in_spec, dict(mesh.shape))
        out_spec = in_spec if out_spec is None else self._spec("out_spec", out_spec)
        check_spec_against_mesh(out_spec, dict(mesh.shape))
        if not callable(fn):
            raise TypeError(f"fn must be a callable block -> block, got {type(fn).__name__}.")
        for name, leaf in flatten_with_names(batch)[0]:
            if np.ndim(leaf) < len(in_spec):
                raise LeafShapeError(
                    f"{name} has shape {np.shape(leaf)} (rank {np.ndim(leaf)}), but "
                    f"in_spec {in_spec} splits {len(in_spec)} dimension(s) of every leaf "
                    f"for shard_map. Leave {name} out of the batch (pass it to fn another "
                    "way, e.g. through functools.partial), or give it those dimensions.",
                    leaf=name,
                    shape=tuple(np.shape(leaf)),
                    dim=np.ndim(leaf),
                )
        placed = self.shard(batch, NamedSharding(mesh, in_spec))
        return per_device_transform(fn, mesh, in_spec, out_spec)(placed)

    def _spec(self, name: str, spec: Any) -> PartitionSpec:
        """A PartitionSpec as given, or a tuple of logical names translated by the rules."""
        if isinstance(spec, (PartitionSpec, tuple)):
            return self.get_partition_spec(spec)
        raise TypeError(
            f"{name} must be a jax.sharding.PartitionSpec or a tuple of logical axis names, "
            f"got {type(spec).__name__} {spec!r:.60}: write P(...), e.g. P('data')."
        )

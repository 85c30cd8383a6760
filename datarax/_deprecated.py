"""Names kept only so that code written for earlier releases runs unchanged.

Each one works exactly as before and warns with a `DeprecationWarning` that names its
replacement. The warning is attributed to the first caller outside datarax and flax
(nnx builds a module through frames of its own), so Python's default filter shows it
once per call site in ``__main__`` (a script, a notebook), and pytest shows it for a
test. They are:

- the module paths ``datarax.sources``, ``datarax.prefetch``, ``datarax.checkpoint``
  and ``datarax.devices``, now ``datarax.pipeline`` and ``datarax.distributed``, and
  ``datarax.exercises``, now the course package ``datarax_course``: each name read from
  them warns;
- the lesson figures and the playground, read from ``datarax.viz`` (``plot_devices``,
  ``playground``, ...), now in ``datarax_course.figures``: each warns;
- ``ArraySharder.shard_static``, ``ArraySharder.shard_with_info_static`` and
  ``apply_parallel_transform``;
- the settings objects ``SharderModuleConfig`` and ``JaxProcessSharderConfig``, a
  sharder's ``config=`` argument and its ``config`` property: the sharders take their
  settings as keywords.

The seed's names (``ArraySharder``, ``JaxProcessSharder``, ``JaxProcessSharderModule``,
the modules ``array_sharder`` and ``jax_process_sharder``, ``shard_data``,
``Pipeline``) are the API, not kept for compatibility, and do not warn.

This module imports no wing: the sharders build on it, and a moved module reaches its
new place only when a name is read from it (so ``import datarax`` imports nothing of the
course).
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import importlib.abc
import importlib.util
import inspect
import warnings
from collections.abc import Sequence
from typing import Any

from datarax._validate import MeshAxes, check_axis_rules, check_bool

MOVED_MODULES = {
    "checkpoint": "datarax.pipeline",
    "devices": "datarax.distributed",
    "exercises": "datarax_course",
    "prefetch": "datarax.pipeline",
    "sources": "datarax.pipeline",
}
_OURS = ("datarax", "flax", "importlib", "_frozen_importlib", "_frozen_importlib_external")


def warn(old: str, new: str) -> None:
    """Warns that `old` is deprecated and names `new`, at the first caller outside
    datarax and flax (and the import machinery)."""
    message = f"{old} is deprecated: use {new} instead."
    frame = inspect.currentframe()
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] in _OURS:
        frame = frame.f_back
    if frame is None:  # no frames on this Python, or no caller outside: say it here
        warnings.warn(message, DeprecationWarning, stacklevel=2)
        return
    module_globals = frame.f_globals
    # No module_globals=, as warnings.warn passes none: with them, the source line would be
    # asked of the caller's loader by the caller's __name__, which raises ImportError where
    # that is "__main__" (python -c, a script on stdin, python -m). Python reads the line
    # from the caller's file by its name instead.
    warnings.warn_explicit(
        message,
        DeprecationWarning,
        frame.f_code.co_filename,
        frame.f_lineno,
        module=module_globals.get("__name__", "<unknown>"),
        registry=module_globals.setdefault("__warningregistry__", {}),
    )


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an earlier release's path (``datarax.sources``) as a module whose names
    are those of the wing that took it over (``datarax.pipeline``); each name read from
    it warns."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        parent, _, name = fullname.rpartition(".")
        if parent != "datarax" or name not in MOVED_MODULES:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: Any) -> None:
        return None  # a plain new module

    def exec_module(self, module: Any) -> None:
        old = module.__name__
        new = MOVED_MODULES[old.rpartition(".")[2]]
        wing = importlib.import_module(new)
        names = list(wing.__all__)

        def __getattr__(name: str) -> Any:  # the module's attribute hook (PEP 562)
            if name not in names:
                raise AttributeError(f"module {old!r} has no attribute {name!r}")
            warn(f"{old}.{name}", f"{new}.{name}")
            return getattr(wing, name)

        module.__doc__ = f"Deprecated: the public names of `{new}`, under an earlier path."
        module.__all__ = names
        module.__getattr__ = __getattr__
        module.__dir__ = lambda: list(names)


# The settings objects of the original API.


@dataclasses.dataclass(frozen=True)
class SharderModuleConfig:
    """Deprecated: a sharder's settings as one object, the original datarax API's form.

    ``ArraySharder(SharderModuleConfig(sharding_rules=[("batch", "data")]))`` is
    ``ArraySharder(axis_rules=[("batch", "data")])``, the form to use instead.

    Attributes:
        sharding_rules: logical-to-mesh axis pairs, or None for no rules.
    """

    sharding_rules: Sequence[tuple[str, MeshAxes]] | None = None

    def __post_init__(self) -> None:
        warn("SharderModuleConfig(...)", "keywords, e.g. ArraySharder(axis_rules=...)")
        object.__setattr__(self, "sharding_rules", check_axis_rules(self.sharding_rules))


@dataclasses.dataclass(frozen=True)
class JaxProcessSharderConfig(SharderModuleConfig):
    """Deprecated: `JaxProcessSharder`'s settings as one object (the original form).

    ``JaxProcessSharderModule(JaxProcessSharderConfig(drop_remainder=False))`` is
    ``JaxProcessSharder(drop_remainder=False)``, the form to use instead.

    Attributes:
        drop_remainder: give every host the same number of rows (see `shard_bounds`).
        sharding_rules: logical-to-mesh axis pairs, or None.
    """

    drop_remainder: bool = True

    def __post_init__(self) -> None:
        warn(
            "JaxProcessSharderConfig(...)",
            "keywords, e.g. JaxProcessSharder(drop_remainder=..., axis_rules=...)",
        )
        object.__setattr__(self, "sharding_rules", check_axis_rules(self.sharding_rules))
        check_bool("drop_remainder", self.drop_remainder)


class Unset(enum.Enum):
    """The default of a keyword that a config may give instead."""

    UNSET = enum.auto()

    def __repr__(self) -> str:  # how signatures show it
        return "<True, or config's>"


UNSET = Unset.UNSET


def from_config(
    config: Any,
    config_class: type[SharderModuleConfig],
    axis_rules: Any,
    drop_remainder: bool | Unset,
) -> tuple[tuple[tuple[str, MeshAxes], ...] | None, Any]:
    """A sharder's ``(axis rules, drop_remainder)``: the keywords as given (`UNSET`:
    not given, so True), or else `config`'s, the original API's settings object, which
    warns. The caller checks `drop_remainder`.

    Raises:
        TypeError: `config` is neither None nor a `config_class`.
        ValueError: a setting is given both in `config` and as a keyword.
    """
    if config is None:
        return check_axis_rules(axis_rules), True if drop_remainder is UNSET else drop_remainder
    if not isinstance(config, config_class):
        raise TypeError(
            f"config must be a {config_class.__name__} (or None), got "
            f"{type(config).__name__}; or pass the settings as keywords instead."
        )
    warn(f"{config_class.__name__} passed as config=", "the sharder's keywords")
    if config.sharding_rules is not None and axis_rules is not None:
        raise ValueError(
            "The axis rules were given twice, as config.sharding_rules and as axis_rules=; "
            "pass them once."
        )
    if drop_remainder is not UNSET:
        raise ValueError(
            "drop_remainder was given twice, in config and as a keyword; pass it once."
        )
    rules = config.sharding_rules if config.sharding_rules is not None else axis_rules
    return check_axis_rules(rules), getattr(config, "drop_remainder", True)


class ConfigProperty:
    """The original API's ``config`` property: a sharder's settings as the settings
    object of its class (``_config_class``), whose fields are its attributes of the
    same names, with ``sharding_rules`` for ``axis_rules``."""

    _config_class = SharderModuleConfig

    @property
    def config(self) -> Any:
        """Deprecated: the settings as a config object; read the attributes instead."""
        fields = [field.name for field in dataclasses.fields(self._config_class)]
        attributes = ", ".join("axis_rules" if f == "sharding_rules" else f for f in fields)
        warn(f"{type(self).__name__}.config", f"the sharder's attributes ({attributes})")
        settings = object.__new__(self._config_class)  # built quietly: the warning is above
        for name in fields:
            value = getattr(self, "axis_rules" if name == "sharding_rules" else name)
            object.__setattr__(settings, name, value)
        return settings


class ArraySharderAliases:
    """The original API's other names for `ArraySharder`'s methods."""

    @classmethod
    def shard_static(cls, batch: Any, sharding: Any) -> Any:
        """Deprecated: ``ArraySharder().shard(batch, sharding)``."""
        warn("ArraySharder.shard_static(...)", "ArraySharder().shard(batch, sharding)")
        sharder: Any = cls()
        return sharder.shard(batch, sharding)

    @classmethod
    def shard_with_info_static(
        cls, batch: Any, sharding: Any, info: dict[str, Any] | None = None
    ) -> Any:
        """Deprecated: ``ArraySharder().shard_with_info(batch, sharding, info)``."""
        warn(
            "ArraySharder.shard_with_info_static(...)",
            "ArraySharder().shard_with_info(batch, sharding, info)",
        )
        sharder: Any = cls()
        return sharder.shard_with_info(batch, sharding, info)

    def apply_parallel_transform(self, batch: Any, transform_fn: Any, *args: Any) -> Any:
        """Deprecated: `parallel_transform`, under its other name in the original API."""
        warn("apply_parallel_transform(...)", "parallel_transform(...) with the same arguments")
        sharder: Any = self
        return sharder.parallel_transform(batch, transform_fn, *args)

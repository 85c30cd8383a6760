"""Optional dependencies: the one place that turns a missing one into install advice.

The core (`datarax.sharding`, `datarax.pipeline`, `datarax.distributed`) needs only jax,
flax and numpy. The teaching parts need more, grouped in the distribution's extras
(``pyproject.toml``); `require` imports such a dependency or says which extra installs it.
"""

from __future__ import annotations

import importlib

DISTRIBUTION = "datarax-sharding"
EXTRAS = ("viz", "playground", "checkpoint", "parquet", "remote", "zstd", "tutorials")


def install_line(extra: str) -> str:
    """The pip command that installs this distribution with `extra`.

    Example:
        >>> install_line("viz")
        "pip install 'datarax-sharding[viz]'"
    """
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {', '.join(EXTRAS)}; got {extra!r}")
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def require(module: str, extra: str, needed_by: str) -> None:
    """Checks that `module` imports, or raises an ImportError that names the extra to install.

    Only a module that is not installed at all is reported this way; an installed one
    that fails to import raises its own error unchanged.

    Args:
        module: the module to import, e.g. ``"matplotlib"``.
        extra: the extra of this distribution that installs it, e.g. ``"viz"``.
        needed_by: what needs it, for the message, e.g. ``"datarax.viz"``.

    Raises:
        ImportError: `module` is not installed; the message gives the pip command.
        ValueError: `extra` is not one of this distribution's extras.

    Example:
        >>> require("no_such_module", "viz", "this example")
        Traceback (most recent call last):
        ...
        ImportError: this example needs no_such_module, ...: pip install 'datarax-sharding[viz]'
    """
    advice = install_line(extra)
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as error:
        top_level = module.partition(".")[0]
        if error.name is not None and error.name.partition(".")[0] != top_level:
            raise  # the module is there; something it imports is not
        raise ImportError(
            f"{needed_by} needs {module}, which is not installed: {advice}"
        ) from error

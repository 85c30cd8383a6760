"""Names kept only for the original API warn, at their caller's line, naming what to use
instead; nothing of ours uses them; and the module that holds them imports no wing."""

from __future__ import annotations

import ast
import importlib
import json
import os
import re
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax._compat import single_device_sharding
from datarax.sharding import (
    ArraySharder,
    JaxProcessSharder,
    JaxProcessSharderConfig,
    SharderModuleConfig,
)

ROOT = Path(__file__).resolve().parents[1]
MESH = jax.make_mesh((8,), ("data",))
BATCH = {"x": np.arange(16.0).reshape(8, 2)}


def _quietly(make: Callable[[], Any]) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return make()


USES: dict[str, tuple[Callable[[], Any], str]] = {
    "datarax.sources": (
        lambda: importlib.import_module("datarax.sources").ArraySource,
        "use datarax.pipeline.ArraySource instead",
    ),
    "datarax.prefetch": (
        lambda: importlib.import_module("datarax.prefetch").prefetch_to_device,
        "use datarax.pipeline.prefetch_to_device instead",
    ),
    "datarax.checkpoint": (
        lambda: importlib.import_module("datarax.checkpoint").Checkpoints,
        "use datarax.pipeline.Checkpoints instead",
    ),
    "datarax.devices": (
        lambda: importlib.import_module("datarax.devices").setup_devices,
        "use datarax.distributed.setup_devices instead",
    ),
    "shard_static": (
        lambda: ArraySharder.shard_static(BATCH, NamedSharding(MESH, P("data"))),
        r"use ArraySharder\(\).shard\(batch, sharding\) instead",
    ),
    "shard_with_info_static": (
        lambda: ArraySharder.shard_with_info_static(BATCH, NamedSharding(MESH, P("data"))),
        r"use ArraySharder\(\).shard_with_info\(batch, sharding, info\) instead",
    ),
    "apply_parallel_transform": (
        lambda: ArraySharder().apply_parallel_transform(BATCH["x"], lambda b: b, MESH, P("data")),
        r"use parallel_transform\(...\) with the same arguments instead",
    ),
    "SharderModuleConfig": (
        lambda: SharderModuleConfig(sharding_rules=[("batch", "data")]),
        r"use keywords, e.g. ArraySharder\(axis_rules=...\) instead",
    ),
    "JaxProcessSharderConfig": (
        lambda: JaxProcessSharderConfig(drop_remainder=False),
        r"use keywords, e.g. JaxProcessSharder\(drop_remainder=..., axis_rules=...\) instead",
    ),
    "config=": (
        lambda: ArraySharder(_quietly(SharderModuleConfig)),
        "SharderModuleConfig passed as config= is deprecated: use the sharder's keywords",
    ),
    "JaxProcessSharder.config": (
        lambda: JaxProcessSharder().config,
        r"JaxProcessSharder.config is deprecated: use the sharder's attributes \(axis_rules, "
        r"drop_remainder\) instead",
    ),
    "ArraySharder.config": (
        lambda: ArraySharder().config,
        r"use the sharder's attributes \(axis_rules\) instead",
    ),
}


@pytest.mark.parametrize("name", list(USES))
def test_a_deprecated_name_warns_once_at_its_call_site(name: str) -> None:
    use, replacement = USES[name]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        use()
    deprecations = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(deprecations) == 1, [str(w.message) for w in caught]
    assert re.search(replacement, str(deprecations[0].message))
    # Said at the line that used the name (in USES above), not inside datarax or flax.
    assert deprecations[0].filename == __file__


def test_the_deprecated_forms_give_what_their_replacements_give() -> None:
    sharding = NamedSharding(MESH, P("data"))
    with pytest.deprecated_call():
        static = ArraySharder.shard_static(BATCH, sharding)
        config = JaxProcessSharder(drop_remainder=False, axis_rules={"batch": "data"}).config
        sources = importlib.import_module("datarax.sources")
        source = sources.ArraySource
    assert static["x"].sharding == ArraySharder().shard(BATCH, sharding)["x"].sharding
    assert (config.drop_remainder, config.sharding_rules) == (False, (("batch", "data"),))
    assert type(config) is JaxProcessSharderConfig
    assert source is importlib.import_module("datarax.pipeline").ArraySource
    assert sources.__all__ == importlib.import_module("datarax.pipeline").__all__
    with pytest.raises(AttributeError, match=r"module 'datarax\.sources' has no attribute 'nope'"):
        _ = sources.nope


_SCRIPT = """
import numpy as np
import jax
from datarax.sharding import ArraySharder

one = jax.sharding.Mesh(jax.devices()[:1], ("one",))
sharding = jax.sharding.NamedSharding(one, jax.sharding.PartitionSpec())
for _ in range(3):
    ArraySharder.shard_static(np.zeros(2), sharding)  # call site 1, three calls
ArraySharder.shard_static(np.zeros(2), sharding)  # call site 2
from datarax.devices import setup_devices  # call site 3
"""


def test_pythons_default_filter_shows_each_call_site_once(tmp_path: Path) -> None:
    """A script run as ``__main__`` with no warning options, as a user runs one."""
    script = tmp_path / "old_code.py"
    script.write_text(_SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"} | {"JAX_PLATFORMS": "cpu"}
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=env, timeout=120
    )
    assert done.returncode == 0, done.stderr
    said = re.findall(r"old_code\.py:(\d+): DeprecationWarning: (.*)", done.stderr)
    lines = _SCRIPT.splitlines()
    assert [(lines[int(n) - 1].partition("#")[2].strip(), text[:30]) for n, text in said] == [
        ("call site 1, three calls", "ArraySharder.shard_static(...)"),
        ("call site 2", "ArraySharder.shard_static(...)"),
        ("call site 3", "datarax.devices.setup_devices "),
    ]


_OLD_IMPORTS = """\
from datarax.checkpoint import Checkpoints
from datarax.exercises import check
from datarax import viz
viz.plot_devices
print(Checkpoints.__name__, check.__module__)
"""


@pytest.mark.parametrize("how", ["file", "-c", "stdin", "-m"])
def test_an_old_path_warns_however_python_runs_the_caller(how: str, tmp_path: Path) -> None:
    """The warning names the caller's line wherever the caller's code comes from: a file,
    ``python -c``, a script on standard input (no file: no source line to show) or
    ``python -m``; none of them may turn the warning into an ImportError."""
    (tmp_path / "old_paths.py").write_text(_OLD_IMPORTS)
    command = {
        "file": [str(tmp_path / "old_paths.py")],
        "-c": ["-c", _OLD_IMPORTS],
        "stdin": ["-"],
        "-m": ["-m", "old_paths"],
    }[how]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    done = subprocess.run(
        [sys.executable, "-W", "always::DeprecationWarning", *command],
        input=_OLD_IMPORTS if how == "stdin" else None,
        capture_output=True,
        text=True,
        env=env | {"JAX_PLATFORMS": "cpu"},
        cwd=tmp_path,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["Checkpoints", "datarax_course._core"]
    for old in ("datarax.checkpoint.Checkpoints", "datarax.exercises.check", "viz.plot_devices"):
        assert f"DeprecationWarning: {old} is deprecated" in done.stderr.replace(
            "datarax.viz.plot_devices", "viz.plot_devices"
        ), done.stderr


def test_the_module_of_deprecated_names_imports_no_wing() -> None:
    tree = ast.parse((ROOT / "datarax" / "_deprecated.py").read_text())
    imported = {
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    }
    ours = {name for name in imported if name and name.split(".")[0].startswith("datarax")}
    assert ours == {"datarax._validate"}


_DEPRECATED = re.compile(
    r"\b(shard_static|shard_with_info_static|apply_parallel_transform|SharderModuleConfig|"
    r"JaxProcessSharderConfig)\b|\bdatarax\.(sources|prefetch|checkpoint|devices)\b|"
    r"\bfrom datarax import (sources|prefetch|checkpoint|devices)\b"
)
# The code that defines the deprecated names, or passes them on.
_KEEPERS = {
    "datarax/_deprecated.py",
    "datarax/__init__.py",
    "datarax/sharding/__init__.py",
    "datarax/sharding/_base.py",
    "datarax/sharding/jax_process_sharder.py",
}


def _parts(path: Path) -> list[str]:
    """A notebook's cells, a markdown page's sections (by heading), a module whole."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text())["cells"]
        return ["".join(cell["source"]) for cell in cells]
    if path.suffix == ".md":
        return re.split(r"^#{1,6} ", path.read_text(), flags=re.MULTILINE)
    return [path.read_text()]


def test_nothing_of_ours_uses_a_deprecated_name_except_to_say_it_is_deprecated() -> None:
    """Code never does; a section of the docs, the tutorials or the README (or a
    notebook's cell) that names one also says that it is deprecated."""
    files = [ROOT / "README.md"]
    for folder in ("datarax", "tutorials", "docs", "examples", "benchmarks"):
        for suffix in ("*.py", "*.md", "*.ipynb"):
            files += (ROOT / folder).rglob(suffix)
    found = []
    for path in files:
        where = path.relative_to(ROOT).as_posix()
        if where in _KEEPERS or "/_build/" in where or "/jupyter_execute/" in where:
            continue
        for part in _parts(path):
            said = path.suffix != ".py" and "deprecat" in part.lower()
            if not said and (use := _DEPRECATED.search(part)):
                found.append(f"{where}: {use.group(0)}")
    assert found == []


def test_only_the_seed_names_stay_without_a_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sharder = JaxProcessSharder(drop_remainder=False)
        local = sharder.shard_data(np.arange(8))
        placed = ArraySharder().shard(local, single_device_sharding(jax.devices()[0]))
        for module, name in (
            ("datarax.sharding.jax_process_sharder", "JaxProcessSharderModule"),
            ("datarax.sharding.array_sharder", "ArraySharder"),
            ("datarax.pipeline", "Pipeline"),
        ):
            assert getattr(importlib.import_module(module), name) is not None
    assert placed.shape == (8,)

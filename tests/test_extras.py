"""Optional dependencies: the core imports without them, and a missing one names its extra."""

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from _support.package_check import package_check

from datarax._extras import EXTRAS, install_line, require

ROOT = Path(__file__).parents[1]
# What only the teaching extras install (rich is one too, but flax depends on it).
TEACHING_ONLY = ["matplotlib", "ipywidgets"]


def _python_without(missing: list[str], code: str) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter (on this checkout) where `missing` cannot import."""
    blocked = f"import sys\nfor name in {missing!r}:\n    sys.modules[name] = None\n"
    return subprocess.run(
        [sys.executable, "-c", blocked + code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )


@pytest.mark.parametrize("missing", ["matplotlib", "rich"])
def test_viz_without_its_extra_gives_the_pip_command(missing: str) -> None:
    done = _python_without([missing], "import datarax.viz")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        f"ImportError: datarax.viz needs {missing}, which is not installed: "
        "pip install 'datarax-sharding[viz]'"
    )


def test_playground_without_ipywidgets_gives_the_pip_command() -> None:
    done = _python_without(
        ["ipywidgets"], "import datarax_course.figures\ndatarax_course.figures.playground()"
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "ImportError: datarax_course.figures.playground needs ipywidgets, which is not "
        "installed: pip install 'datarax-sharding[playground]'"
    )


def test_the_core_imports_without_the_teaching_dependencies() -> None:
    core = [name for name, extra in package_check.PUBLIC_MODULES.items() if extra is None]
    assert "datarax.sharding" in core and "datarax.viz" not in core
    code = "import importlib\n" + "".join(f"importlib.import_module({m!r})\n" for m in core)
    done = _python_without(TEACHING_ONLY, code + "print('imported', len(sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("imported")


def test_a_missing_dependency_of_an_installed_module_is_not_blamed_on_an_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "installed_but_broken.py").write_text("import not_installed_anywhere\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ModuleNotFoundError) as raised:
        require("installed_but_broken", "viz", "this test")
    assert raised.value.name == "not_installed_anywhere"
    assert "pip install" not in str(raised.value)


def test_a_module_not_installed_names_its_extra() -> None:
    with pytest.raises(ImportError, match=r"^this test needs no_such_module, .*\[checkpoint\]'$"):
        require("no_such_module", "checkpoint", "this test")


def test_extras_are_the_distributions() -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert set(EXTRAS) <= set(pyproject["project"]["optional-dependencies"])
    with pytest.raises(ValueError, match=r"extra must be one of viz, playground.*got 'vis'"):
        install_line("vis")

"""What would be published, installed as a user would: `make package-check`.

1. Builds the sdist, and the wheel from the sdist (``python -m build``), into a temporary
   folder, and runs ``twine check --strict`` on both.
2. Checks their contents: the wheel holds every file git tracks under ``datarax/`` and
   ``datarax_course/`` (the course, its answer keys' data file included) and the
   LICENSE, and nothing of the grader (``grader/``, a distribution of its own); the sdist
   holds those, the LICENSE, README, CHANGELOG and pyproject.toml, and no ``tests/`` (the
   tests need the repository: its conftest, tutorials and examples) and no grader.
3. In a fresh venv, installs the wheel alone: every public module imports from the venv,
   a module that needs an extra raises an ImportError with that extra's pip command, and
   the README's code blocks marked ``<!-- runnable -->`` run, in order, in one process.
4. Adds the ``viz`` extra: ``datarax.viz`` imports.
5. Adds the ``tutorials`` extra and runs tutorial 01 from a folder outside the checkout,
   asserting that its kernel imported datarax from the venv.

Prints the venv's installed size after each install. Run by the repository's venv, which
has build and twine (the ``dev`` extra); pip's cache makes a second run quick.

Usage: python .ci/package_check.py
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import textwrap
import time
import zipfile
from collections.abc import Iterable, Sequence
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DISTRIBUTION = "datarax-sharding"
# Every public module, and the extra it needs (None: the core is enough). The old paths
# datarax.sources, .prefetch, .checkpoint, .devices and .exercises stay importable as
# aliases.
PUBLIC_MODULES: dict[str, str | None] = {
    "datarax": None,
    "datarax.sharding": None,
    "datarax.sharding.array_sharder": None,
    "datarax.sharding.jax_process_sharder": None,
    "datarax.pipeline": None,
    "datarax.pipeline.documents": None,
    "datarax.distributed": None,
    "datarax_course": None,
    "datarax.exercises": None,
    "datarax.sources": None,
    "datarax.prefetch": None,
    "datarax.checkpoint": None,
    "datarax.devices": None,
    "datarax.viz": "viz",
    "datarax_course.figures": "viz",
}
# The packages the wheel holds, and what it must not: the grader's package and its
# kernel-side scripts.
PACKAGES = ("datarax", "datarax_course")
GRADER_FILES = re.compile(r"(^|/)(datarax_grader/|_sandbox\.py$|_seccomp\.py$|_kernel_boot\.py$)")
EXTRAS = ("viz", "playground", "checkpoint", "parquet", "tutorials")
NOTEBOOK = ROOT / "tutorials" / "01_devices_and_meshes.ipynb"
RUNNABLE = re.compile(r"<!-- runnable -->\s*```python\n(.*?)```", re.DOTALL)
EIGHT_CPU_DEVICES = {
    "XLA_FLAGS": "--xla_force_host_platform_device_count=8",
    "JAX_PLATFORMS": "cpu",
}


class CheckFailed(Exception):
    """A check of the built or installed package failed; the message says which."""


def run(command: Sequence[str | Path], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Runs `command` and returns its output, raising CheckFailed when it fails."""
    done = subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise CheckFailed(
            f"{' '.join(map(str, command))} exited with {done.returncode}:\n"
            f"{done.stdout[-4000:]}{done.stderr[-4000:]}"
        )
    return done.stdout


def tracked_copy(root: Path, into: Path) -> Path:
    """A copy in `into` of the files git tracks in `root`, to build from: setuptools writes
    its egg-info folder (and ``build/``) into the tree it builds, so builds from copies
    leave the checkout alone and may run at once (CI builds while the tests build).
    Returns `into`."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, text=True, check=True
    )
    for name in filter(None, listed.stdout.split("\0")):
        if not (root / name).is_file():  # deleted in the working tree, not yet committed
            continue
        target = into / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(root / name, target)
    return into


def tracked_package_files(root: Path) -> set[str]:
    """The files git tracks under the wheel's packages (`PACKAGES`), as paths relative to
    `root`."""
    listed = subprocess.run(
        ["git", "ls-files", *PACKAGES], cwd=root, capture_output=True, text=True, check=True
    )
    return {line for line in listed.stdout.splitlines() if line}


def check_wheel(wheel: Path, package_files: Iterable[str]) -> None:
    """Raises CheckFailed unless `wheel` holds every file in `package_files` and the LICENSE,
    and nothing of the grader."""
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(set(package_files) - names)
    if not any(name.endswith(".dist-info/licenses/LICENSE") for name in names):
        missing.append("*.dist-info/licenses/LICENSE")
    if missing:
        raise CheckFailed(f"{wheel.name} lacks {len(missing)} file(s): {', '.join(missing)}")
    graders = sorted(name for name in names if GRADER_FILES.search(name))
    if graders:
        raise CheckFailed(f"{wheel.name} holds the grader's files: {', '.join(graders[:5])}")


def check_sdist(sdist: Path, package_files: Iterable[str]) -> None:
    """Raises CheckFailed unless `sdist` holds the package, its metadata files and no tests."""
    with tarfile.open(sdist) as archive:
        names = {name.partition("/")[2] for name in archive.getnames()}
    wanted = {*package_files, "LICENSE", "README.md", "CHANGELOG.md", "pyproject.toml"}
    missing = sorted(wanted - names)
    if missing:
        raise CheckFailed(f"{sdist.name} lacks {len(missing)} file(s): {', '.join(missing)}")
    if any(name.startswith("tests/") for name in names):
        raise CheckFailed(f"{sdist.name} ships tests/, which cannot run outside the repository")
    if any(name.startswith("grader/") or GRADER_FILES.search(name) for name in names):
        raise CheckFailed(f"{sdist.name} ships the grader, a distribution of its own")


def install_line(extra: str) -> str:
    """The pip command a module that needs `extra` must name when the extra is missing.

    Written out here rather than imported from datarax, which is what is being checked.
    """
    return f"pip install '{DISTRIBUTION}[{extra}]'"


def check_imports(under: Path, extras: Iterable[str]) -> list[str]:
    """Imports every public module in this process; returns one line per module.

    A module whose extra is in `extras` (or that needs none) must import, and every
    datarax module loaded must come from a file under `under`; one whose extra is missing
    must raise an ImportError that names its pip command. The installed distribution's
    version must be ``datarax.__version__``.

    Raises:
        CheckFailed: listing every module that broke a rule.
    """
    extras, under = set(extras), under.resolve()
    report, problems = [], []
    for module, extra in PUBLIC_MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError as error:
            if extra is not None and extra not in extras and install_line(extra) in str(error):
                report.append(f"{module}: needs [{extra}], says: {error}")
            else:
                problems.append(f"{module}: {type(error).__name__}: {error}")
            continue
        if extra is not None and extra not in extras:
            problems.append(f"{module} imported, but [{extra}] is not installed: is it needed?")
        else:
            report.append(f"{module}: imports")
    for name, loaded in sorted(sys.modules.items()):
        origin = getattr(loaded, "__file__", None)
        if name.partition(".")[0] != "datarax" or origin is None:
            continue
        if not Path(origin).resolve().is_relative_to(under):
            problems.append(f"{name} was imported from {origin}, not from under {under}")
    installed = version(DISTRIBUTION)
    imported = getattr(sys.modules.get("datarax"), "__version__", None)
    if installed != imported:
        problems.append(f"{DISTRIBUTION} {installed} is installed, datarax says {imported}")
    if problems:
        raise CheckFailed("\n".join(problems))
    return [*report, f"{DISTRIBUTION} {installed}"]


def runnable_blocks(readme: Path) -> str:
    """The README's python blocks marked ``<!-- runnable -->``, joined in order."""
    blocks = RUNNABLE.findall(readme.read_text())
    if not blocks:
        raise CheckFailed(f"{readme} has no python block marked <!-- runnable -->")
    return "\n".join(blocks)


def site_packages_mb(venv: Path) -> int:
    """The installed size of `venv`'s site-packages, in MB (as ``du -sm`` counts)."""
    done = subprocess.run(
        ["du", "-sm", *venv.glob("lib/python*/site-packages")],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout.split()[0])


def execute_notebook(python: Path, notebook: Path, folder: Path) -> str:
    """Runs `notebook` in a kernel of `python`, from `folder`; says where datarax came from.

    A cell added at the end asserts that the kernel imported datarax from `python`'s venv.
    """
    script = f"""
import sys
import nbclient, nbformat
notebook = nbformat.read({str(notebook)!r}, as_version=4)
notebook.cells.append(nbformat.v4.new_code_cell(
    "import sys, datarax\\n"
    "assert datarax.__file__.startswith(sys.prefix), (datarax.__file__, sys.prefix)\\n"
    "print('datarax from', datarax.__file__)"))
nbclient.NotebookClient(notebook, timeout=120, kernel_name="python3",
                        resources={{"metadata": {{"path": {str(folder)!r}}}}}).execute()
print(notebook.cells[-1].outputs[0]["text"].strip())
"""
    return run([python, "-c", script], cwd=folder, env=EIGHT_CPU_DEVICES).strip()


def step(name: str, started: float) -> None:
    """Prints that step `name` passed, with the seconds since `started`."""
    print(f"ok   {name} ({time.monotonic() - started:.0f} s)", flush=True)


def check_everything(work: Path) -> None:
    """All the steps of the module docstring, in `work`; raises CheckFailed at the first."""
    started = time.monotonic()
    dist, venv, outside = work / "dist", work / "venv", work / "outside"
    outside.mkdir()
    source = tracked_copy(ROOT, work / "source")
    run([sys.executable, "-m", "build", "--outdir", dist, source], cwd=source)
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    run([sys.executable, "-m", "twine", "check", "--strict", wheel, sdist], cwd=ROOT)
    step(f"built and twine-checked {wheel.name} and {sdist.name}", started)
    package_files = tracked_package_files(ROOT)
    check_wheel(wheel, package_files)
    check_sdist(sdist, package_files)
    step(f"both hold the {len(package_files)} files under datarax/ and the LICENSE", started)

    run([sys.executable, "-m", "venv", venv], cwd=work)
    python = venv / "bin" / "python"
    pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    site = next(venv.glob("lib/python*/site-packages"))
    step(f"a fresh venv: site-packages {site_packages_mb(venv)} MB (pip, setuptools)", started)
    for extras, note in [
        ((), "the wheel alone"),
        (("viz",), "with [viz]"),
        (EXTRAS, "with [tutorials]"),
    ]:
        target = f"{wheel}[{extras[-1]}]" if extras else str(wheel)
        run([*pip, target], cwd=work)
        step(f"installed {note}: site-packages {site_packages_mb(venv)} MB", started)
        imported = run([python, __file__, "imports", "--under", site, *extras], cwd=outside)
        step(f"every public module, {note}, from {site}:", started)
        print(textwrap.indent(imported, "       "), end="", flush=True)
        if not extras:
            readme = outside / "readme_blocks.py"
            readme.write_text(runnable_blocks(ROOT / "README.md"))
            run([python, readme], cwd=outside, env=EIGHT_CPU_DEVICES)
            step("the README's runnable blocks run", started)
    where = execute_notebook(python, NOTEBOOK, outside)
    step(f"{NOTEBOOK.name} runs against the installed wheel ({where})", started)


def extra(name: str) -> str:
    """`name`, if it is one of the distribution's extras (an argparse type)."""
    if name not in EXTRAS:
        raise argparse.ArgumentTypeError(f"{name!r} is not one of {', '.join(EXTRAS)}")
    return name


def main(argv: Sequence[str] | None = None) -> int:
    """The whole check, or (``imports``) the import check inside an installed venv."""
    parser = argparse.ArgumentParser(description=__doc__.partition("\n")[0])
    commands = parser.add_subparsers(dest="command")
    imports = commands.add_parser("imports", help="import the public modules (in a venv)")
    imports.add_argument("--under", type=Path, required=True, help="where datarax must be")
    imports.add_argument("extras", nargs="*", type=extra, help="the extras installed")
    arguments = parser.parse_args(argv)
    try:
        if arguments.command == "imports":
            print("\n".join(check_imports(arguments.under, arguments.extras)))
        else:
            with tempfile.TemporaryDirectory(prefix="package-check-") as work:
                check_everything(Path(work))
    except CheckFailed as error:
        print(f"FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

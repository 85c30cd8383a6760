"""make package-check's checks catch a wheel that lacks a file, and pass the real one.

The wheel and sdist are built here as .ci/package_check.py builds them (the sdist, then
the wheel from it), without build isolation so that no network is needed (build and
setuptools>=77 come with the tests extra); the import check runs on the wheel unpacked,
with this venv's jax and flax.
"""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import build  # noqa: F401  # the fixture runs python -m build: a collection error without it
import pytest
from _support.package_check import SCRIPT, package_check

ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    source = package_check.tracked_copy(ROOT, tmp_path_factory.mktemp("source"))
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=source)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


def _wheel_without(wheel: Path, left_out: str, folder: Path) -> Path:
    """A copy of `wheel` in `folder` without the file `left_out`."""
    copy = folder / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(copy, "w") as target:
        assert left_out in source.namelist(), f"{left_out} is not in {wheel.name}"
        for item in source.infolist():
            if item.filename != left_out:
                target.writestr(item, source.read(item))
    return copy


def _import_check(
    wheel: Path, folder: Path, extras: tuple[str, ...] = package_check.EXTRAS
) -> subprocess.CompletedProcess[str]:
    """The package check's import step, on `wheel` unpacked in `folder`, for `extras`."""
    site = folder / "site"
    zipfile.ZipFile(wheel).extractall(site)
    return subprocess.run(
        [sys.executable, str(SCRIPT), "imports", "--under", str(site), *extras],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(site)},
    )


def test_the_wheel_and_sdist_hold_the_package_and_pass_the_import_check(
    dist: Path, tmp_path: Path
) -> None:
    (wheel,) = dist.glob("*.whl")
    (sdist,) = dist.glob("*.tar.gz")
    files = package_check.tracked_package_files(ROOT)
    assert "datarax/py.typed" in files and "datarax/sharding/_ledger.py" in files
    assert "datarax_course/answer_keys.json" in files and "datarax_course/_core.py" in files
    assert not [name for name in files if "grader" in name or name.endswith("_seccomp.py")]
    package_check.check_wheel(wheel, files)
    package_check.check_sdist(sdist, files)
    done = _import_check(wheel, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "datarax.viz: imports" in done.stdout


def test_the_build_copies_what_git_tracks_and_leaves_the_tree_alone(tmp_path: Path) -> None:
    """The sdist and wheel are built from a copy of the tracked files: an untracked file
    stays out, a tracked file deleted meanwhile is skipped, and the tree gains nothing."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "pkg").mkdir()
    for name in ("pkg/kept.py", "pkg/deleted.py", "README.md"):
        (tree / name).write_text(name)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], cwd=tree, check=True)
    subprocess.run([*git, "add", "."], cwd=tree, check=True)
    (tree / "pkg" / "deleted.py").unlink()
    (tree / "untracked.txt").write_text("not tracked")
    before = sorted(path.relative_to(tree) for path in tree.rglob("*"))

    copy = package_check.tracked_copy(tree, tmp_path / "copy")

    copied = sorted(str(path.relative_to(copy)) for path in copy.rglob("*") if path.is_file())
    assert copied == ["README.md", "pkg/kept.py"]
    assert (copy / "pkg" / "kept.py").read_text() == "pkg/kept.py"
    assert sorted(path.relative_to(tree) for path in tree.rglob("*")) == before


def test_a_module_left_out_of_the_wheel_fails_both_checks(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    broken = _wheel_without(wheel, "datarax/sharding/_ledger.py", tmp_path)
    files = package_check.tracked_package_files(ROOT)
    with pytest.raises(package_check.CheckFailed, match=r"lacks 1 file\(s\): .*_ledger\.py$"):
        package_check.check_wheel(broken, files)
    done = _import_check(broken, tmp_path)
    assert done.returncode == 1
    assert "datarax.sharding: ModuleNotFoundError" in done.stderr
    assert "datarax.sharding._ledger" in done.stderr


def test_a_wheel_that_carries_the_grader_fails_the_check(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    carrying = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as source, zipfile.ZipFile(carrying, "w") as target:
        for item in source.infolist():
            target.writestr(item, source.read(item.filename))
        target.writestr("datarax_grader/_seccomp.py", "")
    with pytest.raises(package_check.CheckFailed, match="holds the grader's files"):
        package_check.check_wheel(carrying, package_check.tracked_package_files(ROOT))


def test_a_file_no_import_needs_is_still_missed(dist: Path, tmp_path: Path) -> None:
    (wheel,) = dist.glob("*.whl")
    broken = _wheel_without(wheel, "datarax/py.typed", tmp_path)
    with pytest.raises(package_check.CheckFailed, match=r"lacks 1 file\(s\): datarax/py\.typed$"):
        package_check.check_wheel(broken, package_check.tracked_package_files(ROOT))


def test_a_module_that_imports_without_its_extra_fails_the_check(
    dist: Path, tmp_path: Path
) -> None:
    # This venv has matplotlib, so datarax.viz imports although no extra is declared.
    (wheel,) = dist.glob("*.whl")
    done = _import_check(wheel, tmp_path, extras=())
    assert done.returncode == 1
    assert "datarax.viz imported, but [viz] is not installed" in done.stderr


def test_the_readme_runnable_blocks_run(tmp_path: Path) -> None:
    code = package_check.runnable_blocks(ROOT / "README.md")
    assert code.count("from datarax") >= 3
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT), **package_check.EIGHT_CPU_DEVICES},
    )
    assert done.returncode == 0, done.stderr
    assert "128-255" in done.stdout  # the RowLedger table: host 1 holds rows 128 to 255

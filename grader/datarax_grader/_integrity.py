"""Knowing that what the grader runs is what was installed, and what it was a moment ago.

- `changed_since_install`: the grader's own files that differ from the hashes pip wrote
  in the distribution's ``RECORD`` (a regular install; a checkout has no such record).
- `snapshot`: every file a new Python process of this installation may run (the
  interpreter, the standard library, site-packages), by size, modification and change
  time. Where a kernel runs as the teacher without namespaces, the grader compares a
  snapshot taken before the first submission with one taken before each later one, so
  a submission that changed the environment spoils no other submission's run.
- `Library`: the library a graded kernel imports, read once from the grader's install;
  each submission gets a fresh read-only copy of it, whose hash (`digest`) is checked
  right before the submission runs.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import shutil
import sys
import sysconfig
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

Snapshot = dict[str, tuple[int, int, int]]


def changed_since_install(distribution: str, package: Path) -> list[str]:
    """The files of `package` whose content differs from `distribution`'s RECORD, or
    that are gone; [] when they all match or no record with hashes exists.

    Example:
        >>> changed_since_install("no-such-distribution", Path("."))
        []
    """
    try:
        files = metadata.distribution(distribution).files or []
    except metadata.PackageNotFoundError:
        return []
    changed = []
    for entry in files:
        path = Path(str(entry.locate()))
        if entry.hash is None or not path.is_relative_to(package) or path.suffix == ".pyc":
            continue
        try:
            data = path.read_bytes()
        except OSError:
            changed.append(str(path))
            continue
        found = base64.urlsafe_b64encode(hashlib.new(entry.hash.mode, data).digest())
        if found.rstrip(b"=").decode() != entry.hash.value:
            changed.append(str(path))
    return changed


def _python_folders() -> list[str]:
    paths = sysconfig.get_paths()
    folders = {paths[key] for key in ("stdlib", "platstdlib", "purelib", "platlib")}
    return sorted(folder for folder in folders if os.path.isdir(folder))


def snapshot(skip: Sequence[Path] = ()) -> Snapshot:
    """{path: (size, modified, changed)} of the interpreter and every file under this
    installation's library folders, those under the folders in `skip` left out."""
    found: Snapshot = {}
    executable = os.path.realpath(sys.executable)
    for path in (sys.executable, executable):
        stat = os.stat(path)
        found[path] = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    stack = _python_folders()
    while stack:
        folder = stack.pop()
        if any(Path(folder).is_relative_to(place) for place in skip):
            continue
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        stat = os.stat(folder)
        found[folder] = (0, stat.st_mtime_ns, stat.st_ctime_ns)  # files added or removed
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                stack.append(entry.path)
            else:
                stat = entry.stat(follow_symlinks=False)
                found[entry.path] = (stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    return found


def differences(before: Snapshot, after: Snapshot, most: int = 5) -> list[str]:
    """Up to `most` paths added, removed or changed between two snapshots.

    Example:
        >>> differences({"a": (1, 2, 3)}, {"a": (1, 2, 4), "b": (0, 0, 0)})
        ['a', 'b']
    """
    paths = sorted(set(before) | set(after))
    return [path for path in paths if before.get(path) != after.get(path)][:most]


def digest(folder: Path) -> str:
    """The SHA-256 of every file under `folder`, with its path.

    Example:
        >>> import tempfile
        >>> empty = Path(tempfile.mkdtemp())
        >>> digest(empty) == digest(empty)
        True
    """
    total = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        total.update(str(path.relative_to(folder)).encode() + b"\0" + path.read_bytes())
    return total.hexdigest()


@dataclasses.dataclass(frozen=True)
class Library:
    """The library a graded kernel imports: `files` (path under the library folder ->
    content) and their `digest`, read once from the grader's own install (the packages
    datarax, datarax_course and datarax_grader, the course without its answer keys)."""

    files: dict[str, bytes]
    digest: str

    @classmethod
    def of(cls, packages: Sequence[Path], left_out: tuple[str, ...]) -> Library:
        """The files of `packages` (no caches), without those named in `left_out`."""
        files = {
            str(Path(package.name) / path.relative_to(package)): path.read_bytes()
            for package in packages
            for path in sorted(package.rglob("*"))
            if path.is_file() and "__pycache__" not in path.parts and path.name not in left_out
        }
        folder = Path(tempfile.mkdtemp(prefix="grade-library-"))
        try:
            for name, content in files.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(content)
            return cls(files, digest(folder))
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    def write(self, folder: Path) -> None:
        """A fresh, read-only copy in `folder`, checked against the digest."""
        for name, content in self.files.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(content)
        if digest(folder) != self.digest:
            raise RuntimeError(f"the copy of the library in {folder} does not match the grader's")
        for path in folder.rglob("*"):
            path.chmod(0o555 if path.is_dir() else 0o444)

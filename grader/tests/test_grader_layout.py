"""The grader's seam with the course: it uses the course's public names alone
(`datarax_course.grading` above all), in its own code and in the code it sends to a
graded kernel; it asks pip for the course of its own minor release; and it reads the
process table through psutil, not ``/proc``.

The grader's tests are left out of the first check: a test may look inside the course
(that the answer keys stay out of a kernel's library, say), and the cheats' notebooks
reach for its private modules on purpose.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

import datarax
import datarax_course
import datarax_grader

GRADER = Path(datarax_grader.__file__).parent
SOURCES = sorted(GRADER.rglob("*.py"))
PYPROJECT = GRADER.parent / "pyproject.toml"
# The course's private modules (``_keys``, ``_core``...), named in code or as files.
COURSE_PRIVATE = sorted(
    path.stem
    for path in Path(datarax_course.__file__).parent.glob("_*.py")
    if not path.stem.startswith("__")
)
# ``datarax_course._x``, ``datarax_course.a._x``: a private name reached through a dot.
DOTTED = re.compile(r"\bdatarax_course(?:\.[A-Za-z]\w*)*\.(_\w*)")
# ``from datarax_course import _x`` (or ``..., _x``): one reached through an import.
FROM = re.compile(r"\bfrom\s+datarax_course[\w.]*\s+import\s+(\([^)]*\)|[^\n;]*)")


def private_names(text: str) -> set[str]:
    """The private names of the course that `text` (code, or a code string) reaches.

    Example:
        >>> sorted(private_names("from datarax_course._core import x; import datarax_course"))
        ['_core']
        >>> sorted(private_names("from datarax_course import grading, _keys as k"))
        ['_keys']
        >>> sorted(private_names("from datarax_course import (\\n    _cases,\\n    check,\\n)"))
        ['_cases']
        >>> private_names("from datarax_course.grading import harvest as _harvest\\nimport _x")
        set()
    """
    found = set(DOTTED.findall(text))
    for names in FROM.findall(text):
        items = names.strip("()").split(",")
        found |= {item.split()[0] for item in items if item.strip().startswith("_")}
    return found


def _strings(tree: ast.AST) -> list[str]:
    """The string constants of `tree`'s code: docstrings left out."""
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def _imported(tree: ast.AST) -> set[str]:
    """What `tree` imports of the course that is private, by its imports' own names."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("datarax_course"):
            parts = (node.module or "").split(".")
            found |= {part for part in parts if part.startswith("_")}
            found |= {alias.name for alias in node.names if alias.name.startswith("_")}
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "datarax_course":
                    found |= {part for part in alias.name.split(".") if part.startswith("_")}
    return found


def test_the_grader_has_sources_to_check() -> None:
    assert GRADER / "grade.py" in SOURCES and GRADER / "_submission.py" in SOURCES


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: path.name)
def test_the_grader_uses_only_the_courses_public_names(path: Path) -> None:
    """Neither its imports, nor its text (code strings sent to a kernel, docstrings), nor
    a file name in its code reaches a private module or name of the course: those may
    change with any release of the course, the grader's contract may not."""
    text = path.read_text(encoding="utf-8")
    tree = ast.parse(text)
    assert not _imported(tree), sorted(_imported(tree))
    assert not private_names(text), sorted(private_names(text))
    files = re.compile(rf"\b({'|'.join(map(re.escape, COURSE_PRIVATE))})\.py\b")
    named = [string for string in _strings(tree) if files.search(string)]
    assert not named, named


def test_the_grader_reads_no_proc() -> None:
    """The process table is psutil's to read; the sandbox only mounts a fresh ``/proc``
    for its namespaces (and links ``/dev/fd`` there), which is no read."""
    readers = [
        f"{path.name}:{node.lineno}"
        for path in SOURCES
        if path.name != "_sandbox.py"
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and node.value.startswith("/proc")
    ]
    assert not readers, readers


def _requirement(name: str) -> Requirement:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    found = [Requirement(text) for text in project["dependencies"]]
    matching = [requirement for requirement in found if requirement.name == name]
    assert len(matching) == 1, (name, project["dependencies"])
    return matching[0]


def test_the_grader_asks_for_the_course_of_the_librarys_minor_release() -> None:
    """The bound on datarax-sharding admits the library's version and its patch releases,
    and neither the minor release before nor the one after: bump it with
    ``datarax.__version__``."""
    requirement = _requirement("datarax-sharding")
    assert "tutorials" in requirement.extras  # nbclient, nbformat, ipykernel
    version = Version(datarax.__version__)
    major, minor = version.major, version.minor
    admitted = [datarax.__version__, f"{major}.{minor}.0", f"{major}.{minor}.99"]
    refused = [f"{major}.{minor + 1}.0", f"{major + 1}.0.0"]
    refused += [f"{major}.{minor - 1}.99"] if minor else []
    specifier = requirement.specifier
    assert [v for v in admitted if not specifier.contains(v, prereleases=True)] == [], (
        f"{requirement} does not admit datarax {datarax.__version__}"
    )
    assert [v for v in refused if specifier.contains(v, prereleases=True)] == [], (
        f"{requirement} admits another minor release than datarax {datarax.__version__}'s"
    )


def test_the_grader_asks_for_psutil() -> None:
    assert _requirement("psutil").name == "psutil"

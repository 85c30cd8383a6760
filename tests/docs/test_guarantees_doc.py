"""docs/guarantees.md: every promise names tests, and every test it names exists.

A renamed or deleted test would otherwise leave a promise that nothing checks.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "guarantees.md"
# A test file in tests/, or in a folder of it: `pipeline/test_x.py::test_y`; the grader's
# tests by their path in the repository: `grader/tests/test_x.py::test_y`.
NAMED = re.compile(r"`((?:\w+/)*test_\w+\.py)::(\w+)(?:\[[^\]]*\])?`")


def _sections() -> dict[str, str]:
    parts = re.split(r"^## ", DOC.read_text(), flags=re.MULTILINE)[1:]
    return {part.splitlines()[0]: part for part in parts}


def _tests_in(path: str) -> set[str]:
    """The test functions of the file at `path` below tests/, or in the repository for the
    grader's (none if there is none)."""
    found = ROOT / path if path.startswith("grader/") else ROOT / "tests" / path
    if not found.is_file():
        return set()
    tree = ast.parse(found.read_text())
    return {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}


def test_every_promise_names_tests() -> None:
    for title, text in _sections().items():
        if "**" not in text:
            continue  # a section without a bold promise
        assert NAMED.search(text), f"'{title}' names no test"


def test_every_named_test_exists() -> None:
    named = NAMED.findall(DOC.read_text())
    assert len(named) > 30
    missing = [f"{file}::{test}" for file, test in named if test not in _tests_in(file)]
    assert not missing, f"docs/guarantees.md names tests that do not exist: {missing}"

"""Every test that starts several JAX processes or runs notebooks carries its marker, so
that `make quick` (``-m "not multihost and not stress and not notebooks"``) leaves it out.

The rule, read from the code: a test is `multihost` when its code, or the code of what it
uses (functions, fixtures, constants of its file, and of `tests/_support`), names
`launch_local` or `jax.distributed`; it is `notebooks` when that code names nbclient,
jupyter_client or runs the grader (``-m datarax_grader.grade``). Docstrings do not
count; the text of scripts a test runs does.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

TESTS = Path(__file__).resolve().parent
GRADER_TESTS = TESTS.parent / "grader" / "tests"
USES = {
    "multihost": re.compile(r"\blaunch_local\b|\bjax\.distributed\b"),
    "notebooks": re.compile(
        r"\bnbclient\b|\bNotebookClient\b|\bjupyter_client\b|'-m', 'datarax_grader(\.grade)?'"
    ),
}
WORD = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?")


def _code(node: ast.AST) -> str:
    """`node` as source, without its docstrings."""
    tree = ast.parse(ast.unparse(node))  # a copy to strip
    for inner in ast.walk(tree):
        body = getattr(inner, "body", None)
        if (
            isinstance(body, list)
            and body
            and isinstance(body[0], ast.Expr)
            and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)
        ):
            inner.body = body[1:] or [ast.Pass()]
    return ast.unparse(tree)


def _definitions(module: str, source: str) -> tuple[dict[str, str], dict[str, str]]:
    """The code of each top-level name of `module` ("module:name"), and what the names it
    imports from `_support` stand for ("module:name" -> "other:name", or "module:alias"
    -> "other:" for a module)."""
    codes: dict[str, str] = {}
    imported: dict[str, str] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            codes[f"{module}:{node.name}"] = _code(node)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        codes[f"{module}:{name.id}"] = _code(node)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("_support"):
            for alias in node.names:
                local = f"{module}:{alias.asname or alias.name}"
                if node.module == "_support":
                    imported[local] = f"{alias.name}:"
                else:
                    imported[local] = f"{node.module.split('.')[1]}:{alias.name}"
    return codes, imported


def _needs(modules: dict[str, str]) -> dict[str, set[str]]:
    """The markers each top-level name of `modules` (name -> source) needs, through
    everything it names, in its module or in another."""
    codes: dict[str, str] = {}
    imported: dict[str, str] = {}
    for module, source in modules.items():
        found, names = _definitions(module, source)
        codes.update(found)
        imported.update(names)
    own_modules = set(modules)
    uses: dict[str, set[str]] = {}
    for key, code in codes.items():
        module = key.split(":")[0]
        uses[key] = set()
        for word in set(WORD.findall(code)):
            first, _, attr = word.partition(".")
            for name in (f"{module}:{first}", f"{module}:{word}"):
                target = imported.get(name, name)
                if target.endswith(":") and attr:
                    target += attr
                uses[key].add(target)
            if first in own_modules and attr:  # a module named in a script's text
                uses[key].add(f"{first}:{attr}")
        uses[key] = {target for target in uses[key] if target in codes and target != key}
    needs = {key: {m for m, pattern in USES.items() if pattern.search(codes[key])} for key in codes}
    changed = True
    while changed:
        changed = False
        for key, targets in uses.items():
            more = set().union(*(needs[target] for target in targets)) - needs[key]
            if more:
                needs[key] |= more
                changed = True
    return needs


def _marked(source: str) -> dict[str, set[str]]:
    """The markers on each test function of a module: its own and the module's."""
    tree = ast.parse(source)
    module_marks: set[str] = set()
    marks: dict[str, set[str]] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            module_marks |= set(re.findall(r"\bmark\.(\w+)", ast.unparse(node.value)))
        elif isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
            decorators = " ".join(ast.unparse(decorator) for decorator in node.decorator_list)
            marks[node.name] = set(re.findall(r"\bmark\.(\w+)", decorators))
    return {name: found | module_marks for name, found in marks.items()}


def unmarked(tests: dict[str, str], support: dict[str, str]) -> list[str]:
    """ "file::test needs marker" for each test of `tests` (module -> source) that needs a
    marker it lacks, `support` being the modules of `_support` (module -> source)."""
    needs = _needs({**tests, **support})
    return [
        f"{module}.py::{test} needs @pytest.mark.{marker}"
        for module, source in tests.items()
        for test, marks in _marked(source).items()
        for marker in sorted(needs[f"{module}:{test}"] - marks)
    ]


def test_every_test_that_starts_a_cluster_or_runs_notebooks_is_marked() -> None:
    paths = [path for path in TESTS.rglob("test_*.py") if path.name != Path(__file__).name]
    paths += GRADER_TESTS.glob("test_*.py")
    tests = {path.stem: path.read_text() for path in paths}
    assert len(tests) == len(paths) > 50  # file names are unique across the folders
    support = {path.stem: path.read_text() for path in (TESTS / "_support").glob("*.py")}
    assert not unmarked(tests, support)


FAKE_TEST = '''
"""Not under launch_local."""
import pytest
from _support import targets
from _support.targets import starts_a_cluster
from datarax.distributed import launch_local

SCRIPT = "import jax; jax.distributed.initialize()"

def _run():
    return launch_local(targets.combine)

@pytest.fixture
def kernel():
    import nbclient

def test_direct(): launch_local(print)
def test_through_a_function(): _run()
def test_through_a_script(tmp_path): (tmp_path / "s.py").write_text(SCRIPT)
def test_through_support(): starts_a_cluster()
def test_through_a_module_in_support(): targets.also_starts_one()
def test_named_in_a_script(): run("from _support import targets; targets.also_starts_one()")
def test_through_a_fixture(kernel): pass
def test_grader(): run([sys.executable, "-m", "datarax_grader.grade"])
def test_plain():
    """Not under launch_local."""
    targets.combine()

@pytest.mark.multihost
def test_marked(): _run()
'''
FAKE_SUPPORT = """
from datarax.distributed import launch_local
def starts_a_cluster():
    launch_local(combine)
def also_starts_one():
    starts_a_cluster()
def combine():
    return 1
"""


def test_the_check_finds_each_way_a_test_can_start_a_cluster_or_a_kernel() -> None:
    found = unmarked({"test_fake": FAKE_TEST}, {"targets": FAKE_SUPPORT})
    assert found == [
        f"test_fake.py::{test} needs @pytest.mark.{marker}"
        for test, marker in [
            ("test_direct", "multihost"),
            ("test_through_a_function", "multihost"),
            ("test_through_a_script", "multihost"),
            ("test_through_support", "multihost"),
            ("test_through_a_module_in_support", "multihost"),
            ("test_named_in_a_script", "multihost"),
            ("test_through_a_fixture", "notebooks"),
            ("test_grader", "notebooks"),
        ]
    ]
    marked = "import pytest\npytestmark = [pytest.mark.multihost, pytest.mark.notebooks]\n"
    assert unmarked({"test_fake": marked + FAKE_TEST}, {"targets": FAKE_SUPPORT}) == []

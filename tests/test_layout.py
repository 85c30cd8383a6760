"""The layout docs/api.md describes: one package per concern, data flowing one way, the
library apart from the course and the grader, the earlier module paths still importing,
and the line counts it states."""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "datarax"
COURSE = ROOT / "datarax_course"
GRADER = ROOT / "grader" / "datarax_grader"
CORE = ("sharding", "pipeline", "distributed")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


def _wing_imports(wing: str) -> set[str]:
    return {name for path in (PACKAGE / wing).rglob("*.py") for name in _imports(path)}


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _import_graph() -> dict[str, set[str]]:
    """Each module of datarax and the modules of datarax it imports by name, wherever the
    import statement is (a function's body too), outside ``if TYPE_CHECKING:``."""
    modules = {_module_name(path): path for path in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        tree = ast.parse(path.read_text())
        skipped = {
            id(inner)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
            for inner in ast.walk(node)
        }
        targets: set[str] = set()
        for node in ast.walk(tree):
            if id(node) in skipped:
                continue
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    submodule = f"{node.module}.{alias.name}"
                    targets.add(submodule if submodule in modules else node.module)
        graph[name] = {target for target in targets if target in modules and target != name}
    return graph


def test_no_module_imports_itself_back() -> None:
    """No import circle anywhere in the package, however long."""
    graph, finished, path = _import_graph(), set(), []

    def visit(module: str) -> None:
        if module in path:
            circle = [*path[path.index(module) :], module]
            raise AssertionError("import circle: " + " -> ".join(circle))
        if module in finished:
            return
        path.append(module)
        for target in sorted(graph[module]):
            visit(target)
        path.pop()
        finished.add(module)

    for module in sorted(graph):
        visit(module)


def test_data_flows_one_way() -> None:
    assert not any(name.startswith("datarax.pipeline") for name in _wing_imports("sharding"))
    for wing in CORE:
        teaching = {
            n for n in _wing_imports(wing) if n.startswith(("datarax.viz", "datarax_course"))
        }
        assert not teaching, (wing, teaching)


def test_the_library_imports_neither_the_course_nor_the_grader() -> None:
    """No import statement of the library names them (the deprecated paths reach the
    course by a module name in a string, only when an old name is read)."""
    found = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in PACKAGE.rglob("*.py")
        for name in _imports(path)
        if name.startswith(("datarax_course", "datarax_grader"))
    }
    assert not found, sorted(found)


# The one way the library reaches the course: names that 0.2.0 had in the library, read
# from their deprecated paths, load the course by its module name (a string), only when
# such a name is read. Each goes when its path stops working.
LIBRARY_NAMES_OF_THE_COURSE = {
    "datarax/_deprecated.py": {"datarax_course"},  # datarax.exercises.check, ...
    "datarax/viz/__init__.py": {"datarax_course.figures"},  # datarax.viz.plot_devices, ...
}


def test_only_the_deprecated_paths_name_the_course_and_none_the_grader() -> None:
    found: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(r"datarax_(course|grader)(\.\w+)*", value):
                found.setdefault(path.relative_to(ROOT).as_posix(), set()).add(value)
    assert found == LIBRARY_NAMES_OF_THE_COURSE


def test_importing_the_library_imports_nothing_of_the_course() -> None:
    code = (
        "import sys, datarax, datarax.sharding, datarax.pipeline, datarax.distributed, "
        "datarax.viz\n"
        "print(sorted(m for m in sys.modules if m.startswith(('datarax_course', "
        "'datarax_grader'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_importing_the_course_starts_no_jax_backend() -> None:
    """The grader imports the course, then sets its devices up: no module of the course may
    make a JAX array when imported."""
    code = (
        "import datarax_course\nfrom jax._src import xla_bridge\n"
        "print(xla_bridge.backends_are_initialized())"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd="/")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def _private_names(path: Path) -> set[str]:
    """What `path` imports of the library that the library keeps private: a module whose
    path has a part starting with ``_``, or a name starting with ``_``."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module.split(".")[0] != "datarax":
                continue
            if any(part.startswith("_") for part in node.module.split(".")):
                found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names if a.name.startswith("_"))
        elif isinstance(node, ast.Import):
            found.update(
                alias.name
                for alias in node.names
                if alias.name.split(".")[0] == "datarax"
                and any(part.startswith("_") for part in alias.name.split("."))
            )
    return found


def _private_imports(package: Path) -> dict[str, set[str]]:
    """{private module or name of the library: the files of `package` that import it}."""
    found: dict[str, set[str]] = {}
    for path in package.rglob("*.py"):
        for name in _private_names(path):
            found.setdefault(name, set()).add(path.relative_to(ROOT).as_posix())
    return found


# The library's private modules the course may import, and what it takes from each: checks
# whose wording the course's figures and checkers share with the library (the course
# imports them in datarax_course/_checks.py and figures/_frame.py). Exactly these: one the
# course stops importing leaves the list.
COURSE_MAY_IMPORT = {
    "datarax._extras": "require: a missing optional dependency, named with its extra",
    "datarax._trees": "check_not_deleted: a donated or deleted array",
    "datarax._validate": "the plain argument checks: ints, numbers, strings, mappings",
    "datarax.sharding._placement": "device_spans: every device's block of an array",
    "datarax.sharding._sharding_checks": "a PartitionSpec against a mesh and a leaf's shape",
    "datarax.viz._blocks": "a figure's width, size and title",
}


def test_the_course_uses_public_names_and_the_named_private_modules_only() -> None:
    found = _private_imports(COURSE)
    assert set(found) == set(COURSE_MAY_IMPORT), {
        "not allowed": {name: found[name] for name in set(found) - set(COURSE_MAY_IMPORT)},
        "allowed, not imported": sorted(set(COURSE_MAY_IMPORT) - set(found)),
    }


def test_the_grader_uses_the_librarys_public_names_only() -> None:
    assert _private_imports(GRADER) == {}


def test_the_course_never_imports_the_grader() -> None:
    found = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in COURSE.rglob("*.py")
        for name in _imports(path)
        if name.startswith("datarax_grader")
    }
    assert not found, sorted(found)


def test_no_module_sits_loose_at_the_root() -> None:
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == [
        "__init__.py",
        "_caches.py",
        "_compat.py",
        "_deprecated.py",
        "_exchange.py",
        "_extras.py",
        "_syscompat.py",
        "_trees.py",
        "_validate.py",
        "errors.py",
    ]


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("datarax.sharding.array_sharder", "ArraySharder"),
        ("datarax.sharding.jax_process_sharder", "JaxProcessSharderModule"),
        ("datarax.sources", "ArraySource"),
        ("datarax.prefetch", "prefetch_to_device"),
        ("datarax.checkpoint", "Checkpoints"),
        ("datarax.devices", "setup_devices"),
        ("datarax.exercises", "check"),
    ],
)
def test_the_seed_and_earlier_paths_still_import(path: str, name: str) -> None:
    """The seed's paths are the API; the earlier ones are deprecated, and warn."""
    module = importlib.import_module(path)
    if path.startswith("datarax.sharding."):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert getattr(module, name) is not None
    else:
        with pytest.deprecated_call():
            assert getattr(module, name) is not None


def _files(wing: str) -> list[Path]:
    """The modules of `wing`: a folder of the core (``"sharding"``), the core's root
    modules (``"(root)"``) or a folder of the repository (``"datarax_course"``)."""
    if wing == "(root)":
        return sorted(PACKAGE.glob("*.py"))
    folder = PACKAGE / wing if wing in (*CORE, "viz") else ROOT / wing
    return sorted(folder.rglob("*.py"))


def _count(wings: tuple[str, ...]) -> tuple[int, int, int]:
    """(modules, lines, lines of code: no docstrings, comments or blank lines) of `wings`."""
    modules = lines = code = 0
    for wing in wings:
        for path in _files(wing):
            text = path.read_text()
            docs: set[int] = set()
            for node in ast.walk(ast.parse(text)):
                body = getattr(node, "body", None)
                if isinstance(body, list) and body and isinstance(body[0], ast.Expr):
                    value = body[0].value
                    if isinstance(value, ast.Constant) and isinstance(value.value, str):
                        docs.update(range(body[0].lineno, (body[0].end_lineno or 0) + 1))
            rows = text.splitlines()
            modules += 1
            lines += len(rows)
            code += sum(
                1
                for number, row in enumerate(rows, 1)
                if row.strip() and not row.strip().startswith("#") and number not in docs
            )
    return modules, lines, code


def test_the_line_counts_in_the_docs_hold() -> None:
    table = (ROOT / "docs" / "api.md").read_text()
    rows = {
        "`datarax/sharding/`": ("sharding",),
        "`datarax/pipeline/`": ("pipeline",),
        "`datarax/distributed/`": ("distributed",),
        "`datarax/` (root)": ("(root)",),
        "`datarax/viz/`": ("viz",),
        "library in all": (*CORE, "viz", "(root)"),
        "`datarax_course/`": ("datarax_course",),
        "`grader/datarax_grader/`": ("grader/datarax_grader",),
    }
    for label, wings in rows.items():
        found = re.search(rf"^\| {re.escape(label)} \|.*\| ([\d,]+) \| ([\d,]+) \|$", table, re.M)
        assert found, label
        stated = [int(number.replace(",", "")) for number in found.groups()]
        for said, counted in zip(stated, _count(wings)[1:], strict=True):
            assert abs(said - counted) <= 0.1 * counted, (label, said, counted)


def test_the_readme_states_the_cores_lines_of_code() -> None:
    """The README's "about N lines of code" counts the library as the API page's table's
    "library in all"."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"about ([\d,]+) lines of code, not counting docstrings", readme)
    assert found, "the README no longer states the core's size"
    stated = int(found.group(1).replace(",", ""))
    counted = _count((*CORE, "viz", "(root)"))[2]
    assert abs(stated - counted) <= 0.1 * counted, (stated, counted)


def test_only_the_fence_reads_proc() -> None:
    """`datarax._syscompat` holds every read of ``/proc``; the grader's sandbox only mounts
    a fresh one for its namespaces (and links ``/dev/fd`` there), which is not a read."""
    readers = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("_syscompat.py", "_sandbox.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and value.startswith("/proc"):
                readers.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert not readers, readers


FENCES = ("_syscompat.py", "_compat.py")


def _used_names(path: Path) -> set[str]:
    """Every name `path` reads, imports by name or reads as an attribute."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            used.add(node.id)
        elif isinstance(node, ast.Attribute):
            used.add(node.attr)
        elif isinstance(node, ast.ImportFrom):
            used.update(alias.name for alias in node.names)
    return used


@pytest.mark.parametrize("fence", FENCES)
def test_every_function_of_a_fence_has_a_caller(fence: str) -> None:
    """A fence holds what the library needs of private APIs and nothing more: each of its
    functions is called from the library, or from the benchmarks, which measure the
    library with the same guarded names (a private helper, from the fence itself)."""
    tree = ast.parse((PACKAGE / fence).read_text())
    functions = [node.name for node in tree.body if isinstance(node, ast.FunctionDef)]
    callers = [*PACKAGE.rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    used = set().union(*(_used_names(path) for path in callers if path.name != fence))
    used |= _used_names(PACKAGE / fence) & {name for name in functions if name.startswith("_")}
    assert [name for name in functions if name not in used] == []

"""Conventions every tutorial notebook follows; runs over whatever tutorials/*.ipynb exist.

Each notebook is paired with a jupytext md:myst file and in sync with it, is committed
without outputs, is ruff clean, opens with Colab and Kaggle badges, goals, the guarded install
cell and the device setup, and has a hidden quiz answer, an exercise with a solution
cell, takeaways and a "What's next" section.
"""

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jupytext
import pytest
from _support.curriculum import CONCEPTS, LESSONS

TUTORIALS = Path(__file__).parents[2] / "tutorials"
NOTEBOOKS = sorted(TUTORIALS.glob("[0-9][0-9]_*.ipynb"))
INSTALL_CELL = """\
# On Colab or a fresh runtime, install the library; skipped when it is already installed.
import importlib.metadata
import importlib.util

if importlib.util.find_spec("datarax") is None:
    %pip install --quiet "datarax-sharding[playground,checkpoint] @ git+https://github.com/datarax-sharding/datarax-sharding"
print("datarax-sharding", importlib.metadata.version("datarax-sharding"))"""
DEVICE_CELL = """\
import jax

from datarax.distributed import setup_devices

print(setup_devices(8{keep}).message)"""
# The lessons that time work on a real chip keep it beside the simulated devices; the
# others leave it unstarted (starting a TPU costs seconds).
KEEP_THE_CHIP = {"06_data_parallel_training", "07_performance"}
REPOSITORY_FILES = "https://raw.githubusercontent.com/datarax-sharding/datarax-sharding/main/"
# One notation everywhere (defined on docs/concepts.md); these phrasings contradict it
# or state something wrong.
BANNED = [
    r"addressable everywhere",
    r"P\s*[\u00d7x*]\s*D\)",  # the per-device batch comes from the mesh, not from P x D
    r"one all-reduce",
    r"stays at 100 MB",
    r"6\.5 to 15 times",
    r"the seed's",
    r"project's documentation",
    r"dims 2\+ in",
    r"\[i\*n//P",
    r"lists (its|the) chips as",  # on TPU v2/v3 a JAX device is a TensorCore, two per chip
    r"exactly as Grain's",  # Grain's ShardByJaxProcess defaults to drop_remainder=False
    r"biased slice",  # each global batch takes rows from every host's block
    r"`size \+ 1` batches",  # a prefetcher can hold size + 2 on the devices
    r"JAX's own time-outs end the job",  # only once the finished host's process exits
    r"shorter than either leaf",
    r"gives 8 real chips",  # untried: no notebook has run on real accelerators
    r"575 on a TPU",  # a v5e-8 ring sends on 2 links, and overlaps only the backward pass
    r"close to the 34",  # Korthikanti et al.'s 34 counts bytes: 17 of lesson 14's units
    r"few tens of\s+kilobytes",  # at 1 µs a hop, 8 chips' latency and bandwidth cross at 0.4-1.4 MB
    r"threshold is a\s+lower bound",  # at peak FLOP/s a DCN threshold is an upper bound
    r"bfloat16 moments",  # mu_dtype sets the first moment's dtype alone
    r"jax 0\.7\.2 and 0\.10\.2 both",  # what one JAX reports, the cell asserts for that one
    r"not a block\s+boundary",  # Explicit mode refuses slices whose size the axis does not divide
]
BADGE = (
    "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
    "(https://colab.research.google.com/github/datarax-sharding/datarax-sharding/blob/main/"
    "tutorials/{name})"
)
KAGGLE_BADGE = (
    "[![Open In Kaggle](https://kaggle.com/static/images/open-in-kaggle.svg)]"
    "(https://kaggle.com/kernels/welcome?src=https://github.com/datarax-sharding/"
    "datarax-sharding/blob/main/tutorials/{name})"
)


def _cells(path: Path) -> list[tuple[str, str]]:
    return [(cell.cell_type, cell.source.strip()) for cell in jupytext.read(path).cells]


def _markdown(path: Path) -> str:
    return "\n\n".join(source for kind, source in _cells(path) if kind == "markdown")


def test_there_are_notebooks_and_the_readme_lists_them() -> None:
    assert NOTEBOOKS, f"no notebooks found in {TUTORIALS}"
    readme = (TUTORIALS / "README.md").read_text()
    for name in LESSONS:
        assert f"({name}.ipynb)" in readme, f"tutorials/README.md does not link {name}.ipynb"
    for notebook in NOTEBOOKS:
        assert notebook.name in readme, f"tutorials/README.md does not link {notebook.name}"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_paired_with_myst_markdown_and_in_sync(notebook: Path) -> None:
    twin = notebook.with_suffix(".md")
    assert twin.exists(), f"{notebook.name} has no paired {twin.name} (jupytext --set-formats)"
    for path in (notebook, twin):
        metadata = jupytext.read(path).metadata
        assert metadata["jupytext"]["formats"] == "ipynb,md:myst", path.name
        assert metadata["kernelspec"]["name"] == "python3", path.name
    assert _cells(notebook) == _cells(twin), (
        f"{notebook.name} and {twin.name} differ: run `jupytext --sync {twin}`"
    )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_without_outputs(notebook: Path) -> None:
    for number, cell in enumerate(json.loads(notebook.read_text())["cells"]):
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [], f"{notebook.name} cell {number} has outputs"
            assert cell["execution_count"] is None, f"{notebook.name} cell {number} was run"


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]])
def test_notebooks_are_ruff_clean(command: list[str]) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", *command, "--no-cache", *map(str, NOTEBOOKS)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=TUTORIALS.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _extras_with_what_they_include(
    name: str, extras: dict[str, list[str]], wanted: set[str]
) -> set[str]:
    """`wanted` and every extra they pull in through a "{name}[...]" requirement."""
    found = set(wanted)
    for extra in wanted:
        for requirement in extras[extra]:
            included = re.fullmatch(rf"{re.escape(name)}\[(.+)\]", requirement)
            if included:
                more = set(included.group(1).split(","))
                found |= _extras_with_what_they_include(name, extras, more)
    return found


def test_install_cell_installs_this_distribution_with_what_the_notebooks_use() -> None:
    pyproject = tomllib.loads((TUTORIALS.parent / "pyproject.toml").read_text())
    name, extras = pyproject["project"]["name"], pyproject["project"]["optional-dependencies"]
    requested = re.search(rf'"{re.escape(name)}\[(.+)\] @ git\+https://', INSTALL_CELL)
    assert requested, f"the install cell does not install {name} with extras from git"
    wanted = set(requested.group(1).split(","))
    assert wanted <= set(extras), f"the install cell asks for unknown extras {wanted - set(extras)}"
    # matplotlib (viz), the playground (ipywidgets) and Checkpoints (orbax-checkpoint);
    # not the tutorials extra, whose JupyterLab a notebook already running has no use for.
    installed = _extras_with_what_they_include(name, extras, wanted)
    assert {"viz", "playground", "checkpoint"} <= installed, installed
    assert "tutorials" not in installed
    assert f'importlib.metadata.version("{name}")' in INSTALL_CELL


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_opens_with_badge_goals_install_and_devices(notebook: Path) -> None:
    cells = _cells(notebook)
    code = [number for number, (kind, _) in enumerate(cells) if kind == "code"]
    assert len(code) >= 2, f"{notebook.name} needs an install and a device-setup cell"
    intro = "\n\n".join(source for _, source in cells[: code[0]])
    assert intro.startswith("# "), f"{notebook.name} must open with a '# ' title"
    assert BADGE.format(name=notebook.name) in intro, f"{notebook.name}: Colab badge missing"
    assert KAGGLE_BADGE.format(name=notebook.name) in intro, f"{notebook.name}: no Kaggle badge"
    goals = intro.partition("In this notebook you will")[2]
    assert goals, f"{notebook.name}: no 'In this notebook you will' goals before the install cell"
    count = len(re.findall(r"^\s{0,3}(?:[-*]|\d+\.)\s", goals, flags=re.MULTILINE))
    assert 3 <= count <= 5, f"{notebook.name} lists {count} goals; list 3 to 5"
    assert cells[code[0]][1] == INSTALL_CELL, f"{notebook.name}: first code cell is not the install"
    keeps = notebook.stem in KEEP_THE_CHIP
    setup = DEVICE_CELL.format(keep=", keep_accelerator=True" if keeps else "")
    assert cells[code[1]][1] == setup, f"{notebook.name}: second code cell is not the setup"
    uses_the_chip = any(
        "accelerator_devices()" in source for kind, source in cells if kind == "code"
    )
    assert uses_the_chip == keeps, f"{notebook.name}: keeps the chip without using it, or not"
    between = " ".join(source for _, source in cells[code[0] + 1 : code[1]])
    assert "simulated" in between, f"{notebook.name}: explain the simulated devices above setup"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_has_takeaways_quiz_exercise_and_next_steps(notebook: Path) -> None:
    text = _markdown(notebook)
    assert "**Takeaway:**" in text, f"{notebook.name}: no bold **Takeaway:** line"
    assert re.search(r"<details>\s*<summary>Answer</summary>.+?</details>", text, re.DOTALL), (
        f"{notebook.name}: no quiz answer hidden in <details><summary>Answer</summary>"
    )
    cells = _cells(notebook)
    exercise = next(
        (n for n, (kind, src) in enumerate(cells) if kind == "markdown" and "Exercise" in src),
        None,
    )
    assert exercise is not None, f"{notebook.name}: no Exercise section"
    assert any(kind == "code" for kind, _ in cells[exercise + 1 :]), (
        f"{notebook.name}: the exercise has no solution code cell after it"
    )
    assert re.search(r"^#+ .*Takeaways", text, re.MULTILINE), f"{notebook.name}: no Takeaways"
    next_steps = re.split(r"^#+ .*What's next", text, flags=re.MULTILINE)
    assert len(next_steps) == 2, f"{notebook.name}: no single 'What's next' heading"
    links = re.findall(r"\]\(([^)]+)\)", next_steps[1])
    if notebook.stem in LESSONS[:-1]:
        following = LESSONS[LESSONS.index(notebook.stem) + 1] + ".ipynb"
        assert following in links, f"{notebook.name}: 'What's next' does not link {following}"
    assert any("datarax/" in link for link in links), f"{notebook.name}: no link to the API"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_images_from_this_repository_exist_and_show_on_colab(notebook: Path) -> None:
    for link in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", _markdown(notebook)):
        if link.startswith(REPOSITORY_FILES):
            path = TUTORIALS.parent / link.removeprefix(REPOSITORY_FILES)
            assert path.is_file(), f"{notebook.name} shows {link}, but {path} does not exist"
        else:  # a relative path would not resolve on Colab, which opens the file alone
            assert link.startswith("https://"), (
                f"{notebook.name} shows {link}; link this repository's images as "
                f"{REPOSITORY_FILES}<path> so that they also show on Colab"
            )


def _concept_marks(kind: str) -> dict[int, list[str]]:
    """Concept number -> notebooks whose `kind` ("Quiz" or "Exercise") cells drill it."""
    marks: dict[int, list[str]] = {}
    for notebook in NOTEBOOKS:
        for cell_kind, source in _cells(notebook):
            if cell_kind != "markdown" or not re.search(rf"^#+ .*{kind}", source, re.MULTILINE):
                continue
            for found in re.findall(r"<!-- concepts: ([\d, ]+) -->", source):
                for number in found.split(","):
                    marks.setdefault(int(number), []).append(notebook.stem)
    return marks


@pytest.mark.parametrize("kind", ["Quiz", "Exercise"])
def test_every_concept_has_a_quiz_and_an_exercise(kind: str) -> None:
    marks = _concept_marks(kind)
    missing = {n: name for n, name in CONCEPTS.items() if n not in marks}
    assert not missing, f"no {kind.lower()} drills concepts {missing}"
    assert set(marks) <= set(CONCEPTS), sorted(set(marks) - set(CONCEPTS))


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_exercises_use_the_exercise_form(notebook: Path) -> None:
    """Reader cell (TODO) -> check() -> hidden solution cell -> the same check, asserted."""
    from datarax_course import _core

    cells = jupytext.read(notebook).cells
    todo = [n for n, c in enumerate(cells) if c.cell_type == "code" and "TODO" in c.source]
    assert todo, f"{notebook.name}: no exercise cell with a TODO for the reader"
    for number in todo:
        code = [c for c in cells[number + 1 :] if c.cell_type == "code"]
        assert len(code) >= 3, f"{notebook.name} cell {number}: exercise form incomplete"
        check, solution, asserted = code[:3]
        name = re.search(r'check\("([\w.]+)"', check.source)
        assert name, f"{notebook.name} cell {number}: the next code cell must call check(...)"
        assert name.group(1) in _core._CHECKERS, f"{notebook.name}: no checker {name.group(1)}"
        assert solution.source.startswith("# @title Solution"), (
            f"{notebook.name}: {solution.source[:60]}"
        )
        assert solution.metadata.get("jupyter", {}).get("source_hidden") is True, notebook.name
        assert solution.metadata.get("cellView") == "form", notebook.name
        for cell in (solution, asserted):
            assert "solution" in cell.metadata.get("tags", []), f"{notebook.name}: tag solution"
        assert f'assert check("{name.group(1)}"' in asserted.source.replace(
            "exercises.check", "check"
        )


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_one_notation_and_no_known_wrong_claims(notebook: Path) -> None:
    text = _markdown(notebook)
    for pattern in BANNED:
        found = re.search(pattern, text)
        assert not found, f"{notebook.name} says {found.group(0)!r}; see BANNED in this test"

"""`make student-notebooks` writes copies without solutions, and each copy runs top to
bottom with the reader's placeholders, on meshes that do not list devices in
`jax.devices()` order.

One execution per notebook proves both: right after the device set-up cell, a cell is
inserted that wraps `jax.make_mesh` so that every mesh lists its devices in a TPU
v3-8's order ([0, 1, 2, 3, 6, 7, 4, 5] in each group of 8), as `jax.make_mesh` does on
that chip. A notebook that assumed `jax.devices()` order, or a cell that needed a
solution, fails here.
"""

import re
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).parents[1]
NOTEBOOKS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.ipynb"))
STAMP = ".venv/.installed"  # the Makefile's venv stamp: never rebuilt from a test
TPU_V3_8_ORDER = [0, 1, 2, 3, 6, 7, 4, 5]
PERMUTE_MESHES = f"""\
# Inserted by tests/test_student_notebooks.py: meshes list devices in a TPU v3-8's order.
import jax as _jax
import numpy as _np

_make_mesh = _jax.make_mesh


def _tpu_v3_order(axis_shapes, axis_names, *args, **kwargs):
    mesh = _make_mesh(axis_shapes, axis_names, *args, **kwargs)
    devices = _np.asarray(mesh.devices)
    if devices.size % 8:
        return mesh
    order = devices.reshape(-1, 8)[:, {TPU_V3_8_ORDER}].reshape(devices.shape)
    return _jax.sharding.Mesh(order, mesh.axis_names, axis_types=mesh.axis_types)


_jax.make_mesh = _tpu_v3_order
assert [d.id for d in _jax.make_mesh((8,), ("x",)).devices] == {TPU_V3_8_ORDER}"""


@pytest.fixture(scope="module")
def student_copies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("student-notebooks")
    done = subprocess.run(
        [
            "make",
            "-s",
            "-o",
            STAMP,
            "student-notebooks",
            f"PY={sys.executable}",
            f"STUDENT_NOTEBOOKS={folder}",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return folder


def _code(cell: nbformat.NotebookNode) -> bool:
    return cell.cell_type == "code"


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_student_copy_has_no_solutions_and_runs_on_permuted_meshes(
    notebook: Path, student_copies: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = nbformat.read(notebook, as_version=4)
    copy = nbformat.read(student_copies / notebook.name, as_version=4)
    solutions = [c for c in original.cells if "solution" in c.metadata.get("tags", [])]
    assert solutions, f"{notebook.name} has no cell tagged solution"
    assert not [c for c in copy.cells if "solution" in c.metadata.get("tags", [])]
    assert not [c for c in copy.cells if c.source.startswith("# @title Solution")]
    assert len(copy.cells) == len(original.cells) - len(solutions)
    todo = [c.source for c in original.cells if _code(c) and "TODO" in c.source]
    assert todo == [c.source for c in copy.cells if _code(c) and "TODO" in c.source]

    setup = [n for n, c in enumerate(copy.cells) if _code(c) and "setup_devices(" in c.source]
    assert setup, f"{notebook.name}: no device set-up cell to insert the permutation after"
    copy.cells.insert(setup[0] + 1, nbformat.v4.new_code_cell(PERMUTE_MESHES))
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    client = NotebookClient(
        copy,
        timeout=120,
        kernel_name="python3",
        resources={"metadata": {"path": str(notebook.parent)}},
    )
    client.execute()  # raises CellExecutionError, naming the cell, on the first failure

    checks = [c for c in copy.cells if _code(c) and re.match(r'check\("', c.source)]
    for cell in checks:  # the placeholders were checked, and said so without raising
        printed = "".join(o.get("text", "") for o in cell.outputs)
        assert "Not yet: not answered yet" in printed, (notebook.name, cell.source, printed)

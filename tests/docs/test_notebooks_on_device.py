"""The notebooks-on-a-device runner: rows it could not run, paths that are not notebooks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from benchmarks import notebooks_on_device as runner

ROOT = Path(__file__).resolve().parents[2]


def test_a_row_without_a_result_still_makes_the_table() -> None:
    rows = [
        {"notebook": "a.ipynb", "passed": False, "seconds": 3.0, "error": "boom", "chip": None},
        runner.not_run(Path("b.ipynb"), "no sockets"),
    ]
    table = runner.markdown(rows)
    assert "| a.ipynb | no: code cell -: boom |" in table
    assert "| b.ipynb | not run: no sockets |" in table


def test_the_notebooks_that_start_local_clusters_are_those_calling_launch_local() -> None:
    tutorials = ROOT / "tutorials"
    assert runner.needs_sockets(tutorials / "04_many_hosts.ipynb")
    assert not runner.needs_sockets(tutorials / "02_sharding_a_batch.ipynb")


def test_a_path_that_is_no_notebook_is_refused_by_name(tmp_path: Path) -> None:
    missing = tmp_path / "nope.ipynb"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.notebooks_on_device",
            str(missing),
            "--out",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert f"no notebook at {missing}" in done.stderr

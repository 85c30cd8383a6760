"""`make device-check` runs on any machine: here, without a GPU or CuPy, on a tiny batch.

The unit-test step is exercised on a few throwaway test files, so that a module that
cannot be imported for want of a dependency is reported as not run while every real
failure is still counted.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

from benchmarks import device_check

REPO = Path(__file__).resolve().parents[2]
JAX_CANDIDATES = {
    f"{how}, {sharding}"
    for how in ("ArraySharder.shard", "jax.device_put")
    for sharding in ("NamedSharding", "SingleDeviceSharding")
}


def test_runs_on_a_tiny_batch_and_says_what_it_could_not_measure(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "benchmarks.device_check", "--out", str(tmp_path)]
    command += ["--rows", "8", "--side", "4", "--rounds", "3", "--skip-tests"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stdout + done.stderr

    results = json.loads((tmp_path / "device.json").read_text())
    report = (tmp_path / "device.md").read_text()
    placement = results["placement"]
    assert placement["batch"] == {"shape": [8, 4, 4, 3], "dtype": "uint8", "bytes": 384}
    assert placement["median_ms"].keys() >= JAX_CANDIDATES
    assert all(ms > 0 for ms in placement["median_ms"].values())
    assert placement["ratios"]["shard / device_put, NamedSharding"] > 0
    if placement["gpu_available"]:
        assert placement["device"]["platform"] == "gpu"
    else:
        assert "No GPU here" in report
    copies = {device_check.PINNED, device_check.PAGEABLE}
    if placement["pinned_copy_available"]:
        assert copies <= placement["median_ms"].keys()
        assert placement["ratios"]["shard / pinned copy, NamedSharding"] > 0
    else:
        assert not copies & placement["median_ms"].keys()
        assert "No pinned or pageable copy" in report

    plan = results["setup_devices"]
    assert plan["num_devices"] >= 8
    assert plan["jax_device_count"] == plan["num_devices"]
    assert plan["message"] in report
    assert "unit_tests" not in results


def test_tests_missing_a_module_are_not_run_and_failures_are_counted(tmp_path: Path) -> None:
    (tmp_path / "test_needs_missing.py").write_text("import not_installed_xyz\n")
    (tmp_path / "test_broken.py").write_text("raise RuntimeError('broken at import')\n")
    (tmp_path / "test_mixed.py").write_text(
        textwrap.dedent(
            """
            import pytest

            def test_passes():
                assert True

            def test_fails():
                assert 1 == 2, "one is not two"

            def test_imports_a_missing_module():
                import also_not_installed_xyz

            @pytest.mark.skip(reason="shown as a skip")
            def test_skipped():
                pass
            """
        )
    )
    result = device_check.tests_step([str(tmp_path)], timeout_s=120)

    assert result["exit_code"] == 1 and not result["timed_out"]
    assert result["counts"] == {"passed": 1, "failed": 3, "skipped": 1, "not_run_modules": 1}
    [not_run] = result["not_run"]
    assert not_run["module"].endswith("test_needs_missing")
    assert not_run["missing"] == "not_installed_xyz"
    messages = {re.split("[.:]", item["test"])[-1]: item["message"] for item in result["failures"]}
    assert "one is not two" in messages["test_fails"]
    assert "also_not_installed_xyz" in messages["test_imports_a_missing_module"]
    assert "broken at import" in messages["test_broken"]
    lacking = {item["missing"] for item in result["failures"]}
    assert lacking == {None, "also_not_installed_xyz"}
    report = device_check.markdown({"machine": device_check.machine(), "unit_tests": result})
    assert "test modules not run: 1" in report
    assert "missing here: also_not_installed_xyz." in report
    assert result["skips"][0]["reason"] == "shown as a skip"

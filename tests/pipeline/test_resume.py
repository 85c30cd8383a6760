"""Preempted and resumed on another process count: the same rows and the same model.

The example training script runs on a 2-process cluster, saving an Orbax checkpoint
every 2 steps; its last process kills itself (SIGKILL) after step 3. A 4-process
cluster then resumes from the step-2 checkpoint, and so does this test's own process
(one process, 8 devices) from a copy of it. Every step's global rows and the final
parameters must equal those of an uninterrupted single-process run.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from _support.example_script import SCRIPT, load_example, read_log

from datarax.distributed import ClusterError, launch_local

pytestmark = pytest.mark.multihost

STEPS = 8


def test_preempted_on_2_processes_resumed_on_4_and_on_1(tmp_path: Path) -> None:
    reference_log = tmp_path / "reference.jsonl"
    reference = load_example().train(STEPS, log_rows=str(reference_log))
    args = ["--steps", str(STEPS), "--checkpoint-dir", str(tmp_path / "ckpt"), "--save-every", "2"]
    log = tmp_path / "rows.jsonl"
    with pytest.raises(ClusterError) as killed:
        launch_local(
            SCRIPT,
            num_processes=2,
            args=[*args, "--preempt-after", "3", "--log-rows", str(log)],
            timeout_s=120,
        )
    assert killed.value.process_index == 1 and "killed by SIGKILL" in str(killed.value)
    before = read_log(log)
    assert sorted(before) == [1, 2, 3]  # step 3 ran but was not saved: it is redone
    # The same checkpoint resumed alone, in this process (8 devices), from a copy.
    alone_log = tmp_path / "alone.jsonl"
    shutil.copy(log, alone_log)
    shutil.copytree(tmp_path / "ckpt", tmp_path / "ckpt-alone")
    alone = load_example().train(
        STEPS, checkpoint_dir=str(tmp_path / "ckpt-alone"), save_every=2, log_rows=str(alone_log)
    )
    runs = launch_local(
        SCRIPT, num_processes=4, args=[*args, "--log-rows", str(log)], timeout_s=120
    )
    assert "4 processes, 8 devices, from step 2" in runs[0].output
    resumed = read_log(log)
    expected = read_log(reference_log)
    assert sorted(resumed) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert resumed[step]["rows"] == expected[step]["rows"], step
    on_one = read_log(alone_log)
    for step in range(1, STEPS + 1):
        assert resumed[step]["rows"] == on_one[step]["rows"] == expected[step]["rows"], step
    for name, value in reference["params"].items():
        np.testing.assert_allclose(resumed[STEPS]["params"][name], value, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(alone["params"][name], value, rtol=1e-5, atol=1e-6)

"""The example script on your own data: a folder of .npy files and a 2-D mesh.

The folder holds one memory-mapped .npy file per field. Two processes of 2 devices
each run the example with ``--mesh model=2,data=2``: the devices are taken in process
order and the first axis written is outermost, so `model` spans the two hosts and
each host holds both halves of `data`, that is every row of every batch. Every step's
global rows and the final parameters must equal those of a run in this process.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
from _support.example_script import SCRIPT, load_example, read_log

from datarax.distributed import launch_local

STEPS, ROWS, BATCH = 6, 96, 16


def _write_folder(folder: Path) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(1)
    images = rng.normal(size=(ROWS, 2, 3)).astype(np.float32)
    np.save(folder / "image.npy", images)
    np.save(folder / "label.npy", images.reshape(ROWS, -1) @ np.arange(6, dtype=np.float32))
    np.save(folder / "weight.npy", np.ones(ROWS, np.float16))  # a field the model ignores
    return folder


@pytest.mark.multihost
def test_own_data_on_2_processes_with_model_across_hosts(tmp_path: Path) -> None:
    folder = _write_folder(tmp_path / "data")
    options = ["--data", str(folder), "--inputs", "image", "--targets", "label"]
    options += ["--steps", str(STEPS), "--batch-size", str(BATCH)]
    reference_log = tmp_path / "reference.jsonl"
    reference = load_example().train(
        STEPS,
        BATCH,
        log_rows=str(reference_log),
        data=str(folder),
        mesh={"data": 2, "model": -1},
        inputs="image",
        targets="label",
    )
    log = tmp_path / "rows.jsonl"
    runs = launch_local(
        SCRIPT,
        num_processes=2,
        devices_per_process=2,
        args=[*options, "--mesh", "model=2,data=2", "--log-rows", str(log)],
        timeout_s=90,
    )
    output = runs[0].output
    assert "2 processes, 4 devices, from step 0" in output
    assert "mesh {'model': 2, 'data': 2}" in output and "axes across hosts: model\n" in output
    assert all("[Gloo]" not in run.output for run in runs)
    found, expected = read_log(log), read_log(reference_log)
    assert sorted(found) == list(range(1, STEPS + 1))
    for step in range(1, STEPS + 1):
        assert found[step]["rows"] == expected[step]["rows"], step
        assert len(set(found[step]["rows"])) == BATCH
    epoch = [row for step in range(1, ROWS // BATCH + 1) for row in found[step]["rows"]]
    assert sorted(epoch) == list(range(ROWS))  # one epoch visits every row once
    for name, value in reference["params"].items():
        np.testing.assert_allclose(found[STEPS]["params"][name], value, rtol=1e-5, atol=1e-6)


def test_a_folder_without_npy_or_with_uneven_rows_is_named(tmp_path: Path) -> None:
    example = load_example()
    with pytest.raises(ValueError, match=r"has no \.npy file"):
        example.load_folder(tmp_path)
    np.save(tmp_path / "a.npy", np.zeros((4, 2)))
    np.save(tmp_path / "b.npy", np.zeros(5))
    with pytest.raises(ValueError, match=r"b\.npy has 5 rows but .*a\.npy has 4"):
        example.load_folder(tmp_path)
    np.save(tmp_path / "b.npy", np.zeros(4))
    with pytest.raises(ValueError, match=r"--inputs 'x' is not a field .*\['a', 'b'\]"):
        example.train(1, data=str(tmp_path))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("data=4,model", "is not NAME=SIZE"),
        ("model=2", "has no 'data' axis"),
        ("data=2,data=4", "named twice"),
        ("data=-1,model=-1", "only one axis may have size -1"),
        ("data=0", "must be 1 or more, or -1"),
        ("data=two", "must be a whole number or -1"),
    ],
)
def test_mesh_option_errors(text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        load_example().parse_mesh(text)


def test_mesh_sizes_must_fit_the_devices() -> None:
    example = load_example()
    assert example.parse_mesh("data=4, model=-1") == {"data": 4, "model": -1}
    assert dict(example.build_mesh({"data": 4, "model": -1}).shape) == {"data": 4, "model": 2}
    with pytest.raises(ValueError, match="does not fit the 8 devices"):
        example.build_mesh({"data": 3, "model": 2})
    with pytest.raises(ValueError, match="does not fit the 8 devices"):
        example.build_mesh({"data": 3, "model": -1})

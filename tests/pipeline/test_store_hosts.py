"""A token store written by every process of a local cluster at once: the same files
whatever the number of processes, a failure on one process raised on all with nothing
written, and a pipeline over it that resumes on another number of processes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from _support import store_checks
from flax import nnx

from datarax.distributed import launch_local
from datarax.pipeline import Documents, Packed, Pipeline


def _files(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.mark.multihost
def test_one_two_and_four_processes_write_the_same_store_and_resume_across(
    tmp_path: Path,
) -> None:
    one, two, four = (str(tmp_path / name) for name in ("one", "two", "four"))
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    launch_local(store_checks.write, num_processes=1, devices_per_process=1, args=(one,), env=cache)
    on_two = launch_local(
        store_checks.write_and_read,
        num_processes=2,
        devices_per_process=2,
        args=(two, two, None),
        timeout_s=120,
        env=cache,
    )
    saved = on_two[0].value["state"]
    assert on_two[1].value["state"] == saved
    on_four = launch_local(
        store_checks.write_and_read,
        num_processes=4,
        devices_per_process=1,
        args=(four, two, saved),
        timeout_s=120,
        env=cache,
    )
    files = _files(Path(one))
    assert len(files) == 1 + 2 * 8  # the manifest and 8 shards of 90 documents
    assert _files(Path(two)) == files and _files(Path(four)) == files
    store = Documents(one, cache_dir=tmp_path / "cache")
    expected = store_checks.corpus()
    assert all(
        np.array_equal(a, b) for a, b in zip(store.read(np.arange(700)), expected, strict=True)
    )
    alone = Pipeline(
        source=Packed(store, 64, rngs=nnx.Rngs(1)), batch_size=8, shuffle=True, rngs=nnx.Rngs(2)
    )
    reference = [batch["tokens"].tolist() for batch in alone]
    for run in [*on_two, *on_four]:
        assert run.value["tokens"] == reference
    for run in on_four:
        assert run.value["resumed"] == reference[2:]


@pytest.mark.multihost
def test_a_failure_on_one_process_is_raised_on_every_process_and_nothing_is_written(
    tmp_path: Path,
) -> None:
    runs = launch_local(
        store_checks.refused,
        num_processes=2,
        devices_per_process=1,
        args=(str(tmp_path / "store"), 1),
        timeout_s=90,
        env={"XDG_CACHE_HOME": str(tmp_path / "cache")},
    )
    said = [run.value for run in runs]
    assert said[1].startswith("ValueError: Document 650 holds token 70000"), said
    assert said[0].startswith("StoreWriteError: write_documents failed on process 1"), said
    assert not (tmp_path / "store").exists() and not (tmp_path / "store.writing").exists()

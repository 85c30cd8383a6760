"""Memory-mapped sources reach `Pipeline(workers=N)`'s workers as their files, not copies."""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

import numpy as np
import pytest
from _support.worker_stages import Lookup

from datarax.errors import SourceFileChangedError
from datarax.pipeline import ArraySource, Pipeline
from datarax.pipeline.workers._pickling import dumps_for_workers, pickled_for_workers

ROWS = 64


def _filled(path: Path, mode: str, shape: tuple[int, ...], **options: object) -> np.memmap:
    """A memmap of `path` in `mode` over a file holding ``arange`` values."""
    values = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    if mode != "w+":
        np.memmap(path, np.float32, "w+", shape=shape, **options)[:] = values
    mapped = np.memmap(path, np.float32, mode, shape=shape, **options)
    if mode == "w+":
        mapped[:] = values
    return mapped


def _roundtrip(obj: object) -> object:
    return pickle.loads(dumps_for_workers(obj, pickle.DEFAULT_PROTOCOL))


def test_a_pipelines_payload_holds_the_paths_of_mapped_files_not_their_bytes(
    tmp_path: Path,
) -> None:
    big = np.memmap(tmp_path / "big.bin", np.float32, "w+", shape=(4_000_000,))  # 16 MB, sparse
    np.save(tmp_path / "f.npy", np.asfortranarray(np.ones((1000, 500), np.float32)))
    npy = np.load(tmp_path / "f.npy", mmap_mode="r")
    offset = np.memmap(tmp_path / "big.bin", np.float32, "r", offset=4096 + 8, shape=(2_000_000,))
    source = ArraySource({"npy": npy, "slice": big[1000 : 1000 + 1000]})
    stages = [Lookup([big, offset[::-2], npy.T]), Lookup([{"in": [big[5:]]}])]
    payload = pickled_for_workers(source, stages)
    assert len(payload) < 5_000, len(payload)  # the files hold 18 MB
    for protocol in (2, pickle.DEFAULT_PROTOCOL):  # 2 is what a notebook's pipeline uses
        assert len(dumps_for_workers([big, npy, offset], protocol)) < 2_000


def test_arrays_come_back_as_views_of_the_same_file(tmp_path: Path) -> None:
    np.save(tmp_path / "f.npy", np.asfortranarray(np.arange(600.0).reshape(20, 30)))
    npy = np.load(tmp_path / "f.npy", mmap_mode="r")
    shifted = _filled(tmp_path / "o.bin", "r+", (10, 7), offset=36, order="F")
    arrays = [npy, npy[3:9, ::-4], np.asarray(npy)[2], shifted, shifted[1:, 2], shifted.T]
    back = _roundtrip(arrays)
    assert isinstance(back, list)
    for array, again in zip(arrays, back, strict=True):
        assert type(again) is type(array)
        assert again.strides == array.strides and again.flags.writeable == array.flags.writeable
        np.testing.assert_array_equal(again, array)
    assert back[0].filename == npy.filename and back[3].offset == 36 and back[3].mode == "r+"
    assert np.shares_memory(back[3], back[4])  # one mapping per file mapping here
    shifted[1, 2] = -5.0  # written here: the file's pages are shared
    assert back[4][0] == -5.0 and back[5][2, 1] == -5.0


def test_copy_on_write_and_unnamed_or_deleted_files_are_pickled_whole(tmp_path: Path) -> None:
    _filled(tmp_path / "c.bin", "r+", (1000,)).flush()
    private = np.memmap(tmp_path / "c.bin", np.float32, "c", shape=(1000,))
    private[:3] = -1.0  # lives in this process only: the file does not have it
    gone = _filled(tmp_path / "gone.bin", "r", (1000,))
    os.remove(tmp_path / "gone.bin")
    with tempfile.TemporaryFile() as file:  # a file object without a name
        file.write(np.arange(1000, dtype=np.float32).tobytes())
        file.flush()
        unnamed = np.memmap(file, np.float32, "r", shape=(1000,))
        for array in (private, private[1:], gone, unnamed):
            assert len(dumps_for_workers(array, pickle.DEFAULT_PROTOCOL)) > array.nbytes
            np.testing.assert_array_equal(_roundtrip(array), array)
        del unnamed
    assert _roundtrip(private)[:4].tolist() == [-1.0, -1.0, -1.0, 3.0]


def test_a_w_plus_file_is_mapped_again_without_emptying_it(tmp_path: Path) -> None:
    written = _filled(tmp_path / "w.bin", "w+", (ROWS, 3))
    back = _roundtrip(written[4:])
    assert isinstance(back, np.memmap) and back.mode == "r+"
    np.testing.assert_array_equal(back, np.arange(ROWS * 3.0).reshape(ROWS, 3)[4:])
    assert os.path.getsize(tmp_path / "w.bin") == ROWS * 3 * 4


@pytest.mark.parametrize("change", ["size", "replaced", "modified", "gone"])
def test_a_file_changed_since_pickling_is_a_clear_error(tmp_path: Path, change: str) -> None:
    path = tmp_path / "data.bin"
    mapped = _filled(path, "r", (ROWS,))
    pickled = dumps_for_workers(mapped, pickle.DEFAULT_PROTOCOL)
    if change == "size":
        with open(path, "ab") as file:
            file.write(b"more")
    elif change == "replaced":
        np.arange(ROWS, dtype=np.float32).tofile(tmp_path / "new.bin")
        os.replace(tmp_path / "new.bin", path)
    elif change == "modified":
        modified = os.stat(path).st_mtime_ns + 1_000_000_000
        os.utime(path, ns=(modified, modified))
    else:
        os.remove(path)
    with pytest.raises(SourceFileChangedError, match="build a new Pipeline") as raised:
        pickle.loads(pickled)
    assert str(path) in str(raised.value)


def test_workers_read_mapped_files_and_give_the_batches_of_workers_0(tmp_path: Path) -> None:
    np.save(tmp_path / "f.npy", np.asfortranarray(np.arange(ROWS * 5.0).reshape(ROWS, 5)))
    private = _filled(tmp_path / "c.bin", "c", (ROWS,))
    private[:3] = -1.0  # a copy-on-write change the workers get through its pickle
    written = _filled(tmp_path / "rw.bin", "r+", (ROWS,))
    source = ArraySource(
        {
            "i": np.arange(ROWS),
            "npy": np.load(tmp_path / "f.npy", mmap_mode="r"),
            "slice": _filled(tmp_path / "s.bin", "r", (3 * ROWS, 2))[ROWS : 2 * ROWS],
            "offset": _filled(tmp_path / "o.bin", "r", (ROWS, 2), offset=12, order="F"),
            "written": written,
            "new": _filled(tmp_path / "w.bin", "w+", (ROWS,)),
            "private": private,
        }
    )
    stages = [Lookup([_filled(tmp_path / "t.bin", "r", (ROWS, 4))[::-1]])]
    pipelines = [Pipeline(source=source, stages=stages, batch_size=4, workers=n) for n in (2, 0)]

    def epoch(pipeline: Pipeline) -> list[dict[str, list[object]]]:
        return [{key: leaf.tolist() for key, leaf in batch.items()} for batch in pipeline]

    first = epoch(pipelines[0])
    assert first == epoch(pipelines[1])
    assert first[0]["private"] == [-1.0, -1.0, -1.0, 3.0]
    # The workers make the next epoch's first 4 batches ahead; the last 4 are made after
    # this write, and show it as workers=0 does.
    written[-16:] = -written[-16:]
    second = epoch(pipelines[0])
    assert second == epoch(pipelines[1])
    assert second[-1]["written"] == [-60.0, -61.0, -62.0, -63.0]
    assert os.path.getsize(tmp_path / "w.bin") == ROWS * 4  # w+ was not emptied


def test_a_file_changed_before_the_workers_start_is_named_by_next(tmp_path: Path) -> None:
    path = tmp_path / "data.npy"
    np.save(path, np.arange(ROWS))
    pipeline = Pipeline(source={"x": np.load(path, mmap_mode="r")}, batch_size=4, workers=1)
    np.save(path, np.arange(2 * ROWS))  # a new file at the path: the workers would read it
    with pytest.raises(RuntimeError, match="build a new Pipeline") as raised:
        next(iter(pipeline))
    assert str(path) in str(raised.value) and "size" in str(raised.value)

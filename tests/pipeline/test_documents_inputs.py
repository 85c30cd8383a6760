"""Language-model inputs that once crashed or gave wrong results now give the right result
or an error of ours that names the argument: skip= of every kind, datasets in several
chunks, extreme weights, damaged cache entries, float tokens, dicts and pandas Series,
rows millions of tokens long and lengths no machine can plan."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from flax import nnx

from datarax.errors import DocumentError
from datarax.pipeline import Documents, Mixture, Packed
from datarax.pipeline.documents import _index

DOCS = Documents([np.arange(n) for n in range(1, 11)])


def _mixture(**options: Any) -> Mixture:
    return Mixture({"a": DOCS}, [1], rngs=nnx.Rngs(0), **options)


def test_skip_takes_indices_of_any_iterable_and_refuses_masks_and_floats() -> None:
    listed = _mixture(skip={"a": [7, 2]}).documents_of(range(8))["a"].tolist()
    assert 7 not in listed and 2 not in listed and len(listed) == 8
    for given in ({7, 2}, (i for i in (7, 2)), np.array([7, 2], np.uint8)):
        assert _mixture(skip={"a": given}).documents_of(range(8))["a"].tolist() == listed
    mask = np.zeros(10, bool)
    mask[7] = True
    with pytest.raises(TypeError, match=r"skip\['a'\] is a boolean mask.*np\.flatnonzero"):
        _mixture(skip={"a": mask})
    for given in ([1.7], [None], 3):
        with pytest.raises(TypeError, match=r"skip\['a'\] must be a 1-D sequence of document"):
            _mixture(skip={"a": given})


@pytest.mark.parametrize(
    ("values", "value_type"),
    [([[1, 2], [3]], pa.int32()), ([[1], [2, 3]], pa.int16()), ([[2**53 + 1], [5]], pa.uint64())],
)
def test_a_column_in_several_chunks_keeps_its_dtype_read_whole(
    values: list[list[int]], value_type: pa.DataType
) -> None:
    import datasets

    table = pa.table({"tokens": pa.array(values * 3, pa.list_(value_type))})
    chunked = datasets.Dataset(pa.concat_tables([table.slice(0, 2), table.slice(2)]))
    documents = Documents(chunked)
    read = documents.read(np.arange(len(documents)))
    assert {d.dtype for d in read} == {np.dtype(value_type.to_pandas_dtype())}
    assert [d.tolist() for d in read] == values * 3  # 2**53 + 1 is not rounded


def test_weights_near_the_largest_float_are_shares_and_beyond_a_float_are_named() -> None:
    three = Mixture({"a": DOCS, "b": DOCS, "c": DOCS}, [1e308] * 3, rngs=nnx.Rngs(0))
    assert three.weights == pytest.approx({"a": 1 / 3, "b": 1 / 3, "c": 1 / 3})
    with pytest.raises(ValueError, match=r"weights\['a'\] must be a number .* more than a float"):
        Mixture({"a": DOCS, "b": DOCS}, [10**400, 1], rngs=nnx.Rngs(0))


def test_a_damaged_cache_entry_is_built_again_and_a_ctrl_c_leaves_no_temporary_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"tokens": [1, 2]}\n{"tokens": [3]}\n')
    cache = tmp_path / "cache"
    Documents(path, cache_dir=cache).lengths  # noqa: B018 (cached)
    [entry] = list(cache.iterdir())
    entry.write_bytes(b"PK\x03\x04 not a zip any more")
    assert Documents(path, cache_dir=cache).lengths.tolist() == [2, 1]

    def interrupted(*args: Any, **kwargs: Any) -> None:
        raise KeyboardInterrupt

    entry.unlink()
    monkeypatch.setattr(_index.np, "savez", interrupted)
    with pytest.raises(KeyboardInterrupt):
        Documents(path, cache_dir=cache)
    assert os.listdir(cache) == []


class _FloatTokens:
    """A source of its own whose documents are floats."""

    lengths = np.array([3, 2])

    def __init__(self, value: float):
        self.value = value

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> np.ndarray:
        return np.full(int(self.lengths[index]), self.value)

    def read(self, indices: Any) -> list[np.ndarray]:
        return [self[int(index)] for index in indices]


@pytest.mark.parametrize("value", [1.7, float("nan")])
def test_float_tokens_of_a_source_of_ones_own_are_refused_not_truncated(value: float) -> None:
    packed = Packed(_FloatTokens(value), 8)
    with pytest.raises(DocumentError, match=r"Document 0 is an array of float64, not integer"):
        packed[0]


def test_a_dict_of_columns_and_a_series_read_by_label_are_named() -> None:
    import pandas as pd

    with pytest.raises(TypeError, match=r"data is a dict \(keys \['tokens', 'id'\]\).*data\['"):
        Documents({"tokens": [[1, 2]], "id": [0]})
    series = pd.Series([[1, 2], [3], [4, 5]])
    filtered = series[series.map(len) > 1]  # labels 0 and 2
    with pytest.raises(TypeError, match=r"data\[1\] raised KeyError.*series\.to_list\(\)"):
        Documents(filtered)
    assert Documents(filtered.to_list()).lengths.tolist() == [2, 2]


def test_rows_of_millions_of_tokens_plan_in_little_memory() -> None:
    """First-fit keeps the amounts of free room it has seen, not one counter per length: a
    row of 2**24 tokens once meant 2**24 counters and lists (over a GiB)."""
    documents = Documents([np.arange(n) for n in (5, 9, 2**20, 3)])
    tracemalloc.start()
    try:
        packed = Packed(documents, 2**24)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, peak
    assert len(packed) == 1 and packed.fill == pytest.approx((2**20 + 17) / 2**24)


def test_lengths_no_machine_can_plan_are_named_not_a_memory_error() -> None:
    class Absurd(_FloatTokens):
        lengths = np.array([10**15, 3])

    with pytest.raises(ValueError, match=r"make 488,281,250,001 pieces .* Check the lengths"):
        Packed(Absurd(1.0), 2048)


def test_damaged_compressed_and_irregular_files_are_named(tmp_path: Path) -> None:
    import gzip
    import json

    from _support.limits import time_limit

    from datarax.errors import DocumentFileNotFoundError, DocumentFormatError

    (tmp_path / "empty.parquet").write_bytes(b"")
    (tmp_path / "cut.parquet").write_bytes(b"PAR1 and nothing more")
    with gzip.open(tmp_path / "zipped.jsonl", "wt") as file:
        file.write(json.dumps({"tokens": [1, 2]}) + "\n")
    os.mkfifo(tmp_path / "pipe.jsonl")
    for name, match in [
        ("empty.parquet", r"empty\.parquet is not a Parquet file pyarrow can read"),
        ("cut.parquet", r"cut\.parquet is not a Parquet file pyarrow can read"),
        ("zipped.jsonl", r"zipped\.jsonl is gzip-compressed: .* decompress it first"),
        ("pipe.jsonl", r"pipe\.jsonl is not a regular file \(a FIFO"),
    ]:
        files = [tmp_path / name, tmp_path / "zipped.jsonl"]  # named, wherever in a list
        with time_limit(20), pytest.raises(DocumentFormatError, match=match):
            _ = Documents(files, cache_dir=tmp_path / "c").lengths
    with pytest.raises(DocumentFileNotFoundError, match="If it is a text, not a path: tokenize"):
        Documents(["the cat sat", "on the mat"])


def test_documents_given_to_a_pipeline_point_at_packed() -> None:
    from datarax.pipeline import Pipeline

    with pytest.raises(ValueError, match=r"pack them into rows, Packed\(documents, length\)"):
        next(iter(Pipeline(source=DOCS, batch_size=2)))


def test_sources_named_by_ints_or_by_the_thousand_are_mixed_and_one_name_twice_refused() -> None:
    mixed = Mixture({0: DOCS, 1: DOCS}, {0: 1, 1: 3}, rngs=nnx.Rngs(0), skip={0: [9]})
    assert mixed.weights == {"0": 0.25, "1": 0.75}
    assert 9 not in mixed.documents_of(range(len(mixed)))["0"].tolist()
    with pytest.raises(ValueError, match=r"sources has keys that name the same source .*\['1'\]"):
        Mixture({1: DOCS, "1": DOCS}, [1, 1], rngs=nnx.Rngs(0))
    one = Documents([np.arange(2)])
    many = Mixture({f"s{k}": one for k in range(33_000)}, [1] * 33_000, rngs=nnx.Rngs(0))
    assert len(many) == 33_000 and {many.source_of(k) for k in range(len(many))} == {
        f"s{k}" for k in range(33_000)
    }


def test_a_state_saved_over_other_packed_rows_is_refused() -> None:
    from datarax.errors import PipelineStateError
    from datarax.pipeline import Pipeline

    def pipeline(seed: int) -> Pipeline:
        packed = Packed(DOCS, 8, rngs=nnx.Rngs(seed))
        return Pipeline(source=packed, batch_size=2, shuffle=True, rngs=nnx.Rngs(0))

    saved = pipeline(1)
    next(iter(saved))
    state = saved.get_state()
    assert state["fingerprint"] == saved.source.fingerprint
    other = pipeline(2)
    assert len(other.source) == len(saved.source)  # the same count, other rows
    with pytest.raises(PipelineStateError, match="saved by a pipeline over another source"):
        other.set_state(state)
    pipeline(1).set_state(state)
    older = {key: value for key, value in state.items() if key != "fingerprint"}
    pipeline(2).set_state(older)  # a state without one (an earlier release's) resumes

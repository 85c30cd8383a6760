"""`benchmarks.packing`'s documents and planning: lengths log-normal around half a row,
written as Parquet files of fixed-size row groups, and the plans `Packed` computes,
timed on millions of lengths."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

MAX_ROWS_A_DOCUMENT = 8


def document_lengths(count: int, length: int, seed: int = 0) -> np.ndarray:
    """`count` lengths, log-normal around half a row, from 1 to 8 rows."""
    rng = np.random.default_rng(seed)
    drawn = np.round(rng.lognormal(np.log(length / 2), 0.6, count))
    return np.clip(drawn, 1, MAX_ROWS_A_DOCUMENT * length).astype(np.int64)


def write_documents(folder: Path, lengths: np.ndarray, files: int, group_docs: int) -> list[str]:
    """The documents as `files` Parquet files of `group_docs` rows a row group."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for number, part in enumerate(np.array_split(np.arange(len(lengths)), files)):
        offsets = np.zeros(len(part) + 1, np.int32)
        np.cumsum(lengths[part], out=offsets[1:])
        tokens = rng.integers(0, 50_257, int(offsets[-1]), dtype=np.int32)
        column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))
        path = folder / f"documents-{number:03d}.parquet"
        pq.write_table(pa.table({"tokens": column}), path, row_group_size=group_docs)
        paths.append(str(path))
    return paths


def time_plans(count: int, length: int) -> dict[str, Any]:
    """Seconds (wall and CPU) to plan `count` documents each way in memory, as `Packed`
    plans them over documents in memory, in a random order (a seed)."""
    from datarax.pipeline.documents._plan import make_plan

    lengths = document_lengths(count, length, seed=2)
    timed: dict[str, Any] = {"documents": count, "length": length}
    for method in ("first_fit", "concat"):
        start, cpu = time.perf_counter(), time.process_time()
        made = make_plan(lengths, length, method, [3])
        seconds, cpu_s = time.perf_counter() - start, time.process_time() - cpu
        timed[method] = {
            "s": seconds,
            "cpu_s": cpu_s,  # less moved by other work on the machine than the wall clock
            "rows": len(made),
            "fill": float(lengths.sum()) / (len(made) * length),
            "mb": made.nbytes / 1e6,
        }
        print(
            f"planning {count:,} documents, {method}: {seconds:.2f} s ({cpu_s:.2f} s CPU)",
            flush=True,
        )
    return timed

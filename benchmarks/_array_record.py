"""Token documents as ArrayRecord files, and Grain's globally shuffled packed batches
over them: the format MaxText reads with Grain, run as Grain's documentation writes it.

Writing (`write_array_record`): one record a document, its tokens as raw little-endian
int32 bytes, written with ``ArrayRecordWriter(path, "group_size:1")``; document ``i``
goes to file ``i % files``. The options are the ones Grain's ArrayRecord tutorial writes
(https://google-grain.readthedocs.io/en/latest/tutorials/data_sources/arrayrecord_data_source_tutorial.html,
source ``docs/tutorials/data_sources/arrayrecord_data_source_tutorial.md`` in
google/grain) and ArrayRecord's performance guide recommends for random access
(``docs/performance.md`` in google/array_record: "Use ``group_size:1`` for applications
requiring ultra-fast random access", "Ideal for ML training with random sampling").
Grain's data source checks for it: ``array_record/python/array_record_data_source.py``
(``_check_group_size``, installed with ``array_record``) logs an error for any other
group size, "Grain requires group size 1 for good performance". Nothing else is set, so
compression is the writer's default: zstd level 3 (window_log 20) in array_record 0.8.6,
which reads an empty option string back as ``group_size:1,transpose:false,
pad_to_block_boundary:false,zstd:3,window_log:20,max_parallelism:1``; the group size is
still passed, as older releases defaulted to 65536 records a group and Brotli
(``cpp/array_record_writer.h``). Each record, one document, is compressed on its own.

The encoding: MaxText's ArrayRecord datasets hold a serialized ``tf.train.Example`` a
record (its ``ParseFeatures`` decodes them with TensorFlow); without TensorFlow here,
the tokens are raw bytes, which ArrayRecord's core concepts page shows for NumPy arrays
(``arr.tobytes()``, ``docs/core_concepts.md``). Decoding is ``np.frombuffer``: no copy,
and cheaper than parsing an Example, so the reading side is not made slower than
MaxText's by the encoding.

Reading (`grain_array_record_batches`), as `benchmarks._packing_run` reads its Grain
candidates, with the source swapped::

    grain.MapDataset.source(grain.sources.ArrayRecordDataSource(files))
        .shuffle(seed=0).map(decode).repeat(epochs).to_iter_dataset()

(the tutorial's ``MapDataset.source(...).shuffle(seed).map(...)``; MaxText's
``get_datasets`` builds the same ``source.shuffle(seed).repeat(num_epoch)
.to_iter_dataset()``), then Grain's packing as `_packing_run` does it:
``FirstFitPackIterDataset(FlatMapIterDataset(ds, CutLong()), length_struct={"tokens":
length}, num_packing_bins=batch_size)`` or ``ConcatThenSplitIterDataset(ds,
length_struct={"tokens": length})``, ``.batch(batch_size)``, and with workers
``.mp_prefetch(grain.MultiprocessingOptions(num_workers=N))``. Grain's defaults
elsewhere: ``ReadOptions()`` (16 threads a process, each reading one record with
``__getitem__``, 500 records read ahead), the data source's own reader options
(``readahead_buffer_size:0``, a 32 KiB file buffer, one thread-safe reader a file, opened
on first use), one batch buffered a worker.

    python -m benchmarks._array_record

is a smoke run: 2,000 documents (lengths log-normal around 128 tokens, as
`benchmarks._packing_data` draws them for rows of 256) in 4 files, read one epoch by
each method with 0 and 1 workers; every delivered token is checked against the corpus.
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
from collections.abc import Generator, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._packing_run import grain_packed

WRITER_OPTIONS = "group_size:1"  # Grain's ArrayRecord tutorial; see the module docstring
TOKEN_DTYPE = np.dtype("<i4")  # a record's bytes: its tokens, little-endian int32


def write_array_record(
    folder: Path,
    documents: Iterable[np.ndarray],
    files: int,
    options: str = WRITER_OPTIONS,
    prefix: str = "documents",
) -> tuple[list[str], dict[str, Any]]:
    """`documents` (1-D integer arrays) as `files` ArrayRecord files in `folder`, one
    record a document: its tokens as little-endian int32 bytes. Document ``i`` goes to
    file ``i % files``, so that `documents` can be a stream no bigger in memory than one
    document (the order within a file does not matter to a global shuffle).

    Returns the paths (``<prefix>-00000-of-00004.array_record``, ...) and what was
    written: ``write_s`` (from opening the first writer to closing the last: encoding,
    compressing, writing), ``bytes`` (the files' sizes), ``record_bytes`` (the tokens'
    own bytes, before compression), ``documents``, ``tokens``, ``options`` (as given)
    and ``writer_options`` (as the first file records them, defaults filled in).
    """
    from array_record.python.array_record_module import ArrayRecordReader, ArrayRecordWriter

    if files < 1:
        raise ValueError(f"files must be at least 1, got {files}")
    folder.mkdir(parents=True, exist_ok=True)
    paths = [
        str(folder / f"{prefix}-{number:05d}-of-{files:05d}.array_record")
        for number in range(files)
    ]
    count = tokens = record_bytes = 0
    start = time.perf_counter()
    writers = [ArrayRecordWriter(path, options) for path in paths]
    try:
        for number, document in enumerate(documents):
            array = np.asarray(document)
            if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
                raise ValueError(
                    f"document {number}: a 1-D integer array expected, got "
                    f"{array.dtype} of shape {array.shape}"
                )
            record = array.astype(TOKEN_DTYPE, copy=False).tobytes()
            writers[number % files].write(record)
            count += 1
            tokens += len(array)
            record_bytes += len(record)
    finally:
        for writer in writers:
            writer.close()
    write_s = time.perf_counter() - start
    reader = ArrayRecordReader(paths[0])
    written_options = reader.writer_options_string()
    reader.close()
    return paths, {
        "write_s": write_s,
        "bytes": sum(os.path.getsize(path) for path in paths),
        "record_bytes": record_bytes,
        "documents": count,
        "tokens": tokens,
        "files": files,
        "options": options,
        "writer_options": written_options,
    }


def _decoded(record: bytes) -> dict[str, np.ndarray]:
    """A record's tokens: its bytes read as little-endian int32, not copied (read-only)."""
    return {"tokens": np.frombuffer(record, TOKEN_DTYPE)}


def grain_array_record_batches(spec: dict[str, Any]) -> Generator[dict[str, np.ndarray]]:
    """Grain's packed batches over the ArrayRecord files ``spec["files"]``, globally
    shuffled, ``spec["epochs"]`` epochs, built as the module docstring says; each as
    ``{"tokens": (B, length) int32, "segment_ids": (B, length) int32}``, padding 0, the
    last batch possibly shorter. Other keys: ``length``, ``batch_size``, ``workers``,
    ``method`` (``"first_fit"`` or ``"concat"``) and ``max_pieces`` (the most rows a
    document spans: first-fit's cut yields at most that many pieces)."""
    import grain
    from absl import flags

    flags.FLAGS.mark_as_parsed()  # Grain's processes read absl flags; no command line here
    source = grain.MapDataset.source(grain.sources.ArrayRecordDataSource(list(spec["files"])))
    dataset = source.shuffle(seed=0).map(_decoded).repeat(spec["epochs"]).to_iter_dataset()
    return grain_packed(dataset, spec)


def _segments(batch: dict[str, np.ndarray]) -> Generator[bytes]:
    """Every segment of `batch`'s rows, in order, as its tokens' bytes."""
    for tokens, ids in zip(batch["tokens"], batch["segment_ids"], strict=True):
        for segment in np.unique(ids[ids > 0]):
            yield tokens[ids == segment].astype(TOKEN_DTYPE).tobytes()


def _smoke(spec: dict[str, Any], documents: list[np.ndarray]) -> dict[str, Any]:
    """One epoch of `spec`, timed as `benchmarks._packing_run` times it (the first batch
    apart, then the rest together; tokens a second: non-padding tokens of the rest over
    their seconds), and its tokens checked against `documents`: the same count, the same
    multiset of token ids, and for first-fit every segment a whole document or one of
    its row-long pieces, each piece delivered exactly once."""
    import grain  # noqa: F401 (imported before the clock: the first batch is no import)

    length = spec["length"]
    start = time.perf_counter()
    batches = grain_array_record_batches(spec)
    first = next(batches)
    first_batch_s = time.perf_counter() - start
    delivered, slots, count, timed_tokens = [first], first["segment_ids"].size, 1, 0
    clock = time.perf_counter()
    for batch in batches:
        timed_tokens += int(np.count_nonzero(batch["segment_ids"]))
        delivered.append(batch)
        slots += batch["segment_ids"].size
        count += 1
    timed_s = time.perf_counter() - clock
    batches.close()

    written = np.concatenate(documents)
    kept = np.concatenate([b["tokens"][b["segment_ids"] > 0] for b in delivered])
    same_ids = bool(
        np.array_equal(np.bincount(written, minlength=50_257), np.bincount(kept, minlength=50_257))
    )
    checked: dict[str, Any] = {"same_token_ids": same_ids}
    if spec["method"] == "first_fit":
        pieces = collections.Counter(
            document[at : at + length].astype(TOKEN_DTYPE).tobytes()
            for document in documents
            for at in range(0, len(document), length)
        )
        segments = collections.Counter(s for batch in delivered for s in _segments(batch))
        checked |= {
            "pieces": sum(pieces.values()),
            "segments": sum(segments.values()),
            "same_pieces": segments == pieces,
        }
    return {
        "first_batch_s": first_batch_s,
        "timed_s": timed_s,
        "tokens_per_s": timed_tokens / timed_s if timed_s > 0 else 0.0,
        "batches": count,
        "last_batch_rows": int(delivered[-1]["tokens"].shape[0]),
        "tokens_written": int(written.size),
        "tokens_delivered": int(kept.size),
        "fill": kept.size / slots,
        **checked,
    }


def main() -> None:
    from benchmarks._packing_data import MAX_ROWS_A_DOCUMENT, document_lengths

    length, batch_size = 256, 8
    lengths = document_lengths(2000, length)
    rng = np.random.default_rng(1)
    documents = [rng.integers(0, 50_257, int(n), dtype=np.int32) for n in lengths]
    ok = True
    with tempfile.TemporaryDirectory(prefix="array_record_") as folder:
        paths, written = write_array_record(Path(folder), documents, files=4)
        print(
            f"wrote {written['documents']:,} documents, {written['tokens']:,} tokens in "
            f"{written['files']} files: {written['bytes'] / 1e6:.2f} MB "
            f"({written['bytes'] / written['record_bytes']:.2f} of the raw tokens) in "
            f"{written['write_s']:.2f} s; writer options {written['writer_options']!r}",
            flush=True,
        )
        for method in ("first_fit", "concat"):
            for workers in (0, 1):
                spec = {
                    "files": paths,
                    "length": length,
                    "batch_size": batch_size,
                    "epochs": 1,
                    "workers": workers,
                    "method": method,
                    "max_pieces": MAX_ROWS_A_DOCUMENT,
                }
                run = _smoke(spec, documents)
                good = run["same_token_ids"] and run["tokens_delivered"] == run["tokens_written"]
                good = good and run.get("same_pieces", True)
                ok = ok and good
                pieces = (
                    f", {run['segments']:,} segments for {run['pieces']:,} pieces "
                    f"(same: {run['same_pieces']})"
                    if "pieces" in run
                    else ""
                )
                print(
                    f"{method} workers={workers}: {run['tokens_per_s'] / 1e6:.3f} M tokens/s, "
                    f"first batch {run['first_batch_s']:.2f} s, {run['batches']} batches "
                    f"(last {run['last_batch_rows']} rows), fill {run['fill']:.3f}, "
                    f"tokens delivered {run['tokens_delivered']:,} of "
                    f"{run['tokens_written']:,} (same ids: {run['same_token_ids']}){pieces}"
                    f"{'' if good else '  <-- MISMATCH'}",
                    flush=True,
                )
    # Leave without the interpreter's teardown: a closed Grain iterator's finalizers
    # print errors while modules are torn down. Everything is printed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main()

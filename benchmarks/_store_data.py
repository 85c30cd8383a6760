"""`benchmarks.store`'s corpus in three formats, each write timed, and the read in order
that writing the store is held against.

The documents: `benchmarks._packing_data.document_lengths` (log-normal around half a
row, 1 to 8 rows), their tokens int32 ids below 50,257 (GPT-2's vocabulary) drawn
uniformly (seed 1), so no format compresses them by more than their 15.6 bits of
entropy a token. Written, in this order, into one folder:

- ``parquet/documents-000.parquet`` ...: ``files`` files of one column ``tokens``
  (``list<int32>``), ``group_docs`` documents a row group, pyarrow's defaults otherwise
  (Snappy, dictionary encoding). Timed: `pyarrow.parquet.write_table` (the tokens drawn
  before the clock), then ``fdatasync`` of the file;
- the reference, ``read_parquet``: every row group of every file decoded in order, in
  this one process, its token column to numpy (values and offsets, no copy), the files
  dropped from the page cache first: what reading that Parquet in order costs;
- ``store/``: ``write_documents(Documents(parquet, cache_dir=index), store,
  replace=True)``, the library's defaults (65,536 documents a shard, shards written on
  the usable cores). Timed as a user waits for it: building the `Documents` (the files'
  metadata: their lengths are read by the write, in its one pass, ``index_s``), the
  write (``write_s``), then ``fdatasync`` of every file of the store (``sync_s``: a
  corpus larger than memory could not leave its pages dirty in the cache); the Parquet
  files are dropped from the cache first. The read and
  the write take turns, ``write_rounds`` times (the store written afresh each time):
  their figures are the means, each round kept under ``rounds``;
- ``array_record/``: the Parquet read in order as above, a document at a time, into
  `benchmarks._array_record.write_array_record` (``files`` files, Grain's recommended
  ``group_size:1``), then ``fdatasync``; the Parquet dropped first;
- ``store/plans/``: the first ``Packed(Documents(store), length, method=..., rngs=...)``
  of each way the candidates pack the store, which computes the plan and saves it
  (``first_s``), then a second, which maps it (``again_s``); the store dropped from the
  cache before each.

``data.json`` in the folder records the corpus (documents, row length, files, documents
a row group) and every step's figures; a later run over the same folder reuses every
step recorded there whose files are present (its figures as recorded then, with the load
average and the time), ``rewrite`` redoes all but the Parquet, and a folder written for
another corpus is refused.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._packing_data import document_lengths
from benchmarks._page_cache import drop, files_under, sync

VOCABULARY = 50_257
FIELD = "tokens"
PLANS = (("concat", False), ("concat", True), ("first_fit", True))  # (method, seeded)


@dataclass(frozen=True)
class Corpus:
    """Where each format of the corpus lies under `folder`."""

    folder: Path

    @property
    def parquet(self) -> list[str]:
        return sorted(str(path) for path in (self.folder / "parquet").glob("*.parquet"))

    @property
    def store(self) -> str:
        return str(self.folder / "store")

    @property
    def array_record(self) -> list[str]:
        return sorted(str(path) for path in (self.folder / "array_record").glob("*.array_record"))

    @property
    def index(self) -> str:
        """`Documents`' cache folder (the Parquet files' lengths)."""
        return str(self.folder / "index")

    def files_of(self, loader: str) -> list[str]:
        """The files a candidate of `loader` reads: its data and what indexes it."""
        if loader == "ours-store":
            return files_under(self.store)
        if loader == "ours-parquet":
            return [*self.parquet, *files_under(self.index)]
        if loader == "grain-arrayrecord":
            return self.array_record
        return self.parquet

    def every_file(self) -> list[str]:
        return sorted({*self.parquet, *files_under(self.store, self.index), *self.array_record})


def read_bytes() -> int:
    """Bytes this process (and the children it reaped) read from storage so far:
    ``read_bytes`` of ``/proc/self/io`` (0 where there is none)."""
    try:
        with open("/proc/self/io") as io:
            for line in io:
                if line.startswith("read_bytes:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _stamp() -> dict[str, Any]:
    return {"measured_at": time.strftime("%Y-%m-%d %H:%M:%S"), "load_average": os.getloadavg()}


def write_parquet(
    folder: Path, lengths: np.ndarray, files: int, group_docs: int
) -> tuple[list[str], dict[str, Any]]:
    """The documents of `lengths` as `files` Parquet files, timed (module docstring)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(1)
    folder.mkdir(parents=True, exist_ok=True)
    paths, write_s, sync_s = [], 0.0, 0.0
    for number, part in enumerate(np.array_split(np.arange(len(lengths)), files)):
        offsets = np.zeros(len(part) + 1, np.int32)
        np.cumsum(lengths[part], out=offsets[1:])
        tokens = rng.integers(0, VOCABULARY, int(offsets[-1]), dtype=np.int32)
        table = pa.table({FIELD: pa.ListArray.from_arrays(pa.array(offsets), pa.array(tokens))})
        path = str(folder / f"documents-{number:03d}.parquet")
        start = time.perf_counter()
        pq.write_table(table, path, row_group_size=group_docs)
        written = time.perf_counter()
        sync([path])
        write_s, sync_s = write_s + written - start, sync_s + time.perf_counter() - written
        paths.append(path)
        del table, tokens
    tokens = int(lengths.sum())
    return paths, {
        "write_s": write_s,
        "sync_s": sync_s,
        "s": write_s + sync_s,
        "tokens_per_s": tokens / (write_s + sync_s),
        "bytes": sum(os.path.getsize(path) for path in paths),
        "documents": len(lengths),
        "tokens": tokens,
        "files": files,
        "group_docs": group_docs,
        **_stamp(),
    }


def _row_groups(paths: list[str]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Every row group of `paths` in order, its token column as (values, offsets)."""
    import pyarrow.parquet as pq

    for path in paths:
        with pq.ParquetFile(path) as file:
            for group in range(file.num_row_groups):
                column = file.read_row_group(group, columns=[FIELD]).column(0)
                lists = column.combine_chunks()
                yield lists.values.to_numpy(), lists.offsets.to_numpy()


def parquet_documents(paths: list[str]) -> Iterator[np.ndarray]:
    """Every document of `paths` in order, a view of its row group's decoded values."""
    for values, offsets in _row_groups(paths):
        for start, stop in zip(offsets[:-1].tolist(), offsets[1:].tolist(), strict=True):
            yield values[start:stop]


def read_parquet(paths: list[str]) -> dict[str, Any]:
    """Seconds to decode every row group of `paths` in order (dropped from the cache
    first), in this process: the reference for writing the store."""
    drop(paths)
    before, start = read_bytes(), time.perf_counter()
    tokens = groups = 0
    for _, offsets in _row_groups(paths):
        tokens += int(offsets[-1] - offsets[0])
        groups += 1
    seconds = time.perf_counter() - start
    return {
        "s": seconds,
        "tokens_per_s": tokens / seconds,
        "tokens": tokens,
        "row_groups": groups,
        "read_bytes": read_bytes() - before,
        **_stamp(),
    }


def write_store(corpus: Corpus, documents_per_shard: int | None) -> dict[str, Any]:
    """The store written from the Parquet, timed as the module docstring says."""
    from datarax.pipeline import Documents, write_documents

    shutil.rmtree(corpus.index, ignore_errors=True)
    paths = corpus.parquet
    drop(paths)
    before, start = read_bytes(), time.perf_counter()
    documents = Documents(paths, cache_dir=corpus.index)  # the lengths are not read yet
    indexed = time.perf_counter()
    options = {} if documents_per_shard is None else {"documents_per_shard": documents_per_shard}
    store = write_documents(documents, corpus.store, replace=True, **options)
    written = time.perf_counter()
    files = files_under(corpus.store)
    sync(files)
    synced = time.perf_counter()
    index_s, write_s, sync_s = indexed - start, written - indexed, synced - written
    count, tokens = len(store), int(np.sum(store.lengths, dtype=np.int64))
    with open(os.path.join(corpus.store, "manifest.json"), encoding="utf-8") as file:
        manifest = json.load(file)
    return {
        "index_s": index_s,
        "write_s": write_s,
        "sync_s": sync_s,
        "s": index_s + write_s + sync_s,
        "tokens_per_s": tokens / (index_s + write_s + sync_s),
        "bytes": sum(os.path.getsize(path) for path in files),
        "read_bytes": read_bytes() - before,
        "documents": count,
        "tokens": tokens,
        "dtype": manifest["dtype"],
        "shards": len(manifest["shards"]),
        "documents_per_shard": manifest["documents_per_shard"],
        **_stamp(),
    }


def write_array_record_files(corpus: Corpus, files: int) -> dict[str, Any]:
    """The ArrayRecord files written from the Parquet, timed as the module docstring says."""
    from benchmarks._array_record import write_array_record

    folder = corpus.folder / "array_record"
    shutil.rmtree(folder, ignore_errors=True)
    drop(corpus.parquet)
    start = time.perf_counter()
    paths, written = write_array_record(folder, parquet_documents(corpus.parquet), files)
    done = time.perf_counter()
    sync(paths)
    synced = time.perf_counter()
    write_s, sync_s = done - start, synced - done
    return written | {
        "write_s": write_s,
        "sync_s": sync_s,
        "s": write_s + sync_s,
        "tokens_per_s": written["tokens"] / (write_s + sync_s),
        **_stamp(),
    }


def time_plans(corpus: Corpus, length: int) -> dict[str, Any]:
    """The first and second ``Packed`` over the store of each way in `PLANS`."""
    from flax import nnx

    from datarax.pipeline import Documents, Packed

    timed: dict[str, Any] = {}
    for method, seeded in PLANS:
        made = []
        for _ in range(2):
            drop(files_under(corpus.store))
            start = time.perf_counter()
            rngs = nnx.Rngs(0) if seeded else None
            packed = Packed(
                Documents(corpus.store, cache_dir=corpus.index), length, method=method, rngs=rngs
            )
            made.append(time.perf_counter() - start)
        timed[f"{method} {'seeded' if seeded else 'in order'}"] = {
            "first_s": made[0],
            "again_s": made[1],
            "rows": len(packed),
            "fill": packed.fill,
        }
    timed["bytes"] = sum(os.path.getsize(p) for p in files_under(Path(corpus.store) / "plans"))
    return timed | _stamp()


def prepare(
    folder: Path,
    wanted: dict[str, Any],
    *,
    rewrite: bool = False,
    write_rounds: int = 1,
    say: Callable[[str], None] = print,
) -> tuple[Corpus, dict[str, Any]]:
    """The corpus of `wanted` (``documents``, ``length``, ``files``, ``group_docs``,
    ``documents_per_shard``) in `folder`, each step written and timed or, recorded in
    ``data.json`` with its files present, reused; and every step's figures.

    Raises:
        SystemExit: `folder` holds a corpus written for other settings.
    """
    corpus, record = Corpus(folder), folder / "data.json"
    recorded = json.loads(record.read_text()) if record.exists() else {}
    if recorded and recorded.get("corpus") != wanted:
        raise SystemExit(
            f"{folder} holds a corpus written for {recorded.get('corpus')}, not {wanted}: "
            "pass another --data folder (or remove this one)."
        )
    steps: dict[str, Any] = recorded.get("steps", {})
    folder.mkdir(parents=True, exist_ok=True)

    def save() -> None:
        record.write_text(json.dumps({"corpus": wanted, "steps": steps}, indent=1) + "\n")

    def have(present: bool, *names: str) -> bool:
        """Whether steps `names` are recorded and their files `present` (then reused)."""
        if not (present and all(name in steps for name in names)):
            return False
        for name in names:
            steps[name]["reused"] = True
            say(f"{name}: reused, as measured at {steps[name]['measured_at']}")
        return True

    if not have(len(corpus.parquet) == wanted["files"], "parquet"):
        lengths = document_lengths(wanted["documents"], wanted["length"])
        _, steps["parquet"] = write_parquet(
            folder / "parquet", lengths, wanted["files"], wanted["group_docs"]
        )
        for later in ("read_parquet", "store", "array_record", "plans"):
            steps.pop(later, None)
        save()
        say(_line("parquet", steps["parquet"]))
    store_there = os.path.isfile(os.path.join(corpus.store, "manifest.json"))
    if rewrite or not have(store_there, "read_parquet", "store"):
        reads, writes = [], []
        for _ in range(write_rounds):  # one after the other, so that both meet the same load
            reads.append(read_parquet(corpus.parquet))
            say(_line("read_parquet", reads[-1]))
            writes.append(write_store(corpus, wanted["documents_per_shard"]))
            say(_line("store", writes[-1]))
        steps["read_parquet"], steps["store"] = _mean(reads), _mean(writes)
        steps.pop("plans", None)
        save()
    if rewrite or not have(len(corpus.array_record) == wanted["files"], "array_record"):
        steps["array_record"] = write_array_record_files(corpus, wanted["files"])
        save()
        say(_line("array_record", steps["array_record"]))
    plans_there = os.path.isdir(os.path.join(corpus.store, "plans"))
    if not have(plans_there, "plans"):
        steps["plans"] = time_plans(corpus, wanted["length"])
        save()
        say(f"plans: {json.dumps(steps['plans'])}")
    for step in steps.values():
        step.setdefault("reused", False)
    return corpus, steps


def _mean(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """The first round's figures with every timed figure (``*s``, ``tokens_per_s``)
    replaced by its mean over `rounds`, and `rounds` themselves."""
    timed = [key for key in rounds[0] if key.endswith("s") and isinstance(rounds[0][key], float)]
    means = {key: sum(r[key] for r in rounds) / len(rounds) for key in timed}
    if "s" in means and "tokens" in rounds[0]:
        means["tokens_per_s"] = rounds[0]["tokens"] / means["s"]
    return rounds[0] | means | {"rounds": rounds}


def _line(step: str, figures: dict[str, Any]) -> str:
    size = f", {figures['bytes'] / 1e6:.0f} MB" if "bytes" in figures else ""
    return f"{step}: {figures['s']:.2f} s, {figures['tokens_per_s'] / 1e6:.1f} M tokens/s{size}"

"""One candidate of `benchmarks.store`, in a process of its own: its packed batches over
a corpus dropped from the page cache, timed, counted, its reads and memory recorded, and
printed as one JSON line.

    python -m benchmarks._store_run '{"loader": "ours-store", "method": "concat", ...}'

The loaders (the same corpus, row length and batch size):

- ``ours-store``: ``Pipeline(source=Packed(Documents(store), length, method=...,
  rngs=...), batch_size=..., shuffle=..., rngs=..., workers=...)``: order ``in-order``
  is ``rngs=None`` and ``shuffle=False`` (the documents in the store's order, the rows in
  theirs: the store read front to back); ``shuffled`` is ``rngs=nnx.Rngs(0)`` for both
  (the documents put in a random order before packing, the rows shuffled again);
- ``ours-parquet``: the same over ``Documents(parquet_files)`` (decoded row groups kept
  up to 256 MiB a process, the corpus 4 times that or more);
- ``grain-streamed``: `benchmarks._packing_run`'s Grain over
  ``grain.experimental.ParquetIterDataset(files)``, Grain's own Parquet reader, which
  streams each file's row groups in order (16 files interleaved), no global shuffle;
- ``grain-arrayrecord``: `benchmarks._array_record.grain_array_record_batches`: Grain
  over ``ArrayRecordDataSource(files)`` with its global shuffle, as its docs write it.

Grain packs as `benchmarks._packing_run` does (``FirstFitPackIterDataset`` with
``num_packing_bins=batch_size`` after cutting documents longer than a row, or
``ConcatThenSplitIterDataset``), batches, and with workers ``.mp_prefetch(
MultiprocessingOptions(num_workers=N))``; its defaults elsewhere.

The clock: ``first_batch_s`` from building the loader to its first batch (modules
imported before); then the next ``batches`` batches timed together (fewer where an epoch
ends first: ``timed_batches``), so whatever a loader read ahead is inside the timed part.
``tokens_per_s``: the non-padding tokens (segment id > 0) of those batches over their
seconds. ``fill``: non-padding tokens over token slots of every batch delivered.

Reads: ``read_bytes`` is ``/proc/self/io``'s, from just before the loader is built to
the end, once the loader is closed and every process it started has ended and been
reaped: Linux adds a reaped child's reads (and those of the children it reaped) to its
parent's, so this counts the worker processes too (Grain's, started by ``spawn``, are
this process's children; the pipeline's come from a ``forkserver``, which reaps them and
is stopped and reaped here at the end). ``read_bytes_per_token`` divides by the
non-padding tokens of every batch delivered. ``children_killed`` counts processes that
were still running 20 s after the loader was closed (killed, then reaped).

Memory: ``peak_rss_mb`` is this process's ``VmHWM``; ``rss_anon_mb``, ``rss_file_mb``
and ``rss_shmem_mb`` are its ``/proc/self/status`` at the last timed batch, the loader
still open: a memory-mapped file's pages count in RSS (``RssFile``) but are page cache
the kernel can drop, unlike ``RssAnon``.
"""

from __future__ import annotations

import gc
import importlib
import multiprocessing
import multiprocessing.forkserver
import time
from collections.abc import Generator
from typing import Any

import numpy as np

from benchmarks._packing_run import _grain_batches, _peak_rss_mb, main, timed
from benchmarks._store_data import read_bytes

REAP_GRACE_S = 20.0


def _our_batches(spec: dict[str, Any]) -> Generator[dict[str, np.ndarray]]:
    from flax import nnx

    from datarax.pipeline import Documents, Packed, Pipeline

    where = spec["store"] if spec["loader"] == "ours-store" else spec["files"]
    documents = Documents(where, cache_dir=spec["cache_dir"])
    shuffled = spec["order"] == "shuffled"
    packed = Packed(
        documents,
        spec["length"],
        method=spec["method"],
        rngs=nnx.Rngs(0) if shuffled else None,
    )
    pipeline = Pipeline(
        source=packed,
        batch_size=spec["batch_size"],
        shuffle=shuffled,
        rngs=nnx.Rngs(0) if shuffled else None,
        workers=spec["workers"],
    )
    for _ in range(spec["epochs"]):
        yield from pipeline


def _batches(spec: dict[str, Any]) -> Generator[dict[str, np.ndarray]]:
    if spec["loader"].startswith("ours"):
        return _our_batches(spec)
    if spec["loader"] == "grain-arrayrecord":
        from benchmarks._array_record import grain_array_record_batches

        return grain_array_record_batches(spec)
    return _grain_batches(spec)


def _status() -> dict[str, float]:
    """This process's ``VmRSS``, ``RssAnon``, ``RssFile`` and ``RssShmem``, in MB."""
    wanted = {"VmRSS:": "rss_mb", "RssAnon:": "rss_anon_mb", "RssFile:": "rss_file_mb"}
    wanted["RssShmem:"] = "rss_shmem_mb"
    found: dict[str, float] = {}
    try:
        with open("/proc/self/status") as status:
            for line in status:
                key = line.split(maxsplit=1)[0] if line.strip() else ""
                if key in wanted:
                    found[wanted[key]] = int(line.split()[1]) / 1024
    except OSError:  # no /proc
        pass
    return found


def _close_ours() -> None:
    """Closes the worker pools of pipelines no longer referenced (the generator's)."""
    gc.collect()
    from datarax.pipeline.workers._pool import _close_all

    _close_all()


def _reap() -> dict[str, int]:
    """Waits for every child process to end (killing those left after `REAP_GRACE_S`),
    reaps them, and stops and reaps the forkserver, so that their reads are counted."""
    deadline = time.monotonic() + REAP_GRACE_S
    for child in multiprocessing.active_children():
        child.join(max(0.0, deadline - time.monotonic()))
    left = multiprocessing.active_children()
    for child in left:
        child.kill()
        child.join(5.0)
    server = multiprocessing.forkserver._forkserver
    if getattr(server, "_forkserver_pid", None) is not None:
        server._stop()
    return {"children_killed": len(left)}


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec`'s loader timed, counted and measured by the rules of the module docstring."""
    ours = spec["loader"].startswith("ours")
    for module in ("flax.nnx", "datarax.pipeline") if ours else ("grain",):
        importlib.import_module(module)  # before the clock: the first batch is no import
    read_before = read_bytes()
    start = time.perf_counter()
    batches = _batches(spec)
    figures = timed(batches, start, spec["batches"])
    memory = _status()
    batches.close()
    del batches
    if ours:
        _close_ours()
    reaped = _reap()
    read = read_bytes() - read_before
    return {
        **figures,
        "read_bytes": read,
        "read_bytes_per_token": read / figures["tokens"] if figures["tokens"] else 0.0,
        "peak_rss_mb": _peak_rss_mb(),
        **memory,
        **reaped,
    }


if __name__ == "__main__":
    main(measure)

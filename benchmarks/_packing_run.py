"""One candidate of `benchmarks.packing`, in a process of its own: its packed batches
over the Parquet documents, timed, counted, and printed as one JSON line.

    python -m benchmarks._packing_run '{"loader": "ours", "method": "first_fit", ...}'

The loaders (the same files, the same row length and batch size; `epochs` epochs):

- ``ours``: ``Pipeline(source=Packed(Documents(files), length, method=...),
  batch_size=..., shuffle=True, rngs=nnx.Rngs(0), workers=...)``, epoch after epoch;
- ``grain-shuffled``: ``grain.MapDataset.source(ParquetRows(files)).shuffle(seed=0)
  .repeat(epochs).to_iter_dataset()``, then Grain's packing, ``.batch(batch_size)`` and,
  with workers, ``.mp_prefetch(grain.MultiprocessingOptions(num_workers=...))``;
- ``grain-streamed``: ``grain.experimental.ParquetIterDataset(files)`` repeated, the
  rest the same: Grain's own Parquet reader, which streams the files in order (16
  interleaved) and so has no global shuffle.

Grain's packing: ``FirstFitPackIterDataset(ds, length_struct={"tokens": length},
num_packing_bins=batch_size)`` (its docstring sets no default; MaxText, built on Grain,
passes the batch size) after a ``FlatMapIterDataset`` that cuts documents longer than a
row into pieces of at most a row (first-fit refuses a longer element; ours cuts them
the same way), or ``ConcatThenSplitIterDataset(ds, length_struct={"tokens": length})``.

The clock: ``first_batch_s`` from building the loader to its first batch; then every
later batch until the end of the `epochs` epochs is timed together, so whatever a
loader read ahead is inside the timed part. ``tokens_per_s`` is the non-padding tokens
(segment id > 0) of those batches over their seconds: the mean rate, not a median.
``fill`` counts every delivered batch, the first included.
"""

from __future__ import annotations

import collections
import importlib
import itertools
import json
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

import numpy as np
import pyarrow.parquet as pq

KEPT_BYTES = 256 << 20  # decoded row groups kept a process, as Documents keeps them


class ParquetRows:
    """A random-access source of the documents in Parquet files, one dict a row, for
    ``grain.MapDataset.source``. It decodes as `Documents` does: a row's row group (its
    `field` column only), kept, the oldest dropped first beyond 256 MiB a process. Each
    of Grain's reading threads opens a file once (`Documents` reads from one thread)."""

    def __init__(self, paths: list[str], field: str = "tokens"):
        self.paths, self.field = list(paths), field
        self.groups: list[tuple[int, int]] = []
        starts = [0]
        for number, path in enumerate(self.paths):
            metadata = pq.ParquetFile(path).metadata
            for group in range(metadata.num_row_groups):
                self.groups.append((number, group))
                starts.append(starts[-1] + metadata.row_group(group).num_rows)
        self.starts = np.array(starts, np.int64)
        self.__setstate__(self.__getstate__())

    def __getstate__(self) -> dict[str, Any]:  # what a worker process receives
        return {
            "paths": self.paths,
            "field": self.field,
            "groups": self.groups,
            "starts": self.starts,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._decoded: collections.OrderedDict[int, tuple[np.ndarray, np.ndarray]] = (
            collections.OrderedDict()
        )
        self._bytes, self._files, self._lock = 0, {}, threading.Lock()

    def __len__(self) -> int:
        return int(self.starts[-1])

    def _group(self, which: int) -> tuple[np.ndarray, np.ndarray]:
        decoded = self._decoded.get(which)
        if decoded is not None:
            return decoded
        number, group = self.groups[which]
        opened = (threading.get_ident(), number)  # Grain reads from 16 threads: one each
        file = self._files.get(opened)
        if file is None:
            file = self._files[opened] = pq.ParquetFile(self.paths[number])
        lists = file.read_row_group(group, columns=[self.field]).column(0).combine_chunks()
        decoded = (lists.values.to_numpy(), lists.offsets.to_numpy())
        with self._lock:
            self._decoded[which] = decoded
            self._bytes += decoded[0].nbytes + decoded[1].nbytes
            while self._bytes > KEPT_BYTES and len(self._decoded) > 1:
                _, dropped = self._decoded.popitem(last=False)
                self._bytes -= dropped[0].nbytes + dropped[1].nbytes
        return decoded

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        which = int(np.searchsorted(self.starts, index, side="right")) - 1
        values, offsets = self._group(which)
        row = index - int(self.starts[which])
        return {"tokens": values[offsets[row] : offsets[row + 1]]}


def grain_packed(dataset: Any, spec: dict[str, Any]) -> Generator[dict[str, np.ndarray]]:
    """Grain's packed batches of `dataset` (a Grain ``IterDataset`` of ``{"tokens": ...}``
    documents), packed as the module docstring says, batched, and with workers
    prefetched; each as ``{"tokens", "segment_ids"}``. The iterator is closed at the end."""
    import grain

    length = spec["length"]

    class CutLong(grain.experimental.FlatMapTransform):
        """A document longer than a row as pieces of at most a row."""

        max_fan_out = spec["max_pieces"]

        def flat_map(self, element: dict[str, np.ndarray]) -> list[dict[str, np.ndarray]]:
            tokens = element["tokens"]
            return [{"tokens": tokens[at : at + length]} for at in range(0, len(tokens), length)]

    if spec["method"] == "first_fit":
        dataset = grain.experimental.FirstFitPackIterDataset(
            grain.experimental.FlatMapIterDataset(dataset, CutLong()),
            length_struct={"tokens": length},
            num_packing_bins=spec["batch_size"],
        )
    else:
        dataset = grain.experimental.ConcatThenSplitIterDataset(
            dataset, length_struct={"tokens": length}
        )
    dataset = dataset.batch(spec["batch_size"])
    if spec["workers"]:
        options = grain.MultiprocessingOptions(num_workers=spec["workers"])
        dataset = dataset.mp_prefetch(options)
    iterator = iter(dataset)
    try:
        for batch in iterator:
            yield {"tokens": batch["tokens"], "segment_ids": batch["tokens_segment_ids"]}
    finally:
        close = getattr(iterator, "close", None)
        if callable(close):
            close()


def _grain_batches(spec: dict[str, Any]) -> Generator[dict[str, np.ndarray]]:
    import grain
    from absl import flags

    flags.FLAGS.mark_as_parsed()  # Grain's processes read absl flags; no command line here
    if spec["loader"] == "grain-shuffled":
        source = grain.MapDataset.source(ParquetRows(spec["files"]))
        dataset = source.shuffle(seed=0).repeat(spec["epochs"]).to_iter_dataset()
    else:
        streamed = grain.experimental.ParquetIterDataset(spec["files"])
        dataset = grain.experimental.RepeatIterDataset(streamed, spec["epochs"])
    return grain_packed(dataset, spec)


def _our_batches(spec: dict[str, Any]) -> Generator[dict[str, np.ndarray]]:
    from flax import nnx

    from datarax.pipeline import Documents, Packed, Pipeline
    from datarax.pipeline.documents._parquet import _decoded

    documents = Documents(spec["files"], cache_dir=spec["cache_dir"])
    packed = Packed(documents, spec["length"], method=spec["method"])
    pipeline = Pipeline(
        source=packed,
        batch_size=spec["batch_size"],
        shuffle=True,
        rngs=nnx.Rngs(0),
        workers=spec["workers"],
    )
    cold = spec["loader"] == "ours-cold"
    for _ in range(spec["epochs"]):
        for batch in pipeline:
            yield batch
            if cold:  # no row group kept: each batch decodes every group it reads
                _decoded.clear()


def measure(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec`'s loader timed and counted by the rule of this module's docstring."""
    ours = spec["loader"].startswith("ours")
    for module in ("flax.nnx", "datarax.pipeline") if ours else ("grain",):
        importlib.import_module(module)  # before the clock: the first batch is no import
    start = time.perf_counter()
    batches = _our_batches(spec) if ours else _grain_batches(spec)
    figures = timed(batches, start)
    batches.close()
    return {**figures, "peak_rss_mb": _peak_rss_mb()}


def timed(
    batches: Iterator[dict[str, np.ndarray]], start: float, limit: int | None = None
) -> dict[str, Any]:
    """The clock and counts of this module's docstring for `batches`, a loader built at
    `start` (`time.perf_counter`): its first batch, then up to `limit` more (None: all)
    timed together."""
    first = next(batches)
    first_batch_s = time.perf_counter() - start
    tokens = int(np.count_nonzero(first["segment_ids"]))
    slots, count, shape = first["segment_ids"].size, 1, list(first["tokens"].shape)
    timed_tokens, clock = 0, time.perf_counter()
    for batch in itertools.islice(batches, limit):
        made = int(np.count_nonzero(batch["segment_ids"]))
        timed_tokens += made
        tokens += made
        slots += batch["segment_ids"].size
        count += 1
    timed_s = time.perf_counter() - clock
    return {
        "first_batch_s": first_batch_s,
        "timed_s": timed_s,
        "timed_batches": count - 1,
        "timed_tokens": timed_tokens,
        "tokens_per_s": timed_tokens / timed_s if timed_s > 0 else 0.0,
        "batches": count,
        "tokens": tokens,
        "slots": slots,
        "fill": tokens / slots,
        "first_batch_shape": shape,
    }


def _peak_rss_mb() -> float:
    """This process's own peak RSS: ``VmHWM``, which starts afresh at ``exec``, unlike
    ``ru_maxrss``, which keeps the parent's peak from before it (Linux)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:  # no /proc
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(measured: Callable[[dict[str, Any]], dict[str, Any]] = measure) -> None:
    """Prints `measured` of the spec given as the first argument, as one JSON line."""
    spec = json.loads(sys.argv[1])
    print(json.dumps(measured(spec)), flush=True)
    if not spec["loader"].startswith("ours"):
        # Leave without the interpreter's teardown: a closed Grain iterator's finalizers
        # print errors while modules are torn down. Everything is written by now.
        sys.stderr.flush()
        os._exit(0)


if __name__ == "__main__":
    main()

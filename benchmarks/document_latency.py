"""Reads that wait: batches of random documents from sources that answer each request
after a latency, read one after another (``read_threads=1``) and on `Documents`' read
threads (the default, 16), and the same store read from a local folder, where the
threads must cost nothing (local files are read in the calling thread).

A bucket answers each request after a latency (tens of ms); a read of 64 documents one
after another waits 64 times. `Documents` fetches the documents of one ``read`` on
``read_threads`` threads at once (16, as Grain reads) when they come from remote files
(a request a document) or from a sequence other than a list, tuple or array (a
``__getitem__`` an item), so the waits overlap.

The groups, each a pair of candidates, ``serial`` (``read_threads=1``) and ``default``
(no ``read_threads``: 16), timed interleaved (every round runs each candidate of the
group once, in an order shuffled with a fixed seed; two warm-up calls each first), both
reading the same random batches in the same order:

- ``sequence``: ``Documents(source, lengths=...)`` over a class with ``__len__`` and
  ``__getitem__`` whose every item (a small int32 array, 1 to 255 tokens) sleeps
  ``--latency-ms`` first; ``docs.read(indices)`` of ``--batch-size`` random documents,
  ``--batches`` rounds;
- ``remote store``: a token store (``--documents`` documents, lengths log-normal around
  ``--mean-length`` tokens, ``write_documents(..., documents_per_shard=...)`` into a
  temporary folder) copied into fsspec's in-memory file system and read as
  ``Documents("slowmemory://bench/store", cache_dir=...)``: ``slowmemory`` is this
  module's `SlowMemoryFileSystem`, fsspec's ``MemoryFileSystem`` (whose files are one
  dict a process, so what is written through ``memory://`` is there under
  ``slowmemory://``: checked) whose ``cat_file``, the byte-range request `Documents`
  makes a document, sleeps ``--latency-ms`` before answering; batches as above;
- ``remote packed``: ``Packed(Documents(url), --packed-length)`` over that store,
  ``packed.__getitems__(rows)`` of ``--batch-size`` random rows (a request a piece of a
  document), ``--packed-batches`` rounds; reported, no target;
- ``local store``: ``Documents(folder)`` over the store's local copy (its index mapped, a
  document one ``pread``; the files in the page cache), ``docs.read(indices)``;
  ``--local-batches`` rounds of ``--local-calls`` batches a sample;
- ``local packed``: ``Packed(Documents(folder), --local-packed-length)``,
  ``packed.__getitems__(rows)`` of ``--batch-size`` random rows, rounds as above.

Figures: each candidate's median time a batch over the rounds (and its range), and the
ratio default / serial, the median over rounds of the ratio taken in the same round.
Targets: ``sequence`` and ``remote store`` below 1/6 (a batch of 64 reads that each wait
10 ms, in well under a sixth of the serial time, with the default settings); ``local
store`` and ``local packed`` at most 1.05 (local reads must not slow down).

    python -m benchmarks.document_latency --out DIR [--label NAME] [--tiny]
        [--documents N] [--mean-length L] [--documents-per-shard S] [--batch-size B]
        [--batches N] [--packed-batches N] [--packed-length L] [--local-batches N]
        [--local-calls N] [--local-packed-length L] [--latency-ms MS]

writes ``DIR/document_latency_<label>.json`` (``two_core`` on 2 usable cores, else
``<cores>_core``) with the machine, the versions, the load, the command line, every
sample, the figures and each target's verdict. ``--tiny`` (600 documents, 2 ms of
latency, 3 rounds) takes seconds, for the tests. The full run (20,000 documents, 10 ms,
50 rounds) takes about a minute and a half on 2 cores.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.metadata
import json
import os
import platform
import random
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fsspec
import numpy as np
from fsspec.implementations.memory import MemoryFileSystem

from benchmarks._host_work import spread, usable_cores, write_json
from benchmarks._packing_data import document_lengths
from benchmarks._timing import Timings, paired_ratio

SCHEME = "slowmemory"
URL = f"{SCHEME}://bench/store"
SIXTH = 1 / 6
LOCAL_BOUND = 1.05


@dataclasses.dataclass(frozen=True)
class Settings:
    documents: int = 20_000
    mean_length: int = 512
    documents_per_shard: int = 4096
    batch_size: int = 64
    batches: int = 50
    packed_batches: int = 10
    packed_length: int = 1024
    local_batches: int = 50
    local_calls: int = 20
    local_packed_length: int = 2048
    latency_ms: float = 10.0


TINY = Settings(600, 128, 200, 64, 3, 2, 256, 3, 2, 512, 2.0)


class SlowMemoryFileSystem(MemoryFileSystem):
    """fsspec's in-memory file system (its files shared with ``memory://`` in this
    process) whose ``cat_file`` (a byte-range request) sleeps `latency_s` first, as a
    bucket answers after a latency; `requests` counts the calls."""

    protocol = SCHEME
    latency_s = 0.01
    requests = 0
    _lock = threading.Lock()

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        # MemoryFileSystem strips only "memory://": without this a path keeps the scheme
        # and names no file of the shared store.
        if isinstance(path, str):
            path = path.removeprefix(f"{SCHEME}://")
        return super()._strip_protocol(path)

    def cat_file(self, path: Any, start: Any = None, end: Any = None, **kwargs: Any) -> Any:
        with SlowMemoryFileSystem._lock:
            SlowMemoryFileSystem.requests += 1
        time.sleep(self.latency_s)
        return super().cat_file(path, start=start, end=end, **kwargs)


class SlowSequence:
    """Documents in a sequence that is no list: item i (``lengths[i]`` int32 tokens)
    answers after `latency_s`, as a data source over a remote service would."""

    def __init__(self, lengths: np.ndarray, latency_s: float):
        self.lengths, self.latency_s = lengths, latency_s

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, index: int) -> np.ndarray:
        time.sleep(self.latency_s)
        return np.arange(int(self.lengths[index]), dtype=np.int32) + index % 1000


def interleaved(
    candidates: dict[str, Callable[[], Any]], rounds: int, calls_per_sample: int = 1
) -> Timings:
    """Seconds a call of each candidate, a sample a round, in an order shuffled with a
    fixed seed; two warm-up calls each first. As `benchmarks._timing.interleaved`, but
    without ``jax.block_until_ready``, whose walk over 64 rows would be timed with a
    local batch of some hundred microseconds."""
    names, orders = list(candidates), random.Random(0)
    for run in candidates.values():
        run()
        run()
    times: Timings = {name: [] for name in names}
    for _ in range(rounds):
        for name in orders.sample(names, len(names)):
            run, result = candidates[name], None
            start = time.perf_counter()
            for _ in range(calls_per_sample):
                result = run()
            times[name].append((time.perf_counter() - start) / calls_per_sample)
            del result
    return times


def _batches(count: int, high: int, size: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, high, size) for _ in range(count)]


def _cycling(call: Callable[[np.ndarray], Any], batches: list[np.ndarray]) -> Callable[[], Any]:
    """`call` of each of `batches` in turn, one a call (from the first again at the end)."""
    source: Iterator[np.ndarray] = iter(())

    def run() -> Any:
        nonlocal source
        batch = next(source, None)
        if batch is None:
            source = iter(batches)
            batch = next(source)
        return call(batch)

    return run


def _group(
    name: str,
    serial: Callable[[np.ndarray], Any],
    default: Callable[[np.ndarray], Any],
    batches: list[np.ndarray],
    rounds: int,
    calls: int,
    bound: float | None,
) -> dict[str, Any]:
    """The pair timed interleaved, each reading `batches` in the same order; figures in
    ms a batch, the paired ratio default / serial and its verdict against `bound`."""
    before = SlowMemoryFileSystem.requests
    counted: dict[str, int] = {"serial": 0, "default": 0}

    def counting(key: str, call: Callable[[np.ndarray], Any]) -> Callable[[np.ndarray], Any]:
        def run(batch: np.ndarray) -> Any:
            at = SlowMemoryFileSystem.requests
            read = call(batch)
            counted[key] += SlowMemoryFileSystem.requests - at
            return read

        return run

    runs = {
        "serial": _cycling(counting("serial", serial), batches),
        "default": _cycling(counting("default", default), batches),
    }
    times = interleaved(runs, rounds, calls)
    made = 2 + rounds * calls  # calls of each candidate, the warm-up included
    figures: dict[str, Any] = {"rounds": rounds, "batches_a_sample": calls}
    for key, samples in times.items():
        ms = [1e3 * s for s in samples]
        figures[key] = {"ms_per_batch": spread(ms), "samples_ms": ms}
        figures[key]["requests_per_batch"] = counted[key] / made
    ratio = paired_ratio(times, "default", "serial")
    figures["default_over_serial"] = ratio
    medians = [figures[key]["ms_per_batch"]["median"] for key in ("default", "serial")]
    figures["ratio_of_medians"] = medians[0] / medians[1]
    figures["bound"] = bound
    figures["met"] = None if bound is None else bool(ratio < bound if bound < 1 else ratio <= bound)
    figures["requests_counted"] = SlowMemoryFileSystem.requests - before
    verdict = "reported" if bound is None else ("met" if figures["met"] else "MISSED")
    target = "-" if bound is None else (f"< {bound:.3f}" if bound < 1 else f"<= {bound:g}")
    print(
        f"{name}: serial {_ms(figures['serial'])}, default {_ms(figures['default'])} a batch; "
        f"default / serial {ratio:.3f} (target {target}: {verdict})",
        flush=True,
    )
    return figures


def _ms(figures: dict[str, Any]) -> str:
    median = figures["ms_per_batch"]["median"]
    return f"{median:.2f} ms" if median >= 1 else f"{1e3 * median:.0f} µs"


def _store(folder: Path, settings: Settings) -> tuple[Path, dict[str, Any]]:
    """The token store, written locally, read through (so it is in the page cache) and
    copied into the in-memory file system under `URL`."""
    from datarax.pipeline import write_documents

    rng = np.random.default_rng(0)
    lengths = document_lengths(settings.documents, 2 * settings.mean_length)
    store = folder / "store"
    start = time.perf_counter()
    write_documents(
        [rng.integers(0, 50_257, n) for n in lengths],
        store,
        replace=True,
        documents_per_shard=settings.documents_per_shard,
    )
    written_s = time.perf_counter() - start
    memory = fsspec.filesystem("memory")
    names = sorted(path.name for path in store.iterdir() if path.is_file())
    for name in names:
        memory.pipe_file(f"memory://bench/store/{name}", (store / name).read_bytes())
    # Each process makes its own file system, as `Documents` does: the files are there.
    slow = fsspec.get_filesystem_class(SCHEME)(skip_instance_cache=True)
    seen = sorted(str(path).rsplit("/", 1)[-1] for path in slow.ls(URL, detail=False))
    manifest = (store / "manifest.json").read_bytes()
    if seen != names or slow.cat_file(f"{URL}/manifest.json") != manifest:
        raise RuntimeError(f"{URL} does not show the files written to memory://: {seen}")
    return store, {
        "documents": settings.documents,
        "tokens": int(lengths.sum()),
        "mean_length": float(lengths.mean()),
        "median_length": float(np.median(lengths)),
        "files": names,
        "bytes": sum((store / name).stat().st_size for name in names),
        "written_s": written_s,
        "slowmemory_shows_memory_files": True,
    }


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in ("datarax-sharding", "numpy", "fsspec", "jax"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def document_latency(settings: Settings, command: str) -> dict[str, Any]:
    """The whole run: the store, then each group (see the module doc)."""
    from datarax.pipeline import Documents, Packed

    latency_s = settings.latency_ms / 1e3
    SlowMemoryFileSystem.latency_s = latency_s
    fsspec.register_implementation(SCHEME, SlowMemoryFileSystem, clobber=True)
    results: dict[str, Any] = {
        "command": command,
        "settings": dataclasses.asdict(settings),
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": _versions(),
        "load_average_before": os.getloadavg(),
    }
    size, groups = settings.batch_size, {}
    with tempfile.TemporaryDirectory(prefix="document_latency_") as temporary:
        folder = Path(temporary)
        store, results["store"] = _store(folder, settings)
        cache = folder / "cache"

        lengths = np.random.default_rng(1).integers(1, 256, settings.documents)
        source = SlowSequence(lengths, latency_s)
        count = 2 + settings.batches
        chosen = _batches(count, len(lengths), size, 2)
        serial = Documents(source, lengths=lengths, read_threads=1)
        default = Documents(source, lengths=lengths)
        groups["sequence"] = _group(
            f"sequence, {settings.latency_ms:g} ms an item, {size} documents",
            serial.read,
            default.read,
            chosen,
            settings.batches,
            1,
            SIXTH,
        )

        remote = {
            "serial": Documents(URL, cache_dir=cache, read_threads=1),
            "default": Documents(URL, cache_dir=cache),
        }
        local = Documents(store)
        documents = len(local)
        chosen = _batches(count, documents, size, 3)
        pairs = zip(remote["default"].read(chosen[0]), local.read(chosen[0]), strict=True)
        if not all(np.array_equal(a, b) for a, b in pairs):
            raise RuntimeError(f"{URL} reads other documents than {store}")
        groups["remote store"] = _group(
            f"remote store, {settings.latency_ms:g} ms a request, {size} documents",
            remote["serial"].read,
            remote["default"].read,
            chosen,
            settings.batches,
            1,
            SIXTH,
        )

        Packed(remote["default"], settings.packed_length)  # its plan computed and saved
        packed = {key: Packed(docs, settings.packed_length) for key, docs in remote.items()}
        rows = len(packed["default"])
        chosen = _batches(2 + settings.packed_batches, rows, size, 4)
        groups["remote packed"] = _group(
            f"remote Packed({settings.packed_length}), {size} rows",
            packed["serial"].__getitems__,
            packed["default"].__getitems__,
            chosen,
            settings.packed_batches,
            1,
            None,
        )
        groups["remote packed"]["rows"] = rows

        local_pair = {
            "serial": Documents(store, read_threads=1),
            "default": Documents(store),
        }
        for path in store.glob("*.bin"):
            path.read_bytes()
        calls = settings.local_calls
        chosen = _batches(2 + settings.local_batches * calls, documents, size, 5)
        groups["local store"] = _group(
            f"local store, {size} documents",
            local_pair["serial"].read,
            local_pair["default"].read,
            chosen,
            settings.local_batches,
            calls,
            LOCAL_BOUND,
        )

        Packed(local_pair["default"], settings.local_packed_length)  # the plan, saved
        local_packed = {
            key: Packed(docs, settings.local_packed_length) for key, docs in local_pair.items()
        }
        rows = len(local_packed["default"])
        chosen = _batches(2 + settings.local_batches * calls, rows, size, 6)
        groups["local packed"] = _group(
            f"local Packed({settings.local_packed_length}), {size} rows",
            local_packed["serial"].__getitems__,
            local_packed["default"].__getitems__,
            chosen,
            settings.local_batches,
            calls,
            LOCAL_BOUND,
        )
        groups["local packed"]["rows"] = rows
    results["groups"] = groups
    results["targets"] = [
        {
            "name": f"{name}: ms a batch, default / serial",
            "value": figures["default_over_serial"],
            "target": f"< {SIXTH:.3f}" if figures["bound"] < 1 else f"<= {LOCAL_BOUND:g}",
            "met": figures["met"],
        }
        for name, figures in groups.items()
        if figures["bound"] is not None
    ]
    results["load_average_after"] = os.getloadavg()
    return results


def print_table(results: dict[str, Any]) -> None:
    """The figures as a markdown table."""
    print("\n| group | serial, a batch | default, a batch | default / serial | target |")
    print("| --- | --- | --- | --- | --- |")
    for name, figures in results["groups"].items():
        bound = figures["bound"]
        target = "-" if bound is None else (f"< {bound:.3f}" if bound < 1 else f"<= {bound:g}")
        verdict = "" if bound is None else (" (met)" if figures["met"] else " (MISSED)")
        print(
            f"| {name} | {_ms(figures['serial'])} | {_ms(figures['default'])} | "
            f"{figures['default_over_serial']:.3f} | {target}{verdict} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True, help="folder of the JSON file")
    parser.add_argument("--label", help="the file's name: document_latency_<label>.json")
    parser.add_argument("--tiny", action="store_true", help="seconds of work, for a test")
    fields = dataclasses.fields(Settings)
    for field in fields:
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, type=type(field.default), help=f"default {field.default}")
    args = parser.parse_args()
    given = {f.name: getattr(args, f.name) for f in fields if getattr(args, f.name) is not None}
    settings = dataclasses.replace(TINY if args.tiny else Settings(), **given)
    label = args.label or ("two_core" if usable_cores() == 2 else f"{usable_cores()}_core")
    print("load average before:", os.getloadavg(), "cores:", os.cpu_count(), flush=True)
    command = " ".join(["python -m benchmarks.document_latency", *sys.argv[1:]])
    results = document_latency(settings, command)
    print_table(results)
    out = args.out / f"document_latency_{label}.json"
    write_json(out, results)
    print("wrote", out)
    print(json.dumps({row["name"]: round(row["value"], 4) for row in results["targets"]}))


if __name__ == "__main__":
    main()

"""Host work on every core: `Pipeline(workers=N)` against one process and against Grain.

Two cases, chosen with ``--case`` (``records``, the default, is what ``make bench`` runs).

**records**: each record is a 32x32x3 uint8 image that a numpy augmentation (reflect-pad
and crop, flip, brightness and contrast jitter, normalise) turns into float32, repeated
so that a record costs about 0.1, 0.4, 1.6 or 5 ms on one core. Candidates, each making
4,096 records in batches of 128 (one epoch):

- a plain single-threaded loop over the batches;
- `Pipeline` with each of ``--workers`` (0 and 2 by default, this machine's 2 cores);
- Grain (``MapDataset ... batch``) iterated through ``to_iter_dataset()`` with its
  defaults (16 read threads), with ``ReadOptions(num_threads=2)``, and with
  ``mp_prefetch`` over 1 and 2 worker processes (left out with ``--no-grain``).

Every candidate is built afresh for each sample and timed by the rule of
`benchmarks._epoch_timing`, the same as the images case: the first epoch untimed (it
holds the start-up of processes and threads), then ``--epochs`` (3) epochs of steady
state, each timed alone; a sample is the median of their records per second. (A
pipeline kept from one sample to the next would not do: its workers make the next
epoch's first batches while the other candidates run, and would hand them over for
free.) Every candidate runs once per round in a shuffled order; the results give
records per second per round, their median and range, and the seconds to the first
batch. Ratios (`Pipeline` at its best worker count over Grain at its best
configuration, the most workers over workers=0) are medians of per-round ratios.

**images**: batches of 256 x 224 x 224 x 3 uint8 (38.5 MB), cut from a source of
``--images`` images of 240 x 240 x 3 uint8 (a memory-mapped ``.npy`` file written to the
temporary folder at the start, 3,072 images by default: 12 batches an epoch). One numpy
stage crops each image to 224 x 224 at a place drawn from its label and flips every
other one left to right, the crop copied out ``passes`` times (from other places, the
last one kept) to set the cost; the passes are calibrated before any candidate runs so
that one batch costs about ``--stage-ms`` (160) ms in one process, or set with
``--passes``. Candidates, one of each per ``--workers`` count (0 2 4 8 12 by default):

- `Pipeline(source, stages=[stage], batch_size, workers=N)`;
- Grain ``MapDataset.source(...).map(one image).batch(...).repeat()`` through
  ``to_iter_dataset(ReadOptions(num_threads=0))`` (Grain's advice for data already in
  memory; ``--grain-threads``), then ``mp_prefetch`` over N processes, or nothing more
  for N = 0 (plain iteration in this process);
- placement alone: ``jax.device_put`` of one batch made in advance onto
  ``jax.devices()[0]``, waited for.

Both loaders make the same batches (the first batch's digest is compared). Each run of
a candidate is timed by the rule of `benchmarks._epoch_timing`, the same for both: the
seconds to the first batch (start-up included), then the rest of the first epoch
untimed (the clock starts at the second epoch, once Grain's and the workers' buffers
have filled), then ``--epochs`` (3) epochs of host work alone and as many with each
batch placed on ``jax.devices()[0]`` and waited for, each epoch timed alone: host ms
per batch and host + placement ms per batch. Every candidate runs once per round, in a
shuffled order, ``--rounds`` rounds (1 by default); the figures are medians over all
epochs of all rounds, with their range; a ratio between candidates is the median of the
per-round ratios of their per-round medians.

    python -m benchmarks.host_work [--rounds 3] [--costs 0.1 0.4 1.6 5] [--epochs 3]
        [--out DIR]
    python -m benchmarks.host_work --case images [--images 3072] [--batch-size 256]
        [--workers 0 2 4 8 12] [--stage-ms 160 | --passes P] [--epochs 3] [--out FILE.json]

``--out FILE.json`` writes this run's results to that file (either case); for the
records case ``--out DIR`` writes ``host_work.png`` there and the run into
``results.json`` (as ``make bench`` does). A markdown table is printed either way.
"""

from __future__ import annotations

import argparse
import functools
import gc
import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import multiprocessing
import os
import platform
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grain
import jax
import numpy as np
from absl import flags

from benchmarks._epoch_timing import EpochTimes, close_stream, time_epochs
from datarax.pipeline import ArraySource, Pipeline

RECORDS, BATCH, SIDE = 4096, 128, 32
_MEAN = np.float32(120.0)
_STD = np.float32(64.0)


def augment(image: np.ndarray, index: int, passes: int) -> np.ndarray:
    """`passes` rounds of crop, flip, jitter and normalise of one HxWx3 uint8 image."""
    out = np.empty(image.shape, np.float32)
    for step in range(passes):
        key = index * 31 + step
        dy, dx = key % 9, (key // 9) % 9
        crop = np.pad(image, ((4, 4), (4, 4), (0, 0)), mode="reflect")[
            dy : dy + SIDE, dx : dx + SIDE
        ]
        if key % 2:
            crop = crop[:, ::-1]
        pixels = crop.astype(np.float32) * np.float32(0.8 + 0.05 * (key % 8))
        pixels = (pixels - pixels.mean()) * np.float32(1.1) + pixels.mean()
        out = (np.clip(pixels, 0, 255) - _MEAN) / _STD
    return out


RecordWork = Callable[[np.ndarray, int, int], np.ndarray]  # (image, label, passes)


class EveryRecord:
    """A `Pipeline` stage: every record of the batch through `work` (`augment` or
    `crop_flip`), stacked."""

    def __init__(self, work: RecordWork, passes: int):
        self.work, self.passes = work, passes

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        images = [
            self.work(image, int(label), self.passes)
            for image, label in zip(batch["image"], batch["label"], strict=True)
        ]
        return {"image": np.stack(images), "label": batch["label"]}


class OneRecord:
    """A Grain map: one record through `work` (Grain's batch stacks them)."""

    def __init__(self, work: RecordWork, passes: int):
        self.work, self.passes = work, passes

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        label = record["label"]
        return {"image": self.work(record["image"], int(label), self.passes), "label": label}


class Records:
    """A random-access source of records, for Grain."""

    def __init__(self, data: dict[str, np.ndarray]):
        self.data = data

    def __len__(self) -> int:
        return len(self.data["label"])

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self.data["image"][index], "label": self.data["label"][index]}


def _data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (RECORDS, SIDE, SIDE, 3), dtype=np.uint8)
    return {"image": images, "label": np.arange(RECORDS, dtype=np.int64)}


def _per_record_s(passes: int, data: dict[str, np.ndarray], repeats: int) -> float:
    """Seconds `augment` takes per record on one core: the fastest of `repeats` tries,
    the one other work on the machine disturbed least."""
    sample = data["image"][:64]
    fastest = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for index, image in enumerate(sample):
            augment(image, index, passes)
        fastest = min(fastest, (time.perf_counter() - start) / len(sample))
    return fastest


def _passes_for(target_ms: float, data: dict[str, np.ndarray]) -> tuple[int, float]:
    """How many passes make one record cost about `target_ms` on one core, and the
    milliseconds per record that many passes measure."""
    one, sixteen = (_per_record_s(n, data, repeats=5) for n in (1, 16))
    per_pass = max((sixteen - one) / 15, 1e-6)
    passes = max(1, round(1 + (target_ms / 1e3 - one) / per_pass))
    return passes, _per_record_s(passes, data, repeats=3) * 1e3


WORKERS = 2  # the worker count `make bench` compares with workers=0
COSTS_MS = (0.1, 0.4, 1.6, 5.0)
# The two Grain configurations that were the slowest at every cost up to 1.6 ms in
# every run recorded (docs/benchmarks/README.md): from 5 ms on they would take about
# 80 s an epoch each, so they are left out there.
SLOWEST_GRAIN = ("Grain default", "Grain mp_prefetch 1")
SLOWEST_GRAIN_UNTIL_MS = 5.0


def _pipeline_name(workers: int) -> str:
    return f"Pipeline workers={workers}"


def _timed(open_stream: Callable[[], Iterator[Any]], epochs: int) -> tuple[float, float]:
    """Records per second of the stream `open_stream` opens, the median over `epochs`
    epochs after the first, and the seconds to its first batch."""
    times = time_epochs(open_stream, RECORDS // BATCH, epochs)
    return statistics.median(BATCH * 1e3 / ms for ms in times.host_ms), times.first_batch_s


def _epochs(**options: Any) -> Iterator[Any]:
    """The batches of `Pipeline(**options)`, built at the first batch, epoch after epoch,
    without end."""
    pipeline = Pipeline(**options)
    while True:
        yield from pipeline


def _candidates(
    data: dict[str, np.ndarray],
    passes: int,
    cost_ms: float,
    workers: Sequence[int],
    with_grain: bool,
) -> dict[str, Callable[[], Iterator[Any]]]:
    """Each candidate as a function that opens its endless stream of batches."""
    stage = EveryRecord(augment, passes)

    def plain() -> Iterator[dict[str, np.ndarray]]:
        while True:
            for start in range(0, RECORDS, BATCH):
                yield stage({k: v[start : start + BATCH] for k, v in data.items()})

    candidates: dict[str, Callable[[], Iterator[Any]]] = {"plain loop": plain}
    for count in workers:
        candidates[_pipeline_name(count)] = functools.partial(
            _epochs, source=data, stages=[stage], batch_size=BATCH, workers=count
        )
    if not with_grain:
        return candidates
    repeated = (
        grain.MapDataset.source(Records(data)).map(OneRecord(augment, passes)).batch(BATCH).repeat()
    )

    def grain_stream(read: grain.ReadOptions | None, processes: int) -> Iterator[Any]:
        dataset = repeated.to_iter_dataset(read)
        if processes:
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=processes))
        return iter(dataset)

    candidates |= {
        "Grain default": lambda: grain_stream(None, 0),
        "Grain 2 threads": lambda: grain_stream(grain.ReadOptions(num_threads=2), 0),
        "Grain mp_prefetch 1": lambda: grain_stream(None, 1),
        "Grain mp_prefetch 2": lambda: grain_stream(None, 2),
    }
    if cost_ms >= SLOWEST_GRAIN_UNTIL_MS:
        for name in SLOWEST_GRAIN:
            del candidates[name]
    return candidates


def host_work(
    costs_ms: Iterable[float] = COSTS_MS,
    rounds: int = 3,
    workers: Sequence[int] = (0, WORKERS),
    with_grain: bool = True,
    epochs: int = 3,
) -> dict[str, Any]:
    """Records per second of every candidate at every per-record cost, per round, each
    the median over `epochs` epochs after the first."""
    workers = sorted(set(workers))
    flags.FLAGS.mark_as_parsed()  # Grain's multiprocessing reads absl flags
    data = _data()
    order = random.Random(0)
    cases = []
    # Calibrated before any candidate runs: a Grain iterator's processes can go on
    # working for a while after it is deleted, and would slow the measurement.
    calibrated = {cost: _passes_for(cost, data) for cost in costs_ms}
    for cost, (passes, measured_ms) in calibrated.items():
        candidates = _candidates(data, passes, cost, workers, with_grain)
        samples: dict[str, list[float]] = {name: [] for name in candidates}
        starts: dict[str, list[float]] = {name: [] for name in candidates}
        for round_ in range(1, rounds + 1):
            for name in order.sample(list(candidates), len(candidates)):
                rate, first_batch_s = _timed(candidates[name], epochs)
                samples[name].append(rate)
                starts[name].append(first_batch_s)
                # As it goes, so that a run cut short still shows what it measured.
                print(
                    f"  {cost:g} ms, round {round_}/{rounds}: {name}: {rate:,.0f} records/s,"
                    f" first batch {first_batch_s:.2f} s",
                    flush=True,
                )
        del candidates
        gc.collect()
        case = _summary(cost, passes, measured_ms, samples, workers)
        cases.append(case | {"first_batch_s": starts})
    return {
        "case": "records",
        "records": RECORDS,
        "batch_size": BATCH,
        "rounds": rounds,
        "epochs": epochs,
        "workers": max(workers),
        "worker_counts": workers,
        "cores": os.cpu_count(),
        "cases": cases,
    }


def _spread(values: Sequence[float]) -> dict[str, Any]:
    """The median of `values` and their range."""
    return {"median": statistics.median(values), "range": [min(values), max(values)]}


def _summary(
    cost: float,
    passes: int,
    measured_ms: float,
    samples: dict[str, list[float]],
    workers: Sequence[int],
) -> dict[str, Any]:
    per_round = list(zip(*samples.values(), strict=True))
    names = list(samples)

    def best(prefix: str, rates: tuple[float, ...]) -> float:
        return max(r for n, r in zip(names, rates, strict=True) if n.startswith(prefix))

    summary: dict[str, Any] = {
        "cost_ms": cost,
        "passes": passes,
        "measured_ms_per_record": measured_ms,
        "records_per_s": samples,
        "median_records_per_s": {n: statistics.median(s) for n, s in samples.items()},
    }
    if any(name.startswith("Grain") for name in names):
        over_grain = [best("Pipeline", rates) / best("Grain", rates) for rates in per_round]
        summary["pipeline_over_best_grain"] = statistics.median(over_grain)
        summary["pipeline_over_best_grain_range"] = [min(over_grain), max(over_grain)]
    if 0 in workers and max(workers) > 0:
        most, none = samples[_pipeline_name(max(workers))], samples[_pipeline_name(0)]
        ratios = [w / z for z, w in zip(none, most, strict=True)]
        summary["workers_over_none"] = statistics.median(ratios)
        summary["workers_over_none_range"] = [min(ratios), max(ratios)]
    return summary


def print_results(results: dict[str, Any]) -> None:
    print(
        f"\nrecords/s, median (range) of {results['rounds']} rounds of {results['records']} "
        f"records, {results['cores']} cores"
    )
    for case in results["cases"]:
        print(
            f"  {case['cost_ms']} ms per record ({case['passes']} passes, measured "
            f"{case['measured_ms_per_record']:.2f} ms on one core):"
        )
        for name in case["records_per_s"]:
            rates = case["records_per_s"][name]
            print(
                f"    {name:<22} {statistics.median(rates):>8,.0f}  "
                f"({min(rates):,.0f}-{max(rates):,.0f}), first batch "
                f"{statistics.median(case['first_batch_s'][name]):.2f} s"
            )
        ratios = []
        if "pipeline_over_best_grain" in case:
            low, high = case["pipeline_over_best_grain_range"]
            ratios.append(
                f"Pipeline best / Grain best {case['pipeline_over_best_grain']:.2f} "
                f"({low:.2f}-{high:.2f})"
            )
        if "workers_over_none" in case:
            low, high = case["workers_over_none_range"]
            ratios.append(
                f"workers={results['workers']} / workers=0 {case['workers_over_none']:.2f} "
                f"({low:.2f}-{high:.2f})"
            )
        print("    " + "; ".join(ratios))


def records_markdown(results: dict[str, Any]) -> str:
    """The records case as a markdown table: records per second, median (range)."""
    names = list(dict.fromkeys(n for case in results["cases"] for n in case["records_per_s"]))
    lines = [
        "| ms per record (measured) | " + " | ".join(names) + " | most workers / workers=0 |",
        "|" + " --- |" * (len(names) + 2),
    ]
    for case in results["cases"]:
        cells = []
        for name in names:
            rates = case["records_per_s"].get(name)
            cells.append(
                f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"
                if rates
                else ""
            )
        ratio = case.get("workers_over_none")
        low, high = case.get("workers_over_none_range", [0, 0])
        cells.append(f"{ratio:.2f} ({low:.2f}-{high:.2f})" if ratio is not None else "")
        lines.append(f"| {case['measured_ms_per_record']:.2f} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# The images case.
IMAGES, IMAGE_BATCH = 3072, 256
SOURCE_SIDE, IMAGE_SIDE = 240, 224
IMAGE_WORKERS = (0, 2, 4, 8, 12)
STAGE_MS = 160.0
EPOCHS = 3
_SHIFTS = SOURCE_SIDE - IMAGE_SIDE + 1


def crop_flip(image: np.ndarray, index: int, passes: int) -> np.ndarray:
    """A crop of IMAGE_SIDE x IMAGE_SIDE of one uint8 image at a place drawn from
    `index`, flipped left to right for every other index. `passes` sets the cost: the
    crop is copied out `passes` times, each time from another place, the last one kept.
    (The copies stay in the core's cache, so the work grows with cores as compute does.)
    """
    out = np.empty((IMAGE_SIDE, IMAGE_SIDE, image.shape[-1]), image.dtype)
    for step in range(passes):
        key = index * 31 + step
        dy, dx = key % _SHIFTS, (key // _SHIFTS) % _SHIFTS
        crop = image[dy : dy + IMAGE_SIDE, dx : dx + IMAGE_SIDE]
        np.copyto(out, crop[:, ::-1] if index % 2 and step == passes - 1 else crop)
    return out


class ImageFile(ArraySource):
    """The images of a ``.npy`` file, memory-mapped, with their index as label: the
    `Pipeline` source. Pickled as its path: each worker maps the file itself."""

    def __init__(self, path: str):
        self.path = path
        images = np.load(path, mmap_mode="r")
        super().__init__({"image": images, "label": np.arange(len(images), dtype=np.int32)})

    def __reduce__(self) -> tuple[Any, ...]:
        return ImageFile, (self.path,)


class ImageRecords:
    """The same images one record at a time: the Grain source. Pickled as its path."""

    def __init__(self, path: str):
        self.path = path
        # A plain array over the mapping, as `ArraySource` keeps: every slice of an
        # np.memmap would be an np.memmap too, which costs more per slice.
        self.images = np.asarray(np.load(path, mmap_mode="r"))

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self.images[index], "label": np.int32(index)}

    def __reduce__(self) -> tuple[Any, ...]:
        return ImageRecords, (self.path,)


def _write_images(path: str, count: int) -> None:
    """`count` random SOURCE_SIDE x SOURCE_SIDE x 3 uint8 images into a ``.npy`` file."""
    rng = np.random.default_rng(0)
    shape = (count, SOURCE_SIDE, SOURCE_SIDE, 3)
    images = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)
    for start in range(0, count, 64):
        part = images[start : start + 64]
        part[...] = rng.integers(0, 256, part.shape, dtype=np.uint8)
    images.flush()
    del images


def _stage_ms(passes: int, batch: dict[str, np.ndarray], repeats: int) -> float:
    """Milliseconds the stage takes on `batch` in this process: the fastest of
    `repeats` tries, the one other work on the machine disturbed least."""
    stage, fastest = EveryRecord(crop_flip, passes), float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        stage(batch)
        fastest = min(fastest, time.perf_counter() - start)
    return fastest * 1e3


def _image_passes(target_ms: float, batch: dict[str, np.ndarray]) -> tuple[int, float]:
    """How many passes make the stage cost about `target_ms` on `batch`, and the
    milliseconds that many measure. The cost of a pass comes from 1 and 65 passes,
    measured in turn (so that other work on the machine slows both alike); then the
    count is corrected from a measurement at it, up to three times, until within 5 %."""
    ones, manys = [], []
    for _ in range(5):
        ones.append(_stage_ms(1, batch, repeats=1))
        manys.append(_stage_ms(65, batch, repeats=1))
    one, many = min(ones), min(manys)
    per_pass = max((many - one) / 64, 1e-3)
    passes = max(1, round(1 + (target_ms - one) / per_pass))
    measured = _stage_ms(passes, batch, repeats=5)
    for _ in range(3):
        if abs(measured - target_ms) <= 0.05 * target_ms:
            break
        step = round((target_ms - measured) / per_pass)
        if step == 0 or passes + step < 1:
            break
        passes += step
        measured = _stage_ms(passes, batch, repeats=5)
    return passes, measured


def _pipeline_stream(path: str, passes: int, batch_size: int, workers: int) -> Iterator[Any]:
    """`Pipeline` over the image file, with `workers` processes, epoch after epoch."""
    return _epochs(
        source=ImageFile(path),
        stages=[EveryRecord(crop_flip, passes)],
        batch_size=batch_size,
        workers=workers,
    )


def _grain_stream(
    path: str, passes: int, batch_size: int, workers: int, threads: int
) -> Iterator[Any]:
    """Grain over the same file, batched in order, repeated, through `workers` processes."""
    batches = (
        grain.MapDataset.source(ImageRecords(path))
        .map(OneRecord(crop_flip, passes))
        .batch(batch_size, drop_remainder=True)
        .repeat()
    )
    dataset = batches.to_iter_dataset(grain.ReadOptions(num_threads=threads))
    if workers:
        dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(dataset)


PLACEMENT = "placement alone"


def _image_candidates(
    path: str,
    passes: int,
    batch_size: int,
    workers: Sequence[int],
    grain_threads: int | None,
    prepared: dict[str, np.ndarray],
) -> dict[str, Callable[[], Iterator[Any]]]:
    """Each candidate as a function that opens its endless stream of batches (Grain's
    left out when `grain_threads` is None); placement alone streams one prepared batch."""
    candidates: dict[str, Callable[[], Iterator[Any]]] = {}
    for count in workers:
        candidates[_pipeline_name(count)] = functools.partial(
            _pipeline_stream, path, passes, batch_size, count
        )
        if grain_threads is not None:
            candidates[f"Grain workers={count}"] = functools.partial(
                _grain_stream, path, passes, batch_size, count, grain_threads
            )
    candidates[PLACEMENT] = functools.partial(itertools.repeat, prepared)
    return candidates


def _settle() -> None:
    """Waits (10 s at most) for the processes a closed Grain iterator leaves behind, so
    that they do not slow the next candidate."""
    gc.collect()
    deadline = time.monotonic() + 10
    for child in multiprocessing.active_children():
        child.join(max(0.0, deadline - time.monotonic()))


def _warm_up(
    path: str,
    passes: int,
    batch_size: int,
    grain_threads: int | None,
    place: Callable[[Any], None],
) -> None:
    """Before any clock: one placement (the device's first transfer sets things up), and
    one batch from a pipeline with a worker (it starts the forkserver that the workers of
    every later pipeline of this process are forked from) and from Grain with one
    process (its modules are then read from disk once)."""
    streams = [_pipeline_stream(path, passes, batch_size, 1)]
    if grain_threads is not None:
        streams.append(_grain_stream(path, passes, batch_size, 1, grain_threads))
    for stream in streams:
        place(next(stream))
        close_stream(stream)
    del streams
    _settle()


def _digest(batch: dict[str, Any]) -> str:
    """What a first batch holds, to check that every loader made the same one."""
    image = np.ascontiguousarray(batch["image"])
    digest = hashlib.blake2b(image.tobytes(), digest_size=8).hexdigest()
    return f"{image.dtype}{list(image.shape)} {digest}"


def _machine(device: Any) -> dict[str, Any]:
    try:
        grain_version = importlib.metadata.version("grain")
    except importlib.metadata.PackageNotFoundError:
        grain_version = None
    shared = importlib.util.find_spec("datarax.pipeline.workers._slots") is not None
    return {
        "cores": os.cpu_count(),
        "device": str(device),
        "platform": device.platform,
        "device_kind": device.device_kind,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "grain_version": grain_version,
        "batches_back_through": "shared memory" if shared else "pickles",
        "load_average_before": os.getloadavg(),
    }


def _write(out: Path, results: dict[str, Any]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    temporary = out.with_name(out.name + ".tmp")
    temporary.write_text(json.dumps(results, indent=1) + "\n")
    temporary.replace(out)


def _line(times: EpochTimes) -> str:
    return (
        f"first batch {times.first_batch_s:.2f} s, host "
        f"{statistics.median(times.host_ms):.1f} ms/batch, host + placement "
        f"{statistics.median(times.placed_ms):.1f} ms/batch"
    )


def images(
    count: int = IMAGES,
    batch_size: int = IMAGE_BATCH,
    workers: Sequence[int] = IMAGE_WORKERS,
    epochs: int = EPOCHS,
    rounds: int = 1,
    stage_ms: float = STAGE_MS,
    passes: int | None = None,
    grain_threads: int | None = 0,
    out: Path | None = None,
) -> dict[str, Any]:
    """Every image candidate timed by epochs (`benchmarks._epoch_timing`), per round;
    Grain is left out when `grain_threads` is None.

    With `out`, the results so far are written there after every run of a candidate,
    so that a run stopped part way leaves what it measured.
    """
    workers = sorted(set(workers))
    batches_per_epoch = count // batch_size
    if batches_per_epoch < 1:
        raise ValueError(f"{count} images make no batch of {batch_size}.")
    flags.FLAGS.mark_as_parsed()  # Grain's multiprocessing reads absl flags
    device = jax.devices()[0]
    # The worker processes (the pipeline's and Grain's) need no accelerator, and one
    # program at a time may hold a TPU: they start with JAX on the CPU.
    os.environ["JAX_PLATFORMS"] = "cpu"

    def place(batch: Any) -> None:
        jax.block_until_ready(jax.device_put(batch, device))

    with tempfile.TemporaryDirectory(prefix="host_work_images_") as folder:
        path = os.path.join(folder, "images.npy")
        start = time.perf_counter()
        _write_images(path, count)
        written_s = time.perf_counter() - start
        sample = ImageFile(path)[0:batch_size]
        if passes is None:
            passes, measured_ms = _image_passes(stage_ms, sample)
        else:
            measured_ms = _stage_ms(passes, sample, repeats=5)
        prepared = EveryRecord(crop_flip, passes)(sample)
        results: dict[str, Any] = {
            "case": "images",
            "images": count,
            "batch_size": batch_size,
            "source_image": [SOURCE_SIDE, SOURCE_SIDE, 3],
            "image": [IMAGE_SIDE, IMAGE_SIDE, 3],
            "batch_mb": prepared["image"].nbytes / 1e6,
            "batches_per_epoch": batches_per_epoch,
            "epochs": epochs,
            "rounds": rounds,
            "workers": workers,
            "grain_read_threads": grain_threads,
            "stage_ms_target": stage_ms,
            "passes": passes,
            "stage_ms_measured": measured_ms,
            "images_written_s": written_s,
            **_machine(device),
            "partial": True,
        }
        _warm_up(path, passes, batch_size, grain_threads, place)
        candidates = _image_candidates(path, passes, batch_size, workers, grain_threads, prepared)
        # One entry per round; None where the run raised (its error is in "errors"): a
        # loader that fails on a machine (no /dev/shm, say) leaves the others measured.
        runs: dict[str, list[EpochTimes | None]] = {name: [] for name in candidates}
        errors: dict[str, list[str]] = {}
        order = random.Random(0)
        for _ in range(rounds):
            for name in order.sample(list(candidates), len(candidates)):
                try:
                    times = time_epochs(candidates[name], batches_per_epoch, epochs, place, _digest)
                except Exception as error:  # recorded and shown; the next candidate runs
                    times = None
                    errors.setdefault(name, []).append(repr(error))
                    print(f"  {name}: failed: {error!r}", flush=True)
                else:
                    print(f"  {name}: {_line(times)}", flush=True)
                _settle()
                runs[name].append(times)
                results["runs"] = {n: [t and vars(t) for t in ts] for n, ts in runs.items()}
                results["errors"] = errors
                if out is not None:
                    _write(out, results)
    results |= _image_summary(runs, workers)
    results["partial"] = False
    results["load_average_after"] = os.getloadavg()
    return results


def _image_summary(
    runs: dict[str, list[EpochTimes | None]], workers: Sequence[int]
) -> dict[str, Any]:
    """Medians and ranges per candidate, and the ratios of per-round medians (over the
    rounds in which both candidates ran)."""
    done = {name: [t for t in times if t is not None] for name, times in runs.items()}
    summary = {
        name: {
            "first_batch_s": _spread([t.first_batch_s for t in times]),
            "host_ms": _spread([ms for t in times for ms in t.host_ms]),
            "placed_ms": _spread([ms for t in times for ms in t.placed_ms]),
        }
        for name, times in done.items()
        if times
    }

    def ratios(numerator: str, denominator: str, key: str) -> dict[str, Any] | None:
        pairs = [
            (a, b)
            for a, b in zip(runs.get(numerator, []), runs.get(denominator, []), strict=False)
            if a is not None and b is not None
        ]
        if not pairs:
            return None
        per_round = [
            statistics.median(getattr(a, key)) / statistics.median(getattr(b, key))
            for a, b in pairs
        ]
        return {**_spread(per_round), "per_round": per_round}

    speedups: dict[str, Any] = {}
    for name in runs:
        kind, _, count = name.partition(" workers=")
        if count and count != "0":
            speedups[name] = {
                key: ratios(f"{kind} workers=0", name, key) for key in ("host_ms", "placed_ms")
            }
    over_grain = {
        str(count): {
            key: ratios(f"Grain workers={count}", _pipeline_name(count), key)
            for key in ("host_ms", "placed_ms")
        }
        for count in workers
        if f"Grain workers={count}" in runs
    }
    digests = {t.first_batch for name, ts in done.items() if name != PLACEMENT for t in ts}
    targets = []
    two = ratios(_pipeline_name(2), _pipeline_name(0), "host_ms")
    if two is not None:
        targets.append(
            {
                "name": "images, 2 cores: Pipeline workers=2 / workers=0, host ms per batch",
                "value": two["median"],
                "range": two["range"],
                "target": "<= 1.1",
                "pass": two["median"] <= 1.1,
            }
        )
    return {
        "summary": summary,
        "speedup_over_workers_0": speedups,
        "grain_ms_over_pipeline_ms": over_grain,
        "first_batches_agree": len(digests) <= 1,
        "first_batch": sorted(digests),
        "targets": targets,
    }


def _cell(spread: dict[str, Any], digits: int = 1) -> str:
    low, high = spread["range"]
    return f"{spread['median']:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def images_markdown(results: dict[str, Any]) -> str:
    """The images case as a markdown table: medians (ranges) per candidate."""
    lines = [
        "| candidate | first batch (s) | host ms/batch | host + placement ms/batch "
        "| speed-up over workers=0, host | Grain ms / Pipeline ms, host |",
        "|" + " --- |" * 6,
    ]
    failed = results.get("errors", {})
    names = sorted(
        {*results["summary"], *failed} - {PLACEMENT},
        key=lambda n: (int(n.rpartition("=")[2]), n),
    )
    for name in names:
        count = name.rpartition("=")[2]
        if name not in results["summary"]:
            lines.append(f"| {name} | failed: {failed[name][0]} | | | | |")
            continue
        row = results["summary"][name]
        speedup = results["speedup_over_workers_0"].get(name, {}).get("host_ms")
        grain_ratio = results["grain_ms_over_pipeline_ms"].get(count, {}).get("host_ms")
        cells = [
            name + (f" ({len(failed[name])} run(s) failed)" if name in failed else ""),
            _cell(row["first_batch_s"], 2),
            _cell(row["host_ms"]),
            _cell(row["placed_ms"]),
            _cell(speedup, 2) if speedup else ("1" if count == "0" else ""),
            _cell(grain_ratio, 2) if grain_ratio and name.startswith("Pipeline") else "",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    if PLACEMENT in results["summary"]:
        placed = _cell(results["summary"][PLACEMENT]["placed_ms"])
        lines.append(f"| {PLACEMENT} (one prepared batch) | | | {placed} | | |")
    return "\n".join(lines)


def _print_images(results: dict[str, Any]) -> None:
    print(
        f"\n{results['images']} images of {results['source_image']} in batches of "
        f"{results['batch_size']} ({results['batches_per_epoch']} an epoch, "
        f"{results['batch_mb']:.1f} MB), stage {results['passes']} passes = "
        f"{results['stage_ms_measured']:.0f} ms a batch in one process; {results['cores']} "
        f"cores, placement onto {results['device']}; {results['rounds']} round(s) of "
        f"{results['epochs']} + {results['epochs']} timed epochs; batches come back "
        f"through {results['batches_back_through']}\n"
    )
    print(images_markdown(results))
    print(
        "\nfirst batches agree:",
        results["first_batches_agree"],
        "; ".join(results["first_batch"]),
    )
    for row in results["targets"]:
        low, high = row["range"]
        verdict = "PASS" if row["pass"] else "MISS"
        print(
            f"{row['name']}: {row['value']:.3f} ({low:.3f}-{high:.3f}), "
            f"target {row['target']}: {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=("records", "images"), default="records")
    parser.add_argument(
        "--workers",
        type=int,
        nargs="+",
        help=f"Pipeline worker counts (records: 0 {WORKERS}; images: "
        f"{' '.join(map(str, IMAGE_WORKERS))}); images: Grain's too",
    )
    parser.add_argument("--no-grain", action="store_true", help="leave Grain out")
    parser.add_argument("--rounds", type=int, help="records: 3; images: 1")
    parser.add_argument("--costs", type=float, nargs="+", default=list(COSTS_MS))
    parser.add_argument("--images", type=int, default=IMAGES)
    parser.add_argument("--batch-size", type=int, default=IMAGE_BATCH)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--stage-ms", type=float, default=STAGE_MS)
    parser.add_argument("--passes", type=int, help="instead of calibrating to --stage-ms")
    parser.add_argument("--grain-threads", type=int, default=0)
    parser.add_argument(
        "--out",
        type=Path,
        help="FILE.json: this run's results; records only, a folder: host_work.png there "
        "and this run into its results.json",
    )
    args = parser.parse_args()
    # The module itself, not this __main__: worker processes import the stages by name.
    from benchmarks import host_work as module

    print("load average before:", os.getloadavg(), "cores:", os.cpu_count(), flush=True)
    as_file = args.out is not None and args.out.suffix == ".json"
    if args.case == "images":
        if args.out is not None and not as_file:
            parser.error("--case images writes one JSON file: --out FILE.json")
        results = module.images(
            count=args.images,
            batch_size=args.batch_size,
            workers=args.workers or IMAGE_WORKERS,
            epochs=args.epochs,
            rounds=args.rounds or 1,
            stage_ms=args.stage_ms,
            passes=args.passes,
            grain_threads=None if args.no_grain else args.grain_threads,
            out=args.out,
        )
        _print_images(results)
    else:
        results = module.host_work(
            args.costs,
            args.rounds or 3,
            args.workers or (0, WORKERS),
            not args.no_grain,
            args.epochs,
        )
        results["load_average"] = os.getloadavg()
        print_results(results)
        print()
        print(records_markdown(results))
        print("load average after:", results["load_average"])
    if args.out is not None and as_file:
        _write(args.out, results)
        print("wrote", args.out)
    elif args.out is not None:
        from benchmarks import plots

        args.out.mkdir(parents=True, exist_ok=True)
        saved = args.out / "results.json"
        everything = json.loads(saved.read_text()) if saved.exists() else {}
        everything["host_work"] = results
        saved.write_text(json.dumps(everything, indent=1) + "\n")
        plots.host_work(everything, args.out / "host_work.png")
        print("wrote", saved, "and", args.out / "host_work.png")


if __name__ == "__main__":
    main()

"""Image batches on every core: `Pipeline(workers=N)` against one process and against Grain.

The records case is `benchmarks.host_work_records`.

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

    python -m benchmarks.host_work --case images [--images 3072] [--batch-size 256]
        [--workers 0 2 4 8 12] [--stage-ms 160 | --passes P] [--epochs 3] [--out FILE.json]

``--out FILE.json`` writes this run's results to that file. A markdown table is printed.
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
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grain
import jax
import numpy as np
from absl import flags

from benchmarks._epoch_timing import EpochTimes, close_stream, time_epochs
from benchmarks._host_work import pipeline_epochs as _epochs
from benchmarks._host_work import pipeline_name as _pipeline_name
from benchmarks._host_work import spread as _spread
from benchmarks.host_work_records import EveryRecord, OneRecord
from datarax.pipeline import ArraySource

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
    parser.add_argument("--case", choices=("images",), default="images")
    parser.add_argument("--workers", type=int, nargs="+", default=list(IMAGE_WORKERS))
    parser.add_argument("--no-grain", action="store_true", help="leave Grain out")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--images", type=int, default=IMAGES)
    parser.add_argument("--batch-size", type=int, default=IMAGE_BATCH)
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--stage-ms", type=float, default=STAGE_MS)
    parser.add_argument("--passes", type=int, help="instead of calibrating to --stage-ms")
    parser.add_argument("--grain-threads", type=int, default=0)
    parser.add_argument("--out", type=Path, help="FILE.json: this run's results")
    args = parser.parse_args()
    # The module itself, not this __main__: worker processes import the stages by name.
    from benchmarks import host_work as module

    print("load average before:", os.getloadavg(), "cores:", os.cpu_count(), flush=True)
    results = module.images(
        count=args.images,
        batch_size=args.batch_size,
        workers=args.workers,
        epochs=args.epochs,
        rounds=args.rounds,
        stage_ms=args.stage_ms,
        passes=args.passes,
        grain_threads=None if args.no_grain else args.grain_threads,
        out=args.out,
    )
    _print_images(results)
    if args.out is not None:
        _write(args.out, results)
        print("wrote", args.out)


if __name__ == "__main__":
    main()

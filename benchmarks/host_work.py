"""Host work on every core: `Pipeline(workers=N)` against one thread and against Grain.

Each record is a 32x32x3 uint8 image that a numpy augmentation (reflect-pad and
crop, flip, brightness and contrast jitter, normalise) turns into float32, repeated
so that a record costs about 0.1, 0.4 or 1.6 ms on one core. One epoch of 4,096
records in batches of 128, as records per second, for: a plain single-threaded loop,
`Pipeline` with workers=0 and workers=2, and Grain (``MapDataset ... batch`` iterated
through ``to_iter_dataset()`` with its default read threads, and the same with
``mp_prefetch`` over 2 worker processes). Every candidate runs once per round in a
shuffled order, after one warm-up epoch each, and the tables give medians over
rounds: of the records per second over the whole epoch, start-up included (Grain
starts its processes with every iterator; a pipeline's workers serve all its
epochs), and after the epoch's first batch (which favours Grain's processes: while
they start, their threads fill buffers of up to 500 batches).

    python -m benchmarks.host_work [--rounds 3] [--costs 0.1 0.4 1.6]
"""

from __future__ import annotations

import argparse
import gc
import os
import random
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import grain
import numpy as np
from absl import flags

from datarax.pipeline import Pipeline

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


class AugmentBatch:
    """A `Pipeline` stage: every record of the batch through `augment`."""

    def __init__(self, passes: int):
        self.passes = passes

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        images = [
            augment(image, int(label), self.passes)
            for image, label in zip(batch["image"], batch["label"], strict=True)
        ]
        return {"image": np.stack(images), "label": batch["label"]}


class AugmentRecord:
    """A Grain map: one record through `augment`."""

    def __init__(self, passes: int):
        self.passes = passes

    def __call__(self, record: dict[str, Any]) -> dict[str, Any]:
        label = record["label"]
        return {"image": augment(record["image"], int(label), self.passes), "label": label}


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


def _passes_for(target_ms: float, data: dict[str, np.ndarray]) -> int:
    """How many passes make one record cost about `target_ms` on one core."""
    sample = data["image"][:64]

    def per_record(passes: int) -> float:
        start = time.perf_counter()
        for index, image in enumerate(sample):
            augment(image, index, passes)
        return (time.perf_counter() - start) / len(sample)

    one = statistics.median(per_record(1) for _ in range(5))
    eight = statistics.median(per_record(8) for _ in range(3))
    per_pass = max((eight - one) / 7, 1e-6)
    return max(1, round(1 + (target_ms / 1e3 - one) / per_pass))


def _candidates(data: dict[str, np.ndarray], passes: int) -> dict[str, Callable[[], Iterator]]:
    """Each candidate's one epoch of batches, as an iterator made fresh for every sample."""
    stage = AugmentBatch(passes)

    def plain() -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, RECORDS, BATCH):
            yield stage({k: v[start : start + BATCH] for k, v in data.items()})

    pipelines = {
        n: Pipeline(source=data, stages=[stage], batch_size=BATCH, workers=n) for n in (0, 2)
    }
    grain_map = grain.MapDataset.source(Records(data)).map(AugmentRecord(passes)).batch(BATCH)
    processes = grain.MultiprocessingOptions(num_workers=2)
    return {
        "plain loop": plain,
        "Pipeline workers=0": lambda: iter(pipelines[0]),
        "Pipeline workers=2": lambda: iter(pipelines[2]),
        "Grain default": lambda: iter(grain_map.to_iter_dataset()),
        "Grain mp_prefetch 2": lambda: iter(grain_map.to_iter_dataset().mp_prefetch(processes)),
    }


def _timed_epoch(batches: Iterator[dict[str, np.ndarray]]) -> tuple[float, float]:
    """Records per second over the whole epoch, and after its first batch."""
    start = time.perf_counter()
    records = len(next(batches)["label"])
    first = time.perf_counter()
    for batch in batches:
        records += len(batch["label"])
    end = time.perf_counter()
    del batches  # Grain's worker processes stop with their iterator
    gc.collect()
    return records / (end - start), (records - BATCH) / (end - first)


def host_work(costs_ms: Iterable[float] = (0.1, 0.4, 1.6), rounds: int = 3) -> dict[str, Any]:
    """Records per second of every candidate at every per-record cost (medians)."""
    data = _data()
    order = random.Random(0)
    cases = []
    for cost in costs_ms:
        passes = _passes_for(cost, data)
        candidates = _candidates(data, passes)
        for make in candidates.values():  # warm-up: start the forkserver, fill caches
            _timed_epoch(make())
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in candidates}
        for _ in range(rounds):
            for name in order.sample(list(candidates), len(candidates)):
                samples[name].append(_timed_epoch(candidates[name]()))
        cases.append(
            {
                "cost_ms": cost,
                "passes": passes,
                "records_per_s": {
                    n: statistics.median(a for a, _ in s) for n, s in samples.items()
                },
                "after_first_batch": {
                    n: statistics.median(b for _, b in s) for n, s in samples.items()
                },
            }
        )
    return {"records": RECORDS, "batch_size": BATCH, "rounds": rounds, "cases": cases}


def _print(results: dict[str, Any]) -> None:
    for key, title in (
        ("records_per_s", "whole epoch, start-up included"),
        ("after_first_batch", "after the first batch (Grain's start-up time fills its buffers)"),
    ):
        names = list(results["cases"][0][key])
        print(f"\nrecords/s, median of {results['rounds']} epochs of {results['records']}: {title}")
        print(
            f"{'ms/record':>9} {'passes':>6} "
            + " ".join(f"{name:>20}" for name in names)
            + "  w2/w0  w2/Grain"
        )
        for case in results["cases"]:
            rates = case[key]
            best_grain = max(rate for name, rate in rates.items() if name.startswith("Grain"))
            workers = rates["Pipeline workers=2"]
            print(
                f"{case['cost_ms']:>9} {case['passes']:>6} "
                + " ".join(f"{rates[name]:>20,.0f}" for name in names)
                + f"  {workers / rates['Pipeline workers=0']:5.2f}  {workers / best_grain:8.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--costs", type=float, nargs="+", default=[0.1, 0.4, 1.6])
    args = parser.parse_args()
    flags.FLAGS.mark_as_parsed()  # Grain's multiprocessing reads absl flags
    # The module itself, not this __main__: worker processes import the stages by name.
    from benchmarks.host_work import host_work as run

    print("load average before:", os.getloadavg(), "cores:", os.cpu_count())
    results = run(args.costs, args.rounds)
    _print(results)
    print("load average after:", os.getloadavg())


if __name__ == "__main__":
    main()

"""Host work on every core: `Pipeline(workers=N)` against one thread and against Grain.

Each record is a 32x32x3 uint8 image that a numpy augmentation (reflect-pad and
crop, flip, brightness and contrast jitter, normalise) turns into float32, repeated
so that a record costs about 0.1, 0.4, 1.6 or 5 ms on one core. Candidates, each
making 4,096 records in batches of 128 (one epoch):

- a plain single-threaded loop over the batches;
- `Pipeline` with workers=0 and workers=2 (this machine's 2 cores), its workers
  started before the clock (they serve every epoch of their pipeline);
- Grain (``MapDataset ... batch``) iterated through ``to_iter_dataset()`` with its
  defaults (16 read threads), with ``ReadOptions(num_threads=2)``, and with
  ``mp_prefetch`` over 1 and 2 worker processes, each timed in its steady state: the
  dataset repeats, and the clock starts after `_GRAIN_SKIP` batches, once its
  processes and threads run.

Every candidate runs once per round in a shuffled order; the results give records
per second per round, their median and range. Ratios (`Pipeline` at its best worker
count over Grain at its best configuration, workers=2 over workers=0) are medians of
per-round ratios.

    python -m benchmarks.host_work [--rounds 3] [--costs 0.1 0.4 1.6 5]
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import random
import statistics
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
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


_GRAIN_SKIP = 8  # batches a Grain iterator makes before its clock starts
WORKERS = 2
COSTS_MS = (0.1, 0.4, 1.6, 5.0)
PIPELINES = ("Pipeline workers=0", f"Pipeline workers={WORKERS}")
# The two Grain configurations that were the slowest at every cost up to 1.6 ms in
# every run recorded (docs/benchmarks/README.md): from 5 ms on they would take about
# 80 s an epoch each, so they are left out there.
SLOWEST_GRAIN = ("Grain default", "Grain mp_prefetch 1")
SLOWEST_GRAIN_UNTIL_MS = 5.0


def _timed(batches: Iterator[dict[str, np.ndarray]], skip: int = 0) -> float:
    """Records per second over one epoch's worth of batches, after `skip` batches."""
    for _ in range(skip):
        next(batches)
    start, records = time.perf_counter(), 0
    while records < RECORDS:
        records += len(next(batches)["label"])
    rate = records / (time.perf_counter() - start)
    del batches  # Grain's worker processes stop with their iterator
    gc.collect()
    return rate


def _candidates(
    data: dict[str, np.ndarray], passes: int, cost_ms: float
) -> dict[str, Callable[[], float]]:
    """Each candidate's records per second, measured afresh on every call."""
    stage = AugmentBatch(passes)

    def plain() -> Iterator[dict[str, np.ndarray]]:
        for start in range(0, RECORDS, BATCH):
            yield stage({k: v[start : start + BATCH] for k, v in data.items()})

    pipelines = {
        name: Pipeline(source=data, stages=[stage], batch_size=BATCH, workers=workers)
        for name, workers in zip(PIPELINES, (0, WORKERS), strict=True)
    }
    for pipeline in pipelines.values():
        next(iter(pipeline))  # starts the workers, which then serve every epoch
    repeated = (
        grain.MapDataset.source(Records(data)).map(AugmentRecord(passes)).batch(BATCH).repeat()
    )

    def grain_run(read: grain.ReadOptions | None, processes: int) -> float:
        dataset = repeated.to_iter_dataset(read)
        if processes:
            dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=processes))
        return _timed(iter(dataset), skip=_GRAIN_SKIP)

    candidates = {
        "plain loop": lambda: _timed(plain()),
        **{name: functools.partial(_timed_epoch, p) for name, p in pipelines.items()},
        "Grain default": lambda: grain_run(None, 0),
        "Grain 2 threads": lambda: grain_run(grain.ReadOptions(num_threads=2), 0),
        "Grain mp_prefetch 1": lambda: grain_run(None, 1),
        "Grain mp_prefetch 2": lambda: grain_run(None, 2),
    }
    if cost_ms >= SLOWEST_GRAIN_UNTIL_MS:
        for name in SLOWEST_GRAIN:
            del candidates[name]
    return candidates


def _timed_epoch(pipeline: Pipeline) -> float:
    return _timed(iter(pipeline))


def host_work(costs_ms: Iterable[float] = COSTS_MS, rounds: int = 3) -> dict[str, Any]:
    """Records per second of every candidate at every per-record cost, per round."""
    flags.FLAGS.mark_as_parsed()  # Grain's multiprocessing reads absl flags
    data = _data()
    order = random.Random(0)
    cases = []
    # Calibrated before any candidate runs: a Grain iterator's processes can go on
    # working for a while after it is deleted, and would slow the measurement.
    calibrated = {cost: _passes_for(cost, data) for cost in costs_ms}
    for cost, (passes, measured_ms) in calibrated.items():
        candidates = _candidates(data, passes, cost)
        samples: dict[str, list[float]] = {name: [] for name in candidates}
        for _ in range(rounds):
            for name in order.sample(list(candidates), len(candidates)):
                samples[name].append(candidates[name]())
        del candidates  # the pipelines' workers stop
        gc.collect()
        cases.append(_summary(cost, passes, measured_ms, samples))
    return {
        "records": RECORDS,
        "batch_size": BATCH,
        "rounds": rounds,
        "workers": WORKERS,
        "cores": os.cpu_count(),
        "cases": cases,
    }


def _summary(
    cost: float, passes: int, measured_ms: float, samples: dict[str, list[float]]
) -> dict[str, Any]:
    per_round = list(zip(*samples.values(), strict=True))
    names = list(samples)

    def best(prefix: str, rates: tuple[float, ...]) -> float:
        return max(r for n, r in zip(names, rates, strict=True) if n.startswith(prefix))

    over_grain = [best("Pipeline", rates) / best("Grain", rates) for rates in per_round]
    workers = [w / z for z, w in zip(*(samples[name] for name in PIPELINES), strict=True)]
    return {
        "cost_ms": cost,
        "passes": passes,
        "measured_ms_per_record": measured_ms,
        "records_per_s": samples,
        "median_records_per_s": {n: statistics.median(s) for n, s in samples.items()},
        "pipeline_over_best_grain": statistics.median(over_grain),
        "pipeline_over_best_grain_range": [min(over_grain), max(over_grain)],
        "workers_over_none": statistics.median(workers),
        "workers_over_none_range": [min(workers), max(workers)],
    }


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
                f"({min(rates):,.0f}-{max(rates):,.0f})"
            )
        low, high = case["pipeline_over_best_grain_range"]
        print(
            f"    Pipeline best / Grain best {case['pipeline_over_best_grain']:.2f} "
            f"({low:.2f}-{high:.2f}); "
            f"workers={results['workers']} / workers=0 {case['workers_over_none']:.2f} "
            f"({case['workers_over_none_range'][0]:.2f}-{case['workers_over_none_range'][1]:.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--costs", type=float, nargs="+", default=list(COSTS_MS))
    parser.add_argument(
        "--out", type=Path, help="also write host_work.png there and this run into results.json"
    )
    args = parser.parse_args()
    # The module itself, not this __main__: worker processes import the stages by name.
    from benchmarks.host_work import host_work as run

    print("load average before:", os.getloadavg(), "cores:", os.cpu_count())
    results = run(args.costs, args.rounds)
    results["load_average"] = os.getloadavg()
    print_results(results)
    print("load average after:", results["load_average"])
    if args.out is not None:
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

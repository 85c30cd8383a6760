"""Small records through host workers: `Pipeline(workers=N)` against one process and Grain.

Each record is a 32x32x3 uint8 image that a numpy augmentation (reflect-pad and crop,
flip, brightness and contrast jitter, normalise) turns into float32, repeated so that a
record costs about 0.1, 0.4, 1.6 or 5 ms on one core. Candidates, each making 4,096
records in batches of 128 (one epoch):

- a plain single-threaded loop over the batches;
- `Pipeline` with each of ``--workers`` (0 and 2 by default, this machine's 2 cores);
- Grain (``MapDataset ... batch``) iterated through ``to_iter_dataset()`` with its
  defaults (16 read threads), with ``ReadOptions(num_threads=2)``, and with
  ``mp_prefetch`` over 1 and 2 worker processes (left out with ``--no-grain``).

Every candidate is built afresh for each sample and timed by the rule of
`benchmarks._epoch_timing`, the same as the images case (`benchmarks.host_work_images`):
a run of ``--epochs`` (4) epochs from a fresh iterator, timed from its first batch to its
last; a sample is its records per second over that stretch, and each epoch's rate and
the seconds to the first batch are recorded beside it (``runs`` in the results). A
loader that reads ahead cannot count batches made before the clock as speed, as it can
in a window timed after a warm-up. (A pipeline kept from one sample to the next would
not do: its workers make the next epoch's first batches while the other candidates run,
and would hand them over for free.) Every candidate runs once per round in a shuffled
order; the results give records per second per round, their median and range, and the
seconds to the first batch. Ratios (`Pipeline` at its best worker count over Grain at
its best configuration, the most workers over workers=0) are medians of per-round ratios.

    python -m benchmarks.host_work_records [--rounds 3] [--costs 0.1 0.4 1.6 5]
        [--workers 0 2] [--epochs 4] [--no-grain] [--out FILE.json | DIR]

``--out FILE.json`` writes this run's results to that file; ``--out DIR`` writes
``host_work.png`` there and the run into ``results.json`` (as ``make bench`` does). A
markdown table is printed either way. ``make bench`` runs it as its last step.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import grain
import numpy as np

from benchmarks._epoch_timing import RunTimes, time_run
from benchmarks._host_work import (
    grain_ready,
    pipeline_epochs,
    pipeline_name,
    shuffled_rounds,
    write_json,
)

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
    """A `Pipeline` stage: every record of the batch through `work`, stacked."""

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


def _timed(open_stream: Callable[[], Iterator[Any]], epochs: int) -> RunTimes:
    """One run of `epochs` epochs of the stream `open_stream` opens, timed from its
    first batch to its last."""
    return time_run(open_stream, RECORDS // BATCH, epochs)


def _rate(times: RunTimes) -> float:
    """Records per second from the first batch to the last."""
    return BATCH * 1e3 / times.ms_per_batch


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
        candidates[pipeline_name(count)] = functools.partial(
            pipeline_epochs, source=data, stages=[stage], batch_size=BATCH, workers=count
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
    epochs: int = 4,
) -> dict[str, Any]:
    """Records per second of every candidate at every per-record cost, per round, each
    from the first batch to the last of a run of `epochs` epochs."""
    workers = sorted(set(workers))
    grain_ready()
    data = _data()
    cases = []
    # Calibrated before any candidate runs: a Grain iterator's processes can go on
    # working for a while after it is deleted, and would slow the measurement.
    calibrated = {cost: _passes_for(cost, data) for cost in costs_ms}
    for cost, (passes, measured_ms) in calibrated.items():
        candidates = _candidates(data, passes, cost, workers, with_grain)
        samples: dict[str, list[float]] = {name: [] for name in candidates}
        starts: dict[str, list[float]] = {name: [] for name in candidates}
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in candidates}
        for round_, name in shuffled_rounds(list(candidates), rounds):
            times = _timed(candidates[name], epochs)
            samples[name].append(_rate(times))
            starts[name].append(times.first_batch_s)
            runs[name].append(times.as_json())
            # As it goes, so that a run cut short still shows what it measured.
            epoch_rates = " ".join(f"{BATCH * 1e3 / ms:,.0f}" for ms in times.epoch_ms)
            print(
                f"  {cost:g} ms, round {round_}/{rounds}: {name}: {_rate(times):,.0f} "
                f"records/s first to last (epochs: {epoch_rates}), first batch "
                f"{times.first_batch_s:.2f} s",
                flush=True,
            )
        del candidates
        gc.collect()
        case = _summary(cost, passes, measured_ms, samples, workers)
        cases.append(case | {"first_batch_s": starts, "runs": runs})
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
        most, none = samples[pipeline_name(max(workers))], samples[pipeline_name(0)]
        ratios = [w / z for z, w in zip(none, most, strict=True)]
        summary["workers_over_none"] = statistics.median(ratios)
        summary["workers_over_none_range"] = [min(ratios), max(ratios)]
    return summary


def _epoch_rates(runs: dict[str, list[dict[str, Any]]], name: str) -> list[float]:
    """`name`'s records per second in each epoch, the median over rounds (none in a
    file recorded before runs were kept)."""
    per_epoch = zip(*(run["epoch_ms"] for run in runs.get(name, [])), strict=True)
    return [statistics.median(BATCH * 1e3 / ms for ms in epoch) for epoch in per_epoch]


def print_results(results: dict[str, Any]) -> None:
    print(
        f"\nrecords/s from the first batch to the last of {results['epochs']} epochs of "
        f"{results['records']} records, median (range) of {results['rounds']} rounds, "
        f"{results['cores']} cores; each epoch's records/s, median over rounds"
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
                f"{statistics.median(case['first_batch_s'][name]):.2f} s, epochs: "
                + " ".join(f"{rate:,.0f}" for rate in _epoch_rates(case.get("runs", {}), name))
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workers", type=int, nargs="+", default=[0, WORKERS])
    parser.add_argument("--no-grain", action="store_true", help="leave Grain out")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--costs", type=float, nargs="+", default=list(COSTS_MS))
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument(
        "--out",
        type=Path,
        help="FILE.json: this run's results; a folder: host_work.png there and this run "
        "into its results.json",
    )
    args = parser.parse_args()
    # The module itself, not this __main__: worker processes import the stages by name.
    from benchmarks import host_work_records as module

    print("load average before:", os.getloadavg(), "cores:", os.cpu_count(), flush=True)
    results = module.host_work(
        args.costs, args.rounds, args.workers, not args.no_grain, args.epochs
    )
    results["load_average"] = os.getloadavg()
    print_results(results)
    print()
    print(records_markdown(results))
    print("load average after:", results["load_average"])
    if args.out is not None and args.out.suffix == ".json":
        write_json(args.out, results)
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

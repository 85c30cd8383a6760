"""Image batches through host workers, against Grain and against the copy to devices.

The data: ``--images`` (4,096) random uint8 images of ``--side`` x ``--side`` x 3 (224)
in a memory-mapped ``.npy`` file written to the temporary folder at the start, read in
order in batches of ``--batch-size`` (256: 38.5 MB, 16 batches an epoch). The stage
(`benchmarks._image_stage`): per image, reflect-pad by 8, crop back to the image's size
at a place drawn from its label, flip every other image left to right, then stack:
fresh arrays every batch, as a real augmentation makes them. Candidates, all on the
same file, all making the same batches (the first batch's digest is compared):

- ``Pipeline(source, stages=[stage], batch_size, workers=N)`` for N in ``--workers``
  (0 4 8 12; ``auto`` too); its workers keep freed memory for reuse (their default);
- Grain as its documentation writes a pipeline, per batch:
  ``MapDataset.source(records).repeat(R).batch(B).map(stage).to_iter_dataset()`` (its
  default read options: 16 threads, 500 elements read ahead), then
  ``.mp_prefetch(MultiprocessingOptions(num_workers=N))`` (nothing for N = 0);
- Grain per record: ``.map(one image).batch(B)`` instead, the rest the same;
- Grain per batch with the allocator settings our workers use (glibc's
  ``MALLOC_MMAP_THRESHOLD_``, ``MALLOC_TRIM_THRESHOLD_`` and ``MALLOC_TOP_PAD_`` in the
  environment while its iterator starts and runs, restored after; read back from each
  of its processes' ``/proc/PID/environ`` at the first batch); N > 0 only;
- placement alone: one prepared batch again and again through ``jax.device_put`` and
  through ``ArraySharder().shard``, each waited for.

``--grain-ways`` picks Grain's ways (``batch record kept``; none: no Grain). Grain's
dataset repeats for exactly the run's epochs (R = ``--epochs``): endless, its default
read-ahead of 500 elements would hold 500 batches (19 GB) in each process.

Placement: onto ``--devices`` (all of ``jax.devices()``: the chip of a one-chip host,
or `CPU_DEVICES` simulated CPU devices where there is no accelerator), the batch's rows
split over them (``NamedSharding(mesh, P("data"))``). Each candidate delivers its
batches in each of its ways, each way a fresh run: **host** (batches as made),
**placed** (`Pipeline` as ``Pipeline(..., sharding=S)``; Grain through
``jax.device_put(batch, S)`` in the consumer, its own way) and, for `Pipeline`,
**prefetched** (``prefetch_to_device(Pipeline(...), sharding=S)``, its thread placing).

Timing (`benchmarks._epoch_timing`): every run takes ``--epochs`` (6) epochs from a
fresh iterator, every placed batch waited for, and is timed from its first batch to its
last, as a training run sees it: that figure (ms a batch over the batches after the
first) is what every ratio and target uses; the seconds to the first batch and each
epoch's ms a batch are recorded beside it. A loader that reads ahead cannot pass off
batches made earlier as speed, as it could in a window timed after a warm-up. Every
candidate runs once per round, in a shuffled order, ``--rounds`` rounds; ratios are
medians of per-round ratios (`benchmarks._image_summary`). ``--summarize FILE.json``
recomputes and prints a recorded run's summary (rewriting the file) without running
anything; it refuses a file recorded by the earlier rule (a window of epochs after an
untimed first one), which holds no first-to-last times.

The ideal line: one process's stage time, measured in a process of its own with the C
library's defaults and after `keep_freed_memory()` (this process is not changed),
divided by the cores this process may use. The targets are computed with
PASS/MISS where the data exists: on a TPU v5e host (``--preset v5e``, the default),
Pipeline's best / Grain's best as its docs write it, host only (>= 2); the same against
Grain with our allocator settings (>= 1); placed ms at the best worker count / max(its
host ms, the copy's ms) (<= 1.15); one batch's copy through ``shard`` (>= 8 GB/s). On 2
cores (``--preset two-core``: 24 batches of 128 images of 160 x 160 x 3, workers 0 1
2, 3 rounds, placed onto 8 simulated CPU devices): Pipeline's best / Grain's best as its
docs write it (>= 1.1), ``workers=1`` / ``workers=0`` not slower for a stage of 5 ms or
more, and placed and prefetched ms at the best worker count / max(its host ms, the
copy's ms) (<= 1.15 each).

Memory: every candidate's peak (`benchmarks._memory_guard`: this process and every
process below it, shared pages counted once) is recorded, and a run that passes
``--memory-bound-gb`` (3/4 of the machine's by default) is stopped and recorded as
failed, naming it, so the machine stays usable. Results are written to ``--out`` after
every candidate's turn, so a run cut short keeps what it measured.

    python -m benchmarks.host_work_images [--preset v5e | two-core] [--workers 0 4 8 12]
        [--grain-ways batch record kept] [--rounds 1] [--epochs 6] [--images 4096]
        [--side 224] [--batch-size 256] [--devices N] [--read-next-epoch]
        [--memory-bound-gb GB] [--out FILE.json]
    python -m benchmarks.host_work_images --summarize FILE.json
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from benchmarks import _image_stage as stage
from benchmarks._child import run_module
from benchmarks._epoch_timing import RunTimes, close_stream, time_run
from benchmarks._host_work import (
    grain_ready,
    machine,
    settle,
    shuffled_rounds,
    usable_cores,
    write_json,
)
from benchmarks._image_loaders import (
    GRAIN_WAYS,
    HOST,
    PLACED,
    PUT_ALONE,
    SHARD_ALONE,
    Candidate,
    allocator_environment,
    candidates_for,
    pipeline_stream,
    placement_sharding,
)
from benchmarks._image_summary import print_results, refuse_earlier_rule, summarize
from benchmarks._memory_guard import Watch, watched


@dataclasses.dataclass(frozen=True)
class Preset:
    """A machine's defaults (flags override each); its name picks the targets checked."""

    images: int
    side: int
    batch_size: int
    workers: tuple[str, ...]
    rounds: int
    epochs: int


CPU_DEVICES = 8  # simulated, where JAX has no accelerator: batches are placed on all of them
PRESETS = {
    "v5e": Preset(4096, 224, 256, ("0", "4", "8", "12"), rounds=1, epochs=6),
    "two-core": Preset(3072, 160, 128, ("0", "1", "2"), rounds=3, epochs=6),
}


def _digest(batch: dict[str, Any]) -> str:
    """What a first batch holds, to check that every loader made the same one."""
    image = np.ascontiguousarray(batch["image"])
    digest = hashlib.blake2b(image.tobytes(), digest_size=8).hexdigest()
    return f"{image.dtype}{list(image.shape)} {digest}"


def _stage_alone(path: str, batch_size: int) -> dict[str, Any]:
    """One process's stage time, with and without kept memory, in a process of its own."""
    root = str(Path(__file__).resolve().parents[1])
    path_list = [root, *filter(None, [os.environ.get("PYTHONPATH")])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path_list)}
    timed = run_module("benchmarks._image_stage", [path, str(batch_size)], env, 600, "stage")
    cores = usable_cores()
    return timed | {
        "usable_cores": cores,
        "ideal_ms": timed["kept_ms"] / cores,
        "ideal_ms_default": timed["default_ms"] / cores,
    }


def images(
    count: int,
    side: int,
    batch_size: int,
    workers: list[str],
    grain_ways: list[str],
    rounds: int,
    epochs: int,
    preset: str = "v5e",
    read_next_epoch: bool = False,
    out: Path | None = None,
    command: str = "",
    grain_workers: list[int] | None = None,
    memory_bound: int = 0,
    devices: int = 1,
) -> dict[str, Any]:
    """Every candidate's every way timed from its first batch to its last, per round,
    then summarized; with `out`, the results so far are written there after every
    candidate's turn."""
    batches_per_epoch = count // batch_size
    if batches_per_epoch < 1:
        raise ValueError(f"{count} images make no batch of {batch_size}.")
    grain_ready()
    device = jax.devices()[0]
    placement_sharding(devices)  # refused here, before anything runs, where it cannot be
    # Worker processes (ours and Grain's) need no accelerator, and one program at a time
    # may hold a TPU: they start with JAX on the CPU.
    os.environ["JAX_PLATFORMS"] = "cpu"
    with tempfile.TemporaryDirectory(prefix="host_work_images_") as folder:
        path = os.path.join(folder, "images.npy")
        start = time.perf_counter()
        stage.write_images(path, count, side)
        results: dict[str, Any] = {
            "case": "images",
            "command": command,
            "preset": preset,
            "images": count,
            "image": [side, side, 3],
            "batch_size": batch_size,
            "batches_per_epoch": batches_per_epoch,
            "epochs": epochs,
            "rounds": rounds,
            "workers": workers,
            "grain_ways": grain_ways,
            "grain_workers": grain_workers,
            "read_next_epoch": read_next_epoch,
            "memory_bound_gb": memory_bound / 1e9,
            "images_written_s": time.perf_counter() - start,
            "grain_allocator_environment": allocator_environment(),
            **machine(device),
            "stage": _stage_alone(path, batch_size),
            "partial": True,
        }
        prepared = stage.augment_batch(stage.first_batch(path, batch_size))
        results["batch_bytes"] = sum(leaf.nbytes for leaf in prepared.values())
        results["expected_first_batch"] = _digest(prepared)
        sharding = placement_sharding(devices)
        results["placement"] = _placement(sharding, batch_size)
        candidates = candidates_for(
            path,
            batch_size,
            workers,
            grain_ways,
            [int(n) for n in workers if n != "auto"] if grain_workers is None else grain_workers,
            epochs,
            read_next_epoch,
            prepared,
            sharding,
        )
        results["candidates"] = {
            name: {
                "kind": candidate.kind,
                "workers": candidate.workers,
                "ways": list(candidate.ways),
            }
            for name, candidate in candidates.items()
        }
        _warm_up(candidates, path, batch_size)
        runs: dict[str, list[dict[str, Any]]] = {name: [] for name in candidates}
        notes: dict[str, list[dict[str, Any]]] = {name: [] for name in candidates}
        errors: dict[str, list[str]] = {}
        for round_, name in shuffled_rounds(list(candidates), rounds):
            candidate, said, timed, peak, before = candidates[name], {}, {}, 0, 0
            for way, (opener, finish) in candidate.ways.items():
                watch = Watch()
                try:
                    with watched(f"{name} ({way})", memory_bound, watch):
                        times = time_run(
                            functools.partial(opener, said.setdefault(way, {})),
                            batches_per_epoch,
                            epochs,
                            finish,
                            _digest if way == HOST or candidate.kind.startswith("copy") else None,
                        )
                except Exception as error:  # recorded and shown; the next one runs
                    timed[way] = None
                    errors.setdefault(name, []).append(f"{way}: {error!r}")
                    print(f"  round {round_}: {name} ({way}): failed: {error!r}", flush=True)
                else:
                    timed[way] = times.as_json()
                    print(f"  round {round_}: {name} ({way}): {_line(times)}", flush=True)
                settle()
                peak, before = max(peak, watch.peak), max(before, watch.before)
            said |= {"peak_memory_gb": peak / 1e9, "memory_before_gb": before / 1e9}
            runs[name].append(timed)
            notes[name].append(said)
            results |= {"runs": runs, "notes": notes, "errors": errors}
            if out is not None:
                write_json(out, results)
    results |= summarize(results)
    results |= {"partial": False, "load_average_after": os.getloadavg()}
    return results


def _placement(sharding: Any, batch_size: int) -> dict[str, Any]:
    """Where batches are placed, in words and numbers; refuses a batch size that the
    devices do not divide."""
    devices = sharding.mesh.devices.size
    if batch_size % devices:
        raise ValueError(
            f"--batch-size {batch_size} does not split over {devices} devices: pass a "
            f"batch size that is a multiple of {devices}, or --devices that divides it."
        )
    first = sharding.mesh.devices.flat[0]
    return {"devices": devices, "device_kind": first.device_kind, "platform": first.platform}


def _warm_up(candidates: dict[str, Candidate], path: str, batch_size: int) -> None:
    """Before any clock: one placement each way (a device's first transfer sets things
    up), and a batch from a pipeline with one worker (it starts the server that the
    workers of every later pipeline of this process are forked from)."""
    for name in (PUT_ALONE, SHARD_ALONE):
        opener, finish = candidates[name].ways[PLACED]
        assert finish is not None
        finish(next(opener({})))
    stream = pipeline_stream(path, batch_size, "1", False, {})
    _, shard = candidates[SHARD_ALONE].ways[PLACED]
    assert shard is not None
    shard(next(stream))
    close_stream(stream)
    settle()


def _line(times: RunTimes) -> str:
    epochs = " ".join(f"{ms:.1f}" for ms in times.epoch_ms)
    return (
        f"first batch {times.first_batch_s:.2f} s, first to last {times.ms_per_batch:.1f} "
        f"ms/batch (epochs: {epochs})"
    )


def _machine_gb() -> float:
    """This machine's memory in GB."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9


def _workers(value: str) -> str:
    if value == "auto" or (value.isdigit() and int(value) >= 0):
        return str(int(value)) if value.isdigit() else value
    raise argparse.ArgumentTypeError(f"a worker count is an int >= 0 or 'auto', got {value!r}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", choices=list(PRESETS), default="v5e")
    parser.add_argument("--workers", type=_workers, nargs="+", help="0 4 8 12 (v5e)")
    parser.add_argument("--grain-ways", nargs="*", choices=list(GRAIN_WAYS))
    parser.add_argument(
        "--grain-workers", type=int, nargs="+", help="Grain's process counts (--workers')"
    )
    parser.add_argument("--rounds", type=int)
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--images", type=int)
    parser.add_argument("--side", type=int)
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--read-next-epoch", action="store_true", help="Workers(N, True)")
    parser.add_argument("--devices", type=int, help="place onto this many (default: all)")
    parser.add_argument(
        "--memory-bound-gb",
        type=float,
        help="stop a candidate whose processes hold more (default: 3/4 of this machine's)",
    )
    parser.add_argument("--out", type=Path, help="FILE.json, rewritten after every run")
    parser.add_argument("--summarize", type=Path, help="a recorded FILE.json: summarize it")
    args = parser.parse_args()
    if args.summarize is not None:
        recorded = json.loads(args.summarize.read_text())
        refuse_earlier_rule(recorded, args.summarize)
        recorded |= summarize(recorded)
        print_results(recorded)
        write_json(args.summarize, recorded)
        return
    preset = PRESETS[args.preset]
    jax.config.update("jax_num_cpu_devices", CPU_DEVICES)  # where there is no accelerator
    print("load average before:", os.getloadavg(), "cores:", os.cpu_count(), flush=True)
    results = images(
        count=args.images or preset.images,
        side=args.side or preset.side,
        batch_size=args.batch_size or preset.batch_size,
        workers=args.workers or list(preset.workers),
        grain_ways=list(GRAIN_WAYS) if args.grain_ways is None else args.grain_ways,
        rounds=args.rounds or preset.rounds,
        epochs=args.epochs or preset.epochs,
        preset=args.preset,
        read_next_epoch=args.read_next_epoch,
        grain_workers=args.grain_workers,
        devices=args.devices or len(jax.devices()),
        memory_bound=int((args.memory_bound_gb or 0.75 * _machine_gb()) * 1e9),
        out=args.out,
        command=" ".join(["python -m benchmarks.host_work_images", *sys.argv[1:]]),
    )
    print_results(results)
    if args.out is not None:
        write_json(args.out, results)
        print("wrote", args.out)


if __name__ == "__main__":
    main()

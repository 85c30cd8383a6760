"""The feed on one host with an accelerator: `Pipeline` against Grain, placed and not, and
the copy to the device, each candidate in a process of its own, in one call.

Two cases, both made on this machine at the start:

- **images**: ``--images`` random uint8 images in a memory-mapped ``.npy`` file, the
  augmentation of `benchmarks._image_stage` (pad, crop, flip, stack), batches of
  ``--batch-size``; `Pipeline` as `benchmarks._image_loaders` builds it, Grain as its
  documentation writes it (``MapDataset.source(...).repeat(R).batch(B).map(stage)
  .to_iter_dataset().mp_prefetch(MultiprocessingOptions(num_workers=N))``);
- **tokens**: random documents written once as a token store (`write_documents`) and as
  ArrayRecord files, packed into rows (concatenated and split), shuffled; `Pipeline` over
  ``Packed(Documents(store))`` and Grain over ``ArrayRecordDataSource`` as
  `benchmarks._store_run` builds them.

Each at every process count of ``--processes`` (8 and 12 on the 13-core TPU v5e host), not
placed and placed on ``jax.devices()[0]``: `Pipeline` through ``prefetch_to_device(...,
sharding=SingleDeviceSharding(device))``, Grain images through its own
``grain.experimental.device_put(dataset, device)`` (its defaults), Grain tokens (a
generator of packed batches) through ``jax.device_put`` batch by batch. The copy alone:
one prepared image batch through ``jax.device_put``, ``ArraySharder.shard``, and from
pinned host memory (``memory_kind="pinned_host"``) where the device has it.

**The clock is a training run's**: every candidate delivers ``--epochs`` epochs from one
fresh iterator, and its figure is the time from its first batch to its last, over the
batches after the first (``ms_per_batch``); the first batch's seconds and each epoch's ms
a batch are recorded beside it. A loader that reads far ahead serves its later epochs
from memory, which a window timed after a warm-up would count as speed; over a whole run
the batches must still be made, and the per-epoch times show the read-ahead draining.

**Each candidate runs alone** in a new process (``python -m benchmarks.feed_device
--child SPEC``), with this machine's memory watched (`benchmarks._memory_guard`): past
``--memory-bound-gb`` it is stopped and recorded as failed; past ``--timeout-s`` it is
killed and recorded so. Results are written after every candidate.

Ratios printed: Pipeline's best / Grain's best (ms a batch, host only), per case; placed
Pipeline / max(its host ms, the copy's ms) at each process count (target <= 1.15); the
copy through ``shard`` over the best copy measured (GB/s).

    python -m benchmarks.feed_device [--preset v5e | two-core | tiny] [--out DIR]
        [--cases images tokens] [--images N] [--processes N ...]
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

CHILD_MARK = "FEED_DEVICE_JSON "
CASES = ("images", "tokens")  # the copy of one image batch runs with either


@dataclasses.dataclass(frozen=True)
class Preset:
    """A machine's sizes; the flags override some."""

    images: int
    side: int
    batch_size: int
    epochs: int
    processes: tuple[int, ...]
    documents: int
    length: int
    token_batch: int
    timeout_s: float
    copy_rounds: int


PRESETS = {
    "v5e": Preset(2048, 224, 256, 4, (8, 12), 20_000, 2048, 32, 60.0, 20),
    "two-core": Preset(768, 160, 128, 4, (2,), 8_000, 1024, 16, 120.0, 10),
    "tiny": Preset(48, 32, 8, 2, (1,), 300, 64, 4, 90.0, 3),
}


# ---------------------------------------------------------------- in the child process


def _image_stream(spec: dict[str, Any]) -> Any:
    from benchmarks._image_loaders import _grain_stream, pipeline_stream

    if spec["loader"] == "pipeline":
        stream = pipeline_stream(
            spec["path"], spec["batch_size"], str(spec["workers"]), False, spec["notes"]
        )
        return _placed_pipeline(stream, spec)
    repeats = spec["epochs"] + 1
    if not spec["placed"]:
        return _grain_stream(spec["path"], spec["batch_size"], "batch", spec["workers"], repeats)
    import grain
    import jax

    from benchmarks import _image_stage as stage

    records = grain.MapDataset.source(stage.ImageRecords(spec["path"])).repeat(repeats)
    dataset = records.batch(spec["batch_size"], drop_remainder=True).map(stage.augment_batch)
    dataset = dataset.to_iter_dataset()
    if spec["workers"]:
        dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=spec["workers"]))
    return iter(grain.experimental.device_put(dataset, jax.devices()[0]))


def _placed_pipeline(stream: Any, spec: dict[str, Any]) -> Any:
    if not spec["placed"]:
        return stream
    import jax

    from datarax import prefetch_to_device
    from datarax._compat import single_device_sharding

    return prefetch_to_device(stream, sharding=single_device_sharding(jax.devices()[0]))


def _our_tokens(spec: dict[str, Any]) -> Any:
    from flax import nnx

    from datarax.pipeline import Documents, Packed, Pipeline

    documents = Documents(spec["store"], cache_dir=spec["cache_dir"])
    packed = Packed(documents, spec["length"], method=spec["method"], rngs=nnx.Rngs(0))
    pipeline = Pipeline(
        source=packed,
        batch_size=spec["batch_size"],
        shuffle=True,
        rngs=nnx.Rngs(0),
        workers=spec["workers"],
    )
    while True:
        yield from pipeline


def _token_stream(spec: dict[str, Any]) -> Any:
    if spec["loader"] == "ours-store":
        return _placed_pipeline(_our_tokens(spec), spec)
    from benchmarks._array_record import grain_array_record_batches

    batches = grain_array_record_batches({**spec, "epochs": spec["epochs"] + 1})
    if not spec["placed"]:
        return batches
    import jax

    device = jax.devices()[0]
    return (jax.device_put(batch, device) for batch in batches)


def _copy_run(spec: dict[str, Any]) -> dict[str, Any]:
    """The copy of one image batch to the first device, three ways, interleaved."""
    import jax

    from benchmarks._image_stage import first_batch
    from benchmarks._timing import interleaved, medians
    from datarax._compat import single_device_sharding
    from datarax.sharding import ArraySharder

    device = jax.devices()[0]
    batch, sharder = first_batch(spec["path"], spec["batch_size"]), ArraySharder()
    sharding = single_device_sharding(device)
    ways = {
        "jax.device_put": lambda: jax.block_until_ready(jax.device_put(batch, device)),
        "ArraySharder.shard": lambda: jax.block_until_ready(sharder.shard(batch, sharding)),
    }
    kinds = [memory.kind for memory in device.addressable_memories()]
    if "pinned_host" in kinds:
        pinned_sharding = jax.sharding.SingleDeviceSharding(device, memory_kind="pinned_host")
        pinned = jax.block_until_ready(jax.device_put(batch, pinned_sharding))
        ways["from pinned host memory"] = lambda: jax.block_until_ready(
            jax.device_put(pinned, sharding)
        )
    times = interleaved(ways, spec["rounds"])
    seconds = medians(times)
    megabytes = sum(value.nbytes for value in batch.values()) / 1e6
    return {
        "device": device.device_kind,
        "platform": device.platform,
        "memory_kinds": kinds,
        "megabytes": megabytes,
        "ms": {name: s * 1e3 for name, s in seconds.items()},
        "gb_per_s": {name: megabytes / 1e3 / s for name, s in seconds.items()},
    }


def _timed_run(spec: dict[str, Any]) -> dict[str, Any]:
    """One training run of the candidate `spec`, timed from its first batch to its last
    (`benchmarks._epoch_timing`), every placed batch waited for."""
    import jax

    from benchmarks._epoch_timing import time_run
    from benchmarks._host_work import grain_ready

    grain_ready()
    spec["notes"] = {}
    opener = _image_stream if spec["case"] == "images" else _token_stream
    finish = jax.block_until_ready if spec["placed"] else None
    times = time_run(
        lambda: opener(spec), spec["batches_per_epoch"], spec["epochs"], finish
    ).as_json()
    times.pop("first_batch")  # no check here: the images benchmark compares first batches
    notes = {key: value for key, value in spec["notes"].items() if key != "time_report_ms"}
    return times | {"notes": notes}


def child(spec: dict[str, Any]) -> None:
    """Runs one candidate under the memory bound; prints its result as the last line."""
    import jax

    from benchmarks._memory_guard import MemoryBoundError, Watch, tree_memory, watched

    jax.devices()  # the runtime's own host memory (about 15 GB on a TPU) is not the loader's
    watch, runtime = Watch(), tree_memory()
    try:
        with watched(spec["name"], runtime + int(spec["bound_gb"] * 1e9), watch):
            result = _copy_run(spec) if spec["case"] == "copy" else _timed_run(spec)
    except MemoryBoundError as error:
        result: dict[str, Any] = {"error": str(error)}
    result["peak_gb"], result["runtime_gb"] = watch.peak / 1e9, runtime / 1e9
    print(CHILD_MARK + json.dumps(result), flush=True)


# ---------------------------------------------------------------- in the driver


_PLATFORMS = os.environ.get("JAX_PLATFORMS")  # the children's; the driver keeps off the chip


def _run_child(spec: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    command = [sys.executable, "-m", "benchmarks.feed_device", "--child", json.dumps(spec)]
    environment = dict(os.environ)
    environment.pop("JAX_PLATFORMS", None)
    if _PLATFORMS is not None:
        environment["JAX_PLATFORMS"] = _PLATFORMS
    try:
        done = subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            start_new_session=True,
            env=environment,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"stopped after {timeout_s:.0f} s (--timeout-s)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith(CHILD_MARK)]
    if not lines:
        return {"error": f"exit code {done.returncode}: {done.stderr[-3000:]}"}
    return json.loads(lines[-1][len(CHILD_MARK) :])


def _prepare(folder: Path, preset: Preset, cases: tuple[str, ...]) -> dict[str, Any]:
    """The image file (the copy uses it in every run) and, with the tokens case, the
    token corpus, in `folder`."""
    from benchmarks._image_stage import write_images

    images = str(folder / "images.npy")
    write_images(images, preset.images, preset.side)
    return {"images": images} | (_token_corpus(folder, preset) if "tokens" in cases else {})


def _token_corpus(folder: Path, preset: Preset) -> dict[str, Any]:
    """Random documents written as a token store and as ArrayRecord files in `folder`."""
    from datarax.pipeline import write_documents

    rng = np.random.default_rng(0)
    lengths = rng.integers(preset.length // 8, preset.length * 2, preset.documents)
    documents = [rng.integers(1, 32_000, n).astype(np.int32) for n in lengths]
    store = write_documents(documents, folder / "store", replace=True)
    files: list[str] = []  # Grain's tokens need pyarrow (its packing module imports it)
    if importlib.util.find_spec("pyarrow") is not None:
        from benchmarks._array_record import write_array_record

        files, _ = write_array_record(folder / "array_record", iter(documents), 4)
    tokens = int(lengths.sum())
    rows = tokens // preset.length
    return {
        "store": str(folder / "store"),
        "store_documents": len(store),
        "array_record": files,
        "tokens": tokens,
        "token_batches_per_epoch": max(2, rows // preset.token_batch * 9 // 10),
        "max_pieces": int(-(-int(lengths.max()) // preset.length)),
    }


def _candidates(
    preset: Preset, data: dict[str, Any], folder: Path, cases: tuple[str, ...]
) -> dict[str, dict[str, Any]]:
    image = {
        "case": "images",
        "path": data["images"],
        "batch_size": preset.batch_size,
        "epochs": preset.epochs,
        "batches_per_epoch": preset.images // preset.batch_size,
    }
    token: dict[str, Any] | None = None
    if "tokens" in cases:
        token = {
            "case": "tokens",
            "store": data["store"],
            "files": data["array_record"],
            "cache_dir": str(folder / "index"),
            "length": preset.length,
            "batch_size": preset.token_batch,
            "method": "concat",
            "order": "shuffled",
            "epochs": preset.epochs,
            "batches_per_epoch": data["token_batches_per_epoch"],
            "max_pieces": data["max_pieces"],
        }
    chosen: dict[str, dict[str, Any]] = {
        "copy": {
            "case": "copy",
            "path": data["images"],
            "batch_size": preset.batch_size,
            "rounds": preset.copy_rounds,
        },
    }
    for count in preset.processes:
        for placed in (False, True):
            where = "placed" if placed else "host"
            common = {"workers": count, "placed": placed}
            if "images" in cases:
                chosen[f"images Pipeline workers={count} {where}"] = (
                    image | common | {"loader": "pipeline"}
                )
                chosen[f"images Grain processes={count} {where}"] = (
                    image | common | {"loader": "grain"}
                )
            if token is None:
                continue
            chosen[f"tokens Pipeline workers={count} {where}"] = (
                token | common | {"loader": "ours-store"}
            )
            if data["array_record"]:
                chosen[f"tokens Grain processes={count} {where}"] = (
                    token | common | {"loader": "grain-arrayrecord"}
                )
    return chosen


def _ratios(preset: Preset, runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    def ms(name: str) -> float | None:
        return runs.get(name, {}).get("ms_per_batch")

    ratios: dict[str, Any] = {}
    for case in ("images", "tokens"):
        ours = [ms(f"{case} Pipeline workers={n} host") for n in preset.processes]
        theirs = [ms(f"{case} Grain processes={n} host") for n in preset.processes]
        ours, theirs = [v for v in ours if v], [v for v in theirs if v]
        if ours and theirs:
            ratios[f"{case}: Pipeline best / Grain best (batches a second)"] = min(theirs) / min(
                ours
            )
    copy = runs.get("copy", {}).get("ms", {})
    for count in preset.processes:
        host, placed = (ms(f"images Pipeline workers={count} {w}") for w in ("host", "placed"))
        if host and placed and copy.get("ArraySharder.shard"):
            bound = max(host, copy["ArraySharder.shard"])
            ratios[f"images workers={count}: placed / max(host, copy)"] = placed / bound
    rates = runs.get("copy", {}).get("gb_per_s", {})
    if rates.get("ArraySharder.shard"):
        ratios["copy: shard / best copy measured (GB/s)"] = rates["ArraySharder.shard"] / max(
            rates.values()
        )
    return ratios


def _machine() -> dict[str, Any]:
    import jax

    from benchmarks._memory_guard import measure

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": cores,
        "python": platform.python_version(),
        "jax": jax.__version__,
        "load_average": os.getloadavg(),
        "memory_measure": measure(),
    }


def run(
    preset: Preset, out: Path, bound_gb: float, cases: tuple[str, ...] = CASES
) -> dict[str, Any]:
    """The whole run: the data, every candidate of `cases` (and the copy) once in its own
    process, the ratios."""
    out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": _machine(), "preset": dataclasses.asdict(preset)}
    results["memory_bound_gb"], results["cases"] = bound_gb, list(cases)
    with tempfile.TemporaryDirectory(prefix="feed_device_") as temporary:
        folder = Path(temporary)
        start = time.perf_counter()
        data = _prepare(folder, preset, cases)
        results["data"] = {k: v for k, v in data.items() if k != "array_record"}  # type: ignore[assignment]
        results["data"]["prepare_s"] = time.perf_counter() - start
        print(f"data ready in {results['data']['prepare_s']:.1f} s", flush=True)
        results["runs"] = {}
        for name, spec in _candidates(preset, data, folder, cases).items():
            spec = spec | {"name": name, "bound_gb": bound_gb}
            began = time.perf_counter()
            result = _run_child(spec, preset.timeout_s)
            result["wall_s"] = time.perf_counter() - began
            results["runs"][name] = result
            print(f"{name}: {_line(result)}", flush=True)
            (out / "feed_device.json").write_text(json.dumps(results, indent=1) + "\n")
    results["ratios"] = _ratios(preset, results["runs"])
    print(markdown(results["runs"]))
    for name, value in results["ratios"].items():
        print(f"{name:<62} {value:7.3f}")
    (out / "feed_device.json").write_text(json.dumps(results, indent=1) + "\n")
    return results


def markdown(runs: dict[str, dict[str, Any]]) -> str:
    """One row per timed candidate: the seconds to its first batch, its ms a batch from
    the first batch to the last, and each epoch's ms a batch."""
    lines = [
        "| candidate | first batch (s) | first to last, ms/batch | each epoch, ms/batch |",
        "|" + " --- |" * 4,
    ]
    for name, run in runs.items():
        if "epoch_ms" in run:
            epochs = ", ".join(f"{ms:.1f}" for ms in run["epoch_ms"])
            lines.append(
                f"| {name} | {run['first_batch_s']:.2f} | {run['ms_per_batch']:.2f} | {epochs} |"
            )
        elif "error" in run:
            lines.append(f"| {name} | failed | | |")
    return "\n".join(lines)


def _line(result: dict[str, Any]) -> str:
    if "error" in result:
        return "FAILED " + result["error"].splitlines()[-1][:200]
    if "gb_per_s" in result:
        return ", ".join(f"{k} {v:.2f} GB/s" for k, v in result["gb_per_s"].items())
    epochs = " ".join(f"{v:.1f}" for v in result["epoch_ms"])
    return (
        f"{result['ms_per_batch']:.2f} ms a batch first to last (epochs: {epochs}); "
        f"first batch {result['first_batch_s']:.2f} s; peak {result['peak_gb']:.2f} GB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="v5e")
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--cases", nargs="+", choices=CASES, default=list(CASES))
    parser.add_argument("--images", type=int, help="how many images (the preset's by default)")
    parser.add_argument("--processes", type=int, nargs="*")
    parser.add_argument("--epochs", type=int)
    parser.add_argument("--timeout-s", type=float)
    parser.add_argument("--memory-bound-gb", type=float)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    # The driver never opens the accelerator: one process at a time may hold a TPU.
    os.environ["JAX_PLATFORMS"] = "cpu"
    preset = PRESETS[args.preset]
    changes = {
        "images": args.images,
        "processes": tuple(args.processes) if args.processes else None,
        "epochs": args.epochs,
        "timeout_s": args.timeout_s,
    }
    preset = dataclasses.replace(preset, **{k: v for k, v in changes.items() if v is not None})
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    bound = args.memory_bound_gb or 0.75 * memory
    run(preset, args.out, bound, tuple(args.cases))


if __name__ == "__main__":
    main()

"""The images case's loaders, each a `Candidate`: the ways it delivers batches (host
only, placed) as streams to open, and what the consumer does with each batch of a way
(`benchmarks.host_work_images` times them).

Batches go onto one sharding: the batch's rows split over `placement_sharding`'s
devices. `Pipeline` places them itself, ``Pipeline(..., sharding=S)``, and also behind
``prefetch_to_device(Pipeline(...), sharding=S)`` (its thread places), as a training loop
would; Grain with ``jax.device_put(batch, S)`` in the consumer, its own way.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import multiprocessing
import os
from collections.abc import Callable, Iterator
from typing import Any

import grain
import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, Sharding

from benchmarks import _image_stage as stage
from benchmarks._epoch_timing import close_stream
from benchmarks._host_work import pipeline_epochs, pipeline_name
from datarax.pipeline import ArraySource, Workers, prefetch_to_device
from datarax.pipeline import _memory as memory
from datarax.sharding import ArraySharder

GRAIN_WAYS = {
    "batch": "Grain per batch",
    "record": "Grain per record",
    "kept": "Grain per batch, kept memory",
}
PUT_ALONE, SHARD_ALONE = "placement alone: jax.device_put", "placement alone: ArraySharder.shard"


def allocator_environment() -> dict[str, str]:
    """glibc's environment variables for the settings our workers make with mallopt
    (`keep_freed_memory` of `Workers().keep_freed_memory` bytes, 1 GiB)."""
    keep = Workers().keep_freed_memory
    threshold = str(min(keep, memory._MAX_INT))
    top_pad = str(min(memory._TOP_PAD, keep))
    return {
        "MALLOC_MMAP_THRESHOLD_": threshold,
        "MALLOC_TRIM_THRESHOLD_": threshold,
        "MALLOC_TOP_PAD_": top_pad,
    }


def placement_sharding(devices: int) -> NamedSharding:
    """The rows of a batch split over the first `devices` of `jax.devices()`."""
    available = jax.devices()
    if not 1 <= devices <= len(available):
        raise ValueError(
            f"--devices {devices}: this process has {len(available)} device(s); pass "
            f"1 to {len(available)}."
        )
    mesh = jax.sharding.Mesh(np.array(available[:devices]), ("data",))
    return NamedSharding(mesh, PartitionSpec("data"))


def pipeline_stream(
    path: str,
    batch_size: int,
    workers: str,
    read_next_epoch: bool,
    notes: dict[str, Any],
    sharding: Sharding | None = None,
) -> Iterator[Any]:
    """`Pipeline`'s endless stream over the image file; with `sharding`, its batches
    placed by the pipeline (``Pipeline(..., sharding=sharding)``)."""
    images = np.load(path, mmap_mode="r")  # reaches the workers as its path
    source = ArraySource({"image": images, "label": np.arange(len(images), dtype=np.int32)})
    options = Workers(
        "auto" if workers == "auto" else int(workers), read_next_epoch=read_next_epoch
    )
    return pipeline_epochs(
        notes,
        source=source,
        stages=[stage.augment_batch],
        batch_size=batch_size,
        workers=options,
        sharding=sharding,
    )


def _prefetched(sharding: Sharding, open_stream: Callable[[], Iterator[Any]]) -> Iterator[Any]:
    """The stream `open_stream` opens, placed onto `sharding` by `prefetch_to_device`."""
    return prefetch_to_device(open_stream(), sharding=sharding)


def _grain_stream(path: str, batch_size: int, way: str, workers: int, repeats: int) -> Any:
    """Grain over the same file as its documentation writes it, per batch or per record
    (`way`), repeated `repeats` times, through `workers` processes (none for 0)."""
    records = grain.MapDataset.source(stage.ImageRecords(path)).repeat(repeats)
    if way == "record":
        batches = records.map(stage.augment_record).batch(batch_size, drop_remainder=True)
    else:
        batches = records.batch(batch_size, drop_remainder=True).map(stage.augment_batch)
    dataset = batches.to_iter_dataset()
    if workers:
        dataset = dataset.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
    return iter(dataset)


def _environment_of(pid: int) -> dict[str, str]:
    """The environment process `pid` started with (empty where it cannot be read)."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as file:
            items = file.read().split(b"\0")
    except OSError:  # no /proc, or the process is gone
        return {}
    pairs = (item.decode(errors="replace").partition("=") for item in items)
    return {name: value for name, _, value in pairs if name}


def _with_environment(
    environment: dict[str, str], open_stream: Callable[[], Any], notes: dict[str, Any]
) -> Iterator[Any]:
    """`open_stream`'s batches with `environment` set in os.environ while it starts and
    runs, restored when this stream is closed. At the first batch, `notes` records how
    many of the processes it started hold every variable of `environment`."""
    saved = {name: os.environ.get(name) for name in environment}
    before = {child.pid for child in multiprocessing.active_children()}
    os.environ.update(environment)
    stream = None
    try:
        stream = open_stream()
        yield next(stream)
        children = {child.pid for child in multiprocessing.active_children()}
        started = [pid for pid in children - before if pid is not None]
        holding = [
            pid
            for pid in started
            if _environment_of(pid).items() >= environment.items()  # every name and value
        ]
        notes |= {"processes_started": len(started), "processes_with_settings": len(holding)}
        yield from stream
    finally:
        if stream is not None:
            close_stream(stream)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


Finish = Callable[[Any], Any] | None  # what the consumer does with each batch of a way
Way = tuple[Callable[[dict[str, Any]], Iterator[Any]], Finish]  # opener(notes), finish
HOST, PLACED, PREFETCHED = "host", "placed", "prefetched"  # the ways, in the order run


@dataclasses.dataclass
class Candidate:
    """A loader: per way of delivering batches (`HOST`, `PLACED`, `PREFETCHED`), how
    its endless stream opens (given a dict for what the loader says of itself) and what
    the consumer does with each batch; `kind` and `workers` say what it is
    (`benchmarks._image_summary`)."""

    ways: dict[str, Way]
    kind: str
    workers: int | str = 0


def candidates_for(
    path: str,
    batch_size: int,
    workers: list[str],
    grain_ways: list[str],
    grain_workers: list[int],
    repeats: int,
    read_next_epoch: bool,
    prepared: dict[str, np.ndarray],
    sharding: Sharding,
) -> dict[str, Candidate]:
    """Every candidate by name: `Pipeline` at each of `workers`, Grain's `grain_ways` at
    each of `grain_workers`, and the placement of the `prepared` batch alone, both ways."""
    sharder = ArraySharder()

    def shard(batch: Any) -> None:
        jax.block_until_ready(sharder.shard(batch, sharding))

    def put(batch: Any) -> None:
        jax.block_until_ready(jax.device_put(batch, sharding))

    candidates = {}
    for count in workers:
        host = functools.partial(pipeline_stream, path, batch_size, count, read_next_epoch)
        ways: dict[str, Way] = {
            HOST: (host, None),
            PLACED: (functools.partial(host, sharding=sharding), jax.block_until_ready),
            PREFETCHED: (
                lambda notes, host=host: _prefetched(sharding, functools.partial(host, notes)),
                jax.block_until_ready,
            ),
        }
        kind_workers = count if count == "auto" else int(count)
        candidates[pipeline_name(count)] = Candidate(ways, "pipeline", kind_workers)
    for way, count in itertools.product(grain_ways, grain_workers):
        opener = functools.partial(_grain_stream, path, batch_size, way, count, repeats)
        name = f"{GRAIN_WAYS[way]} workers={count}"
        if way != "kept":
            plain = lambda notes, opener=opener: opener()  # noqa: E731
            candidates[name] = Candidate(
                {HOST: (plain, None), PLACED: (plain, put)}, "grain", count
            )
        elif count:  # the settings reach Grain's processes only
            with_settings = functools.partial(_with_environment, allocator_environment(), opener)
            ways = {HOST: (with_settings, None), PLACED: (with_settings, put)}
            candidates[name] = Candidate(ways, "grain-kept", count)
    again = lambda notes: itertools.repeat(prepared)  # noqa: E731
    candidates[PUT_ALONE] = Candidate({PLACED: (again, put)}, "copy-put")
    candidates[SHARD_ALONE] = Candidate({PLACED: (again, shard)}, "copy-shard")
    return candidates

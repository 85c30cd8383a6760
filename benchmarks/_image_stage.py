"""The images case's data and its stage: a numpy augmentation that makes fresh arrays.

Per image: reflect-pad by `PAD` pixels on each side, crop back to the image's size at a
place drawn from its label, flip it left to right when the label is odd, written into
the batch's output array. Every batch allocates its arrays anew, as a real augmentation
does: the padded copies and the output (38.5 MB for 256 images of 224 x 224 x 3), which
glibc maps fresh from the kernel each time unless the process keeps freed memory; in a
pipeline's worker the output is made in the slot that carries it back instead.

Run as a module, it times the stage in a process of its own, once with the C library's
defaults and then after `keep_freed_memory()`, and prints both as a JSON line:

    python -m benchmarks._image_stage IMAGES.npy BATCH_SIZE [REPEATS]
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import numpy as np

from datarax.pipeline import output_array

PAD = 8
_PLACES = 2 * PAD + 1  # crop offsets 0..2*PAD along each axis


def augment_image(image: np.ndarray, label: int) -> np.ndarray:
    """One HxWx3 image padded by reflection, cropped back at a place drawn from `label`,
    flipped left to right when `label` is odd (a view of the padded copy)."""
    height, width = image.shape[:2]
    padded = np.pad(image, ((PAD, PAD), (PAD, PAD), (0, 0)), mode="reflect")
    top, left = label % _PLACES, (label // _PLACES) % _PLACES
    crop = padded[top : top + height, left : left + width]
    return crop[:, ::-1] if label % 2 else crop


def augment_batch(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The stage on a whole batch: every image augmented into one output array, made
    with `output_array`: in a pipeline's worker, in the shared memory that carries the
    batch back (no copy to cross); anywhere else (Grain's processes too) ``np.empty``."""
    labels, images = batch["label"], batch["image"]
    out = output_array(images.shape, images.dtype)
    for row, (image, label) in enumerate(zip(images, labels, strict=True)):
        out[row] = augment_image(image, int(label))
    return {"image": out, "label": labels}


def augment_record(record: dict[str, Any]) -> dict[str, Any]:
    """The stage on one record (Grain's per-record map; its batch stacks them)."""
    return {"image": augment_image(record["image"], int(record["label"])), "label": record["label"]}


def write_images(path: str, count: int, side: int) -> None:
    """`count` random `side` x `side` x 3 uint8 images into a ``.npy`` file."""
    rng = np.random.default_rng(0)
    shape = (count, side, side, 3)
    images = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)
    for start in range(0, count, 64):
        part = images[start : start + 64]
        part[...] = rng.integers(0, 256, part.shape, dtype=np.uint8)
    images.flush()
    del images


class ImageRecords:
    """The images of a ``.npy`` file one record at a time, the label its index: Grain's
    source. Pickled as its path, so each of Grain's processes maps the file itself."""

    def __init__(self, path: str):
        self.path = path
        # A plain array over the mapping: every slice of an np.memmap would be an
        # np.memmap too, which costs more per record.
        self.images = np.asarray(np.load(path, mmap_mode="r"))

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {"image": self.images[index], "label": np.int32(index)}

    def __reduce__(self) -> tuple[Any, ...]:
        return ImageRecords, (self.path,)


def first_batch(path: str, batch_size: int) -> dict[str, np.ndarray]:
    """The file's first `batch_size` images and their labels, as the pipeline reads them."""
    images = np.load(path, mmap_mode="r")
    return {
        "image": np.asarray(images[:batch_size]),
        "label": np.arange(batch_size, dtype=np.int32),
    }


def stage_ms(batch: dict[str, np.ndarray], repeats: int) -> float:
    """The median milliseconds of `repeats` runs of the stage on `batch`, after two."""
    times = []
    for run in range(repeats + 2):
        start = time.perf_counter()
        augment_batch(batch)
        if run >= 2:
            times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def _main() -> None:
    from datarax.pipeline import keep_freed_memory

    path, batch_size = sys.argv[1], int(sys.argv[2])
    repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 7
    batch = first_batch(path, batch_size)
    default_ms = stage_ms(batch, repeats)
    kept = keep_freed_memory()
    kept_ms = stage_ms(batch, repeats)
    print(json.dumps({"default_ms": default_ms, "kept_ms": kept_ms, "kept": kept}))


if __name__ == "__main__":
    _main()

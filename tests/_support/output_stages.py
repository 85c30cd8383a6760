"""Stages that make their output with `output_array`, for the worker tests: top-level,
so worker processes can unpickle them."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datarax.pipeline import output_array, output_like


def flip_into_output(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The images flipped left to right, written into an array made with `output_like`;
    the labels returned as they came (copied to cross)."""
    images = output_like(batch["image"])
    np.copyto(images, batch["image"][:, :, ::-1])
    return {"image": images, "label": batch["label"]}


class WiderFrom:
    """Makes its output `width` columns wide from the batch holding `row` on, and one
    column before: the later batches outgrow the slots sized for the earlier ones."""

    def __init__(self, row: int, width: int):
        self.row, self.width = row, width

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        columns = self.width if batch["x"].max() >= self.row else 1
        out = output_array((len(batch["x"]), columns), np.float32)
        out[...] = batch["x"][:, None] * np.arange(1, columns + 1, dtype=np.float32)
        return {"x": out}


class ObjectsOnce:
    """Asks `output_array` for an object array the first time (a marker file remembers
    across processes), and returns the batch unchanged after."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if not self.marker.exists():
            self.marker.touch()
            output_array((len(batch["x"]), 3), object)
        return batch

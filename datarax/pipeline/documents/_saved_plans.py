"""Packing plans kept in files and read by memory map: computed once, block by block (on
every core of this host where there are several blocks), and shared by every process
that packs the same indexed documents the same way, so no process holds a plan of its
own however many documents there are.

A plan's folder holds its arrays as raw files (``doc``, ``start`` and ``row_starts`` of a
best-fit plan; ``order`` and ``ends`` of a concat plan), ``plan.json`` saying their
dtypes and sizes, and the ``key`` of the documents (every index file's path, size and
modification time) and arguments it was made from (the options of `PlanOptions` only
where they are not the defaults, and best-fit under its earlier name ``first_fit``, so
plans saved before those options existed are found again). It is looked for under each of
`roots` in turn, and made under the first one that can be written.
"""

from __future__ import annotations

import collections
import concurrent.futures
import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np

from datarax.pipeline.documents._index import cached_folder, entry_folder, entry_name, read_key
from datarax.pipeline.documents._plan import (
    ConcatPlan,
    PackingPlan,
    PlanOptions,
    PlanParts,
    keyed_name,
)

_VERSION = "1"  # part of every plan's key: a new planning rule makes old plans stale


def _part_in_worker(
    documents: Any, arguments: tuple[int, str, list[int] | None, PlanOptions, int], block: int
) -> tuple[np.ndarray, ...]:
    return PlanParts(documents.lengths, *arguments).part(block)


def _parts(documents: Any, parts: PlanParts) -> Iterator[tuple[np.ndarray, ...]]:
    """Every block's part in order: here for one block, else on this host's cores."""
    if parts.blocks <= 1:
        yield from map(parts.part, range(parts.blocks))
        return
    from datarax.pipeline.workers import task_pool, usable_cores

    arguments = (parts.length, parts.method, parts.seed, parts.options, parts.block)
    count = min(usable_cores(), parts.blocks)
    with task_pool(count) as pool:
        pending: collections.deque[concurrent.futures.Future[Any]] = collections.deque()
        for block in range(parts.blocks):  # at most two blocks a process in flight
            pending.append(pool.submit(_part_in_worker, documents, arguments, block))
            if len(pending) >= 2 * count:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _write(folder: str, made: Iterable[tuple[np.ndarray, ...]], parts: PlanParts) -> None:
    """The plan's arrays from its parts, each piece appended to its file as it comes."""
    types = parts.dtypes()
    sizes = dict.fromkeys(types, 0)
    files = {name: open(os.path.join(folder, name), "wb") for name in types}  # noqa: SIM115
    try:
        for name, values in parts.arrays(made):
            values.tofile(files[name])
            sizes[name] += len(values)
    finally:
        for file in files.values():
            file.close()
    layout = {name: [np.dtype(dtype).str, sizes[name]] for name, dtype in types.items()}
    with open(os.path.join(folder, "plan.json"), "w", encoding="utf-8") as file:
        json.dump(layout, file)


def _mapped(folder: str, name: str, dtype: str, size: int) -> np.ndarray:
    if size == 0:
        return np.zeros(0, dtype)
    # A plain view of the map: slicing a memmap costs Python calls a row.
    return np.asarray(np.memmap(os.path.join(folder, name), dtype, "r", shape=(size,)))


def saved_plan(
    documents: Any,
    lengths: np.ndarray,
    identity: str,
    roots: list[str],
    arguments: tuple[int, str, list[int] | None, PlanOptions],
) -> PackingPlan | ConcatPlan:
    """The plan of `documents` (of `lengths`, known by `identity`) for ``(length, method,
    seed, options)``, found under one of `roots`, else computed and kept under the first
    that can be written."""
    parts = PlanParts(lengths, *arguments)
    named = (keyed_name(parts.method), parts.length, parts.seed, parts.block)
    key = "\0".join(map(str, [f"v{_VERSION}", *named, identity, *parts.options.key()]))
    name = entry_name("plan", identity, *named, *parts.options.key())
    found = next(
        (entry_folder(r, name, key) for r in roots if read_key(entry_folder(r, name, key)) == key),
        None,
    )
    if found is None:
        root = next((r for r in roots if _writable(r)), roots[-1])
        found = cached_folder(root, name, key, lambda f: _write(f, _parts(documents, parts), parts))
    with open(os.path.join(found, "plan.json"), encoding="utf-8") as file:
        layout = json.load(file)
    arrays = {name: _mapped(found, name, dtype, size) for name, (dtype, size) in layout.items()}
    return parts.plan(arrays)


def _writable(root: str) -> bool:
    try:
        os.makedirs(root, exist_ok=True)
    except OSError:
        return False
    return os.access(root, os.W_OK)

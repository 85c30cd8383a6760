"""What a process holds while it iterates a shuffled packed pipeline over a token store of
tens of millions of documents: the store's lengths, its packing plan and its epoch order
are files mapped or positions computed, so the process's own memory does not grow with
the corpus.

The store (kept in ``--data DIR`` and reused): ``--documents`` documents of 1 to 5 tokens
(so that the count, not the bytes, is large), written as a flat ``.npy`` token file with
end-of-text id 0, then converted in a process of its own by ``write_documents(Documents(
flat, eos_id=0), store)`` (timed, with that process's memory at the end: its ``VmHWM``
is the write's peak; the shards are written on this host's cores). Then, in a fresh process for
each of two runs (the first computes the plan and saves it beside the store, the second
maps it): ``Documents(store)``, ``Packed(store, 64, rngs=nnx.Rngs(0))``,
``Pipeline(shuffle=True)`` and ``--batches`` batches of 32 rows, with the process's
``VmHWM``, ``RssAnon`` and ``RssFile`` (``/proc/self/status``) after each step: mapped
files (the index, the lengths, the plan) count in ``RssFile``, page cache that every
process on the host shares and the kernel can drop; ``RssAnon`` is the process's own.

    python -m benchmarks.store_memory --out DIR [--data DIR] [--documents N] [--batches N]

writes ``DIR/store_memory_<label>.json`` (``two_core`` on 2 usable cores).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._host_work import usable_cores, write_json

ROOT = Path(__file__).resolve().parents[1]


def memory() -> dict[str, float]:
    """This process's peak and current resident memory, in MB, split anonymous / file."""
    wanted = ("VmHWM", "VmRSS", "RssAnon", "RssFile")
    found: dict[str, float] = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, value = line.partition(":")
            if key in wanted:
                found[key] = int(value.split()[0]) / 1024
    return found


def make(folder: Path, count: int) -> dict[str, Any]:
    """The flat token file (module docstring)."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 6, count)
    tokens = rng.integers(1, 50_000, int(lengths.sum()) + count).astype(np.uint16)
    tokens[np.cumsum(lengths + 1) - 1] = 0  # each document ends with the id 0
    folder.mkdir(parents=True, exist_ok=True)
    np.save(folder / "flat.npy", tokens)
    return {"documents": count, "tokens": len(tokens) - count}


def write(folder: Path) -> dict[str, Any]:
    """The store written from the flat file (in a process of its own), timed."""
    from datarax.pipeline import Documents, write_documents

    start = time.perf_counter()
    flat = Documents(folder / "flat.npy", eos_id=0, cache_dir=folder / "cache")
    indexed = time.perf_counter()
    store = write_documents(flat, folder / "store", replace=True)
    return {
        "documents": len(store),
        "index_flat_s": indexed - start,
        "write_store_s": time.perf_counter() - indexed,
        "shards": len(list((folder / "store").glob("*.idx"))),
        "memory_mb": memory(),
    }


def iterate(folder: Path, batches: int) -> dict[str, Any]:
    """One run (module docstring), in this process."""
    from flax import nnx

    from datarax.pipeline import Documents, Packed, Pipeline

    steps: dict[str, Any] = {"start": memory()}
    start = time.perf_counter()
    store = Documents(folder / "store", cache_dir=folder / "cache")
    steps["documents"] = {"s": time.perf_counter() - start, **memory()}
    start = time.perf_counter()
    packed = Packed(store, 64, rngs=nnx.Rngs(0))
    steps["packed"] = {"s": time.perf_counter() - start, "rows": len(packed), **memory()}
    pipeline = Pipeline(source=packed, batch_size=32, shuffle=True, rngs=nnx.Rngs(1))
    start, tokens = time.perf_counter(), 0
    for number, batch in enumerate(pipeline, 1):
        tokens += int(np.count_nonzero(batch["segment_ids"]))
        if number == batches:
            break
    seconds = time.perf_counter() - start
    steps["iterated"] = {"s": seconds, "batches": batches, "tokens": tokens, **memory()}
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=Path("/tmp/datarax-store-memory"))
    parser.add_argument("--documents", type=int, default=50_000_000)
    parser.add_argument("--batches", type=int, default=2_000)
    parser.add_argument("--label")
    parser.add_argument("--run", choices=["make", "write", "iterate"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run == "make":
        print(json.dumps(make(args.data, args.documents)))
        return
    if args.run == "write":
        print(json.dumps(write(args.data)))
        return
    if args.run == "iterate":
        print(json.dumps(iterate(args.data, args.batches)))
        return
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))

    def child(run: str) -> dict[str, Any]:
        command = [sys.executable, "-m", "benchmarks.store_memory", *sys.argv[1:], "--run", run]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        return json.loads(done.stdout.strip().splitlines()[-1])

    label = args.label or ("two_core" if usable_cores() == 2 else f"{usable_cores()}_core")
    results: dict[str, Any] = {
        "command": " ".join(["python -m benchmarks.store_memory", *sys.argv[1:]]),
        "cores": os.cpu_count(),
        "load_average_before": os.getloadavg(),
    }
    if not (args.data / "store" / "manifest.json").exists():
        results["flat"] = child("make")
        results["write"] = child("write")
    results["plan_computed"] = child("iterate")
    results["plan_mapped"] = child("iterate")
    results["load_average_after"] = os.getloadavg()
    out = args.out / f"store_memory_{label}.json"
    write_json(out, results)
    print(json.dumps(results, indent=1))
    print("wrote", out)


if __name__ == "__main__":
    main()

"""Random documents of a token store read through a memory map of its ``.bin`` and by
``pread``, the file in the page cache both times: what a page fault on the first touch of
a mapped page costs against a read of the same bytes.

The store: ``--documents`` documents, lengths log-normal around 1,024 tokens (as
`benchmarks.store`'s), written by `write_documents` into ``--data DIR`` (kept), then read
once in full so that it is in the page cache. Each way runs in a fresh process (no page
mapped before it starts), on the same ``--reads`` random documents (seed 0), each copied
into an int32 row as `Packed` copies it:

- ``map``: ``numpy.frombuffer`` over ``mmap`` of the ``.bin``, a document a slice;
- ``pread``: ``os.pread`` of its byte range, as `Documents` reads a store.

    python -m benchmarks.document_reads --out DIR [--data DIR] [--documents N] [--reads N]

writes ``DIR/document_reads_<label>.json`` (``two_core`` on 2 usable cores).
"""

from __future__ import annotations

import argparse
import json
import mmap
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._host_work import usable_cores, write_json
from benchmarks._packing_data import document_lengths

ROOT = Path(__file__).resolve().parents[1]


def _store(folder: Path, count: int) -> Path:
    """The store at ``folder/store`` (written once), read through so it is cached."""
    from datarax.pipeline import write_documents

    store = folder / "store"
    if not (store / "manifest.json").exists():
        rng = np.random.default_rng(0)
        lengths = document_lengths(count, 2048)
        write_documents([rng.integers(0, 50_257, n) for n in lengths], store, replace=True)
    for path in store.glob("*.bin"):
        path.read_bytes()
    return store


def read(store: Path, way: str, reads: int) -> dict[str, Any]:
    """The `reads` random documents of the store's first shard read `way`, timed."""
    from datarax.pipeline import Documents

    pair = Documents(store)._backend.parts[0]
    lengths, pointers = np.asarray(pair.lengths), np.asarray(pair._mapped()[1])
    chosen = np.random.default_rng(0).integers(0, len(lengths), reads)
    spans = list(zip((pointers[chosen]).tolist(), (lengths[chosen]).tolist(), strict=True))
    itemsize = pair.dtype.itemsize
    with open(pair.bin_path, "rb") as file:
        if way == "map":
            tokens = np.frombuffer(mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ), pair.dtype)
            start = time.perf_counter()
            for pointer, length in spans:
                tokens[pointer // itemsize : pointer // itemsize + length].astype(np.int32)
        else:
            start = time.perf_counter()
            for pointer, length in spans:
                data = os.pread(file.fileno(), length * itemsize, pointer)
                np.frombuffer(data, pair.dtype).astype(np.int32)
        seconds = time.perf_counter() - start
    tokens_read = int(sum(length for _, length in spans))
    return {
        "way": way,
        "reads": reads,
        "tokens": tokens_read,
        "s": seconds,
        "tokens_per_s": tokens_read / seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--data", type=Path, default=Path("/tmp/datarax-document-reads"))
    parser.add_argument("--documents", type=int, default=60_000)
    parser.add_argument("--reads", type=int, default=20_000)
    parser.add_argument("--label")
    parser.add_argument("--way", choices=["map", "pread"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.way:
        print(json.dumps(read(args.data / "store", args.way, args.reads)))
        return
    _store(args.data, args.documents)
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    runs = []
    for way in ("map", "pread", "map", "pread"):
        command = [sys.executable, "-m", "benchmarks.document_reads", *sys.argv[1:], "--way", way]
        done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(runs[-1], flush=True)
    label = args.label or ("two_core" if usable_cores() == 2 else f"{usable_cores()}_core")
    mean = {
        way: float(np.mean([run["tokens_per_s"] for run in runs if run["way"] == way]))
        for way in ("map", "pread")
    }
    results = {
        "command": " ".join(["python -m benchmarks.document_reads", *sys.argv[1:]]),
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "runs": runs,
        "tokens_per_s": mean,
        "pread_over_map": mean["pread"] / mean["map"],
    }
    write_json(args.out / f"document_reads_{label}.json", results)
    print(json.dumps(results["tokens_per_s"]), f"pread / map: {results['pread_over_map']:.1f}")


if __name__ == "__main__":
    main()

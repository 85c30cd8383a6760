"""Packed tokens a second from a corpus larger than the row-group cache, read cold: ours
from the token store (shuffled and in order) and from the same Parquet, against Grain's
streaming Parquet reader and Grain over ArrayRecord with its global shuffle, side by
side in one run; the bytes each reads a token, its memory, and the time to write each
format.

The corpus (`benchmarks._store_data`, which writes and times every format): by default
230,000 documents, lengths log-normal around half a row of 2,048 tokens (about 282
million tokens: 1.13 GB as int32, 4.2 times the 256 MiB of decoded row groups a process
of ours keeps), ids uniform below 50,257; as ``--files`` Parquet files of ``--group-docs``
documents a row group (1,000: about 5 MB decoded, a group far smaller than the 100 MB
uncompressed that Hugging Face ``datasets`` 5 aims at, ``datasets.config.
MAX_ROW_GROUP_SIZE``, the kinder case for a shuffled read; pyarrow's own default, up to
1,048,576 rows, its ``write_table`` docstring, would make each file one group larger than
the cache), the token store written from them (`write_documents`, its defaults;
``--write-rounds`` times, 2 by default, each after a read of the Parquet in order, the
reference it is held against: their means count), and as many ArrayRecord files
(Grain's ``group_size:1``). In ``--data DIR`` (kept and
reused by a later run: its ``data.json`` records what was written and timed, and
``--rewrite`` writes the store and the ArrayRecord files again), else a temporary folder.
Before the candidates, the first ``Packed`` over the store of each way they pack it
computes and saves its plan (timed), so each candidate only maps one.

Candidates (`benchmarks._store_run` builds, times and measures each; workers 0 and
``--workers N``, the usable cores by default; ours ``Pipeline(workers=N)``, Grain
``mp_prefetch(MultiprocessingOptions(num_workers=N))``):

- ``ours-store concat in-order``: ``Packed(store, L, method="concat")``,
  ``Pipeline(shuffle=False)``: the store read front to back;
- ``ours-store concat shuffled`` and ``ours-store first_fit shuffled``: ``Packed(store,
  L, method=..., rngs=nnx.Rngs(0))``, ``Pipeline(shuffle=True, rngs=nnx.Rngs(0))``;
- ``ours-parquet first_fit shuffled``: the same over ``Documents(parquet_files)`` (a
  shuffled read decodes a whole row group for most documents: ``--parquet-batches``
  batches timed, 50 by default, as it is slow);
- ``grain-streamed first_fit|concat in-order``: Grain's own Parquet reader
  (``grain.experimental.ParquetIterDataset``), which streams each file's row groups in
  order, files interleaved, and has no global shuffle;
- ``grain-arrayrecord first_fit|concat shuffled``: ``MapDataset.source(
  ArrayRecordDataSource(files)).shuffle(seed=0)``, as Grain's documentation writes it.

Each runs in a process of its own, once per round, in an order shuffled anew each round
(``--rounds``). Before each, every file of every format is dropped from the page cache
(`benchmarks._page_cache`), so each candidate reads its corpus from the disk, as a
corpus far larger than memory is read; no file is dropped while a candidate runs. The
clock (`benchmarks._store_run`): the first batch timed apart, then the next
``--batches`` batches (500 of 32 rows of 2,048 tokens: 33 million token slots, an
eighth of the corpus) timed together, so read-ahead is inside the timed part; tokens a
second are the non-padding tokens of those over their seconds, a mean over the rounds.
Reads: the candidate process tree's ``read_bytes`` (``/proc/self/io``, its workers
reaped) over the tokens it delivered, and, measured here after it exits, the bytes of
its data files now in the page cache (``mincore``): every byte of them read from the
disk, each page once (a page read twice is read once here, where the corpus fits in
memory). Memory: its own peak RSS (``VmHWM``), its tree's (sampled here every 0.2 s; a
tree over ``--rss-limit-gb`` or a run over ``--timeout-s`` is killed and recorded as
failed), and its ``RssAnon`` and ``RssFile`` at the last batch (mapped files count in
RSS but are page cache). Targets and ratios: `benchmarks._store_summary`.

    python -m benchmarks.store --out DIR [--label NAME] [--data DIR] [--rewrite]
        [--documents N] [--length L] [--batch-size B] [--batches N] [--parquet-batches N]
        [--workers N] [--rounds R] [--files F] [--group-docs G]
        [--documents-per-shard S] [--write-rounds W] [--timeout-s S] [--rss-limit-gb G]
        [--tiny]

writes ``DIR/store_<label>.json`` (``two_core`` on 2 usable cores, else ``<cores>_core``),
rewritten after every candidate's run so that a run cut short keeps what it measured,
with the machine, the disk, the versions, the load, the git commit (and the files changed
since) and this command line. ``--tiny``
(3,000 documents, rows of 256, batches of 8, 20 batches timed, workers 0 and 1, 1 round)
is seconds a candidate, for the tests; its corpus is no larger than the cache.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._host_work import shuffled_rounds, write_json
from benchmarks._packing_data import MAX_ROWS_A_DOCUMENT
from benchmarks._page_cache import cached_bytes, drop
from benchmarks._store_data import Corpus, prepare
from benchmarks._store_summary import print_results, summarize
from benchmarks.packing import ROOT, _tree_rss, machine, parse

LOADS = (  # (loader, method, order)
    ("ours-store", "concat", "in-order"),
    ("ours-store", "concat", "shuffled"),
    ("ours-store", "first_fit", "shuffled"),
    ("ours-parquet", "first_fit", "shuffled"),
    ("grain-streamed", "first_fit", "in-order"),
    ("grain-streamed", "concat", "in-order"),
    ("grain-arrayrecord", "first_fit", "shuffled"),
    ("grain-arrayrecord", "concat", "shuffled"),
)
ROW_GROUP_CACHE = 256 << 20  # decoded row groups `Documents` keeps a process


@dataclasses.dataclass(frozen=True)
class Settings:
    documents: int = 230_000
    length: int = 2048
    batch_size: int = 32
    batches: int = 500
    parquet_batches: int = 50
    workers: int = 2
    rounds: int = 2
    files: int = 4
    group_docs: int = 1000
    documents_per_shard: int = 0  # 0: write_documents' default
    write_rounds: int = 2
    timeout_s: float = 600.0


TINY = Settings(3000, 256, 8, 20, 10, 1, 1, 2, 100, 0, 1, 180.0)


def candidates(workers: int) -> dict[str, dict[str, Any]]:
    """Every candidate's name and what distinguishes it."""
    return {
        f"{loader} {method} {order} workers={count}": {
            "loader": loader,
            "method": method,
            "order": order,
            "workers": count,
        }
        for loader, method, order in LOADS
        for count in sorted({0, workers})
    }


def run_candidate(
    spec: dict[str, Any],
    reads: list[str],
    every_file: list[str],
    limit_bytes: int,
    timeout_s: float,
) -> dict[str, Any]:
    """`spec` measured by `benchmarks._store_run` in a new process session, every file of
    `every_file` dropped from the page cache first; its tree's RSS watched (killed, the
    whole session, past `limit_bytes` or `timeout_s`); then the bytes of `reads` (its
    data files) in the page cache."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "benchmarks._store_run", json.dumps(spec)]
    drop(every_file)
    cached_before = cached_bytes(reads)
    peak, killed, start = 0, None, time.perf_counter()
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        child = subprocess.Popen(command, stdout=out, stderr=err, env=env, start_new_session=True)
        while child.poll() is None:
            peak = max(peak, _tree_rss(child.pid))
            if peak > limit_bytes or time.perf_counter() - start > timeout_s:
                killed = "rss limit" if peak > limit_bytes else "timeout"
                break
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):  # what it left running, or all of it
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        out.seek(0)
        err.seek(0)
        lines, errors = out.read().strip().splitlines(), err.read()
    data_read = cached_bytes(reads) - cached_before
    ran = {
        "process_s": time.perf_counter() - start,
        "peak_tree_rss_mb": peak / 2**20,
        "cached_before_bytes": cached_before,
        "data_read_bytes": data_read,
    }
    if killed is not None:
        return ran | {"error": f"killed: {killed} (tree RSS {peak / 2**30:.1f} GiB)"}
    if child.returncode != 0 or not lines:
        return ran | {"error": f"exit {child.returncode}: {errors[-2000:]}"}
    run = ran | json.loads(lines[-1])
    run["data_read_bytes_per_token"] = data_read / run["tokens"] if run["tokens"] else 0.0
    return run


def _disk(path: Path) -> dict[str, Any]:
    """The block device under `path`: its name, whether it spins, its read-ahead."""
    found: dict[str, Any] = {"path": str(path)}
    with contextlib.suppress(OSError, ValueError):
        device = os.stat(path).st_dev
        block = Path(f"/sys/dev/block/{os.major(device)}:{os.minor(device)}").resolve()
        if (block / "partition").exists():
            block = block.parent
        found["device"] = block.name
        for name in ("rotational", "read_ahead_kb"):
            found[name] = int((block / "queue" / name).read_text())
    return found


def _git() -> dict[str, Any]:
    """The commit the library was measured at, and the files changed since (uncommitted)."""
    found: dict[str, Any] = {}
    with contextlib.suppress(OSError, subprocess.CalledProcessError):
        run = {"cwd": ROOT, "capture_output": True, "text": True, "check": True}
        found["commit"] = subprocess.run(["git", "rev-parse", "HEAD"], **run).stdout.strip()
        status = subprocess.run(["git", "status", "--porcelain"], **run).stdout.splitlines()
        found["changed"] = [line[3:] for line in status]
    return found


def _corpus_figures(corpus: Corpus, length: int) -> dict[str, Any]:
    from datarax.pipeline import Documents

    lengths = np.asarray(Documents(corpus.store, cache_dir=corpus.index).lengths, np.int64)
    tokens = int(lengths.sum())
    return {
        "folder": str(corpus.folder),
        "documents": len(lengths),
        "tokens": tokens,
        "int32_bytes": 4 * tokens,
        "times_the_row_group_cache": 4 * tokens / ROW_GROUP_CACHE,
        "longer_than_a_row": float(np.mean(lengths > length)),
        "max_pieces": max(1, -(-int(lengths.max()) // length)),
    }


def store(
    settings: Settings,
    out: Path,
    data: Path | None,
    limit_gb: float,
    rewrite: bool,
    command: str,
) -> dict[str, Any]:
    """The whole run: the corpus, every candidate by rounds, the summary."""
    about = machine()
    limit = int(min(limit_gb * 1e9, 0.75 * about["memory_gb"] * 1e9))
    about["versions"]["array_record"] = importlib.metadata.version("array_record")
    results: dict[str, Any] = {
        "command": command,
        "settings": dataclasses.asdict(settings),
        "rss_limit_gb": limit / 1e9,
        **about,
        "git": _git(),
        "partial": True,
    }
    wanted = {
        "documents": settings.documents,
        "length": settings.length,
        "files": settings.files,
        "group_docs": settings.group_docs,
        "documents_per_shard": settings.documents_per_shard or None,
    }
    with tempfile.TemporaryDirectory(prefix="store_") as temporary:
        folder = Path(temporary) / "corpus" if data is None else data
        corpus, steps = prepare(folder, wanted, rewrite=rewrite, write_rounds=settings.write_rounds)
        figures = _corpus_figures(corpus, settings.length)
        results["data"] = {"corpus": figures, **steps}
        results["disk"] = _disk(folder)
        print(f"corpus: {json.dumps(figures)}", flush=True)
        tokens_a_batch = settings.batch_size * settings.length
        base = {
            "store": corpus.store,
            "cache_dir": corpus.index,
            "length": settings.length,
            "batch_size": settings.batch_size,
            "epochs": 1 + (settings.batches + 1) * tokens_a_batch // figures["tokens"],
            "max_pieces": min(figures["max_pieces"], MAX_ROWS_A_DOCUMENT),
        }
        chosen = candidates(settings.workers)
        results["candidates"] = chosen
        results["runs"] = {name: [] for name in chosen}
        for round_, name in shuffled_rounds(list(chosen), settings.rounds):
            what = chosen[name]
            loader = what["loader"]
            files = corpus.array_record if loader == "grain-arrayrecord" else corpus.parquet
            slow = loader == "ours-parquet"
            spec = base | what | {"files": files}
            spec["batches"] = settings.parquet_batches if slow else settings.batches
            load = os.getloadavg()[0]
            # Every file there is now: a candidate may write (a plan, an index) for the next.
            every_file = corpus.every_file()
            run = run_candidate(
                spec, corpus.files_of(loader), every_file, limit, settings.timeout_s
            )
            run["load_average_1m"] = load
            results["runs"][name].append(run)
            print(f"  round {round_}: {name}: {_line(run)}", flush=True)
            write_json(out, results)
    results |= summarize(results)
    results |= {"partial": False, "load_average_after": os.getloadavg()}
    return results


def _line(run: dict[str, Any]) -> str:
    if "error" in run:
        return f"failed: {run['error'].splitlines()[0] if run['error'] else ''}"
    return (
        f"{run['tokens_per_s'] / 1e6:.2f} M tokens/s, fill {run['fill']:.3f}, first batch "
        f"{run['first_batch_s']:.2f} s, {run['timed_batches']} batches timed, read "
        f"{run['read_bytes_per_token']:.2f} B/token (data files "
        f"{run['data_read_bytes_per_token']:.2f}), peak RSS {run['peak_rss_mb']:.0f} MB "
        f"(tree {run['peak_tree_rss_mb']:.0f} MB), RssAnon {run.get('rss_anon_mb', 0):.0f} "
        f"MB, RssFile {run.get('rss_file_mb', 0):.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, help="where the corpus is (or goes), kept")
    parser.add_argument("--rewrite", action="store_true", help="write the store again")
    args, settings, out = parse(parser, "store", TINY)
    command = " ".join(["python -m benchmarks.store", *sys.argv[1:]])
    results = store(settings, out, args.data, args.rss_limit_gb, args.rewrite, command)
    print_results(results)
    write_json(out, results)
    print("wrote", out)


if __name__ == "__main__":
    main()

"""Packed tokens a second: `Pipeline` over `Packed(Documents(...))` against Grain's own
packing, over the same Parquet documents, side by side in one run.

The data: ``--documents`` token documents (int32 ids), their lengths log-normal with a
median of half a row (sigma 0.6: about 12% are longer than a row; at most 8 rows),
written as ``--files`` Parquet files of ``--group-docs`` documents a row group (pyarrow's
defaults otherwise: Snappy), into a temporary folder or ``--data DIR`` (kept; a DIR that
already holds ``*.parquet`` files is used as it is). Their index (`Documents`' lengths)
is built once here and cached for the candidates.

Candidates (`benchmarks._packing_run` builds and times each; ``--workers N``):

- ``ours first_fit|concat workers=0|N``: ``Pipeline(source=Packed(Documents(files),
  length, method=...), batch_size=B, shuffle=True, rngs=nnx.Rngs(0), workers=...)``;
- ``grain-shuffled first_fit|concat workers=0|N``: Grain as its docs write a pipeline
  over a random-access source, ``MapDataset.source(rows).shuffle(seed=0).repeat(E)
  .to_iter_dataset()``, then ``FirstFitPackIterDataset`` (``num_packing_bins=B``) or
  ``ConcatThenSplitIterDataset``, ``.batch(B)``, and ``.mp_prefetch(
  MultiprocessingOptions(num_workers=N))`` for N > 0; its defaults elsewhere. The rows
  come from a pyarrow-backed source that reads the same files as `Documents` reads
  them: by row group, decoded groups kept up to 256 MiB a process;
- ``grain-streamed ...``: the same over ``grain.experimental.ParquetIterDataset(files)``,
  Grain's own Parquet reader, which streams each file's row groups in order (16 files
  interleaved) and has no global shuffle: a reference, not a target;
- ``ours-cold first_fit workers=0``: ours with the decoded row groups dropped after
  every batch, as a corpus far beyond the 256 MiB a process would leave them: every
  batch decodes each row group it touches. A reference too.

Each candidate runs in a process of its own (memory and read-ahead do not carry over),
once per round, in an order shuffled anew each round, ``--rounds`` rounds. Its clock
(`benchmarks._packing_run`; modules imported before it starts): the first batch's
seconds, then every later batch of ``--epochs`` epochs timed together, so whatever a
loader read ahead is inside the timed part; tokens a second are the non-padding tokens
of those batches over their seconds (a mean rate, not a median). The fill is
non-padding tokens over token slots of every batch delivered. Peak RSS: the
candidate's own process (``VmHWM``) and its whole process tree, sampled every 0.2 s
here; a tree over ``--rss-limit-gb`` (20, at most 3/4 of the machine's memory) or a
run over ``--timeout-s`` is killed and recorded as failed.

Planning, after the candidates: ``make_plan`` each way (what `Packed`
runs) on ``--plan-documents`` (10,000,000) lengths of the same distribution in a random
order, timed in this process, no file involved.

Figures: a candidate's tokens a second are the mean over its rounds. Ratios: ours at
its best worker count over Grain's best of the same method, per Grain source. Targets
(against ``grain-shuffled``): >= 1 on up to 4 usable cores, >= 1.5 on more (the TPU
host); our first-fit fill >= Grain's best first-fit fill; planning < 10 s each way.

Duration with the defaults (6,000 documents, rows of 2,048 tokens, batches of 32,
workers 0 and the usable cores, 2 epochs, 2 rounds): about 4 minutes on 2 cores shared
with other work (load 4 to 6), 13 runs a round of 3 to 21 s each; 3 rounds took 5 m 48 s.

    python -m benchmarks.packing --out DIR [--label NAME] [--documents N] [--length L]
        [--batch-size B] [--workers N] [--epochs E] [--rounds R] [--files F]
        [--group-docs G] [--plan-documents P] [--timeout-s S] [--rss-limit-gb G]
        [--data DIR] [--tiny]

writes ``DIR/packing_<label>.json`` (``two_core`` on 2 usable cores, else
``<cores>_core``), rewritten after every candidate's run so that a run cut short keeps
what it measured, with the machine, the versions, the load and this command line.
``--tiny`` is a few seconds of work a candidate (400 documents, rows of 256, batches of
8, 1 worker, 1 round) for the tests.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks._host_work import shuffled_rounds, usable_cores, write_json
from benchmarks._packing_data import document_lengths, time_plans, write_documents
from benchmarks._packing_summary import print_results, summarize
from datarax._syscompat import proc_pids, proc_resident_pages, proc_stat

LOADERS = ("ours", "grain-shuffled", "grain-streamed")
COLD = "ours-cold"  # ours with no decoded row group kept from one batch to the next
METHODS = ("first_fit", "concat")
ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class Settings:
    documents: int = 6000
    length: int = 2048
    batch_size: int = 32
    workers: int = 2
    epochs: int = 2
    rounds: int = 2
    files: int = 24
    group_docs: int = 128
    plan_documents: int = 10_000_000
    timeout_s: float = 600.0


TINY = Settings(400, 256, 8, 1, 2, 1, 4, 16, 100_000, 180.0)


def candidates(workers: int) -> dict[str, dict[str, Any]]:
    """Every candidate's name and what distinguishes it."""
    chosen = {
        f"{loader} {method} workers={count}": {
            "loader": loader,
            "method": method,
            "workers": count,
        }
        for loader in LOADERS
        for method in METHODS
        for count in sorted({0, workers})
    }
    chosen[f"{COLD} first_fit workers=0"] = {"loader": COLD, "method": "first_fit", "workers": 0}
    return chosen


def _tree(pid: int) -> set[int]:
    """`pid` and every process below it, found by their parents in ``/proc/PID/stat``
    (which gVisor shows too, unlike ``/proc/PID/task/TID/children``)."""
    parents = {other: stat.parent for other in proc_pids() if (stat := proc_stat(other))}
    members, grew = {pid}, True
    while grew:
        below = {other for other, parent in parents.items() if parent in members}
        grew = not below <= members
        members |= below
    return members


def _tree_rss(pid: int) -> int:
    pages = (proc_resident_pages(member) for member in _tree(pid))
    return sum(count for count in pages if count) * os.sysconf("SC_PAGE_SIZE")


def run_candidate(spec: dict[str, Any], limit_bytes: int, timeout_s: float) -> dict[str, Any]:
    """`spec` measured by `benchmarks._packing_run` in a new process session, its tree's
    RSS watched; killed (the whole session) past `limit_bytes` or `timeout_s`."""
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "benchmarks._packing_run", json.dumps(spec)]
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
    ran = {"process_s": time.perf_counter() - start, "peak_tree_rss_mb": peak / 2**20}
    if killed is not None:
        return ran | {"error": f"killed: {killed} (tree RSS {peak / 2**30:.1f} GiB)"}
    if child.returncode != 0 or not lines:
        return ran | {"error": f"exit {child.returncode}: {errors[-2000:]}"}
    return ran | json.loads(lines[-1])


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {}
    for name in ("jax", "jaxlib", "flax", "grain", "numpy", "pyarrow"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def machine() -> dict[str, Any]:
    """What the run was measured on."""
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return {
        "cores": os.cpu_count(),
        "usable_cores": usable_cores(),
        "memory_gb": memory / 1e9,
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": _versions(),
        "load_average_before": os.getloadavg(),
    }


def _data(settings: Settings, data: Path | None, folder: Path) -> tuple[list[str], dict]:
    """The Parquet files: `data`'s own when it holds some, else written there or in
    `folder`; and what was written (or found)."""
    target = folder / "documents" if data is None else data
    found = sorted(str(path) for path in target.glob("*.parquet"))
    if found:
        return found, {"written": False, "folder": str(target), "files": len(found)}
    start = time.perf_counter()
    lengths = document_lengths(settings.documents, settings.length)
    paths = write_documents(target, lengths, settings.files, settings.group_docs)
    return paths, {
        "written": True,
        "folder": str(target),
        "files": len(paths),
        "group_docs": settings.group_docs,
        "written_s": time.perf_counter() - start,
        "mb": sum(os.path.getsize(path) for path in paths) / 1e6,
    }


def packing(
    settings: Settings, out: Path, data: Path | None, limit_gb: float, command: str
) -> dict[str, Any]:
    """The whole run: data, index, planning, every candidate by rounds, the summary."""
    from datarax.pipeline import Documents, Packed

    limit = int(min(limit_gb * 1e9, 0.75 * machine()["memory_gb"] * 1e9))
    results: dict[str, Any] = {
        "command": command,
        "settings": dataclasses.asdict(settings),
        "rss_limit_gb": limit / 1e9,
        **machine(),
        "partial": True,
    }
    with tempfile.TemporaryDirectory(prefix="packing_") as folder:
        files, results["data"] = _data(settings, data, Path(folder))
        cache_dir = os.path.join(folder, "index")
        start = time.perf_counter()
        documents = Documents(files, cache_dir=cache_dir)
        lengths = documents.lengths
        results["data"] |= {
            "documents": len(documents),
            "tokens": int(lengths.sum()),
            "longer_than_a_row": float(np.mean(lengths > settings.length)),
            "index_s": time.perf_counter() - start,
            "plan_fill": {m: Packed(documents, settings.length, method=m).fill for m in METHODS},
        }
        del documents
        base = {
            "files": files,
            "cache_dir": cache_dir,
            "length": settings.length,
            "batch_size": settings.batch_size,
            "epochs": settings.epochs,
            "max_pieces": max(1, -(-int(lengths.max()) // settings.length)),
        }
        chosen = candidates(settings.workers)
        results["candidates"] = chosen
        results["runs"] = {name: [] for name in chosen}
        for round_, name in shuffled_rounds(list(chosen), settings.rounds):
            load = os.getloadavg()[0]
            run = run_candidate(base | chosen[name], limit, settings.timeout_s)
            run["load_average_1m"] = load
            results["runs"][name].append(run)
            print(f"  round {round_}: {name}: {_line(run)}", flush=True)
            write_json(out, results)
    # After the candidates, so that the memory it takes here is no candidate's.
    results["planning"] = time_plans(settings.plan_documents, settings.length)
    results |= summarize(results)
    results |= {"partial": False, "load_average_after": os.getloadavg()}
    return results


def _line(run: dict[str, Any]) -> str:
    if "error" in run:
        return f"failed: {run['error'].splitlines()[0] if run['error'] else ''}"
    return (
        f"{run['tokens_per_s'] / 1e6:.2f} M tokens/s, fill {run['fill']:.3f}, "
        f"first batch {run['first_batch_s']:.2f} s, {run['timed_batches']} batches timed, "
        f"peak RSS {run['peak_rss_mb']:.0f} MB (tree {run['peak_tree_rss_mb']:.0f} MB)"
    )


def parse(parser: argparse.ArgumentParser, name: str, tiny: Any) -> tuple[Any, Any, Path]:
    """Adds ``--out``, ``--label``, a flag for each field of `tiny`'s settings class,
    ``--rss-limit-gb`` and ``--tiny`` to `parser`, parses the command line and prints the
    load average; returns the arguments, the settings (the class's defaults, or `tiny`'s
    with ``--tiny``, then the flags given; workers: this host's usable cores unless given
    or tiny) and the JSON file, ``<name>_<label>.json`` in ``--out``."""
    parser.add_argument("--out", type=Path, required=True, help="folder of the JSON file")
    parser.add_argument("--label", help=f"the file's name: {name}_<label>.json")
    fields = dataclasses.fields(tiny)
    for field in fields:
        flag = "--" + field.name.replace("_", "-")
        parser.add_argument(flag, type=type(field.default), help=f"default {field.default}")
    parser.add_argument("--rss-limit-gb", type=float, default=20.0)
    parser.add_argument("--tiny", action="store_true", help="seconds of work, for a test")
    args = parser.parse_args()
    given = {f.name: getattr(args, f.name) for f in fields if getattr(args, f.name) is not None}
    settings = dataclasses.replace(tiny if args.tiny else type(tiny)(), **given)
    if "workers" not in given and not args.tiny:
        settings = dataclasses.replace(settings, workers=usable_cores())
    label = args.label or ("two_core" if usable_cores() == 2 else f"{usable_cores()}_core")
    print("load average before:", os.getloadavg(), "cores:", os.cpu_count(), flush=True)
    return args, settings, args.out / f"{name}_{label}.json"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--data", type=Path, help="where the Parquet files are (or go)")
    args, settings, out = parse(parser, "packing", TINY)
    command = " ".join(["python -m benchmarks.packing", *sys.argv[1:]])
    results = packing(settings, out, args.data, args.rss_limit_gb, command)
    print_results(results)
    write_json(out, results)
    print("wrote", out)


if __name__ == "__main__":
    main()

"""Every tutorial, run top to bottom on this machine as it is: passed, seconds, and what
used the accelerator.

For a machine with a real accelerator (a TPU VM, say) where no kernel can be started:
no network, not even sockets on the loopback. Each notebook's code cells run in order in
an IPython shell (what a Jupyter kernel runs, without the kernel's sockets) in a process
of its own, one notebook after another (one program at a time may hold a TPU), in a
scratch copy of tutorials/. A cell appended to each notebook reports the accelerator's
peak memory in use, so "what used the chip" is read off the chip, not assumed. A notebook
whose code calls ``launch_local`` starts a local cluster, which needs sockets on the
loopback: where this machine cannot open one, it is recorded as not run, with that reason.
Needs only IPython beside the library's own dependencies::

    PYTHONPATH=. python3 -m benchmarks.notebooks_on_device [--out docs/benchmarks] [NOTEBOOK ...]

Writes ``notebooks_<platform>.json`` and ``.md`` to ``--out`` after every notebook.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_MARK = "NOTEBOOK_RESULT "
_REPORT = """
import json as _json
import jax as _jax
from datarax.distributed import accelerator_devices as _accelerators
_chips = _accelerators()
_stats = [chip.memory_stats() or {} for chip in _chips]
_chip_use = {
    "default_backend": _jax.default_backend(),
    "devices": _jax.device_count(),
    "chips": [str(chip) for chip in _chips],
    "peak_mb": [round(s.get("peak_bytes_in_use", 0) / 1e6, 1) for s in _stats],
    "allocations": [s.get("num_allocs", 0) for s in _stats],
}
"""


def _child(path: Path) -> None:
    """Runs the notebook's code cells in this process's IPython shell; prints the result."""
    import matplotlib

    matplotlib.use("Agg")
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    result = dict(_NO_RESULT)
    for number, source in enumerate([*code_cells(path), _REPORT], start=1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            done = shell.run_cell(source, store_history=True)
        if "setup_devices(" in source and not result["setup_message"]:
            result["setup_message"] = printed.getvalue().strip()
        if not done.success:
            failure = done.error_in_exec or done.error_before_exec
            result["error"] = f"{type(failure).__name__}: {failure}"[:300]
            result["failed_code_cell"] = number
            break
    result["chip"] = shell.user_ns.get("_chip_use")
    print(_MARK + json.dumps(result), flush=True)


_NO_RESULT: dict[str, Any] = {"error": None, "failed_code_cell": None, "setup_message": ""}


def loopback_sockets() -> bool:
    """Whether this machine can listen on a TCP socket on 127.0.0.1 (a TPU VM may not)."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("127.0.0.1", 0))
            probe.listen()
    except OSError:
        return False
    return True


def code_cells(path: Path) -> list[str]:
    """The source of each code cell of the notebook at `path`."""
    cells = json.loads(path.read_text())["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]


def needs_sockets(path: Path) -> bool:
    """Whether the notebook starts a local cluster (its code calls ``launch_local``)."""
    return any("launch_local(" in source for source in code_cells(path))


def run_one(path: Path, timeout_s: int) -> dict[str, Any]:
    """Runs one notebook in a scratch copy of tutorials/, in a process of its own."""
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch) / "tutorials"
        shutil.copytree(path.parent, folder)
        command = [sys.executable, "-m", "benchmarks.notebooks_on_device", "--child", path.name]
        paths = [str(REPO), *filter(None, [os.environ.get("PYTHONPATH")])]  # no empty entry
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
        start = time.perf_counter()
        try:
            done = subprocess.run(
                command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout_s
            )
            output, tail = done.stdout, done.stderr[-300:]
        except subprocess.TimeoutExpired as expired:
            output, tail = str(expired.stdout or ""), f"timed out after {timeout_s} s"
        seconds = time.perf_counter() - start
    line = next((row for row in output.splitlines() if row.startswith(_MARK)), None)
    result = json.loads(line[len(_MARK) :]) if line else {"error": tail or "no result"}
    result = {**_NO_RESULT, "chip": None, **result}
    return {
        "notebook": path.name,
        "passed": result["error"] is None,
        "seconds": round(seconds, 1),
    } | result


def not_run(path: Path, why: str) -> dict[str, Any]:
    """The row of a notebook that was not run, saying why."""
    return {
        "notebook": path.name,
        "passed": None,
        "seconds": 0.0,
        **_NO_RESULT,
        "chip": None,
        "not_run": why,
    }


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| notebook | passed | seconds | peak MB on the chip | the set-up's first sentence |",
        "| --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        chip = row["chip"] or {}
        peak = ", ".join(str(mb) for mb in chip.get("peak_mb", [])) or "-"
        if row.get("not_run"):
            passed = f"not run: {row['not_run']}"
        elif row["passed"]:
            passed = "yes"
        else:
            passed = f"no: code cell {row.get('failed_code_cell') or '-'}: {row.get('error')}"
        message = (
            (row.get("setup_message") or "").split(". ")[0].replace("\n", " ").replace("|", "/")
        )
        lines.append(f"| {row['notebook']} | {passed} | {row['seconds']} | {peak} | {message} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/benchmarks"))
    parser.add_argument("--timeout", type=int, default=300, help="seconds per notebook")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child)
        return
    paths = args.notebooks or sorted((REPO / "tutorials").glob("[0-9][0-9]_*.ipynb"))
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        parser.error(f"no notebook at {', '.join(missing)}: give paths to .ipynb files")
    sockets = loopback_sockets()
    args.out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    for path in paths:
        if not sockets and needs_sockets(path):
            why = "starts a local cluster (launch_local), and this machine has no loopback sockets"
            rows.append(not_run(path, why))
        else:
            rows.append(run_one(path, args.timeout))
        print(json.dumps(rows[-1]), flush=True)
        platform = next((r["chip"]["chips"] for r in rows if r["chip"] and r["chip"]["chips"]), [])
        stem = "notebooks_tpu" if any("TPU" in chip for chip in platform) else "notebooks_cpu"
        (args.out / f"{stem}.json").write_text(json.dumps(rows, indent=1) + "\n")
        (args.out / f"{stem}.md").write_text(markdown(rows))


if __name__ == "__main__":
    main()

"""``make device-check``: the tests, the device set-up and host-to-device copies, on this machine.

Written for a machine with one NVIDIA GPU and no network, where jax (with CUDA),
flax, CuPy and pytest are installed and nothing else can be: it needs no venv, only
that machine's ``python3`` run from the repository root. Three steps, each in a
process of its own, so a step that crashes or hangs is reported and the next runs:

1. ``ArraySharder.shard`` of one 256 x 224 x 224 x 3 uint8 batch onto the first
   device, with a ``NamedSharding`` over a 1-device mesh and with a
   ``SingleDeviceSharding``, against ``jax.device_put`` of the same batch and
   against the physical limit: CuPy copying the same bytes from pinned host memory,
   and from ordinary (pageable) numpy memory. Interleaved rounds, medians.
2. ``datarax.distributed.setup_devices(8)`` on the runtime as it is (no
   ``JAX_PLATFORMS=cpu``): the plan it chooses.
3. The unit tests on 8 simulated CPU devices; test modules that cannot be collected
   because a module is missing (grain or hypothesis, say) are listed as not run.

Without a GPU or without CuPy it still runs, measures the devices JAX has, and says
which parts were not available. ``device.json`` and ``device.md`` are rewritten
after every step, so a run cut short still leaves what it measured::

    PYTHONPATH=. python3 -m benchmarks.device_check [--out docs/benchmarks]
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from benchmarks._device_report import markdown, summarize_junit

REPO = Path(__file__).resolve().parents[1]
_MARK = "DEVICE_CHECK_JSON "
_PACKAGES = ("jax", "jaxlib", "flax", "numpy", "orbax-checkpoint", "pytest", "hypothesis", "grain")
PINNED, PAGEABLE = "CuPy copy from pinned memory", "CuPy copy from pageable memory"
_SHARDINGS = ("NamedSharding", "SingleDeviceSharding")


def _cupy_copies(image: Any) -> tuple[dict[str, Callable[[], None]], str | None]:
    """CuPy host-to-device copies of `image`'s bytes, or why there are none."""
    try:
        import cupy  # type: ignore[import-not-found]
        import cupyx  # type: ignore[import-not-found]

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return {}, "CuPy finds no CUDA device"
        pinned = cupyx.empty_pinned(image.shape, image.dtype)
        pinned[...] = image
        target = cupy.empty(image.shape, image.dtype)
        for source in (pinned, image):  # one trial copy from each, checked
            target.set(source)
            if not (cupy.asnumpy(target[-1]) == image[-1]).all():
                return {}, "CuPy's trial copy did not reproduce the batch"
    except Exception as error:  # ImportError, or a CUDA runtime without a device
        return {}, f"CuPy cannot copy here ({type(error).__name__}: {error})"

    def copy_from(source: Any) -> Callable[[], None]:
        def copy() -> None:
            target.set(source)
            cupy.cuda.get_current_stream().synchronize()

        return copy

    return {PINNED: copy_from(pinned), PAGEABLE: copy_from(image)}, None


def measure(rows: int = 256, side: int = 224, rounds: int = 100) -> dict[str, Any]:
    """Times placing one uint8 image batch on the first device, against copies of its bytes.

    Args:
        rows: images in the batch.
        side: height and width of each image (3 channels).
        rounds: interleaved rounds; every candidate runs once per round.

    Returns:
        The device, median milliseconds and GB/s per candidate, the medians of
        per-round ratios, and a sentence for each part that could not run here.
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from benchmarks._timing import interleaved, medians, paired_ratio
    from benchmarks.placement import image_batch
    from datarax._compat import single_device_sharding
    from datarax.sharding import ArraySharder

    device = jax.devices()[0]
    batch = {"image": image_batch(rows, side)["image"]}
    shardings = {
        "NamedSharding": NamedSharding(Mesh(np.array([device]), ("data",)), P("data")),
        "SingleDeviceSharding": single_device_sharding(device),
    }
    sharder = ArraySharder()
    candidates: dict[str, Callable[[], Any]] = {}
    for name, sharding in shardings.items():
        candidates[f"ArraySharder.shard, {name}"] = lambda s=sharding: sharder.shard(batch, s)
        candidates[f"jax.device_put, {name}"] = lambda s=sharding: jax.device_put(batch, s)
    not_available = []
    if device.platform != "gpu":
        not_available.append(
            f"No GPU here: JAX's first device is {device} (platform {device.platform}), "
            "so every figure above is for that device"
        )
    copies, why_not = _cupy_copies(batch["image"])
    candidates.update(copies)
    if why_not:
        not_available.append(f"No pinned or pageable copy: {why_not}")
    times = interleaved(candidates, rounds)
    seconds = medians(times)
    ratios = {}
    for name in _SHARDINGS:
        shard, put = f"ArraySharder.shard, {name}", f"jax.device_put, {name}"
        ratios[f"shard / device_put, {name}"] = paired_ratio(times, shard, put)
        if copies:
            ratios[f"shard / pinned copy, {name}"] = paired_ratio(times, shard, PINNED)
            ratios[f"device_put / pinned copy, {name}"] = paired_ratio(times, put, PINNED)
    if copies:
        ratios["pageable copy / pinned copy"] = paired_ratio(times, PAGEABLE, PINNED)
    nbytes = batch["image"].nbytes
    return {
        "device": {"repr": str(device), "platform": device.platform, "kind": device.device_kind},
        "gpu_available": device.platform == "gpu",
        "pinned_copy_available": bool(copies),
        "cupy": sys.modules["cupy"].__version__ if copies else None,
        "batch": {"shape": list(batch["image"].shape), "dtype": "uint8", "bytes": nbytes},
        "rounds": rounds,
        "median_ms": {name: value * 1e3 for name, value in seconds.items()},
        "gb_per_s": {name: nbytes / value / 1e9 for name, value in seconds.items()},
        "ratios": ratios,
        "not_available": not_available,
    }


def _child_env(simulated_cpu: bool) -> dict[str, str]:
    """This environment with the repository importable and JAX's platform set or left free."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    flags = env.pop("XLA_FLAGS", "").split()
    flags = [flag for flag in flags if not flag.startswith("--xla_force_host_platform")]
    env.pop("JAX_PLATFORMS", None)
    if simulated_cpu:
        env["JAX_PLATFORMS"] = "cpu"
        flags.append("--xla_force_host_platform_device_count=8")
    if flags:
        env["XLA_FLAGS"] = " ".join(flags)
    return env


def _run(command: Sequence[str], env: dict[str, str], timeout_s: float) -> tuple[int | None, str]:
    """Exit code (None after a time-out, which kills the process group) and output."""
    with subprocess.Popen(
        command,
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    ) as process:
        try:
            output = process.communicate(timeout=timeout_s)[0]
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            try:
                return None, process.communicate(timeout=10)[0]
            except subprocess.TimeoutExpired:  # a grandchild in its own session holds the pipe
                return None, ""
    return process.returncode, output


def _json_step(code: str, simulated_cpu: bool, timeout_s: float) -> dict[str, Any]:
    """Runs `code` in a fresh python3; its result is the JSON it prints after the marker."""
    start = time.perf_counter()
    code = f"import json\n{code}\nprint({_MARK!r} + json.dumps(result), flush=True)"
    exit_code, output = _run([sys.executable, "-c", code], _child_env(simulated_cpu), timeout_s)
    seconds = round(time.perf_counter() - start, 1)
    for line in reversed(output.splitlines()):
        if line.startswith(_MARK):
            return {**json.loads(line.removeprefix(_MARK)), "seconds": seconds}
    why = f"timed out after {timeout_s:.0f} s" if exit_code is None else f"exit code {exit_code}"
    return {"error": f"no result ({why})", "output_tail": output[-3000:], "seconds": seconds}


def measure_step(rows: int, side: int, rounds: int, timeout_s: float) -> dict[str, Any]:
    """`measure` in a fresh process that sees the runtime's own devices."""
    code = (
        "from benchmarks.device_check import measure\n"
        f"result = measure(rows={rows}, side={side}, rounds={rounds})"
    )
    return _json_step(code, simulated_cpu=False, timeout_s=timeout_s)


def setup_devices_step(timeout_s: float) -> dict[str, Any]:
    """The plan ``setup_devices(8)`` chooses in a fresh process without JAX_PLATFORMS."""
    code = (
        "import jax\n"
        "from datarax.distributed import setup_devices\n"
        "plan = setup_devices(8)\n"
        "result = {'platform': plan.platform, 'num_devices': plan.num_devices,\n"
        "          'message': plan.message, 'jax_backend': jax.default_backend(),\n"
        "          'jax_device_count': jax.device_count()}"
    )
    return _json_step(code, simulated_cpu=False, timeout_s=timeout_s)


def tests_step(targets: Sequence[str], timeout_s: float) -> dict[str, Any]:
    """Runs pytest on `targets` on 8 simulated CPU devices and summarizes what happened.

    Args:
        targets: paths for pytest, relative to the repository root.
        timeout_s: the run is stopped (its whole process group) after this long.

    Returns:
        The command, exit code (None after a time-out), seconds, pytest's summary
        line and `summarize_junit`'s counts and details.
    """
    with tempfile.TemporaryDirectory() as scratch:
        junit = Path(scratch) / "junit.xml"
        options = ["-q", "-p", "no:cacheprovider", "--continue-on-collection-errors"]
        command = [sys.executable, "-m", "pytest", *targets, *options]
        start = time.perf_counter()
        exit_code, output = _run([*command, f"--junitxml={junit}"], _child_env(True), timeout_s)
        result: dict[str, Any] = {
            "command": " ".join(["python3", *command[1:]]),
            "exit_code": exit_code,
            "timed_out": exit_code is None,
            "seconds": round(time.perf_counter() - start, 1),
            "summary": next((line for line in reversed(output.splitlines()) if line.strip()), ""),
        }
        if junit.exists():
            result.update(summarize_junit(junit.read_text()))
        else:
            result["output_tail"] = output[-3000:]
    return result


def machine() -> dict[str, Any]:
    """When the check started, the Python, the CPU count and the versions of what it tests."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "started_utc": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        "python": platform.python_version(),
        "cpu_cores": os.cpu_count(),
        "versions": versions,
    }


def _succeeded(results: dict[str, Any]) -> bool:
    steps_ok = not any("error" in results[key] for key in ("placement", "setup_devices"))
    tests = results.get("unit_tests", {"timed_out": False, "counts": {"failed": 0}})
    return steps_ok and not tests["timed_out"] and tests.get("counts", {}).get("failed", 1) == 0


def main(argv: Sequence[str] | None = None) -> int:
    """Runs every step, rewriting device.json and device.md under --out after each one."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    default_out = os.environ.get("DEVICE_CHECK_OUT", "docs/benchmarks")
    parser.add_argument("--out", type=Path, default=Path(default_out))
    parser.add_argument("--rows", type=int, default=256)
    parser.add_argument("--side", type=int, default=224)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--skip-tests", action="store_true", help="only steps 1 and 2")
    parser.add_argument(
        "--tests-timeout", type=float, default=300.0, help="seconds (the other steps get 120)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {"machine": machine()}
    steps: list[tuple[str, Callable[[], dict[str, Any]]]] = [
        ("placement", lambda: measure_step(args.rows, args.side, args.rounds, timeout_s=120)),
        ("setup_devices", lambda: setup_devices_step(timeout_s=120)),
    ]
    if not args.skip_tests:
        steps.append(("unit_tests", lambda: tests_step(["tests", "datarax"], args.tests_timeout)))
    for key, run in steps:
        print(f"[{key}] running", flush=True)
        results[key] = run()
        (args.out / "device.json").write_text(json.dumps(results, indent=1) + "\n")
        (args.out / "device.md").write_text(markdown(results))
    print(markdown(results))
    print("wrote", args.out / "device.json", "and", args.out / "device.md")
    return 0 if _succeeded(results) else 1


if __name__ == "__main__":
    sys.exit(main())

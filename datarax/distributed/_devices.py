"""Device set-up for notebooks: real accelerators when there are enough, else
simulated CPU devices.

A lesson about sharding needs several devices. A laptop, a Colab CPU runtime or a
one-chip Colab TPU has fewer, so JAX's CPU backend is split into simulated devices
instead; a runtime with enough accelerators uses them. This must be decided before
JAX starts its backends, which `setup_devices` does.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pkgutil
import subprocess
import sys

import jax

from datarax._compat import backends_started
from datarax.sharding._checks import check_int, check_str

MAX_SIMULATED = 4096  # JAX takes ~2.5 s to start 4096 CPU devices, and minutes for 10^5


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """What `setup_devices` decided: the platform to use and why, in a sentence."""

    platform: str
    num_devices: int
    message: str


def _check_needed(needed: object) -> int:
    return check_int(
        "needed", needed, maximum=MAX_SIMULATED, meaning="how many devices the lesson uses"
    )


def choose_devices(
    accelerator_platform: str | None, accelerator_count: int, needed: int
) -> DevicePlan:
    """Decides between the runtime's accelerators and `needed` simulated CPU devices.

    Example:
        >>> choose_devices("tpu", 1, 8).platform
        'cpu'
        >>> choose_devices("tpu", 8, 8).platform
        'tpu'
    """
    needed = _check_needed(needed)
    if check_str("accelerator_platform", accelerator_platform, optional=True) == "":
        raise ValueError("accelerator_platform must name a platform ('tpu', 'gpu') or be None.")
    accelerator_count = check_int("accelerator_count", accelerator_count, minimum=0)
    if accelerator_platform is not None and accelerator_count >= needed:
        return DevicePlan(
            accelerator_platform,
            accelerator_count,
            f"Using the runtime's {accelerator_count} {accelerator_platform.upper()} "
            f"device{'s' * (accelerator_count != 1)}.",
        )
    if accelerator_platform is None:
        why = "this runtime has no accelerator"
    else:
        plural = "s" if accelerator_count != 1 else ""
        why = f"this runtime has {accelerator_count} {accelerator_platform.upper()} device{plural}"
    return DevicePlan(
        "cpu",
        needed,
        f"Using {needed} simulated CPU device{'s' * (needed != 1)}: {why}, and this lesson "
        f"needs {needed}.",
    )


def _accelerator_plugins_installed() -> bool:
    if importlib.util.find_spec("libtpu") is not None:
        return True
    try:
        import jax_plugins  # type: ignore[import-not-found]
    except ImportError:
        return False
    return any(True for _ in pkgutil.iter_modules(jax_plugins.__path__))


def _probe_accelerators(timeout_s: float = 120.0) -> tuple[str | None, int]:
    """Counts accelerators in a child process, so this process's backends stay unstarted."""
    code = "import jax; print(jax.default_backend(), jax.device_count())"
    try:
        done = subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )
        platform, count = done.stdout.split()[-2:]
    except (subprocess.SubprocessError, ValueError):
        return None, 0
    return (None, 0) if platform == "cpu" else (platform, int(count))


def _backends_started() -> bool:
    started = backends_started()
    return True if started is None else started


def setup_devices(needed: int = 8) -> DevicePlan:
    """Makes at least `needed` devices visible to JAX and says which, in a sentence.

    Call it right after ``import jax``. With `needed` or more accelerators it uses
    them; otherwise it asks JAX for `needed` simulated CPU devices. Safe to call
    again: once JAX has started, it only reports what is there.

    Example:
        >>> plan = setup_devices(8)
        >>> jax.device_count() >= 8
        True
    """
    _check_needed(needed)
    if _backends_started():
        platform, count = jax.default_backend(), jax.device_count()
        message = (
            f"JAX is already running with {count} {platform.upper()} device{'s' * (count != 1)}."
        )
        if count < needed:
            message += f" This lesson needs {needed}: restart the kernel and run this cell first."
        return DevicePlan(platform, count, message)
    if (
        os.environ.get("JAX_PLATFORMS", "").strip().lower() == "cpu"
        or not _accelerator_plugins_installed()
    ):
        accelerator, count = None, 0
    else:
        accelerator, count = _probe_accelerators()
    plan = choose_devices(accelerator, count, needed)
    if plan.platform == "cpu":
        jax.config.update("jax_platforms", "cpu")
        jax.config.update("jax_num_cpu_devices", needed)
    return plan

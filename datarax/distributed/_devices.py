"""Device set-up for notebooks: the lesson's devices, and the runtime's real chips.

A lesson about sharding needs several devices. A laptop, a Colab CPU runtime or a
one-chip Colab TPU has fewer, so JAX's CPU backend is split into simulated devices for
the lesson's meshes; a runtime with enough accelerators uses them. Where the runtime has
a real accelerator but too few of them, the accelerator is kept beside the simulated
devices: ``jax.devices()`` lists the CPU devices, and ``accelerator_devices()`` the real
chips, for the cells that measure a copy or run a step on them. This must be decided
before JAX starts its backends, which `setup_devices` does.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pkgutil
import re
import subprocess
import sys
from typing import Any

import jax

from datarax._compat import backends_started, tpus_on_the_bus
from datarax._validate import check_bool, check_int, check_str
from datarax.errors import EnvironmentVariableError

MAX_SIMULATED = 4096  # JAX takes ~2.5 s to start 4096 CPU devices, and minutes for 10^5
_ACCELERATORS = ("tpu", "gpu")


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """What `setup_devices` decided, and why, in a sentence.

    `platform` and `num_devices` are what ``jax.devices()`` lists (the lesson's
    meshes); `accelerator` and `accelerator_count` are the runtime's real chips in use:
    the lesson's devices when `platform` is theirs, or kept beside simulated CPU devices
    (None and 0 on a runtime without any, and where they are left unstarted). A count
    read off the PCI bus before JAX starts is an upper bound (a container may grant
    fewer chips); `accelerator_devices()` lists those JAX started.
    """

    platform: str
    num_devices: int
    message: str
    accelerator: str | None = None
    accelerator_count: int = 0


def _check_needed(needed: object) -> int:
    return check_int(
        "needed", needed, maximum=MAX_SIMULATED, meaning="how many devices the lesson uses"
    )


def _count(count: int, platform: str) -> str:
    return f"{count} {platform.upper()} device{'s' * (count != 1)}"


def choose_devices(
    accelerator_platform: str | None,
    accelerator_count: int,
    needed: int,
    keep_accelerator: bool = False,
) -> DevicePlan:
    """Decides between the runtime's accelerators and `needed` simulated CPU devices.

    The rule: with at least `needed` accelerators the lesson uses them; otherwise it
    uses `needed` simulated CPU devices, and the accelerators stay beside them when
    `keep_accelerator` asks for it (starting a chip adds its start-up to the first JAX
    operation), else they are left unstarted.

    Example:
        >>> choose_devices("tpu", 1, 8).platform, choose_devices("tpu", 1, 8).accelerator
        ('cpu', None)
        >>> choose_devices("tpu", 1, 8, keep_accelerator=True).accelerator
        'tpu'
        >>> choose_devices("tpu", 8, 8).platform
        'tpu'
    """
    needed = _check_needed(needed)
    if check_str("accelerator_platform", accelerator_platform, optional=True) == "":
        raise ValueError("accelerator_platform must name a platform ('tpu', 'gpu') or be None.")
    accelerator_count = check_int("accelerator_count", accelerator_count, minimum=0)
    keep_accelerator = check_bool("keep_accelerator", keep_accelerator)
    if accelerator_platform is None or accelerator_count == 0:
        return DevicePlan(
            "cpu",
            needed,
            f"Using {needed} simulated CPU device{'s' * (needed != 1)}: this runtime has no "
            f"accelerator, and this lesson needs {needed}.",
        )
    chips = _count(accelerator_count, accelerator_platform)
    if accelerator_count >= needed:
        return DevicePlan(
            accelerator_platform,
            accelerator_count,
            f"Using the runtime's {chips}.",
            accelerator_platform,
            accelerator_count,
        )
    name = accelerator_platform.upper()
    message = (
        f"Using {needed} simulated CPU devices: this runtime has fewer {name} devices than "
        f"the {needed} this lesson needs. "
    )
    if not keep_accelerator:
        return DevicePlan(
            "cpu",
            needed,
            message + f"The {name} is left unstarted: setup_devices({needed}, "
            "keep_accelerator=True) keeps it beside them, for cells that time work on it.",
        )
    return DevicePlan(
        "cpu",
        needed,
        message + f"The meshes use the CPU devices; the cells that measure a copy or run a "
        f"step also use the {name} (datarax.distributed.accelerator_devices()).",
        accelerator_platform,
        accelerator_count,
    )


def _accelerator_plugins_installed() -> bool:
    if importlib.util.find_spec("libtpu") is not None:
        return True
    try:
        import jax_plugins  # type: ignore[import-not-found]
    except ImportError:
        return False
    return any(True for _ in pkgutil.iter_modules(jax_plugins.__path__))


_PROBE = """
import jax
platform = jax.default_backend()  # starts every platform JAX_PLATFORMS lists
for accelerator in ("tpu", "gpu") if platform == "cpu" else ():
    try:  # JAX_PLATFORMS="cpu,tpu": the CPU is the default, the TPU is there too
        print(accelerator, len(jax.devices(accelerator)))
        break
    except RuntimeError:  # a platform JAX did not start
        continue
else:
    print(platform, jax.device_count())
"""


def _refused(platforms: str, stderr: str) -> EnvironmentVariableError:
    lines = [line for line in stderr.splitlines() if line.strip()]
    reason = lines[-1] if lines else "it exited without saying why"
    return EnvironmentVariableError(
        f"JAX_PLATFORMS={platforms!r} in the environment: JAX does not start with it "
        f"({reason}). Set it to 'cpu' for simulated CPU devices, or unset it (os.environ"
        ".pop('JAX_PLATFORMS')) to let setup_devices choose, before importing jax.",
        variable="JAX_PLATFORMS",
        value=platforms,
    )


def _probe_accelerators(timeout_s: float = 120.0) -> tuple[str | None, int]:
    """Counts accelerators in a child process, so this process's backends stay unstarted.

    Raises:
        EnvironmentVariableError: ``JAX_PLATFORMS`` is set and JAX does not start with it.
    """
    try:
        done = subprocess.run(
            [sys.executable, "-c", _PROBE],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return None, 0
    platforms = os.environ.get("JAX_PLATFORMS", "")
    if done.returncode != 0 and platforms:
        raise _refused(platforms, done.stderr)
    try:
        platform, count = done.stdout.split()[-2:]
    except ValueError:
        return None, 0
    return (None, 0) if platform == "cpu" else (platform, int(count))


def _counted_without_jax() -> tuple[str, int] | None:
    """The runtime's accelerators as this host shows them before JAX starts (TPUs on the
    PCI bus, NVIDIA GPUs as /dev/nvidia<N>), or None when it shows none."""
    tpus = tpus_on_the_bus()
    if tpus:
        return "tpu", tpus
    names = os.listdir("/dev") if os.path.isdir("/dev") else []
    gpus = sum(1 for name in names if re.fullmatch(r"nvidia\d+", name))
    return ("gpu", gpus) if gpus else None


def _find_accelerators(needed: int) -> tuple[str | None, int]:
    """The runtime's accelerators, counted without starting JAX where that decides: a host
    that shows fewer than `needed` has fewer (a count off the bus is an upper bound).
    Otherwise, or where the host shows none, a child process starts JAX to count them."""
    counted = _counted_without_jax()
    if counted is not None and counted[1] < needed:
        return counted
    return _probe_accelerators()


def _backends_started() -> bool:
    started = backends_started()
    return True if started is None else started


def accelerator_devices() -> list[Any]:
    """The real accelerator devices JAX has started: the lesson's own, or those kept beside
    simulated CPU devices; an empty list on a runtime without any.

    Example:
        >>> [device.platform for device in accelerator_devices()]  # a CPU-only runtime
        []
    """
    if jax.default_backend() != "cpu":
        return list(jax.devices())
    for platform in _ACCELERATORS:
        try:
            return list(jax.devices(platform))
        except RuntimeError:  # a platform JAX did not start
            continue
    return []


def _already_running(needed: int) -> DevicePlan:
    platform, count = jax.default_backend(), jax.device_count()
    if count < needed:
        raise ValueError(
            f"setup_devices({needed}): JAX is already running with {_count(count, platform)}, "
            f"and the number of devices cannot change once JAX has started. Restart the "
            f"kernel (or the Python process) and run the device set-up cell first, before "
            f"any other JAX operation; or pass needed={count} or less."
        )
    chips = accelerator_devices()
    accelerator = chips[0].platform if chips else None
    message = f"JAX is already running with {_count(count, platform)}."
    if chips and platform == "cpu":
        message += f" The {_count(len(chips), accelerator or '')} stays beside them."
    return DevicePlan(platform, count, message, accelerator, len(chips))


def setup_devices(needed: int = 8, *, keep_accelerator: bool = False) -> DevicePlan:
    """Makes at least `needed` devices visible to JAX and says which, in a sentence.

    Call it right after ``import jax``. The rule: with `needed` or more accelerators,
    ``jax.devices()`` lists them; otherwise it lists `needed` simulated CPU devices
    (JAX's default platform becomes the CPU), and with `keep_accelerator` the runtime's
    accelerators stay reachable beside them through `accelerator_devices` (a chip left
    unstarted costs nothing; a TPU v5e took about 15 s to start). The accelerators are
    counted from what the host shows (its PCI bus, /dev) without starting JAX, or, where
    that cannot decide, by JAX in a child process. ``JAX_PLATFORMS=cpu`` in the
    environment means the CPU alone; any other value is handed to JAX in a child
    process first, and one that JAX does not start with is an error; one that the plan
    replaces is named in the plan's message. Safe to call again: once JAX has started,
    it only reports what is there.

    Raises:
        ValueError: JAX already runs with fewer than `needed` devices (the message says
            to restart and run this first), or `needed` is not in [1, 4096].
        EnvironmentVariableError: JAX does not start with the environment's
            ``JAX_PLATFORMS`` (a `ValueError` too); the message gives JAX's reason.

    Example:
        >>> plan = setup_devices(8)
        >>> jax.device_count() >= 8
        True
    """
    needed = _check_needed(needed)
    if _backends_started():
        return _already_running(needed)
    requested = os.environ.get("JAX_PLATFORMS", "")
    if requested == "cpu" or (not requested and not _accelerator_plugins_installed()):
        accelerator, count = None, 0
    elif requested:  # JAX must start with it: a child process tries
        accelerator, count = _probe_accelerators()
    else:
        accelerator, count = _find_accelerators(needed)
    plan = choose_devices(accelerator, count, needed, keep_accelerator)
    if plan.platform == "cpu":
        # The first platform listed is JAX's default: the lesson's meshes use the CPU.
        platforms = "cpu" if plan.accelerator is None else f"cpu,{plan.accelerator}"
        jax.config.update("jax_platforms", platforms)
        jax.config.update("jax_num_cpu_devices", needed)
        if requested not in ("", platforms):
            message = f"{plan.message} JAX_PLATFORMS={requested!r} is replaced by {platforms!r}."
            plan = dataclasses.replace(plan, message=message)
    return plan

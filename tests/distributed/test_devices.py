"""The notebook device set-up, decided and applied from a faked device list.

`choose_devices` is the pure decision. `setup_devices` is tested end to end with the
accelerator probe faked and the jax config calls recorded, for the runtimes a
notebook meets on Colab: a one-chip TPU, a CPU-only runtime and an 8-chip TPU. One
case runs in a fresh interpreter, where JAX has not started yet, to show that the
recorded calls really give 8 simulated CPU devices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import pytest

from datarax.distributed import _devices as devices
from datarax.distributed import choose_devices, setup_devices


@pytest.mark.parametrize(
    ("platform", "count", "expected_platform", "expected_count", "phrase"),
    [
        ("tpu", 1, "cpu", 8, "fewer TPU devices than the 8 this lesson needs"),
        ("tpu", 0, "cpu", 8, "no accelerator"),
        (None, 0, "cpu", 8, "no accelerator"),
        ("tpu", 8, "tpu", 8, "runtime's 8 TPU devices"),
        ("gpu", 4, "cpu", 8, "fewer GPU devices than the 8"),
        ("gpu", 16, "gpu", 16, "16 GPU"),
    ],
)
def test_choose_devices(platform, count, expected_platform, expected_count, phrase) -> None:
    plan = choose_devices(platform, count, 8)
    assert (plan.platform, plan.num_devices) == (expected_platform, expected_count)
    assert phrase in plan.message


@pytest.mark.parametrize(
    ("needed", "error"),
    [
        (0, ValueError),
        (-1, ValueError),
        (100_000, ValueError),
        (2.0, TypeError),
        (True, TypeError),
        ("8", TypeError),
    ],
)
def test_choose_devices_rejects_a_bad_device_count(needed, error) -> None:
    with pytest.raises(error, match=r"needed must be an int in \[1, 4096\]"):
        choose_devices(None, 0, needed)
    with pytest.raises(error, match="needed must be an int"):
        setup_devices(needed)


def test_setup_reports_running_backend_without_reconfiguring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(devices, "_probe_accelerators", lambda: pytest.fail("must not probe"))
    assert jax.device_count() == 8  # starts the backends, as any earlier JAX op would
    assert "already running with 8 CPU devices" in devices.setup_devices(8).message
    with pytest.raises(ValueError, match=r"already running with 8 CPU devices.*Restart the kernel"):
        devices.setup_devices(16)


def test_accelerator_devices_is_empty_without_an_accelerator() -> None:
    assert jax.default_backend() == "cpu"
    assert devices.accelerator_devices() == []


def _fake_runtime(
    monkeypatch: pytest.MonkeyPatch,
    accelerators: tuple[str | None, int] | None,
    jax_platforms_env: str | None = None,
    on_the_host: tuple[str, int] | None = None,
) -> tuple[list[tuple[str, object]], list[bool]]:
    """Fakes a runtime whose JAX has not started; returns (config calls, probe calls).

    `accelerators` is what the probe would find, or None for a runtime without any
    accelerator plugin (the probe must then not run); `on_the_host` what the host shows
    before JAX starts (its PCI bus, /dev), None for nothing.
    """
    config_calls: list[tuple[str, object]] = []
    probes: list[bool] = []

    def probe() -> tuple[str | None, int]:
        probes.append(True)
        assert accelerators is not None, "probed a runtime that has no accelerator plugin"
        return accelerators

    monkeypatch.setattr(devices, "_backends_started", lambda: False)
    monkeypatch.setattr(devices, "_accelerator_plugins_installed", lambda: accelerators is not None)
    monkeypatch.setattr(devices, "_probe_accelerators", probe)
    monkeypatch.setattr(devices, "_counted_without_jax", lambda: on_the_host)
    monkeypatch.setattr(
        jax.config, "update", lambda name, value: config_calls.append((name, value))
    )
    if jax_platforms_env is None:
        monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    else:
        monkeypatch.setenv("JAX_PLATFORMS", jax_platforms_env)
    return config_calls, probes


CPU_CONFIG = [("jax_platforms", "cpu"), ("jax_num_cpu_devices", 8)]


def test_one_chip_tpu_keeps_the_chip_beside_simulated_cpu_devices_when_asked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config_calls, probes = _fake_runtime(monkeypatch, ("tpu", 1), on_the_host=("tpu", 1))
    plan = devices.setup_devices(8, keep_accelerator=True)
    assert probes == []  # the bus shows fewer than 8: no child process needed
    assert (plan.platform, plan.num_devices) == ("cpu", 8)
    assert (plan.accelerator, plan.accelerator_count) == ("tpu", 1)
    assert plan.message.startswith(
        "Using 8 simulated CPU devices: this runtime has fewer TPU devices than the 8 this "
        "lesson needs."
    )
    assert "also use the TPU" in plan.message
    # the CPU first: JAX's default platform, so jax.devices() lists the simulated devices
    assert config_calls == [("jax_platforms", "cpu,tpu"), ("jax_num_cpu_devices", 8)]


def test_a_chip_not_asked_for_is_left_unstarted(monkeypatch: pytest.MonkeyPatch) -> None:
    # A container that shows 4 chips on its bus and grants 1 (seen on a TPU v5e host).
    config_calls, probes = _fake_runtime(monkeypatch, ("tpu", 1), on_the_host=("tpu", 4))
    plan = devices.setup_devices(8)
    assert probes == [] and config_calls == CPU_CONFIG
    assert (plan.platform, plan.accelerator, plan.accelerator_count) == ("cpu", None, 0)
    assert "The TPU is left unstarted: setup_devices(8, keep_accelerator=True)" in plan.message


def test_a_host_that_shows_enough_chips_is_counted_by_jax(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config_calls, probes = _fake_runtime(monkeypatch, ("tpu", 1), on_the_host=("tpu", 8))
    plan = devices.setup_devices(8)  # the bus shows 8, JAX starts 1: JAX decides
    assert probes == [True] and plan.platform == "cpu" and config_calls == CPU_CONFIG


@pytest.mark.parametrize(("version", "per_chip"), [("v3", 2), ("v5e", 1)])
def test_tpu_devices_on_the_bus_count_two_cores_a_chip_on_v3(
    monkeypatch: pytest.MonkeyPatch, version: str, per_chip: int
) -> None:
    from jax._src import hardware_utils

    from datarax import _compat

    found = (4, hardware_utils.TpuVersion[version])
    monkeypatch.setattr(hardware_utils, "num_available_tpu_chips_and_device_id", lambda: found)
    assert _compat.tpus_on_the_bus() == 4 * per_chip


def test_cpu_runtime_uses_simulated_devices_without_probing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config_calls, probes = _fake_runtime(monkeypatch, None)
    plan = devices.setup_devices(8)
    assert probes == []
    assert (plan.platform, plan.num_devices) == ("cpu", 8)
    assert "this runtime has no accelerator" in plan.message
    assert config_calls == CPU_CONFIG


def test_eight_chip_tpu_uses_the_chips_and_leaves_jax_config_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    config_calls, probes = _fake_runtime(monkeypatch, ("tpu", 8), on_the_host=("tpu", 8))
    plan = devices.setup_devices(8)
    assert probes == [True]
    assert (plan.platform, plan.num_devices) == ("tpu", 8)
    assert plan.message == "Using the runtime's 8 TPU devices."
    assert config_calls == []


def test_jax_platforms_cpu_skips_the_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    config_calls, probes = _fake_runtime(monkeypatch, ("tpu", 8), jax_platforms_env="cpu")
    assert devices.setup_devices(8).platform == "cpu"
    assert probes == []
    assert config_calls == CPU_CONFIG


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        ("tpu 8\n", ("tpu", 8)),
        ("some log line\ngpu 1\n", ("gpu", 1)),
        ("cpu 1\n", (None, 0)),
        ("", (None, 0)),
        (subprocess.TimeoutExpired("python", 1.0), (None, 0)),
        (subprocess.CompletedProcess("python", 1, stdout="", stderr="RuntimeError"), (None, 0)),
    ],
)
def test_probe_reads_the_child_process_answer(
    monkeypatch: pytest.MonkeyPatch, outcome, expected
) -> None:
    # Without JAX_PLATFORMS, a probe that fails means no accelerator (with it, an error:
    # tests/distributed/test_cluster_env.py).
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)

    def run(*args, **kwargs) -> subprocess.CompletedProcess:
        if isinstance(outcome, Exception):
            raise outcome
        if isinstance(outcome, subprocess.CompletedProcess):
            return outcome
        return subprocess.CompletedProcess(args, 0, stdout=outcome, stderr="")

    monkeypatch.setattr(devices.subprocess, "run", run)
    assert devices._probe_accelerators(timeout_s=1.0) == expected


_FRESH_CPU_RUNTIME = """
import json
import jax
from datarax.distributed import _devices as devices

devices._accelerator_plugins_installed = lambda: False
first = devices.setup_devices(8)
backend, count = jax.default_backend(), jax.device_count()
again = devices.setup_devices(8)
print(json.dumps([first.message, backend, count, again.message]))
"""


def test_fresh_interpreter_without_accelerators_gets_eight_cpu_devices() -> None:
    """The recorded config calls really give 8 CPU devices. (Keeping a real chip beside
    them, ``jax_platforms="cpu,tpu"``, needs a TPU: docs/benchmarks/tpu_notebooks.md
    records that run.)"""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("XLA_FLAGS", "JAX_PLATFORMS", "JAX_NUM_CPU_DEVICES")
    }
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_FRESH_CPU_RUNTIME)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    first, backend, count, again = json.loads(done.stdout.strip().splitlines()[-1])
    assert "Using 8 simulated CPU devices: this runtime has no accelerator" in first
    assert (backend, count) == ("cpu", 8)
    assert again == "JAX is already running with 8 CPU devices."

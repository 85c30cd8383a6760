"""Environment variables for a local cluster and for the device set-up: honoured, merged
or refused with the reason, never silently replaced.

- `launch_local(env=...)`: a variable the launcher sets itself is refused unless it
  has the launcher's value; ``XLA_FLAGS`` reach every process, with the launcher's
  device-count flag added.
- `setup_devices`: a ``JAX_PLATFORMS`` that JAX does not start with is an error
  carrying JAX's reason; one the plan replaces is named in the plan's message.
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

import jax
import pytest
from _support import launcher_targets as targets

from datarax.distributed import _devices as devices
from datarax.distributed import launch_local
from datarax.errors import EnvironmentVariableError


@pytest.mark.multihost
@pytest.mark.parametrize(
    ("variable", "value", "phrase"),
    [
        ("JAX_PLATFORMS", "tpu", "may only be 'cpu' (got 'tpu'): the processes of a local"),
        ("JAX_PLATFORMS", "cpu,tpu", "may only be 'cpu'"),
        ("JAX_NUM_CPU_DEVICES", "3", "may only be '2' (got '3'): devices_per_process=2 sets"),
        ("JAX_CPU_COLLECTIVES_IMPLEMENTATION", "mpi", "may only be 'gloo'"),
        ("PYTHONUNBUFFERED", "", "may only be '1' (got ''): the launcher needs each process's"),
        ("DATARAX_CLUSTER_RUN", "/tmp/x", "cannot be set (got '/tmp/x'): the launcher marks"),
        (
            "XLA_FLAGS",
            "--xla_cpu_enable_fast_math=false --xla_force_host_platform_device_count=8",
            "sets --xla_force_host_platform_device_count=8, but devices_per_process=2 sets",
        ),
    ],
)
def test_a_variable_the_launcher_sets_is_refused_with_the_reason(
    variable: str, value: str, phrase: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_process(*args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", no_process)
    env = {"OTHER": "kept", variable: value}
    with pytest.raises(EnvironmentVariableError) as caught:
        launch_local(targets.combine, args=(1, 2), devices_per_process=2, env=env)
    assert (caught.value.variable, caught.value.value) == (variable, value)
    assert phrase in str(caught.value)
    assert isinstance(caught.value, ValueError)
    assert env == {"OTHER": "kept", variable: value}  # the caller's mapping is unchanged


@pytest.mark.multihost
def test_xla_flags_and_the_launchers_own_values_reach_every_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inherited = "--xla_backend_optimization_level=2"
    monkeypatch.setenv("XLA_FLAGS", f"--xla_force_host_platform_device_count=8 {inherited}")
    flag = "--xla_cpu_enable_fast_math=false"
    runs = launch_local(
        targets.environment_seen,
        num_processes=2,
        devices_per_process=3,
        env={"X": "x", "XLA_FLAGS": flag, "JAX_PLATFORMS": "cpu", "JAX_NUM_CPU_DEVICES": "3"},
        timeout_s=90,
    )
    expected = (f"{flag} --xla_force_host_platform_device_count=3", "cpu", 3, "x")
    assert [run.value for run in runs] == [expected, expected]
    # Without XLA_FLAGS in env, this process's flags reach them, with their own count.
    runs = launch_local(targets.environment_seen, num_processes=2, env={"X": "y"}, timeout_s=90)
    flags = f"{inherited} --xla_force_host_platform_device_count=2"
    assert [run.value for run in runs] == [(flags, "cpu", 2, "y")] * 2


def _unstarted_jax(monkeypatch: pytest.MonkeyPatch, platforms: str) -> list[tuple[str, Any]]:
    """JAX as a fresh notebook has it, with `platforms` in JAX_PLATFORMS; the config
    calls setup_devices makes are recorded instead of made."""
    calls: list[tuple[str, Any]] = []
    monkeypatch.setattr(devices, "_backends_started", lambda: False)
    monkeypatch.setattr(jax.config, "update", lambda name, value: calls.append((name, value)))
    monkeypatch.setenv("JAX_PLATFORMS", platforms)
    return calls


@pytest.mark.parametrize("platforms", ["nonsense", "cpu,nonsense", "CPU"])
def test_setup_devices_refuses_a_jax_platforms_that_jax_refuses(
    platforms: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _unstarted_jax(monkeypatch, platforms)
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    with pytest.raises(EnvironmentVariableError) as caught:
        devices.setup_devices(8)  # the probe really starts JAX in a child process
    assert (caught.value.variable, caught.value.value) == ("JAX_PLATFORMS", platforms)
    message = str(caught.value)
    assert f"JAX_PLATFORMS={platforms!r} in the environment: JAX does not start with it" in message
    assert "Unable to initialize backend" in message  # JAX's own reason
    assert "Set it to 'cpu' for simulated CPU devices, or unset it" in message
    assert calls == []
    assert os.environ["JAX_PLATFORMS"] == platforms


def test_setup_devices_names_the_jax_platforms_it_replaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = _unstarted_jax(monkeypatch, "tpu")
    monkeypatch.setattr(devices, "_probe_accelerators", lambda: ("tpu", 1))
    plan = devices.setup_devices(8, keep_accelerator=True)
    assert (plan.platform, plan.accelerator) == ("cpu", "tpu")
    assert plan.message.endswith("JAX_PLATFORMS='tpu' is replaced by 'cpu,tpu'.")
    assert calls == [("jax_platforms", "cpu,tpu"), ("jax_num_cpu_devices", 8)]
    # An eight-chip TPU is used as JAX_PLATFORMS says, and nothing is replaced.
    monkeypatch.setattr(devices, "_probe_accelerators", lambda: ("tpu", 8))
    assert "replaced" not in devices.setup_devices(8).message

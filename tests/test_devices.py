"""The notebook device set-up decides from a (faked) device list."""

import pytest

from datarax import devices
from datarax.devices import choose_devices


@pytest.mark.parametrize(
    ("platform", "count", "expected_platform", "expected_count", "phrase"),
    [
        ("tpu", 1, "cpu", 8, "1 TPU device, and this lesson needs 8"),
        (None, 0, "cpu", 8, "no accelerator"),
        ("tpu", 8, "tpu", 8, "runtime's 8 TPU devices"),
        ("gpu", 4, "cpu", 8, "4 GPU devices"),
        ("gpu", 16, "gpu", 16, "16 GPU"),
    ],
)
def test_choose_devices(platform, count, expected_platform, expected_count, phrase) -> None:
    plan = choose_devices(platform, count, 8)
    assert (plan.platform, plan.num_devices) == (expected_platform, expected_count)
    assert phrase in plan.message


def test_setup_reports_running_backend_without_reconfiguring(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(devices, "_probe_accelerators", lambda: pytest.fail("must not probe"))
    assert "already running with 8 CPU devices" in devices.setup_devices(8).message
    assert "restart the kernel" in devices.setup_devices(16).message

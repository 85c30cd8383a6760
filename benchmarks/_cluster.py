"""One local cluster of 2 processes x 4 CPU devices for every 2-host benchmark.

Starting a cluster costs several seconds here, so `make bench` starts one and runs
each benchmark's ``measure_on_each_host`` in it, in order, on every process. A module
run alone starts its own with `run`. Every sample starts after a `barrier`.
"""

from __future__ import annotations

import importlib
from typing import Any

from jax.experimental import multihost_utils

from datarax.distributed import launch_local

NUM_PROCESSES = 2
DEVICES_PER_PROCESS = 4


def barrier() -> None:
    """Waits until every process gets here (the ``before_sample`` of a cluster benchmark).

    Nothing else keeps the hosts in step between samples: a candidate that exchanges
    with the other hosts would otherwise also wait out the lead one host took while
    the previous candidate ran without exchanging.
    """
    multihost_utils.sync_global_devices("benchmarks")


def on_each_host(modules: list[str]) -> dict[str, Any]:
    """Runs on every process: each module's ``measure_on_each_host()``, by module name."""
    return {
        name: importlib.import_module(f"benchmarks.{name}").measure_on_each_host()
        for name in modules
    }


def run(modules: list[str], timeout_s: float = 600.0) -> dict[str, list[Any]]:
    """Every host's result of each module's measurement, in process order."""
    hosts = launch_local(
        on_each_host,
        num_processes=NUM_PROCESSES,
        devices_per_process=DEVICES_PER_PROCESS,
        args=(modules,),
        timeout_s=timeout_s,
    )
    return {name: [host.value[name] for host in hosts] for name in modules}

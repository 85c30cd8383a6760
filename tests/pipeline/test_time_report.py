"""`Pipeline.time_report()` can be called from any thread while the pipeline iterates."""

from __future__ import annotations

import threading
import time

import numpy as np

from datarax.pipeline import Pipeline


def test_time_report_from_another_thread_while_iterating_never_raises() -> None:
    pipeline = Pipeline(source={"x": np.arange(64)}, batch_size=1)
    errors: list[BaseException] = []
    reports = 0
    done = threading.Event()

    def report_until_done() -> None:
        nonlocal reports
        while not done.is_set():
            try:
                assert pipeline.time_report().batches <= 256
            except BaseException as error:  # reported by the main thread
                errors.append(error)
                return
            reports += 1

    reporter = threading.Thread(target=report_until_done, daemon=True)
    reporter.start()
    deadline = time.monotonic() + 20
    batches = 0
    try:
        while batches < 20_000 and not errors and time.monotonic() < deadline:
            for _ in pipeline:  # 64 batches an epoch, each one appended to the times kept
                batches += 1
    finally:
        done.set()
        reporter.join(timeout=10)
    assert not reporter.is_alive()
    assert not errors, f"time_report() raised after {batches} batches: {errors[0]!r}"
    assert batches >= 2_000 and reports > 100, (batches, reports)
    assert pipeline.time_report().batches == 256

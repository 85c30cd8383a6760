"""The tiny batches' controls run and report what docs/benchmarks/README.md quotes: each
control's ratio is its own rounds' median against the plain loop's, beside its time."""

from __future__ import annotations

import pytest

from benchmarks import throughput


def test_the_controls_report_each_ratio_against_the_plain_loop(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def interleaved(candidates: dict, count: int) -> dict[str, list[float]]:
        times = {name: [] for name in candidates}
        for _ in range(count):
            for name, run in candidates.items():
                assert run() == 4  # 4 batches of 8 rows, each placed and waited for
                seconds = {"plain": 1.0, "ArraySharder.shard": 1.25, "Pipeline": 1.6}.get(
                    name.split(" ")[0], 2.0
                )
                times[name].append(seconds)
        return times

    monkeypatch.setattr(throughput, "interleaved", interleaved)
    controls = throughput.tiny_batch_controls(rows=32, batch_size=8, rounds=2)

    assert controls["spin_us"] == throughput.SPIN_US
    assert controls["sharder_throughput_ratio"] == pytest.approx(1 / 1.25)
    assert controls["spin_throughput_ratio"] == pytest.approx(1 / 2.0)
    assert controls["pipeline_throughput_ratio"] == pytest.approx(1 / 1.6)
    assert controls["per_batch_us"]["ArraySharder.shard"] == pytest.approx(1.25 / 4 * 1e6)

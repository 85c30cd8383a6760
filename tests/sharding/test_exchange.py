"""The exchange between hosts: a process that does not arrive is named, by type."""

from __future__ import annotations

import pickle
from typing import Any

import jax
import pytest

from datarax import _exchange
from datarax.errors import ExchangeTimeoutError


class _Coordinator:
    """A coordinator's key-value store in which process 1 never publishes."""

    def __init__(self) -> None:
        self.published: dict[str, str] = {}

    def key_value_set(self, key: str, value: str) -> None:
        self.published[key] = value

    def blocking_key_value_get(self, key: str, timeout_ms: int) -> str:
        if key not in self.published:
            raise RuntimeError(f"DEADLINE_EXCEEDED after {timeout_ms} ms")
        return self.published[key]

    def key_value_delete(self, key: str) -> None:
        self.published.pop(key, None)


def test_a_process_that_never_arrives_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    coordinator = _Coordinator()
    monkeypatch.setattr(_exchange, "coordinator_client", lambda: coordinator)
    monkeypatch.setattr(_exchange, "_rounds_done", [0])
    monkeypatch.setattr(jax, "process_count", lambda: 3)
    monkeypatch.setattr(jax, "process_index", lambda: 0)
    coordinator.key_value_set("datarax/exchange/0/0/2", "from 2")  # process 2 did arrive
    with pytest.raises(ExchangeTimeoutError) as caught:
        _exchange.exchange("from 0", "Pipeline iteration", timeout_s=0.01)
    error: Any = caught.value
    assert isinstance(error, RuntimeError)  # what was raised before: except RuntimeError works
    assert (error.process, error.what) == (1, "Pipeline iteration")
    assert str(error).startswith(
        "Process 1 did not reach exchange #0 of Pipeline iteration within 0.01 s (this is "
        "process 0)"
    )
    again = pickle.loads(pickle.dumps(error))
    assert (type(again), again.process, again.what) == (
        ExchangeTimeoutError,
        1,
        "Pipeline iteration",
    )


@pytest.mark.parametrize(
    ("values", "odd"),
    [
        (["a", "a", "b"], (2,)),
        (["a", "b"], (0, 1)),
        (["a", "b", "b", "c"], (0, 3)),
        ([(8, 3), None, (8, 3), (4, 3)], (3,)),
        ([None, "a", None], ()),
        (["a", "a"], ()),
    ],
)
def test_the_processes_at_odds_differ_from_the_most_common_value(
    values: list[Any], odd: tuple[int, ...]
) -> None:
    assert _exchange.at_odds(values) == odd

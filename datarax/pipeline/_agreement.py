"""Decisions the hosts of a pipeline take together, and who has to take part.

`agree` is one small exchange through the coordinator, bounded in time: every host
learns every host's value, and a disagreement is an error on every host, never a
hang. `feeds_hosts` tells whether a pipeline's stages hand their batches to a
`JaxProcessSharder`, the one case where the hosts must stay in step.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

from flax import nnx

from datarax.sharding._exchange import exchange
from datarax.sharding.jax_process_sharder import JaxProcessSharder


def agree(text: str, what: str | None) -> list[str]:
    """Every process's `text`, in process order (all processes must call it).

    Args:
        text: this process's value.
        what: when given, the values must be equal, and a ValueError naming `what`
            and each process's value is raised on every host when they are not.
    """
    texts = exchange(text, "Pipeline iteration")
    if what is not None and len(set(texts)) > 1:
        listed = "; ".join(f"process {p}: {t}" for p, t in enumerate(texts))
        raise ValueError(
            f"The hosts disagree on {what} ({listed}). Build the pipeline the same way on "
            "every host (the same source, batch_size and rngs) and resume it from the "
            "same state."
        )
    return texts


def agree_on_batches_left(left: int, epoch: int, uneven_hosts: str) -> int:
    """How many batches every host runs when each has `left` of `epoch` to go.

    ``"stop"``: the smallest count; ``"raise"``: a ValueError on every host naming each
    host's count when they differ.
    """
    counts = [int(text) for text in agree(str(left), None)]
    if len(set(counts)) > 1 and uneven_hosts == "raise":
        listed = ", ".join(f"{c} on process {p}" for p, c in enumerate(counts))
        raise ValueError(
            f"The hosts' pipelines have different numbers of batches left in epoch {epoch}: "
            f"{listed}. Give every host the same number of rows (JaxProcessSharder("
            "drop_remainder=True) does), or use uneven_hosts='stop' to stop every host at "
            "the smallest count."
        )
    return min(counts)


def _reachable(stage: Any, depth: int = 2) -> Iterator[Any]:
    """Objects a stage can reach: itself, a bound method's owner, a partial's parts,
    a function's closure and the globals it names, an nnx.Module's graph."""
    yield stage
    if depth == 0:
        return
    if isinstance(stage, nnx.Module):
        for _, node in nnx.iter_graph(stage):
            yield node
        return
    inner: list[Any] = []
    if inspect.ismethod(stage):
        inner.append(stage.__self__)
    elif isinstance(stage, functools.partial):
        inner += [stage.func, *stage.args, *stage.keywords.values()]
    elif inspect.isfunction(stage):
        inner += [cell.cell_contents for cell in stage.__closure__ or () if _filled(cell)]
        inner += [stage.__globals__[n] for n in stage.__code__.co_names if n in stage.__globals__]
    for item in inner:
        yield from _reachable(item, depth - 1)


def _filled(cell: Any) -> bool:
    try:
        cell.cell_contents  # noqa: B018
    except ValueError:  # an empty cell
        return False
    return True


def feeds_hosts(stages: Sequence[Any]) -> bool:
    """Whether any stage reaches a `JaxProcessSharder` (the hosts must then agree)."""
    return any(
        isinstance(item, JaxProcessSharder) for stage in stages for item in _reachable(stage)
    )

"""Decisions the hosts of a pipeline take together.

`agree` is one small exchange through the coordinator, bounded in time: every host
learns every host's value, and a disagreement is an error on every host, never a
hang. Which pipelines take part is decided by what they do (`Pipeline` calls
`agree_on_batches_left` once its batches have crossed hosts), never by searching
their stages.
"""

from __future__ import annotations

import json

from datarax.sharding._exchange import exchange


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
    host's count when they differ. Hosts built with different `uneven_hosts` get a
    ValueError on every host too.
    """
    texts = agree(json.dumps([left, uneven_hosts]), None)
    counts, policies = zip(*(json.loads(text) for text in texts), strict=True)
    if len(set(policies)) > 1:
        listed = ", ".join(f"{p!r} on process {i}" for i, p in enumerate(policies))
        raise ValueError(
            f"The hosts' pipelines were built with different uneven_hosts: {listed}. "
            "Pass the same uneven_hosts to Pipeline on every host."
        )
    if len(set(counts)) > 1 and uneven_hosts == "raise":
        listed = ", ".join(f"{c} on process {p}" for p, c in enumerate(counts))
        raise ValueError(
            f"The hosts' pipelines have different numbers of batches left in epoch {epoch}: "
            f"{listed}. Give every host the same number of rows (JaxProcessSharder("
            "drop_remainder=True) does), or use uneven_hosts='stop' to stop every host at "
            "the smallest count."
        )
    return min(counts)

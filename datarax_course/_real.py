"""Checkers that hold the reader's answer against what the library or JAX really does.

Four ideas of the tutorials are first practised as arithmetic (Grain's bounds, an
epoch's time with prefetch, where uneven hosts stop, the communication-bound batch).
These exercises then run the real thing and compare:

``04.split_batch``: the reader splits a real batch between hosts; each host's part is
compared with what `JaxProcessSharder.shard_data` gives that host.
``07.predicted_epoch``: the reader measures a source and a step they have not seen and
predicts a loop's time, from two batches and two steps at most (the source and the step
refuse more, `prefetch_to_device` is refused, and a prediction that spends half of the
time it predicts outside the batches and steps it was handed has run a loop of its own:
refused too), three times, of which the median counts (a batch or a step stalled by a
busy machine makes one prediction wrong, not the answer). The source's first batch takes
longer than the rest (it opens its files), so the two batches a prediction sees differ
from those that follow, as a real source's do. Then the answer keys time the loop,
through `prefetch_to_device` or not (the one checker whose right answer is a
measurement, taken by whoever judges).
``09.unread_rows``: the reader names the rows per-host pipelines leave unread when they
stop together; the checker runs each host's `Pipeline` for the batches they agree on.
``10.backward_flops``: the reader asks XLA how many FLOPs a backward pass costs per row;
the checker asks XLA too, on models the reader has not seen, through a count kept with
the answer keys (`datarax_course._keys.COUNTS`), so that a graded kernel cannot call it.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from datarax.pipeline import Pipeline, prefetch_to_device
from datarax.sharding import JaxProcessSharder, shard_bounds
from datarax_course._cases import counted, counted_here, draw
from datarax_course._core import Ban, call, exercise, keys_banned
from datarax_course._feedback import Feedback, right, wrong
from datarax_course._values import array, items, number, plain, reject

# 04.split_batch -------------------------------------------------------------------------

_NO_SHARDER = (
    Ban(JaxProcessSharder, "shard_data", "JaxProcessSharder.shard_data"),
    Ban(shard_bounds, "__code__", "shard_bounds"),
)


def _piece(value: Any, what: str, keys: list[str]) -> dict[str, np.ndarray]:
    read = plain(value, what, f"a dict with the keys {keys}, like the batch")
    if not isinstance(read, dict) or sorted(read) != keys:
        raise reject(what, read, f"a dict with the keys {keys}, like the batch")
    return {key: array(read[key], f"{what}[{key!r}]", "an array of rows") for key in keys}


@exercise(
    "04.split_batch",
    idea="every leaf of the batch is cut at the same rows: your host_bounds says where.",
    method="for host i of process_count, (start, stop) = host_bounds(len of a leaf, i, "
    "process_count, drop_remainder); the host's batch is {key: leaf[start:stop]}; "
    "return the list of every host's batch, host 0 first.",
)
def _split_batch(answer: Any) -> Feedback:
    rng = draw("04.split_batch")
    settings = [(10, 3), (7, 2), (0, 2), (16, 4), (5, 5), (3, 5)]
    settings += [(int(rng.integers(1, 300)), int(rng.integers(2, 9))) for _ in range(3)]
    checked = 0
    for rows, count in settings:
        batch: dict[str, np.ndarray] = {
            "image": np.arange(rows * 3, dtype=np.float32).reshape(rows, 3),
            "label": np.arange(rows) % 7,
        }
        for drop in (True, False):
            got = call(
                answer, {k: v.copy() for k, v in batch.items()}, count, drop, bans=_NO_SHARDER
            )
            pieces = items(
                got, "split_batch's result", f"a list of {count} batches, one per host", count
            )
            for host, piece in enumerate(pieces):
                mine = _piece(piece, f"host {host}'s batch", sorted(batch))
                sharder = JaxProcessSharder(
                    process_index=host, process_count=count, drop_remainder=drop
                )
                theirs = sharder.shard_data(batch)
                for key in sorted(batch):
                    if mine[key].shape != theirs[key].shape or not np.array_equal(
                        mine[key], theirs[key]
                    ):
                        return wrong(
                            f"a batch of {rows} rows split over {count} hosts "
                            f"(drop_remainder={drop}): JaxProcessSharder gives host {host} "
                            f"{len(theirs[key])} rows of {key!r}, starting "
                            f"{theirs[key][:2].tolist()}; your host {host} got "
                            f"{len(mine[key])} rows, starting {mine[key][:2].tolist()}."
                        )
            checked += 1
    return right(
        f"every host's part matches JaxProcessSharder.shard_data in all {checked} splits "
        "(an empty batch, more hosts than rows, both drop_remainder)."
    )


# 07.predicted_epoch ---------------------------------------------------------------------
# The prediction is asked first, on a source and a step that give `_TIMED` batches and
# `_TIMED` steps in all: enough to time one of each, never the loop it predicts. The
# source opens its files on the first batch, which takes `opening_ms` more than the rest.
# Only then are the loops timed, on a source and a step without that limit, by the
# answer keys' `loop_ms` (the grader's, in its own process, when grading).

NAME_07 = "07.predicted_epoch"
_LOOP_STEPS = 8
_TIMED = 2  # batches, and steps, a prediction may take
_PREDICTIONS = 3  # asked per loop; the median is judged, so one stalled batch does not decide
_THE_LOOP = (
    f"the loop it predicts (batch {_TIMED + 1} of make_batches(), or call {_TIMED + 1} of step)"
)
# A prediction that spends this share of the time it predicts, and more than
# `_OWN_MS_FLOOR`, outside the batches and steps it is handed has run a loop of its own.
_OWN_SHARE, _OWN_MS_FLOOR = 0.5, 20.0


class _Allowance:
    """How many more batches, or steps, a prediction may take (None: no limit, as in the
    checker's own loops), and the milliseconds they took (`spent_ms`)."""

    def __init__(self, left: int | None = None) -> None:
        self.left, self.spent_ms = left, 0.0

    def take(self) -> None:
        """One more batch or step; past the allowance, refused as the loop itself."""
        from datarax_course._feedback import Forbidden

        if self.left is None:
            return
        if self.left <= 0:
            raise Forbidden(_THE_LOOP)
        self.left -= 1

    def wait(self, ms: float) -> None:
        """Waits `ms` milliseconds, counted as time the batches or steps took."""
        start = time.perf_counter()
        time.sleep(ms / 1e3)
        self.spent_ms += (time.perf_counter() - start) * 1e3


def _source(input_ms: float, opening_ms: float, allowance: _Allowance | None = None) -> Any:
    allowed = allowance or _Allowance()

    def make_batches() -> Iterator[dict[str, np.ndarray]]:
        for index in range(_LOOP_STEPS):
            allowed.take()
            allowed.wait(input_ms + (opening_ms if index == 0 else 0.0))  # read, decode
            yield {"x": np.full((4, 2), index, np.float32)}

    return make_batches


def _step(step_ms: float, allowance: _Allowance | None = None) -> Any:
    allowed = allowance or _Allowance()

    def step(batch: Any) -> None:
        allowed.take()
        allowed.wait(step_ms)  # the host waits while the accelerator runs the step

    return step


class _Prediction:
    """The reader's function, timed: past a share of its own prediction spent outside the
    batches and steps it was handed (`handed`, their allowances), it has run a loop of its
    own, and is refused as the loop itself."""

    def __init__(self, answer: Any, handed: tuple[_Allowance, ...]) -> None:
        self.answer, self.handed = answer, handed

    def __call__(self, *args: Any) -> Any:
        from datarax_course._feedback import Forbidden, Rejected

        start = time.perf_counter()
        result = self.answer(*args)
        elapsed_ms = (time.perf_counter() - start) * 1e3
        own_ms = elapsed_ms - sum(allowance.spent_ms for allowance in self.handed)
        try:
            predicted = number(result, "your prediction")
        except Rejected:  # not a number: the checker says so once it reads it
            return result
        if own_ms > max(_OWN_SHARE * predicted, _OWN_MS_FLOOR):
            raise Forbidden(
                f"a loop of its own ({own_ms:.0f} ms besides the batches and steps it was "
                f"handed, for a prediction of {predicted:.0f} ms)"
            )
        return result


def _median_prediction(
    answer: Any, setting: tuple[float, float, float], prefetch: bool, bans: Any
) -> float:
    """The median of `_PREDICTIONS` predictions of one loop, each on a freshly handed
    source and step (`setting`: input_ms, opening_ms, step_ms)."""
    input_ms, opening_ms, step_ms = setting
    predictions = []
    for _ in range(_PREDICTIONS):
        handed = (_Allowance(_TIMED), _Allowance(_TIMED))
        source, step = _source(input_ms, opening_ms, handed[0]), _step(step_ms, handed[1])
        timed = _Prediction(answer, handed) if callable(answer) else answer
        got = call(timed, source, step, _LOOP_STEPS, prefetch, bans=bans)
        predictions.append(number(got, "your prediction"))
    return float(np.median(predictions))


def _close(predicted: float, measured: float) -> bool:
    return abs(predicted - measured) <= max(0.2 * measured, 25.0)


def _settings() -> list[tuple[float, float, float]]:
    """(input_ms, opening_ms, step_ms) of the two sources and steps: a batch and a step of
    10 to 20 ms each, the source's first batch 3 times their sum more (opening its files):
    a prediction that leaves the opening out is short by over a fifth of any loop."""
    rng = draw(NAME_07)
    settings = []
    for _ in range(2):
        input_ms, step_ms = float(rng.integers(10, 21)), float(rng.integers(10, 21))
        settings.append((input_ms, 3 * (input_ms + step_ms), step_ms))
    return settings


@exercise(
    NAME_07,
    idea="time the first two batches of make_batches() and one step (while you predict, "
    "they give two of each, never the loop): the first batch pays a one-off cost of "
    "opening the source, the second is what every later batch takes; then let your "
    "epoch_ms do the rest.",
    method="it = make_batches(); t0 = time.perf_counter(); batch = next(it); t1 = "
    "time.perf_counter(); next(it); t2 = time.perf_counter(); input_ms = (t2 - t1) * 1e3 "
    "and opening_ms = (t1 - t0) * 1e3 - input_ms; time step(batch) the same way for "
    "step_ms; return opening_ms + epoch_ms(step_ms, input_ms, steps, prefetch).",
)
def _predicted_epoch(answer: Any) -> Feedback:
    found = counted(NAME_07)
    bans = (
        Ban(prefetch_to_device, "__code__", "prefetch_to_device (a loop, not a prediction)"),
        *keys_banned(found, "the checker's own loop"),
    )
    cases = [(setting, prefetch) for setting in _settings() for prefetch in (False, True)]
    predicted = [_median_prediction(answer, setting, prefetch, bans) for setting, prefetch in cases]
    timed_ms = counted_here(NAME_07, found)  # every prediction made before any loop is timed
    for ((input_ms, opening_ms, step_ms), prefetch), guess in zip(cases, predicted, strict=True):
        measured = [timed_ms(input_ms, opening_ms, step_ms, prefetch)]
        while (
            not _close(guess, min(measured, key=lambda ms: abs(ms - guess))) and len(measured) < 3
        ):
            measured.append(timed_ms(input_ms, opening_ms, step_ms, prefetch))  # busy: again
        nearest = min(measured, key=lambda ms: abs(ms - guess))
        if not _close(guess, nearest):
            how = "with prefetch_to_device(size=2)" if prefetch else "one after the other"
            return wrong(
                f"a loop of {_LOOP_STEPS} batches {how} took {nearest:.0f} ms here, and you "
                f"predicted {guess:.0f} ms (the batches take about {input_ms:g} ms to "
                f"produce, the first {opening_ms:g} ms more, a step about {step_ms:g} ms)."
            )
    return right(
        f"your predictions came within 20% of {len(cases)} real loops, with and without "
        "prefetch_to_device, their first batch slower than the rest."
    )


# 09.unread_rows ---------------------------------------------------------------------------


def _pipelines(rows_per_host: list[int], batch_size: int, seed: int) -> list[Pipeline]:
    return [
        Pipeline(
            source={"row": np.arange(rows)},
            batch_size=batch_size,
            shuffle=True,
            rngs=nnx.Rngs(seed + host),
            uneven_hosts="stop",
        )
        for host, rows in enumerate(rows_per_host)
    ]


def _read_in_epoch(pipeline: Pipeline, epoch: int, batches: int) -> set[int]:
    """The rows `pipeline` reads in the first `batches` batches of `epoch`, by iterating."""
    for _ in range(epoch):
        for _ in pipeline:
            pass
    read: set[int] = set()
    for _, batch in zip(range(batches), pipeline, strict=False):
        read.update(int(row) for row in batch["row"])
    return read


@exercise(
    "09.unread_rows",
    idea="every host stops after the agreed number of batches (your epoch_plan): what is "
    "left of its own epoch order is unread.",
    method="batches = min(len(p) for p in pipelines); host h leaves "
    "np.sort(pipelines[h].epoch_order(epoch)[batches * pipelines[h].batch_size:]) unread.",
)
def _unread_rows(answer: Any) -> Feedback:
    rng = draw("09.unread_rows")
    drawn = [int(n) for n in rng.integers(8, 60, size=int(rng.integers(2, 5)))]
    settings = [
        ([40, 48], 8, 0, 1),
        ([43, 48, 50, 64], 8, 5, 0),
        (drawn, 4, int(rng.integers(100)), 2),
    ]
    for rows_per_host, batch_size, seed, epoch in settings:
        got = call(answer, _pipelines(rows_per_host, batch_size, seed), epoch)
        expected_count = f"a list of {len(rows_per_host)} arrays, one per host"
        listed = items(got, "unread_rows's result", expected_count, len(rows_per_host))
        fresh = _pipelines(rows_per_host, batch_size, seed)
        agreed = min(len(pipeline) for pipeline in fresh)
        for host, (pipeline, mine) in enumerate(zip(fresh, listed, strict=True)):
            unread = sorted(
                set(range(rows_per_host[host])) - _read_in_epoch(pipeline, epoch, agreed)
            )
            rows = array(mine, f"host {host}'s unread rows", "an array of row numbers", True)
            if sorted(rows.tolist()) != unread or len(rows) != len(unread):
                return wrong(
                    f"hosts with {rows_per_host} rows, batches of {batch_size}, epoch {epoch}: "
                    f"they stop after {agreed} batches, and host {host}'s pipeline leaves "
                    f"{len(unread)} rows unread ({unread[:6]}...); your function says "
                    f"{len(rows)} ({sorted(rows.tolist())[:6]}...)."
                )
    return right(
        f"the rows every host leaves unread match what its own pipeline read, in {len(settings)} "
        "sets of hosts and epochs."
    )


# 10.backward_flops ------------------------------------------------------------------------
# The reference, XLA's own count, lives in the answer keys (`datarax_course._keys.COUNTS`),
# which a graded kernel's copy of the course lacks: there the checker only records what
# the reader's function returns, and the grader counts in its own process. Elsewhere the
# checker bans it while the reader's function runs.


def _model(widths: list[int]) -> tuple[Any, Any]:
    """A dense model with layers of `widths`: its loss(params, x) and its weights."""
    rng = np.random.default_rng(sum(widths))
    params = [
        jnp.asarray(rng.standard_normal((fan_in, fan_out), dtype=np.float32) / fan_in**0.5)
        for fan_in, fan_out in itertools.pairwise(widths)
    ]

    def loss(params: Any, x: Any) -> Any:
        for weight in params[:-1]:
            x = jax.nn.relu(x @ weight)
        return jnp.mean((x @ params[-1]) ** 2)

    return loss, params


@exercise(
    "10.backward_flops",
    idea="XLA counts the FLOPs of a program (its cost analysis); the backward "
    "pass is what the gradient costs beyond the forward pass, and only the part that "
    "grows with the rows matters.",
    method="flops(f, *args) = jax.jit(f).lower(*args).cost_analysis()['flops']; "
    "with the batch doubled, (flops(jax.grad(loss), params, 2x) - flops(jax.grad(loss), "
    "params, x)) - (flops(loss, params, 2x) - flops(loss, params, x)), divided by the rows.",
)
def _backward_flops(answer: Any) -> Feedback:
    rng = draw("10.backward_flops")
    shapes = [[16, 64, 64, 8]]
    shapes.append([int(n) for n in rng.integers(4, 97, size=int(rng.integers(3, 6)))])
    found = counted("10.backward_flops")
    bans = keys_banned(found, "the checker's own XLA count")
    cases = []
    for widths in shapes:  # every case answered before any right answer is computed
        loss, params = _model(widths)
        batch = jnp.ones((int(rng.integers(8, 65)), widths[0]))
        got = call(answer, loss, params, batch, bans=bans)
        cases.append((widths, loss, params, batch, number(got, "backward_flops_per_row's result")))
    count = counted_here("10.backward_flops", found)
    per_weight = []
    for widths, loss, params, batch, got in cases:
        expected = count(loss, params, batch)
        weights = sum(weight.size for weight in params)
        if not np.isclose(got, expected, rtol=1e-6):
            return wrong(
                f"for a dense model with layers {widths} ({weights} weights) and a batch of "
                f"{batch.shape[0]} rows, XLA counts {expected:,.0f} FLOPs per row in the "
                f"backward pass ({expected / weights:.2f} per weight); your function says "
                f"{got:,.0f}."
            )
        per_weight.append(f"{expected / weights:.2f}")
    return right(
        f"your counts match XLA's on {len(shapes)} models you had not seen: "
        f"{' and '.join(per_weight)} FLOPs per weight per row, against the rule's 4."
    )

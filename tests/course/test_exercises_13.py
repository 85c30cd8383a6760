"""The checkers of tutorial 13: a right reading of a profile passes, however it is written;
each common wrong reading is told what it got wrong; the placeholder is not answered yet,
and nothing the reader's function does makes it raise. 13.input_hidden: the drawn traces
look like the lesson's profile, and the answer key reads a real profile as a clock does.
13.collective_hidden: the stored profiles are real, small and made again by their
recorder, in which the CPU hides nothing; the variations drawn from them do hide some."""

from __future__ import annotations

import gzip
import json
import statistics
import time
from typing import Any

import jax
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax.pipeline import prefetch_to_device
from datarax_course import _cases, _keys, _nb13, _nb13_hidden, check, traces
from tests._support.exercise_checks import judges_right_wrong_and_placeholder

NAME = "13.input_hidden"


def input_hidden(events: Any) -> Any:
    step_ms = float(np.median([e["duration_us"] for e in events if e["name"] == "step"])) / 1e3
    thread = next(e["thread"] for e in events if e["name"] == "augment")
    spans = sorted(
        (e["start_us"], e["start_us"] + e["duration_us"]) for e in events if e["thread"] == thread
    )
    busy, covered = 0.0, -np.inf
    for start, stop in spans:
        if stop > covered:
            busy += stop - max(start, covered)
            covered = stop
    batches = sum(e["name"] == "augment" for e in events)
    input_ms = busy / batches / 1e3
    return step_ms, input_ms, input_ms <= step_ms


def busy_by_sweep(events: Any, thread: Any) -> float:
    """A thread's busy microseconds by another route: a sweep over every start and end,
    counting the moments where at least one of its events is open."""
    edges = sorted(
        [(e["start_us"], 1) for e in events if e["thread"] == thread]
        + [(e["start_us"] + e["duration_us"], -1) for e in events if e["thread"] == thread],
        key=lambda edge: (edge[0], -edge[1]),
    )
    busy, open_now, since = 0.0, 0, 0.0
    for at, change in edges:
        if open_now == 0 and change == 1:
            since = at
        open_now += change
        if open_now == 0:
            busy += at - since
    return busy


def by_sweep(events: Any) -> Any:
    """The rule read another way: statistics' median, the sweep, a list not a tuple."""
    step_ms = statistics.median(e["duration_us"] for e in events if e["name"] == "step") / 1e3
    augments = [e for e in events if e["name"] == "augment"]
    input_ms = busy_by_sweep(events, augments[0]["thread"]) / len(augments) / 1e3
    return [step_ms, input_ms, bool(input_ms <= step_ms)]


def as_numpy(events: Any) -> Any:
    step_ms, input_ms, hidden = input_hidden(events)
    return np.float32(step_ms), np.float64(input_ms), np.bool_(hidden)


@pytest.mark.parametrize("solution", [input_hidden, by_sweep, as_numpy])
def test_a_right_reading_passes(solution: Any) -> None:
    assert check(NAME, solution, quiet=True)


def test_the_key_and_the_sweep_agree_on_public_and_secret_traces() -> None:
    for seed in (None, 1, 2024):
        if seed is None:
            cases = _nb13._trace_cases()
        else:
            with _cases.drawing(seed):
                cases = _nb13._trace_cases()
        for _, (events,) in cases:
            expected = _keys.trace_reading(events)
            assert np.allclose(expected[:2], by_sweep(events)[:2], rtol=1e-9)
            assert expected[2] == by_sweep(events)[2]


def test_the_secret_traces_are_judged_with_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cases, "_KEYS", dict(_keys.KEYS))
    with _cases.drawing(777):
        assert check(NAME, input_hidden, quiet=True)
        told = check(NAME, summed, quiet=True)
        assert not told and "events nest" in told.message, told.message


def summed(events: Any) -> Any:
    """Every event of the input thread added up, the nested copies counted twice."""
    step_ms = input_hidden(events)[0]
    thread = next(e["thread"] for e in events if e["name"] == "augment")
    batches = sum(e["name"] == "augment" for e in events)
    total = sum(e["duration_us"] for e in events if e["thread"] == thread)
    return step_ms, total / batches / 1e3, total / batches / 1e3 <= step_ms


def mean_step(events: Any) -> Any:
    _, input_ms, hidden = input_hidden(events)
    return (
        float(np.mean([e["duration_us"] for e in events if e["name"] == "step"])) / 1e3,
        (input_ms),
        hidden,
    )


def from_train(events: Any) -> Any:
    _, input_ms, hidden = input_hidden(events)
    return (
        float(np.median([e["duration_us"] for e in events if e["name"] == "train"])) / 1e3,
        (input_ms),
        hidden,
    )


def in_microseconds(events: Any) -> Any:
    step_ms, input_ms, hidden = input_hidden(events)
    return step_ms * 1e3, input_ms * 1e3, hidden


def input_in_microseconds(events: Any) -> Any:
    step_ms, input_ms, hidden = input_hidden(events)
    return step_ms, input_ms * 1e3, hidden


def per_step(events: Any) -> Any:
    step_ms, input_ms, hidden = input_hidden(events)
    batches = sum(e["name"] == "augment" for e in events)
    steps = sum(e["name"] == "step" for e in events)
    return step_ms, input_ms * batches / steps, hidden


def augment_only(events: Any) -> Any:
    step_ms, _, _ = input_hidden(events)
    augments = [e["duration_us"] for e in events if e["name"] == "augment"]
    input_ms = sum(augments) / len(augments) / 1e3
    return step_ms, input_ms, input_ms <= step_ms


def whole_span(events: Any) -> Any:
    step_ms, _, _ = input_hidden(events)
    thread = next(e["thread"] for e in events if e["name"] == "augment")
    mine = [e for e in events if e["thread"] == thread]
    span = max(e["start_us"] + e["duration_us"] for e in mine) - min(e["start_us"] for e in mine)
    input_ms = span / sum(e["name"] == "augment" for e in events) / 1e3
    return step_ms, input_ms, input_ms <= step_ms


def hidden_reversed(events: Any) -> Any:
    step_ms, input_ms, hidden = input_hidden(events)
    return step_ms, input_ms, not hidden


def always_hidden(events: Any) -> Any:
    step_ms, input_ms, _ = input_hidden(events)
    return step_ms, input_ms, True


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        (summed, "events nest: each shard_args holds the batch's two DevicePutWithSharding"),
        (mean_step, "take the median"),
        (from_train, "the train events, which span the whole iteration"),
        (in_microseconds, "your step_ms is in microseconds"),
        (input_in_microseconds, "your input_ms is in microseconds"),
        (per_step, "divide by the augment events"),
        (augment_only, "counts only the augment events"),
        (whole_span, "its idle time included"),
        (hidden_reversed, "you said hidden="),
        (always_hidden, "so the input is not hidden; you said hidden=True"),
    ],
)
def test_a_wrong_reading_is_told_what_it_got_wrong(mistake: Any, named: str) -> None:
    judges_right_wrong_and_placeholder(NAME, input_hidden, mistake, named)


def test_a_result_of_the_wrong_form_is_named() -> None:
    told = check(NAME, lambda events: input_hidden(events)[:2], quiet=True)
    assert not told and "should be a tuple (step_ms, input_ms, hidden)" in told.message
    told = check(NAME, lambda events: (*input_hidden(events)[:2], 1), quiet=True)
    assert not told and "the hidden in your result should be True or False" in told.message


def test_a_reader_that_changes_the_events_changes_no_other_case() -> None:
    def sorting_in_place(events: Any) -> Any:
        events.sort(key=lambda e: e["start_us"])
        for event in events:
            event["args"]["seen"] = "yes"
        return input_hidden(events)

    assert check(NAME, sorting_in_place, quiet=True)
    for _, (events,) in _nb13._trace_cases():
        assert all("seen" not in event["args"] for event in events)


def test_the_placeholder_a_missing_return_and_an_error_never_raise() -> None:
    assert check(NAME, ..., quiet=True).message.startswith("not answered yet")
    forgot = check(NAME, lambda events: None, quiet=True)
    assert not forgot and "forget `return`" in forgot.message
    told = check(NAME, lambda events: events[0]["no such key"], quiet=True)
    assert not told and not told.checker_bug and "your function raised KeyError" in told.message


# The drawn traces are shaped like the lesson's profile. ---------------------------------


def _inside(event: dict[str, Any], outer: dict[str, Any]) -> bool:
    end = event["start_us"] + event["duration_us"]
    return (
        outer["start_us"] <= event["start_us"] and end <= outer["start_us"] + outer["duration_us"]
    )


@pytest.mark.parametrize("seed", [None, 5])
def test_the_drawn_traces_hold_what_the_lessons_profile_holds(seed: int | None) -> None:
    if seed is None:
        cases = _nb13._trace_cases()
    else:
        with _cases.drawing(seed):
            cases = _nb13._trace_cases()
    hidden = []
    for text, (events,) in cases:
        named = {
            name: [e for e in events if e["name"] == name] for name in {e["name"] for e in events}
        }
        trains, steps = named["train"], named["step"]
        (loop,) = {e["thread"] for e in trains}
        (maker,) = {e["thread"] for e in named["augment"]}
        batches = len(named["augment"])
        assert f"{len(trains)} steps, {batches} batches made" in text
        assert sorted(int(e["args"]["step_num"]) for e in trains) == list(range(len(trains)))
        assert len(trains) < batches <= len(trains) + 2  # the buffer's two slots
        for train in trains:
            held = [e for e in named["wait for batch"] + steps if _inside(e, train)]
            assert sorted(e["name"] for e in held) == ["step", "wait for batch"]
        placements = named["DevicePutWithSharding"]
        assert {e["thread"] for e in placements} == {maker} != {loop}
        assert len(placements) == 2 * batches
        placers = named["shard_args"]
        assert {e["thread"] for e in placers} == {maker} and len(placers) == batches
        assert all(any(_inside(p, a) for a in placers) for p in placements)  # they nest
        reduces = [e for e in events if e["name"].startswith("all-reduce")]
        assert len(reduces) == 8 * len(steps)
        assert all(any(_inside(r, s) for s in steps) for r in reduces)
        starts = [e["start_us"] for e in events]
        assert starts != sorted(starts)  # listed in no particular order
        hidden.append(_keys.trace_reading(events)[2])
    assert True in hidden and False in hidden


def test_every_common_mistake_is_far_from_the_right_reading() -> None:
    """So that a right answer is never taken for one of them, on any drawn trace."""
    for seed in (None, 3, 11, 2024):
        if seed is None:
            cases = _nb13._trace_cases()
        else:
            with _cases.drawing(seed):
                cases = _nb13._trace_cases()
        for _, (events,) in cases:
            right = input_hidden(events)
            for mistake in (summed, mean_step, from_train, per_step, augment_only, whole_span):
                wrong = mistake(events)
                assert not np.allclose(right[:2], wrong[:2], rtol=1e-3), mistake.__name__


# The key reads a real profile as a clock does. ------------------------------------------


def test_the_key_reads_a_real_profile_as_the_clock_does(tmp_path: Any) -> None:
    """A small loop behind prefetch_to_device under jax.profiler: the key's step time and
    input time per batch match what time.perf_counter measured around the same regions."""
    mesh = jax.make_mesh((len(jax.devices()),), ("data",))
    sharding = NamedSharding(mesh, P("data"))
    double = jax.jit(lambda x: x * 2)
    clock: dict[str, list[float]] = {"step": [], "input": []}

    def batches() -> Any:
        for index in range(6):
            start = time.perf_counter()
            with jax.profiler.TraceAnnotation("augment"):
                time.sleep(0.002)
                batch = np.full((8 * mesh.size, 4), index, np.float32)
            clock["input"].append(time.perf_counter() - start)
            yield batch

    def place(batch: Any) -> Any:
        start = time.perf_counter()
        with jax.profiler.TraceAnnotation("place"):
            placed = jax.block_until_ready(jax.device_put(batch, sharding))
        clock["input"].append(time.perf_counter() - start)
        return placed

    double(jax.device_put(np.zeros((8 * mesh.size, 4), np.float32), sharding)).block_until_ready()
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    with (
        jax.profiler.trace(tmp_path, create_perfetto_trace=True, profiler_options=options),
        prefetch_to_device(batches(), size=2, place=place) as placed_batches,
    ):
        for batch in placed_batches:
            start = time.perf_counter()
            with jax.profiler.TraceAnnotation("step"):
                time.sleep(0.006)
                double(batch).block_until_ready()
            clock["step"].append(time.perf_counter() - start)
    (path,) = tmp_path.glob("plugins/profile/*/perfetto_trace.json.gz")
    with gzip.open(path) as file:
        trace = json.load(file)
    events = [
        {
            "name": e["name"],
            "thread": e["tid"],
            "start_us": e["ts"],
            "duration_us": e["dur"],
            "args": e.get("args", {}),
        }
        for e in trace["traceEvents"]
        if e.get("ph") == "X"
    ]
    step_ms, input_ms, hidden = _keys.trace_reading(events)
    clock_step = statistics.median(clock["step"]) * 1e3
    clock_input = sum(clock["input"]) / 6 * 1e3
    assert abs(step_ms - clock_step) <= 0.1 + 0.05 * clock_step, (step_ms, clock_step)
    assert abs(input_ms - clock_input) <= 0.2 + 0.05 * clock_input, (input_ms, clock_input)
    assert hidden == (input_ms <= step_ms)


# 13.collective_hidden: how much of the collectives a real profile hides. ----------------

HIDDEN = "13.collective_hidden"
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "collective-permute", "all-to-all")


def _merged(spans: Any) -> list[list[float]]:
    out: list[list[float]] = []
    for start, stop in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1][1] = max(out[-1][1], stop)
        else:
            out.append([start, stop])
    return out


def collective_hidden(events: Any) -> Any:
    lanes: dict[str, tuple[list[Any], list[Any]]] = {}
    for e in events:
        if "device_ordinal" in e["args"]:
            talk, work = lanes.setdefault(e["args"]["device_ordinal"], ([], []))
            span = (e["start_us"], e["start_us"] + e["duration_us"])
            (talk if e["name"].startswith(KINDS) else work).append(span)
    hidden = total = 0.0
    for talk, work in lanes.values():
        talk, work = _merged(talk), _merged(work)
        total += sum(stop - start for start, stop in talk)
        hidden += sum(max(0.0, min(b, d) - max(a, c)) for a, b in talk for c, d in work)
    return hidden / total


def hidden_by_sweep(events: Any) -> Any:
    """The rule read another way: per device, a sweep over every start and end counting
    the collectives and the compute ops open at each moment; numpy's float back."""
    edges: dict[str, list[tuple[float, int, int]]] = {}
    for e in events:
        device = e["args"].get("device_ordinal")
        if device is None:
            continue
        kind = 0 if e["name"].startswith(KINDS) else 1
        edges.setdefault(device, []).append((e["start_us"], 1, kind))
        edges.setdefault(device, []).append((e["start_us"] + e["duration_us"], -1, kind))
    hidden = total = 0.0
    for moments in edges.values():
        moments.sort()
        open_now, last = [0, 0], moments[0][0]
        for at, change, kind in moments:
            if open_now[0]:
                total += at - last
                hidden += (at - last) if open_now[1] else 0.0
            open_now[kind] += change
            last = at
    return np.float64(hidden / total)


def _hidden_cases(seed: int | None) -> Any:
    if seed is None:
        return _nb13_hidden._trace_cases()
    with _cases.drawing(seed):
        return _nb13_hidden._trace_cases()


@pytest.mark.parametrize("solution", [collective_hidden, hidden_by_sweep])
def test_a_right_hidden_fraction_passes(solution: Any) -> None:
    assert check(HIDDEN, solution, quiet=True)


def test_the_key_and_the_sweep_agree_and_only_the_variations_hide_anything() -> None:
    for seed in (None, 1, 2024):
        for text, (events,) in _hidden_cases(seed):
            expected = _keys.hidden_fraction(events)
            assert np.isclose(expected, hidden_by_sweep(events), rtol=1e-9, atol=1e-12), text
            if "as recorded" in text:
                assert expected == 0.0, text  # on CPU devices nothing is hidden
            else:
                assert 0.02 < expected < 0.98, (text, expected)


def test_the_secret_profiles_are_judged_with_the_keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_cases, "_KEYS", dict(_keys.KEYS))
    with _cases.drawing(777):
        assert check(HIDDEN, collective_hidden, quiet=True)
        told = check(HIDDEN, any_device, quiet=True)
        assert not told and "its own device's compute" in told.message, told.message


def _ops(events: Any) -> Any:
    return [e for e in events if "device_ordinal" in e["args"]]


def _on_one_lane(events: Any, lane: Any) -> Any:
    return [{**e, "args": {**e["args"], "device_ordinal": lane(e)}} for e in events]


def any_device(events: Any) -> Any:
    """Every device's compute counted, whichever device the collective ran on."""
    return collective_hidden(_on_one_lane(_ops(events), lambda e: "0"))


def by_thread(events: Any) -> Any:
    return collective_hidden(_on_one_lane(_ops(events), lambda e: str(e["thread"])))


def every_event_by_thread(events: Any) -> Any:
    """Grouped by thread, the executor's events counted as compute."""
    return collective_hidden(_on_one_lane(events, lambda e: str(e["thread"])))


def mean_of_devices(events: Any) -> Any:
    devices = {e["args"]["device_ordinal"] for e in _ops(events) if e["name"].startswith(KINDS)}
    fractions = [
        collective_hidden([e for e in _ops(events) if e["args"]["device_ordinal"] == d])
        for d in devices
    ]
    return float(np.mean(fractions))


def over_compute(events: Any) -> Any:
    ops = _ops(events)
    talk = sum(
        b - a
        for d in {e["args"]["device_ordinal"] for e in ops}
        for a, b in _merged(
            (e["start_us"], e["start_us"] + e["duration_us"])
            for e in ops
            if e["name"].startswith(KINDS) and e["args"]["device_ordinal"] == d
        )
    )
    work = sum(
        b - a
        for d in {e["args"]["device_ordinal"] for e in ops}
        for a, b in _merged(
            (e["start_us"], e["start_us"] + e["duration_us"])
            for e in ops
            if not e["name"].startswith(KINDS) and e["args"]["device_ordinal"] == d
        )
    )
    return collective_hidden(events) * talk / work


def exposed(events: Any) -> Any:
    return 1 - collective_hidden(events)


def percent(events: Any) -> Any:
    return 100 * collective_hidden(events)


def all_reduce_only(events: Any) -> Any:
    kept = [e for e in events if not e["name"].startswith(KINDS[1:])]
    return collective_hidden(kept)


def summed_pairwise(events: Any) -> Any:
    """Overlaps added pair by pair and durations added up, nothing merged."""
    ops = _ops(events)
    talk = [e for e in ops if e["name"].startswith(KINDS)]
    work = [e for e in ops if not e["name"].startswith(KINDS)]
    hidden = sum(
        max(
            0.0,
            min(c["start_us"] + c["duration_us"], k["start_us"] + k["duration_us"])
            - max(c["start_us"], k["start_us"]),
        )
        for c in talk
        for k in work
        if k["args"]["device_ordinal"] == c["args"]["device_ordinal"]
    )
    return hidden / sum(c["duration_us"] for c in talk)


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        (any_device, "a collective is hidden only behind its own device's compute"),
        (by_thread, "If you grouped the operations by thread"),
        (lambda events: 0.0, "your function finds nothing hidden"),
        (every_event_by_thread, "ThunkExecutor::Execute included"),
        (mean_of_devices, "you averaged the devices' fractions"),
        (exposed, "that is the fraction left exposed"),
        (percent, "your result is a percentage"),
        (all_reduce_only, "the all-gathers"),
        (summed_pairwise, "that time was counted twice"),
    ],
)
def test_a_wrong_hidden_fraction_is_told_what_it_got_wrong(mistake: Any, named: str) -> None:
    judges_right_wrong_and_placeholder(HIDDEN, collective_hidden, mistake, named)


def test_dividing_by_the_compute_time_is_named() -> None:
    told = check(HIDDEN, over_compute, quiet=True)
    assert not told and "you divided by the compute time" in told.message, told.message


def test_the_hidden_fractions_placeholder_and_errors_never_raise() -> None:
    assert check(HIDDEN, ..., quiet=True).message.startswith("not answered yet")
    forgot = check(HIDDEN, lambda events: None, quiet=True)
    assert not forgot and "forget `return`" in forgot.message
    told = check(HIDDEN, lambda events: events[0]["device"], quiet=True)
    assert not told and not told.checker_bug and "your function raised KeyError" in told.message


def test_a_reader_that_changes_the_profile_changes_no_stored_one() -> None:
    def emptying(events: Any) -> Any:
        fraction = collective_hidden(events)
        for event in events:
            event["args"].clear()
        events.clear()
        return fraction

    assert check(HIDDEN, emptying, quiet=True)
    assert all(_ops(traces.stored(name)) for name in traces.NAMES)


# The stored profiles are real and small, and the recorder makes them again. -------------


@pytest.mark.parametrize("name", traces.NAMES)
def test_a_stored_profile_holds_every_devices_steps_and_says_how_it_was_made(name: str) -> None:
    recorded = traces.read(name)
    assert len(json.dumps(recorded)) < 40_000  # kilobytes, not megabytes
    about = recorded["about"]
    assert about["devices"] == 8 and about["platform"] and about["jax"]
    assert about["recorded_with"] == "python -m datarax_course.traces"
    events = traces.stored(name)
    ops = _ops(events)
    assert {e["args"]["device_ordinal"] for e in ops} == {str(d) for d in range(8)}
    for collective in about["collectives_in_program"]:
        held = [e for e in ops if e["name"] == collective]
        assert len(held) == 8 * about["steps_profiled"], collective
    executors = [e for e in events if not e["args"]]
    assert executors and {e["name"] for e in executors} == {traces.EXECUTOR}
    assert traces.stored(name) == events and traces.stored(name) is not events


def test_an_unknown_profile_is_named() -> None:
    with pytest.raises(ValueError, match=r"no stored profile is named 'tp'; the profiles are"):
        traces.read("tp")


def test_the_variations_move_only_the_collectives_and_keep_them_on_their_device() -> None:
    recorded, moved = (
        traces.stored("fsdp"),
        _nb13_hidden._moved(traces.stored("fsdp"), np.random.default_rng(0), 0.6),
    )
    for before, after in zip(recorded, moved, strict=True):
        assert before["args"] == after["args"] and before["name"] == after["name"]
        if before["name"].startswith(KINDS):
            assert after["start_us"] <= before["start_us"]
            assert after["duration_us"] < before["duration_us"]
            assert after["thread"] not in {e["thread"] for e in recorded}
        else:
            assert after == before


def test_the_recorder_profiles_a_real_step_in_which_the_cpu_hides_nothing() -> None:
    """Recorded now, with the JAX installed: every device's all-reduce of each step, and
    (on CPU devices, whose executor runs a device's operations one at a time) almost
    none of it beside the device's compute."""
    from datarax_course.traces import _record

    recorded = _record.profile("data_parallel")
    events = traces.events_of(recorded["events"])
    reduces = [e for e in events if e["name"].startswith("all-reduce")]
    assert len({e["args"]["device_ordinal"] for e in reduces}) == 8
    assert len(reduces) == 8 * _record.STEPS * len(recorded["about"]["collectives_in_program"])
    assert json.loads(_record.text_of(recorded)) == json.loads(json.dumps(recorded))
    if jax.default_backend() == "cpu":
        assert _keys.hidden_fraction(events) < 0.05


def test_every_hidden_fraction_mistake_is_wrong_on_some_profile_of_every_draw() -> None:
    """So that no mistake passes on the grader's profiles either."""
    mistakes = (any_device, by_thread, every_event_by_thread, mean_of_devices, exposed)
    mistakes += (percent, all_reduce_only, summed_pairwise, over_compute)
    for seed in (None, 3, 11, 2024):
        cases = [events for _, (events,) in _hidden_cases(seed)]
        right = [_keys.hidden_fraction(events) for events in cases]
        for mistake in mistakes:
            wrong = [mistake(events) for events in cases]
            assert not np.allclose(right, wrong, rtol=1e-4), (seed, mistake.__name__)

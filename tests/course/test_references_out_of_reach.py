"""The right answers of 07.predicted_epoch, 11.attention_mask, 12.collectives_of,
12.which_mesh and 14.bytes_per_device are computed by the answer keys alone, which a
graded kernel cannot import: graded as the grader grades (the kernel's half without the
keys, the grader's half with them), an honest answer is right and each way of borrowing
the checker's own reference gets "not yet": importing it from the checker's module,
where it no longer is; walking the stack to the checker's frame, which holds no right
answer; calling the lesson's own helper, which calls what the prompt says to do
without; rebuilding the loop a prediction is about; looking the notebook's answers up in
the keys' table (12.which_mesh), which holds none of the cases drawn for grading. The
grader's class test runs the same cheats in notebooks (grader/tests/test_grading_class.py)."""

from __future__ import annotations

import importlib
import inspect
import json
import math
import re
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from datarax import viz
from datarax_course import _cases, _grading, check, grading
from datarax_course._feedback import Feedback

SEED = 2024


def graded(name: str, answer: Any, monkeypatch: pytest.MonkeyPatch, folder: Path) -> Any:
    """`answer` to exercise `name` judged as the grader judges it: recorded where the
    course has no answer keys to import, as in a graded kernel's copy, then judged in a
    process that has them. Returns (what the kernel's own check said, the verdict)."""
    import datarax_course

    record = folder / "record.json"
    with monkeypatch.context() as kernel:
        kernel.setitem(sys.modules, "datarax_course._keys", None)
        kernel.delattr(datarax_course, "_keys", raising=False)
        _grading.harvest({name: "answer"}, {"answer": answer}, SEED, str(record))
        in_the_kernel = check(name, answer, quiet=True)
    steps = json.loads(record.read_text())["answers"][name]
    with monkeypatch.context() as grader:
        grader.setattr(_cases, "_KEYS", {})
        grading.load_keys()  # what the grader does before it judges
        return in_the_kernel, _grading.judged(name, steps, SEED)


def not_yet(verdict: Feedback | None, *said: str) -> None:
    assert verdict is not None and not verdict.ok and not verdict.checker_bug, verdict
    for words in said:
        assert words in verdict.message, (words, verdict.message)


def checker_frames() -> list[Any]:
    """The frames of the course's code on the stack above: the checker's, the harvest's."""
    return [
        record.frame
        for record in inspect.stack()
        if str(record.frame.f_globals.get("__name__", "")).startswith("datarax_course")
    ]


def from_the_checkers_frame(*names: str) -> Any:
    """The first callable named one of `names` in the locals or globals of a checker's
    frame: what a function that walks the stack to the checker finds."""
    for frame in checker_frames():
        for scope in (frame.f_locals, frame.f_globals):
            for key in names:
                if callable(scope.get(key)):
                    return scope[key]
    return None


# 11.attention_mask -----------------------------------------------------------------------


def attention_mask(segment_ids: Any) -> Any:
    ids = np.asarray(segment_ids)
    causal = np.tril(np.ones((len(ids), len(ids)), bool))
    return (ids[:, None] == ids[None, :]) & (ids[:, None] > 0) & causal


def flax_mask(segment_ids: Any) -> Any:
    """The lesson's own helper, as section 3 defines it."""
    ids = jnp.asarray(segment_ids)
    mask = nnx.combine_masks(
        nnx.make_attention_mask(ids > 0, ids > 0),
        nnx.make_attention_mask(ids, ids, jnp.equal),
        nnx.make_causal_mask(ids),
        dtype=bool,
    )
    assert mask is not None
    return np.asarray(mask[0])


def imported_mask(segment_ids: Any) -> Any:
    return importlib.import_module("datarax_course._nb11")._flax_mask(segment_ids)


def walked_mask(segment_ids: Any) -> Any:
    found = from_the_checkers_frame("found", "flax_mask", "_flax_mask", "segment_mask")
    return found(segment_ids) if found else np.zeros((len(segment_ids),) * 2, bool)


# 12.collectives_of -----------------------------------------------------------------------


def collectives_of(text: str) -> dict[str, int]:
    kinds = "all-gather|reduce-scatter|all-reduce|collective-permute|all-to-all"
    found: dict[str, int] = {}
    for shape, kind, phase in re.findall(rf"=\s*(.*?)\s({kinds})(-start|-done)?\(", text):
        if phase == "-start":
            continue
        for dtype, dims in re.findall(r"(pred|[a-z]+\d\w*)\[([\d,]*)\]", shape):
            bits = 8 if dtype == "pred" else int(re.findall(r"\d+", dtype)[0])
            size = math.prod(int(n) for n in dims.split(",") if n)
            found[kind] = found.get(kind, 0) + size * bits // 8
    return found


def imported_reading(text: str) -> Any:
    return importlib.import_module("datarax_course._nb12").collective_bytes(text)


def walked_reading(text: str) -> Any:
    found = from_the_checkers_frame("found", "reading", "collective_bytes", "compiled_reading")
    if found is None:
        return {}
    read = found(text)
    return getattr(read, "expected", read)


# 14.bytes_per_device ---------------------------------------------------------------------


def is_spec(x: Any) -> bool:
    return isinstance(x, P)


def bytes_per_device(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    def on_one_device(tree: Any, tree_specs: Any) -> int:
        pairs = zip(
            jax.tree.leaves(tree), jax.tree.leaves(tree_specs, is_leaf=is_spec), strict=True
        )
        return sum(
            math.prod(NamedSharding(mesh, spec).shard_shape(leaf.shape))
            * np.dtype(leaf.dtype).itemsize
            for leaf, spec in pairs
        )

    state = jax.eval_shape(optimizer.init, params)
    state_specs = state_specs_of(optimizer, state, specs)
    held = on_one_device(params, specs)
    return {"params": held, "grads": held, "optimizer": on_one_device(state, state_specs)}


def state_specs_of(optimizer: Any, state: Any, specs: Any) -> Any:
    """The lesson's `state_specs`."""
    return optax.tree_utils.tree_map_params(
        optimizer,
        lambda _, spec: spec,
        state,
        specs,
        transform_non_params=lambda _: P(),
        is_leaf=is_spec,
    )


def with_the_lessons_helpers(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    """The lesson's section-3 helpers: `placed`, `state_specs` and `held`, which reads
    `viz.leaf_summaries`."""

    def placed(tree: Any, tree_specs: Any) -> Any:
        def place(leaf: Any, spec: Any) -> Any:
            sharding = NamedSharding(mesh, spec)
            return jax.ShapeDtypeStruct(leaf.shape, leaf.dtype, sharding=sharding)

        return jax.tree.map(place, tree, tree_specs, is_leaf=is_spec)

    def held(tree: Any) -> int:
        return sum(leaf.bytes_per_device or 0 for leaf in viz.leaf_summaries(tree))

    state = jax.eval_shape(optimizer.init, params)
    state_specs = state_specs_of(optimizer, state, specs)
    params_held = held(placed(params, specs))
    return {
        "params": params_held,
        "grads": params_held,
        "optimizer": held(placed(state, state_specs)),
    }


def walked_truth(params: Any, optimizer: Any, mesh: Any, specs: Any) -> Any:
    """The checker's case found on its frame, and the checker's old `_Truth` made of it;
    failing that, the keys' code the frame holds, called on the arguments."""
    cases = [frame.f_locals["case"] for frame in checker_frames() if "case" in frame.f_locals]
    try:
        truth = importlib.import_module("datarax_course._nb14")._Truth(cases[0])
    except (AttributeError, IndexError):
        truth = from_the_checkers_frame("found")(params, optimizer, mesh, specs)
    return {"params": truth.params, "grads": truth.params, "optimizer": truth.optimizer}


# 12.which_mesh (a formula: the notebook reads the keys' table, the grader the keys) -----


def which_mesh(params: Any, layer: Any, hosts: Any, chips: Any, memory: Any, act: Any) -> Any:
    devices = int(hosts * chips)

    def needed(data: int, model: int, stage: int) -> float:
        def over(first: int) -> int:
            return model * (data if stage >= first else 1)

        state = 2 * params / over(3) + 2 * params / over(2) + 12 * params / over(1)
        return state + (4 * layer / model if stage == 3 else 0) + act

    fitting = [
        (model, stage, data)
        for model in range(1, int(chips) + 1)
        if chips % model == 0
        for data in range(1, devices // model + 1)
        if devices // model % data == 0
        for stage in range(4)
        if needed(data, model, stage) <= memory
    ]
    model, stage, data = min(fitting)
    return devices // (model * data), data, model, stage


def imported_sharding(*case: Any) -> Any:
    return importlib.import_module("datarax_course._keys").least_sharding(*case)["answer"]


def walked_sharding(*case: Any) -> Any:
    """The checker's own `reference`, found on its frame, asked about its cases."""
    frame = next(f for f in checker_frames() if "given" in f.f_locals)
    given = [(text, tuple(float(v) for v in args)) for text, args in frame.f_locals["given"]]
    truths = frame.f_globals["reference"]("12.which_mesh", given)
    return truths[[tuple(float(v) for v in case) == args for _, args in given].index(True)]


def _public_answers() -> dict[tuple[float, ...], Any]:
    """The notebook's cases' answers, read from the table, by the case's arguments."""
    cases = importlib.import_module("datarax_course._nb12_mesh")._cases()
    tables = importlib.import_module("datarax_course._cases").answer_tables()
    answers = [truth["answer"] for truth in tables["12.which_mesh"]["expected"]]
    return {tuple(map(float, case)): a for (_, case), a in zip(cases, answers, strict=True)}


PUBLIC_MESHES = _public_answers()


def tabled_sharding(*case: Any) -> Any:
    """The table's answer where the case is one of the notebook's, a guess elsewhere."""
    return PUBLIC_MESHES.get(tuple(map(float, case)), (1, 1, 1, 0))


# 13.collective_hidden (a formula: the grader's key judges the secret profiles) ---------


def hidden_from_the_checker(events: Any) -> Any:
    return importlib.import_module("datarax_course._nb13_hidden").hidden_fraction(events)


def hidden_from_the_keys(events: Any) -> Any:
    return importlib.import_module("datarax_course._keys").hidden_fraction(events)


HONEST = {
    "11.attention_mask": attention_mask,
    "12.collectives_of": collectives_of,
    "14.bytes_per_device": bytes_per_device,
}
CHEATS = [
    ("11.attention_mask", imported_mask, "your function raised AttributeError"),
    ("11.attention_mask", flax_mask, "Flax's make_attention_mask"),
    ("11.attention_mask", walked_mask, "should be"),
    ("12.collectives_of", imported_reading, "your function raised AttributeError"),
    ("12.collectives_of", walked_reading, "your dict has no"),
    ("14.bytes_per_device", with_the_lessons_helpers, "datarax.viz.leaf_summaries"),
    ("14.bytes_per_device", walked_truth, "your function raised"),
    ("13.collective_hidden", hidden_from_the_checker, "your function raised AttributeError"),
    ("12.which_mesh", imported_sharding, "your function raised ModuleNotFoundError"),
    ("12.which_mesh", walked_sharding, "your function raised NotJudgedHere"),
    ("12.which_mesh", tabled_sharding, "your axes multiply to 1 x 1 x 1 = 1"),
    ("13.collective_hidden", hidden_from_the_keys, "your function raised"),
]


@pytest.mark.parametrize("name", sorted(HONEST))
def test_an_honest_answer_is_right_under_the_grader(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    in_the_kernel, verdict = graded(name, HONEST[name], monkeypatch, tmp_path)
    assert not in_the_kernel and "the grader computes" in in_the_kernel.message, in_the_kernel
    assert verdict is not None and verdict.ok, verdict
    assert check(name, HONEST[name], quiet=True)  # and in a notebook, with the keys


def test_a_formulas_honest_answer_is_right_in_a_kernel_and_under_the_grader(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """12.which_mesh: a kernel without the keys checks the notebook's cases with the keys'
    table; the grader judges the secret ones with the keys."""
    in_the_kernel, verdict = graded("12.which_mesh", which_mesh, monkeypatch, tmp_path)
    assert in_the_kernel, in_the_kernel
    assert verdict is not None and verdict.ok, verdict


@pytest.mark.parametrize(
    ("name", "cheat", "said"), CHEATS, ids=[cheat.__name__ for _, cheat, _ in CHEATS]
)
def test_a_borrowed_reference_gets_not_yet(
    name: str, cheat: Any, said: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _, verdict = graded(name, cheat, monkeypatch, tmp_path)
    not_yet(verdict, said)


@pytest.mark.parametrize("cheat", [walked_mask, walked_reading, walked_truth])
def test_in_a_notebook_the_keys_on_the_stack_are_refused(cheat: Any) -> None:
    """Where the keys are installed (a reader's own notebook) the checker's frame holds
    their code, which is banned while the reader's function runs."""
    name = next(n for n, c, _ in CHEATS if c is cheat)
    told = check(name, cheat, quiet=True)
    assert not told and "the checker's own" in told.message, told


def test_the_checkers_modules_hold_no_reference() -> None:
    """What the cheats imported is gone from the modules a kernel imports."""
    gone = {
        "_nb07": ["scheduled_ms"],
        "_nb11": ["_flax_mask", "_flax_masks"],
        "_nb12": ["collective_bytes", "collectives", "shape_bytes", "_variants"],
        "_nb12_mesh": ["least_sharding", "MIXED_PRECISION_BYTES", "GATHERED_LAYER_BYTES"],
        "_nb13_hidden": ["hidden_fraction", "_merged", "_pooled", "_lanes", "_mistakes"],
        "_nb14": ["_Truth", "_state_specs", "_leaf_bytes"],
        "_real": ["_timed_ms", "_xla_count"],
    }
    for module, names in gone.items():
        loaded = importlib.import_module(f"datarax_course.{module}")
        assert not [n for n in names if hasattr(loaded, n)], module


# 07.predicted_epoch, on the real clock ---------------------------------------------------


def replayed_from_the_checkers_source(
    make_batches: Any, step: Any, steps: int, prefetch: bool
) -> float:
    """Two batches and a step timed, then the checker's own source and step rebuilt at
    those speeds and the loop timed over them."""
    real = importlib.import_module("datarax_course._real")
    batches = make_batches()
    start = time.perf_counter()
    batch = next(batches)
    first = time.perf_counter()
    next(batches)
    input_ms = (time.perf_counter() - first) * 1e3
    opening_ms = (first - start) * 1e3 - input_ms
    start = time.perf_counter()
    step(batch)
    step_ms = (time.perf_counter() - start) * 1e3
    source, rebuilt = real._source(input_ms, opening_ms), real._step(step_ms)
    start = time.perf_counter()
    for batch in source():
        rebuilt(batch)
    return (time.perf_counter() - start) * 1e3


def test_a_loop_rebuilt_from_the_checkers_source_gets_not_yet(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Refused in the kernel (a loop of its own), and so judged by the grader, which
    never times a loop for it."""
    start = time.perf_counter()
    _, verdict = graded(
        "07.predicted_epoch", replayed_from_the_checkers_source, monkeypatch, tmp_path
    )
    not_yet(verdict, "a loop of its own")
    assert time.perf_counter() - start < 10

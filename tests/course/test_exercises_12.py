"""The checker of tutorial 12: a right reading of compiled programs passes, however it is
written; each common wrong reading is told what it got wrong; the placeholder is not
answered yet, and nothing the reader's function does makes it raise. The checker's own
reading of a text is held to texts whose bytes are worked out by hand."""

from __future__ import annotations

import re
from typing import Any

import jax
import numpy as np
import pytest

from datarax_course import _keys, _nb12, check
from tests._support.exercise_checks import judges_right_wrong_and_placeholder

NAME = "12.collectives_of"
KINDS = "all-gather|reduce-scatter|all-reduce|collective-permute|all-to-all"
BITS = {"pred": 8, "s8": 8, "u8": 8, "bf16": 16, "f16": 16, "s32": 32, "u32": 32, "f32": 32}
BITS |= {"s64": 64, "u64": 64, "f64": 64}


def _reading(text: str, *, skip: str | None = "-start", size: Any = None) -> dict[str, int]:
    """Bytes by kind of the collectives of `text`: the instructions with phase `skip` left
    out, each sized by `size(shape text)` (its arrays' bytes unless given)."""
    found: dict[str, int] = {}
    pattern = rf"=\s*(.*?)\s({KINDS})(-start|-done)?\("
    for shape, kind, phase in re.findall(pattern, text):
        if skip is not None and phase == skip:
            continue
        found[kind] = found.get(kind, 0) + (size or _bytes)(shape)
    return found


def _bytes(shape: str) -> int:
    arrays = re.findall(r"(pred|[a-z]+\d\w*)\[([\d,]*)\]", shape)
    return sum(
        int(np.prod([int(n) for n in dims.split(",") if n])) * BITS[dtype] // 8
        for dtype, dims in arrays
    )


def collectives_of(text: str) -> dict[str, int]:
    return _reading(text)


def line_by_line(text: str) -> dict[str, int]:
    """Another right reading: split each line at " = ", then at the opcode."""
    found: dict[str, int] = {}
    for line in text.splitlines():
        if " = " not in line:
            continue
        shape_and_op = line.split(" = ", 1)[1]
        for kind in KINDS.split("|"):
            for phase in ("", "-done"):
                marker = f" {kind}{phase}("
                if marker in shape_and_op:
                    shape = shape_and_op.split(marker, 1)[0]
                    found[kind] = found.get(kind, 0) + _bytes(shape)
    return found


def test_a_right_reading_passes_however_it_is_written() -> None:
    assert check(NAME, collectives_of, quiet=True)
    assert check(NAME, line_by_line, quiet=True)


def test_the_checkers_reading_of_texts_worked_out_by_hand() -> None:
    text = """
ENTRY %main (p: f32[8,16]) -> f32[64,16] {
  %p = f32[8,16]{1,0} parameter(0)
  %all-gather-start = (f32[8,16]{1,0}, f32[64,16]{1,0}) all-gather-start(%p), dimensions={0}
  %all-gather-done = f32[64,16]{1,0} all-gather-done(%all-gather-start)
  %ar = (bf16[4]{0}, /*index=1*/pred[3]{0}) all-reduce(%a, %b), to_apply=%add
  %cp-start = (f32[2]{0}, f32[2]{0}, u32[], u32[]) collective-permute-start(%c)
  %cp-done = f32[2]{0} collective-permute-done(%cp-start)
  %rs = f32[1,16]{1,0:T(8,128)} reduce-scatter(f32[8,16]{1,0} %p), dimensions={0}
  %fusion = f32[8]{0} fusion(%x), kind=kLoop, metadata={op_name="all-reduce"}
  ROOT %a2a = (s32[2]{0}, s32[2]{0}) all-to-all(%d, %e), replica_groups={{0,1}}
}
"""
    assert _keys.compiled_reading(text).expected == {
        "all-gather": 64 * 16 * 4,
        "all-reduce": 4 * 2 + 3,
        "collective-permute": 2 * 4,
        "reduce-scatter": 16 * 4,
        "all-to-all": 2 * 2 * 4,
    }
    ops = _keys.collectives(text)
    assert [(op.kind, op.phase) for op in ops][:2] == [
        ("all-gather", "-start"),
        ("all-gather", "-done"),
    ]
    assert _keys.shape_bytes("(f32[8,2]{1,0}, /*index=1*/bf16[4]{0})") == 72
    assert _keys.shape_bytes("token[]") == 0


def test_the_compiled_programs_hold_what_their_descriptions_say() -> None:
    """The data-parallel program all-reduces every gradient; FSDP all-gathers the weights
    and reduce-scatters their gradient, 1/N of them; the five-collective program has all
    five kinds."""
    cases = dict(_nb12._cases()[:4])
    data, fsdp, split, five = (collectives_of(text) for text in cases.values())
    devices = len(jax.devices())
    sizes = _nb12._sizes(devices)
    weights = sizes.inputs * sizes.hidden + sizes.hidden * sizes.outputs
    assert set(data) == {"all-reduce"}
    assert data["all-reduce"] in (2 * weights, 4 * weights)  # the CPU sums bf16 as f32
    assert set(fsdp) == {"all-gather", "reduce-scatter"}
    assert fsdp["all-gather"] == devices * fsdp["reduce-scatter"]
    assert set(split) == {"all-reduce"}
    assert set(five) == set(KINDS.split("|"))
    assert any(op.result.startswith("(") for op in _keys.collectives(cases[list(cases)[3]]))


def twice(text: str) -> dict[str, int]:
    return _reading(text, skip=None)


def operands(text: str) -> dict[str, int]:
    """The bytes of each collective's operands, found by their names' definitions."""
    shapes = dict(re.findall(r"%([\w.\-]+) = (.*?) [a-z][\w\-]*\(", text))
    found: dict[str, int] = {}
    for line in text.splitlines():
        hit = re.search(rf"\s({KINDS})(-start|-done)?\((.*?)\)", line)
        if hit and hit.group(2) != "-done" and " = " in line:
            names = re.findall(r"%([\w.\-]+)", hit.group(3))
            size = sum(_bytes(shapes.get(name, "")) for name in names)
            found[hit.group(1)] = found.get(hit.group(1), 0) + size
    return found


def without(kind: str) -> Any:
    def reading(text: str) -> dict[str, int]:
        found = collectives_of(text)
        found.pop(kind, None)
        return found

    return reading


def first_array_only(text: str) -> dict[str, int]:
    return _reading(text, size=lambda shape: _bytes(shape.split(", ")[0] + ")"))


def elements(text: str) -> dict[str, int]:
    def count(shape: str) -> int:
        arrays = re.findall(r"(pred|[a-z]+\d\w*)\[([\d,]*)\]", shape)
        return sum(int(np.prod([int(n) for n in dims.split(",") if n])) for _, dims in arrays)

    return _reading(text, size=count)


def with_zeros(text: str) -> dict[str, int]:
    found = collectives_of(text)
    return {kind: found.get(kind, 0) for kind in KINDS.split("|")}


def underscored(text: str) -> dict[str, int]:
    return {kind.replace("-", "_"): n for kind, n in collectives_of(text).items()}


@pytest.mark.parametrize(
    ("mistake", "named"),
    [
        (operands, "you added up the operands' bytes"),
        (without("reduce-scatter"), "your dict has no 'reduce-scatter'"),
        (without("all-to-all"), "your dict has no 'all-to-all'"),
        (first_array_only, "you read only the first array of a tuple-shaped result"),
        (elements, "you counted elements, not bytes"),
        (with_zeros, "but the program has no"),
        (underscored, "which is not a collective"),
    ],
)
def test_a_wrong_reading_is_told_what_it_got_wrong(mistake: Any, named: str) -> None:
    judges_right_wrong_and_placeholder(NAME, collectives_of, mistake, named)


def starts_only(text: str) -> dict[str, int]:
    return _reading(text, skip="-done")


def test_an_asynchronous_pair_counted_twice_or_by_its_start_is_named() -> None:
    """The TPU's text holds a collective-permute-start and -done; the CPU's never do."""
    tpu_text = _nb12._cases()[-1][1]
    phases = [(op.kind, op.phase) for op in _keys.collectives(tpu_text)]
    assert ("collective-permute", "-start") in phases
    assert ("collective-permute", "-done") in phases
    assert _keys.compiled_reading(tpu_text).expected["collective-permute"] == 128 * 1024 * 4
    judges_right_wrong_and_placeholder(NAME, collectives_of, twice, "counted an asynchronous")
    judges_right_wrong_and_placeholder(NAME, collectives_of, starts_only, "read the -done")


def test_a_wrong_number_of_bytes_names_the_instruction() -> None:
    def one_byte_more(text: str) -> dict[str, int]:
        return {kind: n + 1 for kind, n in collectives_of(text).items()}

    told = check(NAME, one_byte_more, quiet=True)
    assert not told and "results hold" in told.message and "your dict says" in told.message
    assert "all-reduce(" in told.message, told.message  # the instruction, as printed


def test_the_placeholder_a_missing_return_and_an_error_never_raise() -> None:
    assert check(NAME, ..., quiet=True).message.startswith("not answered yet")
    forgot = check(NAME, lambda text: None, quiet=True)
    assert not forgot and "forget `return`" in forgot.message
    told = check(NAME, lambda text: text.missing_method(), quiet=True)
    assert not told and not told.checker_bug and "your function raised" in told.message
    for junk in ([("all-reduce", 4)], {"all-reduce": "4 kB"}, {"all-reduce": -4}, {4: 4}):
        told = check(NAME, lambda text, junk=junk: junk, quiet=True)
        assert not told and not told.checker_bug and "raised" not in told.message, told


def test_the_cases_are_drawn() -> None:
    from datarax_course._cases import drawing

    public = _nb12._sizes(8)
    with drawing(12345):
        secret = _nb12._sizes(8)
        assert check(NAME, collectives_of, quiet=True)
    assert public != secret

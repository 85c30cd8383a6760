"""`examples/train_lm.py`: a small language model on packed rows of mixed documents.

One run of 80 steps on 8 devices in this process is the reference: its loss falls,
every source's loss is reported, and its evaluation counts each held-out row once. The
same script on Explicit mesh axes, and on 2 processes of 4 devices under `launch_local`,
must give the same losses: the global batches are the same, and the loss is divided by
the target tokens of the global batch, not of a host's rows.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import math
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np
import pytest

from datarax.distributed import launch_local
from datarax.pipeline.documents import write_documents

SCRIPT = Path(__file__).parents[2] / "examples" / "train_lm.py"
STEPS, SHORT, BATCH, LENGTH = 80, 12, 16, 64
# 900 documents give 58 held-out rows: the last evaluation batch is padded.
OPTIONS = ["--documents", "900", "--length", str(LENGTH), "--batch-size", str(BATCH)]
OPTIONS += ["--dim", "32", "--learning-rate", "1e-2", "--print-every", "20"]
NAMES = ["web", "code", "math"]


@pytest.fixture(scope="module")
def example() -> Iterator[ModuleType]:
    """The script as a module (registered, as its dataclass asks), so tests call `main`."""
    spec = importlib.util.spec_from_file_location("train_lm_example", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    yield module
    del sys.modules[spec.name]


def _run(example: ModuleType, *options: str) -> tuple[dict[str, Any], str]:
    """`main` on `OPTIONS` and `options`: what it returned and what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        result = example.main([*OPTIONS, *options])
    return result, printed.getvalue()


@pytest.fixture(scope="module")
def reference(example: ModuleType) -> tuple[dict[str, Any], str]:
    return _run(example, "--steps", str(STEPS))


def _printed_sources(output: str) -> list[dict[str, float]]:
    """Each printed step line's loss by source."""
    lines = [line for line in output.splitlines() if line.startswith("step")]
    return [
        {
            name: float(value)
            for name, value in re.findall(r"(\w+) ([\d.]+|nan)", line.split(":")[1])
        }
        for line in lines
    ]


def test_the_loss_falls_and_every_source_is_reported(
    reference: tuple[dict[str, Any], str],
) -> None:
    result, output = reference
    losses = result["losses"]
    assert len(losses) == STEPS and all(math.isfinite(loss) for loss in losses)
    assert np.mean(losses[-3:]) < 0.8 * np.mean(losses[:3]), losses
    assert result["names"] == NAMES
    printed = _printed_sources(output)
    assert re.findall(r"^step +(\d+)", output, re.M) == ["20", "40", "60", "80"]
    assert all(list(line) == NAMES for line in printed)
    for name in NAMES:  # each source's own loss falls, from the first 20 steps to the last
        assert printed[-1][name] < 0.95 * printed[0][name], (name, printed)
    assert "1 process, 8 devices, mesh {'data': 8} (auto axes)" in output


def test_evaluation_counts_every_held_out_row_once(
    example: ModuleType, reference: tuple[dict[str, Any], str]
) -> None:
    result, output = reference
    corpus = example.open_corpus(
        None, None, None, documents=900, vocab_size=None, bos_id=None, eos_id=None, seed=0
    )
    held_out = corpus.packed(True, LENGTH, 0)
    assert len(held_out) % BATCH and result["eval_rows"] == len(held_out)
    rows = [held_out[row] for row in range(len(held_out))]  # every row once, by hand
    batch = {key: np.stack([row[key] for row in rows]) for key in rows[0]}
    model = result["model"]
    _, totals = jax.jit(lambda batch: example.losses(model(batch), batch, len(NAMES)))(batch)
    totals = np.asarray(totals)
    expected = totals[0].sum() / totals[1].sum()
    assert result["eval_loss"] == pytest.approx(expected, rel=1e-4)
    for name, total, count in zip(NAMES, *totals, strict=True):
        assert result["eval_sources"][name] == pytest.approx(total / count, rel=1e-4)
    assert f"eval: {len(held_out)} held-out rows, loss {result['eval_loss']:.4f}" in output


@pytest.fixture(scope="module")
def explicit(example: ModuleType) -> tuple[dict[str, Any], str]:
    return _run(example, "--steps", str(SHORT), "--axis-types", "explicit")


def test_explicit_axes_give_the_same_losses(
    explicit: tuple[dict[str, Any], str], reference: tuple[dict[str, Any], str]
) -> None:
    result, output = explicit
    assert "(explicit axes)" in output
    np.testing.assert_allclose(result["losses"], reference[0]["losses"][:SHORT], rtol=1e-5)


@pytest.mark.multihost
def test_two_processes_give_process_0_the_one_process_losses(
    explicit: tuple[dict[str, Any], str], tmp_path: Path
) -> None:
    log = tmp_path / "losses.jsonl"
    options = ["--steps", str(SHORT), "--axis-types", "explicit", "--log", str(log)]
    runs = launch_local(
        SCRIPT, num_processes=2, devices_per_process=4, args=[*OPTIONS, *options], timeout_s=120
    )
    assert "2 processes, 8 devices, mesh {'data': 8} (explicit axes)" in runs[0].output
    assert "step" not in runs[1].output  # only process 0 prints
    records = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [record for record in records if "step" in record]
    expected = explicit[0]
    assert [record["step"] for record in steps] == list(range(1, SHORT + 1))
    np.testing.assert_allclose([r["loss"] for r in steps], expected["losses"], rtol=1e-5)
    for name in NAMES:
        found = [r["sources"][name] for r in steps]
        wanted = [h["sources"][name] for h in expected["history"]]
        np.testing.assert_allclose(found, wanted, rtol=1e-5)
    (evaluation,) = [record for record in records if "eval_loss" in record]
    assert evaluation["eval_rows"] == expected["eval_rows"]
    assert evaluation["eval_loss"] == pytest.approx(expected["eval_loss"], rel=1e-5)


def test_token_stores_as_data(example: ModuleType, tmp_path: Path) -> None:
    train, held_out = example.synthetic_corpus(60, 64, seed=1)
    paths = {}
    for name in ("web", "code"):
        paths[name] = write_documents(train[name], tmp_path / name)
        write_documents(held_out[name], tmp_path / f"{name}_eval")
    data = ",".join(f"{name}={tmp_path / name}" for name in paths)
    held = ",".join(f"{name}={tmp_path / name}_eval" for name in paths)
    result, output = _run(
        example,
        *("--data", data, "--eval-data", held, "--weights", "web=0.7,code=0.3"),
        *("--vocab-size", "64", "--eos-id", "2", "--steps", "2"),
    )
    assert result["names"] == ["web", "code"] and len(result["losses"]) == 2
    assert math.isfinite(result["eval_loss"]) and result["eval_rows"] > 0
    assert "sources web, code" in output


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        ("parse_mesh", "model=8", "has no 'data' axis"),
        ("parse_mesh", "data=0", "must be 1 or more, or -1"),
        ("parse_mesh", "data=-1,model=-1", "only one axis may have size -1"),
        ("parse_mesh", "data=two", "is not AXIS=SIZE"),
        ("parse_weights", "web=0.7,code", "is not NAME=VALUE"),
        ("parse_weights", "web=much", "the weight of 'web' must be a number"),
        ("parse_weights", "web=1,web=2", "'web' is named twice"),
    ],
)
def test_option_errors(example: ModuleType, parse: str, text: str, message: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=message):
        getattr(example, parse)(text)


def test_corpus_and_mesh_errors(example: ModuleType) -> None:
    options: dict[str, Any] = {"documents": 30, "bos_id": None, "eos_id": None, "seed": 0}
    with pytest.raises(ValueError, match="--data needs --vocab-size"):
        example.open_corpus({"web": "store"}, None, None, vocab_size=None, **options)
    with pytest.raises(ValueError, match=r"--eval-data names the sources \['code'\]"):
        example.open_corpus({"web": "a"}, {"code": "b"}, None, vocab_size=64, **options)
    with pytest.raises(ValueError, match="needs --vocab-size 11 or more"):
        example.open_corpus(None, None, None, vocab_size=8, **options)
    with pytest.raises(ValueError, match="does not fit the 8 devices"):
        example.build_mesh({"data": 3}, "auto")
    with pytest.raises(ValueError, match="--dim 30 must be a multiple of --heads 4"):
        example.CausalLM(64, 16, 30, 4, 1, None, rngs=example.nnx.Rngs(0))


def test_the_readmes_claims_about_explicit_axes_hold() -> None:
    """README: `jax.make_mesh` gives Explicit axes on jax 0.10 and Auto on 0.7, and on
    Explicit axes a lookup of a replicated table at tokens split over 'data' raises
    `ShardingTypeError` unless its output sharding is written out."""
    from jax.sharding import AxisType, NamedSharding
    from jax.sharding import PartitionSpec as P

    version = tuple(int(part) for part in jax.__version__.split(".")[:2])
    mesh = jax.make_mesh((8,), ("data",))
    if version >= (0, 10):
        assert mesh.axis_types == (AxisType.Explicit,)
    elif version <= (0, 7):
        assert mesh.axis_types == (AxisType.Auto,)
    explicit = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Explicit,))
    table = jax.device_put(np.ones((16, 4), np.float32), NamedSharding(explicit, P()))
    tokens = jax.device_put(np.zeros((8, 3), np.int32), NamedSharding(explicit, P("data")))
    rows = NamedSharding(explicit, P("data", None, None))
    looked_up = jax.jit(lambda t, i: t.at[i].get(out_sharding=rows))(table, tokens)
    assert looked_up.sharding.spec == rows.spec
    if version >= (0, 10):
        with pytest.raises(Exception) as raised:
            jax.jit(lambda t, i: t[i])(table, tokens)
        assert type(raised.value).__name__ == "ShardingTypeError"

"""Bad and odd arguments to the public functions of docs/api.md get our error, quickly.

The rule every test here holds the library to: an exception a public function raises
for an argument is a TypeError or ValueError (an IndexError for an index) whose
traceback ends on a ``raise`` statement in a file of the ``datarax`` package (so it is
our message, not an error of numpy, matplotlib or JAX passing through); each call
returns or raises within a few seconds; and numpy arguments are left as they were.
Pictures are sized by what they draw, never by the value of a host or device id.
"""

from __future__ import annotations

import linecache
import tempfile
import traceback
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import matplotlib.pyplot as plt
import numpy as np
import pytest
from _support.limits import TooSlow, time_limit
from _support.snapshots import snapshot
from flax import nnx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import datarax
import datarax_course
from datarax import distributed, viz
from datarax.pipeline import Documents, Mixture, Packed, write_documents
from datarax.sharding import (
    RowLedger,
    global_to_local_shape,
    local_index,
    local_to_global_shape,
    pad_to_multiple,
    pretend_hosts,
    shard_bounds,
)
from datarax_course import _core, figures

# The library and the course beside it: an error of either is raised by one of their own.
PACKAGES = [Path(module.__file__ or "").resolve().parent for module in (datarax, datarax_course)]
CALL_LIMIT_S = 15
MESH = jax.make_mesh((8,), ("data",))
ROWS = NamedSharding(MESH, P("data"))
ARRAY = jax.device_put(np.zeros((16, 4), np.float32), ROWS)
MASK = jax.device_put(np.arange(16) < 13, ROWS)
LEDGER = RowLedger(ROWS, 16, host_of=pretend_hosts(2))
EVENTS = [("input", "0", 0.0, 0.01), ("step", "0", 0.01, 0.03)]
FILES = Path(tempfile.mkdtemp(prefix="datarax-fuzz-"))
np.save(FILES / "flat.npy", np.array([3, 1, 0, 2, 0], np.uint16))
DOCS = Documents([np.arange(5), np.arange(3), np.arange(7)])
PACKED = Packed(DOCS, 4)
MIXTURE = Mixture({"a": DOCS, "b": DOCS}, [1, 1], rngs=nnx.Rngs(0))


def _new_store() -> Path:
    return Path(tempfile.mkdtemp(dir=FILES)) / "store"


def _is_ours(error: BaseException) -> bool:
    """Whether `error` is a TypeError/ValueError/IndexError raised by a `raise` in datarax
    itself (or in the course package)."""
    if not isinstance(error, (TypeError, ValueError, IndexError)):
        return False
    last = traceback.extract_tb(error.__traceback__)[-1]
    line = linecache.getline(last.filename, last.lineno or 0).strip()
    where = Path(last.filename).resolve()
    return any(where.is_relative_to(p) for p in PACKAGES) and line.startswith("raise")


def _call_checked(call: Callable[[Any], Any], value: Any) -> None:
    """Calls `call(value)` and asserts the rule of this module."""
    before = snapshot(value)
    try:
        with time_limit(CALL_LIMIT_S):
            call(value)
    except (TypeError, ValueError, IndexError) as error:
        where = traceback.extract_tb(error.__traceback__)[-1]
        assert _is_ours(error), (
            f"{type(error).__name__} from {where.filename}:{where.lineno}, not a raise of "
            f"datarax: {error}"
        )
    except TooSlow:
        pytest.fail(f"the call did not end within {CALL_LIMIT_S} s")
    except Exception as error:
        where = traceback.extract_tb(error.__traceback__)[-1]
        pytest.fail(f"raw {type(error).__name__} from {where.filename}:{where.lineno}: {error}")
    finally:
        plt.close("all")
    assert snapshot(value) == before, "the call changed its argument"


def _hashable(value: Any) -> bool:
    try:
        hash(value)
    except TypeError:
        return False
    return True


# One entry per public function and argument: a call with `v` in that argument's place
# (or inside it, e.g. one strip of plot_rows) and good values everywhere else.
CALLS: dict[str, Callable[[Any], Any]] = {
    "plot_sharding(array)": lambda v: viz.plot_sharding(v),
    "plot_sharding(color_by)": lambda v: viz.plot_sharding(ARRAY, color_by=v),
    "plot_sharding(dim_names)": lambda v: viz.plot_sharding(ARRAY, dim_names=v),
    "plot_sharding(title)": lambda v: viz.plot_sharding(ARRAY, title=v),
    "plot_sharding(width)": lambda v: viz.plot_sharding(ARRAY, width=v),
    "plot_ledger(ledger)": lambda v: viz.plot_ledger(v),
    "plot_ledger(width)": lambda v: viz.plot_ledger(LEDGER, width=v),
    "plot_ledger(max_bars)": lambda v: viz.plot_ledger(LEDGER, max_bars=v),
    "plot_ledger(title)": lambda v: viz.plot_ledger(LEDGER, title=v),
    "summarize(tree)": lambda v: viz.summarize(v),
    "summarize(leaf)": lambda v: viz.summarize({"x": v, "y": ARRAY}),
    "summarize(root)": lambda v: viz.summarize({"x": ARRAY}, root=v),
    "summary_table(tree)": lambda v: viz.summary_table({"x": v}),
    "summary_table(root)": lambda v: viz.summary_table({"x": ARRAY}, root=v),
    "leaf_summaries(tree)": lambda v: viz.leaf_summaries([v, ARRAY]),
    "leaf_summaries(root)": lambda v: viz.leaf_summaries({"x": ARRAY}, root=v),
    "format_spec(sharding)": lambda v: viz.format_spec(v),
    "device_colors(count)": lambda v: viz.device_colors(v),
    "host_colors(count)": lambda v: viz.host_colors(v),
    "host_hatch(host)": lambda v: viz.host_hatch(v),
    "text_color(fill)": lambda v: viz.text_color(v),
    "plot_devices(layout)": lambda v: figures.plot_devices(v),
    "plot_devices(titles)": lambda v: figures.plot_devices(MESH.devices, titles=v),
    "plot_devices(host_of)": lambda v: figures.plot_devices(MESH.devices, host_of=v),
    "plot_devices(host_of value)": lambda v: figures.plot_devices(
        MESH.devices, host_of={**pretend_hosts(2), 3: v}
    ),
    "plot_devices(this_host)": lambda v: figures.plot_devices(MESH.devices, this_host=v),
    "plot_devices(color_by)": lambda v: figures.plot_devices(MESH.devices, color_by=v),
    "plot_host_rows(shardings)": lambda v: figures.plot_host_rows(v, 16),
    "plot_host_rows(num_rows)": lambda v: figures.plot_host_rows({"rows": ROWS}, v),
    "plot_host_rows(host_of)": lambda v: figures.plot_host_rows({"rows": ROWS}, 16, host_of=v),
    "plot_host_rows(title)": lambda v: figures.plot_host_rows({"rows": ROWS}, 16, title=v),
    "plot_mask(masks)": lambda v: figures.plot_mask(v),
    "plot_mask(panel)": lambda v: figures.plot_mask({"a": MASK, "b": v}),
    "plot_mask(title)": lambda v: figures.plot_mask(MASK, title=v),
    "plot_estimates(values)": lambda v: figures.plot_estimates(v, exact="exact"),
    "plot_estimates(value)": lambda v: figures.plot_estimates(
        {"exact": 0.5, "b": v}, exact="exact"
    ),
    "plot_estimates(exact)": lambda v: figures.plot_estimates({"exact": 0.5}, exact=v),
    "plot_estimates(quantity)": lambda v: figures.plot_estimates({"a": 1.0}, exact="a", quantity=v),
    "plot_estimates(digits)": lambda v: figures.plot_estimates({"a": 1.0}, exact="a", digits=v),
    "plot_estimates(title)": lambda v: figures.plot_estimates({"a": 1.0}, exact="a", title=v),
    "plot_rows(strips)": lambda v: figures.plot_rows(v),
    "plot_rows(strip)": lambda v: figures.plot_rows({"a": [0, 1], "b": v}, color_by="host"),
    "plot_rows(color_by)": lambda v: figures.plot_rows({"a": [0, 1]}, color_by=v),
    "plot_rows(names)": lambda v: figures.plot_rows({"a": [0, 1]}, names=v),
    "plot_rows(name)": lambda v: figures.plot_rows({"a": [0, 1]}, names={0: v}),
    "plot_rows(title)": lambda v: figures.plot_rows({"a": [0, 1]}, title=v),
    "plot_rows(xlabel)": lambda v: figures.plot_rows({"a": [0, 1]}, xlabel=v),
    "plot_rows(width)": lambda v: figures.plot_rows({"a": [0, 1]}, width=v),
    "plot_row_grid(panels)": lambda v: figures.plot_row_grid({"e": v}, columns=2),
    "plot_row_grid(columns)": lambda v: figures.plot_row_grid({"e": [0, 1, 1]}, columns=v),
    "plot_row_grid(color_by)": lambda v: figures.plot_row_grid(
        {"e": [0, 1]}, columns=2, color_by=v
    ),
    "plot_row_grid(title)": lambda v: figures.plot_row_grid({"e": [0, 1]}, columns=2, title=v),
    "plot_row_grid(width)": lambda v: figures.plot_row_grid({"e": [0, 1]}, columns=2, width=v),
    "device_of_rows(array)": lambda v: figures.device_of_rows(v),
    "plot_timeline(panels)": lambda v: figures.plot_timeline(v, lanes=("input", "step")),
    "plot_timeline(events)": lambda v: figures.plot_timeline({"a": v}, lanes=("input", "step")),
    "plot_timeline(time)": lambda v: figures.plot_timeline(
        {"a": [("input", "0", 0.0, v)]}, lanes=("input",)
    ),
    "plot_timeline(lanes)": lambda v: figures.plot_timeline({"a": EVENTS}, lanes=v),
    "plot_timeline(unit)": lambda v: figures.plot_timeline(
        {"a": EVENTS}, lanes=("input", "step"), unit=v
    ),
    "plot_timeline(width)": lambda v: figures.plot_timeline(
        {"a": EVENTS}, lanes=("input", "step"), width=v
    ),
    "plot_reads(segments)": lambda v: figures.plot_reads(v),
    "plot_reads(hosts)": lambda v: figures.plot_reads({"a": {1: ([0, 1], v)}}),
    "plot_reads(rows)": lambda v: figures.plot_reads({"a": {1: (v, [0, 1])}}),
    "plot_reads(title)": lambda v: figures.plot_reads({"a": {1: ([0, 1], [0, 1])}}, title=v),
    "plot_epoch_ends(panels)": lambda v: figures.plot_epoch_ends({"p": v}),
    "plot_epoch_ends(host)": lambda v: figures.plot_epoch_ends(
        {"p": {v: ["done"]} if _hashable(v) else v}
    ),
    "plot_epoch_ends(states)": lambda v: figures.plot_epoch_ends({"p": {0: v}}),
    "plot_epoch_ends(title)": lambda v: figures.plot_epoch_ends({"p": {0: ["done"]}}, title=v),
    "pretend_hosts(num_hosts)": lambda v: pretend_hosts(v),
    "pretend_hosts(devices)": lambda v: pretend_hosts(1, v),
    "global_to_local_shape(sharding)": lambda v: global_to_local_shape(v, (16,)),
    "global_to_local_shape(global_shape)": lambda v: global_to_local_shape(ROWS, v),
    "global_to_local_shape(process_index)": lambda v: global_to_local_shape(
        ROWS, (16,), process_index=v
    ),
    "local_to_global_shape(local_shape)": lambda v: local_to_global_shape(ROWS, v),
    "local_to_global_shape(process_index)": lambda v: local_to_global_shape(
        ROWS, (16,), process_index=v
    ),
    "local_index(global_shape)": lambda v: local_index(ROWS, v),
    "local_index(process_index)": lambda v: local_index(ROWS, (16,), process_index=v),
    "pad_to_multiple(batch)": lambda v: pad_to_multiple({"x": v}, 4),
    "pad_to_multiple(multiple)": lambda v: pad_to_multiple({"x": np.arange(5)}, v),
    "shard_bounds(num_rows)": lambda v: shard_bounds(v, 0, 2),
    "shard_bounds(process_index)": lambda v: shard_bounds(10, v, 2),
    "shard_bounds(process_count)": lambda v: shard_bounds(10, 0, v),
    "shard_bounds(drop_remainder)": lambda v: shard_bounds(10, 0, 2, drop_remainder=v),
    "RowLedger(sharding)": lambda v: RowLedger(v, 16),
    "RowLedger(num_rows)": lambda v: RowLedger(ROWS, v),
    "RowLedger(host_of)": lambda v: RowLedger(ROWS, 16, host_of=v),
    "RowLedger.host_of_device": lambda v: LEDGER.host_of_device(v),
    "RowLedger.rows_of_device": lambda v: LEDGER.rows_of_device(v),
    "RowLedger.devices_of_host": lambda v: LEDGER.devices_of_host(v),
    "RowLedger.blocks_of_host": lambda v: LEDGER.blocks_of_host(v),
    "RowLedger.rows_of_host": lambda v: LEDGER.rows_of_host(v),
    "RowLedger.row_count": lambda v: LEDGER.row_count(v),
    "RowLedger.devices_of_row": lambda v: LEDGER.devices_of_row(v),
    "RowLedger.hosts_of_row": lambda v: LEDGER.hosts_of_row(v),
    "RowLedger.hosts_sharing_with": lambda v: LEDGER.hosts_sharing_with(v),
    "setup_devices(needed)": lambda v: distributed.setup_devices(v),
    "choose_devices(accelerator_platform)": lambda v: distributed.choose_devices(v, 1, 8),
    "choose_devices(accelerator_count)": lambda v: distributed.choose_devices("tpu", v, 8),
    "choose_devices(needed)": lambda v: distributed.choose_devices("tpu", 1, v),
    "check(name)": lambda v: datarax_course.check(v, lambda n: 2 * n, quiet=True),
    "check(answer)": lambda v: datarax_course.check("00.example", v, quiet=True),
    "check(answer's result)": lambda v: datarax_course.check("00.example", lambda n: v, quiet=True),
    "check(quiet)": lambda v: datarax_course.check("00.example", lambda n: 2 * n, quiet=v),
    "check(hint)": lambda v: datarax_course.check("00.example", lambda n: n, quiet=True, hint=v),
    "Documents(data)": lambda v: Documents([[1, 2], v]),
    "Documents(lengths)": lambda v: Documents([[1], [2, 3]], lengths=v),
    "Documents(field)": lambda v: Documents([{"tokens": [1]}], field=v),
    "Documents(eos_id)": lambda v: Documents(FILES / "flat.npy", eos_id=v, cache_dir=FILES),
    "Documents(dtype)": lambda v: Documents([[1]], dtype=v),
    "Documents[index]": lambda v: DOCS[v],
    "Documents.read(indices)": lambda v: DOCS.read(v),
    "Packed(documents)": lambda v: Packed(v, 4),
    "Packed(length)": lambda v: Packed(DOCS, v),
    "Packed(method)": lambda v: Packed(DOCS, 4, method=v),
    "Packed[index]": lambda v: PACKED[v],
    "Packed.pieces(row)": lambda v: PACKED.pieces(v),
    "Packed.documents_of(rows)": lambda v: PACKED.documents_of(v),
    "Mixture(sources)": lambda v: Mixture(v, [1], rngs=nnx.Rngs(0)),
    "Mixture(weights)": lambda v: Mixture({"a": DOCS, "b": DOCS}, v, rngs=nnx.Rngs(0)),
    "Mixture(skip)": lambda v: Mixture({"a": DOCS}, [1], rngs=nnx.Rngs(0), skip={"a": v}),
    "Mixture[index]": lambda v: MIXTURE[v],
    "Mixture.read(indices)": lambda v: MIXTURE.read(v),
    "Mixture.documents_of(indices)": lambda v: MIXTURE.documents_of(v),
    "write_documents(documents)": lambda v: write_documents([[1], v], _new_store()),
    "write_documents(dtype)": lambda v: write_documents(DOCS, _new_store(), dtype=v),
    "write_documents(replace)": lambda v: write_documents(DOCS, _new_store(), replace=v),
    "write_documents(documents_per_shard)": lambda v: write_documents(
        DOCS, _new_store(), documents_per_shard=v
    ),
    "write_documents(workers)": lambda v: write_documents(DOCS, _new_store(), workers=v),
}

_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-3, 20),
    st.sampled_from([-1, 0, 10**9, 10**30, -(10**30), 2**63]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=4),
    st.sampled_from(["device", "host", "process", "ms", "done", "#332288", "exact"]),
)
_arrays = st.one_of(
    hnp.arrays(
        st.sampled_from([np.int64, np.int8, np.uint64, np.float32, np.bool_, np.str_]),
        hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3),
    ),
    st.lists(_scalars, max_size=3).map(lambda items: np.array([*items, object()], dtype=object)),
)
ODD = st.recursive(
    st.one_of(_scalars, _arrays),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(st.one_of(st.text(max_size=2), st.integers(-1, 3)), inner, max_size=3),
    ),
    max_leaves=6,
)


@settings(
    max_examples=400,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(name=st.sampled_from(sorted(CALLS)), value=ODD)
def test_odd_arguments_get_our_error_quickly_and_stay_unchanged(name: str, value: Any) -> None:
    _call_checked(CALLS[name], value)


@pytest.mark.parametrize(
    "name",
    ["summarize(leaf)", "summary_table(tree)", "leaf_summaries(tree)"],
)
@pytest.mark.parametrize("leaf", ["abc", b"ab", object()], ids=["str", "bytes", "object"])
def test_summaries_list_a_str_or_object_leaf_as_a_host_leaf(name: str, leaf: Any) -> None:
    _call_checked(CALLS[name], leaf)
    rows = viz.leaf_summaries({"x": leaf})
    assert [(row.spec, row.shape, row.bytes_per_device) for row in rows] == [("host", (), None)]


def test_a_negative_host_is_named_in_plot_devices() -> None:
    with pytest.raises(ValueError, match=r"host_of\[3\] must be an int >= 0, got -1"):
        figures.plot_devices(MESH.devices, host_of={**pretend_hosts(2), 3: -1})
    with pytest.raises(ValueError, match="this_host must be an int >= 0, got -1"):
        figures.plot_devices(MESH.devices, this_host=-1)


def test_device_of_rows_names_a_0d_array() -> None:
    scalar = jax.device_put(np.float32(1), NamedSharding(MESH, P()))
    with pytest.raises(ValueError, match="the array is 0-d, so it has no rows"):
        figures.device_of_rows(scalar)
    with pytest.raises(TypeError, match=r"device_of_rows reads a jax\.Array"):
        figures.device_of_rows(np.zeros(4))


def test_plot_timeline_names_a_width_of_zero() -> None:
    with pytest.raises(ValueError, match=r"width must be a number of inches in \[2, 40\], got 0"):
        figures.plot_timeline({"a": EVENTS}, lanes=("input", "step"), width=0)


HUGE_HOST = 10**9
# Memory is the measure; a time limit only stops a call that hangs (the machine is shared).
HANG_LIMIT_S = 30
# Each draws host 10**9 (or colours for it); a list sized by the id would hold 10**9 entries.
BIG_IDS: dict[str, Callable[[], Any]] = {
    "plot_rows": lambda: figures.plot_rows({"hosts": [0, HUGE_HOST]}, color_by="host"),
    "plot_row_grid": lambda: figures.plot_row_grid({"e": [0, HUGE_HOST]}, columns=2),
    "plot_devices(host_of)": lambda: figures.plot_devices(
        MESH.devices, host_of={d.id: HUGE_HOST for d in MESH.devices.flat}
    ),
    "plot_devices(this_host)": lambda: figures.plot_devices(MESH.devices, this_host=HUGE_HOST),
    "plot_host_rows": lambda: figures.plot_host_rows(
        {"rows": ROWS}, 16, host_of={d.id: HUGE_HOST + d.id for d in MESH.devices.flat}
    ),
    "plot_ledger": lambda: viz.plot_ledger(
        RowLedger(ROWS, 16, host_of={d.id: HUGE_HOST + d.id for d in MESH.devices.flat})
    ),
    "plot_reads": lambda: figures.plot_reads({"a": {1: ([0, 1], [0, HUGE_HOST])}}),
    "plot_epoch_ends": lambda: figures.plot_epoch_ends({"p": {HUGE_HOST: ["done"]}}),
    "host_hatch": lambda: viz.host_hatch(HUGE_HOST),
}


@pytest.mark.parametrize("name", sorted(BIG_IDS))
def test_a_picture_of_host_1e9_is_sized_by_what_it_draws(name: str) -> None:
    BIG_IDS[name]()  # a first call pays for imports and font caches
    plt.close("all")
    tracemalloc.start()
    try:
        with time_limit(HANG_LIMIT_S):
            BIG_IDS[name]()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        plt.close("all")
    assert peak < 32 * 2**20, f"{name} peaked at {peak / 2**20:.0f} MiB"


def test_colour_lists_are_capped_with_the_way_out() -> None:
    assert len(viz.host_colors(65_536)) == 65_536
    with pytest.raises(ValueError, match=r"count must be an int in \[0, 65536\].*palette\[i % 4\]"):
        viz.host_colors(10**9)
    with pytest.raises(ValueError, match=r"palette\[i % 9\]"):
        viz.device_colors(10**30)


def _looped() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


def _deep(levels: int) -> list[Any]:
    nested: list[Any] = []
    for _ in range(levels):
        nested = [nested]
    return nested


@pytest.mark.parametrize("answer", ["looped", "deep"])
def test_checkers_bound_time_and_memory_for_an_endless_answer(answer: str) -> None:
    """Every exercise's checker turns down a list that holds itself, or one nested 10**5
    deep, in a few MiB (the bound is `_values.MAX_DEPTH`) and without hanging. tracemalloc
    counts every thread's allocations, so a checker over the bound is measured once more:
    an answer that costs memory costs it both times, another thread's work seldom does."""
    value = _looped() if answer == "looped" else _deep(10**5)
    for name in sorted(_core._CHECKERS):
        peaks = []
        while len(peaks) < 2 and (not peaks or peaks[-1] >= 8 * 2**20):
            tracemalloc.start()
            try:
                with time_limit(HANG_LIMIT_S):
                    feedback = datarax_course.check(name, lambda *args, **kwargs: value, quiet=True)
                peaks.append(tracemalloc.get_traced_memory()[1])
            finally:
                tracemalloc.stop()
            assert not feedback and not feedback.checker_bug, (name, feedback)
        assert min(peaks) < 8 * 2**20, (name, peaks)


def test_a_tree_that_contains_itself_is_named() -> None:
    with pytest.raises(ValueError, match="batch contains itself"):
        viz.summarize(_looped())
    with pytest.raises(ValueError, match="batch contains itself"):
        pad_to_multiple({"x": _looped()}, 2)

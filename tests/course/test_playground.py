"""The playground (datarax_course.figures): the controls drive real placements, and every
view follows them.

Run as a script, it measures how long the playground takes to follow 50 control
changes on 8 simulated devices:

    python tests/course/test_playground.py
"""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
import types
from typing import Any

import jax
import nbformat
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from nbclient import NotebookClient

from datarax_course import figures
from datarax_course.figures._playground import Debounce

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def check_views(pg: figures.Playground) -> None:
    """The picture, both tables and the code all show the placed array's layout."""
    assert pg.message is None and pg.view is not None
    view = pg.view
    rank = len(view.settings.shape)
    shards = (
        {s.device.id: s.index for s in view.array.addressable_shards}
        if view.real
        else {d.id: i for d, i in view.sharding.devices_indices_map(view.settings.shape).items()}
    )
    assert view.array.sharding == view.sharding and set(shards) == {
        r.device for r in view.device_rows
    }
    devices_html, hosts_html = pg.outputs["devices"].value, pg.outputs["hosts"].value
    for row in view.device_rows:
        spans = tuple(
            s.indices(n)[:2] for s, n in zip(shards[row.device], view.settings.shape, strict=True)
        )
        assert row.index == spans
        assert pg.plot.block(row.device) == (spans if rank > 1 else spans[:1])
        block = "[" + ", ".join(f"{a}:{b}" for a, b in spans) + "]"
        assert re.search(rf">{row.device}</td>.*?{re.escape(block)}", devices_html)
    assert devices_html.count("<tr>") == 1 + len(view.device_rows)
    assert hosts_html.count("<tr>") == 1 + view.settings.hosts
    for row in view.host_rows:  # the one placement model, also for a planned mesh
        assert list(row.blocks) == view.ledger.blocks_of_host(row.host)
        assert row.devices == tuple(d.id for d in view.ledger.devices_of_host(row.host))
    code = pg.outputs["code"].value
    assert "sharding = NamedSharding(mesh, P(" in code
    if view.real:  # the code builds the very same sharding and placement
        namespace: dict[str, Any] = {}
        exec(view.code, namespace)
        assert namespace["sharding"] == view.sharding
        assert namespace["batch"].sharding == view.array.sharding
        assert namespace["batch"].shape == view.settings.shape
    assert bytes(pg.outputs["picture"].value).startswith(b"\x89PNG")
    assert pg.outputs["error"].value == ""


def test_starts_on_real_devices_with_every_view() -> None:
    pg = figures.playground()
    check_views(pg)
    assert pg.view.real and pg.view.settings.mesh_shape == (4, 2)
    assert pg.view.sharding.spec == P("data", None)
    assert "real jax.Array placed on 8 of the 8 devices" in pg.outputs["status"].value
    assert pg.view.host_rows[1].blocks == ((8, 16),)
    assert pg.plot.region(jax.devices()[1].id) == ((0, 4), (0, 8))  # 'model' copies rows 0-3


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("batch_size", 64),
        ("spec0", (0, 1)),
        ("spec0", (1, 0)),
        ("spec1", (1,)),
        ("spec0", ()),
        ("hosts", 4),
        ("order", "interleaved"),
        ("axis_types", "Explicit"),
        ("dtype", "bfloat16"),
        ("rank", 1),
        ("rank", 4),
        ("axes", 1),
        ("name1", "tensor"),
    ],
)
def test_each_control_redraws_every_view(key: str, value: Any) -> None:
    pg = figures.playground()
    before = (pg.outputs["picture"].value, pg.outputs["devices"].value, pg.outputs["code"].value)
    pg.controls[key].value = value
    check_views(pg)
    after = (pg.outputs["picture"].value, pg.outputs["devices"].value, pg.outputs["code"].value)
    assert after != before


def test_picture_and_tables_follow_a_change_of_spec() -> None:
    pg = figures.playground(batch_size=32)
    device = jax.devices()[1].id
    assert pg.plot.region(device) == ((0, 8), (0, 8))
    pg.controls["spec0"].value = (0, 1)  # ('data', 'model'): 8 blocks of 4 rows
    check_views(pg)
    assert pg.plot.region(device) == ((4, 8), (0, 8))
    assert ">4-7</td>" in pg.outputs["devices"].value
    assert "P(('data', 'model'), None)" in pg.outputs["code"].value.replace("&#x27;", "'")


def test_interleaved_hosts_read_rows_apart() -> None:
    pg = figures.playground(mesh_shape=(8,), axis_names=("data",), spec=P("data"), hosts=2)
    pg.controls["order"].value = "interleaved"
    check_views(pg)
    assert pg.view.host_rows[0].blocks == ((0, 2), (4, 6), (8, 10), (12, 14))
    assert pg.view.ledger.shared_blocks() == {}


def test_model_axis_across_hosts_shows_shared_rows_in_the_ledger_tab() -> None:
    pg = figures.playground(device_order="interleaved")  # each 'model' pair spans both hosts
    check_views(pg)
    assert [row.also_on for row in pg.view.host_rows] == [(1,), (0,)]
    pg.outputs["tabs"].selected_index = 1
    assert bytes(pg.outputs["ledger_picture"].value).startswith(b"\x89PNG")
    assert ">1</td>" in pg.outputs["hosts"].value


def test_a_mesh_bigger_than_the_runtime_falls_back_and_says_so() -> None:
    pg = figures.playground()
    pg.controls["size1"].value = 4  # a 4 x 4 mesh: 16 devices, 8 present
    check_views(pg)
    assert not pg.view.real and isinstance(pg.view.array, jax.ShapeDtypeStruct)
    assert "needs 16 devices and this runtime has 8" in pg.outputs["status"].value
    assert "jax_num_cpu_devices" in pg.outputs["code"].value
    assert len(pg.view.device_rows) == 16 and pg.view.host_rows[1].devices == tuple(range(8, 16))
    pg.outputs["tabs"].selected_index = 1  # the ledger of the planned mesh
    assert bytes(pg.outputs["ledger_picture"].value).startswith(b"\x89PNG")
    assert pg.view.ledger.rows_of_host(1).tolist() == list(range(8, 16))


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"spec1": (0,)}, "uses mesh axis 'data' more than once"),
        ({"batch_size": 10}, "batch has 10 rows (shape (10, 8)), which cannot be split evenly"),
        ({"dim1": 3, "spec1": (1,)}, "batch has size 3 in dimension 1 (shape (16, 3))"),
        ({"hosts": 3}, "8 devices cannot be split into 3 hosts of equal size"),
        ({"name1": "data"}, "Mesh axis names must differ from each other"),
        ({"name0": "my axis"}, "is not a Python identifier"),
        ({"size0": 16, "size1": 8}, "the playground draws meshes of up to 64"),
        ({"size0": 16, "batch_size": 24}, "batch has 24 rows (shape (24, 8))"),
    ],
)
def test_an_invalid_choice_shows_the_library_error_and_recovers(changes, expected) -> None:
    pg = figures.playground()
    start = {key: pg.controls[key].value for key in changes}
    for key, value in changes.items():
        pg.controls[key].value = value
    assert pg.view is None and pg.message is not None and expected in pg.message
    assert "\n" not in pg.message  # one paragraph
    assert 'class="datarax-error"' in pg.outputs["error"].value
    assert expected.replace("'", "&#x27;") in pg.outputs["error"].value
    assert pg._shown.layout.display == "none"  # no stale picture or tables under the error
    for key, value in start.items():  # back to the start: the views return
        pg.controls[key].value = value
    check_views(pg)
    assert pg._shown.layout.display is None


def test_an_unexpected_failure_is_shown_and_the_next_change_recovers(monkeypatch) -> None:
    from datarax_course.figures import _playground

    pg = figures.playground()

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("renderer gone")

    monkeypatch.setattr(_playground, "plot_sharding", broken)
    pg.controls["batch_size"].value = 32  # must not raise into the kernel
    assert pg.view is None and pg.message == "Unexpected RuntimeError: renderer gone"
    assert "renderer gone" in pg.outputs["error"].value
    monkeypatch.undo()
    pg.controls["batch_size"].value = 64
    check_views(pg)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"batch_size": -1}, ValueError, r"batch_size must be an int in \[1, 512\], got -1"),
        ({"batch_size": "16"}, TypeError, "batch_size must be an int"),
        ({"hosts": 0}, ValueError, r"hosts must be an int in \[1, 16\], got 0"),
        ({"mesh_shape": (2, 2, 2, 1)}, ValueError, "mesh_shape must have 1 to 3 entries"),
        (
            {"mesh_shape": (4, 32)},
            ValueError,
            r"each entry of mesh_shape must be an int in \[1, 16\]",
        ),
        ({"mesh_shape": 8}, TypeError, "mesh_shape must be a tuple of ints"),
        ({"axis_names": ("data",)}, ValueError, "must name each of the 2 mesh axes, got 1"),
        ({"axis_names": ("data", 3)}, TypeError, "axis_names must be strings"),
        ({"spec": P("batch")}, ValueError, "names mesh axis 'batch', but the mesh axes are"),
        ({"spec": P("data", None, None)}, ValueError, "has 3 entries but the leaf has rank 2"),
        ({"spec": P(("data", "data"))}, ValueError, "names a mesh axis twice"),
        ({"spec": 3}, TypeError, "spec must be a PartitionSpec"),
        ({"feature_shape": (100,)}, ValueError, r"feature_shape must be an int in \[1, 64\]"),
        ({"device_order": "random"}, ValueError, "device_order must be one of"),
        ({"axis_types": "auto"}, ValueError, r"axis_types must be one of \('Auto', 'Explicit'\)"),
        ({"dtype": "float64"}, ValueError, "dtype must be one of"),
        ({"mesh": (4, 2)}, TypeError, "unexpected keyword argument 'mesh'"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match) -> None:
    with pytest.raises(error, match=match):
        figures.playground(**kwargs)


def test_an_invalid_start_is_shown_not_raised() -> None:
    pg = figures.playground(batch_size=10)
    assert pg.view is None and "batch has 10 rows" in pg.message
    bundle = pg._repr_mimebundle_()
    assert (
        "batch has 10 rows" in bundle["text/html"] and "batch has 10 rows" in bundle["text/plain"]
    )


def test_display_carries_the_widget_and_a_snapshot_for_static_pages() -> None:
    pg = figures.playground(spec=P(None, "model"))
    bundle = pg._repr_mimebundle_()
    assert bundle[WIDGET_VIEW]["model_id"] == pg.widget.model_id
    page = bundle["text/html"]
    assert '<img src="data:image/png;base64,' in page
    assert "datarax-device-table" in page and "datarax-host-table" in page
    assert "The controls need a running Python kernel" in page
    assert "P(None, &#x27;model&#x27;)" in page


def test_on_colab_the_widget_manager_for_ipywidgets_8_is_turned_on(monkeypatch) -> None:
    calls: list[str] = []
    output = types.ModuleType("google.colab.output")
    output.enable_custom_widget_manager = lambda: calls.append("on")  # type: ignore[attr-defined]
    colab = types.ModuleType("google.colab")
    colab.output = output  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "google", types.ModuleType("google"))
    monkeypatch.setitem(sys.modules, "google.colab", colab)
    monkeypatch.setitem(sys.modules, "google.colab.output", output)
    figures.playground(mesh_shape=(8,), axis_names=("data",), spec=P("data"))
    assert calls == ["on"]


def test_debounce_merges_a_burst_inside_an_event_loop() -> None:
    calls: list[float] = []

    async def burst() -> None:
        debounced = Debounce(lambda: calls.append(time.monotonic()), wait_s=0.05)
        for _ in range(20):  # a slider dragged: a change every 5 ms
            debounced()
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.2)

    asyncio.run(burst())
    assert len(calls) == 2  # the first change at once, then one for the rest of the burst
    outside: list[int] = []
    Debounce(lambda: outside.append(1), wait_s=10.0)()
    assert outside == [1]  # no event loop: at once


def test_a_burst_of_changes_in_a_kernel_loop_redraws_twice_and_ends_on_the_last() -> None:
    pg = figures.playground()

    async def drag() -> tuple[int, int]:
        before = pg.updates
        for size in (24, 32, 40, 48, 56):
            pg.controls["batch_size"].value = size
        during = pg.updates - before
        await asyncio.sleep(0.5)
        return during, pg.updates - before

    assert asyncio.run(drag()) == (1, 2)
    assert pg.view.settings.batch_size == 56
    check_views(pg)


@pytest.mark.notebooks
def test_executed_notebook_keeps_a_static_picture_and_tables() -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            'import jax\njax.config.update("jax_num_cpu_devices", 8)\n'
            "from datarax_course import figures\nfigures.playground()"
        )
    ]
    NotebookClient(notebook, timeout=120, kernel_name="python3").execute()
    (output,) = notebook.cells[0].outputs
    assert output["output_type"] == "execute_result"
    assert WIDGET_VIEW in output["data"]
    page = output["data"]["text/html"]
    assert '<img src="data:image/png;base64,' in page and "datarax-device-table" in page
    assert "The controls need a running Python kernel" in page
    state = notebook.metadata["widgets"]["application/vnd.jupyter.widget-state+json"]["state"]
    assert output["data"][WIDGET_VIEW]["model_id"] in state


def drive(pg: figures.Playground, count: int = 50) -> list[tuple[float, float]]:
    """Makes `count` control changes, none repeating a layout.

    Returns each change's (wall-clock, CPU) seconds, from setting the control's value
    to the views being redrawn: with no event loop running, each change redraws at once.
    """
    others: list[tuple[str, Any]] = [
        ("spec0", (0, 1)),
        ("hosts", 4),
        ("order", "interleaved"),
        ("spec1", (1,)),
        ("dtype", "int32"),
        ("spec0", (0,)),
        ("axis_types", "Explicit"),
        ("hosts", 2),
        ("spec1", ()),
        ("order", "in order"),
        ("axis_types", "Auto"),
        ("dtype", "float32"),
    ]
    seconds = []
    for number in range(count):
        change = others[(number // 2) % len(others)]
        key, value = ("batch_size", 24 + 8 * number) if number % 2 == 0 else change
        wall, cpu = time.perf_counter(), time.process_time()
        pg.controls[key].value = value
        seconds.append((time.perf_counter() - wall, time.process_time() - cpu))
    return seconds


def test_drive_makes_one_redraw_per_change() -> None:
    pg = figures.playground()
    before = pg.updates
    seconds = drive(pg, 12)
    assert len(seconds) == 12 and pg.updates == before + 12
    check_views(pg)


if __name__ == "__main__":
    jax.config.update("jax_num_cpu_devices", 8)
    drive(figures.playground(), 4)  # warm up: the first placements compile, fonts load
    timings = np.array(drive(figures.playground(), 50)) * 1000  # (change, wall or CPU) in ms
    print(
        f"50 control changes on {len(jax.devices())} devices, {os.cpu_count()} cores, load "
        f"average {os.getloadavg()[0]:.1f}:"
    )
    for column, clock in enumerate(("wall", "CPU")):
        print(
            f"  {clock:4s} median {np.median(timings[:, column]):.0f} ms, "
            f"worst {timings[:, column].max():.0f} ms"
        )

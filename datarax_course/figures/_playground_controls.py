"""The playground's controls: ipywidgets for the mesh, the hosts, the leaf and its spec.

Every control carries the CSS class ``datarax-<key>`` (e.g. ``datarax-spec0``), so a
page can be driven by a browser as well as from Python.
"""

from __future__ import annotations

import itertools
from typing import Any

import ipywidgets as widgets

from ._playground_model import (
    AXIS_TYPES,
    DTYPES,
    MAX_AXES,
    MAX_AXIS_SIZE,
    MAX_BATCH,
    MAX_DIM,
    MAX_HOSTS,
    MAX_RANK,
    ORDERS,
    Entry,
    Settings,
)

AXIS_SIZES = tuple(range(1, MAX_AXIS_SIZE + 1))
HOST_COUNTS = tuple(range(1, MAX_HOSTS + 1))
DEFAULT_NAMES = ("data", "model", "stage")
DEFAULT_DIMS = (8, 8, 3)
_WIDE = {"description_width": "96px"}


def spec_options(names: tuple[str, ...]) -> list[tuple[str, Entry]]:
    """Dropdown options for one spec entry: None, each axis, each ordered group of axes.

    None is the value ``()``: a dropdown takes a value of None for "nothing selected".
    """
    options: list[tuple[str, Entry]] = [("None", ())]
    for size in range(1, len(names) + 1):
        for group in itertools.permutations(range(len(names)), size):
            label = names[group[0]] if size == 1 else f"({', '.join(names[i] for i in group)})"
            options.append((label, group))
    return options


class Controls:
    """The widgets, by key, and the `Settings` they make together."""

    def __init__(self, start: Settings) -> None:
        axes = len(start.mesh_shape)
        names = start.axis_names + DEFAULT_NAMES[axes:]
        sizes = start.mesh_shape + (1,) * (MAX_AXES - axes)
        dims = start.feature_shape + DEFAULT_DIMS[len(start.feature_shape) :]
        spec = start.spec + ((),) * (MAX_RANK - len(start.spec))
        self.widgets: dict[str, Any] = {
            "axes": widgets.Dropdown(options=[1, 2, 3], value=axes, description="mesh axes"),
            "axis_types": widgets.ToggleButtons(options=AXIS_TYPES, value=start.axis_types),
            "hosts": widgets.Dropdown(options=HOST_COUNTS, value=start.hosts, description="hosts"),
            "order": widgets.ToggleButtons(options=ORDERS, value=start.device_order),
            "batch_size": widgets.IntSlider(
                value=start.batch_size, min=1, max=MAX_BATCH, description="batch size"
            ),
            "rank": widgets.Dropdown(
                options=list(range(1, MAX_RANK + 1)), value=1 + len(start.feature_shape)
            ),
            "dtype": widgets.Dropdown(options=DTYPES, value=start.dtype, description="dtype"),
        }
        self.widgets["rank"].description = "leaf rank"
        for axis in range(MAX_AXES):
            self.widgets[f"name{axis}"] = widgets.Text(
                value=names[axis], description=f"axis {axis}", continuous_update=False
            )
            self.widgets[f"size{axis}"] = widgets.Dropdown(options=AXIS_SIZES, value=sizes[axis])
        for dim in range(1, MAX_RANK):
            self.widgets[f"dim{dim}"] = widgets.BoundedIntText(
                value=dims[dim - 1], min=1, max=MAX_DIM, description=f"dim {dim} size"
            )
        options = spec_options(start.axis_names)
        for dim in range(MAX_RANK):
            self.widgets[f"spec{dim}"] = widgets.Dropdown(
                options=options, value=spec[dim], description=f"spec dim {dim}"
            )
        for key, widget in self.widgets.items():
            widget.add_class(f"datarax-{key}")
            if key in ("axis_types", "order"):
                widget.style = {"button_width": "100px"}
            elif key.startswith("size"):
                widget.layout = widgets.Layout(width="70px")
            elif key.startswith("name"):
                widget.layout = widgets.Layout(width="200px")
                widget.style = _WIDE
            else:
                widget.style = _WIDE
        self.sync()

    def __getitem__(self, key: str) -> Any:
        return self.widgets[key]

    def read(self) -> Settings:
        """The settings the controls show now."""
        axes, rank = self["axes"].value, self["rank"].value
        names = tuple(self[f"name{i}"].value.strip() for i in range(axes))
        return Settings(
            mesh_shape=tuple(self[f"size{i}"].value for i in range(axes)),
            axis_names=names,
            spec=tuple(self[f"spec{d}"].value for d in range(rank)),
            batch_size=self["batch_size"].value,
            feature_shape=tuple(self[f"dim{d}"].value for d in range(1, rank)),
            hosts=self["hosts"].value,
            device_order=self["order"].value,
            axis_types=self["axis_types"].value,
            dtype=self["dtype"].value,
        )

    def sync(self) -> None:
        """Shows the controls the mesh and the leaf use; spec choices follow the axes.

        A spec entry keeps its mesh axes (by position) when the axes are renamed, and
        becomes None when one of its axes is removed.
        """
        axes, rank = self["axes"].value, self["rank"].value
        for axis in range(MAX_AXES):
            shown = "flex" if axis < axes else "none"
            self[f"name{axis}"].layout.display = shown
            self[f"size{axis}"].layout.display = shown
        for dim in range(MAX_RANK):
            self[f"spec{dim}"].layout.display = "flex" if dim < rank else "none"
            if dim:
                self[f"dim{dim}"].layout.display = "flex" if dim < rank else "none"
        names = tuple(self[f"name{i}"].value.strip() or f"axis{i}" for i in range(axes))
        options = spec_options(names)
        for dim in range(MAX_RANK):
            dropdown = self[f"spec{dim}"]
            value = dropdown.value if dropdown.value in {v for _, v in options} else ()
            if list(dropdown.options) != options:
                dropdown.options = options
            dropdown.value = value

    def box(self) -> widgets.VBox:
        """The controls, laid out in a column: mesh, hosts, then the leaf and its spec."""

        def heading(text: str) -> widgets.HTML:
            return widgets.HTML(f"<b>{text}</b>")

        def labelled(text: str, control: Any) -> widgets.HBox:
            """A row with `text` aligned like the other controls' descriptions."""
            label = widgets.HTML(
                f'<div style="text-align:right;width:92px;padding-right:8px">{text}</div>'
            )
            return widgets.HBox([label, control])

        axis_rows = [widgets.HBox([self[f"name{i}"], self[f"size{i}"]]) for i in range(MAX_AXES)]
        leaf = [self["batch_size"], self["rank"]]
        leaf += [self[f"dim{d}"] for d in range(1, MAX_RANK)] + [self["dtype"]]
        return widgets.VBox(
            [
                heading("Mesh"),
                self["axes"],
                *axis_rows,
                labelled("axis types", self["axis_types"]),
                heading("Hosts"),
                self["hosts"],
                labelled("device order", self["order"]),
                heading("Batch leaf"),
                *leaf,
                heading("PartitionSpec"),
                *[self[f"spec{d}"] for d in range(MAX_RANK)],
            ],
            layout=widgets.Layout(width="330px", min_width="330px"),
        )

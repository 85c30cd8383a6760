"""`playground()`: try meshes, hosts and PartitionSpecs, and see where every row lands.

The widget is built on ipywidgets, so it runs in JupyterLab, Colab and Binder. Each
change of a control places a real `jax.Array` (or, for a mesh bigger than the
runtime, lays one out on stand-in devices) and redraws the views from it. Changes
that come faster than the views can be drawn are merged into one redraw.
"""

from __future__ import annotations

import asyncio
import collections
import io
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from datarax.viz import plot_ledger, plot_sharding
from datarax_course._checks import require

from . import _playground_html as pages
from ._playground_model import Settings, View, build_view

_DEBOUNCE_S = 0.12
_CACHE = 32
_PICTURE_IN = 6.5  # wide enough to read, narrow enough to sit beside the controls


class Debounce:
    """Runs `action` at once after a quiet spell, else once, `wait_s` after the last call.

    Inside a running event loop (a Jupyter kernel) calls that arrive while `action`
    runs, or within `wait_s` of it, are merged into one later call. With no event
    loop (plain Python, tests), every call runs `action` at once.
    """

    def __init__(self, action: Callable[[], None], wait_s: float) -> None:
        self._action, self._wait_s = action, wait_s
        self._pending: asyncio.TimerHandle | None = None
        self._last = -math.inf

    def __call__(self) -> None:
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._action()
            return
        if self._pending is None and loop.time() - self._last >= self._wait_s:
            self._run(loop)
            return
        if self._pending is not None:
            self._pending.cancel()
        self._pending = loop.call_later(self._wait_s, self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        self._pending = None
        try:
            self._action()
        finally:
            self._last = loop.time()


def _colab_widget_manager() -> None:
    """On Colab, turns on the widget manager that renders ipywidgets 8 (a no-op elsewhere)."""
    if "google.colab" not in sys.modules:
        return
    try:
        from google.colab import output  # type: ignore[import-not-found]
    except ImportError:
        return
    enable = getattr(output, "enable_custom_widget_manager", None)
    if callable(enable):
        enable()


class Playground:
    """The sharding playground: its controls, what it shows and the widget holding both.

    `controls` maps a key (``"batch_size"``, ``"spec0"``, ``"size1"``...) to its
    widget; `outputs` maps ``"status"``, ``"error"``, ``"picture"``,
    ``"ledger_picture"``, ``"devices"``, ``"hosts"`` and ``"code"`` to theirs. After
    each redraw `view` holds what is shown (None while the choice is invalid),
    `message` the error shown instead (None when valid), and `plot` the placement
    figure. `changes` counts control changes, `updates` redraws (fewer, when changes
    come in a burst), and `last_update_s` times the latest redraw.
    """

    def __init__(self, start: Settings) -> None:
        require("ipywidgets", "playground", "datarax_course.figures.playground")
        import ipywidgets as widgets

        from ._playground_controls import Controls

        _colab_widget_manager()

        self.controls = Controls(start)
        picture = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        ledger_picture = widgets.Image(format="png", layout=widgets.Layout(max_width="100%"))
        self.outputs: dict[str, Any] = {
            "status": widgets.HTML(),
            "error": widgets.HTML(),
            "picture": picture,
            "ledger_picture": ledger_picture,
            "devices": widgets.HTML(),
            "hosts": widgets.HTML(),
            "code": widgets.HTML(),
        }
        for key, widget in self.outputs.items():
            widget.add_class(f"datarax-{key.replace('_', '-')}")
        tabs = widgets.Tab([picture, ledger_picture])
        tabs.set_title(0, "placement")
        tabs.set_title(1, "rows per host")
        tabs.add_class("datarax-tabs")
        self.outputs["tabs"] = tabs
        self._shown = widgets.VBox(
            [
                tabs,
                widgets.HBox(
                    [self.outputs["devices"], self.outputs["hosts"]],
                    layout=widgets.Layout(flex_flow="row wrap"),
                ),
                self.outputs["code"],
            ]
        )
        note = widgets.HTML(f'<p style="font-size:11px;color:#666">{pages.KERNEL_NOTE}</p>')
        views = widgets.VBox(
            [self.outputs["status"], self.outputs["error"], self._shown],
            layout=widgets.Layout(flex="1 1 420px", min_width="0"),
        )
        self.widget = widgets.VBox(
            [
                widgets.HTML("<h3>Sharding playground</h3>"),
                widgets.HBox(  # the views go under the controls in a narrow notebook
                    [self.controls.box(), views], layout=widgets.Layout(flex_flow="row wrap")
                ),
                note,
            ]
        )
        self.widget.add_class("datarax-playground")
        self.view: View | None = None
        self.message: str | None = None
        self.plot: Any = None
        self.updates, self.changes, self.last_update_s = 0, 0, 0.0
        self._pictures: collections.OrderedDict[tuple[Any, ...], tuple[Any, bytes]] = (
            collections.OrderedDict()
        )
        self._quiet = False
        self._redraw = Debounce(self.refresh, _DEBOUNCE_S)
        for key, widget in self.controls.widgets.items():
            widget.observe(lambda change, key=key: self._changed(key), names="value")
        tabs.observe(lambda change: self._draw_pictures_safely(), names="selected_index")
        self.refresh()

    def _changed(self, key: str) -> None:
        if self._quiet:
            return
        self.changes += 1
        if key in ("axes", "rank") or key.startswith("name"):
            self._quiet = True
            try:
                self.controls.sync()
            finally:
                self._quiet = False
        self._redraw()

    def refresh(self) -> None:
        """Reads the controls, rebuilds the view and redraws what is shown.

        The tables and the code are sent first, the picture right after. Never raises:
        a choice JAX or the library rejects shows its error instead.
        """
        started = time.perf_counter()
        try:
            self.view, self.message = build_view(self.controls.read()), None
        except (ValueError, TypeError) as error:
            self.view, self.message = None, str(error)
        except Exception as error:  # the kernel stays usable whatever went wrong
            self.view, self.message = None, f"Unexpected {type(error).__name__}: {error}"
        self._show()
        self._draw_pictures_safely()
        self.updates += 1
        self.last_update_s = time.perf_counter() - started

    def _picture(self, which: str) -> tuple[Any, bytes]:
        """The placement or ledger figure for the current view, and its PNG (cached)."""
        assert self.view is not None
        key = (which, self.view.settings)
        if key not in self._pictures:
            if which == "placement":
                figure = plot_sharding(self.view.array, width=_PICTURE_IN)
                # plot_sharding has laid the figure out already; keep that layout for the
                # PNG instead of running the layout engine again while saving it.
                figure.figure.set_layout_engine("none")
            else:
                figure = plot_ledger(self.view.ledger, width=_PICTURE_IN)
            buffer = io.BytesIO()  # fast PNG compression: the picture is redrawn often
            figure.figure.savefig(buffer, format="png", pil_kwargs={"compress_level": 1})
            self._pictures[key] = figure, buffer.getvalue()
            if len(self._pictures) > _CACHE:
                self._pictures.popitem(last=False)
        self._pictures.move_to_end(key)
        return self._pictures[key]

    def _draw_pictures_safely(self) -> None:
        try:
            self._draw_pictures()
        except Exception as error:  # shown in the widget, never raised into the kernel
            self.view, self.message = None, f"Unexpected {type(error).__name__}: {error}"
            self._show()

    def _draw_pictures(self) -> None:
        """Draws the picture of the tab that is open; the other waits until it is opened."""
        if self.view is None:
            return
        if self.outputs["tabs"].selected_index == 1:
            self.outputs["ledger_picture"].value = self._picture("ledger")[1]
        else:
            self.plot, png = self._picture("placement")
            self.outputs["picture"].value = png

    def _show(self) -> None:
        if self.view is None:
            self.outputs["error"].value = pages.error_box(self.message or "")
            self.outputs["status"].value = ""
            self._shown.layout.display = "none"
            return
        self.outputs["error"].value = ""
        self.outputs["status"].value = pages.status_line(self.view)
        self.outputs["devices"].value = pages.device_table(self.view)
        self.outputs["hosts"].value = pages.host_table(self.view)
        self.outputs["code"].value = pages.code_block(self.view)
        self._shown.layout.display = None

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        """The live widget, with a plain-HTML snapshot for pages where no kernel runs."""
        png = self._picture("placement")[1] if self.view is not None else None
        summary = self.message or (self.view.basis if self.view else "")
        return {
            "application/vnd.jupyter.widget-view+json": {
                "version_major": 2,
                "version_minor": 0,
                "model_id": self.widget.model_id,
            },
            "text/html": pages.snapshot(self.view, self.message, png),
            "text/plain": f"Sharding playground ({summary}) {pages.KERNEL_NOTE}",
        }

"""HTML for the playground: the per-device and per-host tables, the code, errors, a snapshot."""

from __future__ import annotations

import base64
import html

from datarax.viz import device_colors, host_color

from ._playground_model import View

KERNEL_NOTE = (
    "The controls need a running Python kernel with ipywidgets: run this notebook "
    "(JupyterLab, Colab or Binder) to change the mesh, the hosts and the spec."
)
_CELL = (
    "padding:1px 8px;text-align:right;font-family:monospace;font-size:12px;"
    "white-space:nowrap;line-height:1.4"
)
_HEAD = (
    "padding:1px 8px;text-align:right;font-size:12px;border-bottom:1px solid #888;"
    "white-space:nowrap;line-height:1.4"
)


def _swatch(color: str) -> str:
    return (
        f'<span style="display:inline-block;width:10px;height:10px;background:{color};'
        'margin-right:4px;vertical-align:middle"></span>'
    )


def _rows(blocks: tuple[tuple[int, int], ...]) -> str:
    return ", ".join(f"{a}-{b - 1}" if b - a > 1 else f"{a}" for a, b in blocks) or "-"


def _table(caption: str, css: str, head: list[str], body: list[list[str]]) -> str:
    cells = "".join(f'<th style="{_HEAD}">{html.escape(h)}</th>' for h in head)
    lines = [f"<tr>{cells}</tr>"]
    for row in body:
        lines.append("<tr>" + "".join(f'<td style="{_CELL}">{c}</td>' for c in row) + "</tr>")
    return (
        f'<table class="{css}" style="border-collapse:collapse;margin:4px 12px 4px 0">'
        f'<caption style="text-align:left;font-weight:bold;font-size:12px">'
        f"{html.escape(caption)}</caption>{''.join(lines)}</table>"
    )


def device_table(view: View) -> str:
    """One row per device: host, mesh position, the block it holds, its shape and bytes."""
    names = view.settings.axis_names
    colors = device_colors(len(view.device_rows))
    body = []
    for row, color in zip(view.device_rows, colors, strict=True):
        position = ", ".join(f"{n}={p}" for n, p in zip(names, row.position, strict=True))
        block = "[" + ", ".join(f"{a}:{b}" for a, b in row.index) + "]"
        body.append(
            [
                _swatch(color) + str(row.device),
                str(row.host),
                html.escape(position),
                block,
                html.escape(str(row.shard_shape)),
                _rows((row.index[0],)),
                f"{row.nbytes:,}",
            ]
        )
    head = ["device", "host", "mesh position", "block", "shard shape", "rows", "bytes"]
    return _table("Per device", "datarax-device-table", head, body)


def host_table(view: View) -> str:
    """One row per (pretend) host: its devices, the global rows it reads, who shares them."""
    body = []
    for row in view.host_rows:
        color = host_color(row.host)
        body.append(
            [
                _swatch(color) + str(row.host),
                ",".join(map(str, row.devices)),
                _rows(row.blocks),
                str(row.count),
                ",".join(map(str, row.also_on)) or "-",
            ]
        )
    head = ["host", "devices", "rows it reads", "count", "same rows also on hosts"]
    return _table("Per host (from RowLedger)", "datarax-host-table", head, body)


def code_block(view: View) -> str:
    return (
        '<pre class="datarax-code" style="font-size:12px;background:#f6f6f6;padding:6px;'
        f'margin:4px 0;overflow-x:auto">{html.escape(view.code)}</pre>'
    )


def error_box(message: str) -> str:
    """The error as one paragraph, on a pale red background."""
    return (
        '<p class="datarax-error" style="background:#fdecea;border-left:4px solid #c62828;'
        f'padding:6px 10px;margin:4px 0;white-space:normal">{html.escape(message)}</p>'
    )


def status_line(view: View) -> str:
    typeof = ""
    if view.real:
        typeof = f" jax.typeof(batch): <code>{html.escape(str(_typeof(view.array)))}</code>."
    return f'<p class="datarax-status" style="margin:2px 0">{html.escape(view.basis)}{typeof}</p>'


def _typeof(array: object) -> object:
    import jax

    return jax.typeof(array)


def snapshot(view: View | None, error: str | None, png: bytes | None) -> str:
    """The playground's current state as plain HTML, for pages where no kernel runs."""
    parts = [f'<p style="font-style:italic;margin:2px 0">{html.escape(KERNEL_NOTE)}</p>']
    if error is not None:
        parts.append(error_box(error))
    if view is not None and error is None:
        parts.append(status_line(view))
        if png is not None:
            data = base64.b64encode(png).decode("ascii")
            parts.append(f'<img src="data:image/png;base64,{data}" style="max-width:100%"/>')
        parts.append(f'<div style="display:flex;flex-wrap:wrap">{device_table(view)}')
        parts.append(f"{host_table(view)}</div>")
        parts.append(code_block(view))
    return '<div class="datarax-playground-static">' + "".join(parts) + "</div>"

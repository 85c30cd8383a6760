"""Gathers sources that live outside ``docs/`` before Sphinx reads its source tree."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any


def _write_if_changed(path: Path, text: str) -> None:
    """Writes `text`, leaving an unchanged file (and so Sphinx's cache) alone."""
    if not path.exists() or path.read_text() != text:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


_RELATIVE_IMAGE = re.compile(
    r"""(?:\]\(|src=\\?["'])(\.\./[^)"'\\\s]+\.(?:png|jpg|jpeg|gif|svg))"""
)
# Notebooks link this repository's own images by URL, so they also show on Colab;
# the site uses the checked-out copies instead and needs no network to show them.
REPOSITORY_FILES = "https://raw.githubusercontent.com/datarax-sharding/datarax-sharding/main/"


def _copy_if_changed(source: Path, copy: Path) -> None:
    if not copy.exists() or copy.read_bytes() != source.read_bytes():
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, copy)


def _cells(text: str) -> list[tuple[str, str]]:
    """(type, source) of each cell of a notebook's JSON text: what running it leaves alone."""
    cells = json.loads(text).get("cells", [])
    return [(c["cell_type"], "".join(c["source"])) for c in cells]


def copy_tutorials(source: Path, target: Path, executed: Path | None = None) -> list[str]:
    """Mirrors ``source/*.ipynb`` into `target`; returns the notebooks taken from `executed`.

    Only the ``.ipynb`` files travel, so the jupytext ``.md`` twins are never read
    as pages. A notebook whose copy in `executed` (where ``make test`` leaves the
    notebooks it ran) has exactly its cells is copied from there, outputs and all, so
    the site need not run it again; any other is copied as it is, for the site to run.
    Images a notebook links with a path outside its folder (e.g.
    ``../docs/benchmarks/plot.png``), or by their `REPOSITORY_FILES` URL, are copied
    to the same place relative to the copy, which links them by that relative path.
    Files already identical are not touched; stale notebook copies are removed.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     for folder, cells in (("src", [[]]), ("ran", [["4"]]), ("ran2", [])):
        ...         code = [{"cell_type": "code", "source": "2 + 2", "outputs": o} for o in cells]
        ...         notebook = Path(tmp) / folder / "01_a.ipynb"
        ...         notebook.parent.mkdir()
        ...         _ = notebook.write_text(json.dumps({"cells": code}))
        ...     taken = copy_tutorials(Path(tmp) / "src", Path(tmp) / "out", Path(tmp) / "ran")
        ...     stale = copy_tutorials(Path(tmp) / "src", Path(tmp) / "out2", Path(tmp) / "ran2")
        ...     copied = json.loads((Path(tmp) / "out" / "01_a.ipynb").read_text())
        >>> taken, stale, copied["cells"][0]["outputs"]
        (['01_a.ipynb'], [], ['4'])
    """
    target.mkdir(parents=True, exist_ok=True)
    names = sorted(path.name for path in source.glob("*.ipynb"))
    taken = []
    for name in names:
        text = (source / name).read_text()
        ran = executed / name if executed is not None else None
        outputs = ran.read_text() if ran is not None and ran.is_file() else None
        if outputs is not None and _cells(outputs) == _cells(text):
            text = outputs
            taken.append(name)
        text = text.replace(REPOSITORY_FILES, "../")
        _write_if_changed(target / name, text)
        for link in _RELATIVE_IMAGE.findall(text):
            image, copy = (source / link).resolve(), (target / link).resolve()
            if image.is_file() and copy.is_relative_to(target.parent.resolve()):
                _copy_if_changed(image, copy)
    for stale in target.glob("*.ipynb"):
        if stale.name not in names:
            stale.unlink()
    return taken


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def results_table(results: Any) -> str | None:
    """A markdown table for a list of flat records or a mapping of them, else None.

    Example:
        >>> print(results_table([{"case": "tiny", "ratio": 1.04}]))
        | case | ratio |
        | --- | --- |
        | tiny | 1.04 |
    """
    if isinstance(results, dict) and all(isinstance(row, dict) for row in results.values()):
        results = [{"name": name, **row} for name, row in results.items()]
    if isinstance(results, dict):
        results = [{"name": name, "value": value} for name, value in results.items()]
    if not (isinstance(results, list) and results and all(isinstance(r, dict) for r in results)):
        return None
    columns: list[str] = []
    for row in results:
        columns += [key for key in row if key not in columns]
    if any(isinstance(row.get(key), dict | list) for row in results for key in columns):
        return None
    lines = ["| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += [
        "| " + " | ".join(_cell(row.get(key, "")) for key in columns) + " |" for row in results
    ]
    return "\n".join(lines)


def write_benchmarks_page(benchmarks: Path, page: Path) -> None:
    """Writes the benchmark page from ``benchmarks/``: its notes, results and plots.

    Markdown notes are included as they are (a note after the first that is a bare
    table gets a heading naming its file); ``results.json`` becomes a table (or is
    shown as JSON when it is not tabular); every PNG that the notes do not already
    show becomes a figure. Without results the page says how to produce them.
    """
    parts = [
        "# Benchmarks\n",
        "Every benchmark times two ways of doing the same thing in one process, "
        "interleaved, and reports the ratio of their median times. Absolute times "
        "depend on the machine; the ratios are what to compare.\n",
    ]
    notes = sorted(benchmarks.glob("*.md")) if benchmarks.is_dir() else []
    if notes and notes[0].read_text().lstrip().startswith("# "):
        parts = []  # the notes bring their own title and introduction
    plots = sorted(benchmarks.glob("*.png")) if benchmarks.is_dir() else []
    results = benchmarks / "results.json"
    if not (notes or plots or results.exists()):
        parts.append(
            "No results have been recorded yet. Run the benchmarks in `benchmarks/` "
            "with `make bench`.\n"
        )
    shown = ""
    for position, note in enumerate(notes):
        text = note.read_text()
        shown += text
        if position and not text.lstrip().startswith("#"):
            parts.append(f"## The record `docs/benchmarks/{note.name}`\n")  # a bare table
        parts.append(f"```{{include}} ../benchmarks/{note.name}\n:relative-images:\n```\n")
    if results.exists():
        table = results_table(json.loads(results.read_text()))
        parts.append("## Recorded results\n")
        if table is None:
            parts.append(
                f"```{{literalinclude}} ../benchmarks/{results.name}\n:language: json\n```\n"
            )
        else:
            parts.append(f"From `docs/benchmarks/{results.name}`:\n\n{table}\n")
    unshown = [plot for plot in plots if plot.name not in shown]
    if unshown:
        parts.append("## Plots\n")
    for plot in unshown:
        title = plot.stem.replace("_", " ")
        parts.append(f"```{{figure}} ../benchmarks/{plot.name}\n:alt: {title}\n\n{title}\n```\n")
    _write_if_changed(page, "\n".join(parts))

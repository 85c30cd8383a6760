"""Drives datarax_course.figures.playground() in JupyterLab, in headless Chromium, through the page.

    python tests/browser/check_playground.py [--screenshot /tmp/playground.png]

Writes a small notebook that opens the playground into a temporary folder, serves it
with JupyterLab (as check_lab.py does), runs it, and then, by real clicks and
selections in the page: changes the spec of dimension 0 and checks that the picture
and the per-device table changed to the new layout; opens the row-ledger tab and
checks its picture; picks a spec that uses one mesh axis twice and checks that the
widget shows the library's error; puts the spec back; drags the batch-size slider with
20 key presses and checks that the widget ends on the last value and that the kernel
redrew far fewer than 20 times; and checks that 5 changes made in one cell (inside the
kernel's event loop) redraw once while they come. Saves screenshots of the playground.
Bounded by ``--timeout``; the server and its kernels are shut down on every exit path.

This is a script, not a pytest module: nothing runs on import.
"""

from __future__ import annotations

import argparse
import json
import re
import secrets
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import check_lab
from check_lab import CHROMIUM, CHROMIUM_ARGS, REPO, CheckFailed

NOTEBOOK = "playground.ipynb"
CELLS = [
    'import jax\njax.config.update("jax_num_cpu_devices", 8)\nfrom datarax_course import figures',
    "pg = figures.playground()\npg",
    # Changes made faster than a redraw, inside the kernel's event loop: merged.
    "before = pg.updates\n"
    "for size in (40, 48, 56, 64, 16):\n"
    '    pg.controls["batch_size"].value = size\n'
    'print(f"burst: 5 changes, {pg.updates - before} redraw(s) while they came")',
    'print(f"changes={pg.changes} updates={pg.updates}")',
]
DEVICE_TABLE = ".datarax-devices table"
PICTURE = "img.datarax-picture"
CHANGED_JS = """([selector, before]) => {
    const element = document.querySelector(selector);
    return element !== null && (element.getAttribute('src') || element.innerText) !== before;
}"""
LAST_CELL_JS = """() => {
    const cells = window.jupyterapp.shell.currentWidget.content.model.toJSON().cells;
    const cell = cells[cells.length - 1];
    return {count: cell.execution_count, text: cell.outputs.map(o => o.text || '').join('')};
}"""
RUN_LAST_CELL_JS = """async () => {
    const panel = window.jupyterapp.shell.currentWidget;
    panel.content.activeCellIndex = panel.content.model.cells.length - 1;
    await window.jupyterapp.commands.execute('notebook:run-cell');
}"""


def _notebook() -> dict[str, Any]:
    cells = [
        {
            "cell_type": "code",
            "metadata": {},
            "source": source,
            "outputs": [],
            "execution_count": None,
        }
        for source in CELLS
    ]
    kernel = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return {"cells": cells, "metadata": {"kernelspec": kernel}, "nbformat": 4, "nbformat_minor": 5}


def _wait_for_row(page: Any, device: int, block: str, what: str) -> str:
    """Waits until the per-device table says `device` holds `block`; returns that row."""
    from playwright.sync_api import Error as PlaywrightError

    find_row = f"""() => [...document.querySelectorAll('{DEVICE_TABLE} tr')]
        .map(row => row.innerText).find(text => /^\\s*{device}\\s/.test(text)) || ''"""
    try:
        page.wait_for_function(f"() => ({find_row})().includes('{block}')", timeout=30_000)
    except PlaywrightError as failure:
        row = page.evaluate(find_row)
        raise CheckFailed(
            f"{what}: device {device} should hold {block}, shows {row!r}"
        ) from failure
    return page.evaluate(find_row)


def _wait_changed(page: Any, selector: str, before: str, what: str) -> None:
    from playwright.sync_api import Error as PlaywrightError

    try:
        page.wait_for_function(CHANGED_JS, arg=[selector, before], timeout=30_000)
    except PlaywrightError as failure:
        raise CheckFailed(f"{what} did not change after the control was changed") from failure


def _current(page: Any, selector: str) -> str:
    element = page.locator(selector).first
    return element.get_attribute("src") or element.inner_text()


def _error_text(page: Any, contains: str, what: str) -> str:
    """Waits for the widget's error paragraph to contain `contains`; returns it."""
    from playwright.sync_api import Error as PlaywrightError

    selector = ".datarax-error p.datarax-error"
    try:
        page.wait_for_function(
            "([selector, text]) => document.querySelector(selector)?.innerText.includes(text)",
            arg=[selector, contains],
            timeout=30_000,
        )
    except PlaywrightError as failure:
        shown = page.locator(selector).all_inner_texts()
        raise CheckFailed(
            f"{what} should show an error with {contains!r}, shows {shown}"
        ) from failure
    return page.inner_text(selector)


def _drive(page: Any, screenshot: Path, shots: Path) -> list[str]:
    """The checks in the page; returns what was seen, one line each."""
    from playwright.sync_api import Error as PlaywrightError

    page.wait_for_selector(PICTURE, state="visible", timeout=120_000)
    burst = page.locator(".jp-OutputArea-output pre:has-text('burst:')")
    burst.wait_for(timeout=60_000)
    seen = [burst.inner_text().strip()]
    if "1 redraw(s)" not in seen[0]:
        raise CheckFailed(f"5 changes in one cell should redraw once while they come: {seen[0]}")
    seen.append("start: " + _wait_for_row(page, 1, "[0:4, 0:8]", "after the burst back to 16"))
    widget = page.locator(".datarax-playground").first
    widget.scroll_into_view_if_needed()
    widget.screenshot(path=str(screenshot))
    picture, table = _current(page, PICTURE), _current(page, DEVICE_TABLE)
    page.select_option(".datarax-spec0 select", label="(data, model)")
    _wait_changed(page, PICTURE, picture, "the picture")
    _wait_changed(page, DEVICE_TABLE, table, "the per-device table")
    row = _wait_for_row(page, 1, "[2:4, 0:8]", "after spec dim 0 = ('data', 'model')")
    seen.append(f"spec0 = (data, model): {row}")
    page.click(".datarax-tabs .lm-TabBar-tab:has-text('rows per host')")
    try:  # drawn by the kernel once the tab is open
        page.wait_for_function(
            "() => document.querySelector('img.datarax-ledger-picture')?.naturalWidth > 0",
            timeout=30_000,
        )
    except PlaywrightError as failure:
        raise CheckFailed("the 'rows per host' tab shows no picture") from failure
    page.locator(".datarax-playground").first.screenshot(path=str(shots / "playground_ledger.png"))
    seen.append("the 'rows per host' tab shows the row-ledger picture")
    page.click(".datarax-tabs .lm-TabBar-tab:has-text('placement')")
    page.locator(PICTURE).wait_for(state="visible", timeout=30_000)
    page.select_option(".datarax-spec1 select", label="data")
    error = _error_text(page, "more than once", "mesh axis 'data' used twice")
    page.locator(".datarax-error").first.scroll_into_view_if_needed()
    page.screenshot(path=str(shots / "playground_error.png"))
    seen.append(f"spec1 = data: {error}")
    page.select_option(".datarax-spec1 select", label="None")
    page.wait_for_selector(".datarax-error p.datarax-error", state="detached", timeout=30_000)
    _wait_for_row(page, 1, "[2:4, 0:8]", "after spec dim 1 = None")
    page.locator(".datarax-batch_size .noUi-handle").first.focus()
    for _ in range(20):  # a drag of the slider: 16 -> 36, one change per key press
        page.keyboard.press("ArrowRight")
    error = _error_text(page, "batch has 36 rows", "the slider moved to 36 on 8 blocks of rows")
    seen.append(f"batch size dragged to 36: {error}")
    return seen


def _run_last_cell(page: Any, deadline: float) -> str:
    """Runs the notebook's last cell again and returns what it printed."""
    count = page.evaluate(LAST_CELL_JS)["count"]
    page.evaluate(RUN_LAST_CELL_JS)
    while time.monotonic() < deadline:
        cell = page.evaluate(LAST_CELL_JS)
        if cell["count"] and cell["count"] != count and "changes=" in cell["text"]:
            return cell["text"]
        time.sleep(0.5)
    raise CheckFailed("the notebook's last cell did not run again in time")


def _run(url: str, shots: Path, screenshot: Path, deadline: float) -> list[str]:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1300, "height": 2000})
        try:
            check_lab.open_and_run_all(page, url)
            seen = _drive(page, screenshot, shots)
            time.sleep(1.0)  # the burst's last redraw runs 0.12 s after its last change
            printed = _run_last_cell(page, deadline).strip()
            seen.append(f"slider moved by 20 key presses; the kernel says: {printed}")
            return seen
        except PlaywrightError as failure:
            page.screenshot(path=str(shots / "playground_failure.png"))
            raise CheckFailed(f"{failure}; see {shots / 'playground_failure.png'}") from failure
        finally:
            browser.close()


def check(timeout_s: int, shots: Path, screenshot: Path) -> list[str]:
    shots.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    folder = Path(tempfile.mkdtemp(prefix="datarax-playground-"))
    (folder / NOTEBOOK).write_text(json.dumps(_notebook()))
    try:
        with check_lab.running_lab(folder, shots / "playground_server.log") as lab:
            workspace = f"playground-check-{secrets.token_hex(4)}"
            seen = _run(lab.url(NOTEBOOK, workspace), shots, screenshot, deadline)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    changes, updates = (int(n) for n in re.findall(r"(?:changes|updates)=(\d+)", seen[-1]))
    # Before the drag: 1 redraw to start, 2 for the burst of 5 changes, 3 for 3 selections.
    dragged, redrawn = changes - 8, updates - 6
    problems = []
    if not 1 <= dragged <= 20 or redrawn > dragged or redrawn > 10:
        problems.append(
            f"20 key presses on the slider reached the kernel as {dragged} changes and made "
            f"{redrawn} redraws; expected at most 20 changes and 10 redraws"
        )
    seen.append(f"the drag: 20 key presses, {dragged} changes in the kernel, {redrawn} redraws")
    if lab.leftovers:
        problems.append(f"had to kill what the server left behind: {lab.leftovers}")
    if problems:
        raise CheckFailed("\n".join(problems + seen))
    return seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=int, default=240, help="seconds for the whole check")
    parser.add_argument("--screenshots", type=Path, default=REPO / "build" / "browser")
    parser.add_argument("--screenshot", type=Path, default=Path("/tmp/playground.png"))
    args = parser.parse_args()

    def out_of_time(signum: int, frame: Any) -> None:
        raise CheckFailed(f"the playground check ran past its {args.timeout}s limit")

    def stopped(signum: int, frame: Any) -> None:
        raise CheckFailed(f"stopped by signal {signum}")

    signal.signal(signal.SIGALRM, out_of_time)
    signal.signal(signal.SIGTERM, stopped)
    signal.alarm(args.timeout + 60)
    started = time.monotonic()
    try:
        seen = check(args.timeout, args.screenshots, args.screenshot)
    except CheckFailed as failure:
        print(f"playground browser check FAILED:\n{failure}", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
    print("\n".join(seen))
    print(
        f"playground: picture, table and error followed the page's controls in Chromium "
        f"({time.monotonic() - started:.0f} s); screenshot {args.screenshot}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

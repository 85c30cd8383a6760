"""Opens a tutorial in JupyterLab in headless Chromium, runs every cell, checks the result.

    python tests/browser/check_lab.py [--notebook 01_devices_and_meshes.ipynb]

Starts JupyterLab the way ``make lab`` does (on 127.0.0.1, a free port, a random
token), opens the notebook, runs all cells from the Run menu and then asserts that
every code cell ran and produced output (a cell that only defines functions or
classes may print nothing), that no cell shows an error, and that the
sharding visual of
``jax.debug.visualize_array_sharding`` was rendered. Saves screenshots. The whole
check is bounded by ``--timeout``; the server and its kernels are shut down on every
exit path. Needs Chromium at /usr/bin/chromium and the ``browser`` extra (playwright).

This is a script, not a pytest module: nothing runs on import.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    "--no-first-run",
]
# visualize_array_sharding draws, with rich, coloured blocks labelled with devices.
SHARDING_VISUAL_JS = """() => [...document.querySelectorAll('.jp-OutputArea-output pre')]
    .filter(pre => /CPU \\d/.test(pre.innerText)
                   && pre.querySelector('span[style*="background"]') !== null).length"""
SCROLL_TO_CELL_JS = """async index => {
    const notebook = window.jupyterapp.shell.currentWidget.content;
    notebook.activeCellIndex = index;
    await notebook.scrollToItem(index, 'start');
}"""
NOTEBOOK_STATE_JS = """() => {
    const panel = window.jupyterapp.shell.currentWidget;
    if (!panel || !panel.content || !panel.content.model) return null;
    const kernel = panel.sessionContext.session && panel.sessionContext.session.kernel;
    return {kernel: kernel ? kernel.status : null, kernelId: kernel ? kernel.id : null,
            notebook: panel.content.model.toJSON()};
}"""


class CheckFailed(Exception):
    """The notebook, the server or the browser did not behave."""


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _get(url: str, timeout_s: float = 5.0) -> bytes:
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.read()


def _wait_for_server(server: subprocess.Popen, base: str, token: str, log: Path, within_s: float):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise CheckFailed(
                f"JupyterLab exited with {server.returncode}:\n{log.read_text()[-3000:]}"
            )
        try:
            _get(f"{base}/api/status?token={token}")
            return
        except (urllib.error.URLError, OSError):
            time.sleep(0.5)
    raise CheckFailed(
        f"JupyterLab did not answer within {within_s:.0f}s:\n{log.read_text()[-3000:]}"
    )


def _stop_server(
    server: subprocess.Popen, base: str, token: str, kernel_ids: set[str]
) -> list[str]:
    """Shuts the server down (kernels included); returns what had to be killed."""
    killed = []
    try:
        request = urllib.request.Request(f"{base}/api/shutdown?token={token}", method="POST")
        urllib.request.urlopen(request, timeout=5).close()
    except (urllib.error.URLError, OSError):
        pass
    try:
        server.wait(timeout=20)
    except subprocess.TimeoutExpired:
        killed.append(f"server group {server.pid}")
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait(timeout=10)
    for proc in Path("/proc").iterdir():  # kernels run in sessions of their own
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if any(f"kernel-{kernel_id}.json" in cmdline for kernel_id in kernel_ids):
            killed.append(f"kernel process {proc.name}")
            os.kill(int(proc.name), signal.SIGKILL)
    return killed


@dataclasses.dataclass
class Lab:
    """A running JupyterLab: where it answers, and, once stopped, what had to be killed."""

    base: str
    token: str
    leftovers: list[str] = dataclasses.field(default_factory=list)

    def url(self, notebook: str, workspace: str) -> str:
        """The notebook, opened in a fresh `workspace` (no tabs restored from earlier)."""
        return f"{self.base}/lab/workspaces/{workspace}/tree/{notebook}?reset&token={self.token}"


@contextlib.contextmanager
def running_lab(notebook_dir: Path | None, log: Path) -> Iterator[Lab]:
    """JupyterLab as ``make lab`` starts it, or on `notebook_dir`: on 127.0.0.1, a free
    port and a random token. Shut down, kernels included, on every exit path."""
    port, token = _free_port(), secrets.token_hex(16)
    lab = Lab(f"http://127.0.0.1:{port}", token)
    lab_args = [
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        "--LabApp.expose_app_in_browser=True",
        "--LabApp.news_url=",
    ]
    command = ["make", "--no-print-directory", "lab", f"LAB_ARGS={' '.join(lab_args)}"]
    if notebook_dir is not None:  # another folder: the same server, without make's fixed one
        jupyter = Path(sys.executable).with_name("jupyter")
        command = [str(jupyter), "lab", f"--notebook-dir={notebook_dir}", "--allow-root", *lab_args]
    with log.open("w") as log_file:
        server = subprocess.Popen(
            command,
            cwd=REPO,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        _wait_for_server(server, lab.base, token, log, within_s=120)
        yield lab
    finally:  # on every path, also a time-out: learn the kernels, to kill any left over
        kernel_ids: set[str] = set()
        with contextlib.suppress(urllib.error.URLError, OSError, ValueError):
            kernels = json.loads(_get(f"{lab.base}/api/kernels?token={token}"))
            kernel_ids.update(kernel["id"] for kernel in kernels)
        lab.leftovers = _stop_server(server, lab.base, token, kernel_ids)


def open_and_run_all(page: Any, url: str) -> None:
    """Opens a notebook's `url` in the page, waits for its kernel to be idle and runs
    all cells from the Run menu."""
    page.goto(url, timeout=60_000)
    page.wait_for_function("() => window.jupyterapp !== undefined", timeout=60_000)
    page.wait_for_selector(".jp-NotebookPanel:visible .jp-Cell", timeout=60_000)
    chooser = page.locator(".jp-Dialog button:has-text('Select')")
    if chooser.count():  # no kernel recorded in the file: take the default
        chooser.first.click()
    page.wait_for_function(
        f"() => {{ const s = ({NOTEBOOK_STATE_JS})(); return s && s.kernel === 'idle'; }}",
        timeout=90_000,
    )
    page.click(".lm-MenuBar-item:has-text('Run')")
    page.click(".lm-Menu-content .lm-Menu-itemLabel:text-is('Run All Cells')")
    news = page.locator(".jp-toast-button:has-text('No')")
    if news.count():  # the news opt-in toast; answer it so it leaves the screenshots
        news.first.click()


def _only_defines(source: str) -> bool:
    """Whether a cell only defines functions or classes and imports, so prints nothing.

    An exercise's cell (a function to fill in) and its solution are such cells.
    """
    try:
        body = ast.parse(source).body
    except SyntaxError:  # e.g. IPython magics: expect output
        return False
    kinds = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)
    return bool(body) and all(isinstance(node, kinds) for node in body)


def _cells_with_rich_output(notebook: dict[str, Any]) -> list[int]:
    """Indexes of cells with an HTML output that names CPU devices (a rich table)."""
    found = []
    for index, cell in enumerate(notebook["cells"]):
        for output in cell.get("outputs", []):
            html = output.get("data", {}).get("text/html", "")
            html = "".join(html) if isinstance(html, list) else html
            if "<pre" in html and re.search(r"CPU \d", html):
                found.append(index)
                break
    return found


def _run_in_browser(url: str, shots: Path, deadline: float) -> tuple[dict[str, Any], int]:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            open_and_run_all(page, url)
            state = None
            while time.monotonic() < deadline:
                state = page.evaluate(NOTEBOOK_STATE_JS)
                code = [c for c in state["notebook"]["cells"] if c["cell_type"] == "code"]
                ran = all(cell.get("execution_count") for cell in code)
                errored = any(o["output_type"] == "error" for c in code for o in c["outputs"])
                if (ran or errored) and state["kernel"] == "idle":
                    break
                time.sleep(1.0)
            else:
                page.screenshot(path=str(shots / "lab_timeout.png"))
                raise CheckFailed("the notebook did not finish running in time")
            page.screenshot(path=str(shots / "lab_end.png"))
            visuals = 0
            for index in _cells_with_rich_output(state["notebook"]):
                # JupyterLab only renders cells near the viewport: bring this one in.
                page.evaluate(SCROLL_TO_CELL_JS, index)
                try:
                    page.wait_for_function(f"() => ({SHARDING_VISUAL_JS})() > 0", timeout=10_000)
                except PlaywrightError:
                    continue
                visuals = page.evaluate(SHARDING_VISUAL_JS)
                page.screenshot(path=str(shots / "lab_sharding_visual.png"))
                break
            return state, visuals
        except PlaywrightError as failure:
            page.screenshot(path=str(shots / "lab_failure.png"))
            raise CheckFailed(f"{failure}; see {shots / 'lab_failure.png'}") from failure
        finally:
            browser.close()


def check(notebook: str, notebook_dir: Path | None, timeout_s: int, shots: Path) -> None:
    root = notebook_dir or REPO / "tutorials"
    path = root / notebook
    if not path.exists():
        raise CheckFailed(f"{path} does not exist; pass --notebook with a file in {root}.")
    shots.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    in_file = sum(cell["cell_type"] == "code" for cell in json.loads(path.read_text())["cells"])
    with running_lab(notebook_dir, shots / "lab_server.log") as lab:
        # A workspace of its own, so tabs restored from earlier sessions stay closed.
        workspace = f"browser-check-{secrets.token_hex(4)}"
        state, visuals = _run_in_browser(lab.url(notebook, workspace), shots, deadline)
        request = urllib.request.Request(
            f"{lab.base}/lab/api/workspaces/{workspace}?token={lab.token}", method="DELETE"
        )
        urllib.request.urlopen(request, timeout=5).close()
    code = [cell for cell in state["notebook"]["cells"] if cell["cell_type"] == "code"]
    problems = []
    if len(code) != in_file:
        problems.append(f"the browser shows {len(code)} code cells, the file has {in_file}")
    for number, cell in enumerate(code, start=1):
        source = "".join(cell["source"]).strip().splitlines()[:1]
        where = f"code cell {number} ({source[0][:60] if source else 'empty'!r})"
        if not cell.get("execution_count"):
            problems.append(f"{where} did not run")
        for output in cell["outputs"]:
            if output["output_type"] == "error":
                problems.append(f"{where} raised {output['ename']}: {output['evalue']}")
        if not cell["outputs"] and not _only_defines("".join(cell["source"])):
            problems.append(f"{where} gave no output")
    if not visuals:
        problems.append("no sharding visual (a rich table of CPU devices) was rendered")
    if lab.leftovers:
        problems.append(f"had to kill what the server left behind: {lab.leftovers}")
    if problems:
        raise CheckFailed("\n".join(problems))
    print(
        f"{notebook}: {len(code)} code cells ran in Chromium, each with output or only "
        "definitions, no errors, "
        f"{visuals} sharding visual(s); screenshots in {shots}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--notebook", default="01_devices_and_meshes.ipynb")
    parser.add_argument("--notebook-dir", type=Path, default=None, help="default: tutorials/")
    parser.add_argument("--timeout", type=int, default=300, help="seconds for the whole check")
    parser.add_argument("--screenshots", type=Path, default=REPO / "build" / "browser")
    args = parser.parse_args()

    def out_of_time(signum: int, frame: Any) -> None:
        raise CheckFailed(f"the browser check ran past its {args.timeout}s limit")

    def stopped(signum: int, frame: Any) -> None:
        raise CheckFailed(f"stopped by signal {signum}")

    signal.signal(signal.SIGALRM, out_of_time)
    signal.signal(signal.SIGTERM, stopped)  # e.g. from `timeout`: still shut the server down
    signal.alarm(args.timeout + 60)  # the loop's own deadline comes first; this is a backstop
    try:
        check(args.notebook, args.notebook_dir, args.timeout, args.screenshots)
    except CheckFailed as failure:
        print(f"browser check FAILED:\n{failure}", file=sys.stderr)
        return 1
    finally:
        signal.alarm(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())

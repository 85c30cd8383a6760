"""Checks a built site: every tutorial rendered, nothing fetched from the network.

    python docs/_tools/check_site.py docs/_build/html tutorials

Fails (exit 1) when a tutorial notebook has no page, or when a page loads a script,
stylesheet or font from another host, which would break an offline copy of the site.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_REMOTE_ASSET = re.compile(
    r"<script[^>]*\ssrc=\"(?:https?:)?//[^\"]+\""
    r"|<link[^>]*rel=\"(?:stylesheet|preload|modulepreload)\"[^>]*href=\"(?:https?:)?//[^\"]+\""
    r"|<link[^>]*href=\"(?:https?:)?//[^\"]+\"[^>]*rel=\"(?:stylesheet|preload|modulepreload)\""
    r"|@import\s+url\(['\"]?(?:https?:)?//"
)


def problems(site: Path, tutorials: Path) -> list[str]:
    """Everything wrong with the built `site`, one sentence each."""
    found = []
    for notebook in sorted(tutorials.glob("*.ipynb")):
        page = site / "_generated" / "tutorials" / f"{notebook.stem}.html"
        if not page.exists():
            found.append(f"{notebook.name} has no page (expected {page}).")
    for path in sorted([*site.rglob("*.html"), *site.rglob("*.css")]):
        for match in _REMOTE_ASSET.finditer(path.read_text(errors="replace")):
            found.append(f"{path.relative_to(site)} loads a remote asset: {match.group(0)[:120]}")
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    site, tutorials = Path(argv[0]), Path(argv[1])
    if not (site / "index.html").exists():
        print(f"{site} holds no built site (no index.html); run `make docs` first.")
        return 1
    found = problems(site, tutorials)
    for problem in found:
        print(problem)
    pages = len(list(site.rglob("*.html")))
    verdict = "FAILED" if found else "every tutorial rendered, no remote assets"
    print(f"checked {pages} pages: {verdict}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

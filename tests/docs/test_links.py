"""Every link in the tutorials, the docs and the README goes somewhere that exists.

A link to this repository's own files (``github.com/datarax-sharding/datarax-sharding/
blob|tree/main/...``, its raw, Colab, Kaggle and Binder forms, and relative links) must
name a path in this checkout: a file for ``blob`` and a folder for ``tree``. An
``#anchor`` on a link to a markdown file (or to a notebook, through its paired ``.md``)
must name one of its headings, slugged as GitHub and MyST slug them. The site's
generated pages are checked against what they are generated from:
``docs/_generated/tutorials/`` holds copies of ``tutorials/`` and
``docs/_generated/benchmarks.md`` is written from ``docs/benchmarks/``. Links to other
sites cannot be fetched here (the tests run without a network), so only their form is
checked: an http(s) address with a host name and no spaces.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "datarax-sharding/datarax-sharding"
PAGES = sorted(
    [
        ROOT / "README.md",
        *ROOT.glob("tutorials/*.md"),
        *(
            page
            for page in ROOT.glob("docs/**/*.md")
            if not {"_build", "_generated"} & set(page.parts)
        ),
    ]
)
GENERATED = {
    "docs/_generated/tutorials": "tutorials",
    "docs/_generated/benchmarks.md": "docs/benchmarks",
}

_CODE = re.compile(r"^(```|~~~).*?^\1", re.S | re.M)  # fenced code: examples, not links
_INLINE_CODE = re.compile(r"`[^`\n]*`")
_LINK = re.compile(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|(?:href|src)=\"([^\"]+)\"")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
# This repository's files, in the forms its pages use: blob/ a file, tree/ a folder.
_PATH = r"(?P<path>[^?#&\s]*)"
_OURS = (
    rf"github\.com/{REPOSITORY}/(?P<kind>blob|tree)/main/{_PATH}",
    rf"raw\.githubusercontent\.com/{REPOSITORY}/main/(?P<kind>){_PATH}",
    rf"colab\.research\.google\.com/github/{REPOSITORY}/(?P<kind>blob)/main/{_PATH}",
    rf"mybinder\.org/v2/gh/{REPOSITORY}/main\?urlpath=lab/tree/(?P<kind>){_PATH}",
)


def links(text: str) -> list[str]:
    """The targets of the markdown and HTML links in `text`, outside code."""
    text = _INLINE_CODE.sub("", _CODE.sub("", text))
    return [inline or html for inline, html in _LINK.findall(text)]


def slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST make it: ``"Why 8? (a quiz)"`` -> ``why-8-a-quiz``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = re.sub(r"[^\w\- ]", "", text.replace("`", "").strip().lower())
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """A markdown page's anchors: its headings (numbered when repeated), its (label)= targets."""
    text = _CODE.sub("", page.read_text())
    found: set[str] = set()
    for heading in _HEADING.findall(text):
        base = slug(heading)
        name, count = base, 0
        while name in found:
            count += 1
            name = f"{base}-{count}"
        found.add(name)
    return found | set(re.findall(r"^\(([\w\-]+)\)=\s*$", text, re.M))


def _local(path: str) -> Path:
    """A path inside the repository, with generated pages mapped to their sources."""
    for generated, source in GENERATED.items():
        if path == generated or path.startswith(generated + "/"):
            path = source + path[len(generated) :]
    return ROOT / path


def problem(page: Path, target: str) -> str | None:
    """What is wrong with one link of `page`, or None when it is fine."""
    parts = urlsplit(target)
    if parts.scheme in ("http", "https"):
        for pattern in _OURS:
            match = re.search(pattern, target)
            if match:
                path = unquote(match["path"]).rstrip("/")
                anchor = parts.fragment if match.end() == len(target.split("#")[0]) else ""
                return _check_path(_local(path), match["kind"], anchor, target)
        if not parts.netloc or "." not in parts.netloc or " " in target:
            return f"{target} is not a well-formed web address"
        return None
    if parts.scheme:
        return f"{target} uses the scheme {parts.scheme!r}; link with https or a path"
    if not parts.path:
        return None if parts.fragment in anchors(page) else f"no heading for #{parts.fragment}"
    resolved = (page.parent / unquote(parts.path)).resolve()
    path = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else None
    if path is None:
        return f"{target} points outside the repository"
    return _check_path(_local(path), "", parts.fragment, target)


def _check_path(path: Path, kind: str, anchor: str, target: str) -> str | None:
    if not path.exists():
        return f"{target}: {path.relative_to(ROOT)} does not exist"
    if kind == "blob" and not path.is_file():
        return f"{target}: {path.relative_to(ROOT)} is a folder; link it with tree/, not blob/"
    if kind == "tree" and not path.is_dir():
        return f"{target}: {path.relative_to(ROOT)} is a file; link it with blob/, not tree/"
    twin = path.with_suffix(".md") if path.suffix == ".ipynb" else path
    if anchor and twin.suffix == ".md" and twin.is_file() and anchor not in anchors(twin):
        return f"{target}: {twin.relative_to(ROOT)} has no heading for #{anchor}"
    return None


def test_the_checker_finds_what_it_should() -> None:
    page = ROOT / "tutorials" / "01_devices_and_meshes.md"
    found = links(
        '[a](02_sharding_a_batch.ipynb) ![b](https://x.org/i.png "t")\n'
        '`[c](not_a_link.md)` [multi\nline](<../docs/api.md#layout>) <a href="#x">x</a>\n'
        "```\n[d](in_code.md)\n```\n"
    )
    assert found == [
        "02_sharding_a_batch.ipynb",
        "https://x.org/i.png",
        "../docs/api.md#layout",
        "#x",
    ]
    assert slug("Why 8? The `mesh` (a quiz)") == "why-8-the-mesh-a-quiz"
    ours = f"https://github.com/{REPOSITORY}/blob/main"
    assert problem(page, f"{ours}/datarax/sharding/ledger.py") is not None  # renamed file
    assert problem(page, f"{ours}/datarax/sharding/_ledger.py") is None
    assert problem(page, f"{ours}/datarax/sharding") is not None  # a folder through blob/
    assert problem(page, f"https://kaggle.com/k?src={ours}/tutorials/99_none.ipynb") is not None
    assert problem(page, "../docs/api.md#no-such-heading") is not None
    assert problem(page, "https://docs.jax.dev/en/latest/aot.html") is None
    assert problem(page, "https//docs.jax.dev") is not None


@pytest.mark.parametrize("page", PAGES, ids=[page.relative_to(ROOT).as_posix() for page in PAGES])
def test_every_link_points_somewhere_that_exists(page: Path) -> None:
    broken = [found for target in links(page.read_text()) if (found := problem(page, target))]
    assert not broken, f"{page.relative_to(ROOT)} has broken links:\n" + "\n".join(broken)

"""docs/concept_map.md: every concept is mapped, and every place it names exists.

The map names notebook sections by their headings (in italics, after a link to the
notebook) and exercises by their checkers. A renamed heading, a moved figure or a
renamed checker would otherwise leave the map pointing at nothing. Nothing here runs a
notebook: the headings and cells are read from the notebooks' paired .md files.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from _support.curriculum import CONCEPTS

from datarax_course import _core

ROOT = Path(__file__).resolve().parents[2]
MAP = ROOT / "docs" / "concept_map.md"
TUTORIALS = ROOT / "tutorials"

FIELDS = ("sections", "figures", "quiz", "exercise")
LABELS = {
    "Sections": "sections",
    "Figures": "figures",
    "Quiz": "quiz",
    "Quizzes": "quiz",
    "Exercise": "exercise",
    "Exercises": "exercise",
}
# A link to a notebook, or a heading of the last notebook linked, in italics.
REFERENCE = re.compile(
    r"\]\(_generated/tutorials/(?P<notebook>\d\d_[a-z0-9_]+)\.ipynb\)"
    r"|(?<![*\w])\*(?!\*)(?P<heading>[^*]+?)\*(?![*\w])"
)
CHECKER = re.compile(r"`(\d\d)\.(\w+)`")
# What draws a figure in a notebook: matplotlib, datarax.viz, a picture, the playground.
FIGURE = re.compile(
    r"plt\.show\(|(viz|figures)\.plot_\w+\(|figures\.playground\(|display\(Image\(|^!\[",
    re.MULTILINE,
)


def _blocks() -> dict[int, tuple[str, str]]:
    """{concept number: (its heading's name, its block's text)}."""
    blocks = {}
    for part in re.split(r"^## ", MAP.read_text(), flags=re.MULTILINE)[1:]:
        title, _, text = part.partition("\n")
        found = re.fullmatch(r"(\d+)\. (.+)", title.strip())
        if found:  # a concept, not another section of the page
            blocks[int(found.group(1))] = (found.group(2), text)
    return blocks


def _fields(text: str) -> dict[str, str]:
    """{field: its text}, one top-level bullet `- **Field:**` (or plural) each."""
    fields = {}
    for item in re.split(r"^- ", text, flags=re.MULTILINE)[1:]:
        item = item.split("\n\n")[0]
        found = re.match(r"\*\*(\w+):\*\*", item)
        assert found and found.group(1) in LABELS, f"not a field of the map: {item[:60]!r}"
        label = LABELS[found.group(1)]
        assert label not in fields, f"{found.group(1)} given twice"
        fields[label] = " ".join(item[found.end() :].split())
    return fields


def _references(field: str) -> list[tuple[str, str]]:
    """The (notebook, heading) pairs a field names; each heading needs a notebook first."""
    pairs, notebook = [], None
    for found in REFERENCE.finditer(field):
        if found.group("notebook"):
            notebook = found.group("notebook")
        else:
            assert notebook, f"a heading before any notebook: {found.group('heading')!r}"
            pairs.append((notebook, found.group("heading").strip()))
    return pairs


def _sections(notebook: str) -> dict[str, str]:
    """{heading: the text under it} for the `## ` headings of a notebook's .md."""
    path = TUTORIALS / f"{notebook}.md"
    assert path.exists(), f"no notebook {notebook}"
    parts = re.split(r"^## (.+)$", path.read_text(), flags=re.MULTILINE)
    return {heading.strip(): text for heading, text in zip(parts[1::2], parts[2::2], strict=True)}


def test_every_concept_is_mapped_in_order() -> None:
    blocks = _blocks()
    assert list(blocks) == sorted(CONCEPTS), f"concepts mapped, in order: {list(blocks)}"
    for number, concept in CONCEPTS.items():
        assert blocks[number][0].lower() == concept.lower(), (number, blocks[number][0])


def test_the_map_is_in_the_docs_toctree_after_the_concepts_page() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    assert re.search(r"^concepts\nconcept_map$", index, re.MULTILINE)


@pytest.mark.parametrize("number", sorted(CONCEPTS))
def test_every_place_a_concept_names_exists(number: int) -> None:
    name, text = _blocks()[number]
    fields = _fields(text)
    assert set(fields) == set(FIELDS), f"{name}: fields {sorted(fields)}"
    for label, field in fields.items():
        pairs = _references(field)
        if not pairs:  # allowed only when the map says so
            assert "none yet" in field, f"{name}: {label} names no section"
            continue
        for notebook, heading in pairs:
            sections = _sections(notebook)
            assert heading in sections, f"{name}: {notebook} has no heading {heading!r}"
            body = sections[heading]
            if label == "figures":
                assert FIGURE.search(body), f"{name}: no figure under {notebook} {heading!r}"
            if label == "quiz":
                assert heading.startswith("Quiz") and "<details>" in body, (name, heading)
            if label == "exercise":
                assert heading.startswith("Exercise") and "check(" in body, (name, heading)
    checkers = CHECKER.findall(fields["exercise"])
    assert checkers or "none yet" in fields["exercise"], f"{name}: no exercise named"
    for number_of_notebook, exercise in checkers:
        checker = f"{number_of_notebook}.{exercise}"
        assert checker in _core._CHECKERS, f"{name}: {checker} is not a registered checker"
        (notebook,) = TUTORIALS.glob(f"{number_of_notebook}_*.md")
        assert f'check("{checker}"' in notebook.read_text(), (
            f"{notebook.name} never checks {checker}"
        )


def test_every_checker_is_on_the_map() -> None:
    named = {f"{a}.{b}" for a, b in CHECKER.findall(MAP.read_text())}
    registered = {name for name in _core._CHECKERS if name != "00.example"}
    assert registered <= named, f"checkers missing from the map: {sorted(registered - named)}"

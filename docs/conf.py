"""Sphinx configuration: the tutorials (executed), the concepts, the API and benchmarks.

Builds offline: no intersphinx, no downloads. The notebooks in ``../tutorials`` are
copied into ``_generated/tutorials`` before the build, so each is rendered once,
from its ``.ipynb``; one that ``make test`` ran (into ``../.executed``) with the
same cells is copied with its outputs and not run again, every other one runs here.
The benchmark page is generated from whatever ``benchmarks/`` holds.
"""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS))
sys.path.insert(0, str(DOCS.parent))

from _tools.sources import copy_tutorials, write_benchmarks_page  # noqa: E402

GENERATED = DOCS / "_generated"
RAN = copy_tutorials(DOCS.parent / "tutorials", GENERATED / "tutorials", DOCS.parent / ".executed")
write_benchmarks_page(DOCS / "benchmarks", GENERATED / "benchmarks.md")

project = "datarax-sharding"
author = "datarax-sharding authors"
copyright = "datarax-sharding authors"

extensions = ["myst_nb", "sphinx.ext.autodoc", "sphinx.ext.napoleon"]

exclude_patterns = [
    "_build",
    "jupyter_execute",
    "_tools",
    "benchmarks/*.md",
    "**/.ipynb_checkpoints",
]
source_suffix = {".md": "myst-nb", ".ipynb": "myst-nb"}

# Notebooks: run once (or taken as make test ran them), reuse the cache while a notebook
# is unchanged, fail on any error.
nb_execution_mode = "cache"
nb_execution_excludepatterns = [f"_generated/tutorials/{name}" for name in RAN]
nb_execution_cache_path = str(DOCS / "_build" / ".jupyter_cache")
nb_execution_timeout = 180
nb_execution_raise_on_error = True
nb_execution_show_tb = True
nb_merge_streams = True
# The playground is a live widget only in a kernel: the site shows the plain-HTML
# snapshot it also outputs, and loads no widget manager (nothing from a CDN).
nb_ipywidgets_js: dict[str, dict[str, str]] = {}
nb_mime_priority_overrides = [("html", "application/vnd.jupyter.widget-view+json", None)]

myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
autodoc_typehints = "description"
napoleon_google_docstring = True
napoleon_numpy_docstring = False

html_theme = "sphinx_book_theme"
html_title = "datarax-sharding"
html_static_path: list[str] = []
html_theme_options = {
    "repository_url": "https://github.com/datarax-sharding/datarax-sharding",
    "use_repository_button": True,
    "path_to_docs": "docs",
    "show_toc_level": 2,
}
html_last_updated_fmt = None


def _init_signature(app, what, name, obj, options, signature, return_annotation):
    """Show a class's own constructor arguments.

    flax.nnx modules are built by a metaclass whose ``__call__`` takes
    ``(*args, **kwargs)``; autodoc would show that instead of ``__init__``'s.
    """
    if what != "class" or signature != "(*args, **kwargs)":
        return None
    params = list(inspect.signature(obj.__init__).parameters.values())[1:]
    plain = [p.replace(annotation=inspect.Parameter.empty) for p in params]
    return str(inspect.Signature(plain)), return_annotation


def setup(app):
    app.connect("autodoc-process-signature", _init_signature)

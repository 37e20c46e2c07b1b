"""Sphinx configuration for the magicfs documentation.

Build: ``.venv/bin/python -m sphinx -W -b html docs docs/_build/html`` (tests/test_docs.py
runs the same build with warnings as errors). Pages are Markdown (myst-parser); the API
reference is rendered by autodoc from the docstrings, whose reST roles
(:class:, :mod:, :data:) Sphinx understands natively.
"""

from __future__ import annotations

import magicfs

project = "magicfs"
author = "magicfs developers"
copyright = "magicfs developers, Apache License 2.0"
release = magicfs.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# _drafts/ holds pages other contributors hand in; they are placed by hand, not built.
exclude_patterns = ["_build", "_drafts", "Thumbs.db", ".DS_Store"]

myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"show-inheritance": True}
# Types named in the hints that live in libraries without intersphinx here.
nitpicky = False

html_theme = "alabaster"
html_title = f"magicfs {release}"
html_static_path: list[str] = []

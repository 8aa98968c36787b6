"""Sphinx settings of the user manual (docs/*.md, MyST Markdown); the evidence site is `iteralab build`'s, not this.

Built offline with warnings as errors by tests/test_docs.py:
    python -m sphinx -W --keep-going -b html docs docs/_build/html
"""

import iteralab

project = "IteraGPU Lab"
release = version = iteralab.__version__

extensions = [
    "myst_parser",  # the pages are Markdown, readable on GitHub as they are
    "sphinx_click",  # the command reference, generated from the click commands (reference.md)
    "sphinx.ext.autodoc",  # the Python API page, generated from the docstrings (api.md)
]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

# Every Markdown heading down to level 4 gets its GitHub-style anchor, so `page.md#anchor` links work on GitHub and
# here alike, and a link whose anchor names no heading is a warning (an error under -W).
myst_heading_anchors = 4

# Text stays as written: `--resume` is not turned into an en dash, nor quotes into curly ones, in prose and in the
# generated reference alike (what --help prints is what the reference shows).
smartquotes = False

# No intersphinx and nothing else fetched: the build reads only this folder and the installed package.
autodoc_member_order = "bysource"
autodoc_typehints = "description"

html_theme = "furo"
html_title = f"IteraGPU Lab {release}"
html_show_sourcelink = False

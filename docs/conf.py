"""Sphinx configuration of jupyter-distrain's reference: Markdown pages (MyST), the PyData theme, no network.
Build: `.venv/bin/python -m sphinx -W --keep-going -b html docs docs/_build/html` (tests/test_docs.py runs it)."""

project = "jupyter-distrain"
author = "jupyter-distrain contributors"
copyright = "jupyter-distrain contributors"

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]

myst_heading_anchors = 3  # headings down to ### are link targets: [text](page.md#a-heading)

html_theme = "pydata_sphinx_theme"
html_title = "jupyter-distrain"
html_static_path = ["_static"]
html_theme_options = {"navigation_with_keys": False, "show_toc_level": 2}
html_show_sourcelink = False
html_sidebars = {"**": []}  # every page is at the top of the toctree: the header lists them, no section to navigate

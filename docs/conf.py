"""Sphinx configuration: letcc's user guide and API reference.

Build (offline, about 10 s): ``pip install ".[docs]"`` then
``python -m sphinx -W -b html docs docs/_build/html`` and, for the guide's
examples, ``python -m sphinx -W -b doctest docs docs/_build/doctest``.
"""
import letcc

project = "letcc"
author = "letcc contributors"
release = letcc.__version__
version = release

extensions = ["sphinx.ext.autodoc", "sphinx.ext.doctest", "numpydoc"]
# no intersphinx: the build never fetches anything
templates_path = []
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []

autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "signature"
numpydoc_show_class_members = False        # members are listed explicitly in api.rst
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False

# every doctest block starts with these names
doctest_global_setup = """
import numpy as np
import letcc
np.set_printoptions(precision=4, suppress=True)
"""

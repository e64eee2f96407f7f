"""The package's imports form no circle, and the layers of DESIGN.md point down.

Read from the source (ast), deferred imports inside functions included, those
under ``if TYPE_CHECKING:`` left out (they never run). A circle between two
modules means neither can be understood or tested without the other.
"""
from __future__ import annotations

import ast
import functools
import os

import pytest

import letcc

PACKAGE = os.path.dirname(os.path.abspath(letcc.__file__))

# DESIGN.md's layers, top (may import everything below) to bottom; a module of
# a lower layer never imports one of a higher layer
LAYERS = [
    ("experiments", "cli", "bench", "_cli_error"),
    ("serving",),
    ("runtime",),
    ("adversaries", "stragglers"),
    ("codes",),
    ("splines",),
]


def module_files():
    for root, _, files in os.walk(PACKAGE):
        for name in files:
            if name.endswith(".py"):
                path = os.path.join(root, name)
                rel = os.path.relpath(path, os.path.dirname(PACKAGE))[:-3].replace(os.sep, ".")
                yield (rel[: -len(".__init__")] if rel.endswith(".__init__") else rel), path


def _type_checking_only(node) -> bool:
    test = node.test
    return isinstance(test, ast.Name) and test.id == "TYPE_CHECKING" or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(module: str, path: str, known: set) -> set:
    tree = ast.parse(open(path).read(), path)
    out = set()

    def visit(node):
        if isinstance(node, ast.If) and _type_checking_only(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")
                pkg = parts if path.endswith("__init__.py") else parts[:-1]
                base = ".".join(pkg[: len(pkg) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            names = []
        for name in names:
            while name and name not in known:
                name = name.rpartition(".")[0]
            if name.startswith("letcc") and name != module:
                out.add(name)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return out


@functools.lru_cache(maxsize=None)
def graph():
    files = dict(module_files())
    known = set(files)
    return {m: imports_of(m, p, known) - {"letcc"} for m, p in files.items()}


def test_no_import_circle():
    g = graph()
    # a module importing its own package's __init__ (letcc.codes -> letcc.codes.x and back) is
    # Python's package mechanism, not a circle between two modules: the edge to a parent package
    # is kept only from outside it
    def edges(m):
        return {t for t in g[m] if not m.startswith(t + ".")}

    seen, stack, circles = {}, [], []

    def walk(m):
        seen[m] = "open"
        stack.append(m)
        for t in sorted(edges(m)):
            if seen.get(t) == "open":
                circles.append(stack[stack.index(t):] + [t])
            elif t not in seen:
                walk(t)
        stack.pop()
        seen[m] = "done"

    for m in sorted(g):
        if m not in seen:
            walk(m)
    assert not circles, "import circles: " + "; ".join(" -> ".join(c) for c in circles)


def _layer(module: str):
    parts = module.split(".")
    name = parts[1] if len(parts) > 1 else ""
    for i, group in enumerate(LAYERS):
        if name in group:
            return i
    return None


@pytest.mark.parametrize("module", sorted(graph()))
def test_imports_point_down_the_layers(module):
    here = _layer(module)
    if here is None:
        return
    up = [t for t in graph()[module] if _layer(t) is not None and _layer(t) < here]
    assert not up, f"{module} imports {up} from a higher layer"

"""The package's house rules, read off its source: no import cycles (imports inside functions count), every
import goes down the layers of the course, and the old homes of moved code are gone (no shims).

The import graph is built with ``ast`` from every file under ``companion/``: ``import a.b`` and
``from a import b`` are edges to the module they name (``a.b`` if it is a module, else ``a``), wherever they
sit in the file, at the top or inside a function.
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "companion"

# Low to high. A module may import its own area and the areas of the same or a lower layer, never a higher one.
LAYERS = [
    {"_checks", "_files", "timing", "experiments"},
    {"tokens", "embeddings", "masks", "positions", "layers", "moe", "packing", "scratch", "plots", "scaling", "data"},
    {"attention"},
    {"models"},
    {"generation"},
    {"finetune", "training"},
    {"cli", "exercises"},
]


def module_files() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    graph: dict[str, set[str]] = {name: set() for name in files}
    for name, path in files.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    target = alias.name
                    while target and target not in files:
                        target = target.rpartition(".")[0]
                    if target:
                        graph[name].add(target)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join(parts + ([base] if base else []))
                for alias in node.names:
                    target = f"{base}.{alias.name}"
                    if target in files:
                        graph[name].add(target)
                    elif base in files:
                        graph[name].add(base)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph[v]:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def area(module: str) -> str:
    return module.split(".")[1] if module.count(".") else ""


def layer(module: str) -> int:
    for i, names in enumerate(LAYERS):
        if area(module) in names:
            return i
    raise AssertionError(f"{module} is in no layer of LAYERS; add its area ({area(module)!r}) to the list")


def test_the_graph_finds_imports_inside_functions() -> None:
    """The checker itself: an import inside a function is an edge, so a hidden cycle would be caught."""
    graph = import_graph()
    assert "companion.tokens.base" in graph["companion.data.translation"]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]


def test_no_import_cycle_inside_companion() -> None:
    assert cycles(import_graph()) == []


def test_every_import_goes_down_the_layers() -> None:
    graph = import_graph()
    upward = [
        f"{a} -> {b}"
        for a, targets in graph.items()
        if a != "companion"  # the package root loads any submodule on first use (PEP 562)
        for b in targets
        if b != "companion" and area(a) != area(b) and layer(b) > layer(a)
    ]
    assert upward == []
    assert not [a for a, targets in graph.items() if a != "companion" and "companion" in targets], (
        "a submodule imports the package root"
    )


@pytest.mark.parametrize(
    "old",
    ["companion._renames", "companion.train_loop", "companion.textdata", "companion.translation",
     "companion.adapters", "companion.checkpoints", "companion.models.transformer", "companion.models.pretrained",
     "companion.models.hf_loaders"],
)  # fmt: skip
def test_old_homes_are_gone(old: str) -> None:
    """One room per concept: moved code has no second address (its new home is in the README's package map)."""
    assert importlib.util.find_spec(old) is None

"""The package is discoverable (issue 13, item 6): lazy submodules (PEP 562) and ``__all__`` everywhere."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import subprocess
import sys

import pytest

import companion

# Modules whose ``__all__`` this test checks: every public module under these packages.
PACKAGES = (
    "companion.attention", "companion.data", "companion.generation", "companion.models", "companion.positions",
    "companion.scratch", "companion.tokens", "companion.training",
)  # fmt: skip
MODULES = ("embeddings", "layers", "masks", "packing", "scaling")


def public_modules() -> list[str]:
    names = [f"companion.{m}" for m in MODULES] + list(PACKAGES)
    for package in PACKAGES:
        path = importlib.import_module(package).__path__
        names += [f"{package}.{m.name}" for m in pkgutil.iter_modules(path) if not m.name.startswith("_")]
    return sorted(names)


def test_submodules_load_on_first_attribute_access() -> None:
    code = (
        "import sys, companion\n"
        "assert 'companion.models' not in sys.modules\n"
        "assert companion.models.GPT.__name__ == 'GPT'\n"
        "assert companion.positions.apply_rope is __import__('companion.positions', fromlist=['x']).apply_rope\n"
        "assert 'matplotlib' not in sys.modules\n"
        "assert 'models' in dir(companion) and 'generation' in dir(companion)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_an_unknown_attribute_is_still_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'modles'"):
        companion.modles  # noqa: B018
    with pytest.raises(AttributeError):
        companion._checks_typo  # noqa: B018


@pytest.mark.parametrize("name", public_modules())
def test_every_public_module_declares_all_and_every_name_exists(name: str) -> None:
    module = importlib.import_module(name)
    assert hasattr(module, "__all__"), f"{name} has no __all__"
    missing = [n for n in module.__all__ if not hasattr(module, n) and importlib.util.find_spec(f"{name}.{n}") is None]
    assert not missing, f"{name}.__all__ names what it does not define: {missing}"
    assert len(set(module.__all__)) == len(module.__all__), f"{name}.__all__ repeats a name"

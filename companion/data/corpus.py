"""The small English corpus of the character-level language model (chapters 1 and 10), shipped with the package.

Checked in ``tests/test_data.py``: it is a few KB of ASCII prose.
"""

from __future__ import annotations

from importlib import resources

__all__ = ["char_corpus"]


def char_corpus() -> str:
    """About 5 KB of plain English about transformers, written for this course (ASCII only)."""
    return resources.files("companion").joinpath("data_files/char_corpus.txt").read_text(encoding="utf-8")

"""Argument check shared by the three tokenizers of :mod:`companion.tokens`."""

from __future__ import annotations


def _check_text(name: str, text: object) -> None:
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str, got {type(text).__name__}")

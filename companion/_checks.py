"""Argument checks shared by the whole package.

Every public function validates what a reader can get wrong and raises an error whose message names
the argument, the value received and what was expected. ``assert`` is kept for internal invariants.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import Tensor


def check_tensor(name: str, x: Any, ndim: int | tuple[int, ...] | None = None) -> None:
    """Raise ``TypeError`` if ``x`` is not a tensor, ``ValueError`` if its rank is not ``ndim``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if ndim is None:
        return
    allowed = (ndim,) if isinstance(ndim, int) else tuple(ndim)
    if x.dim() not in allowed:
        expected = " or ".join(str(n) for n in allowed)
        raise ValueError(f"{name} must have {expected} dimensions, got shape {tuple(x.shape)} ({x.dim()} dims)")
    if x.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(x.shape)}); expected at least one element")


def check_same_dtype_device(**tensors: Tensor) -> None:
    """Raise ``ValueError`` if the given tensors do not share one dtype and one device."""
    items = [(k, v) for k, v in tensors.items() if v is not None]
    if not items:
        return
    first_name, first = items[0]
    for name, t in items[1:]:
        if t.dtype != first.dtype:
            raise ValueError(f"{name} has dtype {t.dtype} but {first_name} has dtype {first.dtype}; expected one dtype")
        if t.device != first.device:
            raise ValueError(f"{name} is on {t.device} but {first_name} is on {first.device}; expected one device")


def check_positive_int(name: str, value: Any, *, allow_zero: bool = False) -> None:
    """Raise ``TypeError`` for a non-integer, ``ValueError`` for a value below 1 (or 0)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    low = 0 if allow_zero else 1
    if value < low:
        raise ValueError(f"{name}={value} is invalid; expected an integer >= {low}")


def check_divisible(name_a: str, a: int, name_b: str, b: int) -> None:
    """Raise ``ValueError`` unless ``a`` is divisible by ``b``."""
    if b == 0 or a % b != 0:
        raise ValueError(f"{name_a}={a} is not divisible by {name_b}={b}")


def check_choice(name: str, value: Any, choices: Iterable[Any]) -> None:
    """Raise ``ValueError`` unless ``value`` is one of ``choices``."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; expected one of {', '.join(map(repr, choices))}")


def check_finite(name: str, x: Tensor) -> None:
    """Raise ``ValueError`` if ``x`` holds a NaN or an infinity."""
    if not torch.isfinite(x).all():
        raise ValueError(f"{name} contains NaN or infinite values; expected finite numbers")

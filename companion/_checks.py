"""Argument checks shared by the whole package.

Every public function validates what a reader can get wrong and raises an error whose message names
the argument, the value received and what was expected. ``assert`` is kept for internal invariants.
"""

from __future__ import annotations

import math
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


def check_input_dtype(name: str, x: Tensor, weight: Tensor) -> None:
    """Raise ``TypeError`` unless ``x`` is floating point with the dtype of the layer's ``weight`` (a uint8 image,
    float64 data into a float32 model). Under autocast the layers cast their inputs themselves: dtype not checked."""
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating-point tensor, got dtype {x.dtype}; convert it first (e.g. "
                        f"{name}.float(), or uint8 pixels / 255.0)")
    if x.dtype != weight.dtype and not torch.is_autocast_enabled(x.device.type):
        raise TypeError(f"{name} has dtype {x.dtype} but the layer's weights are {weight.dtype}; expected one dtype "
                        f"(convert one of them, e.g. {name}.to({weight.dtype}))")


def plural(n: int, noun: str) -> str:
    """``n`` and ``noun`` in the right number for a message: "1 token", "2 tokens", "1,024 tokens"."""
    return f"{n:,} {noun}" if n == 1 else f"{n:,} {noun}s"


# --- scalars (issue 13: one rule per idea, used by every module) ----------------------------------


def _is_real(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and not isinstance(value, complex)


def check_bool(name: str, value: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is ``True`` or ``False`` (not ``'False'``, not 0)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, got {value!r} ({type(value).__name__})")


def check_string(name: str, value: Any, *, allow_empty: bool = False) -> None:
    """Raise ``TypeError`` unless ``value`` is a ``str``; ``ValueError`` if it is empty (unless allowed)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r} ({type(value).__name__})")
    if not allow_empty and not value:
        raise ValueError(f"{name} is the empty string; expected at least one character")


def check_number(name: str, value: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is a real number (int or float, not bool), ``ValueError`` unless finite."""
    if not _is_real(value):
        raise TypeError(f"{name} must be a number, got {value!r} ({type(value).__name__})")
    if not math.isfinite(value):
        raise ValueError(f"{name}={value!r} is invalid; expected a finite number")


def check_positive_float(name: str, value: Any, *, allow_zero: bool = False) -> None:
    """Raise unless ``value`` is a finite number > 0 (or >= 0 with ``allow_zero``)."""
    check_number(name, value)
    if value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"{name}={value!r} is invalid; expected a finite number {'>=' if allow_zero else '>'} 0")


def check_probability(name: str, value: Any, *, allow_zero: bool = True, allow_one: bool = True) -> None:
    """Raise unless ``value`` is a number in [0, 1]; ``allow_zero``/``allow_one`` open either end."""
    check_number(name, value)
    low_ok = value > 0 or (value == 0 and allow_zero)
    high_ok = value < 1 or (value == 1 and allow_one)
    if not (low_ok and high_ok):
        interval = f"{'[' if allow_zero else '('}0, 1{']' if allow_one else ')'}"
        raise ValueError(f"{name}={value!r} is invalid; expected a probability in {interval}")


def check_dropout(name: str, value: Any) -> None:
    """Raise unless ``value`` is a dropout probability in [0, 1) (1 would drop everything)."""
    check_probability(name, value, allow_one=False)


# --- tensors of token ids and masks ------------------------------------------------------------------

ID_DTYPES = (torch.int16, torch.int32, torch.int64)  # the integer dtypes accepted as token ids


def check_token_ids(
    name: str, ids: Any, *, ndim: int | tuple[int, ...] | None = None, vocab_size: int | None = None
) -> None:
    """One rule for token ids: a non-empty int16/int32/int64 tensor, each id in ``[0, vocab_size)``.

    The range check reads the minimum and maximum back to the host (a device sync on an accelerator):
    call it once at an API boundary (a prompt), not inside a decoding step.
    """
    check_tensor(name, ids, ndim)
    if ids.dtype not in ID_DTYPES:
        raise TypeError(f"{name} must hold integer token ids (int16, int32 or int64), got dtype {ids.dtype}")
    if ids.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(ids.shape)}); expected at least one token id")
    if vocab_size is not None:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or high >= vocab_size:
            bad = low if low < 0 else high
            raise ValueError(f"token id {bad} in {name} is out of range; expected 0 <= id < vocab_size={vocab_size}")


def check_token_id(name: str, value: Any, vocab_size: int | None = None) -> None:
    """One token id given as a Python int, optionally in ``[0, vocab_size)``."""
    check_positive_int(name, value, allow_zero=True)
    if vocab_size is not None and value >= vocab_size:
        raise ValueError(f"{name}={value} is outside the vocabulary; expected 0 <= {name} < vocab_size={vocab_size}")


def check_mask(name: str, mask: Any, scores_shape: tuple[int, ...], device: torch.device) -> None:
    """An attention mask: bool (True = may attend) or additive float without NaN or +inf, broadcastable
    to ``scores_shape`` and on ``device``.

    The NaN / +inf scan runs for masks in CPU memory only: on an accelerator it would cost a device sync
    on every attention call (masks built by :mod:`companion.masks` are checked where they are built).
    """
    check_tensor(name, mask)
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        raise TypeError(f"{name} must be bool (True = may attend) or additive float, got dtype {mask.dtype}")
    if mask.device != device:
        raise ValueError(f"{name} is on {mask.device} but q is on {device}; expected one device")
    ok = mask.dim() <= len(scores_shape)
    if ok:
        try:
            ok = torch.broadcast_shapes(mask.shape, scores_shape) == torch.Size(scores_shape)
        except RuntimeError:
            ok = False
    if not ok:
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)}, which does not broadcast to the scores shape "
            f"(..., T, S) = {tuple(scores_shape)}"
        )
    if mask.dtype != torch.bool and mask.device.type == "cpu":
        check_additive_mask(name, mask)


def check_additive_mask(name: str, mask: Tensor) -> None:
    """Raise ``ValueError`` if a float mask holds NaN or +inf (only 0 / finite biases / -inf make sense)."""
    if bool(torch.isnan(mask).any()) or bool((mask == float("inf")).any()):
        raise ValueError(f"{name} holds NaN or +inf; expected an additive mask of finite values and -inf")


# --- classification --------------------------------------------------------------------------------------


def check_num_labels(name: str, value: Any) -> None:
    """A number of classes: an int >= 2 (a classifier with one label has nothing to decide)."""
    check_positive_int(name, value)
    if value < 2:
        raise ValueError(f"{name}={value} is invalid; expected at least 2 classes (one label leaves nothing to decide)")


def check_labels(
    name: str, labels: Any, num_labels: int, *, ignore_index: int | None = -100, bound: str = "num_labels",
    require_scored: bool = False,
) -> None:
    """Class labels (or target token ids): an integer tensor whose entries are in ``[0, num_labels)`` or equal
    ``ignore_index``; with ``require_scored``, at least one that is not ``ignore_index`` (a loss that scores
    nothing is NaN). ``bound`` names ``num_labels`` in the message ("vocab_size" for tokens)."""
    check_tensor(name, labels)
    if labels.dtype not in ID_DTYPES:
        raise TypeError(f"{name} must hold integer class labels or token ids (int16, int32 or int64), got dtype "
                        f"{labels.dtype}")
    scored = labels if ignore_index is None else labels[labels != ignore_index]
    if scored.numel() and (int(scored.min()) < 0 or int(scored.max()) >= num_labels):
        bad = int(scored.min()) if int(scored.min()) < 0 else int(scored.max())
        skip = "" if ignore_index is None else f" (or {ignore_index} to leave a position out)"
        raise ValueError(f"label {bad} in {name} is out of range; expected 0 <= label < {bound}={num_labels}{skip}")
    if require_scored and not scored.numel():
        raise ValueError(f"{name} scores no position (every label is {ignore_index}); expected at least one label "
                         f"in [0, {bound}={num_labels})")

"""Check your own implementation of a course idea against the companion package.

Usage in a chapter::

    from companion import exercises

    def my_softmax(x, dim=-1):
        e = (x - x.amax(dim, keepdim=True)).exp()
        return e / e.sum(dim, keepdim=True)

    exercises.check("softmax", my_softmax)   # prints "✅ softmax: all 6 cases match", returns True
    exercises.list()                          # the available checks and the signature each expects

``check`` calls your function on several inputs made from fixed seeds plus edge cases (huge logits, a
single token, rows masked all but one, batch dimensions), compares with the package's own function
(never a second copy of it), and prints one verdict. On a mismatch it names the first failing case, the
largest error and where it is, and a hint; when your output matches a well-known mistake (softmax over
the wrong axis, no 1/√d_k, masking after the softmax, mixed RoPE pairings, unbiased variance, heads split
without a transpose, overlapping BPE merges, ...) the hint names that mistake. A wrong answer, or an
exception raised by your function, never raises: ``check`` returns False.

The checks and the functions they expect (inputs are float32 tensors unless said otherwise):

==============================  ==================================================================
name                            your function
==============================  ==================================================================
softmax                         fn(x, dim=-1) -> same shape and dtype as x
scaled_dot_product_attention    fn(q, k, v, mask=None) -> out; bool mask, True = may attend
split_heads                     fn(x (B, T, D), n_heads) -> (B, H, T, D_h)
merge_heads                     fn(x (B, H, T, D_h)) -> (B, T, D)
causal_mask                     fn(t) -> (T, T): bool (True = may attend) or additive float (0 / -inf)
sinusoidal_encoding             fn(seq_len, d_model) -> (T, D)
rope                            fn(x (T, D_h), positions (T,)) -> (T, D_h); adjacent pairs (RoFormer)
rope_half                       fn(x (T, D_h), positions (T,)) -> (T, D_h); half pairs (HF Llama)
layer_norm                      fn(x (..., D), gamma (D,), beta (D,), eps=1e-5) -> (..., D)
bpe_merge                       fn(ids: list[int], pair: tuple[int, int], new_id: int) -> list[int]
rms_norm                        fn(x (..., D), weight (D,), eps=1e-6) -> (..., D)
swiglu                          fn(x, gate_weight, up_weight, down_weight) -> (..., D); nn.Linear layout
top_p_filter                    fn(logits (..., V), p) -> logits with the dropped tokens at -inf
==============================  ==================================================================

References: :mod:`companion.attention`, :mod:`companion.masks`, :mod:`companion.positions`,
:mod:`companion.layers`, :mod:`companion.tokens`, :mod:`companion.generation`, imported when a check runs.
Running a check does not touch the global random state (each case uses its own seeded generator).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from companion._checks import check_choice
from companion.exercises import _attention, _layers_tokens, _norms_ffn, _positions
from companion.exercises._runner import Check, run

__all__ = ["check", "list", "list_checks"]

_ORDER = [
    *_attention.CHECKS,  # chapters 3-4: softmax, attention, split/merge heads
    *_positions.CHECKS,  # chapters 5 and 7: causal mask, sinusoidal, rope, rope_half
    *_layers_tokens.CHECKS,  # chapters 1 and 6: layer_norm, bpe_merge
    *_norms_ffn.CHECKS,  # chapter 6: rms_norm, swiglu
    _attention.TOP_P,  # chapter 9
]
CHECKS: dict[str, Check] = {c.name: c for c in _ORDER}


class CheckTable(dict):
    """``{name: one-line description}``, displayed as a table (so a notebook cell shows it once)."""

    def __repr__(self) -> str:
        width = max(len(name) for name in self)
        lines = [f"{name.ljust(width)}  {CHECKS[name].description}\n{' ' * width}  {CHECKS[name].signature}"
                 for name in self]
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's display hook
        printer.text(repr(self))


def list_checks() -> CheckTable:
    """The available checks: a dict name -> one-line description that displays as a table with signatures."""
    return CheckTable((c.name, c.description) for c in _ORDER)


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def check(name: str, fn: Callable[..., Any]) -> bool:
    """Run your function ``fn`` against the companion package on the cases of check ``name``.

    Prints one line: "✅ softmax: all 6 cases match", or the first failing case with its error and a hint.
    Returns True if every case matches, False otherwise; an exception inside ``fn`` counts as a failure.

    Raises:
        TypeError: ``name`` is not a string, or ``fn`` is not callable.
        ValueError: ``name`` is not one of the checks listed by :func:`list_checks`.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str such as 'softmax', got {type(name).__name__}")
    if not callable(fn):
        raise TypeError(f"fn must be callable (your function), got {type(fn).__name__}")
    check_choice("name", _normalise(name), CHECKS)
    return run(CHECKS[_normalise(name)], fn)


list = list_checks  # noqa: A001  the name DESIGN.md promises; the module itself never calls the builtin

"""The machinery behind :func:`companion.exercises.check`: cases, comparison, and the printed verdict.

A :class:`Check` is a named recipe that builds a list of :class:`Case` objects. Each case holds the inputs
to pass to the reader's function, the expected output (computed by the companion package itself), the
hint to print if the case fails, and optionally a few *known mistakes*: outputs that a typical wrong
answer produces on the same inputs, each with a hint that names that mistake. When the reader's output
matches a known mistake, that hint is printed instead of the case's general one.

Everything printed is deterministic (no timings, no memory addresses), because chapters store it.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

# A judge looks at what the reader's function returned and says what is wrong with it, or None if right.
Judge = Callable[[Any], "str | None"]


@dataclass
class Case:
    """One input to try, what the companion package returns on it, and what to say if they differ."""

    label: str  # short name shown in the verdict, e.g. "large logits"
    args: tuple  # positional arguments passed to the reader's function (deep-copied for each call)
    expected: Any  # the reference output (a Tensor), or a Judge for outputs compared in a custom way
    hint: str | None = None  # what to try if this case fails (default: the check's hint)
    kwargs: dict = field(default_factory=dict)  # keyword arguments passed to the reader's function
    mistakes: Sequence[tuple[Any, str]] = ()  # (output of a known wrong answer, hint naming it)
    atol: float | None = None  # tolerances for this case (default: the check's)
    rtol: float | None = None


@dataclass(frozen=True)
class Check:
    """A named exercise check: the signature the reader implements and the cases it is tried on."""

    name: str  # what the reader passes to check(name, fn)
    signature: str  # the reader's function, e.g. "fn(x, dim=-1) -> Tensor"
    description: str  # one line for list_checks()
    hint: str  # the general hint, printed when a failing case has none of its own
    make_cases: Callable[[], list[Case]]  # builds the cases (imports the references lazily)
    atol: float = 1e-5
    rtol: float = 1e-4


def seeded(seed: int) -> torch.Generator:
    """A private generator, so that running a check never moves the notebook's global random state."""
    return torch.Generator().manual_seed(seed)


def _index(flat: int, shape: Sequence[int]) -> tuple[int, ...]:
    idx = []
    for size in reversed(shape):
        idx.append(flat % size)
        flat //= size
    return tuple(reversed(idx))


def _num(x: float | bool) -> str:
    if isinstance(x, bool):
        return str(x)
    return f"{x:.3g}"


def compare(out: Any, expected: Tensor, atol: float, rtol: float) -> tuple[str, str] | None:
    """Return None if ``out`` matches ``expected``, else (kind, description) with kind in
    {"type", "shape", "dtype", "value"}."""
    if out is None:
        return "type", "returned None (a missing `return`?), expected a torch.Tensor"
    if not isinstance(out, Tensor):
        return "type", f"returned a {type(out).__name__} object, expected a torch.Tensor"
    if tuple(out.shape) != tuple(expected.shape):
        return "shape", f"returned shape {tuple(out.shape)}, expected {tuple(expected.shape)}"
    if out.dtype != expected.dtype:
        return "dtype", f"returned dtype {out.dtype}, expected {expected.dtype}"
    out = out.detach().cpu()
    if expected.dtype == torch.bool or not expected.dtype.is_floating_point:
        bad = out != expected
    else:
        bad = ~torch.isclose(out, expected, rtol=rtol, atol=atol)
    if not bad.any():
        return None
    if expected.dtype == torch.bool or not expected.dtype.is_floating_point:
        flat = int(bad.flatten().nonzero()[0])
        err_text = "differs"
    else:
        err = (out.double() - expected.double()).abs()
        err = torch.where(bad, err, torch.zeros_like(err))
        err = torch.where(torch.isnan(err), torch.full_like(err, float("inf")), err)
        flat = int(err.flatten().argmax())  # the first index holding the largest error
        worst = float(err.flatten()[flat])
        err_text = f"differs (max abs error {_num(worst)}" if torch.isfinite(out).all() else "differs"
    index = _index(flat, expected.shape)
    got, want = out.flatten()[flat].item(), expected.flatten()[flat].item()
    where = f"at index {index}: got {_num(got)}, expected {_num(want)}"
    if err_text == "differs":  # exact comparison, or NaN/inf in the output: the value says it all
        return "value", f"differs {where}"
    return "value", f"{err_text} {where})"


def _judge(case: Case, check: Check, out: Any) -> tuple[str, str] | None:
    if callable(case.expected):
        problem = case.expected(out)
        return None if problem is None else ("value", problem)
    atol = check.atol if case.atol is None else case.atol
    rtol = check.rtol if case.rtol is None else case.rtol
    return compare(out, case.expected, atol, rtol)


def _matches(out: Any, mistake: Any, check: Check) -> bool:
    if callable(mistake):
        return bool(mistake(out))
    if isinstance(out, Tensor) != isinstance(mistake, Tensor):
        return False
    if not isinstance(mistake, Tensor):  # e.g. a list of token ids
        return isinstance(out, (list, tuple)) and list(out) == mistake
    out = out.detach().cpu()
    if out.shape != mistake.shape or out.dtype != mistake.dtype:
        return False
    if mistake.dtype == torch.bool:
        return bool(torch.equal(out, mistake))
    return bool(torch.allclose(out, mistake, atol=check.atol, rtol=check.rtol, equal_nan=True))


def _error_text(err: Exception) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", text)  # no memory addresses in stored outputs
    if len(text) > 120:
        text = text[:117] + "..."
    return f"raised {type(err).__name__}: {text}" if text else f"raised {type(err).__name__}"


def run(check: Check, fn: Callable[..., Any]) -> bool:
    """Try ``fn`` on every case of ``check``, print one verdict, return whether all cases matched."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and sums happen in a fixed order
    try:
        return _run(check, fn)
    finally:
        torch.set_num_threads(threads)


def _run(check: Check, fn: Callable[..., Any]) -> bool:
    cases = check.make_cases()
    failures: list[tuple[str, str, str]] = []  # (label, problem, hint)
    for case in cases:
        args, kwargs = copy.deepcopy(case.args), copy.deepcopy(case.kwargs)  # the reader may modify them
        hint = case.hint or check.hint
        try:
            with warnings.catch_warnings(), torch.no_grad():
                warnings.simplefilter("ignore")  # e.g. NumPy overflow warnings: the verdict says it all
                out = fn(*args, **kwargs)
        except Exception as err:  # a wrong answer is reported, never raised
            failures.append((case.label, _error_text(err), hint))
            continue
        problem = _judge(case, check, out)
        if problem is None:
            continue
        kind, text = problem
        if kind == "dtype":
            hint = "return the dtype of the inputs (float32 here): avoid float64 NumPy arrays, or cast back."
        for mistake, mistake_hint in case.mistakes:
            if _matches(out, mistake, check):
                hint = mistake_hint
                break
        failures.append((case.label, text, hint))
    n = len(cases)
    if not failures:
        print(f"✅ {check.name}: all {n} cases match")
        return True
    label, text, hint = failures[0]
    print(f"❌ {check.name}: case '{label}' {text}; {n - len(failures)} of {n} cases match.")
    print(f"   Hint: {hint}")
    return False

"""The machinery behind :func:`companion.exercises.check`: cases, comparison, time limits and the verdict.

A :class:`Check` is a named recipe that builds a list of :class:`Case` objects. It has one of two kinds:

- ``kind="function"`` (write / fix exercises): each case holds the inputs to pass to the reader's
  function, the expected output (computed by the companion package itself), the hint to print if the case
  fails, and optionally a few *known mistakes*: outputs that a typical wrong answer produces on the same
  inputs, each with a hint that names that mistake.
- ``kind="value"`` (predict / choose exercises): the reader passes an answer (a number, a string choice,
  a dict, a tuple, a tensor ...) and every case compares that answer (or a part of it, see
  :attr:`Case.part`) with the expected value; known wrong values map to hints the same way. Build these
  with :func:`value_check` and :func:`choice_check`.

Each call of the reader's function runs under a time limit (:data:`TIME_LIMIT_S` seconds per case, or the
check's ``time_limit``): in the main thread of a POSIX process (a script, pytest, a Jupyter kernel on
Linux) a ``SIGALRM`` timer interrupts it; elsewhere (another thread, Windows, or while another SIGALRM
timer is running) a ``sys.settrace`` hook does. Both stop Python code only: a single huge torch operation
finishes before the check can stop it.

Everything printed is deterministic (no timings, no memory addresses), because chapters store it.
"""

from __future__ import annotations

import contextlib
import copy
import math
import numbers
import os
import re
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

# A judge looks at what the reader's function returned and says what is wrong with it, or None if right.
Judge = Callable[[Any], "str | None"]

TIME_LIMIT_S = float(os.environ.get("COMPANION_CHECK_TIME_LIMIT", "5"))  # per case, for the reader's code


@dataclass
class Case:
    """One input to try, what the companion package returns on it, and what to say if they differ."""

    label: str  # short name shown in the verdict, e.g. "large logits"
    args: tuple = ()  # positional arguments passed to the reader's function (deep-copied for each call)
    expected: Any = None  # the reference output (Tensor, number, str, dict ...), or a Judge
    hint: str | None = None  # what to try if this case fails (default: the check's hint)
    kwargs: dict = field(default_factory=dict)  # keyword arguments passed to the reader's function
    mistakes: Sequence[tuple[Any, str]] = ()  # (output of a known wrong answer, hint naming it)
    atol: float | None = None  # tolerances for this case (default: the check's)
    rtol: float | None = None
    part: Any = None  # value checks: the key (dict) or index (tuple) of the answer this case judges


@dataclass(frozen=True)
class Check:
    """A named exercise check: what the reader hands in and the cases it is tried on."""

    name: str  # what the reader passes to check(name, answer)
    signature: str  # the reader's function, e.g. "fn(x, dim=-1) -> Tensor", or the answer's form
    description: str  # one line for list_checks()
    hint: str  # the general hint, printed when a failing case has none of its own
    make_cases: Callable[[], list[Case]]  # builds the cases (imports the references lazily)
    atol: float = 1e-5
    rtol: float = 1e-4
    kind: str = "function"  # "function": the reader passes a function; "value": an answer
    time_limit: float | None = None  # seconds per case (default: TIME_LIMIT_S)
    choices: tuple[str, ...] = ()  # value checks with a choice: the allowed answers, e.g. ("a", "b", "c")
    exact_count: bool = False  # value checks of a count: a near answer passes as "close; the exact count is N"

    def __post_init__(self) -> None:
        if self.kind not in ("function", "value"):
            raise ValueError(f"kind={self.kind!r} is not one of 'function', 'value'")


def seeded(seed: int) -> torch.Generator:
    """A private generator, so that running a check never moves the notebook's global random state."""
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------------ building checks


def near(value: float, rtol: float = 1e-6) -> Callable[[Any], bool]:
    """A mistake matcher: the reader's number equals ``value`` within ``rtol`` (anything else: no match)."""

    def matches(out: Any) -> bool:
        try:
            return math.isclose(float(out), value, rel_tol=rtol)
        except (TypeError, ValueError):
            return False

    return matches


def value_check(
    name: str,
    expected: Any,
    *,
    description: str,
    hint: str,
    signature: str = "a number",
    mistakes: Mapping[Any, str] | Sequence[tuple[Any, str]] = (),
    rtol: float = 1e-2,
    atol: float = 0.0,
    time_limit: float | None = None,
    exact_count: bool = False,
) -> Check:
    """A check of a predicted value: ``check(name, 4096)``.

    ``expected`` is the right answer (a number, str, bool, tuple, dict, tensor ...) or a zero-argument
    function computing it when the check runs (to import the package lazily). Numbers match within
    ``rtol`` (relative, default 1 %) or ``atol``; strings match ignoring case and surrounding spaces; dicts
    and tuples match part by part. ``mistakes`` maps known wrong answers to hints naming the mistake (a
    dict, or a list of pairs when the wrong answers are not hashable); they are matched with the same
    tolerance. A failing number is reported as too high / too low, never with the right value.
    ``exact_count=True`` (a count someone may round, as papers do): a number within the tolerance that is not
    the exact count passes with "close; the exact count is N" (the reader did the work; the digits are given).
    """
    pairs = list(mistakes.items()) if isinstance(mistakes, Mapping) else list(mistakes)

    def make_cases() -> list[Case]:
        value = expected() if callable(expected) and not isinstance(expected, Tensor) else expected
        return [Case("answer", expected=value, mistakes=pairs, rtol=rtol, atol=atol)]

    return Check(
        name, signature, description, hint, make_cases, atol=atol, rtol=rtol, kind="value", time_limit=time_limit,
        exact_count=exact_count,
    )


def choice_check(
    name: str,
    answer: str,
    choices: Sequence[str],
    *,
    description: str,
    hint: str,
    mistakes: Mapping[str, str] = (),  # type: ignore[assignment]
) -> Check:
    """A short conceptual choice: ``check(name, "b")``, with one hint per wrong choice.

    ``choices`` are the allowed answers (e.g. ``("a", "b", "c")``); an answer outside them fails with the
    list of choices. ``mistakes`` maps each wrong choice to a hint explaining why it is wrong.
    """
    allowed = tuple(_norm_str(c) for c in choices)
    if _norm_str(answer) not in allowed:
        raise ValueError(f"answer={answer!r} is not one of the choices {allowed}")
    pairs = [(_norm_str(k), v) for k, v in dict(mistakes).items()]

    def make_cases() -> list[Case]:
        return [Case("answer", expected=_norm_str(answer), mistakes=pairs)]

    signature = "one of " + ", ".join(repr(c) for c in allowed)
    return Check(name, signature, description, hint, make_cases, kind="value", choices=allowed)


# ------------------------------------------------------------------------------------------ comparing


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


def _norm_str(s: str) -> str:
    return s.strip().strip("()[].").strip().lower()


def _is_number(x: Any) -> bool:
    if isinstance(x, Tensor):
        return x.dim() == 0 and not x.dtype == torch.bool
    return isinstance(x, numbers.Number) and not isinstance(x, bool) and not isinstance(x, complex)


def _short(x: Any) -> str:
    text = repr(x) if isinstance(x, str) else str(x)
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", text)
    return text if len(text) <= 60 else text[:57] + "..."


def compare_value(out: Any, expected: Any, atol: float, rtol: float) -> str | None:
    """Compare an answer with the expected value, part by part; None if it matches, else what is wrong.

    Numbers within ``rtol``/``atol`` (reported as too high / too low, never revealing the value), strings
    ignoring case and spaces, bools exactly, tuples/lists element by element, dicts key by key, tensors
    with :func:`compare`.
    """
    if isinstance(expected, Tensor) and expected.dim() > 0:
        if not isinstance(out, Tensor):
            try:
                out = torch.as_tensor(out, dtype=expected.dtype)
            except (TypeError, ValueError, RuntimeError):
                return f"is a {type(out).__name__}, expected a tensor of shape {tuple(expected.shape)}"
        problem = compare(out.to(expected.dtype) if out.dtype != expected.dtype else out, expected, atol, rtol)
        return None if problem is None else problem[1]
    if out is None and expected is not None:
        return "is None: no answer yet"
    if isinstance(expected, bool):
        if not isinstance(out, bool):
            return f"is {_short(out)}, expected True or False"
        return None if out == expected else f"{out} is wrong"
    if _is_number(expected):
        if not _is_number(out):
            return f"is {_short(out)}, expected a number"
        got, want = float(out), float(expected)
        if math.isnan(got):
            return "is nan"
        if math.isclose(got, want, rel_tol=rtol, abs_tol=atol):
            return None
        how = "too high" if got > want else "too low"
        if want != 0 and got != 0 and math.copysign(1, got) == math.copysign(1, want):
            ratio = got / want if abs(got) > abs(want) else want / got
            if ratio >= 1.5:
                how += f" (off by a factor of about {_num(ratio)})"
        return f"{_short(out)} is {how}"
    if isinstance(expected, str):
        if not isinstance(out, str):
            return f"is {_short(out)}, expected a string such as {expected!r}"
        return None if _norm_str(out) == _norm_str(expected) else f"{_short(out)} is not right"
    if isinstance(expected, Mapping):
        if not isinstance(out, Mapping):
            return f"is a {type(out).__name__}, expected a dict with keys {sorted(map(str, expected))}"
        missing = [k for k in expected if k not in out]
        if missing:
            return f"has no key {missing[0]!r} (expected keys {list(expected)})"
        for key, want in expected.items():
            problem = compare_value(out[key], want, atol, rtol)
            if problem is not None:
                return f"[{key!r}] {problem}"
        return None
    if isinstance(expected, (tuple, list)):
        if isinstance(out, Tensor) or not isinstance(out, (tuple, list, torch.Size)):
            return f"is a {type(out).__name__}, expected a {type(expected).__name__} of {len(expected)} items"
        if len(out) != len(expected):
            return f"has {len(out)} items, expected {len(expected)}"
        for i, (got, want) in enumerate(zip(out, expected)):
            problem = compare_value(got, want, atol, rtol)
            if problem is not None:
                return f"[{i}] {problem}"
        return None
    return None if out == expected else f"{_short(out)} is not right"


def _part(answer: Any, part: Any) -> Any:
    if part is None:
        return answer
    try:
        return answer[part]
    except (KeyError, IndexError, TypeError):
        raise _MissingPart(part) from None


class _MissingPart(Exception):
    pass


# ------------------------------------------------------------------------------------------ time limits


class CaseTimeout(BaseException):
    """Raised inside the reader's code when a case runs past its time limit.

    A BaseException, so that a reader's ``except Exception`` inside a loop cannot swallow it.
    """


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Raise :class:`CaseTimeout` in the code of the ``with`` block once it has run ``seconds`` seconds."""
    use_signal = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL)[0] == 0.0  # no other SIGALRM timer running
    )
    if use_signal:

        def on_alarm(signum: int, frame: Any) -> None:
            raise CaseTimeout

        old_handler = signal.signal(signal.SIGALRM, on_alarm)
        # fires again every 0.1 s in case the first one lands in a reader's bare `except:`
        signal.setitimer(signal.ITIMER_REAL, seconds, 0.1)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0.0, 0.0)
            signal.signal(signal.SIGALRM, old_handler)
        return
    deadline = time.monotonic() + seconds
    old_trace = sys.gettrace()

    def tracer(frame: Any, event: str, arg: Any) -> Any:
        if time.monotonic() > deadline:
            raise CaseTimeout
        return tracer

    sys.settrace(tracer)
    try:
        yield
    finally:
        sys.settrace(old_trace)


# ------------------------------------------------------------------------------------------ running


def _error_text(err: BaseException) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    text = re.sub(r" at 0x[0-9a-fA-F]+", "", text)  # no memory addresses in stored outputs
    if len(text) > 120:
        text = text[:117] + "..."
    return f"raised {type(err).__name__}: {text}" if text else f"raised {type(err).__name__}"


def _not_implemented(err: NotImplementedError) -> str:
    text = str(err).strip()
    if not text:
        return "not implemented yet — replace `raise NotImplementedError` with your code"
    return f"not implemented yet — {text.splitlines()[0]}"


def _matches(out: Any, mistake: Any, check: Check, case: Case) -> bool:
    if callable(mistake) and not isinstance(mistake, Tensor):
        return bool(mistake(out))
    atol = check.atol if case.atol is None else case.atol
    rtol = check.rtol if case.rtol is None else case.rtol
    if check.kind == "value":
        return compare_value(out, mistake, atol, rtol) is None
    if isinstance(out, Tensor) != isinstance(mistake, Tensor):
        return False
    if not isinstance(mistake, Tensor):  # e.g. a list of token ids
        return isinstance(out, (list, tuple)) and list(out) == mistake
    out = out.detach().cpu()
    if out.shape != mistake.shape or out.dtype != mistake.dtype:
        return False
    if mistake.dtype == torch.bool:
        return bool(torch.equal(out, mistake))
    return bool(torch.allclose(out, mistake, atol=atol, rtol=rtol, equal_nan=True))


def _judge(case: Case, check: Check, out: Any) -> tuple[str, str] | None:
    if callable(case.expected) and not isinstance(case.expected, Tensor):
        problem = case.expected(out)
        return None if problem is None else ("value", problem)
    atol = check.atol if case.atol is None else case.atol
    rtol = check.rtol if case.rtol is None else case.rtol
    if check.kind == "value":
        problem = compare_value(out, case.expected, atol, rtol)
        return None if problem is None else ("value", problem)
    return compare(out, case.expected, atol, rtol)


def _fail(check: Check, text: str, hint: str | None = None) -> bool:
    print(f"❌ FAIL {check.name}: {text}")
    if hint:
        print(f"   Hint: {hint}")
    return False


def _inexact(answer: Any, expected: Any) -> bool:
    """A number that passed its tolerance but is not exactly ``expected``."""
    try:
        return float(answer) != float(expected)
    except (TypeError, ValueError):
        return False


def run(check: Check, answer: Any) -> bool:
    """Try ``answer`` on every case of ``check``, print one verdict, return whether all cases matched."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny tensors: one thread is fastest, and sums happen in a fixed order
    try:
        return _run(check, answer)
    finally:
        torch.set_num_threads(threads)


def _run(check: Check, answer: Any) -> bool:
    if check.kind == "value" and answer is None:
        return _fail(check, f"no answer yet — replace None with your answer ({check.signature}).")
    if check.kind == "value" and check.choices:
        if not isinstance(answer, str) or _norm_str(answer) not in check.choices:
            return _fail(check, f"{_short(answer)} is not one of the choices {', '.join(map(repr, check.choices))}.")
    try:
        cases = check.make_cases()
    except Exception as err:  # a bug in the check, not in the reader's answer
        return _fail(
            check,
            f"the check itself failed while preparing its cases ({_error_text(err)}); "
            "this is a bug in companion, not in your answer — please report it.",
        )
    limit = check.time_limit if check.time_limit is not None else TIME_LIMIT_S
    failures: list[tuple[str, str, str]] = []  # (label, problem, hint)
    for case in cases:
        hint = case.hint or check.hint
        try:
            if check.kind == "value":
                out = _part(answer, case.part)
            else:
                args, kwargs = copy.deepcopy(case.args), copy.deepcopy(case.kwargs)  # the reader may modify them
                with warnings.catch_warnings(), torch.no_grad(), time_limit(limit):
                    warnings.simplefilter("ignore")  # e.g. NumPy overflow warnings: the verdict says it all
                    out = answer(*args, **kwargs)
        except _MissingPart as err:
            failures.append((case.label, f"your answer has no part {err.args[0]!r}", hint))
            continue
        except CaseTimeout:
            failures.append(
                (case.label, f"ran longer than the time limit ({limit:g} s) and was stopped (an endless loop?)", hint)
            )
            break  # the other cases would most likely loop too
        except NotImplementedError as err:
            return _fail(check, _not_implemented(err))
        except Exception as err:  # a wrong answer is reported, never raised
            failures.append((case.label, _error_text(err), hint))
            continue
        try:
            problem = _judge(case, check, out)
            if problem is not None:
                kind, text = problem
                if kind == "dtype":
                    hint = "return the dtype of the inputs (float32 here): avoid float64 NumPy arrays, or cast back."
                for mistake, mistake_hint in case.mistakes:
                    if _matches(out, mistake, check, case):
                        hint = mistake_hint
                        break
        except Exception as err:  # the judging step itself broke: say so, never a traceback
            return _fail(
                check,
                f"the check itself failed while judging case '{case.label}' "
                f"({_error_text(err)}); this is a bug in companion, not necessarily in your answer "
                "— please report it.",
            )
        if problem is not None:
            failures.append((case.label, problem[1], hint))
    n = len(cases)
    if not failures:
        if check.kind == "value" and check.exact_count and _inexact(answer, cases[0].expected):
            print(f"✅ PASS {check.name}: close; the exact count is {int(cases[0].expected):,}")
        elif check.kind == "value":
            print(f"✅ PASS {check.name}: your answer is right")
        else:
            print(f"✅ PASS {check.name}: all {n} cases match")
        return True
    label, text, hint = failures[0]
    if check.kind == "value" and n == 1:
        what = "your answer" if case.part is None else f"part {case.part!r} of your answer"
        return _fail(check, f"{what} {text}.", hint)
    passed = n - len(failures) if not text.startswith("ran longer") else None
    tail = "" if passed is None else f"; {passed} of {n} cases match"
    return _fail(check, f"case '{label}' {text}{tail}.", hint)

"""Check your own answers to the course's exercises against the companion package.

Usage in a chapter (or its workbook)::

    from companion.exercises import check

    def my_softmax(x, dim=-1):                 # write / fix: hand in a function
        e = (x - x.amax(dim, keepdim=True)).exp()
        return e / e.sum(dim, keepdim=True)

    _ = check("softmax", my_softmax)           # prints "✅ PASS softmax: all 6 cases match", returns True
    _ = check("some_prediction", 4096)         # predict / choose: hand in a value (number, "b", dict ...)

    from companion import exercises
    exercises.list_checks()                     # every check, grouped by chapter, with what it expects

A function check calls your function on several inputs made from fixed seeds plus edge cases, compares with
the package's own function (never a second copy of it), and prints one verdict. On a mismatch it names the
first failing case, the largest error and where it is, and a hint; when your output matches a well-known
mistake (softmax over the wrong axis, no 1/√d_k, masking after the softmax, ...) the hint names that
mistake. A value check compares your answer with a tolerance and names the mistake behind well-known wrong
answers. Verdicts read ``✅ PASS name: ...`` or ``❌ FAIL name: ...`` followed by ``Hint: ...``.

``check`` never raises for a wrong answer: an exception inside your function, a stub that still raises
``NotImplementedError`` ("not implemented yet — ..."), a case that runs longer than its time limit
(:data:`companion.exercises._runner.TIME_LIMIT_S`, 5 s per case by default, set by the environment variable
``COMPANION_CHECK_TIME_LIMIT``), or even a bug in the check itself prints ❌ FAIL and returns False, so Run
All goes on. Only a misuse raises: an unknown check name (ValueError) or a non-function handed to a
function check (TypeError).

The checks live in one module per chapter, ``companion/exercises/chNN_<topic>.py``; each defines
``CHAPTER = "NN_topic"`` (the notebook's name) and ``CHECKS: list[Check]``. Every ``ch*.py`` module is
found automatically, in sorted order. Running a check does not touch the global random state (each case
uses its own seeded generator). ``python -m companion.exercises`` lists the exercises; see ``--help``.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from types import ModuleType
from typing import Any

from companion._checks import check_choice
from companion.exercises._runner import Case as Case  # re-exported for chapter modules and tests
from companion.exercises._runner import Check as Check
from companion.exercises._runner import choice_check as choice_check
from companion.exercises._runner import run
from companion.exercises._runner import seeded as seeded
from companion.exercises._runner import value_check as value_check

__all__ = ["check", "list_checks"]


def _chapter_modules() -> list[ModuleType]:
    names = sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name.startswith("ch"))
    return [importlib.import_module(f"{__name__}.{name}") for name in names]


def _registry() -> tuple[dict[str, Check], dict[str, list[Check]]]:
    checks: dict[str, Check] = {}
    owner: dict[str, str] = {}
    by_chapter: dict[str, list[Check]] = {}
    for module in _chapter_modules():
        chapter = getattr(module, "CHAPTER", None)
        found = getattr(module, "CHECKS", None)
        if not isinstance(chapter, str) or not isinstance(found, list):
            raise ImportError(f"{module.__name__} must define CHAPTER (a str) and CHECKS (a list of Check)")
        for c in found:
            if not isinstance(c, Check):
                raise ImportError(f"{module.__name__}.CHECKS holds {type(c).__name__}, expected Check")
            if c.name in checks:
                raise ImportError(f"check {c.name!r} is defined twice: in {owner[c.name]} and {module.__name__}")
            checks[c.name] = c
            owner[c.name] = module.__name__
            by_chapter.setdefault(chapter, []).append(c)
    return checks, by_chapter


CHECKS, CHAPTERS = _registry()  # name -> Check; chapter ("03_attention") -> its checks, in chapter order


class CheckTable(dict):
    """``{name: one-line description}``, displayed as a table (so a notebook cell shows it once)."""

    def __repr__(self) -> str:
        width = max(len(name) for name in self)
        lines = []
        for chapter, checks in CHAPTERS.items():
            names = [c.name for c in checks if c.name in self]
            if names:
                lines.append(f"{chapter}:")
            for name in names:
                lines.append(f"  {name.ljust(width)}  {CHECKS[name].description}")
                lines.append(f"  {' ' * width}  {CHECKS[name].signature}")
        return "\n".join(lines)

    __str__ = __repr__

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:  # IPython's display hook
        printer.text(repr(self))


def list_checks(chapter: str | None = None) -> CheckTable:
    """The available checks (of one ``chapter`` such as "03_attention", or all): a dict name -> one-line
    description that displays as a table, grouped by chapter, with signatures."""
    if chapter is not None:
        check_choice("chapter", chapter, CHAPTERS)
        return CheckTable((c.name, c.description) for c in CHAPTERS[chapter])
    return CheckTable((c.name, c.description) for checks in CHAPTERS.values() for c in checks)


def _normalise(name: str) -> str:
    return name.strip().lower().replace("-", "_").replace(" ", "_")


def check(name: str, answer: Callable[..., Any] | Any) -> bool:
    """Check your ``answer`` to exercise check ``name``: a function (write / fix) or a value (predict / choose).

    Prints one verdict ("✅ PASS softmax: all 6 cases match", or "❌ FAIL ..." with the first failing case
    and a hint) and returns True if the answer is right, False otherwise. A wrong answer never raises.

    Raises:
        TypeError: ``name`` is not a string, or a function check gets something that is not callable.
        ValueError: ``name`` is not one of the checks listed by :func:`list_checks`.
    """
    if not isinstance(name, str):
        raise TypeError(f"name must be a str such as 'softmax', got {type(name).__name__}")
    key = _normalise(name)
    check_choice("name", key, CHECKS)
    target = CHECKS[key]
    if target.kind == "function" and not callable(answer):
        raise TypeError(f"check {key!r} expects your function ({target.signature}), got {type(answer).__name__}")
    return run(target, answer)


def __getattr__(attr: str) -> Any:
    if attr == "list":  # exercises.list(): kept as an attribute for older text, never exported by `import *`
        return list_checks
    raise AttributeError(f"module {__name__!r} has no attribute {attr!r}")

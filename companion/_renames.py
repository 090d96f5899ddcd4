"""Deprecated keyword names, kept for one round while the chapters switch to the new ones (issue 13, item 4).

One name per concept across the package:

    padding_mask    (was pad_mask, src_mask, memory_mask, padding)  bool, True = real token
    memory          (was context)                                   the encoder output H
    max_new_tokens  (was max_len)                                   how many tokens to generate
    batch_size      (was batch)
    dropout         (was dropout_p)

A function that still accepts an old name is decorated with :func:`renamed`; the old keyword is mapped to
the new one. To drop the aliases, delete this module and every ``@renamed(...)`` line (``grep -rn
"@renamed" companion``). ``WARN`` turns on a ``DeprecationWarning`` per call once the chapters no longer use
the old names (a warning would otherwise appear in their stored outputs).
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

WARN = False  # set True once no chapter passes an old name


def renamed(**old_to_new: str) -> Callable[[F], F]:
    """Accept each old keyword of ``old_to_new`` as the new one: ``@renamed(pad_mask="padding_mask")``.

    Passing both the old and the new name is a ``TypeError``.
    """

    def decorate(fn: F) -> F:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if kwargs:
                for old, new in old_to_new.items():
                    if old in kwargs:
                        if new in kwargs:
                            raise TypeError(
                                f"{fn.__qualname__}() got both {new}= and its old name {old}=; pass {new} only"
                            )
                        if WARN:
                            message = f"{fn.__qualname__}({old}=...) is deprecated; use {new}="
                            warnings.warn(message, DeprecationWarning, stacklevel=2)
                        kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapper.__renamed__ = dict(old_to_new)  # type: ignore[attr-defined]
        return wrapper  # type: ignore[return-value]

    return decorate

"""Checkpoints: save and load a model, its optimiser state, its config and the step reached.

Plain ``torch.save`` dicts (tensors, numbers, strings, lists and dicts only) read back with
``torch.load(weights_only=True)``, which refuses to unpickle arbitrary objects. A bad, truncated or
mismatched file raises a ``ValueError`` naming why. Checked in ``tests/test_training.py``: a save/load round
trip (weights, optimiser step, config), models that do not fit, corrupt, truncated and foreign files.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from companion._checks import check_positive_int

__all__ = ["save_checkpoint", "load_checkpoint"]


_FORMAT = "companion-checkpoint-v1"


def _plain_config(config: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        return dataclasses.asdict(config)
    if isinstance(config, dict):
        return dict(config)
    raise TypeError(f"config must be a dataclass instance or a dict, got {type(config).__name__}")


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def save_checkpoint(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None, config: Any, step: int
) -> None:
    """Write weights, optimiser state, ``config`` (as a plain dict) and ``step`` to ``path``.

    Only tensors, numbers, strings, lists and dicts are stored, so ``torch.load(weights_only=True)`` reads it.
    """
    check_positive_int("step", step, allow_zero=True)
    state = {
        "format": _FORMAT,
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "config": _plain_config(config),
        "step": step,
    }
    path = Path(path)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(state, tmp)
    os.replace(tmp, path)  # never leave a half-written checkpoint under the real name


def load_checkpoint(
    path: str | Path, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """Read a checkpoint; load its weights into ``model`` and its state into ``optimizer`` when given.

    Returns the whole dict (``model``, ``optimizer``, ``config``, ``step``).
    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for a corrupt or truncated file, a
    file that is not a companion checkpoint, or weights that do not fit ``model`` (the message lists the
    missing and unexpected keys and the shape mismatches).
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint path={str(path)!r} does not exist")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError… depending on the damage
        raise ValueError(f"checkpoint {str(path)!r} is corrupt or truncated and cannot be read: {err}") from err
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
        raise ValueError(f"{str(path)!r} is not a companion checkpoint (expected format={_FORMAT!r})")
    if model is not None:
        model = _unwrap(model)
        expected, found = model.state_dict(), state["model"]
        missing = sorted(set(expected) - set(found))
        unexpected = sorted(set(found) - set(expected))
        shapes = [
            f"{k}: checkpoint {tuple(found[k].shape)} vs model {tuple(expected[k].shape)}"
            for k in expected
            if k in found and found[k].shape != expected[k].shape
        ]
        problems = []
        if missing:
            problems.append(f"missing keys {missing}")
        if unexpected:
            problems.append(f"unexpected keys {unexpected}")
        if shapes:
            problems.append(f"shape mismatch {shapes}")
        if problems:
            raise ValueError(f"checkpoint {str(path)!r} does not fit the model: " + "; ".join(problems))
        model.load_state_dict(found)
    if optimizer is not None:
        if state["optimizer"] is None:
            raise ValueError(f"checkpoint {str(path)!r} holds no optimizer state, but an optimizer was given")
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError) as err:
            raise ValueError(f"optimizer state in {str(path)!r} does not fit the optimizer: {err}") from err
    return state

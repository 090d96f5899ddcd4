"""Checkpoints: save and load a model, its optimiser state, its config and the step reached.

Plain ``torch.save`` dicts (tensors, numbers, strings, lists and dicts only) read back with
``torch.load(weights_only=True)``, which refuses to unpickle arbitrary objects. A bad, truncated or
mismatched file raises a ``ValueError`` naming why.

Saving is atomic (:func:`companion._files.atomic_write`: a unique temporary file in the target folder,
fsynced, then ``os.replace``): a crash or a full disk never destroys the previous checkpoint, and no
temporary file is left behind. ``save_checkpoint`` refuses, before writing, anything ``load_checkpoint``
would reject (a config holding objects other than plain numbers, strings, lists and dicts; a negative
step; a folder that does not exist).

File layout (a dict): ``format`` ("companion-checkpoint-v1"), ``model`` (state dict), ``optimizer`` (state
dict or None), ``optimizer_class`` (its class name, or None), ``config`` (plain dict), ``step`` (int).

Checked in ``tests/test_training.py``: a save/load round trip (weights, optimiser step, config), models and
optimisers that do not fit, corrupt, truncated, foreign and incomplete files, folders, failed writes.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import torch
from torch import nn

from companion._checks import check_positive_int
from companion._files import atomic_write, check_writable_file

__all__ = ["save_checkpoint", "load_checkpoint", "read_torch_file"]


_FORMAT = "companion-checkpoint-v1"
_KEYS = ("format", "model", "optimizer", "config", "step")  # every checkpoint has these


def _check_plain(where: str, value: Any) -> None:
    """Raise ``TypeError`` unless ``value`` is made only of what ``torch.load(weights_only=True)`` reads back."""
    # exact types: numpy's float64 subclasses float but is pickled as a numpy object, which load refuses
    if value is None or type(value) in (bool, int, float, str) or isinstance(value, torch.Tensor):
        return
    if isinstance(value, (list, tuple)):
        for k, v in enumerate(value):
            _check_plain(f"{where}[{k}]", v)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise TypeError(f"{where} has the key {k!r} ({type(k).__name__}); expected str or int keys")
            _check_plain(f"{where}[{k!r}]", v)
        return
    raise TypeError(f"{where}={value!r} is a {type(value).__module__}.{type(value).__name__}, which "
                    "torch.load(weights_only=True) would refuse; expected None, bool, int, float, str, "
                    "a tensor, or a list/dict of those (convert numpy numbers with float()/int())")


def _plain_config(config: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(config) and not isinstance(config, type):
        plain = dataclasses.asdict(config)
    elif isinstance(config, dict):
        plain = dict(config)
    else:
        raise TypeError(f"config must be a dataclass instance or a dict, got {type(config).__name__}")
    _check_plain("config", plain)
    return plain


def read_torch_file(path: Path, writer: str) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU; a file it cannot read is a ``ValueError`` naming the file
    and what is wrong with it, written by ``writer`` if it is what it should be (``"save_checkpoint"``).

    Torch's own message is left out: it advises loading with ``weights_only=False``, which runs whatever code a
    foreign file holds, the one thing never to do with a file that fails here.
    """
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # torch raises RuntimeError, EOFError, UnpicklingError... depending on the damage
        if "Unsupported global" in str(err):
            why = "it holds Python objects other than tensors, numbers, strings, lists and dicts, which are not loaded"
        else:
            why = "it is corrupt or truncated"
        raise ValueError(f"{str(path)!r} cannot be read: {why} ({type(err).__name__}); expected a file written by "
                         f"{writer}") from None


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def save_checkpoint(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer | None, config: Any, step: int
) -> None:
    """Write weights, optimiser state, ``config`` (as a plain dict) and ``step`` to ``path``, atomically.

    Only tensors, numbers, strings, lists and dicts are stored, so ``torch.load(weights_only=True)`` reads it.
    Raises (before writing anything) ``TypeError`` for a model that is not an ``nn.Module``, an optimiser
    that is not a ``torch.optim.Optimizer``, or a config holding other objects; ``ValueError`` for a bad
    ``step``; ``FileNotFoundError`` / ``PermissionError`` / ``IsADirectoryError`` naming ``path`` for a folder
    that is missing or read-only, or a ``path`` that is a folder. A failure while writing raises ``OSError``
    naming ``path``; the previous file at ``path``, if any, is kept.
    """
    check_positive_int("step", step, allow_zero=True)
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    path = check_writable_file(path)
    state = {
        "format": _FORMAT,
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "optimizer_class": type(optimizer).__name__ if optimizer is not None else None,
        "config": _plain_config(config),
        "step": step,
    }
    if optimizer is not None:
        _check_plain("optimizer.state_dict()", state["optimizer"])
    try:
        with atomic_write(path) as tmp:
            torch.save(state, tmp)
    except OSError:
        raise
    except Exception as err:  # torch reports a full disk as RuntimeError("... file write failed")
        raise OSError(f"could not write the checkpoint path={str(path)!r}: {err}") from err


def load_checkpoint(
    path: str | Path, model: nn.Module | None = None, optimizer: torch.optim.Optimizer | None = None
) -> dict[str, Any]:
    """Read a checkpoint; load its weights into ``model`` and its state into ``optimizer`` when given.

    Returns the whole dict (``model``, ``optimizer``, ``optimizer_class``, ``config``, ``step``).
    Raises ``FileNotFoundError`` for a missing file and ``ValueError`` for a folder, a corrupt or truncated
    file, a file that is not a companion checkpoint or lacks one of its keys, weights that do not fit
    ``model`` (the message lists the missing and unexpected keys and the shape mismatches), or an optimiser
    of another class than the one saved (AdamW state loaded into SGD would be silently misread).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"checkpoint path={str(path)!r} is a folder; expected a file written by save_checkpoint")
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint path={str(path)!r} does not exist")
    if model is not None and not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module or None, got {type(model).__name__}")
    if optimizer is not None and not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"optimizer must be a torch.optim.Optimizer or None, got {type(optimizer).__name__}")
    state = read_torch_file(path, "save_checkpoint")
    if not isinstance(state, dict) or state.get("format") != _FORMAT:
        raise ValueError(f"{str(path)!r} is not a companion checkpoint (expected format={_FORMAT!r})")
    missing_keys = [k for k in _KEYS if k not in state]
    if missing_keys:
        raise ValueError(f"checkpoint {str(path)!r} lacks the key(s) {missing_keys}; expected all of {list(_KEYS)}")
    if not isinstance(state["model"], dict):
        raise ValueError(f"checkpoint {str(path)!r}: 'model' is a {type(state['model']).__name__}; expected a "
                         "state dict")
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
        saved_class = state.get("optimizer_class")  # absent from files written before it was recorded
        if saved_class is not None and saved_class != type(optimizer).__name__:
            raise ValueError(f"checkpoint {str(path)!r} holds {saved_class} state, but optimizer is a "
                             f"{type(optimizer).__name__}; expected the same optimizer class")
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError) as err:
            raise ValueError(f"optimizer state in {str(path)!r} does not fit the optimizer: {err}") from err
    return state

"""A training run's folder: what ``companion-train`` writes to ``--out DIR`` and ``companion-sample`` reads.

    DIR/tokenizer.bpe       the tokenizer (or tokenizer.char.json), see companion.data.save_tokenizer
    DIR/tokens.bin          the whole text as flat token ids (a numpy memmap)
    DIR/run.json            human-readable: model config, tokenizer reference, training arguments, text fingerprint
    DIR/checkpoint.pt       the last checkpoint (below): what --resume continues from
    DIR/best.pt             the checkpoint of the lowest validation loss so far (weights only, no optimiser state)
    DIR/log.csv             one row per step: step, loss, lr, grad_norm, val_loss (empty between evaluations);
                            a --dpo run adds reward_margin, accuracy, kl and their val_ twins
    DIR/chat.jsonl          --chat FILE's copy (pairs.jsonl for --dpo), in place of tokens.bin
    DIR/reference.pt        a --dpo run's frozen reference: the state dict it started from

The checkpoint is one ``torch.save`` dict of plain values (read back with ``torch.load(weights_only=True)``,
which refuses arbitrary pickles): ``format``, ``model`` (state dict), ``optimizer`` (state dict; ``None`` in
``best.pt``), ``step`` (optimiser steps done), ``rng`` (Python, NumPy, torch CPU and CUDA generator states),
``model_config`` (``ModelConfig`` as a dict), ``tokenizer`` (a reference: kind, file name, SHA-256), ``args``
(the training arguments), ``data`` (the text's fingerprint and token count) and ``best`` (``{"step",
"val_loss"}`` of the lowest validation loss so far, or ``None``); a run with LoRA adapters (``--lora``) also
has ``lora``: ``{"r", "alpha", "targets", "merged"}``, its model state holding the frozen weights and the
adapters until the last step, where they are merged (``merged: True``). Every file is written atomically
(``companion._files.atomic_write``: a temporary file, then a rename), so a crash or Ctrl-C during a save
leaves the previous checkpoint whole. It is its own format rather than ``companion.training.checkpoints``' (weights,
optimiser, config, step): resuming bit for bit also needs the generator states, and sampling needs the
tokenizer reference, which that layout has no place for; both write through the same ``atomic_write``.

``load_run(DIR, checkpoint="latest" | "best")`` gives a trained model and its tokenizer back, for sampling,
scoring or a notebook (a run stopped with its adapters unmerged comes back merged); the model carries its
tokenizer (``run.model.tokenizer``), so ``run.model.save_pretrained(folder)`` writes ``tokenizer.json`` too.
"""

from __future__ import annotations

import dataclasses
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from companion._files import atomic_write, atomic_write_text
from companion.data import TOKENIZER_FILES, HFTokenizer, Tokenizer, load_tokenizer
from companion.finetune import apply_lora, lora_modules, merge_lora
from companion.models import GPT, ModelConfig
from companion.training.checkpoints import read_torch_file

__all__ = [
    "CHECKPOINT", "BEST", "CHECKPOINTS", "LOG", "TOKENS", "RUN_INFO", "RUN_FILES", "DATA_FILES", "REFERENCE", "Run",
    "check_out_folder",
    "get_rng_state",
    "set_rng_state", "save_run_checkpoint", "read_run_checkpoint", "write_run_info", "load_run",
    "load_model_folder", "build_model",
]  # fmt: skip

CHECKPOINT, BEST, LOG, TOKENS, RUN_INFO = "checkpoint.pt", "best.pt", "log.csv", "tokens.bin", "run.json"
CHECKPOINTS = {"latest": CHECKPOINT, "best": BEST}  # what --checkpoint names -> the file
DATA_FILES = {"chat": "chat.jsonl", "dpo": "pairs.jsonl"}  # a copy of --chat / --dpo FILE, to resume without it
REFERENCE = "reference.pt"  # a --dpo run's frozen reference: the weights it started from
RUN_FILES = frozenset({CHECKPOINT, BEST, LOG, TOKENS, RUN_INFO, REFERENCE, *TOKENIZER_FILES.values(),
                       *DATA_FILES.values()})  # fmt: skip
_FORMAT = "companion-run-checkpoint-v1"
_KEYS = ("model", "optimizer", "step", "rng", "model_config", "tokenizer", "args", "data")


def _is_leftover(name: str) -> bool:
    """A temporary file of an interrupted atomic write (``.checkpoint.pt.abc123.tmp``); safe to ignore."""
    return name.startswith(".") and name.endswith(".tmp")


def check_out_folder(folder: Path, *, resume: bool) -> None:
    """Refuse a ``--out`` folder whose content a run could destroy or misread (``ValueError``).

    A new run needs a missing or empty folder; ``--resume`` needs a folder holding a checkpoint. Files that
    are not part of a run (anything but ``RUN_FILES``) are never touched: the folder is refused. A new run
    may reuse a folder holding run files but no checkpoint: a run stopped while it was still writing them
    (tokenizer, token ids), before its first checkpoint, so before any training. A folder with a ``best.pt``
    or logged steps but no checkpoint (deleted by hand) holds trained work: refused too.
    """
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"--out {str(folder)!r} is a file; expected a folder (new or holding a run)")
    names = sorted(p.name for p in folder.iterdir() if not _is_leftover(p.name)) if folder.exists() else []
    foreign = [n for n in names if n not in RUN_FILES]
    if foreign:
        shown = ", ".join(foreign[:5]) + (", ..." if len(foreign) > 5 else "")
        raise ValueError(f"--out {str(folder)!r} holds files that are not part of a companion run ({shown}); "
                         "choose a new or empty folder")
    if resume and CHECKPOINT not in names:
        raise ValueError(f"--resume: {str(folder)!r} holds no {CHECKPOINT} to continue from")
    if not resume and CHECKPOINT in names:
        raise ValueError(f"--out {str(folder)!r} already holds a training run; pass --resume to continue it, "
                         "or choose a new folder (nothing in it was changed)")
    evidence = _training_evidence(folder, names)
    if not resume and evidence:
        raise ValueError(f"--out {str(folder)!r} holds {' and '.join(evidence)} of a trained run whose {CHECKPOINT} "
                         "is gone; a new run would overwrite them. Move them away or choose a new folder (nothing "
                         "in it was changed)")


def _training_evidence(folder: Path, names: list[str]) -> list[str]:
    """What shows that steps were trained in ``folder``: ``best.pt``, rows in ``log.csv``. A run stopped before
    its first checkpoint has neither (its log holds the header only), so a new run may start over it."""
    found = [BEST] if BEST in names else []
    if LOG in names:
        with open(folder / LOG, encoding="utf-8", errors="replace") as f:
            rows = sum(1 for line in f if line.strip()) - 1  # the header is not a step
        if rows > 0:
            found.append(f"{rows} logged step{'s' if rows != 1 else ''} ({LOG})")
    return found


# --- random-number generator states, as plain tensors and lists (weights_only-loadable) -------------------


def get_rng_state() -> dict[str, Any]:
    """The states of Python's, NumPy's and torch's global generators (CPU and every CUDA device)."""
    version, mt, gauss = random.getstate()
    kind, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": {"version": version, "state": torch.tensor(mt, dtype=torch.int64), "gauss": gauss},
        "numpy": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
                  "has_gauss": int(has_gauss), "cached": float(cached)},
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
    }  # fmt: skip


def set_rng_state(state: dict[str, Any]) -> None:
    """Put back the generator states saved by ``get_rng_state``."""
    py = state["python"]
    random.setstate((py["version"], tuple(py["state"].tolist()), py["gauss"]))
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"], n["cached"]))
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(state["cuda"])


# --- checkpoints ---------------------------------------------------------------------------------------


def _unwrap(model: nn.Module) -> nn.Module:
    return model.module if isinstance(model, nn.parallel.DistributedDataParallel) else model


def save_run_checkpoint(
    path: Path, *, model: nn.Module, optimizer: torch.optim.Optimizer | None, step: int, model_config: ModelConfig,
    tokenizer: dict[str, str], args: dict[str, Any], data: dict[str, Any], lora: dict[str, Any] | None = None,
    best: dict[str, Any] | None = None,
) -> None:  # fmt: skip
    """Write the checkpoint atomically: the previous one stays whole until the new one is complete.
    ``optimizer=None`` writes the weights without the optimiser state (``best.pt``)."""
    state = {
        "format": _FORMAT,
        "model": _unwrap(model).state_dict(),
        "optimizer": optimizer.state_dict() if optimizer is not None else None,
        "step": step,
        "rng": get_rng_state(),
        "model_config": dataclasses.asdict(model_config),
        "tokenizer": tokenizer,
        "args": args,
        "data": data,
        "lora": dict(lora) if lora is not None else None,
        "best": best,
    }
    with atomic_write(path) as tmp:
        torch.save(state, tmp)


def read_run_checkpoint(path: Path) -> dict[str, Any]:
    """Read a checkpoint written by ``save_run_checkpoint``; ``ValueError`` if it is corrupt or foreign."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist")
    state = read_torch_file(path, "companion-train")
    if not isinstance(state, dict) or state.get("format") != _FORMAT or any(k not in state for k in _KEYS):
        raise ValueError(f"{str(path)!r} is not a companion-train checkpoint (expected format={_FORMAT!r})")
    return state


def write_run_info(folder: Path, checkpoint_like: dict[str, Any]) -> None:
    """``run.json``: the model config, tokenizer reference, arguments and data of the run, for people to read."""
    info = {k: checkpoint_like[k] for k in ("model_config", "tokenizer", "args", "data")}
    atomic_write_text(folder / RUN_INFO, json.dumps(info, indent=2) + "\n")


def build_model(config: ModelConfig, lora: dict[str, Any] | None) -> GPT:
    """A ``GPT`` of ``config`` shaped like a checkpoint's model: with unmerged adapters if ``lora`` says so."""
    model = GPT(config)
    if lora is not None and not lora["merged"]:
        apply_lora(model, lora["r"], lora["alpha"], targets=lora["targets"])
    return model


@dataclass
class Run:
    """A trained run read back from its folder."""

    model: GPT  # in eval mode, on the requested device
    tokenizer: Tokenizer  # the tokenizer the model was trained with
    checkpoint: dict[str, Any]  # the whole checkpoint dict (``step``, ``args``, ``data``...)
    folder: Path  # the run folder it was read from
    context: int | None = None  # the most tokens it reads at once when sampling; None: its max_seq_len


def load_run(folder: str | Path, device: str | torch.device = "cpu", checkpoint: str = "latest", *,
             decode_layout: bool = True) -> Run:
    """The model and tokenizer of the run in ``folder``: its last checkpoint (``"latest"``) or the one of its
    lowest validation loss (``"best"``). The model carries the tokenizer (``model.tokenizer``). By default the
    model is built with ``decode_layout`` (the same weights, laid out for fast decoding; :mod:`companion.packing`);
    pass ``decode_layout=False`` for the checkpoint's own config (to train from it).

    Raises ``FileNotFoundError`` (no folder, no such checkpoint, tokenizer file missing) or ``ValueError``
    (``folder`` is a file, a corrupt checkpoint, or weights that do not fit its config).
    """
    folder = Path(folder)
    if folder.is_file():
        raise ValueError(f"{str(folder)!r} is a file; expected a run folder written by companion-train (train one "
                         f"with: companion-train {str(folder)!r} --out DIR)")
    if not folder.is_dir():
        raise FileNotFoundError(f"run folder {str(folder)!r} does not exist")
    if checkpoint not in CHECKPOINTS:
        raise ValueError(f"checkpoint={checkpoint!r} is not supported; expected one of {', '.join(CHECKPOINTS)}")
    path = folder / CHECKPOINTS[checkpoint]
    if checkpoint == "best" and not path.is_file() and (folder / CHECKPOINT).is_file():
        raise FileNotFoundError(f"{str(folder)!r} holds no {BEST} yet: it is written at the run's first evaluation "
                                "(every --eval-every steps); use the latest checkpoint")
    if not path.is_file() and (folder / "config.json").is_file():
        raise FileNotFoundError(f"{str(folder)!r} holds no {CHECKPOINT} but a config.json: it is a Hugging Face "
                                "model folder, which GPT.from_pretrained (and companion-sample) read")
    state = read_run_checkpoint(path)
    try:
        config = ModelConfig(**state["model_config"])
        model = build_model(config.replace(decode_layout=decode_layout), state.get("lora"))
        model.load_state_dict(state["model"])
    except (TypeError, RuntimeError, KeyError) as err:
        raise ValueError(f"checkpoint {str(path)!r} does not describe a valid model ({err})") from None
    if lora_modules(model):  # a run stopped before its last step: fold its adapters in
        merge_lora(model)
    tokenizer = load_tokenizer(folder, state["tokenizer"])
    model.tokenizer = tokenizer  # save_pretrained writes it beside the weights
    return Run(model.to(device).eval(), tokenizer, state, folder)


def load_model_folder(folder: str | Path, device: str | torch.device = "cpu") -> Run:
    """A Hugging Face model folder (``companion-export``'s, or any ``GPT.from_pretrained`` reads) as a ``Run``:
    its ``tokenizer.json`` as the tokenizer, and as context the ``model_max_length`` of its
    ``tokenizer_config.json`` when that is shorter than the model's position table (the context it was trained
    for). Raises ``FileNotFoundError`` / ``ValueError`` for a folder without a tokenizer or with bad weights."""
    folder = Path(folder)
    model = GPT.from_pretrained(folder)
    if model.tokenizer is None:
        raise ValueError(f"{str(folder)!r} has no tokenizer.json; sampling needs the tokenizer the model was trained "
                         "with")
    tokenizer = HFTokenizer(model.tokenizer)
    model.tokenizer = tokenizer.tokenizer
    context = None
    settings = folder / "tokenizer_config.json"
    if settings.is_file():
        limit = json.loads(settings.read_text(encoding="utf-8")).get("model_max_length")
        if isinstance(limit, int) and 2 <= limit < model.config.max_seq_len:
            context = limit
    return Run(model.to(device).eval(), tokenizer, {"step": None, "args": {}}, folder, context)

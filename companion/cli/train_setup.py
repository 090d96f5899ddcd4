"""What ``companion-train`` does before its first step: check everything, write a new run's files, build the
model and the optimiser (or read them back from the checkpoint).

- ``prepare(given, out)``: checks the text, the flags and the ``--out`` folder, and only then writes a new
  run's tokenizer, token ids, ``run.json`` and an empty ``log.csv``; with ``--resume`` it reads the checkpoint
  instead and refuses what would not continue the same run (another text, another model).
- ``model_and_optimizer(...)``: a new model (seeded, or ``--init-from``'s weights), or the checkpoint's weights,
  AdamW moments and generator states; with ``--lora``, adapters on the frozen model.
- ``truncate_log(path, step)``: a resumed run first drops the log rows its checkpoint does not have.

A new BPE tokenizer's size, when ``--vocab-size`` is left out, comes from the text
(``companion.data.default_vocab_size``); the tokenizer gets ``<|endoftext|>`` as its one special token, the
beginning- and end-of-text token of a Hugging Face folder written from the run.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from companion._files import atomic_write, atomic_write_text
from companion.cli import UsageError
from companion.cli.chat_data import dropped_note, encode_examples, read_examples, split_examples
from companion.cli.init_from import encode_text, lora_targets, read_source, source_state
from companion.cli.run_folder import (
    CHECKPOINT,
    DATA_FILES,
    LOG,
    REFERENCE,
    TOKENS,
    check_out_folder,
    read_run_checkpoint,
    set_rng_state,
    write_run_info,
)
from companion.cli.train_args import init_from_args, model_config_for, resolve_args, train_config_for
from companion.cli.train_tasks import ChatTask, DPOTask
from companion.data import (
    TokenData,
    default_vocab_size,
    read_text_file,
    save_tokenizer,
    text_sha256,
    tokenizer_kind,
    train_tokenizer,
    write_token_file,
)
from companion.finetune import END, add_chat_tokens, apply_lora
from companion.models import GPT, ModelConfig
from companion.tokens import END_OF_TEXT
from companion.training import TrainConfig, make_optimizer
from companion.training.checkpoints import read_torch_file

__all__ = ["LOG_COLUMNS", "Prepared", "prepare", "example_task", "model_and_optimizer", "log_columns",
           "truncate_log"]  # fmt: skip

LOG_COLUMNS = ("step", "loss", "lr", "grad_norm", "val_loss")


@dataclass
class Prepared:
    """What a run starts from, once everything is checked and a new run's files are written."""

    args: dict[str, Any]  # every training argument, resolved
    checkpoint: dict[str, Any] | None  # the checkpoint to continue from (--resume), else None
    tokenizer: dict[str, str]  # the tokenizer reference (kind, file, sha256)
    data: dict[str, Any]  # the text's fingerprint and token count
    config: dict[str, Any]  # the model config, as a dict
    notes: list[str]  # what the run chose for the user, to say (a vocabulary size from the text)


def log_columns(kind: str) -> tuple[str, ...]:
    """The columns of ``log.csv``: a DPO run adds its reward margin, accuracy and KL, on the batch and validation."""
    extra = DPOTask.columns if kind == "dpo" else ()
    return (*LOG_COLUMNS[:-1], *extra, LOG_COLUMNS[-1], *(f"val_{c}" for c in extra))


def truncate_log(path: Path, last_step: int) -> None:
    """Keep the header and the rows up to ``last_step`` (a crash may have logged steps the checkpoint lacks)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
    header = lines[0] if lines else ",".join(LOG_COLUMNS) + "\n"
    kept = [line for line in lines[1:] if line.strip() and int(line.split(",", 1)[0]) <= last_step]
    atomic_write_text(path, header + "".join(kept))


def _resume(given: argparse.Namespace, out: Path) -> Prepared:
    if given.init_from is not None:
        raise UsageError("--init-from starts a new run from SOURCE; leave it out with --resume (the run in "
                         f"{str(out)!r} keeps the weights it has)")
    checkpoint = read_run_checkpoint(out / CHECKPOINT)
    if (checkpoint.get("lora") or {}).get("merged"):
        raise UsageError(f"the LoRA run in {str(out)!r} finished and its adapters were merged into the weights; "
                         f"to train it further, start a new run with --init-from {str(out)!r}")
    args = resolve_args(given, checkpoint["args"])
    data = checkpoint["data"]
    if given.text_file is not None and text_sha256(read_text_file(given.text_file)) != data["sha256"]:
        raise UsageError(f"TEXT_FILE {given.text_file!r} is not the text the run in {str(out)!r} was trained on; "
                         "leave it out to resume on the stored token ids")
    config = checkpoint["model_config"] if args["init_from"] else dataclasses.asdict(
        model_config_for(args, data["vocab_size"]))
    return Prepared(args, checkpoint, checkpoint["tokenizer"], data, config, [])


def prepare(given: argparse.Namespace, out: Path) -> Prepared:
    """Check the input and the folder; write a new run's files (nothing is written if any check fails)."""
    check_out_folder(out, resume=given.resume)
    if given.resume:
        return _resume(given, out)
    if given.chat is not None or given.dpo is not None:
        return _prepare_examples(given, out)
    if given.text_file is None:
        raise UsageError("TEXT_FILE is missing; a new run needs a text file to train on (or --chat / --dpo FILE "
                         "with --init-from)")
    notes = []
    if given.init_from is not None:
        source = read_source(given.init_from)
        args = init_from_args(given, source.config, tokenizer_kind(source.tokenizer), source.seq_len)
        text = read_text_file(given.text_file)
        tokenizer = source.tokenizer
        ids = encode_text(source, text, given.text_file)
        config = source.config.replace(dropout=args["dropout"], use_sdpa=True, fused_norm=True)
    else:
        args = resolve_args(given, None)
        text = read_text_file(given.text_file)
        if args["tokenizer"] == "bpe" and args["vocab_size"] is None:
            args["vocab_size"], why = default_vocab_size(text)
            notes.append(f"BPE vocabulary {args['vocab_size']:,} (--vocab-size left out: {why})")
        tokenizer = train_tokenizer(text, args["tokenizer"], args["vocab_size"] or 0, special_tokens=[END_OF_TEXT])
        ids = np.asarray(tokenizer.encode(text), dtype=np.int64)
        config = model_config_for(args, tokenizer.vocab_size)  # raises on sizes that do not fit together
    TokenData(ids, args["seq_len"], args["batch_size"])  # raises if the text is shorter than a window
    data = {"source": str(given.text_file), "sha256": text_sha256(text), "n_chars": len(text),
            "n_tokens": len(ids), "vocab_size": config.vocab_size}  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)  # nothing is written before every check has passed
    tokenizer_ref = save_tokenizer(tokenizer, out)
    write_token_file(ids, out / TOKENS, config.vocab_size)
    info = {"model_config": dataclasses.asdict(config), "tokenizer": tokenizer_ref, "args": args, "data": data}
    write_run_info(out, info)
    atomic_write_text(out / LOG, ",".join(LOG_COLUMNS) + "\n")
    return Prepared(args, None, tokenizer_ref, data, dataclasses.asdict(config), notes)


def _prepare_examples(given: argparse.Namespace, out: Path) -> Prepared:
    """A new ``--chat`` / ``--dpo`` run: the source's tokenizer with the chat markers, every line checked and
    encoded, then the tokenizer, a copy of the file (to resume without it) and, for DPO, the frozen reference."""
    if given.init_from is None:
        resolve_args(given, None)  # names the missing --init-from (and any other bad flag) first
    kind = "chat" if given.chat is not None else "dpo"
    path = given.chat if kind == "chat" else given.dpo
    source = read_source(given.init_from)
    args = init_from_args(given, source.config, tokenizer_kind(source.tokenizer), source.seq_len)
    examples, text = read_examples(path, kind)
    tokenizer = source.tokenizer
    if tokenizer_kind(tokenizer) == "char":
        raise UsageError(f"--{kind}: the run in --init-from {given.init_from!r} has a character tokenizer, which "
                         "cannot take the chat template's special tokens; train the base run with --tokenizer bpe")
    markers = add_chat_tokens(tokenizer)
    encoded, dropped = encode_examples(examples, tokenizer, args["seq_len"], path, kind)
    config = source.config.replace(vocab_size=max(source.config.vocab_size, tokenizer.vocab_size),
                                   dropout=args["dropout"], use_sdpa=True, fused_norm=True)  # fmt: skip
    n_train, n_val = (len(part) for part in split_examples(encoded))
    data = {"kind": kind, "source": str(path), "file": DATA_FILES[kind], "sha256": text_sha256(text),
            "n_chars": len(text), "n_examples": len(encoded), "n_train": n_train, "n_val": n_val,
            "n_tokens": sum(len(ids) for example in encoded for ids, _ in example), "vocab_size": config.vocab_size}
    added = [t for t, i in markers.items() if i >= source.config.vocab_size]
    notes = [f"chat template markers {', '.join(added)} added to the tokenizer (new embedding rows start at the "
             "mean of the others)"] if added else []  # fmt: skip
    unit = "conversation" if kind == "chat" else "preference pair"
    notes += [note] if (note := dropped_note(dropped, args["seq_len"], unit)) else []
    out.mkdir(parents=True, exist_ok=True)  # nothing is written before every line has been checked
    tokenizer_ref = save_tokenizer(tokenizer, out)
    atomic_write_text(out / DATA_FILES[kind], text)
    if kind == "dpo":  # the reference: the starting weights, kept for the whole run (and its resumes)
        with atomic_write(out / REFERENCE) as tmp:
            torch.save(source_state(given.init_from, config.vocab_size), tmp)
    info = {"model_config": dataclasses.asdict(config), "tokenizer": tokenizer_ref, "args": args, "data": data}
    write_run_info(out, info)
    atomic_write_text(out / LOG, ",".join(log_columns(kind)) + "\n")
    return Prepared(args, None, tokenizer_ref, data, dataclasses.asdict(config), notes)


def example_task(args: dict[str, Any], data: dict[str, Any], out: Path, tokenizer: Any, config: ModelConfig,
                 lengths: torch.Tensor, device: torch.device) -> ChatTask | DPOTask:  # fmt: skip
    """The task of a ``--chat`` / ``--dpo`` run, from the copy of its file in the run folder."""
    kind = data["kind"]
    examples, text = read_examples(out / data["file"], kind)
    if text_sha256(text) != data["sha256"]:
        raise ValueError(f"{str(out / data['file'])!r} has changed since the run started; expected the file it "
                         "was started with")
    encoded, _ = encode_examples(examples, tokenizer, args["seq_len"], out / data["file"], kind)
    train, val = split_examples(encoded)
    pad = tokenizer.special_tokens[END]  # padded positions are never scored
    if kind == "chat":
        return ChatTask([e[0] for e in train], [e[0] for e in val], pad, args["batch_size"], args["seed"], lengths)
    reference = GPT(config)
    reference.load_state_dict(read_torch_file(out / REFERENCE, "companion-train --dpo"))
    return DPOTask(train, val, pad, args["batch_size"], args["seed"], reference.to(device), args["beta"])


def model_and_optimizer(
    args: dict[str, Any], config: ModelConfig, checkpoint: dict[str, Any] | None, device: torch.device, rank: int
) -> tuple[GPT, torch.optim.AdamW, TrainConfig, dict[str, Any] | None]:
    """A new model (seeded, or SOURCE's weights), or the checkpoint's weights, AdamW moments and generator
    states; with ``--lora``, adapters on the frozen model. Returns (model, optimizer, schedule, lora info)."""
    random.seed(args["seed"])
    np.random.seed(args["seed"])
    torch.manual_seed(args["seed"])  # the initial weights (identical on every process)
    model = GPT(config)
    if checkpoint is None and args["init_from"] and rank == 0:  # under torchrun DDP copies rank 0's weights
        model.load_state_dict(source_state(args["init_from"], config.vocab_size))
    lora = None
    if args["lora"]:
        lora = {"r": args["lora"], "alpha": 2.0 * args["lora"], "targets": lora_targets(model), "merged": False}
        apply_lora(model, lora["r"], lora["alpha"], targets=lora["targets"])
    model = model.to(device)
    train_config = train_config_for(args)
    optimizer = make_optimizer(model, train_config)
    if checkpoint is not None:
        if checkpoint["model_config"] != dataclasses.asdict(config):
            raise ValueError(f"the checkpoint's model config does not match its own arguments: {config}")
        model.load_state_dict(checkpoint["model"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        for group in optimizer.param_groups:  # a resume may change these; the saved state would override them
            group["betas"] = train_config.betas
            group["weight_decay"] = train_config.weight_decay if group["weight_decay"] else 0.0
        set_rng_state(checkpoint["rng"])  # dropout continues with the masks an unbroken run would draw
    return model, optimizer, train_config, lora

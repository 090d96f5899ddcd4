"""The flags of ``companion-train`` and what they resolve to: defaults, a resumed run's saved values, a
``ModelConfig``, a ``TrainConfig``.

A new run fills every flag left out from ``DEFAULTS``; a resumed run from the arguments saved in its
checkpoint. ``MODEL_FLAGS`` (the tokenizer and the model's shape) are fixed for the life of a run: a resume
that gives a different value is refused, since the folder then holds another model. Every other flag
(optimiser, schedule, loop, device) may change when resuming. ``--vocab-size`` left out is chosen from the
text (``companion.data.default_vocab_size``) once the text is read. ``--threads`` and ``--progress`` belong to
one invocation and are not saved.

The learning-rate schedule is fixed when a run starts: its cosine spans the new run's ``--steps``, saved as
``schedule_steps``. ``--resume --steps N`` moves where the run ends, never the schedule: steps past
``schedule_steps`` train at the schedule's floor, ``--lr`` x ``--min-lr-ratio`` (a longer cosine is a new run,
or a fresh warm-up from these weights with ``--init-from``).

A fine-tuning run (``--init-from SOURCE``, chapter 13) takes its tokenizer and model shape from SOURCE:
``init_from_args`` fills the model flags from the source's config and refuses them on the command line;
``--seq-len`` (the training window) may be given, up to the model's context, and ``--dropout`` too. With
``--chat FILE`` or ``--dpo FILE`` (and ``--beta``) it trains on conversations or preference pairs instead of a
text (:mod:`companion.cli.chat_data`, :mod:`companion.cli.train_tasks`).

Every value is checked here, before anything is written: a flag argparse cannot parse, a number out of range
(``--lr inf``), and whatever ``TrainConfig`` would refuse, each named by its flag.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from companion.cli import (
    ArgumentParser,
    UsageError,
    non_negative_int,
    number_type,
    positive_float,
    positive_int,
    seed_int,
)
from companion.cli.machine import DEVICES, DTYPES
from companion.models import ModelConfig
from companion.training import TrainConfig

__all__ = ["DEFAULTS", "DPO_BETA", "MODEL_FLAGS", "SHAPE_FLAGS", "parser", "resolve_args", "init_from_args",
           "model_config_for", "train_config_for"]  # fmt: skip

# The tokenizer and the model's shape: chosen by a new run, taken from SOURCE by a fine-tuning run.
SHAPE_FLAGS = ("tokenizer", "vocab_size", "arch", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")
# Flags that define the model and its data: fixed for the life of a run (a resume must not change them).
MODEL_FLAGS = (*SHAPE_FLAGS, "seq_len", "dropout", "init_from", "lora", "chat", "dpo", "beta")
# Defaults of every flag whose default a resumed run takes from its checkpoint instead.
DEFAULTS: dict[str, Any] = {
    "tokenizer": "bpe", "vocab_size": None, "arch": "gpt2", "d_model": 128, "n_layers": 4, "n_heads": 4,
    "n_kv_heads": None, "d_ff": None, "seq_len": 64, "dropout": 0.0,
    "batch_size": 12, "grad_accum": 1, "lr": 1e-3, "min_lr_ratio": 0.1, "warmup": None, "weight_decay": 0.1,
    "beta1": 0.9, "beta2": 0.99, "grad_clip": 1.0, "seed": 0, "steps": 1000, "eval_every": 100, "eval_windows": 64,
    "checkpoint_every": None, "device": "auto", "dtype": "float32", "init_from": None, "lora": None,
    "chat": None, "dpo": None, "beta": None,
}  # fmt: skip  (nanoGPT's CPU recipe: 4 layers, 4 heads, width 128, context 64, batch 12, β2 0.99)
DPO_BETA = 0.1  # Rafailov et al. 2023 use 0.1 (and 0.5) for dialogue; chapter 13 compares 0.1 and 10
# TrainConfig's fields and the flags that set them, to name a refused value by its flag
_TRAIN_FLAGS = {"steps": "--steps", "lr": "--lr", "min_lr_ratio": "--min-lr-ratio", "warmup_steps": "--warmup",
                "weight_decay": "--weight-decay", "betas[0]": "--beta1", "betas[1]": "--beta2",
                "grad_clip": "--grad-clip"}  # fmt: skip


_non_negative_float = number_type("a finite number >= 0", float, lambda v: math.isfinite(v) and v >= 0)
_ratio = number_type("a number between 0 and 1", float, lambda v: 0 <= v <= 1)
_beta = number_type("a number in [0, 1)", float, lambda v: 0 <= v < 1)
_dropout = number_type("a probability in [0, 1)", float, lambda v: 0 <= v < 1)


def parser() -> ArgumentParser:
    """The flags of ``companion-train`` (every default ``None``: ``resolve_args`` fills them in)."""
    p = ArgumentParser(prog="companion-train", description="Train a small GPT on a UTF-8 text file; checkpoints, "
                       "log.csv and the tokenizer go to --out DIR. Sample from it with companion-sample DIR, score "
                       "it on another text with companion-eval DIR FILE.")
    p.add_argument("text_file", nargs="?", metavar="TEXT_FILE", help="UTF-8 text to train on (optional with --resume)")
    p.add_argument("--out", required=True, metavar="DIR", help="run folder: new or empty, or a run to --resume")
    p.add_argument("--resume", action="store_true", help="continue the run in DIR from its last checkpoint; with a "
                   "larger --steps, the steps past the end of its cosine schedule train at the schedule's floor")
    g = p.add_argument_group("tokenizer and model (fixed for the life of a run)")
    g.add_argument("--tokenizer", choices=("char", "bpe"), help="char: one id per character; bpe: byte-level BPE "
                   "(default)")
    g.add_argument("--vocab-size", type=positive_int, help="BPE vocabulary size, >= 257 (default: from the text, "
                   "512 for alphabetic text, more for Chinese or Japanese text; the run says which and why)")
    g.add_argument("--arch", choices=("gpt2", "llama"), help="gpt2: LayerNorm, GELU, learned positions (default); "
                   "llama: RMSNorm, SwiGLU, RoPE, no biases")
    g.add_argument("--d-model", type=positive_int, help="model width D (default 128)")
    g.add_argument("--n-layers", type=positive_int, help="layers (default 4)")
    g.add_argument("--n-heads", type=positive_int, help="attention heads (default 4)")
    g.add_argument("--n-kv-heads", type=positive_int, help="key/value heads for GQA (default: --n-heads)")
    g.add_argument("--d-ff", type=positive_int, help="FFN width (default 4·D for gpt2, about 8/3·D for llama)")
    g.add_argument("--seq-len", type=positive_int, help="context window T in tokens (default 64); also the most "
                   "tokens the model reads at once when sampling (a gpt2 model has this many learned positions)")
    g.add_argument("--dropout", type=_dropout, help="dropout probability (default 0)")
    g = p.add_argument_group("optimiser (AdamW, linear warm-up, cosine decay)")
    g.add_argument("--batch-size", type=positive_int, help="windows per optimiser step, over all processes and "
                   "micro-batches (default 12)")
    g.add_argument("--grad-accum", type=positive_int, metavar="N", help="split each step's batch into N micro-batches "
                   "run one after the other, their gradients summed: the same step in less memory (default 1)")
    g.add_argument("--lr", type=positive_float, help="peak learning rate (default 1e-3)")
    g.add_argument("--min-lr-ratio", type=_ratio, help="the schedule's floor: final lr / peak lr (default 0.1)")
    g.add_argument("--warmup", type=non_negative_int, help="warm-up steps (default: steps // 10, at most 100)")
    g.add_argument("--weight-decay", type=_non_negative_float, help="AdamW weight decay (default 0.1)")
    g.add_argument("--beta1", type=_beta, help="Adam β1 (default 0.9)")
    g.add_argument("--beta2", type=_beta, help="Adam β2 (default 0.99)")
    g.add_argument("--grad-clip", type=_non_negative_float, help="clip the gradient norm to this; 0: off (default 1)")
    g.add_argument("--seed", type=seed_int, help="seeds the weights and the batches (default 0)")
    g = p.add_argument_group("loop")
    g.add_argument("--steps", type=positive_int, help="the run's last step (default 1000). A new run's cosine "
                   "schedule spans its --steps; with --resume a larger --steps trains on at the schedule's floor "
                   "(--lr x --min-lr-ratio) instead of stretching it")
    g.add_argument("--stop-at", type=positive_int, metavar="STEP", help="stop after this step (and save); the "
                   "schedule still ends at --steps; continue with --resume")
    g.add_argument("--eval-every", type=positive_int, help="validation loss every N steps (default 100); the "
                   "lowest so far is kept in DIR/best.pt")
    g.add_argument("--eval-windows", type=positive_int, help="validation windows per evaluation (default 64)")
    g.add_argument("--checkpoint-every", type=positive_int, help="checkpoint every N steps (default: --eval-every)")
    g = p.add_argument_group("machine")
    g.add_argument("--device", choices=DEVICES, help="where to train: auto (default) takes a CUDA or Apple GPU if "
                   "there is one, else the CPU")
    g.add_argument("--dtype", choices=DTYPES, help="float32 (default), or bfloat16 mixed precision (autocast; the "
                   "weights and optimiser stay float32)")
    g.add_argument("--threads", type=positive_int, metavar="N", help="CPU threads torch may use (default: torch's "
                   "choice); not saved with the run")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar (default: only when stderr is a terminal)")
    g = p.add_argument_group("fine-tuning (chapter 13)")
    g.add_argument("--init-from", metavar="SOURCE", help="start from the weights and tokenizer of SOURCE: a "
                   "companion-train run folder, or a Hugging Face model folder (GPT-2, Llama) with a tokenizer.json; "
                   "the tokenizer and model flags then come from SOURCE")
    g.add_argument("--lora", type=positive_int, metavar="R", help="with --init-from: train rank-R LoRA adapters "
                   "(alpha = 2R) on every attention and FFN projection instead of all weights; the last checkpoint "
                   "holds the merged weights")
    g.add_argument("--chat", metavar="FILE", help="with --init-from, instead of TEXT_FILE: supervised fine-tuning on "
                   "conversations, one JSON object per line, {\"messages\": [{\"role\": \"user\", \"content\": ...}, "
                   "{\"role\": \"assistant\", \"content\": ...}]}; only the assistant's tokens are trained on; "
                   "the last 10%% of the lines validate")
    g.add_argument("--dpo", metavar="FILE", help="with --init-from, instead of TEXT_FILE: direct preference "
                   "optimisation on pairs, one per line, {\"prompt\": ..., \"chosen\": ..., \"rejected\": ...}, "
                   "against the starting model, frozen; logs loss, reward margin, accuracy and KL")
    g.add_argument("--beta", type=positive_float, help="with --dpo: the strength of the KL leash to the reference, "
                   f"β (default {DPO_BETA:g})")
    return p


def train_config_for(args: dict[str, Any]) -> TrainConfig:
    """The optimiser's and schedule's settings of a run; the cosine spans ``schedule_steps``, not ``steps``.

    Raises ``UsageError`` naming the flag of a value ``TrainConfig`` refuses.
    """
    try:
        return TrainConfig(
            steps=args["schedule_steps"], lr=args["lr"], min_lr_ratio=args["min_lr_ratio"],
            warmup_steps=args["warmup"], weight_decay=args["weight_decay"], betas=(args["beta1"], args["beta2"]),
            grad_clip=args["grad_clip"] or None,
        )  # fmt: skip
    except (TypeError, ValueError) as err:
        message = str(err)
        for field, flag in _TRAIN_FLAGS.items():
            message = message.replace(f"TrainConfig.{field}", flag)
        raise UsageError(message) from None


def resolve_args(
    given: argparse.Namespace, saved: dict[str, Any] | None, defaults: dict[str, Any] = DEFAULTS
) -> dict[str, Any]:
    """Given flags over the run's saved arguments (``--resume``) or over ``defaults`` (a new run).

    Raises ``UsageError`` for a model flag that differs from the resumed run's, and for any value that does not
    fit (before anything is written).
    """
    args = {**defaults, **(saved or {})}  # a flag newer than the checkpoint takes its default
    for name in DEFAULTS:
        value = getattr(given, name)
        if value is None:
            continue
        if saved is not None and name in MODEL_FLAGS and value != args[name]:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} {value} differs from the run being resumed ({flag} {args[name]}): the folder "
                             "holds another model; drop the flag to resume it, or train into a new --out")
        args[name] = value
    if saved is None:
        args["schedule_steps"] = args["steps"]  # the cosine spans the first --steps, for the life of the run
    else:
        args["schedule_steps"] = saved.get("schedule_steps", saved["steps"])
    if args["warmup"] is None:
        args["warmup"] = min(100, args["steps"] // 10)
    if args["checkpoint_every"] is None:
        args["checkpoint_every"] = args["eval_every"]
    _check_example_flags(given, args)
    if args["lora"] is not None and args["init_from"] is None:
        raise UsageError(f"--lora {args['lora']} fine-tunes a pretrained model through adapters; pass --init-from "
                         "SOURCE too")
    if args["tokenizer"] == "bpe" and given.vocab_size is not None and given.vocab_size < 257:
        raise UsageError(f"--vocab-size {args['vocab_size']} is too small; a byte-level BPE needs >= 257 (the 256 "
                         "bytes and <|endoftext|>)")
    if args["batch_size"] % args["grad_accum"]:
        raise UsageError(f"--batch-size {args['batch_size']} is not divisible by --grad-accum {args['grad_accum']}; "
                         "each micro-batch holds batch-size / grad-accum windows")
    train_config_for(args)  # every optimiser and schedule value, checked before anything is written
    return args


def _check_example_flags(given: argparse.Namespace, args: dict[str, Any]) -> None:
    """--chat and --dpo: fine-tuning data in place of TEXT_FILE, from --init-from; --beta belongs to --dpo."""
    if args["chat"] is not None and args["dpo"] is not None:
        raise UsageError("--chat and --dpo are two kinds of fine-tuning; pass one (first --chat, then --dpo "
                         "from its run with --init-from)")
    flag = "--chat" if args["chat"] is not None else "--dpo" if args["dpo"] is not None else None
    if flag is not None and args["init_from"] is None:
        raise UsageError(f"{flag} fine-tunes a trained model; pass --init-from SOURCE (a companion-train run or a "
                         "Hugging Face folder)")
    if flag is not None and getattr(given, "text_file", None) is not None:
        raise UsageError(f"{flag} FILE is the training data; leave out TEXT_FILE {given.text_file!r}")
    if args["beta"] is not None and args["dpo"] is None:
        raise UsageError(f"--beta {args['beta']:g} is the DPO loss's β; it needs --dpo FILE")
    if args["dpo"] is not None and args["beta"] is None:
        args["beta"] = DPO_BETA


def init_from_args(given: argparse.Namespace, config: ModelConfig, tokenizer_kind: str, seq_len: int) -> dict:
    """The arguments of a fine-tuning run: the model flags describe the source model (``config``, its
    tokenizer's kind, its default window ``seq_len``); the other flags as given or ``DEFAULTS``.

    Raises ``UsageError`` for a model flag given with ``--init-from`` and for a ``--seq-len`` longer than the
    model's context ``config.max_seq_len``.
    """
    for name in SHAPE_FLAGS:
        if getattr(given, name) is not None:
            flag = "--" + name.replace("_", "-")
            raise UsageError(f"{flag} cannot be combined with --init-from: the tokenizer and the model's shape come "
                             f"from {given.init_from!r}; drop {flag}")
    shape = {"tokenizer": tokenizer_kind, "vocab_size": config.vocab_size,
             "arch": "llama" if config.activation == "swiglu" else "gpt2", "d_model": config.d_model,
             "n_layers": config.n_layers, "n_heads": config.n_heads, "n_kv_heads": config.n_kv_heads,
             "d_ff": config.d_ff, "seq_len": seq_len, "dropout": config.dropout}  # fmt: skip
    args = resolve_args(given, None, defaults={**DEFAULTS, **shape})
    if args["seq_len"] > config.max_seq_len:
        raise UsageError(f"--seq-len {args['seq_len']} is longer than the context of the model in {given.init_from!r} "
                         f"(max_seq_len={config.max_seq_len}); pass --seq-len {config.max_seq_len} or less")
    return args


def model_config_for(args: dict[str, Any], vocab_size: int) -> ModelConfig:
    """The ``ModelConfig`` a run's arguments describe (``--arch`` picks the preset, the flags the sizes).

    Training goes by the fast paths, which compute the same functions as the explicit ones the chapters
    read (tested equal): fused attention (``use_sdpa``) and one-kernel norms (``fused_norm``).
    """
    d = args["d_model"]
    sizes = dict(vocab_size=vocab_size, d_model=d, n_heads=args["n_heads"], n_kv_heads=args["n_kv_heads"],
                 n_layers=args["n_layers"], max_seq_len=args["seq_len"], dropout=args["dropout"], use_sdpa=True,
                 fused_norm=True)  # fmt: skip
    if args["arch"] == "llama":  # SwiGLU has three matrices: ~8/3·D keeps the parameter count of a 4·D FFN
        return ModelConfig.llama(d_ff=args["d_ff"] or 8 * math.ceil(8 * d / 3 / 8), **sizes)
    return ModelConfig.gpt2_small(d_ff=args["d_ff"] or 4 * d, **sizes)

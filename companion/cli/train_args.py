"""The flags of ``companion-train`` and what they resolve to: defaults, a resumed run's saved values, a
``ModelConfig``, a device.

A new run fills every flag left out from ``DEFAULTS``; a resumed run from the arguments saved in its
checkpoint. ``MODEL_FLAGS`` (the tokenizer and the model's shape) are fixed for the life of a run: a resume
that gives a different value is refused, since the folder then holds another model. Every other flag
(optimiser, schedule, loop, device) may change when resuming.

A fine-tuning run (``--init-from SOURCE``, chapter 13) takes its tokenizer and model shape from SOURCE:
``init_from_args`` fills the model flags from the source's config and refuses them on the command line;
``--seq-len`` (the training window) may be given, up to the model's context, and ``--dropout`` too.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import torch

from companion.cli import ArgumentParser, UsageError
from companion.models import ModelConfig

__all__ = ["DEFAULTS", "MODEL_FLAGS", "SHAPE_FLAGS", "parser", "resolve_args", "init_from_args", "model_config_for",
           "device_for"]  # fmt: skip

# The tokenizer and the model's shape: chosen by a new run, taken from SOURCE by a fine-tuning run.
SHAPE_FLAGS = ("tokenizer", "vocab_size", "arch", "d_model", "n_layers", "n_heads", "n_kv_heads", "d_ff")
# Flags that define the model and its data: fixed for the life of a run (a resume must not change them).
MODEL_FLAGS = (*SHAPE_FLAGS, "seq_len", "dropout", "init_from", "lora")
# Defaults of every flag whose default a resumed run takes from its checkpoint instead.
DEFAULTS: dict[str, Any] = {
    "tokenizer": "bpe", "vocab_size": 512, "arch": "gpt2", "d_model": 128, "n_layers": 4, "n_heads": 4,
    "n_kv_heads": None, "d_ff": None, "seq_len": 64, "dropout": 0.0,
    "batch_size": 12, "lr": 1e-3, "min_lr_ratio": 0.1, "warmup": None, "weight_decay": 0.1, "beta1": 0.9,
    "beta2": 0.99, "grad_clip": 1.0, "seed": 0, "steps": 1000, "eval_every": 100, "eval_windows": 64,
    "checkpoint_every": None, "device": "cpu", "init_from": None, "lora": None,
}  # fmt: skip  (nanoGPT's CPU recipe: 4 layers, 4 heads, width 128, context 64, batch 12, β2 0.99)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is invalid; expected an integer >= 1")
    return value


def _non_negative_float(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"{text} is invalid; expected a number >= 0")
    return value


def parser() -> ArgumentParser:
    """The flags of ``companion-train`` (every default ``None``: ``resolve_args`` fills them in)."""
    p = ArgumentParser(prog="companion-train", description="Train a small GPT on a UTF-8 text file; checkpoints, "
                       "log.csv and the tokenizer go to --out DIR. Sample from it with companion-sample DIR.")
    p.add_argument("text_file", nargs="?", metavar="TEXT_FILE", help="UTF-8 text to train on (optional with --resume)")
    p.add_argument("--out", required=True, metavar="DIR", help="run folder: new or empty, or a run to --resume")
    p.add_argument("--resume", action="store_true", help="continue the run in DIR from its last checkpoint")
    g = p.add_argument_group("tokenizer and model (fixed for the life of a run)")
    g.add_argument("--tokenizer", choices=("char", "bpe"), help="char: one id per character; bpe: byte-level BPE "
                   "(default)")
    g.add_argument("--vocab-size", type=_positive_int, help="BPE vocabulary size, >= 256 (default 512)")
    g.add_argument("--arch", choices=("gpt2", "llama"), help="gpt2: LayerNorm, GELU, learned positions (default); "
                   "llama: RMSNorm, SwiGLU, RoPE, no biases")
    g.add_argument("--d-model", type=_positive_int, help="model width D (default 128)")
    g.add_argument("--n-layers", type=_positive_int, help="layers (default 4)")
    g.add_argument("--n-heads", type=_positive_int, help="attention heads (default 4)")
    g.add_argument("--n-kv-heads", type=_positive_int, help="key/value heads for GQA (default: --n-heads)")
    g.add_argument("--d-ff", type=_positive_int, help="FFN width (default 4·D for gpt2, about 8/3·D for llama)")
    g.add_argument("--seq-len", type=_positive_int, help="context window T in tokens (default 64)")
    g.add_argument("--dropout", type=_non_negative_float, help="dropout probability (default 0)")
    g = p.add_argument_group("optimiser (AdamW, linear warm-up, cosine decay)")
    g.add_argument("--batch-size", type=_positive_int, help="windows per step, over all processes (default 12)")
    g.add_argument("--lr", type=float, help="peak learning rate (default 1e-3)")
    g.add_argument("--min-lr-ratio", type=_non_negative_float, help="final lr / peak lr (default 0.1)")
    g.add_argument("--warmup", type=int, help="warm-up steps (default: steps // 10, at most 100)")
    g.add_argument("--weight-decay", type=_non_negative_float, help="AdamW weight decay (default 0.1)")
    g.add_argument("--beta1", type=float, help="Adam β1 (default 0.9)")
    g.add_argument("--beta2", type=float, help="Adam β2 (default 0.99)")
    g.add_argument("--grad-clip", type=_non_negative_float, help="clip the gradient norm to this; 0: off (default 1)")
    g.add_argument("--seed", type=int, help="seeds the weights and the batches (default 0)")
    g = p.add_argument_group("loop")
    g.add_argument("--steps", type=_positive_int, help="length of the whole schedule in steps (default 1000)")
    g.add_argument("--stop-at", type=_positive_int, metavar="STEP", help="stop after this step (and save); the "
                   "schedule still ends at --steps; continue with --resume")
    g.add_argument("--eval-every", type=_positive_int, help="validation loss every N steps (default 100)")
    g.add_argument("--eval-windows", type=_positive_int, help="validation windows per evaluation (default 64)")
    g.add_argument("--checkpoint-every", type=_positive_int, help="checkpoint every N steps (default: --eval-every)")
    g.add_argument("--device", choices=("cpu", "cuda"), help="where to train (default cpu)")
    g = p.add_argument_group("fine-tuning (chapter 13)")
    g.add_argument("--init-from", metavar="SOURCE", help="start from the weights and tokenizer of SOURCE: a "
                   "companion-train run folder, or a Hugging Face model folder (GPT-2, Llama) with a tokenizer.json; "
                   "the tokenizer and model flags then come from SOURCE")
    g.add_argument("--lora", type=_positive_int, metavar="R", help="with --init-from: train rank-R LoRA adapters "
                   "(alpha = 2R) on every attention and FFN projection instead of all weights; the last checkpoint "
                   "holds the merged weights")
    g.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="show a progress bar (default: only when stderr is a terminal)")
    return p


def resolve_args(
    given: argparse.Namespace, saved: dict[str, Any] | None, defaults: dict[str, Any] = DEFAULTS
) -> dict[str, Any]:
    """Given flags over the run's saved arguments (``--resume``) or over ``defaults`` (a new run)."""
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
    if args["warmup"] is None:
        args["warmup"] = min(100, args["steps"] // 10)
    if args["checkpoint_every"] is None:
        args["checkpoint_every"] = args["eval_every"]
    if not args["lr"] > 0:
        raise UsageError(f"--lr {args['lr']} is invalid; expected a positive learning rate")
    if args["warmup"] < 0:
        raise UsageError(f"--warmup {args['warmup']} is invalid; expected >= 0")
    for name in ("beta1", "beta2"):
        if not 0 <= args[name] < 1:
            raise UsageError(f"--{name} {args[name]} is invalid; expected 0 <= {name} < 1")
    if args["lora"] is not None and args["init_from"] is None:
        raise UsageError(f"--lora {args['lora']} fine-tunes a pretrained model through adapters; pass --init-from "
                         "SOURCE too")
    if args["tokenizer"] == "bpe" and args["vocab_size"] < 256:
        raise UsageError(f"--vocab-size {args['vocab_size']} is too small; a byte-level BPE needs >= 256")
    return args


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


def device_for(name: str, local_rank: int = 0) -> torch.device:
    """``torch.device`` of ``--device``; a ``UsageError`` if CUDA is asked for and absent."""
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device cuda: no CUDA GPU is available to this torch {torch.__version__} "
                             "(torch.cuda.is_available() is False); use --device cpu")
        return torch.device("cuda", local_rank)
    return torch.device("cpu")

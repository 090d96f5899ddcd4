"""``companion-train TEXT_FILE --out DIR``: train a small GPT on a text file, resumably (chapter 11).

    companion-train book.txt --out run --steps 2000                 # BPE (512 tokens), GPT-2-shaped model
    companion-train book.txt --out run --tokenizer char --arch llama --d-model 128 --n-layers 4
    companion-train book.txt --out run --steps 4000 --resume       # continue (to a later end if --steps grew)
    torchrun --nproc_per_node=2 -m companion.cli.train book.txt --out run   # data-parallel (DDP)

What one run does, in order:

1. checks everything it can before writing anything (the text, the flags, the ``--out`` folder): bad input
   ends with one line on stderr and exit code 2, and the folder is left as it was;
2. a new run trains a tokenizer on the text (``companion.data``), writes it, the token ids
   (``tokens.bin``, memory-mapped) and ``run.json`` into DIR; ``--resume`` reads them back instead;
3. trains with AdamW, linear warm-up then cosine decay (``companion.training``: ``make_optimizer``,
   ``lr_at``, ``lm_loss``), gradient clipping, a tqdm bar showing the loss (on a terminal, or with
   ``--progress``), the validation loss every ``--eval-every`` steps, one row per step in ``DIR/log.csv``,
   and an atomic checkpoint every ``--checkpoint-every`` steps and at the end (``companion.cli.run_folder``);
4. Ctrl-C finishes the current step, saves a checkpoint and exits with code 130.

Resuming is exact: batches depend only on (seed, step) and the checkpoint holds the weights, the AdamW
moments and every generator state, so N steps + ``--resume`` N more log the same numbers, bit for bit, as 2N
steps in one go (tests/test_cli.py). ``--steps`` is the length of the whole schedule; ``--stop-at K`` ends
this invocation after step K without changing the schedule. On ``--resume`` the model and tokenizer flags
must be left out (or match the run); the optimiser, schedule and loop flags may be changed.

Fine-tuning (chapter 13): ``--init-from SOURCE`` starts from the weights and the tokenizer of a run folder or
of a Hugging Face model folder (``companion.cli.init_from``) instead of training a tokenizer and initialising
the weights; ``--lora R`` then trains LoRA adapters only (``companion.finetune``) and merges them into the
weights of the last checkpoint, so the finished folder holds a plain model that ``companion-sample`` and
``GPT.save_pretrained`` use as any other.

    companion-train notes.txt --out tuned --init-from run --steps 300 --lr 3e-4      # every weight
    companion-train notes.txt --out tuned --init-from run --steps 300 --lora 8       # adapters only

This is its own loop rather than ``companion.training.train``: it must log and checkpoint between steps and
stop cleanly on Ctrl-C, but every step does what ``train`` does, in the same order.
Under ``torchrun`` each process takes 1/N of the same global batch (as ``python -m companion.training``);
rank 0 writes the folder. Ctrl-C under ``torchrun`` is not caught (the periodic checkpoints are kept).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import os
import random
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from companion._files import atomic_write_text
from companion.cli import EXIT_INTERRUPTED, EXIT_OK, UsageError, run_main
from companion.cli.init_from import encode_text, lora_targets, read_source
from companion.cli.run_folder import (
    CHECKPOINT,
    LOG,
    TOKENS,
    check_out_folder,
    read_run_checkpoint,
    save_run_checkpoint,
    set_rng_state,
    write_run_info,
)
from companion.cli.train_args import device_for, init_from_args, model_config_for, parser, resolve_args
from companion.data import (
    TokenData,
    load_tokenizer,
    read_text_file,
    save_tokenizer,
    text_sha256,
    tokenizer_kind,
    train_tokenizer,
    write_token_file,
)
from companion.finetune import apply_lora, merge_lora
from companion.models import GPT, ModelConfig
from companion.training import TrainConfig, lm_loss, lr_at, make_optimizer
from companion.training.ddp import batch_shard, data_parallel, process_group_backend

__all__ = ["main", "read_log"]

PROG = "companion-train"
LOG_COLUMNS = ("step", "loss", "lr", "grad_norm", "val_loss")


def read_log(folder: str | Path) -> list[dict[str, float]]:
    """The rows of ``DIR/log.csv`` as dicts (``step`` an int; ``val_loss`` only on evaluation steps)."""
    rows = []
    with open(Path(folder) / LOG, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.append({k: (int(v) if k == "step" else float(v)) for k, v in row.items() if v != ""})
    return rows


def _truncate_log(path: Path, last_step: int) -> None:
    """Keep the header and the rows up to ``last_step`` (a crash may have logged steps the checkpoint lacks)."""
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
    header = ",".join(LOG_COLUMNS) + "\n"
    kept = [line for line in lines[1:] if line.strip() and int(line.split(",", 1)[0]) <= last_step]
    atomic_write_text(path, header + "".join(kept))


# --- the run ---------------------------------------------------------------------------------------------


def _prepare(given: argparse.Namespace, out: Path) -> tuple[dict[str, Any], dict[str, Any] | None, dict, dict, dict]:
    """Check the input and the folder, write a new run's files; return (args, checkpoint, tokenizer, data,
    model config as a dict)."""
    check_out_folder(out, resume=given.resume)
    if given.resume:
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
        return args, checkpoint, checkpoint["tokenizer"], data, config
    if given.text_file is None:
        raise UsageError("TEXT_FILE is missing; a new run needs a text file to train on")
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
        tokenizer = train_tokenizer(text, args["tokenizer"], args["vocab_size"])
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
    return args, None, tokenizer_ref, data, dataclasses.asdict(config)


def _evaluate(model: nn.Module, batches: list[Tensor], device: torch.device) -> float:
    """Mean next-token loss over the validation windows (eval mode: no dropout, no randomness)."""
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            total += lm_loss(model, batch.to(device)).item() * batch.size(0)
            count += batch.size(0)
    model.train(was_training)
    return total / count


def _model_and_optimizer(
    args: dict[str, Any], config: ModelConfig, checkpoint: dict[str, Any] | None, device: torch.device, rank: int
) -> tuple[GPT, torch.optim.AdamW, TrainConfig, dict[str, Any] | None]:
    """A new model (seeded, or SOURCE's weights), or the checkpoint's weights, AdamW moments and generator
    states; with ``--lora``, adapters on the frozen model. Returns (model, optimizer, schedule, lora info)."""
    random.seed(args["seed"])
    np.random.seed(args["seed"])
    torch.manual_seed(args["seed"])  # the initial weights (identical on every process)
    model = GPT(config)
    if checkpoint is None and args["init_from"] and rank == 0:  # under torchrun DDP copies rank 0's weights
        model.load_state_dict(read_source(args["init_from"]).state)
    lora = None
    if args["lora"]:
        lora = {"r": args["lora"], "alpha": 2.0 * args["lora"], "targets": lora_targets(model), "merged": False}
        apply_lora(model, lora["r"], lora["alpha"], targets=lora["targets"])
    model = model.to(device)
    train_config = TrainConfig(
        steps=args["steps"], lr=args["lr"], min_lr_ratio=args["min_lr_ratio"], warmup_steps=args["warmup"],
        weight_decay=args["weight_decay"], betas=(args["beta1"], args["beta2"]), grad_clip=args["grad_clip"] or None,
    )  # fmt: skip
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


@contextlib.contextmanager
def _ctrl_c_sets(flag: threading.Event, enabled: bool) -> Iterator[None]:
    """While active, the first Ctrl-C only sets ``flag`` (the loop stops after the current step); a second
    Ctrl-C raises ``KeyboardInterrupt`` at once. Disabled under torchrun and outside the main thread."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(signum: int, frame: Any) -> None:
        if flag.is_set():
            raise KeyboardInterrupt
        flag.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _train(given: argparse.Namespace) -> int:
    import torch.distributed as dist

    world, rank = int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))
    out = Path(given.out)
    if given.device is not None:
        device_for(given.device)  # no GPU: say so before anything is written
    if world > 1:
        dist.init_process_group(process_group_backend())  # the same set-up as python -m companion.training
    prepared = _prepare(given, out) if rank == 0 else None
    if world > 1:
        box = [prepared]
        dist.broadcast_object_list(box)  # rank 0 checked and wrote the folder; the others read what it found
        prepared = box[0]
    args, checkpoint, tokenizer_ref, data_info, config_dict = prepared
    device = device_for(args["device"], int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if args["batch_size"] % world:
        raise UsageError(f"--batch-size {args['batch_size']} is not divisible by the {world} processes")
    load_tokenizer(out, tokenizer_ref)  # fails early if the tokenizer file is missing or was changed
    data = TokenData.open(out / TOKENS, data_info["vocab_size"], args["seq_len"], args["batch_size"], args["seed"])
    if len(data.ids) != data_info["n_tokens"]:
        raise ValueError(f"{str(out / TOKENS)!r} holds {len(data.ids)} ids, the run expects {data_info['n_tokens']}")
    config = ModelConfig(**config_dict)
    steps, start = args["steps"], checkpoint["step"] if checkpoint else 0
    stop = min(given.stop_at or steps, steps)
    if start >= steps:
        raise UsageError(f"the run in {str(out)!r} already finished ({start} of --steps {steps}); pass a larger "
                         "--steps to train longer")
    if stop <= start:
        raise UsageError(f"--stop-at {given.stop_at} is not after the checkpoint's step {start}")

    model, optimizer, train_config, lora = _model_and_optimizer(args, config, checkpoint, device, rank)
    if rank == 0 and checkpoint is not None:
        _truncate_log(out / LOG, start)
    # what the steps run through: under torchrun the model wrapped in DDP (gradients averaged over processes)
    trained = data_parallel(model, device) if world > 1 else model
    shard = batch_shard(args["batch_size"], rank, world)
    val_batches = data.val_batches(args["eval_windows"])

    def save(step: int) -> None:
        if rank == 0:
            if lora is not None and step == steps:  # the end of a LoRA run: W + (alpha / r) B A, a plain model
                merge_lora(model)
                lora["merged"] = True
            save_run_checkpoint(out / CHECKPOINT, model=model, optimizer=optimizer, step=step, model_config=config,
                                tokenizer=tokenizer_ref, args=args, data=data_info, lora=lora)  # fmt: skip

    if checkpoint is None:
        save(0)  # a new run is resumable from the start
    elif rank == 0:  # run.json shows the arguments in force (a resume may have changed --steps, --lr...)
        write_run_info(out, {"model_config": dataclasses.asdict(config), "tokenizer": tokenizer_ref, "args": args,
                             "data": data_info})  # fmt: skip
    progress = given.progress if given.progress is not None else sys.stderr.isatty()
    from tqdm.auto import tqdm

    bar = tqdm(total=steps, initial=start, desc="train", disable=not progress or rank != 0, leave=False)
    say = (bar.write if progress else print) if rank == 0 else (lambda message: None)
    say(f"{PROG}: {data_info['n_tokens']:,} tokens ({tokenizer_ref['kind']}, vocabulary {config.vocab_size}; "
        f"train {data.n_train:,} / validation {data.n_val:,}); steps {start + 1}..{stop} of {steps} on {device}")
    if args["init_from"]:
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        what = f"LoRA rank {args['lora']} on {', '.join(lora['targets'])}" if lora else "every weight"
        say(f"{PROG}: fine-tuning {str(args['init_from'])!r}: {what} ({trainable:,} trainable parameters)")

    interrupted = threading.Event()
    done, updating, val_loss = start, False, float("nan")
    log = open(out / LOG, "a", encoding="utf-8", newline="") if rank == 0 else None
    began = time.perf_counter()
    try:
        with _ctrl_c_sets(interrupted, enabled=world == 1), torch.enable_grad():  # even if called under no_grad
            trained.train()
            for step in range(start, stop):
                if interrupted.is_set():
                    break
                batch = data.train_batch(step)[shard].to(device)  # (B / world, T + 1)
                updating = True  # from here until the step is done the state is half new: no checkpoint
                lr = lr_at(step, train_config)
                for group in optimizer.param_groups:
                    group["lr"] = lr
                loss = lm_loss(trained, batch)
                if not torch.isfinite(loss):
                    raise ValueError(f"the loss became {loss.item()} at step {step + 1}; lower --lr {args['lr']}")
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.grad_clip or float("inf"))
                optimizer.step()
                logged = loss.detach()
                if world > 1:
                    dist.all_reduce(logged)
                    logged /= world  # the mean over processes: the loss of the whole global batch
                done, updating = step + 1, False
                val = ""
                if done % args["eval_every"] == 0 or done == steps:  # not at --stop-at: the log must not depend on it
                    val_loss = _evaluate(model, val_batches, device)
                    val = repr(val_loss)
                    say(f"step {done}/{steps}: train loss {logged.item():.4f}, val loss {val_loss:.4f}")
                if log is not None:
                    log.write(f"{done},{logged.item()!r},{lr!r},{float(grad_norm)!r},{val}\n")
                bar.update(1)
                bar.set_postfix(loss=f"{logged.item():.3f}", val=f"{val_loss:.3f}")
                if done % args["checkpoint_every"] == 0 or done == stop:
                    if log is not None:
                        log.flush()
                    save(done)
    except KeyboardInterrupt:
        interrupted.set()
    finally:
        bar.close()
        if log is not None:
            log.close()
        if world > 1:
            dist.destroy_process_group()
    elapsed = time.perf_counter() - began
    if interrupted.is_set():
        if updating:
            say(f"{PROG}: interrupted in the middle of step {done + 1}; the last checkpoint is kept")
        else:
            save(done)
            say(f"{PROG}: interrupted; checkpoint of step {done} saved in {str(out)!r}; continue with --resume")
        return EXIT_INTERRUPTED
    ms = 1000 * elapsed / max(1, done - start)
    quality = f"; val loss {val_loss:.4f} (perplexity {np.exp(val_loss):.2f})" if val_loss == val_loss else ""
    say(f"{PROG}: steps {start + 1}..{done} in {elapsed:.1f} s ({ms:.0f} ms/step){quality}; "
        f"checkpoint {str(out / CHECKPOINT)!r}")
    if done < steps:
        say(f"{PROG}: stopped at step {done} of {steps}; continue with --resume")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``companion-train`` / ``python -m companion.cli.train``; returns the exit code."""
    return run_main(PROG, lambda a: _train(parser().parse_args(a)), argv)


if __name__ == "__main__":
    sys.exit(main())

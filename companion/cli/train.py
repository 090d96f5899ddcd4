"""``companion-train TEXT_FILE --out DIR``: train a small GPT on a text file, resumably (chapter 11).

    companion-train book.txt --out run --steps 2000                 # BPE (size from the text), GPT-2-shaped model
    companion-train book.txt --out run --tokenizer char --arch llama --d-model 128 --n-layers 4
    companion-train --out run --resume                              # continue a stopped run to its --steps
    companion-train --out run --resume --steps 3000                 # train on past the schedule, at its floor
    companion-train book.txt --out run --device cuda --dtype bfloat16 --grad-accum 4 --batch-size 64
    torchrun --nproc_per_node=2 -m companion.cli.train book.txt --out run   # data-parallel (DDP)

What one run does, in order:

1. checks everything it can before writing anything (the text, the flags, the ``--out`` folder): bad input
   ends with one line on stderr and exit code 2, and the folder is left as it was
   (:mod:`companion.cli.train_setup`);
2. a new run trains a tokenizer on the text (``companion.data``), writes it, the token ids
   (``tokens.bin``, memory-mapped) and ``run.json`` into DIR; ``--resume`` reads them back instead;
3. trains with AdamW, linear warm-up then cosine decay (``companion.training``: ``make_optimizer``,
   ``lr_at``, ``lm_loss``), gradient clipping, optionally in bfloat16 autocast (``--dtype``) and with the batch
   split into micro-batches (``--grad-accum``), a tqdm bar showing the loss (on a terminal, or with
   ``--progress``), the validation loss every ``--eval-every`` steps, one row per step in ``DIR/log.csv``,
   an atomic checkpoint every ``--checkpoint-every`` steps and at the end, and ``DIR/best.pt`` whenever the
   validation loss reaches a new low (``companion.cli.run_folder``);
4. Ctrl-C finishes the current step, saves a checkpoint and exits with code 130;
5. ends with a summary (:mod:`companion.cli.train_report`): parameters, time per step, and the validation
   loss, perplexity and bits per byte of the last and of the best checkpoint.

Resuming is exact: batches depend only on (seed, step) and the checkpoint holds the weights, the AdamW
moments and every generator state, so N steps + ``--resume`` N more log the same numbers, bit for bit, as 2N
steps in one go (tests/test_cli.py). The learning-rate schedule is fixed when the run starts: its cosine
spans that first ``--steps``. ``--resume --steps M`` with a larger M trains on after the schedule's end at its
floor, ``--lr`` x ``--min-lr-ratio``, and says so; it never re-stretches the cosine (which would jump the
learning rate back up at the join). A longer cosine is a new run; a new warm-up and cosine from the trained
weights is ``--init-from DIR``. ``--stop-at K`` ends this invocation after step K without changing anything.
On ``--resume`` the model and tokenizer flags must be left out (or match the run); the optimiser, loop and
machine flags may be changed.

Fine-tuning (chapter 13): ``--init-from SOURCE`` starts from the weights and the tokenizer of a run folder or
of a Hugging Face model folder (``companion.cli.init_from``) instead of training a tokenizer and initialising
the weights; ``--lora R`` then trains LoRA adapters only (``companion.finetune``) and merges them into the
weights of the last checkpoint, so the finished folder holds a plain model that ``companion-sample`` and
``GPT.save_pretrained`` use as any other.

    companion-train notes.txt --out tuned --init-from run --steps 300 --lr 3e-4      # every weight
    companion-train notes.txt --out tuned --init-from run --steps 300 --lora 8       # adapters only
    companion-train --chat chats.jsonl --out chat --init-from run --steps 300        # SFT on conversations
    companion-train --dpo pairs.jsonl --out dpo --init-from chat --beta 0.1          # DPO on preference pairs

With ``--chat`` or ``--dpo`` a step is a batch of conversations or of preference pairs instead of text windows
(:mod:`companion.cli.train_tasks`): ``--batch-size`` counts them, micro-batches weigh by scored tokens, and the
log of a DPO run has its reward margin, accuracy and KL beside the loss.

This is its own loop rather than ``companion.training.train``: it must log and checkpoint between steps and
stop cleanly on Ctrl-C, but every step does what ``train`` does, in the same order.
Under ``torchrun`` each process takes 1/N of the same global batch (as ``python -m companion.training``);
rank 0 writes the folder. Ctrl-C under ``torchrun`` is not caught (the periodic checkpoints are kept).
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from companion.cli import EXIT_INTERRUPTED, EXIT_OK, UsageError, run_main
from companion.cli.eval import token_lengths
from companion.cli.machine import autocast, device_for, threads
from companion.cli.run_folder import BEST, CHECKPOINT, LOG, TOKENS, save_run_checkpoint, write_run_info
from companion.cli.train_args import parser
from companion.cli.train_report import (
    PROG,
    divergence_message,
    eval_line,
    fine_tuning_line,
    past_schedule_line,
    start_lines,
    summary_lines,
)
from companion.cli.train_setup import example_task, model_and_optimizer, prepare, truncate_log
from companion.cli.train_tasks import TextTask, micro_batches, rows, to_device
from companion.data import TokenData, load_tokenizer
from companion.finetune import merge_lora
from companion.models import ModelConfig, num_parameters
from companion.training import lr_at
from companion.training.ddp import batch_shard, data_parallel, process_group_backend

__all__ = ["main", "read_log"]


def read_log(folder: str | Path) -> list[dict[str, float]]:
    """The rows of ``DIR/log.csv`` as dicts (``step`` an int; ``val_loss`` only on evaluation steps)."""
    rows = []
    with open(Path(folder) / LOG, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            rows.append({k: (int(v) if k == "step" else float(v)) for k, v in row.items() if v != ""})
    return rows


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
    prepared = prepare(given, out) if rank == 0 else None
    if world > 1:
        box = [prepared]
        dist.broadcast_object_list(box)  # rank 0 checked and wrote the folder; the others read what it found
        prepared = box[0]
    args, checkpoint, tokenizer_ref, data_info = prepared.args, prepared.checkpoint, prepared.tokenizer, prepared.data
    device = device_for(args["device"], int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    accum = args["grad_accum"]
    if args["batch_size"] % (world * accum):
        raise UsageError(f"--batch-size {args['batch_size']} is not divisible by the {world} processes x --grad-accum "
                         f"{accum}")
    tokenizer = load_tokenizer(out, tokenizer_ref)  # fails early if the tokenizer file is missing or was changed
    config = ModelConfig(**prepared.config)
    lengths = token_lengths(tokenizer, config.vocab_size)  # bytes each id spells: bits per byte
    kind = data_info.get("kind", "text")
    if kind == "text":
        data = TokenData.open(out / TOKENS, data_info["vocab_size"], args["seq_len"], args["batch_size"], args["seed"])
        if len(data.ids) != data_info["n_tokens"]:
            raise ValueError(f"{str(out / TOKENS)!r} holds {len(data.ids)} ids, the run expects "
                             f"{data_info['n_tokens']}")
        task = TextTask(data, lengths, args["eval_windows"])
    else:  # --chat / --dpo: conversations or preference pairs
        task = example_task(args, data_info, out, tokenizer, config, lengths, device)
    steps, start = args["steps"], checkpoint["step"] if checkpoint else 0
    stop = min(given.stop_at or steps, steps)
    model, optimizer, train_config, lora = model_and_optimizer(args, config, checkpoint, device, rank)
    floor = train_config.lr * train_config.min_lr_ratio
    if start >= steps:
        raise UsageError(f"the run in {str(out)!r} already finished ({start} of --steps {steps}); pass a larger "
                         f"--steps to train on: steps after its schedule's end (step {args['schedule_steps']}) train "
                         f"at the schedule's floor, lr {floor:.2e}")
    if stop <= start:
        raise UsageError(f"--stop-at {given.stop_at} is not after the checkpoint's step {start}")

    if rank == 0 and checkpoint is not None:
        truncate_log(out / LOG, start)
    # what the steps run through: under torchrun the model wrapped in DDP (gradients averaged over processes)
    trained = data_parallel(model, device) if world > 1 else model
    shard = batch_shard(args["batch_size"], rank, world)
    best = checkpoint.get("best") if checkpoint else None  # {"step", "val_loss", "bits_per_byte"} of best.pt
    saved_at = start

    def save(step: int, path: str = CHECKPOINT) -> None:
        nonlocal saved_at
        if rank == 0:
            if path == CHECKPOINT and lora is not None and step == steps:  # the end of a LoRA run: a plain model
                merge_lora(model)  # W + (alpha / r) B A
                lora["merged"] = True
            save_run_checkpoint(out / path, model=model, optimizer=optimizer if path == CHECKPOINT else None,
                                step=step, model_config=config, tokenizer=tokenizer_ref, args=args, data=data_info,
                                lora=lora, best=best)  # fmt: skip
        saved_at = step if path == CHECKPOINT else saved_at

    if checkpoint is None:
        save(0)  # a new run is resumable from the start
    elif rank == 0:  # run.json shows the arguments in force (a resume may have changed --steps, --lr...)
        write_run_info(out, {"model_config": prepared.config, "tokenizer": tokenizer_ref, "args": args,
                             "data": data_info})  # fmt: skip
    progress = given.progress if given.progress is not None else sys.stderr.isatty()
    from tqdm.auto import tqdm

    bar = tqdm(total=stop, initial=start, desc="train", disable=not progress or rank != 0, leave=False)
    say = (bar.write if progress else print) if rank == 0 else (lambda message: None)
    n_params = num_parameters(model)
    for line in start_lines(data_info, tokenizer_ref["kind"], config.vocab_size, task, n_params, start, stop, steps,
                            str(device), args["dtype"]):  # fmt: skip
        say(line)
    for note in prepared.notes:
        say(f"{PROG}: {note}")
    if (line := past_schedule_line(start, stop, args["schedule_steps"], floor, out)) is not None:
        say(line)
    if args["init_from"]:
        say(fine_tuning_line(args, model, lora))

    interrupted = threading.Event()
    done, updating, last = start, False, None
    log = open(out / LOG, "a", encoding="utf-8", newline="") if rank == 0 else None
    began = time.perf_counter()
    try:
        with _ctrl_c_sets(interrupted, enabled=world == 1), torch.enable_grad():  # even if called under no_grad
            trained.train()
            for step in range(start, stop):
                if interrupted.is_set():
                    break
                batch = to_device(rows(task.batch(step), shard), device)  # B / world examples
                updating = True  # from here until the step is done the state is half new: no checkpoint
                lr = lr_at(step, train_config)  # past the schedule's end: its floor
                for group in optimizer.param_groups:
                    group["lr"] = lr
                optimizer.zero_grad(set_to_none=True)
                micros = micro_batches(batch, accum)  # B / world / accum examples each
                weights = [task.weight(micro) for micro in micros]  # what each one's mean is over
                # the batch's mean: equal micro-batches weigh 1/accum, others by their scored tokens (--chat)
                equal, shares = len(set(weights)) == 1, [w / sum(weights) for w in weights]
                total = torch.zeros(1 + len(task.columns), device=device)  # the loss, then the task's numbers
                for k, micro in enumerate(micros):
                    # under DDP only the last micro-batch's backward averages the gradients over processes
                    sync = trained.no_sync() if world > 1 and k < accum - 1 else contextlib.nullcontext()
                    with sync:
                        with autocast(device, args["dtype"]):
                            loss, metrics = task.loss(trained, micro)
                        if not torch.isfinite(loss):
                            raise ValueError(divergence_message(loss.item(), step + 1, lr, args["lr"], out, saved_at))
                        (loss / accum if equal else loss * shares[k]).backward()
                    numbers = torch.stack([loss.detach(), *(metrics[c] for c in task.columns)])
                    total += numbers if equal else numbers * shares[k]
                if equal:
                    total /= accum
                grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), train_config.grad_clip or float("inf"))
                optimizer.step()
                if world > 1:
                    dist.all_reduce(total)
                    total /= world  # the mean over processes: the numbers of the whole global batch
                logged, step_metrics = total[0], total[1:].tolist()
                done, updating = step + 1, False
                val = [""] * (1 + len(task.columns))
                if done % args["eval_every"] == 0 or done == steps:  # not at --stop-at: the log must not depend on it
                    score = task.evaluate(model, device, args["dtype"])
                    last = {"step": done, "val_loss": score.loss, "bits_per_byte": score.bits_per_byte,
                            **score.metrics}  # fmt: skip
                    is_best = best is None or score.loss < best["val_loss"]
                    if is_best:
                        best = last
                        save(done, BEST)
                    val = [repr(score.loss), *(repr(score.metrics[c]) for c in task.columns)]
                    say(eval_line(done, steps, logged.item(), score, is_best, dict(zip(task.columns, step_metrics))))
                if log is not None:
                    row = [done, repr(logged.item()), repr(lr), repr(float(grad_norm)), *map(repr, step_metrics), *val]
                    log.write(",".join(map(str, row)) + "\n")
                bar.update(1)
                bar.set_postfix(loss=f"{logged.item():.3f}", val=f"{last['val_loss']:.3f}" if last else "-")
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
    for line in summary_lines(out, start, done, steps, elapsed, n_params, last, best):
        say(line)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``companion-train`` / ``python -m companion.cli.train``; returns the exit code."""
    def body(a: Sequence[str] | None) -> int:
        given = parser().parse_args(a)
        with threads(given.threads):
            return _train(given)

    return run_main(PROG, body, argv)


if __name__ == "__main__":
    sys.exit(main())

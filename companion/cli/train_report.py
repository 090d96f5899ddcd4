"""What ``companion-train`` says: the run it starts, each evaluation, the summary at the end, and what to do
when the loss diverges. Pure functions from numbers to lines, so the words are in one place and testable.

The summary names the model's size (parameters), how long the steps took, and the validation loss three ways
(nats per token, perplexity, bits per byte; ``companion.cli.eval.Score``) for the last evaluation and for the
best one, the checkpoint ``DIR/best.pt`` keeps; a ``--dpo`` run's lines give its loss, reward margin, accuracy
and KL instead (:mod:`companion.cli.train_tasks`). A LoRA run says that its trainable parameters are the adapters.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from torch import nn

from companion.cli.run_folder import BEST, CHECKPOINT

__all__ = ["PROG", "start_lines", "fine_tuning_line", "past_schedule_line", "eval_line", "summary_lines",
           "divergence_message"]  # fmt: skip

PROG = "companion-train"


def _millions(n: int) -> str:
    return f"{n / 1e6:.2f} M" if n >= 1_000_000 else f"{n:,}"


def start_lines(data: dict[str, Any], kind: str, vocab: int, task: Any, n_params: int, start: int, stop: int,
                steps: int, device: str, dtype: str) -> list[str]:  # fmt: skip
    """The first line of a run: its data, its model, the steps of this invocation and where they run."""
    if data.get("kind", "text") == "text":
        what = f"{data['n_tokens']:,} tokens ({kind}, vocabulary {vocab:,}; train {task.n_train:,} / validation " \
               f"{task.n_val:,})"
    else:
        what = f"{data['n_examples']:,} {task.unit} ({data['n_tokens']:,} tokens, {kind}, vocabulary {vocab:,}; " \
               f"train {task.n_train:,} / validation {task.n_val:,})"
    return [f"{PROG}: {what}; {_millions(n_params)} parameters; steps {start + 1}..{stop} of {steps} on {device} "
            f"({dtype})"]


def fine_tuning_line(args: dict[str, Any], model: nn.Module, lora: dict[str, Any] | None) -> str:
    """What a fine-tuning run trains: every weight, or only the LoRA adapters (named), and how many numbers."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    what = (" on chats (assistant turns only)" if args.get("chat")
            else f" by DPO (β = {args['beta']:g})" if args.get("dpo") else "")  # fmt: skip
    if lora is None:
        return (f"{PROG}: fine-tuning {str(args['init_from'])!r}{what}: every weight ({trainable:,} trainable "
                "parameters)")
    return (f"{PROG}: fine-tuning {str(args['init_from'])!r}{what}: {trainable:,} trainable parameters, all of them "
            f"LoRA adapters (lora_A, lora_B; rank {lora['r']}, alpha {lora['alpha']:g}) on "
            f"{', '.join(lora['targets'])}; the model's own {frozen:,} weights are frozen, and the adapters are "
            "merged into them at the last step")


def past_schedule_line(start: int, stop: int, schedule_steps: int, floor: float, folder: Path) -> str | None:
    """Said when steps of this invocation come after the end of the run's cosine schedule (``--resume`` with a
    larger ``--steps``): they train at the schedule's floor, and what to do for a longer cosine instead."""
    if stop <= schedule_steps:
        return None
    first = max(start, schedule_steps) + 1
    return (f"{PROG}: steps {first}..{stop} come after the end of the run's cosine schedule (step {schedule_steps}), "
            f"so they train at its floor, lr {floor:.2e} (--lr x --min-lr-ratio); the schedule is not stretched. "
            f"For a cosine over all {stop} steps, train a new run with --steps {stop} and another --out; for a new "
            f"warm-up and cosine from these weights, --init-from {str(folder)!r} --out NEW")


def _numbers(metrics: dict[str, float]) -> str:
    """DPO's numbers in words: reward margin, accuracy, KL."""
    return (f"reward margin {metrics['reward_margin']:.4f}, accuracy {metrics['accuracy']:.0%}, KL "
            f"{metrics['kl']:.4f}")


def eval_line(step: int, steps: int, train_loss: float, score: Any, best: bool,
              train_metrics: dict[str, float] | None = None) -> str:  # fmt: skip
    """One evaluation: the step, the batch loss, and the validation loss (per token and per byte; for DPO, the
    reward margin, accuracy and KL of the batch and of the held-out pairs)."""
    mark = f" (lowest so far: {BEST})" if best else ""
    if score.bits_per_byte is None:  # DPO
        return (f"step {step}/{steps}: train loss {train_loss:.4f}, {_numbers(train_metrics or {})}; val loss "
                f"{score.loss:.4f}, {_numbers(score.metrics)}{mark}")
    return (f"step {step}/{steps}: train loss {train_loss:.4f}, val loss {score.loss:.4f} "
            f"({score.bits_per_byte:.3f} bits per byte){mark}")


def _quality(record: dict[str, Any]) -> str:
    if record.get("bits_per_byte") is None:  # DPO
        return f"val DPO loss {record['val_loss']:.4f}, {_numbers(record)}"
    return (f"val loss {record['val_loss']:.4f} nats/token, perplexity {math.exp(record['val_loss']):.2f}, "
            f"{record['bits_per_byte']:.3f} bits per byte")


def summary_lines(folder: Path, start: int, done: int, steps: int, seconds: float, n_params: int,
                  last: dict[str, Any] | None, best: dict[str, Any] | None) -> list[str]:  # fmt: skip
    """The end of a run: time, size, the last and the best validation numbers, and which file holds which.

    ``last`` / ``best``: ``{"step", "val_loss", "bits_per_byte"}`` (``last`` None if this invocation did not
    evaluate; ``best`` None before the run's first evaluation).
    """
    ms = 1000 * seconds / max(1, done - start)
    lines = [f"{PROG}: steps {start + 1}..{done} in {seconds:.1f} s ({ms:.0f} ms/step); model of "
             f"{_millions(n_params)} parameters"]
    latest = f"latest checkpoint {str(folder / CHECKPOINT)!r} (step {done})"
    if last is not None and last["step"] == done:
        latest += f": {_quality(last)}"
    lines.append(f"  {latest}")
    if best is not None and best["step"] == done:
        lines.append(f"  best checkpoint {str(folder / BEST)!r}: the same step, the lowest validation loss so far")
    elif best is not None:
        lines.append(f"  best checkpoint {str(folder / BEST)!r} (step {best['step']}): {_quality(best)}; sample it "
                     f"with companion-sample {str(folder)!r} --checkpoint best")
    if done < steps:
        lines.append(f"{PROG}: stopped at step {done} of {steps}; continue with --resume")
    return lines


def divergence_message(loss: float, step: int, lr: float, peak_lr: float, folder: Path, saved_step: int) -> str:
    """The loss is no longer a number: say where, what was kept, and the two honest ways on."""
    lower = f"{peak_lr / 3:.0e}".replace("e-0", "e-")
    return (f"the loss became {loss} at step {step} (learning rate {lr:.2e}): training diverged, nothing after the "
            f"checkpoint of step {saved_step} was kept. Continue from that checkpoint with a lower peak learning "
            f"rate, e.g. companion-train --out {str(folder)!r} --resume --lr {lower}, or start again in a new --out "
            "with a lower --lr (or a longer --warmup)")

"""``companion-eval DIR FILE``: how well a trained run predicts another text: loss, perplexity, bits per byte.

    companion-eval run other.txt                      # the run's latest checkpoint
    companion-eval run other.txt --checkpoint best    # the one of its lowest validation loss

FILE is read as ``companion-train`` reads its text (UTF-8, refusing what is not text) and encoded with the run's
tokenizer, which must be able to encode it (a character tokenizer knows only the characters it was trained on).
The ids are cut into consecutive windows of the run's ``--seq-len`` targets, each window reading its own tokens
only, as the run's validation does; the last, shorter window scores what is left, so every token after the first
is predicted exactly once. Three numbers, chapter 11's:

- the **loss**: mean cross-entropy in nats per token;
- the **perplexity**: ``exp(loss)``;
- **bits per byte**: the whole text's cross-entropy in bits, divided by the UTF-8 bytes the predicted tokens
  spell, ``loss * n_tokens / (n_bytes * ln 2)``; the only one of the three that compares models whose
  tokenizers differ.

``score_windows`` computes them for any list of windows; ``companion-train`` uses it for its validation loss,
so the two commands agree (tests/test_cli.py: ``companion-eval`` on the validation text gives the run's own
last validation loss).
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import plural
from companion.cli import EXIT_OK, ArgumentParser, encode_for, positive_int, run_main
from companion.cli.machine import DEVICES, DTYPES, autocast, device_for, threads
from companion.cli.run_folder import CHECKPOINTS, load_run
from companion.data import read_text_file, token_bytes

__all__ = ["Score", "score_windows", "token_lengths", "text_windows", "main"]

PROG = "companion-eval"


@dataclass(frozen=True)
class Score:
    """A model's cross-entropy on some text, three ways."""

    nats: float  # the summed cross-entropy of every predicted token, in nats
    n_tokens: int  # tokens predicted
    n_bytes: int  # UTF-8 bytes those tokens spell

    @property
    def loss(self) -> float:
        """Mean cross-entropy, nats per token."""
        return self.nats / self.n_tokens

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    @property
    def bits_per_byte(self) -> float:
        return self.nats / self.n_bytes / math.log(2)


def token_lengths(tokenizer: object, vocab_size: int) -> Tensor:
    """The number of UTF-8 bytes each id spells, as a (V,) tensor for counting the bytes of a batch."""
    pieces = token_bytes(tokenizer)
    lengths = [len(pieces[i] or b"") if i < len(pieces) else 0 for i in range(vocab_size)]
    return torch.tensor(lengths, dtype=torch.long)


@torch.no_grad()
def score_windows(model: nn.Module, windows: Sequence[Tensor], lengths: Tensor, device: torch.device,
                  dtype: str = "float32") -> Score:  # fmt: skip
    """Sum the next-token cross-entropy over ``windows`` (each (B, T + 1): T inputs, T targets), in eval mode.

    Shapes: each window (B, T + 1) int64; lengths (V,) bytes per id.
    """
    was_training = model.training
    model.eval()
    nats, n_tokens, n_bytes = 0.0, 0, 0
    try:
        for batch in windows:
            batch = batch.to(device)
            with autocast(device, dtype):
                logits = model(batch[:, :-1])  # (B, T, V)
            targets = batch[:, 1:]  # (B, T)
            # float32 for the log-softmax, whatever the autocast dtype of the logits
            nats += F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), reduction="sum").item()
            n_tokens += targets.numel()
            n_bytes += int(lengths.to(device)[targets].sum())
    finally:
        model.train(was_training)
    return Score(nats, n_tokens, n_bytes)


def text_windows(ids: Tensor, seq_len: int, batch_size: int) -> list[Tensor]:
    """Consecutive windows of ``seq_len`` targets (``seq_len + 1`` ids, one shared with the next window), batched;
    the remainder as one last, shorter window. Every id after the first is a target once.

    Shapes: ids (N,) -> a list of (B, seq_len + 1) tensors, then (1, r + 1) for the remainder r.
    """
    n = len(ids)
    if n < 2:
        raise ValueError(f"the text encodes to {plural(n, 'token')}; expected at least 2 (one to read, one to "
                         "predict)")
    full = (n - 1) // seq_len
    rows = [ids[k * seq_len : k * seq_len + seq_len + 1] for k in range(full)]
    out = [torch.stack(rows[i : i + batch_size]) for i in range(0, full, batch_size)]
    if full * seq_len < n - 1:
        out.append(ids[full * seq_len :][None, :])  # (1, r + 1)
    return out


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Score the model trained in DIR by companion-train on another text: "
                       "loss (nats per token), perplexity and bits per byte.")
    p.add_argument("folder", metavar="DIR", help="a run folder written by companion-train")
    p.add_argument("text_file", metavar="FILE", help="UTF-8 text to score the model on")
    p.add_argument("--checkpoint", choices=tuple(CHECKPOINTS), default="latest",
                   help="latest: the last checkpoint (default); best: the lowest validation loss (best.pt)")
    p.add_argument("--batch-size", type=positive_int, default=16, help="windows per forward pass (default 16)")
    p.add_argument("--device", choices=DEVICES, default="auto", help="where to run (default auto: a GPU if any)")
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="float32 (default) or bfloat16 autocast")
    p.add_argument("--threads", type=positive_int, metavar="N", help="CPU threads torch may use")
    return p


def _eval(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    device = device_for(args.device)
    text = read_text_file(args.text_file)
    run = load_run(args.folder, device, checkpoint=args.checkpoint)
    ids = encode_for(run.tokenizer, text, repr(args.text_file))
    windows = text_windows(torch.tensor(ids, dtype=torch.long), run.checkpoint["args"]["seq_len"], args.batch_size)
    lengths = token_lengths(run.tokenizer, run.model.config.vocab_size)
    with threads(args.threads):
        score = score_windows(run.model, windows, lengths, device, args.dtype)
    print(f"{PROG}: {str(Path(args.folder))!r} ({args.checkpoint} checkpoint, step {run.checkpoint['step']}) on "
          f"{str(args.text_file)!r}: {plural(score.n_tokens, 'token')} predicted, spelling "
          f"{plural(score.n_bytes, 'byte')}")
    print(f"loss {score.loss:.4f} nats/token, perplexity {score.perplexity:.2f}, {score.bits_per_byte:.3f} bits "
          "per byte")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``companion-eval`` / ``python -m companion.cli.eval``; returns the exit code."""
    return run_main(PROG, _eval, argv)


if __name__ == "__main__":
    sys.exit(main())

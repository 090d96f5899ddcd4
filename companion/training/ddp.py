"""The command line ``python -m companion.training``: a tiny GPT, optionally data-parallel under ``torchrun``.

    python -m companion.training --steps 200                                  # one process
    torchrun --nproc_per_node=2 -m companion.training --steps 200             # two, with DDP

It trains on the course's character corpus (``--data chars``) or on a Markov source (``--data markov``).
Under ``torchrun`` each of the N processes takes 1/N of the same global batch and
``DistributedDataParallel`` (gloo on CPU, NCCL on GPU) averages their gradients, so N processes take the
same steps as one process on the whole batch (tests/test_training.py checks it).

Every argument is checked before any work starts (sizes >= 1, ``--seq-len`` shorter than the corpus,
``--d-model`` divisible by ``--n-heads``, ``--batch-size`` divisible by the number of processes, ``--lr`` > 0,
``--warmup`` >= 0, the ``--save`` folder existing and writable): a bad one prints ONE line,
``python -m companion.training: error: ...``, on stderr and exits with status 2 (as argparse does), with no
traceback and before a minute of training is lost.
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import NoReturn

import torch
from torch import Tensor, nn

from companion._files import check_writable_file
from companion.training.checkpoints import save_checkpoint
from companion.training.loop import train
from companion.training.losses import lm_loss
from companion.training.schedule import TrainConfig

__all__ = ["batch_shard", "data_parallel", "main", "process_group_backend"]

PROG = "python -m companion.training"


# --- the data-parallel pieces, shared with companion-train (companion.cli.train) -------------------------


def process_group_backend() -> str:
    """The ``torch.distributed`` backend: NCCL when a CUDA GPU is available, gloo (CPUs) otherwise."""
    return "nccl" if torch.cuda.is_available() else "gloo"


def batch_shard(batch_size: int, rank: int, world: int) -> slice:
    """The rows of a global batch of ``batch_size`` that process ``rank`` of ``world`` trains on (1/world each).

    Every process draws the same global batch (same seed, same step) and keeps its own rows, so N
    processes together take exactly the step one process would take on the whole batch.
    """
    return slice(rank * batch_size // world, (rank + 1) * batch_size // world)


def data_parallel(model: nn.Module, device: torch.device) -> nn.parallel.DistributedDataParallel:
    """Wrap ``model`` in ``DistributedDataParallel`` (gradients averaged over processes after backward)."""
    device_ids = [device.index] if device.type == "cuda" else None
    return nn.parallel.DistributedDataParallel(model, device_ids=device_ids)


class _OneLineParser(argparse.ArgumentParser):
    """``parser.error`` prints one line (no usage block) on stderr and exits with status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see --help)\n")


def _parser() -> _OneLineParser:
    p = _OneLineParser(
        prog=PROG,
        description="Train a tiny GPT on the course's character corpus or on a Markov source. Run it under "
        "`torchrun --nproc_per_node=N -m companion.training ...` for data parallelism (DDP).",
    )
    p.add_argument("--data", choices=("chars", "markov"), default="chars", help="training text (default: chars)")
    p.add_argument("--steps", type=int, default=200, help="optimiser steps")
    p.add_argument("--batch-size", type=int, default=16, help="GLOBAL batch, split evenly over the processes")
    p.add_argument("--seq-len", type=int, default=64, help="tokens per training sequence")
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--n-layers", type=int, default=2)
    p.add_argument("--n-heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--warmup", type=int, default=20, help="warm-up steps")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--save", default=None, help="write final weights here (rank 0); a path containing "
                   "'{rank}' is written by every process, e.g. out/rank{rank}.pt")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return p


@dataclass
class _Run:
    """Everything ``main`` needs, built and checked before any process group or model exists."""

    world: int
    rank: int
    local_rank: int
    vocab_size: int
    global_batch: Callable[[torch.Generator], Tensor]  # -> (batch_size, seq_len + 1)
    save_path: str | None


def _env_int(parser: _OneLineParser, name: str, default: str) -> int:
    value = os.environ.get(name, default)
    try:
        return int(value)
    except ValueError:
        parser.error(f"the environment variable {name}={value!r} is not an integer")


def _prepare(parser: _OneLineParser, args: argparse.Namespace) -> _Run:
    """Check every argument (one-line error, exit 2, on the first bad one) and build the data."""
    from companion.data import char_corpus, markov_source

    world, rank = _env_int(parser, "WORLD_SIZE", "1"), _env_int(parser, "RANK", "0")
    local_rank = _env_int(parser, "LOCAL_RANK", "0")
    if world < 1 or not 0 <= rank < world:
        parser.error(f"RANK={rank} and WORLD_SIZE={world} are inconsistent; expected 0 <= RANK < WORLD_SIZE")
    for flag in ("steps", "batch_size", "seq_len", "d_model", "n_layers", "n_heads"):
        value = getattr(args, flag)
        if value < 1:
            parser.error(f"--{flag.replace('_', '-')}={value} is invalid; expected an integer >= 1")
    if args.warmup < 0:
        parser.error(f"--warmup={args.warmup} is invalid; expected an integer >= 0")
    if args.seed < 0:
        parser.error(f"--seed={args.seed} is invalid; expected an integer >= 0")
    if not (math.isfinite(args.lr) and args.lr > 0):
        parser.error(f"--lr={args.lr} is invalid; expected a finite number > 0")
    if args.d_model % args.n_heads:
        parser.error(f"--d-model={args.d_model} is not divisible by --n-heads={args.n_heads}")
    if args.batch_size % world:
        parser.error(f"--batch-size={args.batch_size} is not divisible by the number of processes {world}")

    save_path = None
    if args.save and ("{rank}" in args.save or rank == 0):
        try:
            save_path = args.save.format(rank=rank)
        except (KeyError, IndexError, ValueError) as err:
            parser.error(f"--save={args.save!r} is not a valid path template ({err!r}); the only field is {{rank}}")
        try:
            check_writable_file(save_path, "--save")
        except OSError as err:
            parser.error(str(err))

    if args.data == "chars":
        text = char_corpus()
        if args.seq_len + 1 >= len(text):
            parser.error(f"--seq-len={args.seq_len} is too long for the character corpus of {len(text)} "
                         f"characters; expected at most {len(text) - 2}")
        chars = sorted(set(text))
        ids = torch.tensor([chars.index(c) for c in text])
        vocab_size = len(chars)

        def global_batch(g: torch.Generator) -> Tensor:
            starts = torch.randint(len(ids) - args.seq_len - 1, (args.batch_size,), generator=g)
            return torch.stack([ids[s : s + args.seq_len + 1] for s in starts.tolist()])  # (B, T + 1)
    else:
        source = markov_source(vocab_size=16, order=2, seed=args.seed)
        vocab_size = source.vocab_size

        def global_batch(g: torch.Generator) -> Tensor:
            return source.sample_batch(args.batch_size, args.seq_len + 1, g)  # (B, T + 1)

    return _Run(world, rank, local_rank, vocab_size, global_batch, save_path)


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    """Entry point of ``python -m companion.training``; returns the history (of this process's shard).

    A bad argument raises ``SystemExit(2)`` after one line on stderr, before anything is trained.
    """
    import torch.distributed as dist

    from companion.models import GPT, ModelConfig

    parser = _parser()
    args = parser.parse_args(argv)
    run = _prepare(parser, args)
    try:
        model_config = ModelConfig(
            vocab_size=run.vocab_size, d_model=args.d_model, n_heads=args.n_heads, n_layers=args.n_layers,
            d_ff=4 * args.d_model, max_seq_len=args.seq_len, dropout=0.0,
        )  # fmt: skip
        config = TrainConfig(steps=args.steps, lr=args.lr, warmup_steps=args.warmup)
    except (TypeError, ValueError) as err:
        parser.error(str(err))

    device = torch.device("cpu")
    if run.world > 1:
        dist.init_process_group(process_group_backend())  # NCCL for GPUs, gloo for CPUs
        if torch.cuda.is_available():
            device = torch.device("cuda", run.local_rank)
            torch.cuda.set_device(device)
    shard = batch_shard(args.batch_size, run.rank, run.world)

    def get_batch(step: int) -> Tensor:
        # every process draws the same global batch (same seed) and keeps its own rows
        g = torch.Generator().manual_seed(args.seed * 100_003 + step)
        return run.global_batch(g)[shard].to(device)  # (B / world, T + 1)

    torch.manual_seed(args.seed)  # identical initial weights everywhere (DDP also broadcasts rank 0's)
    model: nn.Module = GPT(model_config).to(device)
    if run.world > 1:
        model = data_parallel(model, device)
    start = time.perf_counter()
    history = train(model, get_batch, lm_loss, config, progress=not args.no_progress and run.rank == 0)
    if run.save_path is not None:
        save_checkpoint(run.save_path, model, None, model_config, args.steps)
    if run.rank == 0:
        print(f"{run.world} process(es), {args.steps} steps in {time.perf_counter() - start:.1f} s; "
              f"last loss (rank 0's shard) {history[-1]['loss']:.4f}")
    if run.world > 1:
        dist.destroy_process_group()
    return history


if __name__ == "__main__":
    main()

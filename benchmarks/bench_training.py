"""Training speed and quality: companion's GPT and training loop against a plain PyTorch reference loop.

The recipe is nanoGPT's CPU one (karpathy/nanoGPT, README "I only have a macbook"): a character-level
model with 4 layers, 4 heads, width 128, context 64, batch 12, AdamW (lr 1e-3, beta2 0.99, weight decay
0.1 on matrices), 100 warm-up steps then cosine decay to 1e-4, gradient clipping at 1, no dropout, 2000
steps, on about 1 MB of text.

* ``companion``: ``companion.models.GPT`` with the configuration ``companion-train`` builds
  (``ModelConfig.gpt2_small`` resized, with the fast paths ``use_sdpa`` and ``fused_norm``), trained by
  ``companion.training.train`` with ``lm_loss`` and ``make_optimizer`` -- the building blocks the command
  line uses; ``--explicit`` measures the explicit attention and norms the chapters read instead;
* ``reference``: a nanoGPT-style model and loop written below in plain PyTorch (``nn.LayerNorm``, one
  fused Q/K/V projection, ``F.scaled_dot_product_attention(is_causal=True)``, a hand-written loop).

Both see the same batches (``companion.data.TokenData``, which depends only on the seed and the step)
and are scored on the same validation windows after training (not timed). Printed: both validation
losses (they should agree within 0.03: the same architecture and recipe, different random initial
weights) and the wall-time ratio companion / reference, measured in the same run (target <= 1.0x).
Absolute times depend on the machine and on whatever else runs on it; only the ratio is reported.

The text: ``--text FILE``, or by default about 1 MB generated from the course's bundled corpus by an
order-4 character Markov chain (deterministic; nothing is downloaded).

    .venv/bin/python benchmarks/bench_training.py --threads 1      # 2000 steps (about 10 minutes here)
    .venv/bin/python benchmarks/bench_training.py --steps 200      # a quick check

On a machine shared with other work, ``--threads 1`` gives steadier ratios: two threads that wait for each
other at every small operation slow down a lot as soon as another program takes one of the cores.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections import Counter, defaultdict

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion.data import TokenData, char_corpus
from companion.models import GPT, ModelConfig
from companion.training import TrainConfig, lm_loss, make_optimizer, train

# nanoGPT's CPU recipe
N_LAYERS, N_HEADS, D_MODEL, SEQ_LEN, BATCH = 4, 4, 128, 64, 12
LR, MIN_LR, WARMUP, WEIGHT_DECAY, BETAS, GRAD_CLIP = 1e-3, 1e-4, 100, 0.1, (0.9, 0.99), 1.0


def markov_text(n_chars: int, order: int = 4, seed: int = 0) -> str:
    """``n_chars`` characters from an order-``order`` character Markov chain fitted on the bundled corpus."""
    corpus = char_corpus()
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for i in range(len(corpus) - order):
        counts[corpus[i : i + order]][corpus[i + order]] += 1
    table = {ctx: (list(c), list(c.values())) for ctx, c in counts.items()}
    rng = random.Random(seed)
    out, ctx = list(corpus[:order]), corpus[:order]
    while len(out) < n_chars:
        if ctx not in table:  # the corpus's last context has no successor: start again
            ctx = corpus[:order]
        chars, weights = table[ctx]
        nxt = rng.choices(chars, weights)[0]
        out.append(nxt)
        ctx = ctx[1:] + nxt
    return "".join(out)


# --- the reference: nanoGPT's model and loop, in plain PyTorch ------------------------------------------


class Block(nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.h = h
        self.ln_1, self.ln_2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.c_attn, self.c_proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(approximate="tanh"), nn.Linear(4 * d, d))

    def forward(self, x: Tensor) -> Tensor:
        b, t, d = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
        q, k, v = (z.view(b, t, self.h, d // self.h).transpose(1, 2) for z in (q, k, v))  # (B, H, T, D_h)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(b, t, d)
        x = x + self.c_proj(y)
        return x + self.mlp(self.ln_2(x))


class ReferenceGPT(nn.Module):
    def __init__(self, vocab_size: int) -> None:
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab_size, D_MODEL), nn.Embedding(SEQ_LEN, D_MODEL)
        self.blocks = nn.ModuleList(Block(D_MODEL, N_HEADS) for _ in range(N_LAYERS))
        self.ln_f = nn.LayerNorm(D_MODEL)
        self.lm_head = nn.Linear(D_MODEL, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("c_proj.weight") or name.endswith("mlp.2.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * N_LAYERS))
            elif p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx: Tensor) -> Tensor:
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def reference_lr(step: int, steps: int) -> float:
    """nanoGPT's ``get_lr``: linear warm-up, then cosine from LR down to MIN_LR at the last step."""
    if step < WARMUP:
        return LR * (step + 1) / WARMUP
    ratio = min(1.0, (step - WARMUP) / max(1, steps - 1 - WARMUP))
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def reference_train(model: nn.Module, data: TokenData, steps: int) -> None:
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay,
                             "weight_decay": 0.0}], lr=LR, betas=BETAS)  # fmt: skip
    model.train()
    for step in range(steps):
        for group in opt.param_groups:
            group["lr"] = reference_lr(step, steps)
        batch = data.train_batch(step)
        logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
    model.eval()


@torch.no_grad()
def val_loss(model: nn.Module, batches: list[Tensor]) -> float:
    """Mean next-token cross-entropy over the validation windows (the same for both models)."""
    model.eval()
    total = sum(lm_loss(model, b).item() * b.size(0) for b in batches)
    return total / sum(b.size(0) for b in batches)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000, help="optimiser steps (nanoGPT's recipe: 2000)")
    parser.add_argument("--text", default=None, help="train on this UTF-8 file instead of the generated text")
    parser.add_argument("--chars", type=int, default=1_000_000, help="length of the generated text")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--explicit", action="store_true", help="companion's GPT with the explicit attention and "
                        "norms (use_sdpa=False, fused_norm=False) instead of companion-train's fast paths")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    text = open(args.text, encoding="utf-8").read() if args.text else markov_text(args.chars, seed=args.seed)
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
    data = TokenData(ids, SEQ_LEN, BATCH, seed=args.seed)
    val_batches = data.val_batches(max_windows=480)  # 40 batches of 12 windows, as nanoGPT's eval
    print(f"{len(text):,} characters, vocabulary {len(chars)}; {args.steps} steps of {BATCH} x {SEQ_LEN}; "
          f"threads={torch.get_num_threads()}, torch {torch.__version__}; companion: "
          f"{'explicit attention and norms' if args.explicit else 'fast paths, as companion-train'}")  # fmt: skip

    torch.manual_seed(args.seed)
    config = ModelConfig.gpt2_small(vocab_size=len(chars), d_model=D_MODEL, n_heads=N_HEADS, n_layers=N_LAYERS,
                                    d_ff=4 * D_MODEL, max_seq_len=SEQ_LEN, dropout=0.0, use_sdpa=not args.explicit,
                                    fused_norm=not args.explicit)  # fmt: skip
    ours = GPT(config)
    train_config = TrainConfig(steps=args.steps, lr=LR, min_lr_ratio=MIN_LR / LR, warmup_steps=WARMUP,
                               weight_decay=WEIGHT_DECAY, betas=BETAS, grad_clip=GRAD_CLIP)  # fmt: skip
    torch.manual_seed(args.seed)
    reference = ReferenceGPT(len(chars))
    n_ours = sum(p.numel() for p in ours.parameters())
    n_ref = sum(p.numel() for p in reference.parameters())
    if n_ours != n_ref:
        raise SystemExit(f"the two models differ in size ({n_ours:,} vs {n_ref:,} parameters)")

    times, cpu_times = {}, {}
    start, cpu_start = time.perf_counter(), time.process_time()
    reference_train(reference, data, args.steps)
    times["reference"], cpu_times["reference"] = time.perf_counter() - start, time.process_time() - cpu_start
    start, cpu_start = time.perf_counter(), time.process_time()
    train(ours, data.train_batch, lm_loss, train_config, optimizer=make_optimizer(ours, train_config),
          progress=False)  # fmt: skip
    times["companion"], cpu_times["companion"] = time.perf_counter() - start, time.process_time() - cpu_start

    losses = {"reference": val_loss(reference, val_batches), "companion": val_loss(ours, val_batches)}
    gap = losses["companion"] - losses["reference"]
    ratio = times["companion"] / times["reference"]
    print(f"{n_ours:,} parameters each")
    for name in ("reference", "companion"):
        print(f"{name:>10}: validation loss {losses[name]:.4f}")
    print(f"validation loss difference {gap:+.4f} (target within +-0.03: {'ok' if abs(gap) <= 0.03 else 'MISSED'})")
    print(f"wall time companion / reference: {ratio:.2f}x (target <= 1.0x: {'ok' if ratio <= 1.0 else 'MISSED'})")
    # The two runs follow each other: on a shared machine the load may change in between. The processor time
    # of this process is less sensitive to other programs (with --threads 1 it is close to the wall time).
    print(f"processor time companion / reference: {cpu_times['companion'] / cpu_times['reference']:.2f}x")


if __name__ == "__main__":
    main()

"""The scaling-law experiment of chapter 10: a ladder of small GPTs trained on a source of known entropy.

``scaling_sweep(widths)`` trains one 2-layer GPT per width on a ``companion.data.MarkovSource`` (whose exact
entropy rate is the irreducible loss E of a scaling law) and returns ``(N, held-out loss)`` pairs for
``companion.scaling.fit_power_law``. Checked in tests/test_scaling.py: every loss sits above the entropy rate,
a wider model does better, and ``fused=True`` gives the plain modules' losses up to float rounding.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from companion._checks import check_bool, check_positive_int
from companion.data import MarkovSource, markov_source
from companion.models import GPT, ModelConfig
from companion.scaling import count_parameters
from companion.training.loop import train
from companion.training.losses import lm_loss
from companion.training.schedule import TrainConfig

__all__ = ["scaling_sweep"]


def scaling_sweep(
    widths: Sequence[int],
    *,
    steps: int = 600,
    source: MarkovSource | None = None,
    n_layers: int = 2,
    head_dim: int = 16,
    seq_len: int = 32,
    batch_size: int = 64,
    lr: float = 1e-2,
    seed: int = 0,
    eval_sequences: int = 256,
    progress: bool = False,
    fused: bool = False,
) -> list[tuple[int, float]]:
    """Train one small GPT per width in ``widths`` on ``source`` and return ``(N, held-out loss)`` pairs.

    N is the non-embedding parameter count (``count_parameters(..., embeddings=False)``). ``source`` is a
    ``companion.data.MarkovSource`` (default ``markov_source(16, 2, seed)``); the loss is measured on fresh
    sequences, only at positions that see the chain's full context, so it cannot go below
    ``source.entropy_rate``. Every model sees the same batches (same seed). ``fused=True`` builds the models
    with ``ModelConfig.use_sdpa`` and ``fused_norm`` (torch's fused attention and one-kernel norms): the same
    computation up to float rounding, with fewer kernels per step (a small model's time goes mostly to
    launching kernels; chapter 10's sweep took about 8 % less CPU time).

    Example (defaults, 1 CPU thread, about a minute): widths 8, 16, 32, 64 on ``markov_source(16, 2)``
    (entropy rate 2.109 nats) gave losses 2.713, 2.503, 2.191, 2.138 for N = 1,760 … 100,096.
    """
    check_bool("fused", fused)
    source = source if source is not None else markov_source(16, 2, seed)
    held_out = source.sample_batch(eval_sequences, seq_len + 1, torch.Generator().manual_seed(seed + 1))
    results = []
    for width in widths:
        check_positive_int("width", width)
        config = ModelConfig(
            vocab_size=source.vocab_size, d_model=width, n_heads=max(1, width // head_dim), n_layers=n_layers,
            d_ff=4 * width, max_seq_len=seq_len, dropout=0.0, use_sdpa=fused, fused_norm=fused,
        )  # fmt: skip
        torch.manual_seed(seed)
        model = GPT(config)

        def get_batch(step: int) -> torch.Tensor:
            return source.sample_batch(batch_size, seq_len + 1, torch.Generator().manual_seed(seed * 100_003 + step))

        train(model, get_batch, lm_loss, TrainConfig(steps=steps, lr=lr, warmup_steps=max(1, steps // 10)),
              progress=progress)
        with torch.no_grad():
            logits = model(held_out[:, :-1])[:, source.order - 1 :]  # (B, T - k + 1, V): full-context positions
            targets = held_out[:, source.order :]  # (B, T - k + 1)
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        results.append((count_parameters(config, "gpt", embeddings=False), float(loss)))
    return results

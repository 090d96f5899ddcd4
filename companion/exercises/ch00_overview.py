"""Chapter 0 (the big picture) checks: the cost of attention against an RNN, the tensor shapes of the
pipeline, what runs once and what runs per token, and how many sub-layers the 2017 model stacks.

References: ``torch.utils.flop_counter.FlopCounterMode`` counts the FLOPs of the chapter's two functions (an
``nn.RNNCell`` loop and one attention layer, projections included); :class:`companion.models.Transformer` gives
the shapes and the sub-layer count (one LayerNorm per post-norm sub-layer).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from companion.exercises._runner import Case, Check, choice_check, seeded, value_check

CHAPTER = "00_overview"

# ------------------------------------------------------------------------------------- FLOPs, RNN vs attention

FLOP_B, FLOP_T, FLOP_D = 1, 1024, 64  # the configuration of the exercise


def _flop_ratio() -> float:
    """FLOPs of one attention layer (projections and core) over those of the RNN loop, both counted by
    PyTorch's FLOP counter."""
    from torch.utils.flop_counter import FlopCounterMode

    x = torch.randn(FLOP_B, FLOP_T, FLOP_D, generator=seeded(0))
    with torch.random.fork_rng(devices=[]):  # the cell's random init must not move the reader's global RNG
        cell = nn.RNNCell(FLOP_D, FLOP_D)

    def rnn(x: torch.Tensor) -> torch.Tensor:
        h = torch.zeros(FLOP_B, FLOP_D)
        for t in range(FLOP_T):
            h = cell(x[:, t], h)
        return h

    w = {name: torch.randn(FLOP_D, FLOP_D, generator=seeded(1)) for name in "qkvo"}  # W_Q, W_K, W_V, W_O

    def attention(x: torch.Tensor) -> torch.Tensor:
        q, k, v = x @ w["q"], x @ w["k"], x @ w["v"]  # (B, T, D) each
        scores = q @ k.transpose(-2, -1) / FLOP_D**0.5  # (B, T, T)
        return (torch.softmax(scores, dim=-1) @ v) @ w["o"]  # (B, T, D)

    counts = []
    with torch.no_grad():
        for fn in (attention, rnn):
            with FlopCounterMode(display=False) as counter:
                fn(x)
            counts.append(counter.get_total_flops())
    return counts[0] / counts[1]


ATTENTION_RNN_FLOP_RATIO = value_check(
    "attention_rnn_flop_ratio",
    _flop_ratio,
    description=f"FLOPs of attention_forward / FLOPs of rnn_forward at B={FLOP_B}, T={FLOP_T}, D={FLOP_D}",
    hint="attention: four (D, D) projections of T tokens, 4·(2·B·T·D·D), plus its core, two (T, D) x (D, T)-sized "
    "products, 2·(2·B·T·T·D); RNN: T steps of two (B, D) x (D, D) products, T·(2·B·2·D·D). Divide, and most "
    "factors cancel.",
    signature="a number (attention FLOPs divided by RNN FLOPs)",
    mistakes={
        16: "that is the attention core (QKᵀ and AV) alone, T / D; the layer also pays for its four projections "
        "W_Q, W_K, W_V, W_O, which add 2.",
        6: "that is the chapter's ratio at T = 256; the core's part, T / D, grows with the sequence length.",
        17.5: "you counted three projections; the output projection W_O makes four: 2 + T / D.",
        258: "you squared the core's ratio: attention's core costs T²·D, the RNN T·D², so it adds T / D, not (T / D)².",
        1 / 18: "upside down: that is the RNN's FLOPs over attention's.",
        1026: "T alone: the RNN's cost per step grows with D², attention's core with T·D, so D does not cancel.",
    },
    rtol=1e-3,
)

# ------------------------------------------------------------------------------------- the pipeline's shapes

SHAPE_KEYS = ("src_ids", "memory", "tgt_ids", "logits", "next_token_probs")


def _reference_shapes(batch_size: int, src_len: int, tgt_len: int, d_model: int, vocab_size: int) -> dict:
    """Run the course's encoder–decoder on random ids and read off every shape."""
    from companion.models import ModelConfig, Transformer

    config = ModelConfig.transformer_base(
        vocab_size=vocab_size,
        d_model=d_model,
        n_heads=2,
        n_layers=1,
        d_ff=2 * d_model,
        max_seq_len=max(src_len, tgt_len),
        dropout=0.0,
    )
    with torch.random.fork_rng(devices=[]):  # random init, without moving the reader's global RNG
        model = Transformer(config).eval()
    g = seeded(1)
    src = torch.randint(0, vocab_size, (batch_size, src_len), generator=g)  # (B, S)
    tgt = torch.randint(0, vocab_size, (batch_size, tgt_len), generator=g)  # (B, T)
    with torch.no_grad():
        memory = model.encode(src)  # (B, S, D)
        logits = model.decode(tgt, memory)  # (B, T, V)
    probs = torch.softmax(logits[:, -1], dim=-1)  # (B, V): only the last position at generation time
    return {
        "src_ids": tuple(src.shape),
        "memory": tuple(memory.shape),
        "tgt_ids": tuple(tgt.shape),
        "logits": tuple(logits.shape),
        "next_token_probs": tuple(probs.shape),
    }


def _shape_judge(expected: dict) -> Any:
    def judge(out: Any) -> str | None:
        if not isinstance(out, dict):
            return f"returned a {type(out).__name__} object, expected a dict with keys {list(SHAPE_KEYS)}"
        for key in SHAPE_KEYS:
            if key not in out:
                return f"has no key {key!r} (expected keys {list(SHAPE_KEYS)})"
            try:
                got = tuple(int(n) for n in out[key])
            except (TypeError, ValueError):
                return f"[{key!r}] is {out[key]!r}, expected a tuple of ints"
            if got != expected[key]:
                return f"[{key!r}] is {got}, expected {expected[key]}"
        return None

    return judge


def _shape_mistake(key: str, wrong: tuple) -> Any:
    def matches(out: Any) -> bool:
        try:
            return tuple(int(n) for n in out[key]) == wrong
        except (TypeError, ValueError, KeyError, IndexError):
            return False

    return matches


def _shape_cases() -> list[Case]:
    cases = []
    for label, (b, s, t, d, v) in [
        ("B=1, S=3, T=4, D=32, V=8 (the chapter's 我爱NLP)", (1, 3, 4, 32, 8)),
        ("B=2, S=5, T=3, D=16, V=50", (2, 5, 3, 16, 50)),
        ("B=3, S=7, T=2, D=8, V=11", (3, 7, 2, 8, 11)),
    ]:
        expected = _reference_shapes(b, s, t, d, v)
        known = [
            (
                _shape_mistake("memory", (b, t, d)),
                "H has one row per *source* token: (B, S, D); the target length T does not enter the encoder.",
            ),
            (
                _shape_mistake("logits", (b, t, d)),
                "the output layer maps every position's D-vector to V logits: (B, T, V), not (B, T, D).",
            ),
            (
                _shape_mistake("logits", (b, s, v)),
                "the logits come out of the decoder: one row per *target* position, (B, T, V).",
            ),
            (
                _shape_mistake("next_token_probs", (b, t, v)),
                "at generation only the last position's row is used: softmax(logits[:, -1]) has shape (B, V).",
            ),
        ]
        cases.append(Case(label, (b, s, t, d, v), _shape_judge(expected), mistakes=known))
    return cases


PIPELINE_SHAPES = Check(
    name="pipeline_shapes",
    signature="fn(batch_size, src_len, tgt_len, d_model, vocab_size) -> dict of shape tuples with keys "
    + ", ".join(SHAPE_KEYS),
    description="the shape of every tensor on the way from ids to the next-token distribution",
    hint="source ids (B, S) -> memory H (B, S, D); target ids (B, T) -> logits (B, T, V); the next-token "
    "distribution is the softmax of the last position's logits, (B, V).",
    make_cases=_shape_cases,
)

# ------------------------------------------------------------------------------------- what runs how often

RUNS_PER_TOKEN = choice_check(
    "runs_per_token",
    "b",
    ("a", "b", "c", "d"),
    description="greedy translation of 我爱NLP into 4 tokens, no KV cache: what runs how often?",
    hint="H does not change while the target grows; each new target token needs the previous one.",
    mistakes={
        "a": "the encoder's output H does not change while decoding: the encoder runs once per source sentence "
        "and every decoding step reuses H.",
        "c": "that is training with teacher forcing, where the whole target is known; at generation each token "
        "needs the one before, so the decoder loops once per token.",
        "d": "the encoder reads the whole source in one parallel pass, not once per source token.",
    },
)

# ------------------------------------------------------------------------------------- sub-layers


def _sublayer_count() -> int:
    """Post-norm: one LayerNorm per sub-layer, so counting them in the 6 + 6 layer model counts the sub-layers."""
    from companion.layers import LayerNorm
    from companion.models import ModelConfig, Transformer

    config = ModelConfig.transformer_base(vocab_size=10, d_model=8, n_heads=2, n_layers=6, d_ff=16, max_seq_len=8)
    with torch.random.fork_rng(devices=[]):
        model = Transformer(config)
    return sum(isinstance(m, (LayerNorm, nn.LayerNorm)) for m in model.modules())


SUBLAYER_COUNT = value_check(
    "sublayer_count",
    _sublayer_count,
    description="how many sub-layers (each with its Add & Norm) the 2017 base model stacks in 6 + 6 layers",
    hint="count the sub-layers of one encoder layer and of one decoder layer, then multiply by N = 6 each.",
    signature="an int",
    mistakes={
        24: "a decoder layer has 3 sub-layers: masked self-attention, cross-attention and feed-forward.",
        36: "an encoder layer has only 2 sub-layers: it has no cross-attention.",
        5: "that is one encoder layer plus one decoder layer; each side stacks N = 6 of them.",
        12: "that is the number of layers; each has 2 (encoder) or 3 (decoder) sub-layers.",
    },
    rtol=0.0,
)

CHECKS = [ATTENTION_RNN_FLOP_RATIO, PIPELINE_SHAPES, RUNS_PER_TOKEN, SUBLAYER_COUNT]

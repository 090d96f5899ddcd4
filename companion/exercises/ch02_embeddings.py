"""Chapter 2 (embeddings) checks: the lookup, the first layer's input with the √d_model factor, the length
of a scaled row, what weight tying saves, and what tying does to the gradient.

References: :class:`companion.embeddings.TokenEmbedding` (plain and ``scale=True``),
:func:`companion.positions.sinusoidal_encoding`, :func:`companion.scaling.count_parameters`.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from companion.exercises._runner import Case, Check, choice_check, seeded, value_check

CHAPTER = "02_embeddings"


def _embedding(table: torch.Tensor, scale: bool) -> Any:
    """The package's TokenEmbedding holding ``table`` (V, D) as its weight."""
    from companion.embeddings import TokenEmbedding

    with torch.random.fork_rng(devices=[]):  # its random init is overwritten; keep the reader's RNG still
        emb = TokenEmbedding(table.shape[0], table.shape[1], scale=scale)
    with torch.no_grad():
        emb.weight.copy_(table)
    return emb


def _same(wrong: torch.Tensor) -> Any:
    """A mistake matcher: the reader's output equals ``wrong`` (same shape, close values)."""

    def matches(out: Any) -> bool:
        return (
            isinstance(out, torch.Tensor)
            and tuple(out.shape) == tuple(wrong.shape)
            and bool(torch.allclose(out.detach().float(), wrong.float(), atol=1e-5, rtol=1e-4))
        )

    return matches


# ------------------------------------------------------------------------------------- the lookup


def _lookup_cases() -> list[Case]:
    g = seeded(20)
    cases = []
    for label, (v, d), ids in [
        ("V=10, D=4, ids (2, 4)", (10, 4), [[1, 5, 5, 2], [0, 9, 3, 3]]),
        ("V=6, D=3, one id per row", (6, 3), [[4], [0], [5]]),
        ("V=50, D=8, ids (1, 6)", (50, 8), [[49, 0, 7, 7, 13, 1]]),
    ]:
        table = torch.randn(v, d, generator=g)
        ids_t = torch.tensor(ids)  # (B, T)
        with torch.no_grad():
            expected = _embedding(table, scale=False)(ids_t)  # (B, T, D)
        known = [
            (_same(table[(ids_t - 1) % v]), "ids count from 0: token i is row i of the table, not row i - 1."),
            (
                _same(table[ids_t] * math.sqrt(d)),
                "that is the scaled lookup of the original Transformer; a plain lookup has no √d_model factor.",
            ),
            (
                lambda out, s=(d, *ids_t.shape): isinstance(out, torch.Tensor) and tuple(out.shape) == s,
                "you picked columns of the table: its rows are the tokens, so index the first axis, table[ids].",
            ),
        ]
        cases.append(Case(label, (ids_t, table), expected, mistakes=known))
    return cases


EMBEDDING_LOOKUP = Check(
    name="embedding_lookup",
    signature="fn(ids: LongTensor (B, T), table: Tensor (V, D)) -> Tensor (B, T, D)",
    description="look up each id's row of the embedding table (= one-hot(ids) @ table)",
    hint="row i of the (V, D) table is the vector of token i: table[ids], or F.one_hot(ids, V).float() @ table.",
    make_cases=_lookup_cases,
)

# ------------------------------------------------------------------------------------- the first layer's input


def _input_cases() -> list[Case]:
    from companion.positions import sinusoidal_encoding

    g = seeded(21)
    cases = []
    for label, (v, d), shape in [
        ("V=20, D=8, B=2, T=5", (20, 8), (2, 5)),
        ("V=100, D=16, B=1, T=9", (100, 16), (1, 9)),
        ("V=7, D=4, B=3, T=2", (7, 4), (3, 2)),
    ]:
        table = torch.randn(v, d, generator=g) / math.sqrt(d)  # entries ~ N(0, 1/d), as in the chapter
        ids = torch.randint(0, v, shape, generator=g)  # (B, T)
        pe = sinusoidal_encoding(shape[1], d)  # (T, D)
        with torch.no_grad():
            expected = _embedding(table, scale=True)(ids) + pe  # (B, T, D)
        known = [
            (
                _same(math.sqrt(d) * (table[ids] + pe)),
                "the position was scaled too: multiply only the token part by √d_model, then add PE.",
            ),
            (_same(table[ids] + pe), "the √d_model factor is missing: the position part then swamps the token."),
            (_same(d * table[ids] + pe), "the factor is √d_model, not d_model."),
            (
                _same(table[ids] / math.sqrt(d) + pe),
                "multiply by √d_model; dividing makes the token part smaller still.",
            ),
        ]
        cases.append(Case(label, (ids, table), expected, mistakes=known))
    return cases


EMBEDDING_INPUT = Check(
    name="embedding_input",
    signature="fn(ids: LongTensor (B, T), table: Tensor (V, D)) -> Tensor (B, T, D)",
    description="the 2017 model's first-layer input: √d_model · table[ids] + sinusoidal PE[0:T]",
    hint="X = sqrt(D) * table[ids] + sinusoidal_encoding(T, D): the (T, D) positions broadcast over the batch.",
    make_cases=_input_cases,
)

# ------------------------------------------------------------------------------------- the length of a row

NORM_D = 256


def _scaled_row_length() -> float:
    from companion.embeddings import TokenEmbedding

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        emb = TokenEmbedding(1000, NORM_D, scale=True)  # table entries ~ N(0, 1/d), output × √d
    with torch.no_grad():
        return emb(torch.arange(1000)).norm(dim=-1).mean().item()


EMBEDDING_NORM = value_check(
    "embedding_norm",
    _scaled_row_length,
    description=f"average length of √d · E[i] for TokenEmbedding(1000, {NORM_D}, scale=True)",
    hint="a vector of d entries of size about 1 has length about √d.",
    signature="a number (within 3 %)",
    mistakes={
        1.0: "that is the length before scaling (d entries of size 1/√d); the factor √d multiplies it.",
        math.sqrt(NORM_D / 2): "that is the length of a sinusoidal position vector, √(d/2).",
        float(NORM_D): "the factor is √d, and the length of d entries of size 1 is √d, not d.",
    },
    rtol=0.03,
)

# ------------------------------------------------------------------------------------- what tying saves


def _tying_saving() -> int:
    from companion.models import ModelConfig
    from companion.scaling import count_parameters

    medium = ModelConfig.gpt2_small(d_model=1024, n_heads=16, n_layers=24, d_ff=4096)  # GPT-2 medium
    return count_parameters(medium.replace(tie_embeddings=False)) - count_parameters(medium)


TIED_SAVING = value_check(
    "tied_saving",
    _tying_saving,
    description="parameters saved by tying GPT-2 medium's output layer to its token table (V 50,257, D 1,024)",
    hint="tying removes one V × D matrix (the output layer has no bias in GPT-2).",
    signature="an int (a count of parameters, not millions)",
    mistakes={
        2 * 50257 * 1024: "one matrix is saved, not two: the shared table still exists once.",
        50257 * 1024 / 1e6: "give the count of parameters, not millions.",
        24 * 50257 * 1024: "the output layer exists once, after the last layer, not once per layer.",
        50257 + 1024: "a V × D matrix holds V times D parameters, not V plus D.",
    },
    rtol=1e-6,
)

# ------------------------------------------------------------------------------------- what tying does

TYING_EFFECT = choice_check(
    "tying_effect",
    "b",
    ("a", "b", "c", "d"),
    description="which statement about weight tying（权重绑定） is right",
    hint="think of the two jobs of the shared matrix: looking up the input rows, and scoring every token at "
    "the output.",
    mistakes={
        "a": "the logits are still h @ E.T, one (D, V) product per position: tying saves parameters, not FLOPs.",
        "c": "tying needs the table (V, D) and the output layer (V, D) to have the same shape, which they always "
        "have; V and D stay independent.",
        "d": "tying and scaling are independent: the 2017 model ties its tables and multiplies the input lookup "
        "by √d_model.",
    },
)

CHECKS = [EMBEDDING_LOOKUP, EMBEDDING_INPUT, EMBEDDING_NORM, TIED_SAVING, TYING_EFFECT]

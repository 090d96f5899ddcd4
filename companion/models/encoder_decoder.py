"""``Transformer``: the encoder–decoder of Vaswani et al. 2017 (and T5/BART-style seq2seq).

``encode`` runs once; ``decode`` runs once per generated token, and every decoder layer's cross-attention reads
the same encoder output H. Checked in tests against ``torch.nn.Transformer`` and its own cached/uncached paths.

``span_corruption`` is T5's pretraining objective (Raffel et al. 2020, §3.1.4), as BERT's ``mask_tokens`` sits
beside the encoder: drop 15 % of the tokens in spans of mean length 3, put one sentinel in place of each span,
and make the target the sentinels followed by what they hide.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from companion._checks import check_positive_float, check_probability
from companion.models.base import check_caches, check_ids, check_unused, final_norm, lm_head
from companion.models.blocks import (
    DecoderLayer,
    DecoderLayerCache,
    Embeddings,
    EncoderLayer,
    attention_mask,
    causal_by_flag,
    init_weights,
    make_rope,
)
from companion.models.config import ModelConfig
from companion.packing import store_for_decoding

__all__ = ["Transformer", "span_corruption"]


class Transformer(nn.Module):
    """Encoder-decoder Transformer with one shared vocabulary (source, target and output share it).

    ``encode(src)`` gives H (B, S, D) once; ``decode(tgt, H)`` gives logits, feeding H to the
    cross-attention of *every* decoder layer, each through its own W_K/W_V.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        # experts and MLA are decoder-only pieces here (chapter 14); an encoder-decoder would get them halfway
        check_unused(config, "a Transformer (encoder-decoder)",
                     {"n_experts": 0, "kv_rank": None, "sliding_window_pattern": None})
        self.config = config
        self.embed = Embeddings(config)  # shared by source and target (2017, §3.4)
        rope = make_rope(config)
        self.encoder_layers = nn.ModuleList(EncoderLayer(config, rope) for _ in range(config.n_encoder_layers))
        self.encoder_norm = final_norm(config)
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(config, rope, cross_attention=True) for _ in range(config.n_decoder_layers)
        )
        self.decoder_norm = final_norm(config)
        self.lm_head = lm_head(config, self.embed)
        init_weights(self, config.n_encoder_layers + config.n_decoder_layers)
        if config.decode_layout:  # the same weights, laid out for fast decoding (companion.packing)
            store_for_decoding(self)

    def new_kv_caches(self) -> list[DecoderLayerCache]:
        """Empty caches for every decoder layer: self-attention K/V and projected encoder K/V."""
        return [DecoderLayerCache() for _ in self.decoder_layers]

    def encode(self, src: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """Run the encoder once. ``padding_mask`` (B, 1, 1, S), True = real token (``masks.padding_mask``).

        Shapes: src (B, S) -> H (B, S, D).
        """
        check_ids("src", src, 0, self.config.max_seq_len)
        s = src.size(1)
        mask = attention_mask(self.config, s, s, causal=False, padding_mask=padding_mask, device=src.device)
        h = self.embed(src)  # (B, S, D)
        for layer in self.encoder_layers:
            h = layer(h, mask)  # (B, S, D)
        return self.encoder_norm(h) if self.encoder_norm is not None else h

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        padding_mask: Tensor | None = None,
        kv_caches: list[DecoderLayerCache] | None = None,
    ) -> Tensor:
        """Target logits given the encoder output ``memory`` (= H).

        With ``kv_caches`` (from ``new_kv_caches``) ``tgt`` holds only the new target tokens.

        ``padding_mask`` (B, 1, 1, S), True = real source token, hides padding in the cross-attention.

        Shapes: tgt (B, T), memory (B, S, D), padding_mask (B, 1, 1, S) -> logits (B, T, V).
        """
        offset = check_caches(kv_caches, len(self.decoder_layers), DecoderLayerCache)
        check_ids("tgt", tgt, offset, self.config.max_seq_len)
        t = tgt.size(1)
        is_causal = causal_by_flag(self.config, offset + t)  # as in GPT.forward
        mask = attention_mask(self.config, t, offset + t, causal=not is_causal, device=tgt.device)
        x = self.embed(tgt, offset)  # (B, T, D)
        for i, layer in enumerate(self.decoder_layers):
            cache = None if kv_caches is None else kv_caches[i]
            x = layer(x, memory, mask=mask, padding_mask=padding_mask, cache=cache, is_causal=is_causal)  # same H
        if self.decoder_norm is not None:
            x = self.decoder_norm(x)
        return self.lm_head(x)  # (B, T, V)

    def forward(self, src: Tensor, tgt: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: encode ``src``, then predict every next token of ``tgt`` in parallel.

        Shapes: src (B, S), tgt (B, T), padding_mask (B, 1, 1, S) -> logits (B, T, V).
        """
        memory = self.encode(src, padding_mask)  # (B, S, D)
        return self.decode(tgt, memory, padding_mask)


def _segment(n_items: int, n_segments: int, generator: torch.Generator | None) -> list[int]:
    """``n_items`` cut at random into ``n_segments`` non-empty runs (their lengths, summing to ``n_items``)."""
    cuts = (torch.randperm(n_items - 1, generator=generator)[: n_segments - 1] + 1).sort().values.tolist()
    bounds = [0, *cuts, n_items]
    return [b - a for a, b in zip(bounds, bounds[1:])]


def span_corruption(
    tokens: Sequence[Any],
    noise_density: float = 0.15,
    mean_span_length: float = 3.0,
    generator: torch.Generator | None = None,
    sentinel: Callable[[int], Any] = lambda i: f"<extra_id_{i}>",
) -> tuple[list[Any], list[Any]]:
    """T5's span corruption (Raffel et al. 2020, §3.1.4; the layout of T5's ``random_spans_noise_mask``).

    ``round(len(tokens) · noise_density)`` tokens are dropped in ``round(noise / mean_span_length)`` spans; the
    kept and dropped runs alternate, starting with a kept run and ending with a dropped one (T5's layout), their
    lengths drawn at random. The input keeps
    every kept token and puts ``sentinel(i)`` where span ``i`` was; the target lists ``sentinel(i)`` followed by
    span ``i``'s tokens for every span, then one last sentinel (as T5 does). ``sentinel`` maps a span number to
    a token (T5: ``<extra_id_0>``, ``<extra_id_1>``, ... at the top of its vocabulary).

    Example (the paper's Figure 2 draws its spans by hand): 20 words give 3 dropped words in 1 span, e.g. the
    input ``w0 ... w16 <extra_id_0>`` and the target ``<extra_id_0> w17 w18 w19 <extra_id_1>``; 60 words give
    9 dropped words in 3 spans.

    Raises ``ValueError`` for fewer than two tokens, a density outside (0, 1), or sentinels that repeat or
    occur among the tokens (the target could not say which span is which); ``TypeError`` for tokens given as
    one string or tensor (split or ``.tolist()`` them first) or a sentinel that is not a function.
    """
    if isinstance(tokens, (str, bytes, Tensor)) or not isinstance(tokens, Sequence):
        raise TypeError(f"tokens must be a list of tokens (words or ids), got {type(tokens).__name__}; split a text "
                        "first (text.split()), or call .tolist() on a tensor of ids")
    if len(tokens) < 2:
        raise ValueError(f"tokens has {len(tokens)} items; expected at least 2 (one kept, one dropped)")
    check_probability("noise_density", noise_density, allow_zero=False, allow_one=False)
    check_positive_float("mean_span_length", mean_span_length)
    if not callable(sentinel):
        raise TypeError(f"sentinel must be a function of the span number, got {type(sentinel).__name__}")
    n = len(tokens)
    n_noise = min(max(round(n * noise_density), 1), n - 1)
    n_spans = min(max(round(n_noise / mean_span_length), 1), n - n_noise)
    sentinels = [sentinel(i) for i in range(n_spans + 1)]
    for i, mark in enumerate(sentinels):
        if mark in sentinels[:i] or mark in tokens:
            where = "sentinel(j) for an earlier j" if mark in sentinels[:i] else "a token of tokens"
            raise ValueError(f"sentinel({i})={mark!r} is also {where}; expected a distinct sentinel per span, "
                             "none of them a token (T5: <extra_id_0>, <extra_id_1>, ...)")
    noise, keep = _segment(n_noise, n_spans, generator), _segment(n - n_noise, n_spans, generator)
    inputs: list[Any] = []
    targets: list[Any] = []
    start = 0
    for i, (k, m) in enumerate(zip(keep, noise)):
        inputs += [*tokens[start : start + k], sentinels[i]]  # kept run, then the sentinel of span i
        targets += [sentinels[i], *tokens[start + k : start + k + m]]  # span i, announced by its sentinel
        start += k + m
    return inputs, targets + [sentinels[n_spans]]

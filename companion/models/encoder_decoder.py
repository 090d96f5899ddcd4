"""``Transformer``: the encoder–decoder of Vaswani et al. 2017 (and T5/BART-style seq2seq).

``encode`` runs once; ``decode`` runs once per generated token, and every decoder layer's cross-attention reads
the same encoder output H. Checked in tests against ``torch.nn.Transformer`` and its own cached/uncached paths.
"""

from __future__ import annotations

from torch import Tensor, nn

from companion.models.base import check_caches, check_ids, final_norm, lm_head
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

__all__ = ["Transformer"]


class Transformer(nn.Module):
    """Encoder-decoder Transformer with one shared vocabulary (source, target and output share it).

    ``encode(src)`` gives H (B, S, D) once; ``decode(tgt, H)`` gives logits, feeding H to the
    cross-attention of *every* decoder layer, each through its own W_K/W_V.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
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

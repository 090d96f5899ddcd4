"""The pieces every model in ``companion.models`` is assembled from.

- ``Embeddings``: token lookup (optionally × sqrt(D)) plus absolute positions (sinusoidal or learned),
  BERT's token types (segments) if ``config.type_vocab_size``, an optional norm (BERT) and dropout. RoPE and
  ALiBi add nothing here: they act inside attention.
- ``attention_mask``: the mask one attention call needs: causal (or bidirectional), sliding window,
  padding, and the ALiBi bias, for T new queries against S keys (S > T when a KV cache holds the past).
  ``causal_by_flag`` says when plain causal attention can go by ``is_causal=True`` instead (no sliding
  window in the way): the decoders then build no (T, S) causal mask at all.
- ``EncoderLayer``: self-attention (no mask) + FFN, each wrapped in a ``ResidualBlock``.
- ``DecoderLayer``: masked self-attention + (optional) cross-attention to the encoder output H + FFN.
  Chapter 14's choices are made here too: multi-head latent attention instead of multi-head attention when
  ``config.kv_rank`` is set, a mixture of experts instead of the dense FFN when ``config.n_experts`` is (after
  the first ``n_dense_layers`` layers).

Vaswani et al. 2017, §3.1 and Figure 1; pre-/post-norm per ``ModelConfig.norm_placement``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from companion._checks import check_token_ids
from companion.attention import KVCache, MultiHeadAttention, MultiHeadLatentAttention
from companion.embeddings import TokenEmbedding
from companion.layers import ResidualBlock, make_ffn, make_norm
from companion.masks import causal_mask, combine_masks, sliding_window_mask
from companion.models.config import ModelConfig
from companion.moe import MoE
from companion.positions import (
    LearnedPositionalEmbedding,
    RotaryEmbedding,
    alibi_bias,
    sinusoidal_encoding,
    yarn_attention_factor,
)

__all__ = [
    "DecoderLayer", "DecoderLayerCache", "Embeddings", "EncoderLayer", "attention_mask", "causal_by_flag",
    "config_norm", "init_weights", "make_rope",
]


class Embeddings(nn.Module):
    """Token embedding + absolute position information, for positions ``offset .. offset + T - 1``.

    With ``config.type_vocab_size > 0`` a third table adds the vector of each token's *type* (BERT's segment:
    0 for the first sentence of a pair, 1 for the second); tokens without given types are type 0.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.token = TokenEmbedding(config.vocab_size, config.d_model, scale=config.embed_scale)
        self.position: LearnedPositionalEmbedding | None = None
        if config.positions == "learned":
            self.position = LearnedPositionalEmbedding(config.max_seq_len, config.d_model)
        elif config.positions == "sinusoidal":  # a fixed table: a buffer, not a parameter
            table = sinusoidal_encoding(config.max_seq_len, config.d_model)  # (T_max, D)
            self.register_buffer("sinusoid", table, persistent=False)
        self.token_type: TokenEmbedding | None = None
        if config.type_vocab_size:
            self.token_type = TokenEmbedding(config.type_vocab_size, config.d_model)
        self.norm = config_norm(config) if config.embed_norm else None
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, ids: Tensor, offset: int = 0, token_type_ids: Tensor | None = None) -> Tensor:
        """Shapes: ids (B, T), token_type_ids (B, T) or None (all type 0) -> (B, T, D)."""
        t = ids.size(1)
        x = self.token(ids)  # (B, T, D)
        if self.position is not None:
            x = x + self.position(t, offset=offset)  # (T, D) broadcast over B
        elif self.config.positions == "sinusoidal":
            x = x + self.sinusoid[offset : offset + t].to(x.dtype)  # (T, D)
        if token_type_ids is not None:
            if self.token_type is None:
                raise ValueError("token_type_ids were given but the config has type_vocab_size=0; expected "
                                 "ModelConfig(type_vocab_size=2, ...) (BERT) to use segments")
            check_token_ids("token_type_ids", token_type_ids, vocab_size=self.config.type_vocab_size)
            if token_type_ids.shape != ids.shape:
                raise ValueError(f"token_type_ids has shape {tuple(token_type_ids.shape)}; expected the shape "
                                 f"of ids {tuple(ids.shape)}")
            x = x + self.token_type(token_type_ids)  # (B, T, D)
        elif self.token_type is not None:
            x = x + self.token_type.weight[0]  # (D,): every token is of type 0
        if self.norm is not None:
            x = self.norm(x)
        return self.dropout(x)


def config_norm(config: ModelConfig) -> nn.Module:
    """The norm ``config`` asks for (kind, eps, fused or not), for the places outside a ``ResidualBlock``."""
    return make_norm(config.norm, config.d_model, config.norm_eps, fused=config.fused_norm)


def make_rope(config: ModelConfig) -> RotaryEmbedding | None:
    """One ``RotaryEmbedding`` (cos/sin tables only, no parameters) shared by every self-attention layer."""
    if config.positions != "rope":
        return None
    attention_factor = None
    if config.rope_mscale is not None:  # DeepSeek's YaRN: the temperature's ratio on cos/sin (1 when equal)
        f, mscale, all_dim = config.rope_factor, config.rope_mscale, config.rope_mscale_all_dim
        attention_factor = yarn_attention_factor(f, mscale) / yarn_attention_factor(f, all_dim)
    return RotaryEmbedding(
        config.head_dim if config.kv_rank is None else config.rope_head_dim, config.max_seq_len, config.rope_base,
        pairing=config.rope_pairing,
        scaling=config.rope_scaling, factor=config.rope_factor,
        original_max_seq_len=config.rope_original_max_seq_len, attention_factor=attention_factor,
    )  # fmt: skip


def mla_softmax_scale(config: ModelConfig) -> float | None:
    """MLA's factor on q·k when DeepSeek's YaRN sets one: 1/sqrt(nope + rope) times the temperature
    ``yarn_attention_factor(rope_factor, rope_mscale_all_dim)`` squared, on every dimension (None: the plain one)."""
    if config.rope_mscale_all_dim is None:
        return None
    temperature = yarn_attention_factor(config.rope_factor, config.rope_mscale_all_dim)
    return temperature**2 / math.sqrt(config.nope_head_dim + config.rope_head_dim)


def attention_mask(
    config: ModelConfig,
    t: int,
    s: int,
    *,
    causal: bool,
    padding_mask: Tensor | None = None,
    device: torch.device | None = None,
    layer: int = 0,
) -> Tensor | None:
    """The mask for T new queries (the last T of S positions) in self-attention of layer ``layer``.

    Combines: causal (decoder) or none (encoder); the layer's sliding window (``config.layer_window``); the
    ``padding_mask`` (B, 1, 1, S), True = real token; and ALiBi's additive bias (H, T, S).
    Returns None when nothing is masked (an encoder without padding, or one cached query).

    Shapes: returns (T, S), (B, 1, T, S), (H, T, S) or (B, H, T, S); bool, or float if ALiBi is used.
    """
    structure, window = None, config.layer_window(layer)
    if causal and window is not None and window < s:
        structure = sliding_window_mask(t, window, s, n_sinks=config.attention_sinks,
                                        device=device)  # (T, S)
    elif causal and t > 1:
        structure = causal_mask(t, s, device=device)  # (T, S): one new query may see every cached key
    bias = None
    if config.positions == "alibi":
        bias = alibi_bias(config.n_heads, s)[:, s - t :, :].to(device)  # (H, T, S): rows of the new queries
    return combine_masks(structure, padding_mask, bias)


def causal_by_flag(config: ModelConfig, s: int, layer: int = 0) -> bool:
    """True when a decoder's self-attention over S keys (in layer ``layer``) is plain causal, so that it can
    pass ``is_causal=True`` instead of a (T, S) mask: no sliding window, or one at least as long as S.
    ``attention_mask(..., causal=False)`` then gives what remains to be masked (padding, the ALiBi bias)."""
    window = config.layer_window(layer)
    return window is None or window >= s


class EncoderLayer(nn.Module):
    """Bidirectional self-attention then FFN, each inside a residual block (2 sublayers)."""

    def __init__(self, config: ModelConfig, rope: RotaryEmbedding | None = None) -> None:
        super().__init__()
        self.self_attn = _attention(config, rope)
        self.self_attn_block = _residual(config)
        self.ffn = make_ffn(config.activation, config.d_model, config.d_ff, bias=config.bias, dropout=config.dropout)
        self.ffn_block = _residual(config)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> Tensor:
        """Shapes: x (B, S, D), mask broadcastable to (B, H, S, S) -> (B, S, D)."""
        x = self.self_attn_block(x, lambda h: self.self_attn(h, mask=mask))
        return self.ffn_block(x, self.ffn)


@dataclass
class DecoderLayerCache:
    """The two caches of one decoder layer: its own past keys/values, and the projected encoder output."""

    self_attn: KVCache = field(default_factory=KVCache)
    cross_attn: KVCache = field(default_factory=KVCache)

    @property
    def length(self) -> int:
        """Target positions decoded so far (the self-attention cache's length)."""
        return self.self_attn.length

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` of both caches (beam search). Shapes: index (B_new,) integer."""
        self.self_attn.reorder(index)
        self.cross_attn.reorder(index)


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention to the encoder output (if ``cross_attention``), then FFN.

    Every decoder layer's cross-attention reads the *same* final encoder output H (``memory``) through
    its own ``k_proj``/``v_proj`` (W_K, W_V): the notes' "6 层共用同一个 H". A decoder-only model (GPT)
    builds the layer with ``cross_attention=False``: two sublayers, like an encoder layer with a mask.
    """

    def __init__(
        self, config: ModelConfig, rope: RotaryEmbedding | None = None, *, cross_attention: bool, index: int = 0
    ) -> None:
        super().__init__()
        self.self_attn = _attention(config, rope, latent=config.kv_rank is not None)
        self.self_attn_block = _residual(config)
        self.cross_attn = _attention(config, None, cross=True) if cross_attention else None  # no RoPE across sequences
        self.cross_attn_block = _residual(config) if cross_attention else None
        self.ffn = _ffn(config, experts=config.n_experts > 0 and index >= config.n_dense_layers)
        self.ffn_block = _residual(config)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        padding_mask: Tensor | None = None,
        cache: DecoderLayerCache | KVCache | None = None,
        *,
        is_causal: bool = False,
    ) -> Tensor:
        """Shapes: x (B, T, D), memory H (B, S_src, D), mask to (B, H, T, S), padding_mask (the source's,
        for cross-attention) to (B, 1, 1, S_src).

        ``cache``: a ``KVCache`` (decoder-only) or a ``DecoderLayerCache`` (encoder-decoder).
        ``is_causal``: the self-attention hides later keys itself (see ``MultiHeadAttention``), on top of ``mask``.
        Returns (B, T, D).
        """
        self_cache = cache.self_attn if isinstance(cache, DecoderLayerCache) else cache
        cross_cache = cache.cross_attn if isinstance(cache, DecoderLayerCache) else None
        x = self.self_attn_block(
            x, lambda h: self.self_attn(h, mask=mask, kv_cache=self_cache, is_causal=is_causal)
        )
        if self.cross_attn is not None:
            if memory is None:
                raise ValueError("memory (the encoder output H) is required by a decoder layer with cross-attention")
            x = self.cross_attn_block(
                x, lambda h: self.cross_attn(h, memory=memory, mask=padding_mask, kv_cache=cross_cache)
            )
        return self.ffn_block(x, self.ffn)


def _attention(
    config: ModelConfig, rope: RotaryEmbedding | None, *, latent: bool = False, cross: bool = False
) -> MultiHeadAttention | MultiHeadLatentAttention:
    if latent:  # DeepSeek's multi-head latent attention (chapter 14)
        return MultiHeadLatentAttention(
            config.d_model, config.n_heads, config.kv_rank, q_rank=config.q_rank, rope_head_dim=config.rope_head_dim,
            nope_head_dim=config.nope_head_dim, v_head_dim=config.v_head_dim, rope=rope, bias=config.bias,
            dropout=config.dropout, softmax_scale=mla_softmax_scale(config),
        )  # fmt: skip
    return MultiHeadAttention(
        config.d_model, config.n_heads, config.n_kv_heads, bias=config.bias, dropout=config.dropout,
        rope=rope, use_sdpa=config.use_sdpa, fused_qkv=config.decode_layout and not cross, head_dim=config.d_head,
        qk_norm=config.qk_norm, qk_norm_eps=config.norm_eps, sink_logits=config.sink_logits,
    )  # fmt: skip


def _ffn(config: ModelConfig, *, experts: bool) -> nn.Module:
    """The dense FFN of width d_ff, or a mixture of experts (chapter 14)."""
    if not experts:
        return make_ffn(config.activation, config.d_model, config.d_ff, bias=config.bias, dropout=config.dropout)
    return MoE(
        config.d_model, config.d_expert, config.n_experts, config.n_experts_per_token,
        n_shared=config.n_shared_experts, activation=config.activation, bias=config.bias, scoring=config.router,
        normalize=config.router_normalize, scale=config.router_scale, n_groups=config.router_groups,
        group_limit=config.router_group_limit, balance_bias=config.router_bias, dropout=config.dropout,
    )  # fmt: skip


def _residual(config: ModelConfig) -> ResidualBlock:
    return ResidualBlock(
        config.d_model, norm=config.norm, placement=config.norm_placement, dropout=config.dropout,
        eps=config.norm_eps, fused_norm=config.fused_norm,
    )  # fmt: skip


def init_weights(model: nn.Module, n_layers: int, std: float = 0.02) -> None:
    """GPT-2's initialisation: N(0, 0.02) for linear and embedding weights, zero biases, norms at 1 / 0;
    the projections that write into the residual stream (``o_proj``, ``down_proj``) get std / sqrt(2 N)
    so that the stream's variance does not grow with depth (Radford et al. 2019, §2.3).

    A token table with ``scale=True`` keeps its own N(0, 1/D) draw (Vaswani-style, see TokenEmbedding).
    """
    tables = {id(m.weight) for m in model.modules() if isinstance(m, TokenEmbedding)}  # tied output heads
    for name, m in model.named_modules():
        if isinstance(m, nn.Linear):
            out_proj = name.endswith(("o_proj", "down_proj"))
            if id(m.weight) not in tables:
                nn.init.normal_(m.weight, 0.0, std / (2 * n_layers) ** 0.5 if out_proj else std)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, TokenEmbedding) and not m.scale:
            nn.init.normal_(m.weight, 0.0, std)
        elif isinstance(m, LearnedPositionalEmbedding):
            nn.init.normal_(m.weight, 0.0, std)

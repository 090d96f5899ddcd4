"""The three model families of the notes (Transformer 家族), from one set of blocks and one config.

- ``Transformer``: encoder-decoder (Vaswani et al. 2017; T5/BART-style seq2seq). ``encode`` runs once;
  ``decode`` runs once per generated token, and every decoder layer's cross-attention reads the same
  encoder output H. Checked in tests against its own cached/uncached paths and hooks.
- ``GPT``: decoder-only (Radford et al. 2018/2019; Llama, Mistral with the matching config). Loads
  Hugging Face GPT-2 and Llama weights (``companion.models.hf_loaders``) and reproduces their logits.
- ``Encoder``: encoder-only with a masked-language-model head (Devlin et al. 2019, BERT), plus
  ``mask_tokens``, BERT's 80/10/10 corruption recipe.

All three take an optional KV cache instead of having a "cached copy" of the model. The output head
maps D -> V; with ``tie_embeddings`` it shares the token-embedding matrix (Press & Wolf 2017).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from companion._checks import check_positive_int, check_probability, check_tensor, check_token_id, check_token_ids
from companion._renames import renamed
from companion.attention import KVCache
from companion.embeddings import tie_weights
from companion.models.blocks import (
    DecoderLayer,
    DecoderLayerCache,
    Embeddings,
    EncoderLayer,
    attention_mask,
    causal_by_flag,
    config_norm,
    init_weights,
    make_rope,
)
from companion.models.config import ModelConfig

__all__ = ["GPT", "Encoder", "Transformer", "mask_tokens", "num_parameters"]


def num_parameters(model: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of distinct parameters (a tied embedding/output matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def _check_ids(name: str, ids: Tensor, offset: int, max_seq_len: int) -> None:
    check_token_ids(name, ids, ndim=2)  # dtype and shape only; TokenEmbedding checks the range
    if offset + ids.size(1) > max_seq_len:
        cached = f" after {offset} cached positions" if offset else ""
        raise ValueError(
            f"{name} has length {ids.size(1)}{cached}, {offset + ids.size(1)} positions in all; "
            f"expected at most max_seq_len={max_seq_len}"
        )


def _check_caches(kv_caches: list | None, n_layers: int, kind: type) -> int:
    """Check a list of per-layer caches (from ``new_kv_caches``) and return how many positions they hold.

    Host-side checks only (types, lengths, identities): no device sync per decoding step.
    """
    if kv_caches is None:
        return 0
    if not isinstance(kv_caches, (list, tuple)):
        raise TypeError(
            f"kv_caches must be a list of {kind.__name__} (from new_kv_caches()), got {type(kv_caches).__name__}"
        )
    if len(kv_caches) != n_layers:
        raise ValueError(f"kv_caches has {len(kv_caches)} caches; expected one per layer ({n_layers})")
    for i, cache in enumerate(kv_caches):
        if not isinstance(cache, kind):
            raise TypeError(
                f"kv_caches[{i}] is a {type(cache).__name__}; expected a {kind.__name__} (new_kv_caches())"
            )
    pairs = kind is DecoderLayerCache  # an encoder-decoder layer holds two caches
    parts = [c for cache in kv_caches for c in ((cache.self_attn, cache.cross_attn) if pairs else (cache,))]
    if len({id(c) for c in parts}) != len(parts):
        raise ValueError("kv_caches holds the same cache object more than once; expected one new cache per layer "
                         "(use new_kv_caches(), not [KVCache()] * n)")
    lengths = {cache.length for cache in kv_caches}
    if len(lengths) > 1:
        raise ValueError(
            f"kv_caches hold different lengths {sorted(lengths)}; expected every layer's cache at one length"
        )
    return lengths.pop()


def _final_norm(config: ModelConfig) -> nn.Module | None:
    return config_norm(config) if config.final_norm else None


def _lm_head(config: ModelConfig, embeddings: Embeddings) -> nn.Linear:
    """The D -> V output projection; with ``tie_embeddings`` its weight *is* the token table."""
    lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
    if config.tie_embeddings:
        tie_weights(lm_head, embeddings.token)
    return lm_head


class GPT(nn.Module):
    """Decoder-only language model: embeddings, N masked self-attention layers, final norm, output head.

    ``ModelConfig.gpt2_small()`` is GPT-2 small, ``ModelConfig.llama(...)`` a Llama; one class for both.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = Embeddings(config)
        rope = make_rope(config)  # one table, shared by every layer
        self.layers = nn.ModuleList(DecoderLayer(config, rope, cross_attention=False) for _ in range(config.n_layers))
        self.norm = _final_norm(config)
        self.lm_head = _lm_head(config, self.embed)
        init_weights(self, config.n_layers)

    def new_kv_caches(self) -> list[KVCache]:
        """One empty ``KVCache`` per layer, to pass to ``forward`` step after step."""
        return [KVCache(self.config.max_seq_len) for _ in self.layers]

    @classmethod
    def from_pretrained(cls, folder: str) -> GPT:
        """A GPT from a local Hugging Face GPT-2 or Llama folder; see ``companion.models.pretrained``."""
        from companion.models.pretrained import from_pretrained  # imported here: pretrained imports this module

        return from_pretrained(folder)

    def save_pretrained(self, folder: str, *, safe_serialization: bool = True, tokenizer: object = None) -> None:
        """Write a folder ``transformers.AutoModelForCausalLM`` loads; see ``companion.models.pretrained``."""
        from companion.models.pretrained import save_pretrained

        save_pretrained(self, folder, safe_serialization=safe_serialization, tokenizer=tokenizer)

    @renamed(pad_mask="padding_mask")
    def forward(
        self,
        ids: Tensor,
        kv_caches: list[KVCache] | None = None,
        padding_mask: Tensor | None = None,
        *,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Next-token logits for every position.

        With ``kv_caches`` (from ``new_kv_caches``) ``ids`` are the *new* tokens only: they sit at
        positions ``cache.length ..`` and attend to the cached keys/values as well as to each other.
        ``padding_mask`` (B, 1, 1, S), True = real token, hides padding keys (S counts cached positions).
        ``position_ids`` (B, T), optional, gives each token's absolute position instead of
        ``cache.length + t`` (left-padded batches: ``padding.cumsum(-1) - 1``); learned or sinusoidal
        positions only, since RoPE and ALiBi see only offsets, which left padding does not change.

        Shapes: ids (B, T) -> logits (B, T, V).
        """
        offset = _check_caches(kv_caches, len(self.layers), KVCache)
        _check_ids("ids", ids, offset, self.config.max_seq_len)
        t = ids.size(1)
        # Plain causal attention goes by is_causal (no (T, S) mask to build); the mask keeps the rest.
        is_causal = causal_by_flag(self.config, offset + t)
        mask = attention_mask(self.config, t, offset + t, causal=not is_causal, padding_mask=padding_mask,
                              device=ids.device)  # fmt: skip
        x = self.embed(ids, offset) if position_ids is None else self._embed_at(ids, position_ids)  # (B, T, D)
        for i, layer in enumerate(self.layers):
            cache = None if kv_caches is None else kv_caches[i]
            x = layer(x, mask=mask, cache=cache, is_causal=is_causal)  # (B, T, D)
        if self.norm is not None:
            x = self.norm(x)
        return self.lm_head(x)  # (B, T, V)

    def _embed_at(self, ids: Tensor, position_ids: Tensor) -> Tensor:
        """Token vectors plus the absolute positions ``position_ids`` (B, T). Shapes: -> (B, T, D)."""
        if self.config.positions not in ("learned", "sinusoidal"):
            raise ValueError(
                f"position_ids is supported with positions='learned' or 'sinusoidal', not "
                f"positions={self.config.positions!r} (RoPE and ALiBi depend only on offsets)"
            )
        check_tensor("position_ids", position_ids, ndim=2)
        if position_ids.shape != ids.shape or position_ids.is_floating_point() or position_ids.dtype == torch.bool:
            raise ValueError(
                f"position_ids has shape {tuple(position_ids.shape)} and dtype {position_ids.dtype}; "
                f"expected integer ids of the shape of ids, {tuple(ids.shape)}"
            )
        if int(position_ids.min()) < 0 or int(position_ids.max()) >= self.config.max_seq_len:
            raise ValueError(
                f"position_ids range over {int(position_ids.min())}..{int(position_ids.max())}; "
                f"expected 0 <= position < max_seq_len={self.config.max_seq_len}"
            )
        embed = self.embed
        x = embed.token(ids)  # (B, T, D)
        if embed.position is not None:
            x = x + embed.position(position_ids)  # (B, T, D)
        else:
            x = x + embed.sinusoid[position_ids].to(x.dtype)  # (B, T, D)
        if embed.norm is not None:
            x = embed.norm(x)
        return embed.dropout(x)


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
        self.encoder_norm = _final_norm(config)
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(config, rope, cross_attention=True) for _ in range(config.n_decoder_layers)
        )
        self.decoder_norm = _final_norm(config)
        self.lm_head = _lm_head(config, self.embed)
        init_weights(self, config.n_encoder_layers + config.n_decoder_layers)

    def new_kv_caches(self) -> list[DecoderLayerCache]:
        """Empty caches for every decoder layer: self-attention K/V and projected encoder K/V."""
        return [DecoderLayerCache() for _ in self.decoder_layers]

    @renamed(src_mask="padding_mask")
    def encode(self, src: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """Run the encoder once. ``padding_mask`` (B, 1, 1, S), True = real token (``masks.padding_mask``).

        Shapes: src (B, S) -> H (B, S, D).
        """
        _check_ids("src", src, 0, self.config.max_seq_len)
        s = src.size(1)
        mask = attention_mask(self.config, s, s, causal=False, padding_mask=padding_mask, device=src.device)
        h = self.embed(src)  # (B, S, D)
        for layer in self.encoder_layers:
            h = layer(h, mask)  # (B, S, D)
        return self.encoder_norm(h) if self.encoder_norm is not None else h

    @renamed(memory_mask="padding_mask")
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
        offset = _check_caches(kv_caches, len(self.decoder_layers), DecoderLayerCache)
        _check_ids("tgt", tgt, offset, self.config.max_seq_len)
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

    @renamed(src_mask="padding_mask")
    def forward(self, src: Tensor, tgt: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: encode ``src``, then predict every next token of ``tgt`` in parallel.

        Shapes: src (B, S), tgt (B, T), padding_mask (B, 1, 1, S) -> logits (B, T, V).
        """
        memory = self.encode(src, padding_mask)  # (B, S, D)
        return self.decode(tgt, memory, padding_mask)


class Encoder(nn.Module):
    """BERT-style encoder: bidirectional self-attention layers and a masked-language-model head.

    The MLM head is dense -> activation -> norm -> output projection (tied to the token table if
    ``tie_embeddings``) plus an output bias, as in BERT.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = Embeddings(config)
        rope = make_rope(config)
        self.layers = nn.ModuleList(EncoderLayer(config, rope) for _ in range(config.n_layers))
        self.norm = _final_norm(config)
        self.mlm_dense = nn.Linear(config.d_model, config.d_model)
        self.mlm_act = nn.GELU(approximate="tanh" if config.activation == "gelu_tanh" else "none")
        self.mlm_norm = config_norm(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=True)
        if config.tie_embeddings:
            tie_weights(self.lm_head, self.embed.token)
        init_weights(self, config.n_layers)

    @renamed(pad_mask="padding_mask")
    def hidden_states(self, ids: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """Contextual vectors of every token. ``padding_mask`` (B, 1, 1, S), True = real token.

        Shapes: ids (B, S) -> (B, S, D).
        """
        _check_ids("ids", ids, 0, self.config.max_seq_len)
        s = ids.size(1)
        mask = attention_mask(self.config, s, s, causal=False, padding_mask=padding_mask, device=ids.device)
        h = self.embed(ids)  # (B, S, D)
        for layer in self.layers:
            h = layer(h, mask)  # (B, S, D)
        return self.norm(h) if self.norm is not None else h

    @renamed(pad_mask="padding_mask")
    def forward(self, ids: Tensor, padding_mask: Tensor | None = None) -> Tensor:
        """MLM logits for every position. Shapes: ids (B, S) -> logits (B, S, V)."""
        h = self.hidden_states(ids, padding_mask)  # (B, S, D)
        return self.lm_head(self.mlm_norm(self.mlm_act(self.mlm_dense(h))))  # (B, S, V)

    @staticmethod
    def mask_tokens(
        ids: Tensor,
        mask_id: int,
        vocab_size: int,
        generator: torch.Generator | None = None,
        prob: float = 0.15,
        special_ids: tuple[int, ...] = (),
    ) -> tuple[Tensor, Tensor]:
        """See :func:`mask_tokens`."""
        return mask_tokens(ids, mask_id, vocab_size, generator, prob, special_ids)


def mask_tokens(
    ids: Tensor,
    mask_id: int,
    vocab_size: int,
    generator: torch.Generator | None = None,
    prob: float = 0.15,
    special_ids: tuple[int, ...] = (),
) -> tuple[Tensor, Tensor]:
    """BERT's masked-LM corruption (Devlin et al. 2019, §3.1): choose ``prob`` of the tokens to predict;
    of those, 80 % become ``mask_id``, 10 % a random token, 10 % stay unchanged.

    Tokens in ``special_ids`` (e.g. [CLS], [SEP], padding) are never chosen.

    Returns:
        (inputs, labels): the corrupted ids, and labels holding the original id where a token was
        chosen and -100 elsewhere (``torch.nn.functional.cross_entropy``'s default ``ignore_index``).

    Shapes: ids (B, S) -> inputs (B, S), labels (B, S).
    """
    check_token_ids("ids", ids, ndim=(1, 2))
    check_probability("prob", prob, allow_zero=False, allow_one=False)
    check_positive_int("vocab_size", vocab_size)
    check_token_id("mask_id", mask_id, vocab_size)
    u = torch.rand(ids.shape, generator=generator, device=ids.device)  # chooses the positions
    chosen = u < prob
    for special in special_ids:
        chosen &= ids != special
    action = torch.rand(ids.shape, generator=generator, device=ids.device)  # what happens to a chosen one
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator, device=ids.device)
    inputs = torch.where(chosen & (action < 0.8), torch.full_like(ids, mask_id), ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    labels = torch.where(chosen, ids, torch.full_like(ids, -100))
    return inputs, labels

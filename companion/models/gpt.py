"""``GPT``: the decoder-only language model (Radford et al. 2018/2019; Llama, Mistral with the matching config).

Embeddings, N masked self-attention layers, a final norm and the output head. It takes an optional KV cache
(``new_kv_caches``) instead of having a "cached copy" of the model. ``from_pretrained`` / ``save_pretrained``
read and write Hugging Face folders through :mod:`companion.models.hf.folder` (checkpoint names stay there);
tests/test_hf_equivalence.py checks the logits against ``transformers``' GPT-2 and Llama.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import Tensor, nn

from companion._checks import check_tensor
from companion.attention import KVCache, RollingKVCache
from companion.models.base import check_caches, check_ids, final_norm, lm_head
from companion.models.blocks import DecoderLayer, Embeddings, attention_mask, causal_by_flag, init_weights, make_rope
from companion.models.config import ModelConfig
from companion.models.hf.common import load_into
from companion.models.hf.folder import read_folder, write_folder
from companion.packing import store_for_decoding

__all__ = ["GPT"]


class GPT(nn.Module):
    """Decoder-only language model: embeddings, N masked self-attention layers, final norm, output head.

    ``ModelConfig.gpt2_small()`` is GPT-2 small, ``ModelConfig.llama(...)`` a Llama; one class for both.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.embed = Embeddings(config)
        rope = make_rope(config)  # one table, shared by every layer
        self.layers = nn.ModuleList(
            DecoderLayer(config, rope, cross_attention=False, index=i) for i in range(config.n_layers)
        )
        self.norm = final_norm(config)
        self.lm_head = lm_head(config, self.embed)
        init_weights(self, config.n_layers)
        if config.decode_layout:  # the same weights, laid out for fast decoding (companion.packing)
            store_for_decoding(self)

    def new_kv_caches(self) -> list[KVCache]:
        """One empty cache per layer, to pass to ``forward`` step after step: a ``KVCache``, or for a layer with a
        sliding window shorter than the context a ``RollingKVCache`` of that many slots (and the config's
        attention sinks), whose memory stays constant (chapter 14). Interleaved models mix the two."""
        c = self.config
        windows = [c.layer_window(i) for i in range(len(self.layers))]
        return [RollingKVCache(w, c.attention_sinks) if w is not None and w < c.max_seq_len
                else KVCache(c.max_seq_len) for w in windows]  # fmt: skip

    @classmethod
    def from_pretrained(cls, folder: str | Path) -> GPT:
        """A GPT (eval mode, float32) from a local Hugging Face folder (``model_type`` in
        ``companion.models.hf.folder.FAMILIES``: GPT-2, Llama, Mixtral, Qwen3, DeepSeek-V3). ``model.tokenizer``
        is the folder's ``tokenizer.json`` as a ``tokenizers.Tokenizer`` (``None`` if absent).

        FP8 weights with block scales (DeepSeek-V3's release) are dequantised; other quantisations are refused.

        Raises:
            FileNotFoundError: no folder, no ``config.json``, or no weights file.
            ValueError: an unsupported ``model_type``, feature or quantisation, weights that do not fit the config
                (missing, misshapen, integer, or tensors that no weight reads), a corrupt weights or tokenizer
                file, a tokenizer with more ids than the token table.
            TypeError: a ``config.json`` value of the wrong type (``"hidden_size": "768"``).
        """
        config, state, tokenizer = read_folder(folder)
        model = load_into(cls(config), state, str(Path(folder) / "config.json"))
        model.tokenizer = tokenizer
        return model.eval()

    def save_pretrained(self, folder: str | Path, *, safe_serialization: bool = True, tokenizer: object = None) -> None:
        """Write a folder that ``transformers.AutoModelForCausalLM.from_pretrained`` loads with the same logits:
        ``config.json`` and ``model.safetensors`` (``pytorch_model.bin`` with ``safe_serialization=False``), plus
        ``tokenizer.json`` when ``tokenizer`` (a ``tokenizers.Tokenizer``) is given or the model came with one.
        Weights and tokenizer files of an earlier save into ``folder`` are removed (``write_folder``).

        Raises, before writing anything: ``ValueError`` for a config no Hugging Face family fits, unmerged LoRA
        adapters (``merge_lora`` first) or a tokenizer with more ids than ``config.vocab_size``;
        ``NotADirectoryError`` when ``folder`` is a file.
        """
        tokenizer = tokenizer if tokenizer is not None else getattr(self, "tokenizer", None)
        write_folder(self.config, self.state_dict(), folder, safe_serialization=safe_serialization, tokenizer=tokenizer)

    def forward(
        self,
        ids: Tensor,
        kv_caches: list[KVCache] | None = None,
        padding_mask: Tensor | None = None,
        *,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """Next-token logits for every position: ``lm_head(hidden_states(...))``.

        With ``kv_caches`` (from ``new_kv_caches``) ``ids`` are the *new* tokens only: they sit at
        positions ``cache.length ..`` and attend to the cached keys/values as well as to each other.
        ``padding_mask`` (B, 1, 1, S), True = real token, hides padding keys (S counts cached positions).
        ``position_ids`` (B, T), optional, gives each token's absolute position instead of
        ``cache.length + t`` (left-padded batches: ``padding.cumsum(-1) - 1``); learned or sinusoidal
        positions only, since RoPE and ALiBi see only offsets, which left padding does not change.

        Shapes: ids (B, T) -> logits (B, T, V).
        """
        return self.lm_head(self.hidden_states(ids, kv_caches, padding_mask, position_ids=position_ids))  # (B, T, V)

    def hidden_states(
        self,
        ids: Tensor,
        kv_caches: list[KVCache] | None = None,
        padding_mask: Tensor | None = None,
        *,
        position_ids: Tensor | None = None,
    ) -> Tensor:
        """The final-norm output vectors, before the output head; arguments as in ``forward``. Position t has read
        tokens 0..t only, so the last real token's vector is the one that has read the whole text (a decoder's
        sentence vector, ``LastTokenClassifier``).

        Shapes: ids (B, T) -> (B, T, D).
        """
        offset = check_caches(kv_caches, len(self.layers), KVCache)
        check_ids("ids", ids, offset, self.config.max_seq_len)
        t = ids.size(1)
        plans: dict[tuple[int | None, bool], tuple[bool, Tensor | None]] = {}  # one mask per kind of layer
        x = self.embed(ids, offset) if position_ids is None else self._embed_at(ids, position_ids)  # (B, T, D)
        for i, layer in enumerate(self.layers):
            cache = None if kv_caches is None else kv_caches[i]
            kind = (self.config.layer_window(i), isinstance(cache, RollingKVCache))
            if kind not in plans:
                plans[kind] = self._self_attention_mask(i, t, offset, cache, padding_mask, ids.device)
            is_causal, mask = plans[kind]
            x = layer(x, mask=mask, cache=cache, is_causal=is_causal)  # (B, T, D)
        if self.norm is not None:
            x = self.norm(x)
        return x  # (B, T, D)

    def _self_attention_mask(
        self, layer: int, t: int, offset: int, cache: KVCache | None, padding_mask: Tensor | None,
        device: torch.device,
    ) -> tuple[bool, Tensor | None]:
        """``(is_causal, mask)`` for the T new queries of layer ``layer`` (its own window)."""
        if isinstance(cache, RollingKVCache):
            # a fixed-size cache decides what the new queries see: its window (and sinks) over absolute positions
            if padding_mask is not None or self.config.positions == "alibi":
                raise ValueError("a RollingKVCache takes no padding_mask and no positions='alibi' (its keys are not "
                                 "positions 0 .. S-1)")
            return False, cache.mask(t, device=device)  # (T, size + T)
        # Plain causal attention goes by is_causal (no (T, S) mask to build); the mask keeps the rest.
        is_causal = causal_by_flag(self.config, offset + t, layer)
        mask = attention_mask(self.config, t, offset + t, causal=not is_causal, padding_mask=padding_mask,
                              device=device, layer=layer)  # fmt: skip
        return is_causal, mask

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

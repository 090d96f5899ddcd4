"""Scaled dot-product attention, multi-head attention (MHA / GQA / MQA) and the KV cache.

Implements ``Attention(Q, K, V) = softmax(Q Kᵀ / √D_h + mask) V`` and multi-head attention from
Vaswani et al., *Attention Is All You Need* (2017, §3.2); grouped-query attention from Ainslie et al.,
*GQA* (2023), multi-query attention from Shazeer, *Fast Transformer Decoding* (2019); and the online
softmax behind FlashAttention (Milakov & Gimelshein 2018; Dao et al. 2022) in :func:`tiled_attention`.

One module per idea; import them from here (``from companion.attention import MultiHeadAttention``):

* :mod:`companion.attention.sdpa` -- ``softmax`` and ``scaled_dot_product_attention``;
* :mod:`companion.attention.multi_head` -- ``split_heads``, ``merge_heads``, ``repeat_kv`` and
  ``MultiHeadAttention`` (self- and cross-attention, GQA/MQA);
* :mod:`companion.attention.kv_cache` -- ``KVCache`` and ``RollingKVCache`` (fixed size: sliding window,
  attention sinks);
* :mod:`companion.attention.mla` -- ``MultiHeadLatentAttention`` (DeepSeek-V2/V3's low-rank key/value latent);
* :mod:`companion.attention.tiled` -- ``tiled_attention`` (online softmax over blocks of keys).

Checked against (``tests/test_attention.py``): ``torch.nn.functional.scaled_dot_product_attention``
and ``torch.nn.MultiheadAttention`` with copied weights. The GQA head layout (query head ``h`` uses
key/value head ``h // (H / H_kv)``) follows Hugging Face ``modeling_llama.repeat_kv``.

Masks follow :mod:`companion.masks`: boolean ``True`` = may attend, or additive 0 / ``-inf``.
Left out on purpose: attention biases such as ALiBi are plain additive masks here (pass them as ``mask``).
"""

from __future__ import annotations

from companion.attention.kv_cache import KVCache, RollingKVCache
from companion.attention.mla import MultiHeadLatentAttention
from companion.attention.multi_head import MultiHeadAttention, merge_heads, repeat_kv, split_heads
from companion.attention.sdpa import scaled_dot_product_attention, softmax
from companion.attention.tiled import tiled_attention

__all__ = [
    "KVCache",
    "MultiHeadAttention",
    "MultiHeadLatentAttention",
    "RollingKVCache",
    "merge_heads",
    "repeat_kv",
    "scaled_dot_product_attention",
    "softmax",
    "split_heads",
    "tiled_attention",
]

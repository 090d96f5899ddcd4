"""What every model of the course shares: the parameter count, input checks, the final norm and the output head.

Used by :mod:`~companion.models.gpt`, :mod:`~companion.models.encoder_decoder` and :mod:`~companion.models.encoder`.
The output head maps D -> V; with ``tie_embeddings`` it shares the token-embedding matrix (Press & Wolf 2017).
"""

from __future__ import annotations

from torch import Tensor, nn

from companion._checks import check_token_ids
from companion.embeddings import tie_weights
from companion.models.blocks import DecoderLayerCache, Embeddings, config_norm
from companion.models.config import ModelConfig

__all__ = ["ENCODER_IGNORES", "check_caches", "check_ids", "check_unused", "final_norm", "lm_head", "num_parameters"]

# what an encoder's layers (BERT's, ViT's) never read: no mixture of experts, no MLA, no causal window
ENCODER_IGNORES = {"n_experts": 0, "kv_rank": None, "sliding_window": None, "sliding_window_pattern": None}


def num_parameters(model: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of distinct parameters (a tied embedding/output matrix counts once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad or not trainable_only)


def check_ids(name: str, ids: Tensor, offset: int, max_seq_len: int) -> None:
    check_token_ids(name, ids, ndim=2)  # dtype and shape only; TokenEmbedding checks the range
    if offset + ids.size(1) > max_seq_len:
        cached = f" after {offset} cached positions" if offset else ""
        raise ValueError(
            f"{name} has length {ids.size(1)}{cached}, {offset + ids.size(1)} positions in all; "
            f"expected at most max_seq_len={max_seq_len}"
        )


def check_caches(kv_caches: list | None, n_layers: int, kind: type) -> int:
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


def check_unused(config: ModelConfig, model: str, ignored: dict[str, object]) -> None:
    """``ValueError`` naming the first field of ``ignored`` that ``config`` sets away from its default there:
    ``model`` would build without it, silently (an ``Encoder`` has no sliding window, no experts)."""
    for name, default in ignored.items():
        if getattr(config, name) != default:
            raise ValueError(f"{name}={getattr(config, name)!r} is set but {model} does not use it; expected "
                             f"{name}={default!r} (the model would be built without it)")


def final_norm(config: ModelConfig) -> nn.Module | None:
    return config_norm(config) if config.final_norm else None


def lm_head(config: ModelConfig, embeddings: Embeddings) -> nn.Linear:
    """The D -> V output projection; with ``tie_embeddings`` its weight *is* the token table."""
    head = nn.Linear(config.d_model, config.vocab_size, bias=False)
    if config.tie_embeddings:
        tie_weights(head, embeddings.token)
    return head

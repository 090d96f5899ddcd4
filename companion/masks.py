"""Attention masks: causal, padding, sliding-window, prefix-LM, document (packed sequences), and how to combine them.

Convention (the same as ``torch.nn.functional.scaled_dot_product_attention``'s boolean ``attn_mask``):

* a **boolean** mask holds ``True`` where a query **may attend** to a key and ``False`` where it may not;
* an **additive** mask is a float tensor holding ``0`` where attending is allowed and ``-inf`` where it is
  blocked; it is added to the scores ``Q Kᵀ / √D_h`` before the softmax, so blocked keys get weight 0.

Beware: ``torch.nn.MultiheadAttention``'s ``attn_mask`` and ``key_padding_mask`` use the *opposite*
boolean convention (``True`` = blocked). Convert with ``~mask`` when you move between the two.

Combining: boolean masks combine with logical AND (a key is visible only if every mask allows it);
additive masks combine by addition (``-inf`` anywhere stays ``-inf``). :func:`combine_masks` does either,
and converts everything to additive form when the kinds are mixed. Shapes broadcast, so a ``(T, S)``
causal mask and a ``(B, 1, 1, S)`` padding mask combine into ``(B, 1, T, S)``.

Reference checked against: the ``attn_mask`` semantics of ``torch.nn.functional.scaled_dot_product_attention``
(``tests/test_masks.py``, ``tests/test_attention.py``); the sliding window follows Mistral 7B
(Jiang et al., 2023): each query sees the ``window`` most recent keys, itself included; attention sinks
follow StreamingLLM (Xiao et al., 2024); the prefix-LM mask follows UniLM (Dong et al., 2019) and T5's
prefix LM (Raffel et al., 2020). The document mask of packed sequences is checked against attention on
each document separately (``tests/test_masks.py``).
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import check_bool, check_positive_int, check_tensor, check_token_ids

__all__ = [
    "causal_mask",
    "check_sinks",
    "combine_masks",
    "document_mask",
    "padding_mask",
    "prefix_lm_mask",
    "sliding_window_mask",
    "to_additive",
]


def to_additive(mask: Tensor, dtype: torch.dtype = torch.float32) -> Tensor:
    """Return ``mask`` as an additive float mask: 0 where allowed, ``-inf`` where blocked.

    A boolean mask (``True`` = may attend) is converted; a float mask is only cast to ``dtype``.
    """
    check_tensor("mask", mask)
    if not dtype.is_floating_point:
        raise TypeError(f"dtype must be a floating-point dtype, got {dtype}")
    if mask.dtype == torch.bool:
        out = torch.zeros(mask.shape, dtype=dtype, device=mask.device)
        return out.masked_fill_(~mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise TypeError(f"mask must be bool or floating point, got dtype {mask.dtype}")
    return mask.to(dtype)


def _finish(mask: Tensor, additive: bool, dtype: torch.dtype) -> Tensor:
    return to_additive(mask, dtype) if additive else mask


def _key_length(t: int, s: int | None) -> int:
    check_positive_int("t", t)
    if s is None:
        return t
    check_positive_int("s", s)
    if s < t:
        raise ValueError(f"s={s} is smaller than t={t}; expected s >= t (queries are the last t of s)")
    return s


def causal_mask(
    t: int,
    s: int | None = None,
    *,
    additive: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Mask that lets each query see itself and the keys before it, never a later one.

    The ``t`` queries are the *last* ``t`` of ``s`` positions (``s`` defaults to ``t``): query ``i`` sits at
    absolute position ``i + (s - t)`` and may see key ``j`` iff ``j <= i + (s - t)``. With a KV cache holding
    ``s - t`` earlier positions this is exactly the mask the new queries need.

    Shapes:
        returns (T, S), boolean (``True`` = may attend), or float 0/-inf if ``additive``.

    Example (t=3)::

        [[T, F, F],
         [T, T, F],
         [T, T, T]]
    """
    s = _key_length(t, s)
    i = torch.arange(t, device=device).unsqueeze(1)  # (T, 1)
    j = torch.arange(s, device=device).unsqueeze(0)  # (1, S)
    return _finish(j <= i + (s - t), additive, dtype)


def sliding_window_mask(
    t: int,
    window: int,
    s: int | None = None,
    *,
    n_sinks: int = 0,
    additive: bool = False,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> Tensor:
    """Causal mask restricted to the ``window`` most recent keys (the query's own position included).

    Query ``i`` (absolute position ``p = i + (s - t)``) may see key ``j`` iff ``p - window < j <= p``.
    ``window >= s`` gives back :func:`causal_mask`.

    ``n_sinks`` (StreamingLLM's *attention sinks*, Xiao et al. 2024): the first ``n_sinks`` positions stay
    visible to every later query, and the window keeps ``window - n_sinks`` recent keys besides them, so a
    query still sees at most ``window`` keys: key ``j`` is visible iff ``j <= p`` and (``j < n_sinks`` or
    ``p - j < window - n_sinks``). This is what a :class:`~companion.attention.RollingKVCache` of
    ``window`` slots holds.

    Shapes:
        returns (T, S), boolean (``True`` = may attend), or float 0/-inf if ``additive``.

    Raises:
        ValueError: ``window`` < 1, or ``n_sinks`` < 0 or >= ``window`` (no room left for recent keys).
    """
    s = _key_length(t, s)
    check_positive_int("window", window)
    check_sinks(n_sinks, window)
    p = torch.arange(t, device=device).unsqueeze(1) + (s - t)  # (T, 1)
    j = torch.arange(s, device=device).unsqueeze(0)  # (1, S)
    recent = j > p - (window - n_sinks)  # (T, S): the window - n_sinks most recent keys
    return _finish((j <= p) & (recent | (j < n_sinks)), additive, dtype)


def prefix_lm_mask(
    t: int, prefix_len: int, *, additive: bool = False, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Mask of a prefix language model: the first ``prefix_len`` positions see each other, the rest are causal.

    The prefix (a prompt, a source sentence, an image's patches) is read bidirectionally, like an encoder;
    the positions after it are generated one at a time and see the whole prefix plus the positions before
    them. Query ``i`` may see key ``j`` iff ``j <= i`` or ``j < prefix_len``. ``prefix_len=0`` (or 1) gives
    back :func:`causal_mask`; ``prefix_len=t`` lets everyone see everyone.

    Example (t=4, prefix_len=2)::

        [[T, T, F, F],
         [T, T, F, F],
         [T, T, T, F],
         [T, T, T, T]]

    Shapes:
        returns (T, T), boolean (``True`` = may attend), or float 0/-inf if ``additive``.

    Raises:
        ValueError: ``t`` < 1, or ``prefix_len`` outside 0..t.
    """
    check_positive_int("t", t)
    check_positive_int("prefix_len", prefix_len, allow_zero=True)
    if prefix_len > t:
        raise ValueError(f"prefix_len={prefix_len} is larger than t={t}; expected 0 <= prefix_len <= t")
    j = torch.arange(t).unsqueeze(0)  # (1, T)
    return _finish(causal_mask(t) | (j < prefix_len), additive, dtype)  # (T, T)


def check_sinks(n_sinks: int, window: int) -> None:
    """``ValueError`` unless 0 <= ``n_sinks`` < ``window``: the sinks share the window with >= 1 recent key."""
    check_positive_int("n_sinks", n_sinks, allow_zero=True)
    if n_sinks >= window:
        raise ValueError(
            f"n_sinks={n_sinks} is not smaller than the window={window}; expected 0 <= n_sinks < window "
            "(the sinks share the window's slots with at least one recent key)"
        )


def padding_mask(
    ids: Tensor, pad_id: int, *, additive: bool = False, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Mask that hides the padding keys of a batch of token ids.

    Key ``j`` of sequence ``b`` is visible iff ``ids[b, j] != pad_id``. The result has two singleton axes so
    that it broadcasts over heads and queries.

    Shapes:
        ids: (B, S) integer token ids; returns (B, 1, 1, S).
    """
    check_token_ids("ids", ids, ndim=2)
    if isinstance(pad_id, bool) or not isinstance(pad_id, int):
        raise TypeError(f"pad_id must be an int, got {pad_id!r} ({type(pad_id).__name__})")
    keep = (ids != pad_id)[:, None, None, :]  # (B, 1, 1, S)
    return _finish(keep, additive, dtype)


def document_mask(
    doc_ids: Tensor, *, causal: bool = True, additive: bool = False, dtype: torch.dtype = torch.float32
) -> Tensor:
    """Mask for *packed* sequences: each query sees only keys of its own document (and, if ``causal``, none after it).

    Packing puts several short documents into one row of T tokens instead of padding each to T. ``doc_ids[t]``
    names the document of position t (positions with the same id are one document; usually
    ``0, 0, 0, 1, 1, 2, …``). Query i may see key j iff ``doc_ids[j] == doc_ids[i]`` (and ``j <= i`` if
    ``causal``): for contiguous documents a block-diagonal mask with one causal block per document, so that
    attention over the packed row computes what attention over each document alone would.

    Example (doc_ids = [0, 0, 1, 1, 1], causal)::

        [[T, F, F, F, F],
         [T, T, F, F, F],
         [F, F, T, F, F],
         [F, F, T, T, F],
         [F, F, T, T, T]]

    Shapes:
        doc_ids: (T,) or (B, T) integer -> returns (T, T) or (B, 1, T, T) (broadcast over heads), boolean
        (``True`` = may attend), or float 0/-inf if ``additive``.

    Raises:
        TypeError: ``doc_ids`` not an integer tensor, ``causal`` not a bool.
        ValueError: ``doc_ids`` empty or not 1-D or 2-D.
    """
    check_token_ids("doc_ids", doc_ids, ndim=(1, 2))
    check_bool("causal", causal)
    same = doc_ids.unsqueeze(-1) == doc_ids.unsqueeze(-2)  # (..., T, T): the query's document is the key's
    if causal:
        same = same & causal_mask(doc_ids.shape[-1], device=doc_ids.device)  # (..., T, T)
    if doc_ids.ndim == 2:
        same = same.unsqueeze(1)  # (B, 1, T, T)
    return _finish(same, additive, dtype)


def combine_masks(*masks: Tensor | None) -> Tensor | None:
    """Combine masks into one that allows a key only where *every* mask allows it.

    ``None`` entries are skipped (``combine_masks()`` or all ``None`` returns ``None``).
    All boolean: logical AND. Otherwise every mask is made additive (:func:`to_additive`, float dtype
    promoted across the float masks) and they are summed. Shapes broadcast against each other.
    """
    present = [m for m in masks if m is not None]
    for n, m in enumerate(present):
        check_tensor(f"masks[{n}]", m)
        if m.dtype != torch.bool and not m.dtype.is_floating_point:
            raise TypeError(f"masks[{n}] must be bool or floating point, got dtype {m.dtype}")
    if not present:
        return None
    try:
        torch.broadcast_shapes(*(m.shape for m in present))
    except RuntimeError as err:
        shapes = ", ".join(str(tuple(m.shape)) for m in present)
        raise ValueError(f"masks with shapes {shapes} do not broadcast against each other") from err
    if all(m.dtype == torch.bool for m in present):
        out = present[0]
        for m in present[1:]:
            out = out & m
        return out
    floats = [m.dtype for m in present if m.dtype != torch.bool]
    dtype = floats[0]
    for d in floats[1:]:
        dtype = torch.promote_types(dtype, d)
    out = to_additive(present[0], dtype)
    for m in present[1:]:
        out = out + to_additive(m, dtype)
    return out

"""The decoding loop: greedy and sampled generation, beam search, and what a model must offer to be decoded.

A decoder turns the last position's logits (V scores) into the next token, appends it and repeats
(the notes' 自回归生成 loop: [START] → I → love → NLP → END). With a KV cache (``use_cache=True``) the
prompt is run once and every later step feeds only the new token; without it the whole sequence is
recomputed every step. Both paths give the same tokens (tests/test_generation.py).

**What a model must offer** (:class:`Decodable`): ``model(ids, kv_caches=caches) -> (B, T, V)``
logits, ``model.new_kv_caches()`` (a list of per-layer caches, each with ``length`` and
``reorder(index)``), and ``model.config.max_seq_len`` (``config.vocab_size`` too, if it has one, is used
to check ``eos_id`` and the prompt). ``companion.models.GPT`` fits as is; :mod:`companion.generation.adapters`
makes the rest fit.

References: Wu et al. 2016, GNMT (beam search with a length penalty); the token choice itself is
:mod:`companion.generation.sampling`.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Protocol, runtime_checkable

import torch
from torch import Tensor, nn

from companion._checks import (
    check_bool,
    check_number,
    check_positive_int,
    check_token_id,
    check_token_ids,
)
from companion.generation.sampling import check_sampling, pick_next
from companion.generation.utf8 import Utf8Mask

__all__ = [
    "Decodable",
    "beam_search",
    "eval_mode",
    "generate",
]


# --- the interface a decodable model offers ------------------------------------------------------


@runtime_checkable
class Decodable(Protocol):
    """What :func:`generate` and :func:`beam_search` need from a model.

    - ``config.max_seq_len``: the longest sequence (prompt + new tokens) it accepts; ``config.vocab_size``
      is optional and, when present, lets the prompt and ``eos_id`` be checked before decoding starts.
    - ``__call__(ids, kv_caches=None) -> logits``: ids (B, T) -> (B, T, V). With ``kv_caches`` (from
      ``new_kv_caches``) ``ids`` holds only the new tokens; the caches hold what came before.
    - ``new_kv_caches() -> list``: fresh, empty caches, one object per layer; each has a ``length``
      (positions held) and ``reorder(index)`` (keep batch rows ``index``, for beam search).

    ``companion.models.GPT`` is one; the adapters of :mod:`companion.generation.adapters` turn an encoder–decoder,
    a logits function or a bigram table into one. ``isinstance(model, Decodable)`` checks that the names
    exist (not their signatures).
    """

    config: Any

    def __call__(self, ids: Tensor, kv_caches: list[Any] | None = None) -> Tensor: ...

    def new_kv_caches(self) -> list[Any]: ...


def _check_decodable(model: Any, *, use_cache: bool, who: str) -> int:
    """Raise ``TypeError`` naming what ``model`` lacks; return ``model.config.max_seq_len``."""
    if not callable(model):
        raise TypeError(f"{who}: model must be callable (ids -> logits), got {type(model).__name__}")
    max_seq_len = getattr(getattr(model, "config", None), "max_seq_len", None)
    if isinstance(max_seq_len, bool) or not isinstance(max_seq_len, int):
        raise TypeError(
            f"{who}: model.config.max_seq_len must be an int, got {max_seq_len!r}; the model needs a config "
            "(companion.generation.DecodingConfig) saying how long a sequence it accepts"
        )
    if use_cache:
        if not callable(getattr(model, "new_kv_caches", None)):
            raise TypeError(
                f"{who}: model {type(model).__name__} has no new_kv_caches(); pass use_cache=False, or wrap it "
                "(companion.generation: ConditionedDecoder, FunctionModel, BigramModel)"
            )
        forward = model.forward if isinstance(model, nn.Module) else model
        try:
            params = inspect.signature(forward).parameters
        except (TypeError, ValueError):  # a builtin without a signature: let the call decide
            params = None
        if params is not None and "kv_caches" not in params and not any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()
        ):
            raise TypeError(f"{who}: model {type(model).__name__}'s forward takes no kv_caches argument; "
                            "pass use_cache=False, or see companion.generation.Decodable")
    return max_seq_len


def _vocab_size(model: Any) -> int | None:
    v = getattr(model.config, "vocab_size", None)
    return v if isinstance(v, int) and not isinstance(v, bool) else None


@contextmanager
def eval_mode(model: Any) -> Iterator[Any]:
    """Put ``model`` (and every submodule) in eval mode inside the ``with`` block; restore each module's
    own mode afterwards, also when the block raises. Objects that are not ``nn.Module`` pass through."""
    if not isinstance(model, nn.Module):
        yield model
        return
    modes = [(m, m.training) for m in model.modules()]
    model.eval()
    try:
        yield model
    finally:
        for m, training in modes:
            m.training = training


def _check_prompt(ids: Tensor, max_new_tokens: int, max_seq_len: int, vocab_size: int | None) -> None:
    check_token_ids("ids", ids, ndim=2, vocab_size=vocab_size)  # once, before decoding: one read-back
    check_positive_int("max_new_tokens", max_new_tokens, allow_zero=True)
    if ids.size(1) > max_seq_len:
        raise ValueError(f"prompt length {ids.size(1)} exceeds the model's max_seq_len={max_seq_len}")
    if ids.size(1) + max_new_tokens > max_seq_len:
        raise ValueError(
            f"prompt length {ids.size(1)} + max_new_tokens={max_new_tokens} = {ids.size(1) + max_new_tokens} "
            f"exceeds the model's max_seq_len={max_seq_len}"
        )


def _check_eos(eos_id: int | None, vocab_size: int | None) -> None:
    if eos_id is not None:
        check_token_id("eos_id", eos_id, vocab_size)


def _check_logits(logits: Tensor, batch: int, eos_id: int | None) -> None:
    """Once, on the first step: the model returned (B, T, V) logits, and ``eos_id`` is one of the V."""
    if not isinstance(logits, Tensor) or logits.dim() != 3 or logits.size(0) != batch:
        got = tuple(logits.shape) if isinstance(logits, Tensor) else type(logits).__name__
        raise ValueError(f"model returned logits of shape {got}; expected (B={batch}, T, V)")
    if eos_id is not None and eos_id >= logits.size(-1):
        raise ValueError(f"eos_id={eos_id} is outside the vocabulary; expected 0 <= eos_id < V={logits.size(-1)}")


def _make_generator(generator: torch.Generator | int | None, device: torch.device) -> torch.Generator | None:
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, int):
        raise TypeError(f"generator must be a torch.Generator, an int seed or None, got {generator!r}")
    return torch.Generator(device=device).manual_seed(generator)


# --- decoder-only generation ---------------------------------------------------------------------


def generate(
    model: Decodable,
    ids: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float | None = None,
    greedy: bool = False,
    eos_id: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | int | None = None,
    valid_utf8: Utf8Mask | None = None,
) -> Tensor:
    """Continue each prompt of ``ids`` by up to ``max_new_tokens`` tokens.

    Args:
        model: a :class:`Decodable` model (``companion.models.GPT``, or an adapter from
            :mod:`companion.generation.adapters`); in eval mode while generating, its own mode restored afterwards.
            It runs under ``torch.inference_mode()``: a model that keeps a tensor it made while decoding keeps an
            inference tensor (PyTorch refuses to save those for backward; ``.clone()`` one outside to train on it).
        ids: prompt token ids (int16, int32 or int64).
        max_new_tokens: how many tokens to append (prompt + new tokens must fit ``max_seq_len``).
        temperature: logits are divided by it before sampling (ignored when ``greedy``).
        top_k: sample only among the ``top_k`` most likely tokens.
        top_p: sample only among the smallest set of tokens whose probability reaches ``top_p``.
        min_p: sample only among the tokens at least ``min_p`` times as likely as the most likely one.
        repetition_penalty: > 1 makes every token already in the sequence (prompt included) less likely,
            greedy or sampled (CTRL's rule, :func:`~companion.generation.sampling.apply_repetition_penalty`).
        greedy: take the argmax instead of sampling.
        eos_id: a row that produced ``eos_id`` is finished; it is padded with ``eos_id`` afterwards,
            and generation stops early once every row is finished.
        use_cache: feed only the new token each step and reuse cached keys/values (same result, faster).
        generator: a ``torch.Generator`` or an int seed for reproducible sampling.
        valid_utf8: for a byte-level tokenizer, a :class:`~companion.generation.utf8.Utf8Mask` of its tokens'
            bytes: each step chooses only among tokens that keep the bytes valid UTF-8 and can still end on a
            whole character, so the text decodes without U+FFFD (applied before temperature, top-k, top-p).

    Returns:
        the prompts followed by the new tokens, as int64.

    Raises:
        TypeError: a model without the :class:`Decodable` interface, ids that are not integer.
        ValueError: empty prompt, prompt (plus new tokens) longer than ``max_seq_len``, temperature <= 0
            while sampling, ``top_k < 1``, ``top_p`` outside (0, 1], ``min_p`` outside [0, 1],
            ``repetition_penalty <= 0``, ``eos_id`` outside the vocabulary; a ``valid_utf8`` mask of more ids
            than the model has, or one that can never allow ``eos_id``.

    Shapes: ids (B, T) -> (B, T + n) with n <= max_new_tokens.
    """
    max_seq_len = _check_decodable(model, use_cache=use_cache, who="generate")
    check_bool("use_cache", use_cache)
    check_sampling(temperature, top_k, top_p, greedy, min_p, repetition_penalty)
    if valid_utf8 is not None and not isinstance(valid_utf8, Utf8Mask):
        raise TypeError(f"valid_utf8 must be a companion.generation.Utf8Mask or None, got {type(valid_utf8).__name__}")
    vocab_size = _vocab_size(model)
    _check_prompt(ids, max_new_tokens, max_seq_len, vocab_size)
    _check_eos(eos_id, vocab_size)
    if valid_utf8 is not None:
        valid_utf8.check_fits(vocab_size, eos_id)
    gen = _make_generator(generator, ids.device)
    states = valid_utf8.start_states(ids) if valid_utf8 is not None else None  # (B,) the prompts' last characters
    ids = ids.long()
    b, t = ids.shape
    out = torch.empty(b, t + max_new_tokens, dtype=torch.long, device=ids.device)  # filled step by step
    out[:, :t] = ids
    step_input = ids
    finished = torch.zeros(b, dtype=torch.bool, device=ids.device)  # (B,)
    n = max_new_tokens  # tokens generated: fewer if every row finishes early
    # Everything was checked above, once; the loop does no read-back to the host except the eos test.
    # Inference mode rather than no_grad: no autograd bookkeeping at all (version counters, views), a few percent
    # faster per step. `out` and `finished` were made outside it: the tokens come back as an ordinary tensor.
    with eval_mode(model), torch.inference_mode():
        caches = model.new_kv_caches() if use_cache else None
        for step in range(max_new_tokens):
            logits = model(step_input, kv_caches=caches) if use_cache else model(step_input)  # (B, T, V)
            if step == 0:
                _check_logits(logits, b, eos_id)
            logits = logits[:, -1, :]  # (B, V): only the last position predicts
            if states is not None:  # only tokens that keep the bytes valid UTF-8 (and can finish in time)
                logits = valid_utf8.mask_logits(logits, states, max_new_tokens - step)
            next_id = pick_next(logits, temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy, generator=gen,
                                min_p=min_p, repetition_penalty=repetition_penalty, previous=out[:, : t + step])
            if states is not None:
                states = valid_utf8.advance(states, next_id)
            if eos_id is not None:
                next_id = next_id.masked_fill(finished, eos_id)
                finished |= next_id == eos_id
            out[:, t + step] = next_id  # (B, T + step + 1) filled
            # with a cache only the new token goes in; without one the whole sequence so far
            step_input = out[:, t + step : t + step + 1] if use_cache else out[:, : t + step + 1]
            if eos_id is not None and bool(finished.all()):
                n = step + 1
                break
    return out if n == max_new_tokens else out[:, : t + n]  # sliced outside inference mode: an ordinary view


@torch.no_grad()
def beam_search(
    model: Decodable,
    ids: Tensor,
    beam_width: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    eos_id: int | None = None,
    *,
    use_cache: bool = True,
) -> Tensor:
    """Keep the ``beam_width`` most likely continuations; return the best one.

    Each step extends every live beam by every token, scores each candidate by its summed log
    probability and keeps the best ``beam_width`` that did not end with ``eos_id``; candidates that
    end with ``eos_id`` are set aside as finished. The search stops when ``beam_width`` hypotheses are
    finished or after ``max_new_tokens`` steps. Finished hypotheses are ranked by
    ``sum log p / n_new ** length_penalty`` (GNMT-style; 0 = no normalisation, > 0 favours longer
    outputs). With ``beam_width=1`` this is greedy decoding.

    With ``use_cache`` the beams share one KV cache: after each step every layer's cache keeps the rows
    of the surviving beams (``cache.reorder(parents)``, a beam that has two children appears twice) and
    only the new tokens are fed. Without it every beam is recomputed in full; both give the same result
    (tests/test_generation.py).

    Shapes: ids (1, T) -> (1, T + n) with n <= max_new_tokens.
    """
    max_seq_len = _check_decodable(model, use_cache=use_cache, who="beam_search")
    check_bool("use_cache", use_cache)
    check_positive_int("beam_width", beam_width)
    check_number("length_penalty", length_penalty)
    vocab_size = _vocab_size(model)
    _check_prompt(ids, max_new_tokens, max_seq_len, vocab_size)
    _check_eos(eos_id, vocab_size)
    if ids.size(0) != 1:
        raise ValueError(f"beam_search takes one prompt, got ids of shape {tuple(ids.shape)}; expected (1, T)")
    ids = ids.long()
    prompt_len = ids.size(1)
    beams, scores = ids, torch.zeros(1, device=ids.device)  # (K, T), (K,)
    finished: list[tuple[float, Tensor]] = []

    def normalised(score: float, seq_len: int) -> float:
        return score / max(seq_len - prompt_len, 1) ** length_penalty

    with eval_mode(model):
        caches = model.new_kv_caches() if use_cache else None
        step_input = ids
        for step in range(max_new_tokens):
            logits = model(step_input, kv_caches=caches) if use_cache else model(beams)  # (K, T, V)
            if step == 0:
                _check_logits(logits, beams.size(0), eos_id)
            logp = torch.log_softmax(logits[:, -1, :].float(), dim=-1)  # (K, V)
            vocab = logp.size(-1)
            candidates = (scores[:, None] + logp).flatten()  # (K * V,)
            top = torch.topk(candidates, min(2 * beam_width, candidates.numel()))
            parents, tokens, new_scores = [], [], []
            for score, flat in zip(top.values.tolist(), top.indices.tolist()):
                beam, token = divmod(flat, vocab)
                if eos_id is not None and token == eos_id:
                    seq = torch.cat([beams[beam], beams.new_tensor([token])])  # (T + 1,)
                    finished.append((normalised(score, seq.numel()), seq))
                else:
                    parents.append(beam)
                    tokens.append(token)
                    new_scores.append(score)
                if len(parents) == beam_width:
                    break
            if not parents:  # every candidate ended: nothing left to extend
                beams = beams[:0]
                break
            index = torch.tensor(parents, device=ids.device)  # (K_new,): the beam each survivor extends
            beams = torch.cat([beams[index], beams.new_tensor(tokens)[:, None]], dim=1)  # (K_new, T + 1)
            scores = scores.new_tensor(new_scores)  # (K_new,)
            if len(finished) >= beam_width:
                break
            if use_cache and step + 1 < max_new_tokens:
                for cache in caches:
                    cache.reorder(index)  # each layer keeps the rows of the surviving beams' parents
                step_input = beams[:, -1:]  # (K_new, 1): only the new tokens go in
    if len(finished) < beam_width:  # not enough finished hypotheses: live beams compete too
        finished += [(normalised(s, b.numel()), b) for s, b in zip(scores.tolist(), beams)]
    best = max(finished, key=lambda pair: pair[0])[1]
    return best[None, :]



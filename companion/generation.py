"""Autoregressive decoding: greedy, temperature, top-k, top-p (nucleus) sampling, beam search, translation.

A decoder turns the last position's logits (V scores) into the next token, appends it and repeats
(the notes' 自回归生成 loop: [START] → I → love → NLP → END). With a KV cache (``use_cache=True``) the
prompt is run once and every later step feeds only the new token; without it the whole sequence is
recomputed every step. Both paths give the same tokens (tests/test_generation.py).

References: Holtzman et al. 2020, "The Curious Case of Neural Text Degeneration" (top-p); Fan et al.
2018 (top-k); Wu et al. 2016, GNMT (beam search with a length penalty). The filters follow the
behaviour of Hugging Face ``TopKLogitsWarper`` / ``TopPLogitsWarper``: ties at the k-th logit are
kept, and top-p keeps the smallest set of most likely tokens whose probabilities reach ``p``.

Models: anything with ``forward(ids, kv_caches=None) -> (B, T, V)``, ``new_kv_caches()`` and
``config.max_seq_len`` (``companion.models.GPT``); ``translate`` takes a ``companion.models.Transformer``.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from companion._checks import check_positive_int, check_tensor

__all__ = ["apply_temperature", "beam_search", "generate", "top_k_filter", "top_p_filter", "translate"]


# --- pure helpers on logits (..., V) -------------------------------------------------------------


def apply_temperature(logits: Tensor, temperature: float) -> Tensor:
    """Divide logits by ``temperature``: < 1 sharpens the softmax, > 1 flattens it.

    Shapes: logits (..., V) -> (..., V).
    """
    if not temperature > 0:
        raise ValueError(f"temperature={temperature} is invalid; expected > 0 (use greedy=True for argmax)")
    return logits / temperature


def top_k_filter(logits: Tensor, k: int) -> Tensor:
    """Keep the ``k`` largest logits of each row (ties with the k-th are kept); set the rest to -inf.

    Shapes: logits (..., V) -> (..., V).
    """
    check_positive_int("top_k", k)
    k = min(k, logits.size(-1))
    kth = torch.topk(logits, k, dim=-1).values[..., -1:]  # (..., 1)
    return logits.masked_fill(logits < kth, float("-inf"))


def top_p_filter(logits: Tensor, p: float) -> Tensor:
    """Nucleus filter: keep the smallest set of most likely tokens whose probabilities sum to >= ``p``.

    The most likely token is always kept, so ``p`` close to 0 means greedy and ``p=1`` keeps everything.

    Shapes: logits (..., V) -> (..., V).
    """
    if not 0.0 < p <= 1.0:
        raise ValueError(f"top_p={p} is invalid; expected 0 < top_p <= 1")
    if p == 1.0:  # everything; also spares the last tokens from a cumulative sum that rounds past 1
        return logits
    sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (..., V)
    probs = torch.softmax(sorted_logits.float(), dim=-1)  # float32 for a stable cumulative sum
    mass_before = probs.cumsum(dim=-1) - probs  # probability of the tokens ranked above each one
    drop_sorted = mass_before >= p  # the set already reached p before this token
    drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
    return logits.masked_fill(drop, float("-inf"))


def _check_sampling(temperature: float, top_k: int | None, top_p: float | None, greedy: bool) -> None:
    if not greedy and not temperature > 0:
        raise ValueError(f"temperature={temperature} is invalid while sampling; expected > 0 (or greedy=True)")
    if top_k is not None:
        check_positive_int("top_k", top_k)
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p={top_p} is invalid; expected 0 < top_p <= 1")


def _pick(
    logits: Tensor,
    *,
    temperature: float,
    top_k: int | None,
    top_p: float | None,
    greedy: bool,
    generator: torch.Generator | None,
) -> Tensor:
    """Next token for each row of ``logits`` (B, V) -> (B,)."""
    if greedy:
        return logits.argmax(dim=-1)
    logits = apply_temperature(logits.float(), temperature)
    if top_k is not None:
        logits = top_k_filter(logits, top_k)
    if top_p is not None:
        logits = top_p_filter(logits, top_p)
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)  # (B,)


def _check_prompt(ids: Tensor, max_new_tokens: int, max_seq_len: int) -> None:
    check_tensor("ids", ids, ndim=2)
    if ids.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"ids must hold integer token ids, got dtype {ids.dtype}")
    check_positive_int("max_new_tokens", max_new_tokens, allow_zero=True)
    if ids.size(1) > max_seq_len:
        raise ValueError(f"prompt length {ids.size(1)} exceeds the model's max_seq_len={max_seq_len}")
    if ids.size(1) + max_new_tokens > max_seq_len:
        raise ValueError(
            f"prompt length {ids.size(1)} + max_new_tokens={max_new_tokens} = {ids.size(1) + max_new_tokens} "
            f"exceeds the model's max_seq_len={max_seq_len}"
        )


def _make_generator(generator: torch.Generator | int | None, device: torch.device) -> torch.Generator | None:
    if generator is None or isinstance(generator, torch.Generator):
        return generator
    if isinstance(generator, bool) or not isinstance(generator, int):
        raise TypeError(f"generator must be a torch.Generator, an int seed or None, got {generator!r}")
    return torch.Generator(device=device).manual_seed(generator)


# --- decoder-only generation ---------------------------------------------------------------------


@torch.no_grad()
def generate(
    model: nn.Module,
    ids: Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    greedy: bool = False,
    eos_id: int | None = None,
    use_cache: bool = True,
    generator: torch.Generator | int | None = None,
) -> Tensor:
    """Continue each prompt of ``ids`` by up to ``max_new_tokens`` tokens.

    Args:
        model: a decoder-only model (``companion.models.GPT``); put in eval mode while generating.
        ids: prompt token ids.
        max_new_tokens: how many tokens to append (prompt + new tokens must fit ``max_seq_len``).
        temperature: logits are divided by it before sampling (ignored when ``greedy``).
        top_k: sample only among the ``top_k`` most likely tokens.
        top_p: sample only among the smallest set of tokens whose probability reaches ``top_p``.
        greedy: take the argmax instead of sampling.
        eos_id: a row that produced ``eos_id`` is finished; it is padded with ``eos_id`` afterwards,
            and generation stops early once every row is finished.
        use_cache: feed only the new token each step and reuse cached keys/values (same result, faster).
        generator: a ``torch.Generator`` or an int seed for reproducible sampling.

    Returns:
        the prompts followed by the new tokens.

    Raises:
        ValueError: empty prompt, prompt (plus new tokens) longer than ``max_seq_len``, temperature <= 0
            while sampling, ``top_k < 1``, ``top_p`` outside (0, 1].

    Shapes: ids (B, T) -> (B, T + n) with n <= max_new_tokens.
    """
    _check_sampling(temperature, top_k, top_p, greedy)
    _check_prompt(ids, max_new_tokens, model.config.max_seq_len)
    gen = _make_generator(generator, ids.device)
    was_training = model.training
    model.eval()
    caches = model.new_kv_caches() if use_cache else None
    out, step_input = ids, ids
    finished = torch.zeros(ids.size(0), dtype=torch.bool, device=ids.device)  # (B,)
    for _ in range(max_new_tokens):
        logits = model(step_input, kv_caches=caches)[:, -1, :]  # (B, V): only the last position predicts
        next_id = _pick(logits, temperature=temperature, top_k=top_k, top_p=top_p, greedy=greedy, generator=gen)
        if eos_id is not None:
            next_id = next_id.masked_fill(finished, eos_id)
            finished |= next_id == eos_id
        out = torch.cat([out, next_id[:, None]], dim=1)  # (B, T + 1)
        step_input = next_id[:, None] if use_cache else out  # with a cache, only the new token goes in
        if eos_id is not None and bool(finished.all()):
            break
    model.train(was_training)
    return out


@torch.no_grad()
def beam_search(
    model: nn.Module,
    ids: Tensor,
    beam_width: int,
    max_new_tokens: int,
    length_penalty: float = 1.0,
    eos_id: int | None = None,
) -> Tensor:
    """Keep the ``beam_width`` most likely continuations; return the best one.

    Each step extends every live beam by every token, scores each candidate by its summed log
    probability and keeps the best ``beam_width`` that did not end with ``eos_id``; candidates that
    end with ``eos_id`` are set aside as finished. The search stops when ``beam_width`` hypotheses are
    finished or after ``max_new_tokens`` steps. Finished hypotheses are ranked by
    ``sum log p / n_new ** length_penalty`` (GNMT-style; 0 = no normalisation, > 0 favours longer
    outputs). With ``beam_width=1`` this is greedy decoding. Beams are recomputed in full each step
    (no KV cache) to keep the bookkeeping readable.

    Shapes: ids (1, T) -> (1, T + n) with n <= max_new_tokens.
    """
    check_positive_int("beam_width", beam_width)
    _check_prompt(ids, max_new_tokens, model.config.max_seq_len)
    if ids.size(0) != 1:
        raise ValueError(f"beam_search takes one prompt, got ids of shape {tuple(ids.shape)}; expected (1, T)")
    was_training = model.training
    model.eval()
    prompt_len = ids.size(1)
    beams, scores = ids, torch.zeros(1, device=ids.device)  # (K, T), (K,)
    finished: list[tuple[float, Tensor]] = []

    def normalised(score: float, seq_len: int) -> float:
        return score / max(seq_len - prompt_len, 1) ** length_penalty

    for _ in range(max_new_tokens):
        logp = torch.log_softmax(model(beams)[:, -1, :].float(), dim=-1)  # (K, V)
        vocab = logp.size(-1)
        candidates = (scores[:, None] + logp).flatten()  # (K * V,)
        top = torch.topk(candidates, min(2 * beam_width, candidates.numel()))
        new_beams, new_scores = [], []
        for score, flat in zip(top.values.tolist(), top.indices.tolist()):
            beam, token = divmod(flat, vocab)
            seq = torch.cat([beams[beam], beams.new_tensor([token])])  # (T + 1,)
            if eos_id is not None and token == eos_id:
                finished.append((normalised(score, seq.numel()), seq))
            else:
                new_beams.append(seq)
                new_scores.append(score)
            if len(new_beams) == beam_width:
                break
        beams, scores = torch.stack(new_beams), scores.new_tensor(new_scores)  # (K, T + 1), (K,)
        if len(finished) >= beam_width:
            break
    if len(finished) < beam_width:  # not enough finished hypotheses: live beams compete too
        finished += [(normalised(s, b.numel()), b) for s, b in zip(scores.tolist(), beams)]
    model.train(was_training)
    best = max(finished, key=lambda pair: pair[0])[1]
    return best[None, :]


# --- encoder-decoder translation -----------------------------------------------------------------


@torch.no_grad()
def translate(
    model: nn.Module,
    src: Tensor,
    bos_id: int,
    eos_id: int,
    max_len: int,
    *,
    src_pad_id: int | None = None,
    use_cache: bool = True,
) -> Tensor:
    """Greedy translation with an encoder-decoder ``Transformer``: encode once, decode token by token.

    The encoder runs once and its output H is handed to every decoder layer's cross-attention. With
    ``use_cache`` each step feeds only the newest target token: self-attention keys/values of earlier
    target tokens and the cross-attention keys/values of H come from the caches.

    Shapes: src (B, S) -> (B, 1 + n): ``bos_id`` followed by n <= max_len tokens; rows that finished
    early are padded with ``eos_id``.
    """
    from companion.masks import padding_mask

    check_tensor("src", src, ndim=2)
    check_positive_int("max_len", max_len)
    if max_len + 1 > model.config.max_seq_len:
        raise ValueError(f"max_len={max_len} plus the start token exceeds max_seq_len={model.config.max_seq_len}")
    was_training = model.training
    model.eval()
    src_mask = padding_mask(src, src_pad_id) if src_pad_id is not None else None  # (B, 1, 1, S)
    memory = model.encode(src, src_mask)  # (B, S, D): computed once
    caches = model.new_kv_caches() if use_cache else None
    out = torch.full((src.size(0), 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(src.size(0), dtype=torch.bool, device=src.device)
    for _ in range(max_len):
        step_input = out[:, -1:] if use_cache else out
        logits = model.decode(step_input, memory, memory_mask=src_mask, kv_caches=caches)[:, -1, :]  # (B, V)
        next_id = logits.argmax(dim=-1).masked_fill(finished, eos_id)  # (B,)
        finished |= next_id == eos_id
        out = torch.cat([out, next_id[:, None]], dim=1)  # (B, t + 1)
        if bool(finished.all()):
            break
    model.train(was_training)
    return out

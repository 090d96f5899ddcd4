"""Speculative decoding: a cheap draft model proposes a few tokens, the target model checks them in one pass.

Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding"; Chen et al. 2023,
"Accelerating Large Language Model Decoding with Speculative Sampling". One round:

1. the draft proposes ``k`` tokens one at a time, x_i ~ q_i (its own next-token distributions);
2. one target pass over the sequence plus x_1 … x_k gives the target's distributions p_1 … p_{k+1};
3. draft token x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i)); at the first rejection the
   round ends with a token drawn from the residual max(0, p_i − q_i), renormalised; if all k are
   accepted, a bonus token is drawn from p_{k+1}.

A round therefore emits between 1 and k + 1 tokens for one target pass, and every emitted token follows the
target's distribution exactly: P(emit x) = q(x)·min(1, p(x)/q(x)) + P(reject)·residual(x) = min(p(x), q(x))
+ max(0, p(x) − q(x)) = p(x), because P(reject) = 1 − Σ_y min(p(y), q(y)) = Σ_y max(0, p(y) − q(y)) is
exactly the residual's normaliser. Greedy decoding is the case of one-hot p and q: accept while the draft's
token is the target's argmax, then emit the target's argmax.

This is a sketch: both models recompute the whole sequence every round (no KV cache; with one, the caches
would have to be cut back after a rejection), for one sequence at a time. Checked in
tests/test_speculative.py: the emitted tokens' frequencies match p, not q; greedy speculative decoding
returns exactly the target's greedy tokens; a draft equal to the target has every proposal accepted.

Shapes: N independent rows, k drafted tokens, V vocabulary.
"""

from __future__ import annotations

import torch
from torch import Tensor

from companion._checks import check_bool, check_positive_float, check_positive_int, check_tensor, check_token_ids
from companion.generation.decoding import (
    Decodable,
    _check_decodable,
    _check_eos,
    _check_logits,
    _check_prompt,
    _make_generator,
    _vocab_size,
    eval_mode,
)

__all__ = ["speculative_accept", "speculative_generate"]


def speculative_accept(
    p: Tensor, q: Tensor, draft_ids: Tensor, generator: torch.Generator | None = None
) -> tuple[Tensor, Tensor]:
    """The acceptance rule of speculative sampling, for N independent rounds at once.

    Args:
        p: the target's next-token probabilities at the k drafted positions and one more, (N, k + 1, V).
        q: the draft's probabilities from which ``draft_ids`` were drawn, (N, k, V).
        draft_ids: the drafted tokens, (N, k) integer ids.
        generator: for the uniform draws and the replacement token.

    Returns:
        ``(n_accepted, next_id)``, both (N,): how many drafted tokens each round keeps (0 … k), and the token
        that follows them (drawn from the residual at the first rejection, or from p_{k+1} if none).
    """
    check_tensor("p", p, ndim=3)
    for name, x, ndim in (("q", q, 3), ("draft_ids", draft_ids, 2)):  # k = 0 (nothing drafted) is allowed
        if not isinstance(x, Tensor) or x.dim() != ndim:
            got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(f"{name} must be a tensor with {ndim} dimensions, got {got}")
    n, k = draft_ids.shape
    if p.shape[:2] != (n, k + 1) or q.shape != (n, k, p.size(-1)):
        raise ValueError(f"p {tuple(p.shape)}, q {tuple(q.shape)} and draft_ids {tuple(draft_ids.shape)} do not "
                         "fit; expected (N, k + 1, V), (N, k, V) and (N, k)")
    p_x = p[:, :k].gather(-1, draft_ids[..., None])[..., 0]  # (N, k): target probability of each draft token
    q_x = q.gather(-1, draft_ids[..., None])[..., 0]  # (N, k): draft probability (> 0: it was drawn)
    u = torch.rand(n, k, generator=generator, device=p.device)  # (N, k)
    accept = u * q_x < p_x  # u < p/q, i.e. accepted with probability min(1, p/q)
    n_accepted = accept.long().cumprod(dim=-1).sum(dim=-1)  # (N,): the leading run of acceptances
    rows = torch.arange(n, device=p.device)
    q_padded = torch.cat([q, q.new_zeros(n, 1, q.size(-1))], dim=1)  # (N, k + 1, V): q_{k+1} = 0 ...
    residual = (p[rows, n_accepted] - q_padded[rows, n_accepted]).clamp(min=0)  # ... so the bonus draws from p
    empty = residual.sum(dim=-1, keepdim=True) <= 0  # p = q at a rejection: only by rounding
    residual = torch.where(empty, p[rows, n_accepted], residual)  # (N, V)
    next_id = torch.multinomial(residual.float(), 1, generator=generator)[:, 0]  # (N,)
    return n_accepted, next_id


def _probs(logits: Tensor, temperature: float, greedy: bool) -> Tensor:
    """Next-token distributions (..., V): one-hot argmax when greedy, else softmax(logits / temperature)."""
    if greedy:
        return torch.nn.functional.one_hot(logits.argmax(dim=-1), logits.size(-1)).float()
    return torch.softmax(logits.float() / temperature, dim=-1)  # float32 for the softmax


@torch.no_grad()
def speculative_generate(
    target: Decodable,
    draft: Decodable,
    ids: Tensor,
    max_new_tokens: int,
    *,
    n_draft: int = 4,
    temperature: float = 1.0,
    greedy: bool = False,
    eos_id: int | None = None,
    generator: torch.Generator | int | None = None,
) -> tuple[Tensor, list[int]]:
    """Continue the prompt ``ids`` with the target's distribution, ``n_draft`` draft tokens per target pass.

    Args:
        target: the model whose distribution (or greedy choice) the output follows.
        draft: a cheaper model with the same vocabulary that proposes tokens.
        ids: one prompt, (1, T) integer ids.
        max_new_tokens: how many tokens to append at most.
        n_draft: tokens the draft proposes per round (k).
        temperature: both models' logits are divided by it (ignored when ``greedy``).
        greedy: follow the target's argmax (the output equals ``generate(target, ..., greedy=True)``).
        eos_id: stop after this token.
        generator: a ``torch.Generator`` or an int seed.

    Returns:
        ``(ids, accepted)``: the prompt followed by the new tokens, (1, T + n) with n <= max_new_tokens, and
        for each round (one target pass) how many of the draft's tokens were accepted. The draft stops
        proposing after ``eos_id``, so an accepted end token is the last one kept.

    Raises:
        TypeError, ValueError: as :func:`~companion.generation.decoding.generate`; also ``n_draft < 1``, a
        batch of more than one prompt, and models whose vocabularies differ.
    """
    max_len = min(_check_decodable(m, use_cache=False, who="speculative_generate") for m in (target, draft))
    check_positive_int("n_draft", n_draft)
    check_bool("greedy", greedy)
    if not greedy:
        check_positive_float("temperature", temperature)
    check_token_ids("ids", ids, ndim=2)
    if ids.size(0) != 1:
        raise ValueError(f"speculative_generate takes one prompt, got ids of shape {tuple(ids.shape)}; "
                         "expected (1, T)")
    vocab_size = _vocab_size(target)
    _check_prompt(ids, max_new_tokens, max_len, vocab_size)
    _check_eos(eos_id, vocab_size)
    gen = _make_generator(generator, ids.device)
    seq, accepted = ids.long(), []
    with eval_mode(target), eval_mode(draft):
        while seq.size(1) - ids.size(1) < max_new_tokens:
            k = min(n_draft, max_new_tokens - (seq.size(1) - ids.size(1)) - 1)  # room for the round's last token
            x, q_rows = seq, []
            for _ in range(k):  # the draft proposes up to k tokens, one at a time
                q_i = _probs(draft(x)[:, -1], temperature, greedy)  # (1, V)
                x = torch.cat([x, torch.multinomial(q_i, 1, generator=gen)], dim=1)  # one-hot when greedy: argmax
                q_rows.append(q_i)
                if eos_id is not None and int(x[0, -1]) == eos_id:  # nothing follows an end token
                    break
            k = len(q_rows)
            logits = target(x)  # (1, T + k, V): one pass scores all k proposals and the position after them
            if not accepted:
                _check_logits(logits, 1, eos_id)
                if q_rows and q_rows[0].size(-1) != logits.size(-1):
                    raise ValueError(f"draft has V={q_rows[0].size(-1)} but target has V={logits.size(-1)}; "
                                     "expected one vocabulary")
            p = _probs(logits[:, -(k + 1) :], temperature, greedy)  # (1, k + 1, V)
            q = torch.stack(q_rows, dim=1) if q_rows else p.new_zeros(1, 0, p.size(-1))  # (1, k, V)
            n_acc, next_id = speculative_accept(p, q, x[:, seq.size(1) :], gen)
            n_acc = int(n_acc)
            new = torch.cat([x[:, seq.size(1) : seq.size(1) + n_acc], next_id[:, None]], dim=1)  # (1, n_acc + 1)
            accepted.append(n_acc)
            if eos_id is not None and bool((new == eos_id).any()):  # an accepted eos or the target's own
                return torch.cat([seq, new[:, : int((new[0] == eos_id).nonzero()[0]) + 1]], dim=1), accepted
            seq = torch.cat([seq, new], dim=1)
    return seq, accepted

"""A source of known entropy: a random order-k Markov chain whose entropy rate is computed exactly.

The entropy rate (nats/token) is the irreducible loss E of the scaling-law experiment of chapter 10
(Kaplan et al. 2020; Hoffmann et al. 2022): no model can reach a cross-entropy below it on this source.

Checked in ``tests/test_data.py``: the stationary distribution is stationary and equals NumPy's
eigenvector, the empirical log loss converges to the entropy rate, sampling is reproducible and in range,
and bad arguments (including symbols outside the alphabet given to ``log_prob``) raise.
"""

from __future__ import annotations

import bisect

import numpy as np
import torch
from torch import Tensor

from companion._checks import check_positive_float, check_positive_int, check_token_ids

__all__ = ["MarkovSource", "markov_source"]


class MarkovSource:
    """A stationary order-``k`` Markov chain over ``V`` symbols with a known entropy rate.

    The next-symbol distribution of each of the ``V**k`` contexts is drawn from a symmetric Dirichlet;
    a smaller ``concentration`` gives peakier rows and a lower entropy. The entropy rate is exact:

        H = Σ_c π(c) · H(P(· | c))   (nats/token),

    where π is the stationary distribution of the chain on contexts, found by power iteration. No model can
    reach a cross-entropy below H on this source: it is the ``E`` of a scaling law ``L(N) = E + A N^-α``.
    """

    def __init__(self, vocab_size: int, order: int, seed: int = 0, concentration: float = 0.5) -> None:
        check_positive_int("vocab_size", vocab_size)
        check_positive_int("order", order)
        check_positive_int("seed", seed, allow_zero=True)
        if vocab_size ** order > 1 << 16:
            raise ValueError(f"vocab_size**order = {vocab_size}**{order} contexts is too many; expected <= 65536")
        check_positive_float("concentration", concentration)
        self.vocab_size, self.order = vocab_size, order
        rows = np.random.default_rng(seed).dirichlet(np.full(vocab_size, float(concentration)), size=vocab_size**order)
        rows = np.maximum(rows, 1e-300)  # a draw can underflow to 0 for tiny concentrations
        self.transition = torch.from_numpy(rows / rows.sum(-1, keepdims=True))  # (V^k, V) float64
        self.stationary = self._stationary()  # (V^k,)
        row_entropy = -(self.transition * self.transition.log()).sum(-1)  # (V^k,)
        self.entropy_rate = float((self.stationary * row_entropy).sum())  # nats/token

    def _next_context(self, ctx: Tensor, token: Tensor) -> Tensor:
        """Context id after emitting ``token``: drop the oldest symbol, append the new one."""
        return (ctx * self.vocab_size + token) % (self.vocab_size ** self.order)

    def _stationary(self, iters: int = 20_000, tol: float = 1e-13) -> Tensor:
        """π with π P = π on contexts: a direct linear solve for small chains, power iteration for big ones."""
        n_ctx = self.vocab_size**self.order
        successors = self._next_context(torch.arange(n_ctx)[:, None], torch.arange(self.vocab_size))  # (V^k, V)
        if n_ctx <= 1024:
            p = torch.zeros(n_ctx, n_ctx, dtype=torch.float64)  # (V^k, V^k) context-to-context transitions
            p.scatter_add_(1, successors, self.transition)
            a = (p.T - torch.eye(n_ctx, dtype=torch.float64)).clone()
            a[-1] = 1.0  # replace one (redundant) balance equation by sum(pi) = 1
            b = torch.zeros(n_ctx, dtype=torch.float64)
            b[-1] = 1.0
            return torch.linalg.solve(a, b)
        pi = torch.full((n_ctx,), 1.0 / n_ctx, dtype=torch.float64)
        for _ in range(iters):
            flow = (pi[:, None] * self.transition).reshape(-1)
            new = torch.zeros_like(pi).index_add_(0, successors.reshape(-1), flow)
            new = 0.5 * (new + pi)  # a lazy chain has the same π and cannot oscillate
            if (new - pi).abs().sum() < tol:
                return new
            pi = new
        return pi

    def sample_batch(self, batch_size: int, length: int, generator: torch.Generator | None = None) -> Tensor:
        """``batch_size`` independent sequences of ``length`` symbols, each started in the stationary state.

        Shapes: returns (B, T) int64.
        """
        check_positive_int("batch_size", batch_size)
        check_positive_int("length", length)
        ctx = torch.multinomial(self.stationary, batch_size, replacement=True, generator=generator)  # (B,)
        cdf = self.transition.cumsum(-1)  # (V^k, V): sample by inverting the cumulative distribution
        uniforms = torch.rand(length, batch_size, 1, dtype=torch.float64, generator=generator)  # (T, B, 1)
        out = torch.empty(batch_size, length, dtype=torch.long)
        for t in range(length):
            token = torch.searchsorted(cdf[ctx], uniforms[t]).squeeze(1)  # (B,)
            token = token.clamp_max(self.vocab_size - 1)  # guards a cdf that ends at 1 - 1e-16
            out[:, t] = token
            ctx = self._next_context(ctx, token)
        return out

    def sample(self, n: int, generator: torch.Generator | None = None) -> Tensor:
        """One stream of ``n`` symbols (shape (n,)), started in the stationary state.

        A plain Python loop with ``bisect``: for one long stream it is much faster than tensor calls.
        """
        check_positive_int("n", n)
        ctx = int(torch.multinomial(self.stationary, 1, generator=generator))
        cdf = self.transition.cumsum(-1).tolist()
        uniforms = torch.rand(n, dtype=torch.float64, generator=generator).tolist()
        out, v, n_ctx = [], self.vocab_size, self.vocab_size**self.order
        for u in uniforms:
            token = min(bisect.bisect_right(cdf[ctx], u), v - 1)
            out.append(token)
            ctx = (ctx * v + token) % n_ctx
        return torch.tensor(out, dtype=torch.long)

    def log_prob(self, tokens: Tensor) -> Tensor:
        """Exact ``log P(x_t | previous k symbols)`` for t >= k of a (B, T) batch: shape (B, T - k).

        ``tokens`` must hold symbols in ``[0, vocab_size)`` (int16/int32/int64) and T > order.
        """
        k, v = self.order, self.vocab_size
        check_token_ids("tokens", tokens, ndim=2, vocab_size=v)
        if tokens.shape[1] <= k:
            raise ValueError(f"tokens has shape {tuple(tokens.shape)}; expected T > order={k} symbols per row")
        tokens = tokens.long()
        ctx = torch.zeros(tokens.shape[0], dtype=torch.long)
        for j in range(k):
            ctx = ctx * v + tokens[:, j]
        out = []
        for t in range(k, tokens.shape[1]):
            out.append(self.transition[ctx, tokens[:, t]].log())
            ctx = self._next_context(ctx, tokens[:, t])
        return torch.stack(out, dim=1)


def markov_source(vocab_size: int = 16, order: int = 2, seed: int = 0, concentration: float = 0.5) -> MarkovSource:
    """A random order-``order`` Markov chain over ``vocab_size`` symbols; see :class:`MarkovSource`."""
    return MarkovSource(vocab_size, order, seed, concentration)


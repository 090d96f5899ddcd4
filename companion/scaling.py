"""Scaling: parameter, FLOP and KV-cache counts by formula, and fitting a scaling law.

- ``count_parameters(config, family)``: the parameter count of ``companion.models.GPT`` / ``Transformer`` /
  ``Encoder`` from the config alone, term by term (tests check it equals the modules' ``numel`` for every
  preset; GPT-2 small = 124,439,808, as Hugging Face ``GPT2LMHeadModel`` reports). ``active=True`` counts what
  one token passes through in a mixture-of-experts model: k of the E routed experts (Mixtral 8x7B: 46.7B
  total, 12.9B active; DeepSeek-V3: 671B, 37B; chapter 14), without building the model.
- ``training_flops``: C ≈ 6 N D (Kaplan et al. 2020, §2.1; Hoffmann et al. 2022): 2 N per token forward,
  4 N backward.
- ``forward_flops_per_token``: 2 FLOPs per multiply–add of every weight matrix, plus attention's
  QKᵀ and AV (each 2·T·D per layer for a query that sees T keys) — checked against
  ``torch.utils.flop_counter.FlopCounterMode`` on a real forward pass.
- ``kv_cache_bytes``: 2 (K and V) × layers × K/V heads × head width × tokens × batch × bytes per value.
  Llama-2 7B at 4,096 tokens in fp16: exactly 2 GiB per sequence; GQA with 8 K/V heads: a quarter.
  ``cache_bytes_per_token(config)`` reads the same from a config, and counts MLA's latent + RoPE key instead.
- ``fit_power_law``: L(N) = E + A·N^(−α) by Levenberg–Marquardt in NumPy (no SciPy), with standard errors
  from the covariance s²(JᵀJ)⁻¹ of the linearised problem.

Everything here is arithmetic on a config (any object with ``ModelConfig``'s fields) or on numbers; the
experiment that trains models for a fit is ``companion.training.scaling_sweep``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from companion._checks import check_choice, check_positive_int

__all__ = [
    "count_parameters", "training_flops", "forward_flops_per_token", "kv_cache_bytes", "PowerLawFit",
    "fit_power_law", "compute_optimal_split", "cache_bytes_per_token",
]

FAMILIES = ("gpt", "transformer", "encoder")


def _norm_params(config: Any) -> int:
    return 2 * config.d_model if config.norm == "layernorm" else config.d_model  # LayerNorm: γ and β; RMSNorm: γ


def _linear(d_in: int, d_out: int, bias: bool) -> int:
    return d_in * d_out + (d_out if bias else 0)


def _attention_params(config: Any) -> int:
    d, b = config.d_model, config.bias
    if getattr(config, "kv_rank", None) is not None:  # MLA (chapter 14): low-rank queries and keys/values
        h, r, rope = config.n_heads, config.kv_rank, config.rope_head_dim
        qk = config.nope_head_dim + rope
        q = d * h * qk  # full-rank queries, or down, norm and up:
        if config.q_rank is not None:
            q = _linear(d, config.q_rank, b) + config.q_rank + config.q_rank * h * qk
        kv = _linear(d, r + rope, b) + r + r * h * (config.nope_head_dim + config.v_head_dim)  # down, norm, up
        return q + kv + _linear(h * config.v_head_dim, d, b)
    d_q, d_kv = config.n_heads * config.head_dim, config.n_kv_heads * config.head_dim
    qk_norm = 2 * config.head_dim if getattr(config, "qk_norm", False) else 0  # one gain vector each for q and k
    return _linear(d, d_q, b) + 2 * _linear(d, d_kv, b) + _linear(d_q, d, b) + qk_norm  # q, k, v, o projections


def _ffn_params(config: Any, width: int | None = None) -> int:
    width = config.d_ff if width is None else width
    n_in = 2 if config.activation == "swiglu" else 1  # SwiGLU has gate_proj and up_proj
    return n_in * _linear(config.d_model, width, config.bias) + _linear(width, config.d_model, config.bias)


def _moe_params(config: Any, active: bool) -> int:
    """One mixture-of-experts FFN: the router, the routed experts (k of them if ``active``), the shared ones."""
    routed = config.n_experts_per_token if active else config.n_experts
    shared = _ffn_params(config, config.n_shared_experts * config.d_expert) if config.n_shared_experts else 0
    return config.d_model * config.n_experts + routed * _ffn_params(config, config.d_expert) + shared


def _ffn_total(config: Any, n_layers: int, active: bool) -> int:
    """The FFNs of ``n_layers`` decoder layers: dense ones first, then mixtures of experts if the config has them."""
    n_moe = max(n_layers - config.n_dense_layers, 0) if getattr(config, "n_experts", 0) else 0
    return (n_layers - n_moe) * _ffn_params(config) + n_moe * _moe_params(config, active)


def count_parameters(config: Any, family: str = "gpt", *, embeddings: bool = True, active: bool = False) -> int:
    """Parameters of ``companion.models.<GPT|Transformer|Encoder>(config)``, counted from the config.

    ``family``: "gpt" (decoder-only), "transformer" (encoder–decoder, one shared vocabulary) or
    "encoder" (BERT-style with its masked-LM head). A tied output matrix counts once.
    ``embeddings=False`` leaves out the token, position and token-type tables (and an untied output matrix): the
    "non-embedding" N of Kaplan et al. 2020, the N of the scaling laws.
    ``active=True``: the parameters one token uses in a mixture-of-experts GPT, i.e. k of the E routed experts
    of each MoE layer (with the router and the shared experts); the same as the total for a dense model.
    Nothing is allocated: DeepSeek-V3's 671B are counted from its config in microseconds.
    """
    check_choice("family", family, FAMILIES)
    if not isinstance(active, bool):
        raise TypeError(f"active must be a bool, got {active!r} ({type(active).__name__})")
    if family != "gpt":  # as the models refuse them: experts and MLA are the decoder-only GPT's (chapter 14)
        for name, off in (("n_experts", 0), ("kv_rank", None)):
            if getattr(config, name, off) != off:
                raise ValueError(f"{name}={getattr(config, name)!r} is set but family={family!r} has no mixture of "
                                 f"experts or MLA; expected {name}={off!r}, or family='gpt'")
    d, v = config.d_model, config.vocab_size
    norm = _norm_params(config)
    table = v * d + (config.max_seq_len * d if config.positions == "learned" else 0)  # token (+ position) rows
    table += getattr(config, "type_vocab_size", 0) * d  # BERT's token-type (segment) rows
    total = table if embeddings else 0
    total += norm if config.embed_norm else 0
    self_layer = _attention_params(config) + _ffn_params(config) + 2 * norm  # 2 residual blocks, each with a norm
    final = norm if config.final_norm else 0
    output = 0 if config.tie_embeddings or not embeddings else v * d  # lm_head (no bias) unless tied
    if family == "gpt":
        layers = config.n_layers * (_attention_params(config) + 2 * norm) + _ffn_total(config, config.n_layers, active)
        return total + layers + final + output
    if family == "transformer":
        cross_layer = self_layer + _attention_params(config) + norm  # + cross-attention and its residual norm
        return total + config.n_encoder_layers * self_layer + config.n_decoder_layers * cross_layer + 2 * final + output
    mlm_head = _linear(d, d, True) + norm + v  # dense + norm + output bias of BERT's MLM head
    return total + config.n_layers * self_layer + final + mlm_head + output


def training_flops(n_params: float, n_tokens: float) -> float:
    """C ≈ 6·N·D floating-point operations to train N parameters on D tokens (forward 2N, backward 4N per token)."""
    if n_params <= 0 or n_tokens <= 0:
        raise ValueError(f"n_params={n_params} and n_tokens={n_tokens} must both be positive")
    return 6.0 * n_params * n_tokens


def compute_optimal_split(compute: float, A: float, B: float, alpha: float, beta: float) -> tuple[float, float]:
    """Parameters N and tokens D that minimise L(N, D) = E + A·N^(−alpha) + B·D^(−beta) under C = 6·N·D.

    Put D = C / (6N) into L and set dL/dN = 0 (Hoffmann et al. 2022, eq. 4):
    N_opt = G·(C/6)^(beta/(alpha+beta)), D_opt = (C/6)^(alpha/(alpha+beta)) / G, with
    G = (alpha·A / (beta·B))^(1/(alpha+beta)). The floor E does not move the optimum, so it is not an
    argument. With Chinchilla's rounded fit (A 406.4, B 410.7, alpha 0.34, beta 0.28) and GPT-3's
    3.15e23 FLOPs this gives about 87 tokens per parameter (tests/test_scaling_optimal.py).

    Returns:
        (n_params, n_tokens), with 6 · n_params · n_tokens == compute.

    Raises:
        ValueError: an argument that is not a finite number > 0.
    """
    for name, value in (("compute", compute), ("A", A), ("B", B), ("alpha", alpha), ("beta", beta)):
        number = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
        if not number or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name}={value!r} is invalid; expected a finite number > 0")
    g = (alpha * A / (beta * B)) ** (1.0 / (alpha + beta))
    n_params = g * (compute / 6.0) ** (beta / (alpha + beta))
    return n_params, compute / (6.0 * n_params)


def forward_flops_per_token(config: Any, seq_len: int) -> float:
    """Forward FLOPs per token of ``companion.models.GPT(config)`` at context length ``seq_len``.

    2 FLOPs (multiply + add) per weight of every matrix a token passes through (attention projections,
    FFN, output head), plus attention itself: QKᵀ and the weighted sum of V each cost 2·seq_len·(H·D_h)
    per layer when a query sees ``seq_len`` keys (the full matrix is computed, then masked; a causal model
    needs only half of it on average). Embedding lookups, norms and softmax are left out (O(D), small).
    Written for multi-head attention (MLA's attention term differs; its projections are counted right).
    """
    check_positive_int("seq_len", seq_len)
    plain = config.replace(bias=False)
    # a mixture of experts costs what one token passes through: k routed experts, the shared ones, the router
    matmul = config.n_layers * _attention_params(plain) + _ffn_total(plain, config.n_layers, active=True)
    matmul += config.d_model * config.vocab_size
    attention = config.n_layers * 2 * seq_len * config.n_heads * config.head_dim  # QKᵀ and AV, multiply-adds
    return 2.0 * (matmul + attention)


def cache_bytes_per_token(config: Any, bytes_per_value: int = 2) -> int:
    """Bytes one token adds to the cache of ``companion.models.GPT(config)``, over all layers.

    Multi-head, grouped-query and multi-query attention store a key and a value per K/V head:
    2 · layers · H_kv · D_h values. Multi-head latent attention (``config.kv_rank``) stores the latent and the
    shared RoPE key: layers · (kv_rank + rope_head_dim) values. DeepSeek-V3 in bf16: 61 · 576 · 2 = 70,272 bytes.
    """
    check_positive_int("bytes_per_value", bytes_per_value)
    if getattr(config, "kv_rank", None) is not None:
        return config.n_layers * (config.kv_rank + config.rope_head_dim) * bytes_per_value
    return kv_cache_bytes(config.n_layers, config.n_kv_heads, config.head_dim, 1, 1, bytes_per_value)


def kv_cache_bytes(
    n_layers: int, n_kv_heads: int, head_dim: int, seq_len: int, batch_size: int = 1, bytes_per_value: int = 2
) -> int:
    """Memory of a KV cache: 2 (K and V) · n_layers · n_kv_heads · head_dim · seq_len · batch_size · bytes_per_value.

    Llama-2 7B (32 layers, 32 K/V heads of width 128) at 4,096 tokens in fp16: 2·32·32·128·4096·2 = 2³¹ bytes
    = 2 GiB per sequence; with grouped-query attention and 8 K/V heads, 0.5 GiB.
    """
    for name, value in (("n_layers", n_layers), ("n_kv_heads", n_kv_heads), ("head_dim", head_dim),
                        ("seq_len", seq_len), ("batch_size", batch_size), ("bytes_per_value", bytes_per_value)):
        check_positive_int(name, value)
    return 2 * n_layers * n_kv_heads * head_dim * seq_len * batch_size * bytes_per_value


@dataclass(frozen=True)
class PowerLawFit:
    """L(N) = E + A·N^(−alpha), with one-standard-error uncertainties of each parameter."""

    E: float  # irreducible loss: the floor as N → ∞
    A: float  # scale of the reducible part
    alpha: float  # exponent: how fast the reducible part shrinks
    E_err: float
    A_err: float
    alpha_err: float
    covariance: np.ndarray  # (3, 3) covariance of (E, A, alpha)
    residual_std: float  # s = sqrt(RSS / (n - 3))

    def predict(self, n: Any) -> np.ndarray:
        """L at parameter count(s) ``n``."""
        return self.E + self.A * np.asarray(n, dtype=np.float64) ** (-self.alpha)


def fit_power_law(n: Sequence[float], loss: Sequence[float], *, max_iter: int = 200) -> PowerLawFit:
    """Least-squares fit of ``loss = E + A·n^(−alpha)`` (Levenberg–Marquardt, NumPy only).

    Internally the model is E + exp(b − alpha·x) with x = log(n / n_ref) (n_ref the geometric mean of
    n), which keeps the problem well conditioned; the covariance s²(JᵀJ)⁻¹ is mapped back to (E, A, alpha).
    Needs at least 4 points (3 parameters + 1 degree of freedom for the uncertainties).
    """
    n_arr, y = np.asarray(n, dtype=np.float64), np.asarray(loss, dtype=np.float64)
    if n_arr.shape != y.shape or n_arr.ndim != 1:
        raise ValueError(f"n and loss must be 1-D and equally long, got shapes {n_arr.shape} and {y.shape}")
    if len(n_arr) < 4:
        raise ValueError(f"fit_power_law needs at least 4 points, got {len(n_arr)}")
    if not np.all(np.isfinite(n_arr)) or np.any(n_arr <= 0):
        raise ValueError(f"n={n_arr.tolist()} is invalid; expected finite numbers > 0 (parameter counts)")
    if not np.all(np.isfinite(y)):
        raise ValueError(f"loss={y.tolist()} is invalid; expected finite numbers (a NaN or inf loss cannot be fitted)")
    c = np.log(n_arr).mean()
    x = np.log(n_arr) - c

    def residual(p: np.ndarray) -> np.ndarray:
        return p[0] + np.exp(p[1] - p[2] * x) - y

    def jacobian(p: np.ndarray) -> np.ndarray:
        g = np.exp(p[1] - p[2] * x)
        return np.stack([np.ones_like(x), g, -x * g], axis=1)  # (n, 3): d/dE, d/db, d/dalpha

    # start: the E on a grid below min(loss) whose log-linear fit of log(loss − E) is best
    best = None
    for e in y.min() - (y.max() - y.min() + 1e-12) * np.geomspace(1e-3, 10.0, 60):
        slope, b = np.polyfit(x, np.log(y - e), 1)
        p = np.array([e, b, -slope])
        rss = float(np.sum(residual(p) ** 2))
        if best is None or rss < best[0]:
            best = (rss, p)
    rss, p = best
    lam = 1e-3
    for _ in range(max_iter):
        r, j = residual(p), jacobian(p)
        jtj = j.T @ j
        step = np.linalg.solve(jtj + lam * np.diag(np.diag(jtj) + 1e-12), -j.T @ r)
        new_rss = float(np.sum(residual(p + step) ** 2))
        if new_rss < rss:
            p, lam, done = p + step, lam / 10, rss - new_rss <= 1e-15 * max(rss, 1e-300)
            rss = new_rss
            if done:
                break
        else:
            lam *= 10
            if lam > 1e12:
                break
    dof = len(y) - 3
    s2 = rss / dof
    j = jacobian(p)
    cov_internal = s2 * np.linalg.pinv(j.T @ j)  # covariance of (E, b, alpha)
    e_fit, b, alpha = p
    a = math.exp(b + alpha * c)  # A·n^(−α) = exp(b − α(log n − c))  ⇒  log A = b + α c
    to_public = np.array([[1.0, 0.0, 0.0], [0.0, a, a * c], [0.0, 0.0, 1.0]])  # d(E, A, α)/d(E, b, α)
    cov = to_public @ cov_internal @ to_public.T
    err = np.sqrt(np.maximum(np.diag(cov), 0.0))
    return PowerLawFit(float(e_fit), a, float(alpha), float(err[0]), float(err[1]), float(err[2]), cov, math.sqrt(s2))

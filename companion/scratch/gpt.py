"""A mini GPT in NumPy, forward only: the whole decoder-only model on one page.

The model of the notes' "用 NumPy 从零实现一个 Mini Transformer" (notesA), built from the other scratch
modules (``attention``, ``masks``, ``layers``) in GPT-2's layout (Radford et al. 2019):

    ids -> token embedding + learned position embedding
        -> N blocks of  x = x + attention(LN(x), causal mask);  x = x + FFN(LN(x))   (pre-LN)
        -> final LN -> LM head (tied to the token table, or a separate D x V matrix) -> logits

The weights are a flat ``dict[str, np.ndarray]``; ``params_from_torch`` copies them out of a
``companion.models.GPT``. Weights act on row vectors (``x @ W``), so ``W`` is ``linear.weight.T``:

    tok_emb (V, D)   pos_emb (T_max, D)
    layers.{i}.ln1.weight, layers.{i}.ln1.bias (D,)     LayerNorm before attention
    layers.{i}.attn.W_q / W_k / W_v / W_o (D, D)        (+ b_q / b_k / b_v / b_o (D,) if the model has biases)
    layers.{i}.ln2.weight, layers.{i}.ln2.bias (D,)     LayerNorm before the FFN
    layers.{i}.ffn.W1 (D, d_ff), layers.{i}.ffn.W2 (d_ff, D)   (+ b1 (d_ff,), b2 (D,))
    ln_f.weight, ln_f.bias (D,)                          final LayerNorm (if the model has one)
    lm_head (D, V)                                       only when untied; a tied model uses tok_emb.T

Checked against ``companion.models.GPT`` (logits, parameter count, greedy decoding) in
tests/test_scratch_gpt.py. Left out on purpose: dropout, the KV cache, training (NumPy has no
autograd), and the Llama-side options (RMSNorm, RoPE, SwiGLU, grouped-query attention).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from companion.scratch.attention import scaled_dot_product_attention
from companion.scratch.layers import feed_forward, layer_norm
from companion.scratch.masks import causal_mask

__all__ = ["block", "count_parameters", "forward", "generate_greedy", "params_from_torch", "self_attention"]

# What params_from_torch accepts: ModelConfig field -> allowed values (the GPT-2 column of the notes' table).
_SUPPORTED = {
    "norm": ("layernorm",),
    "norm_placement": ("pre",),
    "positions": ("learned",),
    "activation": ("relu", "gelu", "gelu_tanh"),
    "embed_scale": (False,),
    "embed_norm": (False,),
    "sliding_window": (None,),
}


def _array(tensor: Any) -> np.ndarray:
    """A float64 NumPy copy of a torch tensor (no gradient, on the CPU)."""
    return tensor.detach().cpu().double().numpy().copy()


def params_from_torch(model: Any) -> dict[str, np.ndarray]:
    """Copy the weights of a ``companion.models.GPT`` into the flat dict described in the module docstring.

    The model is read by its attribute names (``config``, ``embed``, ``layers``, ``norm``, ``lm_head``), so this
    NumPy module never imports the torch models it mirrors.

    Raises:
        TypeError: ``model`` is not a ``companion.models.GPT`` (it lacks one of those attributes).
        ValueError: its config uses something this NumPy model leaves out (e.g. ``norm='rmsnorm'``).
    """
    missing = [name for name in ("config", "embed", "layers", "norm", "lm_head") if not hasattr(model, name)]
    if missing or not hasattr(model.embed, "token"):
        raise TypeError(f"model must be a companion.models.GPT, got {type(model).__name__} (it lacks {missing})")
    config = model.config
    for name, allowed in _SUPPORTED.items():
        if getattr(config, name) not in allowed:
            raise ValueError(f"{name}={getattr(config, name)!r} is not supported by the NumPy mini-GPT; "
                             f"expected one of {allowed}")
    if config.n_kv_heads != config.n_heads:
        raise ValueError(f"n_kv_heads={config.n_kv_heads} is not supported; expected None (every head has its K/V)")

    p = {"tok_emb": _array(model.embed.token.weight), "pos_emb": _array(model.embed.position.weight)}

    def linear(key: str, layer: Any, bias_key: str) -> None:
        p[key] = _array(layer.weight.T)  # nn.Linear stores (out, in); we multiply x @ W, so (in, out)
        if layer.bias is not None:
            p[bias_key] = _array(layer.bias)

    def norm(key: str, layer: Any) -> None:
        p[key + ".weight"] = _array(layer.weight)
        if layer.bias is not None:
            p[key + ".bias"] = _array(layer.bias)

    for i, layer in enumerate(model.layers):
        pre = f"layers.{i}."
        norm(pre + "ln1", layer.self_attn_block.norm)
        for x in "qkvo":
            linear(pre + f"attn.W_{x}", getattr(layer.self_attn, f"{x}_proj"), pre + f"attn.b_{x}")
        norm(pre + "ln2", layer.ffn_block.norm)
        linear(pre + "ffn.W1", layer.ffn.up_proj, pre + "ffn.b1")
        linear(pre + "ffn.W2", layer.ffn.down_proj, pre + "ffn.b2")
    if model.norm is not None:
        norm("ln_f", model.norm)
    if model.lm_head.weight is not model.embed.token.weight:  # untied: a matrix of its own
        p["lm_head"] = _array(model.lm_head.weight.T)  # (D, V)
    return p


def count_parameters(params: dict[str, np.ndarray]) -> int:
    """Total number of weights; a tied head has no array of its own, so it is counted once."""
    return sum(int(w.size) for w in params.values())


def self_attention(
    x: np.ndarray, params: dict[str, np.ndarray], prefix: str, n_heads: int, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Multi-head causal self-attention of one layer: project, split heads, attend, merge, mix with W_o.

    Shapes: x (B, T, D), mask (T, T) -> out (B, T, D), weights (B, H, T, T).
    """
    b, t, d = x.shape
    d_h = d // n_heads

    def project(name: str) -> np.ndarray:  # x @ W (+ b)
        return x @ params[prefix + "W_" + name] + params.get(prefix + "b_" + name, 0.0)  # (B, T, D)

    def split(y: np.ndarray) -> np.ndarray:
        return y.reshape(b, t, n_heads, d_h).transpose(0, 2, 1, 3)  # (B, H, T, D_h)

    q, k, v = split(project("q")), split(project("k")), split(project("v"))
    heads, weights = scaled_dot_product_attention(q, k, v, mask, return_weights=True)  # (B, H, T, D_h)
    merged = heads.transpose(0, 2, 1, 3).reshape(b, t, d)  # (B, T, D)
    return merged @ params[prefix + "W_o"] + params.get(prefix + "b_o", 0.0), weights


def block(
    x: np.ndarray, params: dict[str, np.ndarray], i: int, n_heads: int, eps: float, activation: str, mask: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Pre-LN decoder block ``i``: x + attention(LN(x)), then x + FFN(LN(x)).

    Shapes: x (B, T, D) -> (B, T, D), attention weights (B, H, T, T).
    """
    pre = f"layers.{i}."
    h = layer_norm(x, params[pre + "ln1.weight"], params.get(pre + "ln1.bias"), eps)  # (B, T, D)
    attn_out, weights = self_attention(h, params, pre + "attn.", n_heads, mask)
    x = x + attn_out  # residual 1
    h = layer_norm(x, params[pre + "ln2.weight"], params.get(pre + "ln2.bias"), eps)
    W1, b1 = params[pre + "ffn.W1"], params.get(pre + "ffn.b1")  # b1, b2 are None in a model without biases
    W2, b2 = params[pre + "ffn.W2"], params.get(pre + "ffn.b2")
    x = x + feed_forward(h, W1, b1, W2, b2, activation)  # residual 2, (B, T, D)
    return x, weights


def _n_layers(params: dict[str, np.ndarray]) -> int:
    return sum(1 for key in params if key.endswith(".ln1.weight"))


def forward(
    params: dict[str, np.ndarray],
    ids: np.ndarray,
    *,
    n_heads: int,
    eps: float = 1e-5,
    activation: str = "gelu",
    return_attention: bool = False,
) -> np.ndarray | tuple[np.ndarray, list[np.ndarray]]:
    """Next-token logits for every position of ``ids``.

    ``n_heads``, ``eps`` and ``activation`` are the config fields the arrays cannot tell (a
    ``ModelConfig``'s ``n_heads``, ``norm_eps`` and ``activation``). With ``return_attention`` also the
    attention weights of every layer.

    Shapes: ids (B, T) integers -> logits (B, T, V) [, N arrays (B, H, T, T)].
    """
    ids = np.asarray(ids)
    if ids.ndim != 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be a 2-D integer array (B, T), got shape {ids.shape} and dtype {ids.dtype}")
    vocab, max_len = params["tok_emb"].shape[0], params["pos_emb"].shape[0]
    t = ids.shape[1]
    if t > max_len:
        raise ValueError(f"ids has length {t}; expected at most max_seq_len={max_len} (the position table)")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab):
        raise ValueError(f"token ids must lie in [0, {vocab}), got {ids.min()} .. {ids.max()}")

    x = params["tok_emb"][ids] + params["pos_emb"][:t]  # (B, T, D): look-up, plus the position rows
    mask = causal_mask(t)  # (T, T): 0 on and below the diagonal, -inf above
    attention = []
    for i in range(_n_layers(params)):
        x, weights = block(x, params, i, n_heads, eps, activation, mask)  # (B, T, D)
        attention.append(weights)
    if "ln_f.weight" in params:
        x = layer_norm(x, params["ln_f.weight"], params.get("ln_f.bias"), eps)
    head = params.get("lm_head", params["tok_emb"].T)  # (D, V): tied heads reuse the token table
    logits = x @ head  # (B, T, V)
    return (logits, attention) if return_attention else logits


def generate_greedy(
    params: dict[str, np.ndarray],
    ids: np.ndarray,
    max_new_tokens: int,
    *,
    n_heads: int,
    eps: float = 1e-5,
    activation: str = "gelu",
) -> np.ndarray:
    """Append the argmax of the last position's logits, ``max_new_tokens`` times (no KV cache: the
    whole sequence is run again every step).

    Shapes: ids (B, T) -> (B, T + max_new_tokens).
    """
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens={max_new_tokens} is invalid; expected >= 0")
    out = np.asarray(ids)
    for _ in range(max_new_tokens):
        logits = forward(params, out, n_heads=n_heads, eps=eps, activation=activation)  # (B, T, V)
        next_id = logits[:, -1, :].argmax(axis=-1)  # (B,): only the last position predicts
        out = np.concatenate([out, next_id[:, None]], axis=1)  # (B, T + 1)
    return out

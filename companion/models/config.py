"""``ModelConfig``: one dataclass that spans the original Transformer, GPT-2 and Llama.

The source notes trace an *architecture-evolution table* (原始 Transformer → GPT → Llama):
post-norm → pre-norm, LayerNorm → RMSNorm, ReLU → GELU → SwiGLU, sinusoidal → learned → RoPE,
multi-head → grouped-query attention. Each row of that table is one field below, so a reader can flip
one field (``cfg.replace(norm="rmsnorm")``) and build the same model core with one thing changed.

Presets (classmethods) reproduce published shapes:

- ``transformer_base()``: Vaswani et al. 2017, "Attention Is All You Need", Table 3 "base".
- ``gpt2_small()``: Radford et al. 2019; 124,439,808 parameters, checked against Hugging Face
  ``GPT2LMHeadModel`` (tests/test_models.py, tests/test_hf_equivalence.py).
- ``llama(...)`` / ``llama_tiny()``: Touvron et al. 2023 (Llama 2 7B defaults), checked against
  ``LlamaForCausalLM``.
- ``bert_base()`` (Devlin et al. 2019) and ``mistral_7b()`` (Jiang et al. 2023, sliding window + GQA).

Left out on purpose: T5's bucketed relative-position bias, BERT's token-type embeddings, MoE layers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from companion._checks import (
    check_bool,
    check_choice,
    check_divisible,
    check_dropout,
    check_positive_float,
    check_positive_int,
)
from companion.layers import ACTIVATIONS, NORMS, PLACEMENTS
from companion.positions import PAIRINGS as ROPE_PAIRINGS
from companion.positions import TABLE_SCALINGS as ROPE_SCALINGS
from companion.positions._frequencies import check_base

__all__ = ["ACTIVATIONS", "NORMS", "PLACEMENTS", "POSITIONS", "ROPE_PAIRINGS", "ROPE_SCALINGS", "ModelConfig"]

POSITIONS = ("sinusoidal", "learned", "rope", "alibi", "none")  # how order enters the model (companion.positions)


@dataclass(frozen=True)
class ModelConfig:
    """Every architectural choice of a Transformer, one field each (frozen: use ``replace``)."""

    # --- sizes -------------------------------------------------------------------------------
    vocab_size: int = 256  # V: number of token ids (embedding rows, logits per position)
    d_model: int = 64  # D: width of every residual-stream vector
    n_heads: int = 4  # H: query heads; head width D_h = d_model // n_heads
    n_layers: int = 2  # depth of a decoder-only (GPT) or encoder-only (BERT) stack
    n_encoder_layers: int | None = None  # encoder depth of an encoder-decoder model (None: n_layers, resolved)
    n_decoder_layers: int | None = None  # decoder depth of an encoder-decoder model (None: n_layers, resolved)
    d_ff: int = 256  # hidden width of the feed-forward network (4·D in 2017/GPT-2, ≈8/3·D for SwiGLU)
    max_seq_len: int = 128  # longest sequence (prompt + generated) the model accepts
    n_kv_heads: int | None = None  # H_kv: key/value heads; None -> n_heads (MHA, resolved), 1 = MQA, between = GQA
    # --- the architecture-evolution table -----------------------------------------------------
    norm: str = "layernorm"  # "layernorm" (2017, GPT-2, BERT) or "rmsnorm" (Llama: no mean, no bias)
    norm_placement: str = "pre"  # "post": norm(x + f(x)) as in 2017/BERT; "pre": x + f(norm(x)) (GPT-2+)
    norm_eps: float = 1e-5  # epsilon inside every norm's square root
    final_norm: bool = True  # one more norm after the last layer (needed with pre-norm)
    embed_norm: bool = False  # normalise token+position embeddings before layer 1 (BERT)
    activation: str = "gelu"  # FFN: "relu" (2017), "gelu" (BERT), "gelu_tanh" (GPT-2), "swiglu" (Llama)
    positions: str = "learned"  # "sinusoidal" (2017), "learned" (GPT-2/BERT), "rope" (Llama), "alibi", "none"
    rope_base: float = 10000.0  # RoPE base θ > 1 (10,000 Llama 2; 500,000 Llama 3); rope_* need positions="rope"
    rope_scaling: str | None = None  # context extension: None, "linear" (PI), "ntk" or "yarn"
    rope_factor: float = 1.0  # how many times longer than the trained context (used by rope_scaling)
    rope_original_max_seq_len: int | None = None  # context length the model was trained with (YaRN)
    rope_pairing: str = "half"  # RoPE pairs dims (i, i + D_h/2) ("half", HF Llama) or (2i, 2i+1) ("adjacent")
    sliding_window: int | None = None  # each query sees at most this many keys (Mistral); None: all
    tie_embeddings: bool = True  # the output projection reuses the token-embedding matrix
    bias: bool = True  # biases of the attention (q/k/v/o) and FFN linear layers (False for Llama); norms keep theirs
    dropout: float = 0.0  # dropout probability after embeddings, attention weights and sublayers
    embed_scale: bool = False  # multiply token embeddings by sqrt(d_model) (2017, section 3.4)
    use_sdpa: bool = False  # attention through torch's fused scaled_dot_product_attention (same numbers, faster)
    fused_norm: bool = False  # norms through torch's one-kernel F.layer_norm / F.rms_norm (same numbers, faster)
    decode_layout: bool = False  # weights stored (in, out), q/k/v in one matrix: faster decoding (same state_dict)

    def __post_init__(self) -> None:
        for name, kind in _FIELD_KINDS.items():  # types first: numpy scalars become Python numbers
            object.__setattr__(self, name, _coerce(name, getattr(self, name), kind))
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_seq_len"):
            check_positive_int(name, getattr(self, name))
        for name in _OPTIONAL_INTS:
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        # Resolve the defaults that depend on other fields, once: every reader sees plain ints.
        for name, source in _FOLLOWERS:
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(self, source))
        check_divisible("d_model", self.d_model, "n_heads", self.n_heads)
        check_divisible("n_heads", self.n_heads, "n_kv_heads", self.n_kv_heads)
        check_choice("norm", self.norm, NORMS)
        check_choice("norm_placement", self.norm_placement, PLACEMENTS)
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("positions", self.positions, POSITIONS)
        check_choice("rope_scaling", self.rope_scaling, ROPE_SCALINGS)
        check_choice("rope_pairing", self.rope_pairing, ROPE_PAIRINGS)
        check_dropout("dropout", self.dropout)
        check_positive_float("norm_eps", self.norm_eps)
        check_base(self.rope_base, "rope_base")
        check_positive_float("rope_factor", self.rope_factor)
        if not self.rope_factor >= 1.0:
            raise ValueError(f"rope_factor={self.rope_factor} is invalid; expected >= 1")
        if self.positions != "rope":
            for name, default in _ROPE_DEFAULTS.items():
                if getattr(self, name) != default:
                    raise ValueError(
                        f"{name}={getattr(self, name)!r} is set but positions={self.positions!r}; the rope_* "
                        f"settings apply only with positions='rope' (leave {name} at {default!r})"
                    )
        elif self.head_dim % 2 != 0:
            raise ValueError(
                f"positions='rope' needs an even head width, got d_model={self.d_model} / "
                f"n_heads={self.n_heads} = {self.head_dim}"
            )
        if self.rope_scaling == "yarn" and self.rope_original_max_seq_len is None:
            raise ValueError("rope_scaling='yarn' needs rope_original_max_seq_len (the pre-training context length)")

    # --- derived sizes ----------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        """D_h = d_model // n_heads."""
        return self.d_model // self.n_heads

    def replace(self, **changes: Any) -> ModelConfig:
        """A copy with ``changes`` applied and validated again, e.g. ``cfg.replace(norm="rmsnorm")``.

        Fields that followed another one keep following it: if ``n_kv_heads == n_heads`` (plain multi-head
        attention) and only ``n_heads`` changes, ``n_kv_heads`` changes with it; the same for
        ``n_encoder_layers`` / ``n_decoder_layers`` and ``n_layers``. Pass the field to choose otherwise.
        """
        for name, source in _FOLLOWERS:
            if source in changes and name not in changes and getattr(self, name) == getattr(self, source):
                changes[name] = None
        return dataclasses.replace(self, **changes)

    # --- presets ----------------------------------------------------------------------------------
    @classmethod
    def transformer_base(cls, **changes: Any) -> ModelConfig:
        """Vaswani et al. 2017, base model: D=512, H=8, N=6+6, d_ff=2048, post-LN, sinusoidal, ReLU.

        One 37,000-token BPE vocabulary shared by source and target; the embedding matrices and the
        output projection share weights and embeddings are scaled by sqrt(D) (sections 3.4, 5.1).
        """
        base = dict(
            vocab_size=37000, d_model=512, n_heads=8, n_layers=6, d_ff=2048, max_seq_len=512,
            norm="layernorm", norm_placement="post", final_norm=False, activation="relu",
            positions="sinusoidal", tie_embeddings=True, bias=True, dropout=0.1, embed_scale=True,
            norm_eps=1e-6,
        )  # fmt: skip
        return cls(**{**base, **changes})

    @classmethod
    def gpt2_small(cls, **changes: Any) -> ModelConfig:
        """GPT-2 small (124M): D=768, H=12, 12 layers, 1024 learned positions, pre-LN + final LN, tanh-GELU."""
        base = dict(
            vocab_size=50257, d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_seq_len=1024,
            norm="layernorm", norm_placement="pre", final_norm=True, activation="gelu_tanh",
            positions="learned", tie_embeddings=True, bias=True, dropout=0.1, norm_eps=1e-5,
        )  # fmt: skip
        return cls(**{**base, **changes})

    @classmethod
    def llama(cls, **changes: Any) -> ModelConfig:
        """Llama-style: RMSNorm, pre-norm, SwiGLU, RoPE (half pairing), no biases, untied output.

        Defaults are Llama 2 7B (D=4096, 32 layers, 32 heads, d_ff=11008, V=32000, 4096 context);
        pass ``n_kv_heads`` for grouped-query attention (Llama 2 70B: 8), ``rope_base=500000.0`` for Llama 3.
        """
        base = dict(
            vocab_size=32000, d_model=4096, n_heads=32, n_layers=32, d_ff=11008, max_seq_len=4096,
            norm="rmsnorm", norm_placement="pre", final_norm=True, activation="swiglu",
            positions="rope", rope_base=10000.0, rope_pairing="half", tie_embeddings=False,
            bias=False, dropout=0.0, norm_eps=1e-5,
        )  # fmt: skip
        return cls(**{**base, **changes})

    @classmethod
    def llama_tiny(cls, **changes: Any) -> ModelConfig:
        """A Llama-style model small enough for a laptop: D=64, 2 layers, 4 query heads sharing 2 K/V heads."""
        base = dict(vocab_size=256, d_model=64, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=172, max_seq_len=256)
        return cls.llama(**{**base, **changes})

    @classmethod
    def bert_base(cls, **changes: Any) -> ModelConfig:
        """BERT-base: D=768, H=12, 12 post-LN layers, exact GELU, 512 learned positions, embedding LN."""
        base = dict(
            vocab_size=30522, d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_seq_len=512,
            norm="layernorm", norm_placement="post", final_norm=False, embed_norm=True,
            activation="gelu", positions="learned", tie_embeddings=True, bias=True, dropout=0.1,
            norm_eps=1e-12,
        )  # fmt: skip
        return cls(**{**base, **changes})

    @classmethod
    def mistral_7b(cls, **changes: Any) -> ModelConfig:
        """Mistral 7B v0.1: Llama-style with GQA (8 K/V heads) and a 4096-token sliding window."""
        base = dict(d_model=4096, n_heads=32, n_kv_heads=8, n_layers=32, d_ff=14336, max_seq_len=32768,
                    sliding_window=4096)  # fmt: skip
        return cls.llama(**{**base, **changes})


# --- field types ----------------------------------------------------------------------------------------

_OPTIONAL_INTS = ("n_encoder_layers", "n_decoder_layers", "n_kv_heads", "rope_original_max_seq_len", "sliding_window")
_FOLLOWERS = (("n_kv_heads", "n_heads"), ("n_encoder_layers", "n_layers"), ("n_decoder_layers", "n_layers"))
_FIELD_KINDS = {
    **dict.fromkeys(("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_seq_len"), int),
    **dict.fromkeys(_OPTIONAL_INTS, "int?"),
    **dict.fromkeys(("norm_eps", "rope_base", "rope_factor", "dropout"), float),
    **dict.fromkeys(("final_norm", "embed_norm", "tie_embeddings", "bias", "embed_scale", "use_sdpa"), bool),
    **dict.fromkeys(("fused_norm", "decode_layout"), bool),
    **dict.fromkeys(("norm", "norm_placement", "activation", "positions", "rope_pairing"), str),
    "rope_scaling": "str?",
}
_ROPE_DEFAULTS = {"rope_base": 10000.0, "rope_scaling": None, "rope_factor": 1.0,
                  "rope_original_max_seq_len": None, "rope_pairing": "half"}  # fmt: skip


def _coerce(name: str, value: Any, kind: Any) -> Any:
    """``value`` as a plain Python value of ``kind`` (numpy scalars unwrapped, ints widened to float), or a
    ``TypeError`` naming the field (``bias='False'``, ``dropout=None``, ``d_model=64.0``)."""
    if isinstance(value, np.generic):
        value = value.item()  # np.int64(64) -> 64, np.float32(0.1) -> 0.1, np.bool_(True) -> True
    optional = isinstance(kind, str) and kind.endswith("?")
    base = {"int?": int, "str?": str}.get(kind, kind) if optional else kind
    if value is None and optional:
        return None
    if base is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if base is bool:
        check_bool(name, value)
        return value
    if not isinstance(value, base) or (base is int and isinstance(value, bool)):
        expected = f"{base.__name__} or None" if optional else base.__name__
        article = "an" if base is int else "a"
        raise TypeError(f"{name} must be {article} {expected}, got {value!r} ({type(value).__name__})")
    return value

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
- ``bert_base()`` (Devlin et al. 2019, with its token-type table) and ``mistral_7b()`` (Jiang et al. 2023,
  sliding window + GQA).
- ``vit()``: ViT-B/16 (Dosovitskiy et al. 2021), checked against ``ViTForImageClassification``.
- Today's models (chapter 14): ``mixtral_8x7b()`` (Jiang et al. 2024; 46.7B parameters, 12.9B active),
  ``qwen3(...)`` (Qwen3 dense, QK-norm, an explicit head width) and ``deepseek_v3()`` (DeepSeek-AI 2024; MLA,
  256 routed + 1 shared expert, 671B parameters, 37B active), checked against ``transformers``' Mixtral,
  Qwen3 and DeepseekV3 models (tests/test_hf_families.py, tests/test_scaling.py).

Left out on purpose: T5's bucketed relative-position bias, DeepSeek-V3's multi-token-prediction
module (it serves training and speculative decoding, not the next-token logits).
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
from companion.attention.mla import check_rank
from companion.layers import ACTIVATIONS, NORMS, PLACEMENTS
from companion.moe import SCORINGS, check_routing
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
    rope_mscale: float | None = None  # YaRN as in DeepSeek-V3 (MLA): ln(factor)'s weight in the cos/sin temperature
    rope_mscale_all_dim: float | None = None  # ... and in the temperature² on MLA's softmax scale; both or neither
    rope_pairing: str = "half"  # RoPE pairs dims (i, i + D_h/2) ("half", HF Llama) or (2i, 2i+1) ("adjacent")
    sliding_window: int | None = None  # each query sees at most this many keys (Mistral); None: all
    tie_embeddings: bool = True  # the output projection reuses the token-embedding matrix
    bias: bool = True  # biases of the attention (q/k/v/o) and FFN linear layers (False for Llama); norms keep theirs
    dropout: float = 0.0  # dropout probability after embeddings, attention weights and sublayers
    embed_scale: bool = False  # multiply token embeddings by sqrt(d_model) (2017, section 3.4)
    use_sdpa: bool = False  # attention through torch's fused scaled_dot_product_attention (same numbers, faster)
    fused_norm: bool = False  # norms through torch's one-kernel F.layer_norm / F.rms_norm (same numbers, faster)
    decode_layout: bool = False  # weights stored (in, out), q/k/v in one matrix: faster decoding (same state_dict)
    # --- today's models (chapter 14) -------------------------------------------------------------
    d_head: int | None = None  # D_h when it is not d_model // n_heads (Qwen3: 128 with D=1024, H=16); None: D // H
    qk_norm: bool = False  # RMSNorm on each head's queries and keys before RoPE (Qwen3, OLMo 2, Gemma 3)
    attention_sinks: int = 0  # StreamingLLM: the first n positions stay visible to a sliding window's queries
    sliding_window_pattern: int | None = None  # every Nth layer global, the rest sliding_window (Gemma 3: 6)
    sink_logits: bool = False  # gpt-oss: a learned logit per head, one more softmax column that carries no value
    n_experts: int = 0  # routed experts of a mixture-of-experts FFN (Mixtral 8, DeepSeek-V3 256); 0: dense FFN
    n_experts_per_token: int = 2  # k: experts each token is routed to (used when n_experts > 0)
    n_shared_experts: int = 0  # experts every token also passes through (DeepSeek: 1)
    d_expert: int | None = None  # hidden width of each expert FFN; None -> d_ff (resolved)
    n_dense_layers: int = 0  # the first layers keep a dense FFN of width d_ff (DeepSeek-V3: first_k_dense_replace 3)
    router: str = "softmax"  # expert scores: "softmax" (Switch, Mixtral) or "sigmoid" (DeepSeek-V3)
    router_normalize: bool = True  # rescale the k chosen scores to sum to 1 (Mixtral; DeepSeek's norm_topk_prob)
    router_scale: float = 1.0  # multiply the k weights by this (DeepSeek-V3's routed_scaling_factor: 2.5)
    router_groups: int = 1  # group-limited routing: experts split into this many groups (DeepSeek-V3: 8)
    router_group_limit: int = 1  # a token picks its experts from its best this-many groups (DeepSeek-V3: 4)
    router_bias: bool = False  # a softmax router gets the balancing bias too (a sigmoid router always has it)
    kv_rank: int | None = None  # MLA: width of the cached key/value latent (DeepSeek-V3: 512); None: no MLA
    q_rank: int | None = None  # MLA: width of the query latent (DeepSeek-V3: 1536); None: full-rank queries
    rope_head_dim: int | None = None  # MLA: RoPE part of each query and of the shared key (64); None -> D_h / 2
    nope_head_dim: int | None = None  # MLA: position-free part of each query and key (128); None -> D_h
    v_head_dim: int | None = None  # MLA: width of each head's value (128); None -> D_h
    # --- encoders: segments and images (BERT, ViT) --------------------------------------------------
    type_vocab_size: int = 0  # rows of BERT's token-type (segment) table added to the embeddings (BERT: 2); 0: none
    image_size: int | None = None  # ViT: side of the square input image in pixels; None: a text model
    patch_size: int = 16  # ViT: side of the square patches an image is cut into, one token each
    num_channels: int = 3  # ViT: colour channels of an input image (3 for RGB, 1 for grey)

    def __post_init__(self) -> None:
        for name, kind in _FIELD_KINDS.items():  # types first: numpy scalars become Python numbers
            object.__setattr__(self, name, _coerce(name, getattr(self, name), kind))
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_seq_len", "patch_size",
                     "num_channels"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("type_vocab_size", self.type_vocab_size, allow_zero=True)
        for name in _OPTIONAL_INTS:
            if getattr(self, name) is not None:
                check_positive_int(name, getattr(self, name))
        # Resolve the defaults that depend on other fields, once: every reader sees plain ints.
        for name, source in _FOLLOWERS:
            if getattr(self, name) is None:
                object.__setattr__(self, name, getattr(self, source))
        if self.d_head is None and self.kv_rank is None:  # the heads cut the model width
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
        elif self.head_dim % 2 != 0 and self.kv_rank is None:  # MLA rotates only its rope_head_dim part
            raise ValueError(
                f"positions='rope' needs an even head width, got d_model={self.d_model} / "
                f"n_heads={self.n_heads} = {self.head_dim}"
            )
        if self.rope_scaling == "yarn" and self.rope_original_max_seq_len is None:
            raise ValueError("rope_scaling='yarn' needs rope_original_max_seq_len (the pre-training context length)")
        self._check_mscale()
        if self.image_size is not None and self.image_size % self.patch_size != 0:
            raise ValueError(f"image_size={self.image_size} is not a multiple of patch_size={self.patch_size}; "
                             "expected an image that patches tile exactly")
        self._check_chapter_14()

    def _check_mscale(self) -> None:
        """DeepSeek's two YaRN temperatures: given together, with rope_scaling='yarn', on an MLA model."""
        mscales = {"rope_mscale": self.rope_mscale, "rope_mscale_all_dim": self.rope_mscale_all_dim}
        given = [f"{name}={value!r}" for name, value in mscales.items() if value is not None]
        if not given:
            return
        if len(given) == 1:
            raise ValueError(f"{given[0]} is given alone; expected rope_mscale and rope_mscale_all_dim together")
        for name, value in mscales.items():
            check_positive_float(name, value)
        if self.rope_scaling != "yarn" or self.kv_rank is None:
            raise ValueError(f"{', '.join(given)} is DeepSeek's YaRN for multi-head latent attention; expected "
                             f"rope_scaling='yarn' and kv_rank set, got rope_scaling={self.rope_scaling!r}, "
                             f"kv_rank={self.kv_rank!r}")

    def _check_chapter_14(self) -> None:
        """Validate (and resolve) the fields of today's models: sinks, experts, MLA."""
        if self.attention_sinks:
            check_positive_int("attention_sinks", self.attention_sinks)
            if self.sliding_window is None:
                raise ValueError(f"attention_sinks={self.attention_sinks} needs a sliding_window: sinks are the "
                                 "first positions kept visible when the window has moved past them")
            if self.attention_sinks >= self.sliding_window:
                raise ValueError(f"attention_sinks={self.attention_sinks} is not smaller than sliding_window="
                                 f"{self.sliding_window}; expected the sinks to leave room for recent keys")
        if self.sliding_window_pattern is not None:
            if self.sliding_window is None or self.sliding_window_pattern < 2:
                raise ValueError(f"sliding_window_pattern={self.sliding_window_pattern} needs a sliding_window and "
                                 f"a value >= 2 (every Nth layer global, the others local), got sliding_window="
                                 f"{self.sliding_window}")
        if self.sink_logits and self.kv_rank is not None:
            raise ValueError(f"sink_logits=True applies to multi-head attention, not to MLA (kv_rank={self.kv_rank})")
        check_positive_int("n_experts", self.n_experts, allow_zero=True)
        for name in ("n_experts_per_token", "router_groups", "router_group_limit"):
            check_positive_int(name, getattr(self, name))
        check_positive_int("n_shared_experts", self.n_shared_experts, allow_zero=True)
        check_positive_int("n_dense_layers", self.n_dense_layers, allow_zero=True)
        check_choice("router", self.router, SCORINGS)
        check_positive_float("router_scale", self.router_scale)
        if self.n_experts:
            check_routing(self.n_experts, self.n_experts_per_token, self.router_groups, self.router_group_limit)
            if self.n_dense_layers > self.n_layers:
                raise ValueError(f"n_dense_layers={self.n_dense_layers} is more than n_layers={self.n_layers}")
        else:  # a dense model: the MoE fields would be silently ignored
            for name, default in {**_MOE_DEFAULTS, "d_expert": self.d_ff}.items():
                if getattr(self, name) != default:
                    raise ValueError(f"{name}={getattr(self, name)!r} is set but n_experts=0; the MoE fields apply "
                                     f"only to a mixture of experts (set n_experts, or leave {name} at {default!r})")
        check_rank("kv_rank", self.kv_rank, self.d_model)
        check_rank("q_rank", self.q_rank, self.d_model)
        mla = ("q_rank", "rope_head_dim", "nope_head_dim", "v_head_dim")
        if self.kv_rank is None:
            for name in mla:
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}={getattr(self, name)} is set but kv_rank=None; the MLA fields apply "
                                     "only with multi-head latent attention (set kv_rank)")
            return
        if self.positions != "rope":
            raise ValueError(f"kv_rank={self.kv_rank} (MLA) needs positions='rope' (its decoupled RoPE key), got "
                             f"positions={self.positions!r}")
        if self.qk_norm:
            raise ValueError("qk_norm=True applies to multi-head attention, not to MLA (kv_rank is set)")
        defaults = {"rope_head_dim": self.head_dim // 2, "nope_head_dim": self.head_dim, "v_head_dim": self.head_dim}
        for name, default in defaults.items():  # resolve, once: every reader sees plain ints
            if getattr(self, name) is None:
                object.__setattr__(self, name, default)
        if self.rope_head_dim % 2:
            raise ValueError(f"rope_head_dim={self.rope_head_dim} must be even (RoPE rotates pairs)")

    # --- derived sizes ----------------------------------------------------------------------------
    @property
    def head_dim(self) -> int:
        """D_h = d_model // n_heads, or ``d_head`` when given."""
        return self.d_model // self.n_heads if self.d_head is None else self.d_head

    def layer_window(self, layer: int) -> int | None:
        """The sliding window of decoder layer ``layer`` (0-based), or None for full attention: with
        ``sliding_window_pattern`` N, layers N-1, 2N-1, ... are global (Gemma 3's ``layer_types``)."""
        pattern = self.sliding_window_pattern
        return None if pattern is not None and (layer + 1) % pattern == 0 else self.sliding_window

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
        """BERT-base: D=768, H=12, 12 post-LN layers, exact GELU, 512 learned positions, 2 token types
        (segments A and B), embedding LN. ``Encoder`` of it: 109,514,298 parameters, as ``BertForMaskedLM``."""
        base = dict(
            vocab_size=30522, d_model=768, n_heads=12, n_layers=12, d_ff=3072, max_seq_len=512,
            norm="layernorm", norm_placement="post", final_norm=False, embed_norm=True,
            activation="gelu", positions="learned", tie_embeddings=True, bias=True, dropout=0.1,
            norm_eps=1e-12, type_vocab_size=2,
        )  # fmt: skip
        return cls(**{**base, **changes})

    @classmethod
    def mistral_7b(cls, **changes: Any) -> ModelConfig:
        """Mistral 7B v0.1: Llama-style with GQA (8 K/V heads) and a 4096-token sliding window."""
        base = dict(d_model=4096, n_heads=32, n_kv_heads=8, n_layers=32, d_ff=14336, max_seq_len=32768,
                    sliding_window=4096)  # fmt: skip
        return cls.llama(**{**base, **changes})

    @classmethod
    def mixtral_8x7b(cls, **changes: Any) -> ModelConfig:
        """Mixtral 8x7B v0.1 (Jiang et al. 2024): Mistral 7B's shape with each FFN replaced by 8 SwiGLU experts,
        2 per token (softmax router, the two weights renormalised); RoPE θ = 10⁶, a 32k context, no sliding
        window. 46.7B parameters, 12.9B active per token (``companion.scaling.count_parameters``)."""
        base = dict(d_model=4096, n_heads=32, n_kv_heads=8, n_layers=32, d_ff=14336, max_seq_len=32768,
                    rope_base=1e6, n_experts=8, n_experts_per_token=2)  # fmt: skip
        return cls.llama(**{**base, **changes})

    @classmethod
    def qwen3(cls, **changes: Any) -> ModelConfig:
        """Qwen3 dense (Qwen Team 2025), by default Qwen3-0.6B: Llama-style with GQA, QK-norm and a head width
        of 128 that is not D / H = 64; tied embeddings, RoPE θ = 10⁶, vocabulary 151,936, 40,960 positions.
        Qwen3-8B: ``qwen3(d_model=4096, n_heads=32, n_layers=36, d_ff=12288, tie_embeddings=False)``."""
        base = dict(vocab_size=151936, d_model=1024, n_heads=16, n_kv_heads=8, d_head=128, n_layers=28, d_ff=3072,
                    max_seq_len=40960, rope_base=1e6, norm_eps=1e-6, tie_embeddings=True, qk_norm=True)  # fmt: skip
        return cls.llama(**{**base, **changes})

    @classmethod
    def deepseek_v3(cls, **changes: Any) -> ModelConfig:
        """DeepSeek-V3 (DeepSeek-AI 2024): 61 layers of MLA (kv_rank 512, q_rank 1536, 128 heads of 128 + 64
        RoPE dims) and, after 3 dense layers, MoE FFNs of 256 routed experts (8 per token, sigmoid scores,
        8 groups of which 4 may be used, weights renormalised then × 2.5) plus 1 shared expert of width 2048.
        671B parameters, 37B active per token. The released model extends its 4,096-token context to 128K
        with YaRN (``rope_scaling="yarn", rope_factor=40.0, rope_original_max_seq_len=4096, rope_mscale=1.0,
        rope_mscale_all_dim=1.0``, what ``GPT.from_pretrained`` reads from its config.json) and adds a
        multi-token-prediction module (not modelled here)."""
        base = dict(vocab_size=129280, d_model=7168, n_heads=128, n_layers=61, d_ff=18432, max_seq_len=4096,
                    norm_eps=1e-6, rope_pairing="adjacent", kv_rank=512, q_rank=1536, rope_head_dim=64,
                    nope_head_dim=128, v_head_dim=128, n_experts=256, n_experts_per_token=8, n_shared_experts=1,
                    d_expert=2048, n_dense_layers=3, router="sigmoid", router_scale=2.5, router_groups=8,
                    router_group_limit=4)  # fmt: skip
        return cls.llama(**{**base, **changes})

    @classmethod
    def vit(cls, **changes: Any) -> ModelConfig:
        """ViT-B/16 (Dosovitskiy et al. 2021): 224×224 RGB images cut into 16×16 patches (196 tokens + [CLS]),
        D=768, H=12, 12 pre-LN layers, d_ff=3072, exact GELU, learned positions, LayerNorm eps 1e-12 (as
        Hugging Face's ``ViTConfig``). ``ViT(ModelConfig.vit(), num_labels=1000)`` has 86,567,656 parameters.

        ``max_seq_len`` follows the image: (image_size / patch_size)² patches + [CLS], unless given.
        ``vocab_size`` is unused (an image has no vocabulary).
        """
        base = dict(
            vocab_size=1, d_model=768, n_heads=12, n_layers=12, d_ff=3072, image_size=224, patch_size=16,
            num_channels=3, norm="layernorm", norm_placement="pre", final_norm=True, activation="gelu",
            positions="learned", tie_embeddings=False, bias=True, dropout=0.0, norm_eps=1e-12,
        )  # fmt: skip
        merged = {**base, **changes}
        if "max_seq_len" not in changes and merged["image_size"] is not None:
            merged["max_seq_len"] = (merged["image_size"] // merged["patch_size"]) ** 2 + 1
        return cls(**merged)


# --- field types ----------------------------------------------------------------------------------------

_OPTIONAL_INTS = ("n_encoder_layers", "n_decoder_layers", "n_kv_heads", "rope_original_max_seq_len", "sliding_window",
                  "sliding_window_pattern", "d_head", "d_expert", "kv_rank", "q_rank", "rope_head_dim",
                  "nope_head_dim", "v_head_dim", "image_size")
_FOLLOWERS = (("n_kv_heads", "n_heads"), ("n_encoder_layers", "n_layers"), ("n_decoder_layers", "n_layers"),
              ("d_expert", "d_ff"))
_FIELD_KINDS = {
    **dict.fromkeys(("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_seq_len"), int),
    **dict.fromkeys(_OPTIONAL_INTS, "int?"),
    **dict.fromkeys(("norm_eps", "rope_base", "rope_factor", "dropout"), float),
    **dict.fromkeys(("rope_mscale", "rope_mscale_all_dim"), "float?"),
    **dict.fromkeys(("final_norm", "embed_norm", "tie_embeddings", "bias", "embed_scale", "use_sdpa"), bool),
    **dict.fromkeys(("fused_norm", "decode_layout"), bool),
    **dict.fromkeys(("attention_sinks", "n_experts", "n_experts_per_token", "n_shared_experts", "n_dense_layers",
                     "router_groups", "router_group_limit"), int),
    **dict.fromkeys(("type_vocab_size", "patch_size", "num_channels"), int),
    **dict.fromkeys(("qk_norm", "router_normalize", "router_bias", "sink_logits"), bool),
    "router": str,
    "router_scale": float,
    **dict.fromkeys(("norm", "norm_placement", "activation", "positions", "rope_pairing"), str),
    "rope_scaling": "str?",
}
_MOE_DEFAULTS = {"n_experts_per_token": 2, "n_shared_experts": 0, "n_dense_layers": 0, "router": "softmax",
                 "router_normalize": True, "router_scale": 1.0, "router_groups": 1,
                 "router_group_limit": 1, "router_bias": False}  # fmt: skip
_ROPE_DEFAULTS = {"rope_base": 10000.0, "rope_scaling": None, "rope_factor": 1.0, "rope_original_max_seq_len": None,
                  "rope_pairing": "half", "rope_mscale": None, "rope_mscale_all_dim": None}  # fmt: skip


def _coerce(name: str, value: Any, kind: Any) -> Any:
    """``value`` as a plain Python value of ``kind`` (numpy scalars unwrapped, ints widened to float), or a
    ``TypeError`` naming the field (``bias='False'``, ``dropout=None``, ``d_model=64.0``)."""
    if isinstance(value, np.generic):
        value = value.item()  # np.int64(64) -> 64, np.float32(0.1) -> 0.1, np.bool_(True) -> True
    optional = isinstance(kind, str) and kind.endswith("?")
    base = {"int?": int, "str?": str, "float?": float}.get(kind, kind) if optional else kind
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

"""Issue 13: one rule per idea, one name per concept, and a clear error at every boundary.

Each bad call must raise the named error type with a message that names the argument (``match=``).
Grouped by module; the shared rules themselves (companion._checks) are tested first.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.testing import assert_close

import companion
from companion import _checks
from companion.attention import (
    KVCache,
    MultiHeadAttention,
    MultiHeadLatentAttention,
    RollingKVCache,
    scaled_dot_product_attention,
    softmax,
    split_heads,
)
from companion.data import (
    book_snapshot,
    first_sentence,
    glossary_instructions,
    glossary_terms,
    paragraphs,
    self_check_instructions,
    self_check_questions,
    split_by_key,
    swap_adjacent_words,
    tag_segments,
    translation_instructions,
)
from companion.embeddings import TokenEmbedding
from companion.finetune import (
    LoRALinear,
    add_chat_tokens,
    apply_lora,
    chat_template,
    dpo_loss,
    encode_prompt,
    implicit_rewards,
    lora_modules,
    mean_token_kl,
    merge_lora,
    sequence_logprobs,
    sft_batch,
    sft_loss,
    token_logprobs,
)
from companion.generation import Utf8Mask, beam_search, generate, translate
from companion.layers import FeedForward, LayerNorm, ResidualBlock, RMSNorm
from companion.masks import padding_mask
from companion.models import (
    GPT,
    Encoder,
    ModelConfig,
    SequenceClassifier,
    TokenClassifier,
    Transformer,
    ViT,
    mask_tokens,
    pool,
    span_corruption,
)
from companion.moe import MoE, load_balancing_loss, moe_per_expert, moe_per_token, route
from companion.positions import RotaryEmbedding, apply_rope, inverse_frequencies, rope_frequencies, sinusoidal_encoding
from companion.scaling import count_parameters, fit_power_law, kv_cache_bytes
from companion.training import classification_loss, mlm_loss

TINY = dict(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32, dropout=0.0)


def tiny_gpt(**changes) -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig(**{**TINY, **changes})).eval()


def ids(*rows: list[int]) -> torch.Tensor:
    return torch.tensor(rows)


# --- the shared rules --------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int16, torch.int32, torch.int64])
def test_every_integer_id_dtype_is_accepted_everywhere(dtype: torch.dtype) -> None:
    x = torch.tensor([[1, 2, 3]], dtype=dtype)
    emb = TokenEmbedding(10, 4)
    assert_close(emb(x), emb(x.long()))
    assert padding_mask(x, 0).shape == (1, 1, 1, 3)
    model = tiny_gpt()
    assert_close(model(x), model(x.long()))
    assert generate(model, x, 2, greedy=True).dtype == torch.int64


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: _checks.check_token_ids("ids", torch.tensor([1.0])), TypeError, "ids must hold integer"),
        (lambda: _checks.check_token_ids("ids", torch.tensor([True])), TypeError, "ids must hold integer"),
        (lambda: _checks.check_token_ids("ids", torch.tensor([1], dtype=torch.uint8)), TypeError, "int16, int32"),
        (lambda: _checks.check_token_ids("ids", torch.zeros(1, 0, dtype=torch.long)), ValueError, "ids is empty"),
        (lambda: _checks.check_token_ids("ids", ids([0, 7]), vocab_size=7), ValueError, "token id 7 in ids"),
        (lambda: _checks.check_probability("p", 1.5), ValueError, r"p=1.5 .* \[0, 1\]"),
        (lambda: _checks.check_probability("p", float("nan")), ValueError, "p=nan"),
        (lambda: _checks.check_probability("p", "0.5"), TypeError, "p must be a number"),
        (lambda: _checks.check_dropout("dropout", 1.0), ValueError, r"dropout=1.0 .* \[0, 1\)"),
        (lambda: _checks.check_dropout("dropout", None), TypeError, "dropout must be a number"),
        (lambda: _checks.check_positive_float("scale", float("inf")), ValueError, "scale=inf"),
        (lambda: _checks.check_positive_float("scale", 0.0), ValueError, "scale=0.0 .* > 0"),
        (lambda: _checks.check_bool("bias", "False"), TypeError, "bias must be a bool"),
        (lambda: _checks.check_bool("bias", 0), TypeError, "bias must be a bool"),
        (lambda: _checks.check_string("name", ""), ValueError, "name is the empty string"),
        (lambda: _checks.check_string("name", 3), TypeError, "name must be a str"),
    ],
)
def test_shared_rules(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_choice_lists_are_declared_once() -> None:
    from companion import layers, positions
    from companion.models import config

    assert config.NORMS is layers.NORMS and config.ACTIVATIONS is layers.ACTIVATIONS
    assert config.PLACEMENTS is layers.PLACEMENTS
    assert config.ROPE_PAIRINGS is positions.PAIRINGS and config.ROPE_SCALINGS is positions.TABLE_SCALINGS


# --- one name per concept: the old keyword names are gone (issue 24) --------------------------------------


def test_old_keyword_names_are_refused() -> None:
    """``pad_mask``/``src_mask``/``memory_mask``/``padding`` -> ``padding_mask``, ``context`` -> ``memory``,
    ``max_len`` -> ``max_new_tokens``, ``batch`` -> ``batch_size``, ``dropout_p`` -> ``dropout``: the old names
    raise Python's own TypeError (no alias layer), and the new ones work."""
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**TINY)).eval()
    src, tgt = ids([5, 6, 0]), ids([1, 7])
    mask = padding_mask(src, 0)
    gpt, enc, attn = tiny_gpt(), Encoder(ModelConfig(**TINY)).eval(), MultiHeadAttention(8, 2).eval()
    x, h, q = torch.randn(1, 2, 8), torch.randn(1, 3, 8), torch.randn(2, 3, 4)
    memory = model.encode(src, padding_mask=mask)
    old_calls = [
        lambda: model(src, tgt, src_mask=mask), lambda: model.encode(src, src_mask=mask),
        lambda: model.decode(tgt, memory, memory_mask=mask), lambda: gpt(src, pad_mask=mask),
        lambda: enc(src, pad_mask=mask), lambda: attn(x, context=h),
        lambda: scaled_dot_product_attention(q, q, q, dropout_p=0.0), lambda: kv_cache_bytes(2, 2, 4, 8, batch=3),
        lambda: translate(model, src, 1, 2, max_len=3),
    ]  # fmt: skip
    for call in old_calls:
        with pytest.raises(TypeError, match="unexpected keyword argument"):
            call()
    with torch.no_grad():
        model(src, tgt, padding_mask=mask), gpt(src, padding_mask=mask), attn(x, memory=h)
    assert kv_cache_bytes(2, 2, 4, 8, batch_size=3) == 3 * kv_cache_bytes(2, 2, 4, 8, batch_size=1)
    assert translate(model, src, 1, 2, max_new_tokens=3).shape[0] == 1


# --- ModelConfig validates itself, once ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        (dict(bias="False"), TypeError, "bias must be a bool"),
        (dict(dropout=None), TypeError, "dropout must be a float"),
        (dict(d_model=64.0), TypeError, "d_model must be an int"),
        (dict(n_kv_heads="2"), TypeError, "n_kv_heads must be an int or None"),
        (dict(norm=None), TypeError, "norm must be a str"),
        (dict(rope_scaling=1), TypeError, "rope_scaling must be a str or None"),
        (dict(tie_embeddings=1), TypeError, "tie_embeddings must be a bool"),
        (dict(fused_norm="yes"), TypeError, "fused_norm must be a bool"),
        (dict(decode_layout=1), TypeError, "decode_layout must be a bool"),
        (dict(dropout=1.0), ValueError, "dropout=1.0"),
        (dict(norm_eps=float("nan")), ValueError, "norm_eps=nan"),
        (dict(rope_base=500000.0), ValueError, "rope_base=500000.0 is set but positions='learned'"),
        (dict(rope_pairing="adjacent"), ValueError, "rope_pairing='adjacent' is set but positions"),
        (dict(rope_scaling="linear", rope_factor=2.0), ValueError, "rope_scaling='linear' is set but positions"),
        (dict(positions="rope", rope_base=1.0), ValueError, "rope_base=1.0 .* > 1"),
        (dict(positions="rope", rope_base=float("inf")), ValueError, "rope_base=inf"),
        (dict(positions="rope", rope_scaling="yarn", rope_factor=2.0), ValueError, "rope_original_max_seq_len"),
        (dict(positions="rope", rope_scaling="dynamic"), ValueError, "rope_scaling='dynamic'"),
    ],
)
def test_model_config_rejects_bad_fields(changes: dict, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        ModelConfig(**{**TINY, **changes})


def test_model_config_converts_numpy_scalars_and_resolves_defaults() -> None:
    cfg = ModelConfig(**{**TINY, "d_model": np.int64(32), "dropout": np.float64(0.1), "bias": np.bool_(False)})
    assert type(cfg.d_model) is int and type(cfg.dropout) is float and cfg.bias is False
    assert cfg == ModelConfig(**{**TINY, "dropout": 0.1, "bias": False})  # plain Python numbers: checkpoints load
    assert type(ModelConfig(**{**TINY, "dropout": 0}).dropout) is float
    assert (cfg.n_kv_heads, cfg.n_encoder_layers, cfg.n_decoder_layers) == (4, 2, 2)  # resolved, plain ints
    assert ModelConfig(**TINY, n_kv_heads=2, n_decoder_layers=3).n_kv_heads == 2


def test_model_config_replace_keeps_derived_fields_following() -> None:
    cfg = ModelConfig(**TINY)
    wider = cfg.replace(d_model=64, n_heads=8, n_layers=3)
    assert (wider.n_kv_heads, wider.n_encoder_layers, wider.n_decoder_layers) == (8, 3, 3)  # still MHA, same depth
    gqa = ModelConfig(**TINY, n_kv_heads=2).replace(n_heads=8, d_model=64)
    assert gqa.n_kv_heads == 2  # an explicit GQA choice is kept
    assert cfg.replace(n_heads=8, d_model=64, n_kv_heads=4).n_kv_heads == 4


# --- attention -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: softmax(torch.tensor([1, 2, 3])), TypeError, "x must be a floating-point"),
        (lambda: softmax(torch.zeros(2, 0)), ValueError, "x is empty"),
        (lambda: softmax(torch.zeros(2, 3), dim=2), ValueError, "dim=2 is out of range"),
        (lambda: softmax(torch.zeros(2, 3), dim=-3), ValueError, "dim=-3 is out of range"),
        (lambda: split_heads(torch.zeros(1, 2, 8), 3), ValueError, "n_heads=3 does not divide"),
        (lambda: split_heads(torch.zeros(1, 2, 8), 0), ValueError, "n_heads=0"),
        (lambda: split_heads(torch.zeros(1, 2, 8), 2.0), TypeError, "n_heads must be an int"),
        (lambda: scaled_dot_product_attention(*[torch.randn(2, 4)] * 3, scale=0.0), ValueError, "scale=0.0"),
        (lambda: scaled_dot_product_attention(*[torch.randn(2, 4)] * 3, scale=float("nan")), ValueError, "scale=nan"),
        (lambda: scaled_dot_product_attention(*[torch.randn(2, 4)] * 3, scale=-1.0), ValueError, "scale=-1.0"),
        (lambda: scaled_dot_product_attention(*[torch.randn(2, 4)] * 3, mask=torch.tensor([[0.0, float("nan")]] * 2)),
         ValueError, "mask holds NaN or \\+inf"),
        (lambda: scaled_dot_product_attention(*[torch.randn(2, 4)] * 3, mask=torch.tensor([[0.0, float("inf")]] * 2)),
         ValueError, "mask holds NaN or \\+inf"),
        (lambda: MultiHeadAttention(8, 2, use_sdpa=True)(torch.randn(1, 2, 8), mask=torch.full((2, 2), float("nan"))),
         ValueError, "mask holds NaN"),
        (lambda: MultiHeadAttention(8, 2, dropout=1.0), ValueError, "dropout=1.0"),
        (lambda: MultiHeadAttention(8, 2, bias="yes"), TypeError, "bias must be a bool"),
        (lambda: KVCache().reorder(torch.tensor([0.0])), TypeError, "index must hold integer"),
    ],
)
def test_attention_bad_input(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_additive_masks_with_minus_inf_and_finite_biases_still_work() -> None:
    q = torch.randn(2, 4)
    mask = torch.tensor([[0.0, -1.5], [float("-inf"), 0.0]])
    out = scaled_dot_product_attention(q, q, q, mask=mask)
    assert_close(out, F.scaled_dot_product_attention(q[None], q[None], q[None], attn_mask=mask)[0])


def test_kv_cache_reorder_checks_its_rows() -> None:
    cache = KVCache()
    cache.update(torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4))
    with pytest.raises(ValueError, match="index holds row 2; expected 0 <= index < 2"):
        cache.reorder(torch.tensor([0, 2]))
    with pytest.raises(ValueError, match="index holds row -1"):
        cache.reorder(torch.tensor([-1]))
    k = cache.k.clone()
    cache.reorder(torch.tensor([1, 1, 0]))
    assert_close(cache.k, k[[1, 1, 0]])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scores_are_computed_in_float32(dtype: torch.dtype) -> None:
    """q = k = v = 300 in fp16: Q Kᵀ = 300² · 64 = 5.8e6 overflows fp16 (max 65,504); float32 scores do not."""
    q = torch.full((1, 2, 5, 64), 300.0, dtype=dtype)
    out, weights = scaled_dot_product_attention(q, q, q, return_weights=True)
    assert torch.isfinite(out).all() and out.dtype == dtype and weights.dtype == dtype
    assert_close(out, F.scaled_dot_product_attention(q.float(), q.float(), q.float()).to(dtype))
    x = torch.randn(2, 3, 7, 16, generator=torch.Generator().manual_seed(0)).to(dtype)
    mask = torch.ones(7, 7, dtype=torch.bool).tril()
    assert_close(scaled_dot_product_attention(x, x, x, mask), F.scaled_dot_product_attention(x, x, x, attn_mask=mask),
                 atol=1e-2, rtol=1e-2)  # fmt: skip


# --- the cache list handed to a model -------------------------------------------------------------------


def test_models_reject_shared_or_misshapen_kv_caches() -> None:
    model = tiny_gpt()
    x = ids([1, 2])
    shared = KVCache()
    with pytest.raises(ValueError, match="same cache object"):
        model(x, kv_caches=[shared, shared])
    with pytest.raises(ValueError, match="kv_caches has 3 caches; expected one per layer \\(2\\)"):
        model(x, kv_caches=[KVCache() for _ in range(3)])
    with pytest.raises(TypeError, match="kv_caches\\[1\\] is a dict"):
        model(x, kv_caches=[KVCache(), {}])
    with pytest.raises(TypeError, match="kv_caches must be a list"):
        model(x, kv_caches=KVCache())
    caches = model.new_kv_caches()
    with torch.no_grad():
        model(x, kv_caches=caches)
    caches[1].reset()
    with pytest.raises(ValueError, match="different lengths \\[0, 2\\]"):
        model(x, kv_caches=caches)
    torch.manual_seed(0)
    seq2seq = Transformer(ModelConfig(**TINY)).eval()
    memory = seq2seq.encode(x)
    with pytest.raises(ValueError, match="kv_caches has 1 caches"):
        seq2seq.decode(x, memory, kv_caches=seq2seq.new_kv_caches()[:1])
    caches = seq2seq.new_kv_caches()
    caches[1].cross_attn = caches[0].cross_attn
    with pytest.raises(ValueError, match="same cache object"):
        seq2seq.decode(x, memory, kv_caches=caches)


# --- generation ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m: generate(m, ids([1, 2]), 2, eos_id=40), ValueError, "eos_id=40 is outside the vocabulary"),
        (lambda m: generate(m, ids([1, 2]), 2, eos_id=-1), ValueError, "eos_id=-1"),
        (lambda m: generate(m, ids([1, 41]), 2), ValueError, "token id 41 in ids"),
        (lambda m: generate(m, ids([1, 2]).float(), 2), TypeError, "ids must hold integer"),
        (lambda m: generate(m, ids([1, 2]), 2, temperature=float("inf")), ValueError, "temperature=inf"),
        (lambda m: generate(m, ids([1, 2]), 2, top_p=float("nan")), ValueError, "top_p=nan"),
        (lambda m: generate(m, ids([1, 2]), 2, greedy="yes"), TypeError, "greedy must be a bool"),
        (lambda m: beam_search(m, ids([1, 2]), 2, 3, length_penalty=float("nan")), ValueError, "length_penalty=nan"),
        (lambda m: beam_search(m, ids([1, 2]), 2, 3, length_penalty=float("inf")), ValueError, "length_penalty=inf"),
        (lambda m: beam_search(m, ids([1, 2]), 2, 3, eos_id=99), ValueError, "eos_id=99"),
        (lambda m: translate(m, ids([1, 2]), 1, 2, 3), TypeError, "encoder-decoder"),
    ],
)
def test_generation_bad_input(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call(tiny_gpt())


def test_translate_checks_its_token_ids() -> None:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(**TINY)).eval()
    with pytest.raises(ValueError, match="eos_id=40"):
        translate(model, ids([3, 4]), 1, 40, 3)
    with pytest.raises(ValueError, match="bos_id=-2"):
        translate(model, ids([3, 4]), -2, 2, 3)


# --- layers ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: LayerNorm(4)(torch.ones(2, 4, dtype=torch.long)), TypeError, "x must be a floating-point"),
        (lambda: RMSNorm(4)(torch.ones(2, 4, dtype=torch.int32)), TypeError, "x must be a floating-point"),
        (lambda: LayerNorm(4, eps=float("nan")), ValueError, "eps=nan"),
        (lambda: LayerNorm(4, bias="no"), TypeError, "bias must be a bool"),
        (lambda: FeedForward(4, 8, dropout=-0.1), ValueError, "dropout=-0.1"),
        (lambda: LayerNorm(4, fused=1), TypeError, "fused must be a bool"),
        (lambda: RMSNorm(4, fused="True"), TypeError, "fused must be a bool"),
        (lambda: ResidualBlock(4)(torch.randn(2, 3, 4), lambda h: h[..., :2]), ValueError,
         r"sublayer returned \(2, 3, 2\) for an input of shape \(2, 3, 4\)"),
        (lambda: ResidualBlock(4, placement="post")(torch.randn(2, 3, 4), lambda h: h.sum(-1)), ValueError,
         "sublayer returned"),
    ],
)
def test_layers_bad_input(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


# --- positions -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: apply_rope(torch.ones(5, 8, dtype=torch.long), torch.ones(5, 4), torch.ones(5, 4)), TypeError,
         "x must be a floating-point"),
        (lambda: apply_rope(torch.ones(5, 8), torch.ones(3, 4), torch.ones(3, 4)), ValueError,
         r"cos has 3 positions .* x has T=5"),
        (lambda: apply_rope(torch.ones(2, 5, 8), torch.ones(4, 5, 4), torch.ones(4, 5, 4)), ValueError,
         "cos has 5 positions"),
        (lambda: rope_frequencies(8, base=1.0), ValueError, "base=1.0"),
        (lambda: rope_frequencies(8, base=float("nan")), ValueError, "base=nan"),
        (lambda: sinusoidal_encoding(4, 8, base=0.5), ValueError, "base=0.5"),
        (lambda: RotaryEmbedding(8, 16, base=-3.0), ValueError, "base=-3.0"),
        (lambda: inverse_frequencies(7), ValueError, "d_model=7 is odd"),
    ],
)
def test_positions_bad_input(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_one_inverse_frequency_helper_behind_sinusoidal_and_rope() -> None:
    theta = inverse_frequencies(16, 10000.0)
    assert_close(rope_frequencies(16, dtype=torch.float64), theta)
    pe = sinusoidal_encoding(5, 16)
    assert_close(pe[3, 0::2], torch.sin(3 * theta).float())
    assert_close(pe[3, 1::2], torch.cos(3 * theta).float())


# --- scaling and seeding ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("n", "loss", "match"),
    [
        ([1e3, 1e4, float("inf"), 1e6], [3.0, 2.5, 2.2, 2.1], "n=.*expected finite numbers > 0"),
        ([1e3, 1e4, float("nan"), 1e6], [3.0, 2.5, 2.2, 2.1], "n=.*expected finite numbers > 0"),
        ([1e3, 1e4, 1e5, 1e6], [3.0, float("nan"), 2.2, 2.1], "loss=.*expected finite"),
        ([1e3, 1e4, 1e5, 1e6], [3.0, 2.5, float("-inf"), 2.1], "loss=.*expected finite"),
    ],
)
def test_fit_power_law_rejects_non_finite_data(n: list, loss: list, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        fit_power_law(n, loss)


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_seed_everything_checks_the_range_before_seeding(seed: int) -> None:
    torch.manual_seed(123)
    expected = torch.rand(1)
    torch.manual_seed(123)
    with pytest.raises(ValueError, match=f"seed={seed} is out of range"):
        companion.seed_everything(seed)
    assert torch.equal(torch.rand(1), expected), "a rejected seed must not have seeded torch"


def test_seed_everything_accepts_numpy_s_full_range() -> None:
    companion.seed_everything(2**32 - 1)
    assert math.isfinite(float(torch.rand(1)))


# --- issue 28: the last round's additions (LoRA, SFT/DPO, MoE, MLA, rolling caches, classifiers, data) ----------

SMALL = ModelConfig(vocab_size=40, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=16)
VIT = dict(image_size=8, patch_size=4, d_model=16, n_heads=2, n_layers=1, d_ff=32)


def _mla() -> MultiHeadLatentAttention:
    return MultiHeadLatentAttention(16, 2, 8, rope_head_dim=4, nope_head_dim=4, v_head_dim=4)


def _sigmoid_moe_with_nan_bias() -> torch.Tensor:
    moe = MoE(8, 16, 4, scoring="sigmoid")
    moe.score_bias.fill_(float("nan"))
    return moe(torch.zeros(1, 2, 8))


def _one_expert() -> nn.ModuleList:
    return nn.ModuleList([nn.Linear(4, 4)])


def _chat() -> list[dict[str, str]]:
    return [{"role": "user", "content": "x"}]


LAST_ROUND = [
    # LoRA
    (lambda: LoRALinear(nn.Linear(4, 4), r=0, alpha=1), ValueError, "r=0"),
    (lambda: LoRALinear(nn.Linear(4, 4), r=1, alpha=1, dropout=1.0), ValueError, "dropout=1.0"),
    (lambda: LoRALinear(nn.Linear(4, 4), r=1, alpha=1)(torch.zeros(2, 4, dtype=torch.float16)), TypeError,
     "x has dtype torch.float16 but the layer's weights are torch.float32"),
    (lambda: apply_lora("model", 2, 4), TypeError, "model must be a torch.nn.Module, got str"),
    (lambda: apply_lora(GPT(SMALL), 2, 4, targets=[1]), TypeError, "targets must be a non-empty list of module names"),
    (lambda: apply_lora(GPT(SMALL), 2, 4, dropout=2.0), ValueError, "dropout=2.0"),
    (lambda: merge_lora("model"), TypeError, "model must be a torch.nn.Module, got str"),
    (lambda: lora_modules(3), TypeError, "model must be a torch.nn.Module, got int"),
    # SFT and DPO
    (lambda: chat_template(_chat(), add_generation_prompt="yes"), TypeError, "add_generation_prompt must be a bool"),
    (lambda: chat_template([{"role": "bot", "content": "x"}]), ValueError, r"messages\[0\]\['role'\]='bot'"),
    (lambda: encode_prompt(_chat(), object()), TypeError, "tokenizer must be a companion BPETokenizer"),
    (lambda: add_chat_tokens("tokenizer"), TypeError, "tokenizer must be a companion BPETokenizer"),
    (lambda: sft_batch([([1, -5], [False, True])], 0), ValueError, r"examples\[0\] holds the id -5"),
    (lambda: sft_batch([(["a", "b"], [False, True])], 0), ValueError, r"examples\[0\] holds the id 'a'"),
    (lambda: sft_loss(GPT(SMALL), (torch.ones(1, 3, dtype=torch.long), torch.full((1, 3), -100))), ValueError,
     "labels scores no position"),
    (lambda: sequence_logprobs(GPT(SMALL), (torch.ones(1, 3, dtype=torch.long), torch.full((1, 3), 45))),
     ValueError, "label 45 in labels is out of range; expected 0 <= label < vocab_size=40"),
    (lambda: token_logprobs(torch.zeros(1, 3, 5), torch.tensor([[0, -1, 2]])), ValueError, "label -1 in labels"),
    (lambda: mean_token_kl(torch.zeros(1, 2, 5), torch.zeros(1, 2, 5), torch.zeros(1, 2)), TypeError,
     "labels must hold integer"),
    (lambda: dpo_loss(*[torch.zeros(2)] * 4, beta="0.1"), TypeError, "beta must be a number"),
    (lambda: implicit_rewards(torch.zeros(2), torch.zeros(3), 0.1), ValueError, "ref_logps has shape"),
    # MoE
    (lambda: route(torch.zeros(3, 4), 2, bias=torch.zeros(3)), ValueError, r"bias has shape \(3,\).*shape \(4,\)"),
    (lambda: route(torch.zeros(3, 4), 2, bias=torch.tensor([0.0, float("nan"), 0.0, 0.0])), ValueError,
     "bias holds NaN"),
    (lambda: route(torch.zeros(3, 4), 2, normalize="yes"), TypeError, "normalize must be a bool"),
    (lambda: route(torch.zeros(3, 4), 2, scale=0.0), ValueError, "scale=0.0"),
    (lambda: load_balancing_loss(torch.full((3, 4), 0.25), torch.zeros(3, 2, dtype=torch.long), 2), ValueError,
     "n_experts=2 but probs has 4 columns"),
    (lambda: load_balancing_loss(torch.full((3, 4), 0.25), torch.full((3, 2), 7), 4), ValueError,
     "experts holds id 7; expected 0 <= id < n_experts=4"),
    (lambda: load_balancing_loss(torch.full((3, 4), 0.25), torch.zeros(3, 2), 4), ValueError, "integer expert ids"),
    (lambda: moe_per_token(torch.zeros(3, 4), torch.ones(3, 1), torch.full((3, 1), 9), _one_expert()), ValueError,
     "experts holds ids 9..9; expected 0 <= id < 1"),
    (lambda: moe_per_expert(torch.zeros(3, 4), torch.ones(2, 1), torch.zeros(3, 1, dtype=torch.long), _one_expert()),
     ValueError, "do not fit"),
    (lambda: MoE(8, 16, 4)(torch.zeros(2, 3, 8, dtype=torch.float64)), TypeError, "x has dtype torch.float64"),
    (_sigmoid_moe_with_nan_bias, ValueError, "bias holds NaN"),
    (lambda: MoE(8, 16, 4, scoring="sigmoid").update_score_bias(float("nan")), ValueError, "rate=nan"),
    # MLA and rolling caches
    (lambda: _mla()(torch.zeros(1, 3, 16, dtype=torch.float64)), TypeError, "x has dtype torch.float64"),
    (lambda: _mla()(torch.zeros(1, 3, 16), kv_cache=[]), TypeError, "kv_cache must be a KVCache"),
    (lambda: MultiHeadLatentAttention(16, 2, 32), ValueError, "kv_rank=32 is larger than the model width"),
    (lambda: RollingKVCache(0), ValueError, "window=0"),
    (lambda: RollingKVCache(4, -1), ValueError, "n_sinks=-1"),
    (lambda: RollingKVCache(4).mask(0), ValueError, "t=0"),
    (lambda: RollingKVCache(4).update(torch.zeros(1, 1, 3, 4), torch.zeros(1, 1, 2, 4)), ValueError, "k is"),
    # classifiers, their losses and corruptions, ViT
    (lambda: SequenceClassifier(SMALL, 2, pooling="max"), ValueError, "pooling='max'"),
    (lambda: SequenceClassifier.from_encoder(GPT(SMALL), 2), TypeError, "encoder must be a companion.models.Encoder"),
    (lambda: pool(torch.zeros(2, 3, 4), "mean", torch.tensor([[1, 1, 1], [0, 0, 0]]).bool()), ValueError,
     "padding_mask hides every token of row 1"),
    (lambda: classification_loss(TokenClassifier(SMALL, 2), (torch.ones(1, 3, dtype=torch.long),
                                                             torch.full((1, 3), -100))),
     ValueError, "labels scores no position"),
    (lambda: mlm_loss(Encoder(SMALL), (torch.ones(1, 3, dtype=torch.long), torch.ones(1, 3))), TypeError,
     "labels must hold integer"),
    (lambda: mlm_loss(Encoder(SMALL), (torch.ones(1, 3, dtype=torch.long), torch.full((1, 3), 40))), ValueError,
     "label 40 in labels is out of range; expected 0 <= label < vocab_size=40"),
    (lambda: mask_tokens(ids([1, 50]), 2, 40), ValueError, "token id 50 in ids"),
    (lambda: mask_tokens(ids([1, 5]), 2, 40, special_ids=(99,)), ValueError, "special_ids entry=99"),
    (lambda: mask_tokens(ids([1, 5]), 2, 40, special_ids=(2,)), ValueError, "mask_id=2 is also in special_ids"),
    (lambda: mask_tokens(ids([1, 5]), 2, 40, special_ids=3), TypeError, "special_ids must be a tuple"),
    (lambda: span_corruption("the cat sat on the mat"), TypeError, "tokens must be a list of tokens"),
    (lambda: span_corruption(torch.arange(10)), TypeError, "tokens must be a list of tokens"),
    (lambda: span_corruption(list(range(20)), sentinel=lambda i: 19 - i), ValueError,
     r"sentinel\(0\)=19 is also a token of tokens"),
    (lambda: span_corruption(list(range(60)), sentinel=lambda i: -1), ValueError, r"sentinel\(1\)=-1 is also"),
    (lambda: span_corruption(list(range(20)), sentinel="<x>"), TypeError, "sentinel must be a function"),
    (lambda: ViT(ModelConfig.vit(**VIT), 2)(torch.zeros(1, 3, 8, 8, dtype=torch.uint8)), TypeError,
     "images must be a floating-point tensor, got dtype torch.uint8"),
    (lambda: ViT(ModelConfig.vit(**VIT), 2)(torch.zeros(1, 3, 8, 8, dtype=torch.float64)), TypeError,
     "images has dtype torch.float64"),
    # config fields a model would ignore
    (lambda: ViT(ModelConfig.vit(**VIT, max_seq_len=64), 2), ValueError,
     "max_seq_len=64 is set but a ViT does not use it; expected max_seq_len=5"),
    (lambda: ViT(ModelConfig.vit(**VIT, n_experts=4), 2), ValueError, "n_experts=4 is set but a ViT"),
    (lambda: Encoder(SMALL.replace(n_experts=4)), ValueError, "n_experts=4 is set but an Encoder does not use it"),
    (lambda: Encoder(SMALL.replace(sliding_window=4)), ValueError, "sliding_window=4 is set but an Encoder"),
    (lambda: SequenceClassifier(SMALL.replace(sliding_window=4), 2), ValueError, "sliding_window=4 is set"),
    (lambda: Transformer(SMALL.replace(n_experts=4)), ValueError, "n_experts=4 is set but a Transformer"),
    (lambda: SMALL.replace(n_shared_experts=1), ValueError, "n_shared_experts=1 is set but n_experts=0"),
    (lambda: SMALL.replace(router="sigmoid"), ValueError, "router='sigmoid' is set but n_experts=0"),
    (lambda: SMALL.replace(d_expert=8), ValueError, "d_expert=8 is set but n_experts=0"),
    (lambda: count_parameters(SMALL.replace(n_experts=4), "transformer"), ValueError,
     "n_experts=4 is set but family='transformer'"),
    (lambda: count_parameters(SMALL.replace(n_experts=4), "encoder"), ValueError, "family='encoder'"),
    # data helpers and the UTF-8 mask
    (lambda: paragraphs(b"text"), TypeError, "markdown must be a str"),
    (lambda: tag_segments(None), TypeError, "paragraph must be a str"),
    (lambda: book_snapshot().prose(0, 12), ValueError, "last=12"),
    (lambda: glossary_terms(None), TypeError, "markdown must be a str"),
    (lambda: self_check_questions(3), TypeError, "markdown must be a str"),
    (lambda: first_sentence(None), TypeError, "text must be a str"),
    (lambda: glossary_instructions("terms"), TypeError, "terms must be a list"),
    (lambda: self_check_instructions([1]), TypeError, r"questions\[0\] is of type int; expected SelfCheckQuestion"),
    (lambda: translation_instructions([("a",)]), TypeError, r"pairs\[0\].* is not a \(Chinese words, English"),
    (lambda: split_by_key([1, 2], 0.5), TypeError, r"instructions\[0\] is of type int; expected Instruction"),
    (lambda: split_by_key([], 0.5, seed=-1), ValueError, "seed=-1"),
    (lambda: swap_adjacent_words("a b c", 3), TypeError, "rng must be a random.Random"),
    (lambda: swap_adjacent_words(None, random.Random(0)), TypeError, "answer must be a str"),
    (lambda: generate(GPT(SMALL), ids([1]), 2, valid_utf8=Utf8Mask([bytes([i]) for i in range(50)])), ValueError,
     "valid_utf8 describes 50 token ids but the model has vocab_size=40"),
    (lambda: generate(GPT(SMALL), ids([1]), 2, eos_id=39, valid_utf8=Utf8Mask([b"a"] * 39 + [None])), ValueError,
     "eos_id=39 can never be chosen under valid_utf8"),
]  # fmt: skip


@pytest.mark.parametrize(("call", "error", "match"), LAST_ROUND)
def test_last_round_bad_input(call, error: type[Exception], match: str) -> None:
    torch.manual_seed(0)
    with pytest.raises(error, match=match):
        call()

"""Tests of companion.scaling: counts against real modules, FLOPs against torch's counter, the power-law fit."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from companion.data import markov_source
from companion.models import GPT, Encoder, ModelConfig, Transformer, num_parameters
from companion.scaling import (
    count_parameters,
    fit_power_law,
    forward_flops_per_token,
    kv_cache_bytes,
    training_flops,
)
from companion.training import scaling_sweep

PRESETS = ["transformer_base", "gpt2_small", "llama", "llama_tiny", "bert_base", "mistral_7b"]
FAMILIES = {"gpt": GPT, "transformer": Transformer, "encoder": Encoder}


def module_count(config: ModelConfig, family: str) -> int:
    with torch.device("meta"):  # shapes only: a 7B model costs no memory
        return num_parameters(FAMILIES[family](config))


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("preset", PRESETS)
def test_count_parameters_equals_the_modules(preset, family):
    config = getattr(ModelConfig, preset)()
    if family == "encoder" and config.sliding_window is not None:  # a window it would ignore: refused (issue 28)
        with pytest.raises(ValueError, match="sliding_window=4096 is set but an Encoder does not use it"):
            module_count(config, family)
        return
    assert count_parameters(config, family) == module_count(config, family)


@pytest.mark.parametrize(
    "changes",
    [dict(positions="rope"), dict(tie_embeddings=False), dict(n_kv_heads=1), dict(activation="swiglu", bias=False),
     dict(norm="rmsnorm", final_norm=False), dict(embed_norm=True), dict(n_encoder_layers=3, n_decoder_layers=1),
     dict(type_vocab_size=2)],
)
def test_count_parameters_follows_each_config_field(changes):
    config = ModelConfig(**changes)
    for family in FAMILIES:
        assert count_parameters(config, family) == module_count(config, family), family


def test_published_counts():
    assert count_parameters(ModelConfig.gpt2_small()) == 124_439_808  # Hugging Face GPT2LMHeadModel
    assert count_parameters(ModelConfig.llama()) == 6_738_415_616  # Llama-2-7b-hf


def test_non_embedding_count_leaves_out_the_tables():
    config = ModelConfig.gpt2_small()
    tables = config.vocab_size * config.d_model + config.max_seq_len * config.d_model
    assert count_parameters(config, embeddings=False) == count_parameters(config) - tables
    untied = ModelConfig.llama()
    assert count_parameters(untied, embeddings=False) == count_parameters(untied) - 2 * 32000 * 4096


def test_count_parameters_rejects_unknown_family():
    with pytest.raises(ValueError, match="family='bert'"):
        count_parameters(ModelConfig(), "bert")


@pytest.mark.parametrize(
    "config",
    [
        ModelConfig(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=24),
        ModelConfig.llama_tiny(vocab_size=50, max_seq_len=24),  # SwiGLU, GQA, untied head
        ModelConfig(vocab_size=50, d_model=32, n_heads=4, n_kv_heads=1, n_layers=3, d_ff=40, max_seq_len=24),
    ],
)
def test_forward_flops_match_torch_flop_counter(config):
    seq_len, batch = 24, 2
    model = GPT(config)
    with FlopCounterMode(display=False) as counter:
        model(torch.randint(50, (batch, seq_len)))
    assert forward_flops_per_token(config, seq_len) == counter.get_total_flops() / (batch * seq_len)


def test_attention_flops_grow_linearly_with_context():
    config = ModelConfig.gpt2_small()
    f1, f2, f3 = (forward_flops_per_token(config, t) for t in (1024, 2048, 3072))
    assert f3 - f2 == pytest.approx(f2 - f1)
    assert f2 - f1 == 2 * 2 * config.n_layers * 1024 * config.d_model, "QKᵀ and AV: 2 FLOPs per multiply-add each"


def test_training_flops_is_six_n_d():
    assert training_flops(124e6, 1e9) == 6 * 124e6 * 1e9
    with pytest.raises(ValueError, match="n_tokens"):
        training_flops(1e6, 0)


def test_kv_cache_llama_7b_and_gqa():
    full = kv_cache_bytes(n_layers=32, n_kv_heads=32, head_dim=128, seq_len=4096)
    assert full == 2**31, "2 GiB per 4k-token sequence in fp16"
    assert kv_cache_bytes(32, 8, 128, 4096) * 4 == full, "8 shared K/V heads instead of 32: a quarter"
    assert kv_cache_bytes(32, 32, 128, 4096, batch_size=3, bytes_per_value=4) == 6 * full
    with pytest.raises(ValueError, match="seq_len"):
        kv_cache_bytes(32, 32, 128, 0)


def test_kv_cache_bytes_equals_a_real_cache():
    config = ModelConfig.llama_tiny(max_seq_len=32)
    model = GPT(config).to(torch.float16)
    caches = model.new_kv_caches()
    with torch.no_grad():
        model(torch.randint(256, (3, 20)), kv_caches=caches)
    real = sum(c.k.numel() * c.k.element_size() + c.v.numel() * c.v.element_size() for c in caches)
    assert real == kv_cache_bytes(config.n_layers, config.n_kv_heads, config.head_dim, 20, batch_size=3)


# --- power-law fit ----------------------------------------------------------------------------------------


def test_fit_recovers_exact_power_law():
    n = np.geomspace(1e3, 1e7, 8)
    fit = fit_power_law(n, 1.7 + 40.0 * n**-0.35)
    assert fit.E == pytest.approx(1.7, rel=1e-6)
    assert fit.A == pytest.approx(40.0, rel=1e-5)
    assert fit.alpha == pytest.approx(0.35, rel=1e-6)
    np.testing.assert_allclose(fit.predict(n), 1.7 + 40.0 * n**-0.35, rtol=1e-8)


def test_fit_uncertainties_cover_the_truth_with_noise():
    rng = np.random.default_rng(0)
    n = np.geomspace(1e3, 1e6, 12)
    hits = []
    for _ in range(20):
        fit = fit_power_law(n, 2.0 + 30.0 * n**-0.4 + rng.normal(0, 0.01, n.size))
        assert fit.E_err > 0 and fit.A_err > 0 and fit.alpha_err > 0
        hits.append(abs(fit.alpha - 0.4) < 2 * fit.alpha_err)
    assert sum(hits) >= 15, "about 95 % of 2-sigma intervals should contain the true exponent"


@pytest.mark.parametrize(
    ("n", "loss", "match"),
    [([1, 2, 3], [3.0, 2.0, 1.5], "at least 4"), ([1, 2, 3, 4], [1.0, 2.0], "equally long"),
     ([0, 2, 3, 4], [4.0, 3.0, 2.0, 1.0], "n=.* > 0")],
)
def test_fit_rejects_bad_input(n, loss, match):
    with pytest.raises(ValueError, match=match):
        fit_power_law(n, loss)


def test_scaling_sweep_losses_sit_above_the_entropy_rate():
    source = markov_source(vocab_size=8, order=1, seed=0)
    results = scaling_sweep([8, 32], steps=40, source=source, seq_len=16, batch_size=16, eval_sequences=64)
    (n_small, loss_small), (n_big, loss_big) = results
    assert n_small < n_big
    assert n_small == count_parameters(
        ModelConfig(vocab_size=8, d_model=8, n_heads=1, n_layers=2, d_ff=32, max_seq_len=16), embeddings=False
    )
    assert loss_big > source.entropy_rate - 0.05, "no model beats the source's entropy (up to sampling noise)"
    assert loss_big < np.log(8), "and training learned something beyond a uniform guess"


def test_scaling_sweep_fused_gives_the_plain_losses():
    source = markov_source(vocab_size=8, order=2, seed=0)
    kwargs = dict(steps=30, source=source, seq_len=16, batch_size=16, eval_sequences=64, head_dim=4)
    plain = scaling_sweep([8, 16], **kwargs)
    fused = scaling_sweep([8, 16], fused=True, **kwargs)
    assert [n for n, _ in fused] == [n for n, _ in plain]
    assert np.allclose([loss for _, loss in fused], [loss for _, loss in plain], atol=1e-4)


def test_scaling_sweep_rejects_a_non_bool_fused():
    with pytest.raises(TypeError, match="fused"):
        scaling_sweep([8], steps=1, fused="yes")

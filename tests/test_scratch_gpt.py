"""The NumPy mini-GPT (companion.scratch.gpt) equals companion.models.GPT with the same weights.

Two configurations: the notes' 迷你版 (ReLU, no linear biases, eps 1e-6, untied head) and a GPT-2-like
one (biases, GELU, tied head, three layers). Every weight is perturbed away from its initial value
(norms start at 1/0 and biases at 0), so a weight copied into the wrong place shows up in the logits.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from companion.generation import generate
from companion.models import GPT, ModelConfig, num_parameters
from companion.scratch import gpt as scratch_gpt

CONFIGS = {
    "notes_mini": ModelConfig(
        vocab_size=100, d_model=64, n_heads=4, n_layers=2, max_seq_len=16, d_ff=256,
        activation="relu", bias=False, norm_eps=1e-6, tie_embeddings=False,
    ),
    "gpt2_like": ModelConfig(
        vocab_size=50, d_model=32, n_heads=2, n_layers=3, max_seq_len=12, d_ff=80,
        activation="gelu", bias=True, norm_eps=1e-5, tie_embeddings=True,
    ),
}  # fmt: skip


def make_model(config: ModelConfig, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))  # move norms off 1/0 and biases off 0
    return model


def scratch_args(config: ModelConfig) -> dict:
    return {"n_heads": config.n_heads, "eps": config.norm_eps, "activation": config.activation}


@pytest.mark.parametrize("name", CONFIGS)
def test_forward_equals_torch_gpt(name: str) -> None:
    config = CONFIGS[name]
    model = make_model(config)
    params = scratch_gpt.params_from_torch(model)
    ids = np.random.default_rng(1).integers(0, config.vocab_size, (2, config.max_seq_len))
    logits = scratch_gpt.forward(params, ids, **scratch_args(config))
    with torch.no_grad():
        expected = model(torch.from_numpy(ids))
    torch.testing.assert_close(torch.from_numpy(logits).float(), expected, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("name", CONFIGS)
def test_parameter_count_equals_torch(name: str) -> None:
    config = CONFIGS[name]
    model = make_model(config)
    params = scratch_gpt.params_from_torch(model)
    assert scratch_gpt.count_parameters(params) == num_parameters(model)
    assert ("lm_head" in params) == (not config.tie_embeddings)  # a tied head has no array of its own


def test_notes_mini_count_is_the_formula() -> None:
    """V·D + T_max·D + N·(4D² + 2·D·d_ff + 2·2D) + 2D (final LN) + D·V (untied head), no linear biases."""
    c = CONFIGS["notes_mini"]
    v, d, t, n, f = c.vocab_size, c.d_model, c.max_seq_len, c.n_layers, c.d_ff
    formula = v * d + t * d + n * (4 * d * d + 2 * d * f + 4 * d) + 2 * d + d * v
    assert scratch_gpt.count_parameters(scratch_gpt.params_from_torch(make_model(c))) == formula


@pytest.mark.parametrize("name", CONFIGS)
def test_greedy_generation_equals_companion_generate(name: str) -> None:
    config = CONFIGS[name]
    model = make_model(config, seed=3)
    params = scratch_gpt.params_from_torch(model)
    prompt = np.random.default_rng(2).integers(0, config.vocab_size, (2, 4))
    new = config.max_seq_len - 4
    ours = scratch_gpt.generate_greedy(params, prompt, new, **scratch_args(config))
    expected = generate(model, torch.from_numpy(prompt), new, greedy=True)
    assert ours.shape == (2, config.max_seq_len)
    np.testing.assert_array_equal(ours, expected.numpy())


def test_future_tokens_do_not_change_earlier_logits() -> None:
    config = CONFIGS["notes_mini"]
    params = scratch_gpt.params_from_torch(make_model(config))
    ids = np.random.default_rng(4).integers(0, config.vocab_size, (1, 8))
    changed = ids.copy()
    changed[0, 5] = (changed[0, 5] + 1) % config.vocab_size
    a = scratch_gpt.forward(params, ids, **scratch_args(config))
    b = scratch_gpt.forward(params, changed, **scratch_args(config))
    np.testing.assert_allclose(a[:, :5], b[:, :5], rtol=0, atol=1e-12)
    assert not np.allclose(a[:, 5:], b[:, 5:])


def test_attention_weights_are_causal_rows_that_sum_to_one() -> None:
    config = CONFIGS["gpt2_like"]
    params = scratch_gpt.params_from_torch(make_model(config))
    ids = np.arange(6)[None, :]
    _, attention = scratch_gpt.forward(params, ids, **scratch_args(config), return_attention=True)
    assert len(attention) == config.n_layers
    for weights in attention:
        assert weights.shape == (1, config.n_heads, 6, 6)
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-12)
        assert np.all(np.triu(weights, k=1) == 0.0)


def test_unsupported_config_and_bad_ids_raise() -> None:
    with pytest.raises(ValueError, match="norm='rmsnorm'"):
        scratch_gpt.params_from_torch(GPT(ModelConfig.llama_tiny()))
    with pytest.raises(TypeError, match="companion.models.GPT"):
        scratch_gpt.params_from_torch(torch.nn.Linear(2, 2))
    config = CONFIGS["gpt2_like"]
    params = scratch_gpt.params_from_torch(make_model(config))
    with pytest.raises(ValueError, match="max_seq_len=12"):
        scratch_gpt.forward(params, np.zeros((1, 13), dtype=np.int64), **scratch_args(config))
    with pytest.raises(ValueError, match=r"\[0, 50\)"):
        scratch_gpt.forward(params, np.array([[0, 50]]), **scratch_args(config))

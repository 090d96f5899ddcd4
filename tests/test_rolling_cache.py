"""The rolling KV cache (sliding window, attention sinks): decoding through it equals an explicit mask recomputation.

The reference is the full forward pass with ``sliding_window_mask(T, window, n_sinks=...)``, where every query's
visible keys are written out; decoding token by token (or in chunks) through a ``RollingKVCache`` must give the
same logits while its memory stays at ``window - 1`` positions between steps.
"""

from __future__ import annotations

import pytest
import torch
from torch.testing import assert_close

from companion.attention import MultiHeadAttention, RollingKVCache
from companion.generation import beam_search, generate
from companion.masks import sliding_window_mask
from companion.models import GPT, ModelConfig
from companion.positions import RotaryEmbedding


@pytest.mark.parametrize(("window", "n_sinks"), [(1, 0), (3, 0), (4, 1), (6, 2)])
def test_mask_with_sinks_by_its_definition(window: int, n_sinks: int) -> None:
    t = 12
    mask = sliding_window_mask(t, window, n_sinks=n_sinks)
    for p in range(t):
        expected = {j for j in range(p + 1) if j < n_sinks or p - j < window - n_sinks}
        assert set(mask[p].nonzero().flatten().tolist()) == expected
        assert int(mask[p].sum()) == min(window, p + 1)  # never more than `window` keys
    if n_sinks == 0:
        assert torch.equal(mask, sliding_window_mask(t, window))


@pytest.mark.parametrize(("window", "n_sinks"), [(4, 0), (5, 2)])
@torch.no_grad()
def test_one_attention_layer_decoded_through_the_cache(window: int, n_sinks: int) -> None:
    torch.manual_seed(0)
    layer = MultiHeadAttention(16, 4, 2, rope=RotaryEmbedding(4, 32)).eval()
    x = torch.randn(2, 15, 16)
    full = layer(x, mask=sliding_window_mask(15, window, n_sinks=n_sinks))  # the explicit mask
    cache = RollingKVCache(window, n_sinks)
    steps = []
    for t in range(15):
        steps.append(layer(x[:, t : t + 1], kv_cache=cache, mask=cache.mask(1)))
        assert cache.size == min(t + 1, window - 1) and cache.length == t + 1
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert cache.positions.tolist() == list(range(n_sinks)) + list(range(15 - (window - 1 - n_sinks), 15))


def tiny(**changes: object) -> ModelConfig:
    return ModelConfig.llama_tiny(vocab_size=50, n_layers=3, max_seq_len=40, **changes)


CONFIGS = {
    "window": tiny(sliding_window=5),
    "window+sinks": tiny(sliding_window=6, attention_sinks=2),
    "mla+sinks": tiny(sliding_window=6, attention_sinks=1, kv_rank=16, rope_head_dim=8),
    "moe+window": tiny(sliding_window=4, n_experts=4, d_expert=32),
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("chunk", [1, 3])
@torch.no_grad()
def test_gpt_decoding_through_rolling_caches_equals_the_masked_full_pass(name: str, chunk: int) -> None:
    torch.manual_seed(0)
    model = GPT(CONFIGS[name]).eval()
    ids = torch.randint(0, 50, (2, 30), generator=torch.Generator().manual_seed(1))
    full = model(ids)  # the full pass builds sliding_window_mask(30, window, n_sinks=...)
    caches = model.new_kv_caches()
    assert all(isinstance(c, RollingKVCache) for c in caches)
    steps = [model(ids[:, s : s + chunk], kv_caches=caches) for s in range(0, 30, chunk)]
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    window = model.config.sliding_window
    assert {c.k.shape[-2] for c in caches} == {window - 1}  # memory stays at window - 1 positions


@torch.no_grad()
def test_streaming_a_full_attention_model_is_the_sink_mask() -> None:
    """StreamingLLM at inference: a model trained with full attention, decoded through rolling caches, computes
    what the same weights compute with the window-and-sinks mask."""
    torch.manual_seed(0)
    model = GPT(tiny()).eval()
    masked = GPT(tiny(sliding_window=7, attention_sinks=3)).eval()
    masked.load_state_dict(model.state_dict())
    ids = torch.randint(0, 50, (1, 25), generator=torch.Generator().manual_seed(2))
    caches = [RollingKVCache(7, 3) for _ in model.layers]
    steps = torch.cat([model(ids[:, t : t + 1], kv_caches=caches) for t in range(25)], dim=1)
    assert_close(steps, masked(ids), atol=1e-5, rtol=1e-5)
    assert not torch.allclose(steps, model(ids), atol=1e-3)  # and it is not full attention


@torch.no_grad()
def test_generate_and_beam_search_with_rolling_caches() -> None:
    torch.manual_seed(0)
    model = GPT(tiny(sliding_window=5, attention_sinks=1)).eval()
    prompt = torch.randint(0, 50, (2, 9), generator=torch.Generator().manual_seed(3))
    cached = generate(model, prompt, 12, greedy=True)
    assert torch.equal(cached, generate(model, prompt, 12, greedy=True, use_cache=False))
    one = prompt[:1]
    assert torch.equal(beam_search(model, one, 3, 8), beam_search(model, one, 3, 8, use_cache=False))


def test_errors_name_the_window_and_the_sinks() -> None:
    with pytest.raises(ValueError, match="n_sinks=4 is not smaller than the window=4"):
        RollingKVCache(4, 4)
    with pytest.raises(ValueError, match="n_sinks=-1"):
        sliding_window_mask(5, 3, n_sinks=-1)
    with pytest.raises(ValueError, match="attention_sinks=3 is not smaller than sliding_window=3"):
        tiny(sliding_window=3, attention_sinks=3)
    with pytest.raises(ValueError, match="attention_sinks=2 needs a sliding_window"):
        tiny(attention_sinks=2)
    model = GPT(tiny(sliding_window=4))
    with pytest.raises(ValueError, match="no padding_mask"):
        model(torch.ones(1, 3, dtype=torch.long), kv_caches=model.new_kv_caches(),
              padding_mask=torch.ones(1, 1, 1, 3, dtype=torch.bool))

"""Windows and sinks as used today (chapter 14): interleaved local/global layers (Gemma 2/3, gpt-oss) and
gpt-oss's learned per-head sink logits.

References: a hand-written softmax with one extra column per head; with the sink at -inf, plain attention;
cached decoding equals the full pass layer by layer; ``transformers``' gpt-oss eager attention when installed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from companion.attention import KVCache, MultiHeadAttention, RollingKVCache, scaled_dot_product_attention
from companion.masks import causal_mask, sliding_window_mask
from companion.models import GPT, ModelConfig


def tiny(**changes: object) -> ModelConfig:
    return ModelConfig.llama_tiny(**{"vocab_size": 50, "max_seq_len": 40, "n_layers": 4, **changes})


# --- interleaved local/global layers -------------------------------------------------------------


def test_layer_window_follows_gemma3s_layer_types() -> None:
    """Gemma 3: layer i is "full_attention" iff (i + 1) % pattern == 0, the others slide."""
    c = tiny(sliding_window=4, sliding_window_pattern=2)
    assert [c.layer_window(i) for i in range(4)] == [4, None, 4, None]
    assert [tiny(sliding_window=4).layer_window(i) for i in range(4)] == [4] * 4


@torch.no_grad()
def test_interleaved_layers_use_their_own_masks() -> None:
    """A global layer sees the whole past: the output at the last position depends on the first token, which
    a model of windows only (two layers of window 3 reach 5 tokens back) cannot see."""
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (1, 12))
    other = ids.clone()
    other[0, 0] = (ids[0, 0] + 1) % 50
    for pattern, reaches in [(None, False), (2, True)]:
        model = GPT(tiny(n_layers=2, sliding_window=3, sliding_window_pattern=pattern)).eval()
        changed = not torch.allclose(model(ids)[0, -1], model(other)[0, -1])
        assert changed == reaches, pattern


@pytest.mark.parametrize("chunk", [1, 3])
@pytest.mark.parametrize("sinks", [0, 1])
@torch.no_grad()
def test_cached_decoding_of_interleaved_layers_equals_the_full_pass(chunk: int, sinks: int) -> None:
    torch.manual_seed(0)
    model = GPT(tiny(sliding_window=5, sliding_window_pattern=2, attention_sinks=sinks, sink_logits=True)).eval()
    ids = torch.randint(0, 50, (2, 30), generator=torch.Generator().manual_seed(1))
    full = model(ids)
    caches = model.new_kv_caches()
    kinds = [type(c) for c in caches]
    assert kinds == [RollingKVCache, KVCache, RollingKVCache, KVCache]
    steps = [model(ids[:, s : s + chunk], kv_caches=caches) for s in range(0, 30, chunk)]
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)
    assert caches[0].k.shape[-2] == 4 and caches[1].k.shape[-2] == 30  # local memory stays at window - 1


@pytest.mark.parametrize(
    ("changes", "match"),
    [(dict(sliding_window_pattern=2), "needs a sliding_window"),
     (dict(sliding_window=4, sliding_window_pattern=1), "sliding_window_pattern=1"),
     (dict(sink_logits=True, kv_rank=16, rope_head_dim=8), "sink_logits=True applies to multi-head")],
)  # fmt: skip
def test_bad_combinations_are_refused(changes: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        tiny(**changes)


@pytest.mark.parametrize(("changes", "name"), [(dict(sliding_window=4, sliding_window_pattern=2),
                                               "sliding_window_pattern=2"), (dict(sink_logits=True), "sink_logits")])
def test_save_pretrained_refuses_what_it_cannot_write(changes: dict, name: str, tmp_path: Path) -> None:
    """No Hugging Face family here writes interleaving or sink logits: saving must fail, not drop them."""
    with pytest.raises(ValueError, match=name):
        GPT(tiny(**changes)).save_pretrained(tmp_path)


# --- learned sink logits --------------------------------------------------------------------------


def test_sinks_equal_a_softmax_with_one_more_column() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8), torch.randn(2, 3, 5, 8)
    sinks = torch.randn(3)
    mask = causal_mask(5)
    out, weights = scaled_dot_product_attention(q, k, v, mask, True, sinks=sinks)
    scores = (q @ k.transpose(-2, -1)) / 8**0.5
    scores = scores.masked_fill(~mask, float("-inf"))
    column = sinks.view(1, 3, 1, 1).expand(2, 3, 5, 1)
    expected = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :5]  # drop the sink column
    assert_close(weights, expected)
    assert_close(out, expected @ v)
    assert (weights.sum(-1) < 1).all()  # the sink took some of every row


def test_a_sink_at_minus_infinity_is_plain_attention() -> None:
    torch.manual_seed(0)
    attn = MultiHeadAttention(16, 4, sink_logits=True)
    plain = MultiHeadAttention(16, 4)
    plain.load_state_dict({k: v for k, v in attn.state_dict().items() if k != "sinks"})
    with torch.no_grad():
        attn.sinks.fill_(float("-inf"))
    x = torch.randn(2, 6, 16)
    assert_close(attn(x, mask=sliding_window_mask(6, 3)), plain(x, mask=sliding_window_mask(6, 3)))
    assert_close(attn(x, is_causal=True), plain(x, is_causal=True))


def test_gradient_reaches_the_sink_logits() -> None:
    torch.manual_seed(0)
    model = GPT(tiny(sink_logits=True, use_sdpa=True))
    ids = torch.randint(0, 50, (2, 10))
    model(ids).logsumexp(-1).mean().backward()
    for layer in model.layers:
        grad = layer.self_attn.sinks.grad
        assert grad is not None and grad.shape == (4,) and grad.abs().min() > 0


def test_sinks_of_the_wrong_shape_are_refused() -> None:
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(ValueError, match="one logit per head"):
        scaled_dot_product_attention(q, q, q, sinks=torch.zeros(3))


def test_sinks_match_transformers_gpt_oss_eager_attention() -> None:
    gpt_oss = pytest.importorskip("transformers.models.gpt_oss.modeling_gpt_oss")
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    module = torch.nn.Module()
    module.sinks, module.num_key_value_groups, module.training = torch.nn.Parameter(torch.randn(4)), 1, False
    additive = torch.zeros(6, 6).masked_fill(~causal_mask(6), float("-inf"))[None, None]  # (1, 1, T, S)
    theirs, _ = gpt_oss.eager_attention_forward(module, q, k, v, additive, scaling=8**-0.5, dropout=0.0)
    ours = scaled_dot_product_attention(q, k, v, causal_mask(6), sinks=module.sinks)
    assert_close(ours.transpose(1, 2), theirs)  # theirs is (B, T, H, D_h)

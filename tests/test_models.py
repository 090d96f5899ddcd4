"""Tests for companion.models: config validation, presets' sizes, masking identities, layer equivalence
with torch.nn.Transformer*Layer, cross-attention wiring, and BERT's mask_tokens recipe."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from companion.models import (
    GPT,
    DecoderLayer,
    Encoder,
    EncoderLayer,
    ModelConfig,
    Transformer,
    mask_tokens,
    num_parameters,
)

TINY = dict(vocab_size=50, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=24, dropout=0.0)
POSITIONS = ["learned", "sinusoidal", "rope", "alibi", "none"]


def tiny(**changes: object) -> ModelConfig:
    return ModelConfig(**{**TINY, **changes})


def meta_count(model_cls: type[nn.Module], config: ModelConfig) -> int:
    with torch.device("meta"):  # shapes only: no memory, no time
        return num_parameters(model_cls(config))


# --- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (dict(d_model=510, n_heads=8), ["d_model=510", "n_heads=8"]),
        (dict(n_heads=4, n_kv_heads=3), ["n_heads=4", "n_kv_heads=3"]),
        (dict(positions="rope", d_model=12, n_heads=4), ["rope", "d_model=12", "n_heads=4"]),
        (dict(sliding_window=0), ["sliding_window=0"]),
        (dict(activation="tanh"), ["activation", "tanh", "swiglu"]),
        (dict(norm="batchnorm"), ["norm", "batchnorm"]),
        (dict(norm_placement="middle"), ["norm_placement", "middle"]),
        (dict(positions="relative"), ["positions", "relative"]),
        (dict(dropout=1.0), ["dropout=1.0"]),
        (dict(n_layers=0), ["n_layers=0"]),
    ],
)
def test_config_rejects_bad_values_naming_the_fields(changes: dict, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        tiny(**changes)
    for word in words:
        assert word in str(err.value)


def test_replace_validates_again_and_leaves_the_original() -> None:
    cfg = tiny()
    assert cfg.replace(norm="rmsnorm").norm == "rmsnorm" and cfg.norm == "layernorm"
    with pytest.raises(ValueError, match="n_heads=5"):
        cfg.replace(n_heads=5)


@pytest.mark.parametrize("preset", ["transformer_base", "gpt2_small", "llama", "llama_tiny", "bert_base", "mistral_7b"])
def test_presets_are_valid(preset: str) -> None:
    cfg = getattr(ModelConfig, preset)()
    assert cfg.d_model % cfg.n_heads == 0 and cfg.n_heads % cfg.n_kv_heads == 0


def test_evolution_table_rows_differ_between_presets() -> None:
    """Original → GPT-2 → Llama: the notes' table, read off the presets."""
    rows = ("norm_placement", "positions", "activation", "norm")
    base, gpt2, llama = ModelConfig.transformer_base(), ModelConfig.gpt2_small(), ModelConfig.llama()
    assert [getattr(base, r) for r in rows] == ["post", "sinusoidal", "relu", "layernorm"]
    assert [getattr(gpt2, r) for r in rows] == ["pre", "learned", "gelu_tanh", "layernorm"]
    assert [getattr(llama, r) for r in rows] == ["pre", "rope", "swiglu", "rmsnorm"]
    assert ModelConfig.llama(n_kv_heads=8).n_kv_heads == 8 and ModelConfig.mistral_7b().sliding_window == 4096


# --- parameter counts ---------------------------------------------------------------------------


def test_gpt2_small_has_124_439_808_parameters() -> None:
    assert meta_count(GPT, ModelConfig.gpt2_small()) == 124_439_808


def test_llama2_7b_shape_matches_its_published_count() -> None:
    # Hugging Face's meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters (no biases, untied head).
    assert meta_count(GPT, ModelConfig.llama()) == 6_738_415_616


def test_transformer_base_count_equals_torch_transformer_plus_one_shared_table() -> None:
    cfg = ModelConfig.transformer_base()
    with torch.device("meta"):
        ref = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.n_layers, cfg.d_ff, batch_first=True)
    final_norms = 2 * 2 * cfg.d_model  # nn.Transformer adds a LayerNorm after each stack; post-norm 2017 does not
    assert meta_count(Transformer, cfg) == num_parameters(ref) - final_norms + cfg.vocab_size * cfg.d_model


def test_tied_head_shares_the_embedding_parameter() -> None:
    model = GPT(tiny(tie_embeddings=True))
    assert model.lm_head.weight is model.embed.token.weight
    untied = GPT(tiny(tie_embeddings=False))
    assert num_parameters(untied) - num_parameters(model) == 50 * 32


# --- decoder-only -------------------------------------------------------------------------------


@pytest.mark.parametrize("positions", POSITIONS)
def test_gpt_is_causal_changing_a_future_token_leaves_the_past(positions: str) -> None:
    torch.manual_seed(0)
    model = GPT(tiny(positions=positions)).eval()
    ids = torch.randint(0, 50, (2, 10))
    changed = ids.clone()
    changed[:, 6] = (ids[:, 6] + 1) % 50
    a, b = model(ids), model(changed)
    assert_close(a[:, :6], b[:, :6])
    assert not torch.allclose(a[:, 6:], b[:, 6:])


def test_sliding_window_hides_tokens_older_than_the_window() -> None:
    torch.manual_seed(0)
    model = GPT(tiny(n_layers=1, sliding_window=3, positions="rope")).eval()  # one layer: reach = 3 tokens
    ids = torch.randint(0, 50, (1, 8))
    changed = ids.clone()
    changed[0, 0] = (ids[0, 0] + 1) % 50
    a, b = model(ids), model(changed)
    assert not torch.allclose(a[0, :3], b[0, :3])  # positions 0..2 still see token 0
    assert_close(a[0, 3:], b[0, 3:])  # position 3 sees 1..3 only


def test_positions_none_makes_the_last_output_order_blind() -> None:
    """Without positions, attention is permutation-invariant over the keys: with one layer, shuffling the
    tokens before the last one leaves the last output unchanged; every position scheme breaks that."""
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (1, 6))
    shuffled = torch.cat([ids[:, [3, 0, 4, 2, 1]], ids[:, 5:]], dim=1)
    blind = GPT(tiny(positions="none", n_layers=1)).eval()
    assert_close(blind(ids)[0, -1], blind(shuffled)[0, -1])
    for positions in ("learned", "rope", "alibi", "sinusoidal"):
        torch.manual_seed(0)
        model = GPT(tiny(positions=positions, n_layers=1)).eval()
        assert not torch.allclose(model(ids)[0, -1], model(shuffled)[0, -1]), positions


def test_too_long_sequences_raise() -> None:
    model = GPT(tiny())
    with pytest.raises(ValueError, match="max_seq_len=24"):
        model(torch.zeros(1, 25, dtype=torch.long))
    caches = model.new_kv_caches()
    model(torch.zeros(1, 20, dtype=torch.long), kv_caches=caches)
    with pytest.raises(ValueError, match="20 cached positions"):
        model(torch.zeros(1, 5, dtype=torch.long), kv_caches=caches)
    with pytest.raises(ValueError, match="max_seq_len=24"):
        Transformer(tiny()).encode(torch.zeros(1, 30, dtype=torch.long))


def test_padding_mask_hides_padded_keys() -> None:
    from companion.masks import padding_mask

    torch.manual_seed(0)
    model = GPT(tiny(positions="rope")).eval()
    ids = torch.tensor([[5, 6, 7, 0, 0]])
    changed = torch.tensor([[5, 6, 7, 9, 0]])
    mask_a, mask_b = padding_mask(ids, 0), padding_mask(changed, 0)
    mask_b[..., 3] = False  # token 3 is padding in both: its id must not matter to later positions
    assert_close(model(ids, padding_mask=mask_a)[0, 4], model(changed, padding_mask=mask_b)[0, 4])


# --- layers against torch.nn --------------------------------------------------------------------


def _copy_attention(ours: nn.Module, theirs: nn.MultiheadAttention) -> None:
    q, k, v = theirs.in_proj_weight.chunk(3)
    qb, kb, vb = theirs.in_proj_bias.chunk(3)
    for proj, w, b in ((ours.q_proj, q, qb), (ours.k_proj, k, kb), (ours.v_proj, v, vb)):
        proj.weight.copy_(w)
        proj.bias.copy_(b)
    ours.o_proj.weight.copy_(theirs.out_proj.weight)
    ours.o_proj.bias.copy_(theirs.out_proj.bias)


def _copy_ffn_norms(ours: nn.Module, theirs: nn.Module, blocks: list[str]) -> None:
    ours.ffn.up_proj.weight.copy_(theirs.linear1.weight)
    ours.ffn.up_proj.bias.copy_(theirs.linear1.bias)
    ours.ffn.down_proj.weight.copy_(theirs.linear2.weight)
    ours.ffn.down_proj.bias.copy_(theirs.linear2.bias)
    for i, block in enumerate(blocks, start=1):
        norm = getattr(ours, block).norm
        ref = getattr(theirs, f"norm{i}")
        norm.weight.copy_(ref.weight + 0.1 * torch.randn_like(ref.weight))  # not 1/0, so a swap would show
        norm.bias.copy_(ref.bias + 0.1 * torch.randn_like(ref.bias))
        ref.weight.copy_(norm.weight)
        ref.bias.copy_(norm.bias)


@pytest.mark.parametrize("placement", ["post", "pre"])
@torch.no_grad()
def test_encoder_and_decoder_layers_equal_torch_layers(placement: str) -> None:
    torch.manual_seed(0)
    cfg = tiny(activation="relu", norm_placement=placement)
    kw = dict(dim_feedforward=cfg.d_ff, dropout=0.0, batch_first=True, norm_first=placement == "pre")
    enc, ref_enc = EncoderLayer(cfg).eval(), nn.TransformerEncoderLayer(cfg.d_model, cfg.n_heads, **kw).eval()
    _copy_attention(enc.self_attn, ref_enc.self_attn)
    _copy_ffn_norms(enc, ref_enc, ["self_attn_block", "ffn_block"])
    x, memory = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    assert_close(enc(x), ref_enc(x), atol=1e-5, rtol=1e-5)

    dec = DecoderLayer(cfg, cross_attention=True).eval()
    ref_dec = nn.TransformerDecoderLayer(cfg.d_model, cfg.n_heads, **kw).eval()
    _copy_attention(dec.self_attn, ref_dec.self_attn)
    _copy_attention(dec.cross_attn, ref_dec.multihead_attn)
    _copy_ffn_norms(dec, ref_dec, ["self_attn_block", "cross_attn_block", "ffn_block"])
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    expected = ref_dec(x, memory, tgt_mask=~causal)  # torch: True = blocked
    assert_close(dec(x, memory, mask=causal), expected, atol=1e-5, rtol=1e-5)


# --- encoder-decoder ----------------------------------------------------------------------------


def test_every_decoder_layer_reads_the_same_encoder_output() -> None:
    torch.manual_seed(0)
    model = Transformer(tiny(n_decoder_layers=3)).eval()
    src, tgt = torch.randint(0, 50, (2, 6)), torch.randint(0, 50, (2, 4))
    seen: list[torch.Tensor] = []
    hooks = [
        layer.cross_attn.register_forward_pre_hook(
            lambda m, args, kwargs: seen.append(kwargs["memory"]), with_kwargs=True
        )
        for layer in model.decoder_layers
    ]
    memory = model.encode(src)
    model.decode(tgt, memory)
    for h in hooks:
        h.remove()
    assert len(seen) == 3 and all(h is memory for h in seen)
    k_projs = [layer.cross_attn.k_proj.weight for layer in model.decoder_layers]
    assert not torch.equal(k_projs[0], k_projs[1])  # each layer has its own W_K


def test_transformer_forward_is_encode_then_decode_and_causal_in_the_target() -> None:
    torch.manual_seed(0)
    model = Transformer(tiny(positions="sinusoidal", norm_placement="post", embed_scale=True)).eval()
    src, tgt = torch.randint(0, 50, (2, 6)), torch.randint(0, 50, (2, 5))
    logits = model(src, tgt)
    assert logits.shape == (2, 5, 50)
    assert_close(logits, model.decode(tgt, model.encode(src)))
    changed = tgt.clone()
    changed[:, 3] = (tgt[:, 3] + 1) % 50
    assert_close(model(src, changed)[:, :3], logits[:, :3])
    changed_src = src.clone()
    changed_src[:, -1] = (src[:, -1] + 1) % 50  # the encoder is bidirectional: every target position sees it
    assert not torch.allclose(model(changed_src, tgt)[:, 0], logits[:, 0])


def test_source_padding_does_not_leak() -> None:
    from companion.masks import padding_mask

    torch.manual_seed(0)
    model = Transformer(tiny()).eval()
    src_a, src_b = torch.tensor([[4, 5, 6, 0, 0]]), torch.tensor([[4, 5, 6, 0, 9]])
    mask = padding_mask(src_a, 0)  # both: the last two are padding
    tgt = torch.tensor([[1, 2, 3]])
    assert_close(model(src_a, tgt, mask), model(src_b, tgt, mask))


# --- encoder-only -------------------------------------------------------------------------------


def test_encoder_is_bidirectional_and_has_an_mlm_head() -> None:
    torch.manual_seed(0)
    model = Encoder(tiny(norm_placement="post", final_norm=False, embed_norm=True)).eval()
    ids = torch.randint(0, 50, (2, 8))
    changed = ids.clone()
    changed[:, -1] = (ids[:, -1] + 1) % 50
    assert model(ids).shape == (2, 8, 50)
    assert not torch.allclose(model(ids)[:, 0], model(changed)[:, 0])  # position 0 sees the last token
    assert model.lm_head.weight is model.embed.token.weight


def test_mask_tokens_follows_the_80_10_10_recipe() -> None:
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(5, 1000, (64, 512), generator=g)
    ids[:, 0] = 1  # a [CLS]-like special token that must never be chosen
    inputs, labels = mask_tokens(ids, mask_id=3, vocab_size=1000, generator=g, special_ids=(1,))
    chosen = labels != -100
    assert not chosen[:, 0].any()
    assert torch.equal(labels[chosen], ids[chosen])  # labels hold the original ids
    assert torch.equal(inputs[~chosen], ids[~chosen])  # unchosen tokens are untouched
    n = chosen.sum().item()
    assert abs(n / ids[:, 1:].numel() - 0.15) < 0.005
    masked = (inputs[chosen] == 3).float().mean().item()
    same = (inputs[chosen] == ids[chosen]).float().mean().item()  # includes random draws of the same id (~0.1 %)
    assert abs(masked - 0.8) < 0.01 and abs(same - 0.1) < 0.01
    assert abs(1 - masked - same - 0.1) < 0.01  # the rest: a random token
    again = mask_tokens(ids, 3, 1000, torch.Generator().manual_seed(7), special_ids=(1,))
    assert torch.equal(again[0], mask_tokens(ids, 3, 1000, torch.Generator().manual_seed(7), special_ids=(1,))[0])


@pytest.mark.parametrize(("kwargs", "word"), [(dict(prob=0.0), "prob=0.0"), (dict(mask_id=1000), "mask_id=1000")])
def test_mask_tokens_rejects_bad_arguments(kwargs: dict, word: str) -> None:
    args = dict(mask_id=3, vocab_size=1000, prob=0.15) | kwargs
    with pytest.raises(ValueError, match=word):
        mask_tokens(torch.zeros(2, 4, dtype=torch.long), **args)

"""The decoding layout (companion.packing, ``MultiHeadAttention(fused_qkv=True)``, ``ModelConfig.decode_layout``)
changes where the weights sit, never what the model computes: the same outputs, gradients, tokens and state dict
as the plain layout, and still so after optimiser steps, ``load_state_dict`` and ``.to(dtype)``."""

from __future__ import annotations

import copy
import io

import pytest
import torch
from model_helpers import randomize
from torch import nn
from torch.testing import assert_close

from companion.attention import KVCache, MultiHeadAttention
from companion.generation import beam_search, generate
from companion.masks import causal_mask
from companion.models import GPT, ModelConfig, Transformer
from companion.packing import pack_linears, packed_linear, packed_weight, store_for_decoding
from companion.positions import RotaryEmbedding

D, H = 32, 4


def linears(outs: tuple[int, ...] = (32, 16, 16), bias: bool = True, seed: int = 0) -> list[nn.Linear]:
    torch.manual_seed(seed)
    return [nn.Linear(D, out, bias=bias) for out in outs]


def qkv_calls(attn: MultiHeadAttention) -> list[str]:
    """Record every call of the three separate projections (the explicit path) in the returned list."""
    calls: list[str] = []
    for name in ("q_proj", "k_proj", "v_proj"):
        getattr(attn, name).register_forward_hook(lambda *_, name=name: calls.append(name))
    return calls


def next_token_loss(model: nn.Module, ids: torch.Tensor) -> torch.Tensor:
    logits = model(ids[:, :-1])  # (B, T - 1, V)
    return nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten())


# ----------------------------------------------------------------------------- packing linear layers


@pytest.mark.parametrize("bias", [True, False])
def test_pack_linears_keeps_each_parameter_its_shape_and_values(bias: bool) -> None:
    layers = linears(bias=bias)
    params = [p for lin in layers for p in lin.parameters()]
    before = [p.detach().clone() for p in params]
    assert packed_weight(*layers) is None  # nn.Linear's own layout: (out, in), one tensor each
    pack_linears(*layers)
    assert [p for lin in layers for p in lin.parameters()] == params  # the same Parameter objects
    for p, old in zip(params, before):
        assert p.shape == old.shape and torch.equal(p, old)
    matrix, packed_bias = packed_weight(*layers)
    assert matrix.shape == (D, 64) and matrix.is_contiguous()  # (in, 32 + 16 + 16), stored row after row
    assert torch.equal(matrix, torch.cat([lin.weight.t() for lin in layers], dim=1))
    assert matrix.data_ptr() == layers[0].weight.data_ptr()  # a view, no copy
    assert [lin.weight.stride() for lin in layers] == [(1, 64)] * 3
    if bias:
        assert torch.equal(packed_bias, torch.cat([lin.bias for lin in layers]))
    else:
        assert packed_bias is None
    pack_linears(*layers)  # packing twice changes nothing
    assert packed_weight(*layers)[0].data_ptr() == matrix.data_ptr()


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("shape", [(2, 5, D), (3, D), (D,)])
def test_packed_linear_equals_each_layer_applied_to_x(bias: bool, shape: tuple[int, ...]) -> None:
    plain = linears(bias=bias)
    packed = copy.deepcopy(plain)
    pack_linears(*packed)
    x = torch.randn(shape)
    with torch.no_grad():
        outs = packed_linear(x, *packed)
        assert len(outs) == 3
        for out, lin in zip(outs, plain):
            assert out.shape == (*shape[:-1], lin.out_features)
            assert_close(out, lin(x))


def test_packed_linear_falls_back_layer_by_layer_for_gradients() -> None:
    """With autograd the packed matrix would not carry gradients to each Parameter: one product per layer."""
    plain = linears()
    packed = copy.deepcopy(plain)
    pack_linears(*packed)
    x = torch.randn(2, 5, D)
    g = [torch.randn(2, 5, lin.out_features) for lin in plain]
    for layers in (plain, packed):
        sum((out * gi).sum() for out, gi in zip(packed_linear(x, *layers), g)).backward()
    for a, b in zip(plain, packed):
        assert_close(b.weight.grad, a.weight.grad)
        assert_close(b.bias.grad, a.bias.grad)


def test_layers_moved_apart_are_no_longer_packed() -> None:
    layers = linears()
    pack_linears(*layers)
    layers[1].weight.data = layers[1].weight.detach().clone()  # its own storage now
    assert packed_weight(*layers) is None
    x = torch.randn(3, D)
    with torch.no_grad():
        for out, lin in zip(packed_linear(x, *layers), layers):  # still right, layer by layer
            assert_close(out, lin(x))


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: [], ValueError, "at least one nn.Linear"),
        (lambda: [nn.Linear(D, 8), nn.Conv1d(D, 8, 1)], TypeError, r"linears\[1\] must be an nn.Linear"),
        (lambda: [nn.Linear(D, 8), nn.Linear(D + 1, 8)], ValueError, r"in_features=33 .* linears\[0\] has 32"),
        (lambda: [nn.Linear(D, 8), nn.Linear(D, 8, bias=False)], ValueError, "has no bias but linears.0. has a bias"),
        (lambda: [nn.Linear(D, 8), nn.Linear(D, 8).double()], ValueError, "expected one dtype and device"),
    ],
)  # fmt: skip
def test_pack_linears_rejects_layers_that_cannot_share_a_matrix(make, error: type, match: str) -> None:  # noqa: ANN001
    with pytest.raises(error, match=match):
        pack_linears(*make())


def test_store_for_decoding_transposes_every_weight_and_leaves_packed_ones() -> None:
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=50, d_model=D, n_heads=H, n_layers=2, max_seq_len=16))
    attn = model.layers[0].self_attn
    pack_linears(attn.q_proj, attn.k_proj, attn.v_proj)
    packed_q = attn.q_proj.weight.data_ptr()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    store_for_decoding(model)
    for name, p in model.named_parameters():
        assert torch.equal(p, before[name]), name
    assert attn.q_proj.weight.data_ptr() == packed_q  # left as packed
    assert attn.o_proj.weight.stride() == (1, D) and model.layers[1].ffn.up_proj.weight.stride() == (1, 256)
    assert model.lm_head.weight is model.embed.token.weight and model.lm_head.weight.stride() == (1, 50)  # tied


# ----------------------------------------------------------------------------- fused q/k/v in attention


def attention_pair(n_kv_heads: int, bias: bool = True, rope: bool = False) -> tuple[MultiHeadAttention, ...]:
    table = RotaryEmbedding(D // H, 64) if rope else None
    torch.manual_seed(0)
    explicit = MultiHeadAttention(D, H, n_kv_heads, bias=bias, rope=table, use_sdpa=True).eval()
    fused = MultiHeadAttention(D, H, n_kv_heads, bias=bias, rope=table, use_sdpa=True, fused_qkv=True).eval()
    fused.load_state_dict(explicit.state_dict())
    return explicit, fused


@pytest.mark.parametrize("n_kv_heads", [4, 2, 1])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("rope", [False, True])
def test_fused_qkv_equals_the_three_projections_with_a_kv_cache(n_kv_heads: int, bias: bool, rope: bool) -> None:
    explicit, fused = attention_pair(n_kv_heads, bias, rope)
    assert packed_weight(fused.q_proj, fused.k_proj, fused.v_proj)[0].shape == (D, D + 2 * n_kv_heads * D // H)
    calls = qkv_calls(fused)
    x = torch.randn(2, 9, D)
    caches = [KVCache(), KVCache()]
    with torch.no_grad():
        assert_close(fused(x, mask=causal_mask(9)), explicit(x, mask=causal_mask(9)))
        for lo, hi in ((0, 5), (5, 6), (6, 7), (7, 9)):  # a prompt, then one token at a time, then two
            out_e = explicit(x[:, lo:hi], kv_cache=caches[0], is_causal=True)
            out_f = fused(x[:, lo:hi], kv_cache=caches[1], is_causal=True)
            assert_close(out_f, out_e)
    assert_close(caches[1].k, caches[0].k)
    assert_close(caches[1].v, caches[0].v)
    assert calls == []  # q, k and v came from the one packed product


def test_fused_qkv_with_gradients_takes_the_explicit_path_and_gives_the_same_gradients() -> None:
    explicit, fused = attention_pair(2)
    explicit.train(), fused.train()
    calls = qkv_calls(fused)
    x = torch.randn(2, 7, D)
    for attn in (explicit, fused):
        attn(x, is_causal=True).square().sum().backward()
    assert calls == ["q_proj", "k_proj", "v_proj"]
    for (name, p), q in zip(explicit.named_parameters(), fused.parameters()):
        assert_close(q.grad, p.grad, msg=name)


def test_cross_attention_with_fused_qkv_projects_memory_as_before() -> None:
    explicit, fused = attention_pair(4)
    x, memory = torch.randn(2, 3, D), torch.randn(2, 6, D)
    with torch.no_grad():
        assert_close(fused(x, memory=memory), explicit(x, memory=memory))


@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_fused_qkv_packs_again_after_to(dtype: torch.dtype) -> None:
    """``.to`` converts each weight on its own; the module puts q/k/v side by side again."""
    explicit, fused = attention_pair(2)
    explicit, fused = explicit.to(dtype), fused.to(dtype)
    assert packed_weight(fused.q_proj, fused.k_proj, fused.v_proj)[0].dtype == dtype
    calls = qkv_calls(fused)
    x = torch.randn(2, 5, D, dtype=dtype)
    with torch.no_grad():
        assert_close(fused(x), explicit(x))
    assert calls == []


def test_fused_qkv_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="fused_qkv must be a bool"):
        MultiHeadAttention(D, H, fused_qkv=1)


# ----------------------------------------------------------------------------- models with decode_layout


def gpt_pair(**changes: object) -> tuple[GPT, GPT]:
    config = ModelConfig.gpt2_small(vocab_size=61, d_model=D, n_heads=H, n_layers=2, d_ff=4 * D, max_seq_len=48,
                                    dropout=0.0, use_sdpa=True, fused_norm=True).replace(**changes)  # fmt: skip
    torch.manual_seed(0)
    plain = randomize(GPT(config))
    laid_out = GPT(config.replace(decode_layout=True)).eval()
    laid_out.load_state_dict(plain.state_dict())
    return plain, laid_out


def assert_same_model(plain: nn.Module, laid_out: nn.Module, ids: torch.Tensor) -> None:
    with torch.no_grad():
        assert_close(laid_out(ids), plain(ids))
    for layer in laid_out.layers:
        assert packed_weight(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj) is not None


@pytest.mark.parametrize("changes", [{}, dict(tie_embeddings=False), dict(n_kv_heads=2, bias=False)])
def test_decode_layout_keeps_the_state_dict_and_the_logits(changes: dict) -> None:
    plain, laid_out = gpt_pair(**changes)
    ours, theirs = laid_out.state_dict(), plain.state_dict()
    assert list(ours) == list(theirs)  # the same names, in the same order
    for name in theirs:
        assert ours[name].shape == theirs[name].shape and torch.equal(ours[name], theirs[name]), name
    assert_same_model(plain, laid_out, torch.randint(0, 61, (2, 13)))
    buffer = io.BytesIO()  # a checkpoint written from the decoding layout loads into the plain one
    torch.save(laid_out.state_dict(), buffer)
    buffer.seek(0)
    again = GPT(plain.config)
    again.load_state_dict(torch.load(buffer, weights_only=True))
    assert_same_model(plain.eval(), laid_out, torch.randint(0, 61, (2, 13)))
    with torch.no_grad():
        assert_close(again(torch.arange(10)[None]), plain(torch.arange(10)[None]))


def test_decode_layout_generates_the_same_tokens() -> None:
    plain, laid_out = gpt_pair()
    prompt = torch.randint(0, 61, (3, 5), generator=torch.Generator().manual_seed(1))
    assert torch.equal(generate(laid_out, prompt, 30, greedy=True), generate(plain, prompt, 30, greedy=True))
    assert torch.equal(beam_search(laid_out, prompt[:1], 3, 20), beam_search(plain, prompt[:1], 3, 20))


def test_decode_layout_trains_like_the_plain_layout_and_stays_packed() -> None:
    """Training goes through the explicit projections (gradients); the optimiser writes in place, so the packed
    matrix is the parameters themselves and the next decoding step sees the new weights."""
    plain, laid_out = gpt_pair()
    ids = torch.randint(0, 61, (4, 16), generator=torch.Generator().manual_seed(2))
    for model in (plain, laid_out):
        model.train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
        for _ in range(3):
            optimizer.zero_grad()
            next_token_loss(model, ids).backward()
            optimizer.step()
        model.eval()
    for (name, p), q in zip(plain.named_parameters(), laid_out.parameters()):
        assert_close(q, p, msg=name)
    assert_same_model(plain, laid_out, ids)


def test_decode_layout_sees_load_state_dict_and_to() -> None:
    plain, laid_out = gpt_pair()
    torch.manual_seed(5)
    other = randomize(GPT(plain.config), seed=5)
    laid_out.load_state_dict(other.state_dict())  # copied in place: the packed matrices hold the new weights
    ids = torch.randint(0, 61, (2, 9))
    assert_same_model(other, laid_out, ids)
    assert_same_model(other.double(), laid_out.double(), ids)
    assert laid_out.layers[0].ffn.down_proj.weight.stride() == (1, D)  # (D, 4D) stored (4D, D): .to keeps it


def test_a_deep_copy_computes_the_same() -> None:
    plain, laid_out = gpt_pair()
    twin = copy.deepcopy(laid_out)
    ids = torch.randint(0, 61, (2, 9))
    with torch.no_grad():
        assert_close(twin(ids), plain(ids))


def test_transformer_with_decode_layout() -> None:
    config = ModelConfig.transformer_base(vocab_size=40, d_model=D, n_heads=H, n_layers=2, d_ff=64, max_seq_len=24,
                                          dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    plain = randomize(Transformer(config))
    laid_out = Transformer(config.replace(decode_layout=True)).eval()
    laid_out.load_state_dict(plain.state_dict())
    src, tgt = torch.randint(0, 40, (2, 7)), torch.randint(0, 40, (2, 5))
    with torch.no_grad():
        assert_close(laid_out(src, tgt), plain(src, tgt))
        memory = plain.encode(src)
        caches = [laid_out.new_kv_caches(), plain.new_kv_caches()]
        for t in range(5):
            step = [m.decode(tgt[:, t : t + 1], memory, kv_caches=c) for m, c in zip((laid_out, plain), caches)]
            assert_close(step[0], step[1])
    assert laid_out.decoder_layers[0].cross_attn.fused_qkv is False  # keys/values come from memory


def test_save_pretrained_from_the_decoding_layout(tmp_path) -> None:  # noqa: ANN001
    pytest.importorskip("safetensors")
    plain, laid_out = gpt_pair()
    laid_out.save_pretrained(tmp_path)  # safetensors wants plain contiguous tensors: the writer makes them
    back = GPT.from_pretrained(tmp_path)
    with torch.no_grad():
        assert_close(back(torch.arange(12)[None]), plain(torch.arange(12)[None]))


# ----------------------------------------------------------------------------- chapter 14's layers and LoRA

TODAYS = {
    "qk_norm+d_head+gqa": dict(qk_norm=True, d_head=24, n_kv_heads=2),  # D_h = 24, not D / H = 16
    "mqa+bias": dict(n_kv_heads=1, bias=True),
    "sliding+sinks": dict(sliding_window=6, attention_sinks=2),
    "moe+shared+dense": dict(n_experts=4, n_experts_per_token=2, n_shared_experts=1, n_dense_layers=1, d_expert=40),
    "mla": dict(kv_rank=16, q_rank=20, rope_head_dim=8, nope_head_dim=12, v_head_dim=10),
}  # fmt: skip


def llama_pair(**changes: object) -> tuple[GPT, GPT]:
    config = ModelConfig.llama_tiny(n_layers=3, vocab_size=50, max_seq_len=40, **changes)
    plain = randomize(GPT(config))
    laid_out = GPT(config.replace(decode_layout=True)).eval()
    laid_out.load_state_dict(plain.state_dict())
    return plain, laid_out


@pytest.mark.parametrize("name", list(TODAYS))
def test_decode_layout_with_todays_layers_gives_the_same_logits_and_tokens(name: str) -> None:
    plain, laid_out = llama_pair(**TODAYS[name])
    ids = torch.randint(0, 50, (2, 11), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert_close(laid_out(ids), plain(ids))
    assert torch.equal(generate(laid_out, ids[:, :4], 20, greedy=True), generate(plain, ids[:, :4], 20, greedy=True))
    attention = [layer.self_attn for layer in laid_out.layers]
    if name == "mla":  # latent attention has no q/k/v triple: its projections are only stored (in, out)
        assert all(not isinstance(a, MultiHeadAttention) for a in attention)
        assert all(a.kv_up_proj.weight.stride()[0] == 1 for a in attention)
    else:
        assert all(packed_weight(a.q_proj, a.k_proj, a.v_proj) is not None for a in attention)


def test_lora_on_the_decode_layout_trains_and_merges_like_the_plain_layout() -> None:
    """LoRA replaces q_proj and v_proj with adapters: the fused product steps aside (one product per layer),
    ``.to`` still works, and merging folds ΔW into the packed matrix, which is fused again."""
    from companion.finetune import apply_lora, merge_lora

    plain, laid_out = llama_pair(**TODAYS["qk_norm+d_head+gqa"])
    ids = torch.randint(0, 50, (4, 12), generator=torch.Generator().manual_seed(4))
    unmerged = {}
    for model in (plain, laid_out):
        torch.manual_seed(7)  # the same A in both
        apply_lora(model, r=2, alpha=4.0)
        model.train()
        optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
        for _ in range(2):
            optimizer.zero_grad()
            next_token_loss(model, ids).backward()
            optimizer.step()
        model.eval().to(torch.float32)  # repacking skips the adapters instead of refusing them
        with torch.no_grad():
            unmerged[model] = model(ids)
    assert_close(unmerged[laid_out], unmerged[plain])
    merge_lora(plain), merge_lora(laid_out)
    assert_same_model(plain, laid_out, ids)  # q/k/v packed again: the in-place merge kept the layout
    with torch.no_grad():
        assert_close(laid_out(ids), unmerged[laid_out])


def test_encoders_of_chapter_12_with_decode_layout_compute_the_same() -> None:
    """ViT and the sequence classifier build their layers from the config: q/k/v fused, the same logits."""
    from companion.models import SequenceClassifier, ViT

    vit = ModelConfig.vit(image_size=8, patch_size=2, num_channels=1, d_model=D, n_heads=H, n_layers=2, d_ff=64,
                          dropout=0.0)  # fmt: skip
    bert = ModelConfig.bert_base(vocab_size=40, d_model=D, n_heads=H, n_layers=2, d_ff=64, max_seq_len=16,
                                 dropout=0.0)  # fmt: skip
    cases = [(lambda c: ViT(c, num_labels=3), vit, torch.randn(2, 1, 8, 8)),
             (lambda c: SequenceClassifier(c, num_labels=3), bert, torch.randint(0, 40, (2, 9)))]  # fmt: skip
    for build, config, inputs in cases:
        plain = randomize(build(config))
        laid_out = build(config.replace(decode_layout=True)).eval()
        laid_out.load_state_dict(plain.state_dict())
        with torch.no_grad():
            assert_close(laid_out(inputs), plain(inputs))
        attention = [m for m in laid_out.modules() if isinstance(m, MultiHeadAttention)]
        assert attention and all(packed_weight(a.q_proj, a.k_proj, a.v_proj) is not None for a in attention)

"""One decoding loop for every model (issue 13, item 1): the Decodable protocol, the adapters of
companion.generation, beam search reusing one KV cache across beams, and the train/eval mode restored
even when decoding raises."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from companion.attention import KVCache
from companion.generation import (
    BigramModel,
    ConditionedDecoder,
    Decodable,
    DecodingConfig,
    FunctionModel,
    beam_search,
    eval_mode,
    generate,
    translate,
)
from companion.models import GPT, ModelConfig, Transformer

TINY = dict(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32, dropout=0.0)


def spread(model: nn.Module, std: float = 0.3) -> nn.Module:
    """Large random weights, so that greedy decoding does not repeat one token (see test_generation)."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, std)
    return model.eval()


def seq2seq(config: ModelConfig | None = None) -> Transformer:
    torch.manual_seed(0)
    return spread(Transformer(config or ModelConfig(**TINY, positions="sinusoidal")))


def gpt(**changes) -> GPT:
    torch.manual_seed(0)
    return spread(GPT(ModelConfig(**{**TINY, **changes})))


# --- the protocol ---------------------------------------------------------------------------------


def test_models_and_adapters_satisfy_the_protocol() -> None:
    src = torch.randint(3, 40, (1, 5))
    table = torch.randn(6, 6)
    for model in (gpt(), ConditionedDecoder(seq2seq(), src), BigramModel(table),
                  FunctionModel(lambda ids: table[ids], vocab_size=6, max_seq_len=8)):  # fmt: skip
        assert isinstance(model, Decodable), type(model).__name__
    assert not isinstance(NoCache(), Decodable)  # no new_kv_caches()


class NoCache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.config = DecodingConfig(vocab_size=5, max_seq_len=8)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return torch.zeros(*ids.shape, 5)


@pytest.mark.parametrize("decode", [generate, lambda m, ids, n: beam_search(m, ids, 2, n)])
def test_a_model_without_the_interface_gets_a_clear_type_error(decode) -> None:
    ids = torch.zeros(1, 2, dtype=torch.long)
    with pytest.raises(TypeError, match="new_kv_caches"):
        decode(NoCache(), ids, 3)
    with pytest.raises(TypeError, match="max_seq_len"):
        decode(lambda ids, kv_caches=None: torch.zeros(*ids.shape, 5), ids, 3)  # no config at all
    with pytest.raises(TypeError, match="model must be callable"):
        decode(object(), ids, 3)


def test_generate_without_cache_needs_only_forward_and_config() -> None:
    out = generate(NoCache(), torch.zeros(1, 2, dtype=torch.long), 3, greedy=True, use_cache=False)
    assert out.tolist() == [[0, 0, 0, 0, 0]]  # all-zero logits: argmax is token 0


def test_translate_rejects_a_decoder_only_model() -> None:
    with pytest.raises(TypeError, match="encoder-decoder.*encode"):
        translate(gpt(), torch.ones(1, 3, dtype=torch.long), 1, 2, 5)


# --- the encoder-decoder adapter -----------------------------------------------------------------


def test_conditioned_decoder_through_generate_equals_translate_and_encodes_once(monkeypatch) -> None:
    model = seq2seq()
    src = torch.randint(3, 40, (3, 6), generator=torch.Generator().manual_seed(2))
    src[1, 4:] = 0
    calls = []
    real = model.encode
    monkeypatch.setattr(model, "encode", lambda *a, **k: calls.append(1) or real(*a, **k))
    decoder = ConditionedDecoder(model, src, src_pad_id=0)
    start = torch.full((3, 1), 1)
    cached = generate(decoder, start, 12, greedy=True, eos_id=2)
    uncached = generate(decoder, start, 12, greedy=True, eos_id=2, use_cache=False)
    assert calls == [1], "the source is encoded once, when the adapter is built"
    assert torch.equal(cached, uncached)
    assert torch.equal(cached, translate(model, src, 1, 2, 12, src_pad_id=0))


def test_conditioned_decoder_caches_the_encoder_keys_and_values_once() -> None:
    """Cross-attention projects H on the first cached step only: k_proj of cross_attn sees S rows once."""
    model = seq2seq()
    src = torch.randint(3, 40, (1, 7))
    rows = []
    hook = model.decoder_layers[0].cross_attn.k_proj.register_forward_hook(lambda m, i, o: rows.append(i[0].shape[1]))
    generate(ConditionedDecoder(model, src), torch.tensor([[1]]), 6, greedy=True)
    hook.remove()
    assert rows == [7]


def test_conditioned_decoder_checks_its_arguments() -> None:
    with pytest.raises(ValueError, match="src holds token id 99|token id 99 in src"):
        ConditionedDecoder(seq2seq(), torch.tensor([[1, 99]]))
    with pytest.raises(ValueError, match="src_pad_id=50"):
        ConditionedDecoder(seq2seq(), torch.tensor([[1, 2]]), src_pad_id=50)
    decoder = ConditionedDecoder(seq2seq(), torch.randint(3, 40, (2, 4)))
    with pytest.raises(ValueError, match="batch size 3 but the source has 2"):
        decoder(torch.ones(3, 1, dtype=torch.long))


# --- beam search: one cache for every beam --------------------------------------------------------


@pytest.mark.parametrize("positions", ["learned", "rope", "alibi"])
@pytest.mark.parametrize("width", [1, 3, 5])
def test_beam_search_with_cache_equals_recomputation(positions: str, width: int) -> None:
    model = gpt(positions=positions)
    prompt = torch.tensor([[5, 6, 7]])
    for eos_id in (None, 4):
        cached = beam_search(model, prompt, width, 10, eos_id=eos_id)
        full = beam_search(model, prompt, width, 10, eos_id=eos_id, use_cache=False)
        assert torch.equal(cached, full), (positions, width, eos_id)


def test_beam_search_reorders_the_cache_and_feeds_one_token_per_beam(monkeypatch) -> None:
    model = gpt()
    reorders, fed = [], []
    real = KVCache.reorder
    monkeypatch.setattr(KVCache, "reorder", lambda self, index: reorders.append(index.tolist()) or real(self, index))
    hook = model.layers[0].register_forward_pre_hook(lambda m, args: fed.append(tuple(args[0].shape[:2])))
    beam_search(model, torch.tensor([[5, 6, 7]]), 3, 6)
    hook.remove()
    assert fed[0] == (1, 3) and all(shape == (3, 1) for shape in fed[1:]), fed  # prompt once, then 1 token per beam
    assert len(reorders) == (len(fed) - 1) * len(model.layers)  # every layer, after every step but the last
    assert all(len(index) == 3 for index in reorders)


def test_beam_search_over_an_encoder_decoder_equals_recomputation() -> None:
    decoder = ConditionedDecoder(seq2seq(), torch.randint(3, 40, (1, 6), generator=torch.Generator().manual_seed(4)))
    bos = torch.tensor([[1]])
    for width in (1, 2, 4):
        assert torch.equal(beam_search(decoder, bos, width, 10, eos_id=2),
                           beam_search(decoder, bos, width, 10, eos_id=2, use_cache=False))  # fmt: skip
    greedy = generate(decoder, bos, 10, greedy=True, eos_id=2)
    one = beam_search(decoder, bos, 1, 10, eos_id=2)
    assert torch.equal(one, greedy[:, : one.size(1)])


# --- a logits function and a bigram table ---------------------------------------------------------


def test_function_model_decodes_like_the_model_it_wraps() -> None:
    model = gpt()
    wrapped = FunctionModel(lambda ids: model(ids), vocab_size=40, max_seq_len=32)
    prompt = torch.tensor([[3, 4], [5, 6]])
    for kwargs in (dict(greedy=True), dict(top_p=0.9, generator=0)):
        expected = generate(model, prompt, 8, **kwargs)
        assert torch.equal(generate(wrapped, prompt, 8, **kwargs), expected)
        assert torch.equal(generate(wrapped, prompt, 8, use_cache=False, **kwargs), expected)
    assert torch.equal(beam_search(wrapped, prompt[:1], 3, 6), beam_search(model, prompt[:1], 3, 6))


def test_function_model_checks_what_fn_returns() -> None:
    bad = FunctionModel(lambda ids: torch.zeros(ids.size(0), 7), vocab_size=7, max_seq_len=8)
    with pytest.raises(ValueError, match="fn\\(ids\\)"):
        generate(bad, torch.zeros(1, 2, dtype=torch.long), 2)
    with pytest.raises(TypeError, match="fn must be callable"):
        FunctionModel("not a function", vocab_size=7, max_seq_len=8)
    with pytest.raises(ValueError, match="max_seq_len=0"):
        FunctionModel(lambda ids: ids, vocab_size=7, max_seq_len=0)


def test_bigram_model_greedy_misses_what_beam_search_finds() -> None:
    """Chapter 9's hand example: <bos> -> A (0.5) -> x (0.4) = 0.20 greedily, but <bos> -> B (0.4) -> x (0.9)
    = 0.36, which a beam of width 2 keeps and finds."""
    probs = torch.zeros(6, 6)
    probs[0, [1, 2, 3]] = torch.tensor([0.1, 0.5, 0.4])  # <bos> -> <eos> / A / B
    probs[2, [1, 4, 5]] = torch.tensor([0.3, 0.4, 0.3])  # A -> <eos> / x / y
    probs[3, [1, 4, 5]] = torch.tensor([0.05, 0.9, 0.05])  # B -> <eos> / x / y
    probs[[1, 4, 5], 1] = 1.0  # then <eos>
    toy = BigramModel(probs.log(), max_seq_len=8)
    start = torch.tensor([[0]])
    assert generate(toy, start, 4, greedy=True, eos_id=1)[0].tolist() == [0, 2, 4, 1]
    assert beam_search(toy, start, beam_width=2, max_new_tokens=4, eos_id=1)[0].tolist() == [0, 3, 4, 1]
    assert beam_search(toy, start, 2, 4, eos_id=1, use_cache=False)[0].tolist() == [0, 3, 4, 1]
    with pytest.raises(ValueError, match="square"):
        BigramModel(torch.zeros(3, 4))


# --- train/eval mode, restored even on error -------------------------------------------------------


class Exploding(nn.Module):
    """A decodable model whose forward raises on the n-th call."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.config = DecodingConfig(vocab_size=4, max_seq_len=16)
        self.dropout = nn.Dropout(0.5)
        self.calls, self.fail_at, self.modes = 0, fail_at, []

    def new_kv_caches(self) -> list:
        return []

    def forward(self, ids: torch.Tensor, kv_caches=None) -> torch.Tensor:
        self.calls += 1
        self.modes.append(self.training)
        if self.calls == self.fail_at:
            raise RuntimeError("boom")
        return torch.zeros(*ids.shape, 4)


@pytest.mark.parametrize("decode", [
    lambda m: generate(m, torch.zeros(1, 1, dtype=torch.long), 5),
    lambda m: beam_search(m, torch.zeros(1, 1, dtype=torch.long), 2, 5),
])  # fmt: skip
def test_decoding_restores_train_mode_even_when_the_model_raises(decode) -> None:
    model = Exploding(fail_at=3).train()
    model.dropout.eval()  # a submodule in its own mode must get it back too
    with pytest.raises(RuntimeError, match="boom"):
        decode(model)
    assert model.modes == [False, False, False]  # eval while decoding
    assert model.training and not model.dropout.training


def test_translate_restores_train_mode_even_when_it_raises(monkeypatch) -> None:
    model = seq2seq().train()
    monkeypatch.setattr(model, "decode", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("boom")))
    with pytest.raises(RuntimeError, match="boom"):
        translate(model, torch.ones(1, 3, dtype=torch.long), 1, 2, 5)
    assert all(m.training for m in model.modules())


def test_eval_mode_is_a_plain_context_manager() -> None:
    model = gpt().train()
    with eval_mode(model) as m:
        assert m is model and not any(sub.training for sub in model.modules())
    assert all(sub.training for sub in model.modules())
    with eval_mode("not a module") as other:  # anything else passes through untouched
        assert other == "not a module"

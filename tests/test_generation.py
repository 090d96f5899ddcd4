"""Tests for companion.generation: the logit filters, sampling settings, KV-cached decoding equal to full
recomputation (GPT with every position scheme, GQA, sliding window; encoder-decoder translation), and
beam search."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch.testing import assert_close

from companion.generation import apply_temperature, beam_search, generate, top_k_filter, top_p_filter, translate
from companion.models import GPT, ModelConfig, Transformer

TINY = dict(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=32, dropout=0.0)
CACHE_CONFIGS = {
    "learned": ModelConfig(**TINY, positions="learned"),
    "rope": ModelConfig(**TINY, positions="rope"),
    "alibi": ModelConfig(**TINY, positions="alibi"),
    "sinusoidal-post-norm": ModelConfig(**TINY, positions="sinusoidal", norm_placement="post", final_norm=False),
    "llama-gqa": ModelConfig.llama_tiny(vocab_size=40, max_seq_len=32),
    "mqa-sliding-window": ModelConfig.llama_tiny(vocab_size=40, max_seq_len=32, n_kv_heads=1, sliding_window=4),
}


def spread(model: torch.nn.Module, std: float = 0.3) -> torch.nn.Module:
    """Redraw every weight matrix with a large std: freshly initialised models (std 0.02) repeat one token
    forever, which would let a wrong position or cache go unnoticed in a greedy comparison."""
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, std)
    return model.eval()


def model_for(config: ModelConfig, seed: int = 0, *, spread_weights: bool = True) -> GPT:
    torch.manual_seed(seed)
    model = GPT(config).eval()
    return spread(model) if spread_weights else model


# --- filters ------------------------------------------------------------------------------------


def test_top_k_keeps_the_k_largest_and_ties() -> None:
    logits = torch.tensor([[1.0, 4.0, 3.0, 3.0, 0.0]])
    kept = torch.isfinite(top_k_filter(logits, 2))
    assert kept.tolist() == [[False, True, True, True, False]]  # the tie at the 2nd value stays
    assert torch.isfinite(top_k_filter(logits, 10)).all()  # k > V keeps everything


def test_top_p_hand_example() -> None:
    logits = torch.tensor([0.05, 0.5, 0.15, 0.3]).log()
    kept = lambda p: torch.isfinite(top_p_filter(logits, p)).tolist()  # noqa: E731
    assert kept(0.4) == [False, True, False, False]  # 0.5 alone reaches 0.4
    assert kept(0.75) == [False, True, False, True]  # 0.5 + 0.3 = 0.8 >= 0.75
    assert kept(0.9) == [False, True, True, True]
    assert kept(1.0) == [True, True, True, True]
    uniform = torch.isfinite(top_p_filter(torch.zeros(4), 0.5))  # 0.25 + 0.25 reaches 0.5 exactly
    assert uniform.sum() == 2


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_top_p_keeps_the_smallest_set_reaching_p(seed: int, p: float) -> None:
    logits = torch.randn(3, 30, generator=torch.Generator().manual_seed(seed)) * 2
    probs = torch.softmax(logits, -1)
    kept = torch.isfinite(top_p_filter(logits, p))
    for row in range(3):
        mass = probs[row][kept[row]].sum()
        weakest = probs[row][kept[row]].min()
        assert mass >= p - 1e-6  # the set reaches p ...
        assert mass - weakest < p  # ... and is the smallest that does
        assert (probs[row][~kept[row]] <= weakest).all()  # and it holds the most likely tokens


def test_temperature_sharpens_and_flattens() -> None:
    logits = torch.tensor([2.0, 1.0, 0.0])
    sharp, flat = (torch.softmax(apply_temperature(logits, t), -1) for t in (0.5, 2.0))
    base = torch.softmax(logits, -1)
    assert sharp[0] > base[0] > flat[0]
    assert torch.softmax(apply_temperature(logits, 1e-3), -1)[0] > 0.999  # -> one-hot at the argmax


@pytest.mark.parametrize(
    ("kwargs", "word"),
    [
        (dict(temperature=0.0), "temperature=0.0"),
        (dict(temperature=-1.0), "temperature=-1.0"),
        (dict(top_p=0.0), "top_p=0.0"),
        (dict(top_p=1.5), "top_p=1.5"),
        (dict(top_k=0), "top_k=0"),
    ],
)
def test_generate_rejects_bad_sampling_settings(kwargs: dict, word: str) -> None:
    model = model_for(CACHE_CONFIGS["learned"])
    with pytest.raises(ValueError, match=word):
        generate(model, torch.zeros(1, 3, dtype=torch.long), 2, **kwargs)


def test_generate_rejects_bad_prompts() -> None:
    model = model_for(CACHE_CONFIGS["learned"])
    with pytest.raises(ValueError, match="empty"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 2)
    with pytest.raises(ValueError, match="max_seq_len=32"):
        generate(model, torch.zeros(1, 33, dtype=torch.long), 1)
    with pytest.raises(ValueError, match="max_new_tokens=10"):
        generate(model, torch.zeros(1, 30, dtype=torch.long), 10)
    generate(model, torch.zeros(1, 3, dtype=torch.long), 2, temperature=0.0, greedy=True)  # fine when greedy


# --- cached decoding == full recomputation ------------------------------------------------------


@pytest.mark.parametrize("name", list(CACHE_CONFIGS))
@torch.no_grad()
def test_cached_logits_equal_full_recomputation(name: str) -> None:
    model = model_for(CACHE_CONFIGS[name], spread_weights=False)  # GPT-2 init: logits of order 1
    ids = torch.randint(0, 40, (2, 12), generator=torch.Generator().manual_seed(1))
    full = model(ids)  # (B, T, V)
    caches = model.new_kv_caches()
    pieces = [model(ids[:, :5], kv_caches=caches)]  # a prompt, then one token at a time
    pieces += [model(ids[:, t : t + 1], kv_caches=caches) for t in range(5, 12)]
    assert caches[0].length == 12
    assert_close(torch.cat(pieces, dim=1), full, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", list(CACHE_CONFIGS))
def test_cached_and_uncached_greedy_generation_agree(name: str) -> None:
    model = model_for(CACHE_CONFIGS[name])
    prompt = torch.randint(0, 40, (3, 4), generator=torch.Generator().manual_seed(2))
    cached = generate(model, prompt, 12, greedy=True, use_cache=True)
    uncached = generate(model, prompt, 12, greedy=True, use_cache=False)
    assert cached.shape == (3, 16) and torch.equal(cached[:, :4], prompt)
    assert torch.equal(cached, uncached)


def test_sampling_is_reproducible_and_cache_independent() -> None:
    model = model_for(CACHE_CONFIGS["rope"])
    prompt = torch.zeros(2, 3, dtype=torch.long)
    kw = dict(temperature=1.5, top_k=20, top_p=0.95)
    a = generate(model, prompt, 10, generator=7, **kw)
    b = generate(model, prompt, 10, generator=torch.Generator().manual_seed(7), use_cache=False, **kw)
    c = generate(model, prompt, 10, generator=8, **kw)
    assert torch.equal(a, b) and not torch.equal(a, c)


def test_very_low_temperature_sampling_is_greedy() -> None:
    model = model_for(CACHE_CONFIGS["learned"])
    model.lm_head.weight.data.mul_(5)  # a peaked model, so the argmax wins by a clear margin
    prompt = torch.randint(0, 40, (4, 3), generator=torch.Generator().manual_seed(3))
    greedy = generate(model, prompt, 8, greedy=True)
    for seed in range(3):
        assert torch.equal(generate(model, prompt, 8, temperature=1e-4, generator=seed), greedy)


def test_top_k_1_is_greedy() -> None:
    model = model_for(CACHE_CONFIGS["alibi"])
    prompt = torch.randint(0, 40, (2, 3), generator=torch.Generator().manual_seed(4))
    assert torch.equal(generate(model, prompt, 8, top_k=1, generator=0), generate(model, prompt, 8, greedy=True))


def test_eos_stops_a_row_and_pads_it() -> None:
    model = model_for(CACHE_CONFIGS["learned"])
    prompt = torch.randint(0, 40, (3, 2), generator=torch.Generator().manual_seed(5))
    free = generate(model, prompt, 10, greedy=True)
    eos = int(free[0, 4])  # the third generated token of row 0
    out = generate(model, prompt, 10, greedy=True, eos_id=eos)
    for row in range(3):
        hits = (free[row, 2:] == eos).nonzero()
        if len(hits):
            end = 2 + int(hits[0])
            assert torch.equal(out[row, : end + 1], free[row, : end + 1])
            assert (out[row, end:] == eos).all()
        else:
            assert torch.equal(out[row], free[row, : out.size(1)])
    if all((free[r, 2:] == eos).any() for r in range(3)):
        assert out.size(1) < free.size(1)  # everyone finished: stopped early


# --- beam search --------------------------------------------------------------------------------


@pytest.mark.parametrize("eos_id", [None, 7])
def test_beam_width_1_is_greedy(eos_id: int | None) -> None:
    model = model_for(CACHE_CONFIGS["rope"])
    prompt = torch.randint(0, 40, (1, 3), generator=torch.Generator().manual_seed(6))
    greedy = generate(model, prompt, 8, greedy=True, eos_id=eos_id)
    beam = beam_search(model, prompt, beam_width=1, max_new_tokens=8, eos_id=eos_id)
    if eos_id is not None and (greedy[0] == eos_id).any():
        greedy = greedy[:, : int((greedy[0, 3:] == eos_id).nonzero()[0]) + 4]  # greedy pads; beam stops
    assert torch.equal(beam, greedy)


@torch.no_grad()
def test_wide_beam_finds_the_most_likely_two_token_continuation() -> None:
    config = ModelConfig(**{**TINY, "vocab_size": 6})
    model = model_for(config)
    prompt = torch.tensor([[1, 2]])
    best, best_score = None, -float("inf")
    for a, b in itertools.product(range(6), repeat=2):  # every continuation, scored exactly
        seq = torch.tensor([[1, 2, a, b]])
        logp = torch.log_softmax(model(seq), -1)
        score = logp[0, 1, a] + logp[0, 2, b]
        if score > best_score:
            best, best_score = seq, score
    assert torch.equal(beam_search(model, prompt, beam_width=6, max_new_tokens=2, length_penalty=0.0), best)


def test_beam_search_rejects_bad_arguments() -> None:
    model = model_for(CACHE_CONFIGS["learned"])
    with pytest.raises(ValueError, match="beam_width=0"):
        beam_search(model, torch.zeros(1, 2, dtype=torch.long), 0, 3)
    with pytest.raises(ValueError, match="one prompt"):
        beam_search(model, torch.zeros(2, 2, dtype=torch.long), 2, 3)


# --- encoder-decoder ----------------------------------------------------------------------------

SEQ2SEQ = {
    "2017-post-norm-sinusoidal": ModelConfig.transformer_base(**TINY, n_decoder_layers=3),
    "pre-norm-rope-gqa": ModelConfig(**TINY, positions="rope", n_kv_heads=2),
}


@pytest.mark.parametrize("name", list(SEQ2SEQ))
def test_translate_cached_equals_uncached_and_encodes_once(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from companion.masks import padding_mask

    torch.manual_seed(0)
    model = spread(Transformer(SEQ2SEQ[name]))
    src = torch.randint(3, 40, (3, 7), generator=torch.Generator().manual_seed(8))
    src[0, 5:] = 0  # padding
    encode_calls, decoder_inputs = [], []
    real_encode = model.encode
    monkeypatch.setattr(model, "encode", lambda *a, **k: encode_calls.append(1) or real_encode(*a, **k))
    hook = model.decoder_layers[0].register_forward_pre_hook(lambda m, args: decoder_inputs.append(args[0].size(1)))
    cached = translate(model, src, bos_id=1, eos_id=2, max_new_tokens=10, src_pad_id=0)
    hook.remove()
    assert encode_calls == [1]  # the encoder ran once for the whole translation
    assert decoder_inputs == [1] * (cached.size(1) - 1)  # every step fed one new token
    uncached = translate(model, src, bos_id=1, eos_id=2, max_new_tokens=10, src_pad_id=0, use_cache=False)
    assert torch.equal(cached, uncached)
    assert (cached[:, 0] == 1).all()

    # and the logits: teacher-forced forward equals step-by-step cached decoding
    mask = padding_mask(src, 0)
    with torch.no_grad():
        full = model(src, cached, mask)
        memory = real_encode(src, mask)
        caches = model.new_kv_caches()
        steps = [model.decode(cached[:, t : t + 1], memory, mask, kv_caches=caches) for t in range(cached.size(1))]
    assert_close(torch.cat(steps, dim=1), full, atol=1e-5, rtol=1e-5)


def test_translate_rejects_too_long_outputs() -> None:
    model = Transformer(ModelConfig(**TINY))
    with pytest.raises(ValueError, match="max_new_tokens=40"):
        translate(model, torch.ones(1, 3, dtype=torch.long), 1, 2, max_new_tokens=40)


# --- against Hugging Face ---------------------------------------------------------------------------


@pytest.mark.parametrize("use_sdpa", [False, True])
def test_cached_uncached_and_transformers_greedy_give_the_same_tokens(use_sdpa: bool) -> None:
    """A small random GPT-2 built by ``transformers`` (nothing downloaded), its weights copied into ours:
    greedy decoding with the cache, without it and by ``transformers.generate`` agree token for token."""
    transformers = pytest.importorskip("transformers")
    from companion.models import load_gpt2_state_dict

    hf_config = transformers.GPT2Config(vocab_size=40, n_positions=48, n_embd=32, n_layer=2, n_head=4,
                                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # fmt: skip
    torch.manual_seed(0)
    hf = spread(transformers.GPT2LMHeadModel(hf_config))
    config = ModelConfig.gpt2_small(vocab_size=40, d_model=32, n_heads=4, n_layers=2, d_ff=128, max_seq_len=48,
                                    dropout=0.0, use_sdpa=use_sdpa)  # fmt: skip
    ours = load_gpt2_state_dict(hf.state_dict(), config).eval()
    prompt = torch.randint(0, 40, (2, 5), generator=torch.Generator().manual_seed(1))
    n = 30
    with torch.no_grad():
        expected = hf.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, eos_token_id=None, pad_token_id=0)  # fmt: skip
    cached = generate(ours, prompt, n, greedy=True, use_cache=True)
    uncached = generate(ours, prompt, n, greedy=True, use_cache=False)
    assert len(set(expected[0, 5:].tolist())) > 3  # the weights are spread enough not to repeat one token
    assert torch.equal(cached, expected)
    assert torch.equal(uncached, expected)


def test_generate_leaves_the_prompt_untouched_and_returns_int64() -> None:
    model = model_for(CACHE_CONFIGS["learned"])
    prompt = torch.tensor([[3, 1, 4]], dtype=torch.int32)
    before = prompt.clone()
    out = generate(model, prompt, 5, greedy=True)
    assert out.dtype == torch.int64 and out.shape == (1, 8)
    assert torch.equal(prompt, before) and torch.equal(out[:, :3], before.long())


@pytest.mark.parametrize("stop_early", [False, True])
def test_generate_runs_in_inference_mode_but_returns_an_ordinary_tensor(stop_early: bool) -> None:
    """The loop runs under torch.inference_mode; what comes back (also when every row stops early) is an ordinary
    tensor one may change in place, and the model trains afterwards as before."""
    model = model_for(CACHE_CONFIGS["learned"])
    prompt = torch.tensor([[3, 1, 4]])
    eos = int(generate(model, prompt, 2, greedy=True)[0, -1]) if stop_early else None
    out = generate(model, prompt, 6, greedy=True, eos_id=eos)
    assert (out.shape[1] < 9) if stop_early else (out.shape[1] == 9)
    assert not out.is_inference()
    out[:, 0] = 0  # an in-place change outside inference mode: refused for inference tensors
    model.train()
    model(out).sum().backward()
    assert all(p.grad is not None for p in model.parameters())

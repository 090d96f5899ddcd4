"""companion.models.GPT reproduces Hugging Face GPT-2 and Llama, built locally from small random configs.

Nothing is downloaded: ``transformers`` builds the reference models from a config with random weights.
Every parameter (norm gains and biases included) is redrawn at a visible scale, so a weight that the
loader put in the wrong place, or forgot to transpose, changes the logits.
"""

from __future__ import annotations

import pytest
import torch
from model_helpers import randomize
from torch import nn
from torch.testing import assert_close

from companion.generation import generate
from companion.models import ModelConfig, load_gpt2_state_dict, load_llama_state_dict

transformers = pytest.importorskip("transformers")

VOCAB = 97



def gpt2_reference(seed: int = 0) -> nn.Module:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_positions=32, n_embd=48, n_layer=2, n_head=4, n_inner=None,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    torch.manual_seed(seed)
    return randomize(transformers.GPT2LMHeadModel(config), seed)


def llama_reference(n_kv_heads: int, tie: bool, seed: int = 0) -> tuple[nn.Module, ModelConfig]:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=48, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=n_kv_heads, max_position_embeddings=64, rope_theta=500000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=tie, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    ref = randomize(transformers.LlamaForCausalLM(config), seed)
    ours = ModelConfig.llama(
        vocab_size=VOCAB, d_model=48, d_ff=128, n_layers=2, n_heads=4, n_kv_heads=n_kv_heads, max_seq_len=64,
        rope_base=500000.0, norm_eps=1e-5, tie_embeddings=tie,
    )  # fmt: skip
    return ref, ours


FAST_PATHS = dict(use_sdpa=True, fused_norm=True, decode_layout=True)  # what companion-sample uses (tested equal)


def ids(batch: int = 2, length: int = 11, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("fast", [False, True])
@torch.no_grad()
def test_gpt2_logits_match(fast: bool) -> None:
    ref = gpt2_reference()
    ref.config._attn_implementation = "eager"
    config = ModelConfig.gpt2_small(vocab_size=VOCAB, d_model=48, n_heads=4, n_layers=2, d_ff=192, max_seq_len=32,
                                    dropout=0.0, **(FAST_PATHS if fast else {}))  # fmt: skip
    ours = load_gpt2_state_dict(ref.state_dict(), config).eval()
    x = ids()
    assert_close(ours(x), ref(x).logits, atol=1e-4, rtol=1e-4)


@torch.no_grad()
def test_gpt2_loader_reads_sizes_from_the_state_dict() -> None:
    ref = gpt2_reference(seed=3)
    ours = load_gpt2_state_dict(ref.state_dict(), ModelConfig.gpt2_small(
        vocab_size=VOCAB, d_model=48, n_heads=4, n_layers=2, d_ff=192, max_seq_len=32, dropout=0.0))  # fmt: skip
    guessed = load_gpt2_state_dict(ref.state_dict())  # head width 64 assumed: 48 -> one head
    assert guessed.config.vocab_size == VOCAB and guessed.config.n_layers == 2 and guessed.config.max_seq_len == 32
    x = ids()
    assert not torch.allclose(guessed(x), ours(x), atol=1e-3)  # the head count matters, and it is used


def test_gpt2_loader_rejects_a_mismatching_config() -> None:
    ref = gpt2_reference()
    wrong = ModelConfig.gpt2_small(vocab_size=VOCAB, d_model=48, n_heads=4, n_layers=3, d_ff=192, max_seq_len=32)
    with pytest.raises(ValueError, match="n_layers=3"):
        load_gpt2_state_dict(ref.state_dict(), wrong)


@pytest.mark.parametrize("fast", [False, True])
@torch.no_grad()
def test_gpt2_greedy_generation_matches_hf_generate(fast: bool) -> None:
    ref = gpt2_reference(seed=5)
    config = ModelConfig.gpt2_small(vocab_size=VOCAB, d_model=48, n_heads=4, n_layers=2, d_ff=192, max_seq_len=32,
                                    dropout=0.0, **(FAST_PATHS if fast else {}))  # fmt: skip
    ours = load_gpt2_state_dict(ref.state_dict(), config)
    prompt = ids(1, 4, seed=2)
    theirs = ref.generate(
        prompt, max_new_tokens=10, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt)
    )
    assert torch.equal(generate(ours, prompt, 10, greedy=True), theirs)


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize(("n_kv_heads", "tie"), [(4, False), (2, False), (1, True)])
@torch.no_grad()
def test_llama_logits_match(n_kv_heads: int, tie: bool, fast: bool) -> None:
    ref, config = llama_reference(n_kv_heads, tie)
    config = config.replace(**(FAST_PATHS if fast else {}))
    ours = load_llama_state_dict(ref.state_dict(), config).eval()
    x = ids()
    assert_close(ours(x), ref(x).logits, atol=1e-4, rtol=1e-4)
    caches = ours.new_kv_caches()  # the cached path agrees as well
    stepped = torch.cat(
        [ours(x[:, :6], kv_caches=caches)] + [ours(x[:, t : t + 1], kv_caches=caches) for t in range(6, 11)], 1
    )
    assert_close(stepped, ref(x).logits, atol=1e-4, rtol=1e-4)


def test_llama_loader_rejects_a_non_llama_config() -> None:
    ref, _ = llama_reference(2, False)
    with pytest.raises(ValueError, match="positions='learned'"):
        load_llama_state_dict(ref.state_dict(), ModelConfig(vocab_size=VOCAB, d_model=48, n_heads=4))

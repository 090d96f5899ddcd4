"""companion.finetune: the chat template and loss mask, sequence log-probabilities, LoRA, DPO and GRPO.

References others maintain: Hugging Face ``peft``'s LoRA (same base weights, same A and B; a single layer and a
``transformers`` Llama against our GPT with its weights), ``peft``'s ``merge_and_unload``, ``F.cross_entropy``
and ``F.kl_div``; the DPO loss against the paper's formula written out with ``torch.sigmoid`` and its gradient
against the paper's eq. 8; GRPO against DeepSeekMath's eq. 3 written out token by token; our chat template and loss
mask against ChatML and Llama 3 templates rendered by ``transformers``' ``apply_chat_template``. The loss mask is
checked token by token on an example worked by hand.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from model_helpers import randomize
from torch import nn
from torch.testing import assert_close

from companion.finetune import (
    END,
    IGNORE_INDEX,
    ROLE_TOKENS,
    LoRALinear,
    add_chat_tokens,
    apply_lora,
    chat_template,
    dpo_loss,
    encode_chat,
    encode_prompt,
    group_advantages,
    grpo_loss,
    hf_chat_tokenizer,
    implicit_rewards,
    lora_modules,
    mean_token_kl,
    merge_lora,
    rename_markers,
    sequence_logprobs,
    sft_batch,
    sft_loss,
    token_logprobs,
)
from companion.models import GPT, ModelConfig, load_llama_state_dict, num_parameters
from companion.tokens import BPETokenizer

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Yo!"},
]


def byte_tokenizer() -> BPETokenizer:
    """A byte-level BPE with no merges (one token per UTF-8 byte, ids 0-255), plus the chat markers 256-259."""
    tok = BPETokenizer()
    tok.train("", 256)  # no merges: the 256 byte tokens only
    add_chat_tokens(tok)
    return tok


def tiny_gpt(vocab: int = 260, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    config = ModelConfig.gpt2_small(vocab_size=vocab, d_model=32, n_heads=4, n_layers=2, d_ff=64, max_seq_len=64,
                                    dropout=0.0)  # fmt: skip
    return GPT(config).eval()


# --- the chat template and the loss mask ------------------------------------------------------------------


def test_chat_template_text() -> None:
    assert chat_template(CHAT) == "<|system|>Be brief.<|end|><|user|>Hi<|end|><|assistant|>Yo!<|end|>"
    assert chat_template(CHAT[:2], add_generation_prompt=True).endswith("<|user|>Hi<|end|><|assistant|>")


def test_chat_tokens_get_the_ids_after_the_vocabulary() -> None:
    tok = byte_tokenizer()
    assert [tok.special_tokens[t] for t in (*ROLE_TOKENS.values(), END)] == [256, 257, 258, 259]
    assert add_chat_tokens(tok) == {"<|system|>": 256, "<|user|>": 257, "<|assistant|>": 258, "<|end|>": 259}
    assert tok.vocab_size == 260  # a second call adds nothing


def test_encoding_equals_the_tokenizer_on_the_rendered_text() -> None:
    tok = BPETokenizer()
    tok.train("the model answers the user; the user asks the model " * 20, 300)
    add_chat_tokens(tok)
    ids, mask = encode_chat(CHAT, tok)
    assert ids == tok.encode(chat_template(CHAT), allowed_special="all")
    assert len(mask) == len(ids)
    prompt = encode_prompt(CHAT[:2], tok)
    assert prompt == tok.encode(chat_template(CHAT[:2], add_generation_prompt=True), allowed_special="all")


def test_the_loss_mask_token_by_token() -> None:
    """Hand-worked with one token per byte. The conversation is 18 tokens:

        <|system|> B e _ b r i e f . <|end|>   1 + 9 + 1 = 11 tokens, none trained
        <|user|> H i <|end|>                    1 + 2 + 1 =  4 tokens, none trained
        <|assistant|> Y o ! <|end|>             1 + 3 + 1 =  5 tokens, the last 4 trained

    so 20 ids, mask True on ids 16..19. The batch has 19 positions; position t is scored on ids[t + 1], so
    positions 15..18 carry loss (4 of 19), with labels Y, o, !, <|end|>.
    """
    tok = byte_tokenizer()
    ids, mask = encode_chat(CHAT, tok)
    assert len(ids) == 20
    assert ids[:1] == [256] and ids[10:12] == [259, 257] and ids[15] == 258 and ids[-1] == 259
    assert mask == [False] * 16 + [True] * 4
    inputs, labels = sft_batch([(ids, mask)], pad_id=259)
    assert inputs.shape == labels.shape == (1, 19)
    assert inputs[0].tolist() == ids[:-1]
    assert labels[0].tolist() == [IGNORE_INDEX] * 15 + [ord("Y"), ord("o"), ord("!"), 259]


def test_two_turns_train_both_replies_and_neither_question() -> None:
    tok = byte_tokenizer()
    chat = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
            {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"}]  # fmt: skip
    ids, mask = encode_chat(chat, tok)
    trained = [tok.decode([i]) for i, m in zip(ids, mask) if m]
    assert trained == ["b", "<|end|>", "d", "<|end|>"]


def test_sft_loss_is_the_masked_cross_entropy_and_padding_changes_nothing() -> None:
    tok = byte_tokenizer()
    model = tiny_gpt()
    long_chat = [{"role": "user", "content": "What is 2 + 2?"}, {"role": "assistant", "content": "4"}]
    examples = [encode_chat(CHAT, tok), encode_chat(long_chat, tok)]
    batch = sft_batch(examples, pad_id=259)
    with torch.no_grad():
        loss = sft_loss(model, batch)
        # by hand: each example alone (no padding), every scored position's -log p, averaged over all of them
        nll, count = 0.0, 0
        for ids, mask in examples:
            logits = model(torch.tensor([ids[:-1]]))[0]  # (T, V)
            for t in range(len(ids) - 1):
                if mask[t + 1]:
                    nll -= F.log_softmax(logits[t], -1)[ids[t + 1]].item()
                    count += 1
        assert_close(loss.item(), nll / count, rtol=1e-5, atol=1e-6)
        other_pad = sft_batch(examples, pad_id=7)
        assert_close(sft_loss(model, other_pad), loss)
        x, y = batch
        assert_close(loss, -token_logprobs(model(x), y).sum() / (y != IGNORE_INDEX).sum())


@pytest.mark.parametrize(
    "messages, error, needle",
    [
        ([{"role": "robot", "content": "beep"}], ValueError, "messages[0]['role']='robot'"),
        ([{"role": "user", "content": "a"}, {"role": "bot", "content": "b"}], ValueError, "messages[1]['role']"),
        ([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}], ValueError, "first"),
        ([{"role": "user"}], TypeError, "'role' and 'content'"),
        ([{"role": "user", "content": 3}], TypeError, "messages[0]['content']"),
        ([], TypeError, "non-empty"),
        ("hello", TypeError, "non-empty list"),
    ],
)  # fmt: skip
def test_bad_messages(messages: object, error: type, needle: str) -> None:
    with pytest.raises(error, match=None) as info:
        encode_chat(messages, byte_tokenizer())  # type: ignore[arg-type]
    assert needle in str(info.value)
    with pytest.raises(error):
        chat_template(messages)  # type: ignore[arg-type]


def test_bad_tokenizers_and_batches() -> None:
    plain = BPETokenizer()
    plain.train("", 256)
    with pytest.raises(ValueError, match="add_chat_tokens"):
        encode_chat(CHAT, plain)
    with pytest.raises(TypeError, match="BPETokenizer"):
        encode_chat(CHAT, object())
    tok = byte_tokenizer()
    example = encode_chat(CHAT, tok)
    with pytest.raises(ValueError, match="examples\\[0\\] has 20 ids, 19 positions; expected at most max_len=10"):
        sft_batch([example], pad_id=0, max_len=10)
    only_user = encode_chat(CHAT[:2], tok)
    with pytest.raises(ValueError, match="no trained token"):
        sft_batch([only_user], pad_id=0)
    with pytest.raises(ValueError, match="mask of 3"):
        sft_batch([(example[0], [True] * 3)], pad_id=0)
    with pytest.raises(ValueError, match="pad_id"):
        sft_batch([example], pad_id=-1)
    with pytest.raises(TypeError, match="pair"):
        sft_loss(tiny_gpt(), torch.zeros(2, 3, dtype=torch.long))


# --- log-probabilities and KL ---------------------------------------------------------------------------------


def test_token_logprobs_are_minus_cross_entropy() -> None:
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, 11, generator=g)
    labels = torch.randint(11, (3, 5), generator=g)
    labels[0, :2] = IGNORE_INDEX
    got = token_logprobs(logits, labels)
    want = -F.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), ignore_index=IGNORE_INDEX,
                            reduction="none").reshape(3, 5)  # fmt: skip
    assert_close(got, want)
    assert (got[0, :2] == 0).all()


def test_sequence_logprobs_is_the_chain_rule_one_token_at_a_time() -> None:
    """log π(response | prompt) summed over a batch's scored positions = Σ log p(token | its prefix), each
    prefix fed alone."""
    tok = byte_tokenizer()
    model = tiny_gpt()
    ids, mask = encode_chat(CHAT, tok)
    batch = sft_batch([(ids, mask)], pad_id=259)
    with torch.no_grad():
        got = sequence_logprobs(model, batch)
        want = sum(F.log_softmax(model(torch.tensor([ids[:t]]))[0, -1], -1)[ids[t]].item()
                   for t in range(1, len(ids)) if mask[t])  # fmt: skip
    assert got.shape == (1,)
    assert_close(got.item(), want, rtol=1e-5, atol=1e-5)


def test_mean_token_kl() -> None:
    g = torch.Generator().manual_seed(1)
    p, q = torch.randn(2, 4, 7, generator=g), torch.randn(2, 4, 7, generator=g)
    labels = torch.zeros(2, 4, dtype=torch.long)
    labels[1, 3] = IGNORE_INDEX
    got = mean_token_kl(p, q, labels)
    per_position = F.kl_div(F.log_softmax(q, -1), F.log_softmax(p, -1), log_target=True, reduction="none").sum(-1)
    assert_close(got, per_position[labels != IGNORE_INDEX].mean())
    assert mean_token_kl(p, p, labels).abs() < 1e-6 and got > 0
    with pytest.raises(ValueError, match="scores no position"):
        mean_token_kl(p, q, torch.full((2, 4), IGNORE_INDEX))
    with pytest.raises(ValueError, match="do not fit"):
        mean_token_kl(p, q[:, :3], labels)


def test_mean_token_kl_where_both_give_a_token_probability_zero() -> None:
    """KL(p ‖ p) = 0 even with -inf logits (a masked vocabulary): 0 · log(0 / 0) is 0, not NaN; its gradient too.
    Where only π_ref gives a token 0 and π does not, the KL is +inf, as it should be."""
    g = torch.Generator().manual_seed(2)
    p = torch.randn(1, 3, 6, generator=g)
    p[..., 4:] = float("-inf")  # two tokens no policy can produce
    q = torch.randn(1, 3, 6, generator=g).masked_fill(p == float("-inf"), float("-inf"))
    labels = torch.zeros(1, 3, dtype=torch.long)
    assert mean_token_kl(p, p, labels) == 0
    finite = mean_token_kl(p[..., :4], q[..., :4], labels)
    leaf = p.clone().requires_grad_(True)
    kl = mean_token_kl(leaf, q, labels)
    kl.backward()
    assert_close(kl, finite)
    assert torch.isfinite(leaf.grad).all()
    assert mean_token_kl(q.masked_fill(q == float("-inf"), 0.0), q, labels) == float("inf")


@pytest.mark.parametrize(
    ("labels", "error", "match"),
    [
        (torch.full((1, 4), IGNORE_INDEX), ValueError, "labels scores no position"),
        (torch.tensor([[1, 2, 260, 3]]), ValueError, "label 260 in labels is out of range; expected 0 <= label < "
                                                     "vocab_size=260"),
        (torch.tensor([[1, -1, 2, 3]]), ValueError, "label -1 in labels is out of range.*or -100"),
        (torch.tensor([[1.0, 2.0, 3.0, 4.0]]), TypeError, "labels must hold integer"),
    ],
)
def test_losses_on_token_labels_name_what_is_wrong(labels: torch.Tensor, error: type, match: str) -> None:
    """sft_loss, token_logprobs and mean_token_kl: no scored position (a NaN loss before), ids outside the
    vocabulary, -1 instead of the ignore index, float labels."""
    model = tiny_gpt()
    inputs = torch.ones(1, 4, dtype=torch.long)
    logits = torch.zeros(1, 4, 260)
    calls = [lambda: sft_loss(model, (inputs, labels.long() if error is ValueError else labels)),
             lambda: mean_token_kl(logits, logits, labels)]  # fmt: skip
    if "no position" not in match:
        calls.append(lambda: token_logprobs(logits, labels))
    for call in calls:
        with pytest.raises(error, match=match):
            call()


# --- LoRA ---------------------------------------------------------------------------------------------------


def test_lora_starts_as_the_pretrained_model_and_trains_only_the_adapters() -> None:
    model = tiny_gpt()
    x = torch.randint(260, (2, 9), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        before = model(x)
    apply_lora(model, r=4, alpha=8, targets=["q_proj", "v_proj"])
    with torch.no_grad():
        assert torch.equal(model(x), before)  # B = 0: ΔW = 0 exactly
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    assert trainable == {f"layers.{i}.self_attn.{proj}.lora_{m}" for i in range(2) for proj in ("q_proj", "v_proj")
                         for m in "AB"}  # fmt: skip
    d = model.config.d_model
    assert num_parameters(model, trainable_only=True) == 2 * 2 * 4 * (d + d)  # layers × targets × r (D_in + D_out)
    # At step 0 only B gets a gradient: dL/dA = scaling · Bᵀ (dL/dy)ᵀ x is zero while B is zero.
    model(x).sum().backward()
    layer = model.layers[0].self_attn.q_proj
    assert isinstance(layer, LoRALinear) and layer.lora_B.grad.abs().sum() > 0
    assert layer.lora_A.grad.abs().sum() == 0
    assert layer.base.weight.grad is None


def _with_random_adapters(model: nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer in lora_modules(model).values():
            layer.lora_B.copy_(0.1 * torch.randn(layer.lora_B.shape, generator=g))


def test_merging_gives_the_same_outputs_and_a_plain_model() -> None:
    model = tiny_gpt()
    apply_lora(model, r=3, alpha=6, targets=["q_proj", "k_proj", "v_proj", "o_proj", "up_proj", "down_proj"])
    _with_random_adapters(model, 3)
    x = torch.randint(260, (2, 9), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        adapted = model(x)
        merge_lora(model)
        assert_close(model(x), adapted, rtol=1e-5, atol=1e-5)
    assert not lora_modules(model)
    reference = tiny_gpt()
    assert set(model.state_dict()) == set(reference.state_dict())  # the architecture it had before
    reference.load_state_dict(model.state_dict())


@pytest.mark.parametrize("rslora", [False, True])
def test_lora_linear_equals_peft_on_the_same_weights(rslora: bool) -> None:
    peft = pytest.importorskip("peft")
    torch.manual_seed(0)
    base = nn.Linear(12, 10)
    holder = nn.Module()
    holder.proj = copy.deepcopy(base)
    holder.forward = lambda x: holder.proj(x)  # type: ignore[method-assign]
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=["proj"], lora_dropout=0.0, use_rslora=rslora)
    theirs = peft.get_peft_model(holder, config)
    ours = LoRALinear(base, r=4, alpha=8, rslora=rslora)
    layer = theirs.base_model.model.proj
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        ours.lora_A.copy_(torch.randn(4, 12, generator=g))
        ours.lora_B.copy_(torch.randn(10, 4, generator=g))
        layer.lora_A["default"].weight.copy_(ours.lora_A)
        layer.lora_B["default"].weight.copy_(ours.lora_B)
    assert layer.scaling["default"] == ours.scaling == (4.0 if rslora else 2.0)  # 8 / √4 or 8 / 4
    x = torch.randn(3, 5, 12, generator=g)
    with torch.no_grad():
        assert_close(ours(x), layer(x))
        assert_close(ours.merged().weight, layer.get_delta_weight("default") + base.weight)


# Hugging Face Llama module names -> ours (the blocks differ in name only)
_HF_TO_OURS = {"model.layers.": "layers.", ".mlp.": ".ffn."}


def test_gpt_with_lora_equals_peft_llama_before_and_after_merging() -> None:
    """A transformers Llama adapted by peft and our GPT with its weights adapted by apply_lora, given the same
    A and B on every attention and FFN projection, give the same logits; merged, too."""
    peft = pytest.importorskip("peft")
    transformers = pytest.importorskip("transformers")
    hf_config = transformers.LlamaConfig(
        vocab_size=97, hidden_size=48, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, rope_theta=10000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=False, bos_token_id=0, eos_token_id=0, pad_token_id=0,
    )  # fmt: skip
    hf_config._attn_implementation = "eager"
    torch.manual_seed(0)
    hf = randomize(transformers.LlamaForCausalLM(hf_config), 0)
    config = ModelConfig.llama(vocab_size=97, d_model=48, d_ff=128, n_layers=2, n_heads=4, n_kv_heads=2,
                               max_seq_len=64, rope_base=10000.0, norm_eps=1e-5, tie_embeddings=False)  # fmt: skip
    ours = load_llama_state_dict(hf.state_dict(), config).eval()
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    theirs = peft.get_peft_model(hf, peft.LoraConfig(r=4, lora_alpha=16, target_modules=targets, lora_dropout=0.0))
    apply_lora(ours, r=4, alpha=16, targets=targets)
    mine = lora_modules(ours)
    g = torch.Generator().manual_seed(5)
    copied = 0
    with torch.no_grad():
        for name, module in theirs.base_model.model.named_modules():
            if hasattr(module, "lora_A") and "default" in getattr(module, "lora_A", {}):
                key = name
                for a, b in _HF_TO_OURS.items():
                    key = key.replace(a, b)
                layer = mine[key]
                module.lora_A["default"].weight.copy_(0.2 * torch.randn(layer.lora_A.shape, generator=g))
                module.lora_B["default"].weight.copy_(0.2 * torch.randn(layer.lora_B.shape, generator=g))
                layer.lora_A.copy_(module.lora_A["default"].weight)
                layer.lora_B.copy_(module.lora_B["default"].weight)
                copied += 1
    assert copied == len(mine) == 2 * len(targets)
    x = torch.randint(97, (2, 10), generator=torch.Generator().manual_seed(6))
    theirs.eval()
    with torch.no_grad():
        assert_close(ours(x), theirs(input_ids=x).logits, rtol=1e-4, atol=1e-5)
        merged_theirs = theirs.merge_and_unload()
        merge_lora(ours)
        assert_close(ours(x), merged_theirs(input_ids=x).logits, rtol=1e-4, atol=1e-5)
        assert_close(ours.layers[1].ffn.down_proj.weight, merged_theirs.model.layers[1].mlp.down_proj.weight)


def test_bad_lora_arguments() -> None:
    model = tiny_gpt()
    for r in (0, -2):
        with pytest.raises(ValueError, match=f"r={r}"):
            apply_lora(model, r=r, alpha=8)
    with pytest.raises(TypeError, match="r must be an int"):
        apply_lora(model, r=2.0, alpha=8)  # type: ignore[arg-type]
    for alpha in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="alpha"):
            apply_lora(model, r=2, alpha=alpha)
    with pytest.raises(ValueError, match="targets entry 'query' matches no nn.Linear of GPT.*'q_proj'"):
        apply_lora(model, r=2, alpha=4, targets=["q_proj", "query"])
    with pytest.raises(TypeError, match="targets"):
        apply_lora(model, r=2, alpha=4, targets="q_proj")
    assert not lora_modules(model)  # a refused call changed nothing
    assert all(p.requires_grad for p in model.parameters())
    apply_lora(model, r=2, alpha=4)
    with pytest.raises(ValueError, match="already has LoRA"):
        apply_lora(model, r=2, alpha=4)
    with pytest.raises(ValueError, match="no LoRA layers"):
        merge_lora(tiny_gpt())
    with pytest.raises(TypeError, match="nn.Linear"):
        LoRALinear(nn.Conv1d(2, 2, 1), r=1, alpha=1)  # type: ignore[arg-type]


# --- DPO -----------------------------------------------------------------------------------------------------


def _logps(seed: int, n: int = 6) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [-20 * torch.rand(n, generator=g) for _ in range(4)]


@pytest.mark.parametrize("beta", [0.05, 0.1, 1.0, 5.0])
def test_dpo_loss_is_the_papers_formula(beta: float) -> None:
    pc, pr, rc, rr = _logps(0)
    want = -torch.log(torch.sigmoid(beta * ((pc - rc) - (pr - rr)))).mean()  # Rafailov et al. 2023, eq. 7
    assert_close(dpo_loss(pc, pr, rc, rr, beta), want)
    chosen, rejected = implicit_rewards(pc, rc, beta), implicit_rewards(pr, rr, beta)
    assert_close(chosen, beta * (pc - rc))
    assert_close(dpo_loss(pc, pr, rc, rr, beta), -F.logsigmoid(chosen - rejected).mean())  # Bradley–Terry on r̂


def test_dpo_loss_is_log_2_when_the_policy_is_the_reference() -> None:
    pc, pr, _, _ = _logps(1)
    assert_close(dpo_loss(pc, pr, pc.clone(), pr.clone(), 0.1), torch.tensor(math.log(2)))


def test_dpo_gradient_is_the_papers_eq_8() -> None:
    """∇ L = −β σ(r̂_l − r̂_w) [∇ log π(y_w) − ∇ log π(y_l)] per pair (mean over the batch)."""
    beta = 0.5
    pc, pr, rc, rr = _logps(2)
    pc.requires_grad_(True)
    pr.requires_grad_(True)
    dpo_loss(pc, pr, rc, rr, beta).backward()
    weight = torch.sigmoid(beta * (pr - rr) - beta * (pc - rc)).detach()  # σ(r̂_l − r̂_w)
    assert_close(pc.grad, -beta * weight / len(pc))
    assert_close(pr.grad, beta * weight / len(pr))


def test_dpo_loss_is_finite_for_large_margins() -> None:
    big = torch.tensor([1e4, -1e4])
    zero = torch.zeros(2)
    loss = dpo_loss(big, zero, zero, zero, 1.0)
    assert torch.isfinite(loss) and math.isclose(loss.item(), 1e4 / 2, rel_tol=1e-6)  # (0 + 1e4) / 2


def test_bad_dpo_inputs() -> None:
    pc, pr, rc, rr = _logps(3)
    with pytest.raises(ValueError, match=r"policy_rejected_logps has shape \(5,\) but policy_chosen_logps has \(6,\)"):
        dpo_loss(pc, pr[:5], rc, rr, 0.1)
    with pytest.raises(ValueError, match="ref_chosen_logps must have 1 dimensions"):
        dpo_loss(pc, pr, rc[None], rr, 0.1)
    nan = rr.clone()
    nan[2] = float("nan")
    with pytest.raises(ValueError, match="ref_rejected_logps contains NaN"):
        dpo_loss(pc, pr, rc, nan, 0.1)
    for beta in (0, -0.1, float("inf")):
        with pytest.raises(ValueError, match="beta"):
            dpo_loss(pc, pr, rc, rr, beta)
    with pytest.raises(TypeError, match="policy_chosen_logps must be a torch.Tensor"):
        dpo_loss([0.0], pr, rc, rr, 0.1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="float log-probabilities"):
        dpo_loss(pc.long(), pr, rc, rr, 0.1)


# --- issue 28: merging a tied head, α with the adapters, dtypes ---------------------------------------------


@pytest.mark.parametrize("family", ["gpt2_small", "llama"])
def test_merging_a_tied_head_unties_it_everywhere(family: str, tmp_path) -> None:
    """An adapted head tied to the token table: after merging, the config says untied, and the state dict into a
    fresh GPT and save_pretrained -> from_pretrained both give the merged logits (the table is left as it was)."""
    torch.manual_seed(0)
    config = getattr(ModelConfig, family)(vocab_size=260, d_model=32, n_heads=4, n_layers=2, d_ff=64,
                                          max_seq_len=64, dropout=0.0, tie_embeddings=True)  # fmt: skip
    model = GPT(config).eval()
    table = model.embed.token.weight.detach().clone()
    apply_lora(model, r=2, alpha=4, targets=["lm_head", "q_proj"])
    _with_random_adapters(model, 5)
    x = torch.randint(260, (2, 7), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        adapted = model(x)
        merge_lora(model)
        merged = model(x)
    assert_close(merged, adapted, rtol=1e-5, atol=1e-5)
    assert model.config.tie_embeddings is False and torch.equal(model.embed.token.weight, table)
    fresh = GPT(model.config).eval()
    fresh.load_state_dict(model.state_dict())
    model.save_pretrained(tmp_path / "merged")
    with torch.no_grad():
        assert_close(fresh(x), merged)
        assert_close(GPT.from_pretrained(tmp_path / "merged")(x), merged, rtol=1e-5, atol=1e-5)


def test_a_tied_layer_without_a_config_is_refused_before_merging() -> None:
    holder = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 4))
    holder[1].weight = holder[0].weight
    apply_lora(holder, r=1, alpha=1, targets=["0", "1"])
    with pytest.raises(ValueError, match="0 shares its weight with another layer .* no config"):
        merge_lora(holder)
    assert len(lora_modules(holder)) == 2  # nothing merged


def test_alpha_is_saved_with_the_adapters() -> None:
    """A state dict of adapters trained with α = 16 brings α back into a model adapted with α = 2."""
    trained = apply_lora(tiny_gpt(), r=2, alpha=16)
    _with_random_adapters(trained, 7)
    other = apply_lora(tiny_gpt(), r=2, alpha=2)
    other.load_state_dict(trained.state_dict())
    layer = other.layers[0].self_attn.q_proj
    assert layer.alpha == 16 and layer.scaling == 8
    x = torch.randint(260, (1, 5), generator=torch.Generator().manual_seed(8))
    with torch.no_grad():
        assert_close(other(x), trained(x))
        assert_close(merge_lora(other)(x), merge_lora(trained)(x))


def test_lora_linear_names_a_dtype_mismatch() -> None:
    layer = LoRALinear(nn.Linear(4, 3), r=2, alpha=2)
    with pytest.raises(TypeError, match="x has dtype torch.float64 but the layer's weights are torch.float32"):
        layer(torch.randn(2, 4, dtype=torch.float64))
    with pytest.raises(TypeError, match="x must be a floating-point tensor, got dtype torch.int64"):
        layer(torch.ones(2, 4, dtype=torch.long))
    assert layer.to(torch.float64)(torch.randn(2, 4, dtype=torch.float64)).dtype == torch.float64


def test_lora_on_the_router_and_kv_up_proj_acts() -> None:
    """The MoE router and MLA's kv_up_proj are called, not read by weight: an adapter on them gets a gradient,
    and merging it gives the outputs of the unmerged model (issue 28, item 4)."""
    torch.manual_seed(0)
    config = ModelConfig.deepseek_v3(vocab_size=64, d_model=32, n_heads=4, n_layers=2, d_ff=48, max_seq_len=16,
                                     kv_rank=12, q_rank=16, rope_head_dim=4, nope_head_dim=8, v_head_dim=6,
                                     n_experts=4, n_experts_per_token=2, d_expert=16, n_dense_layers=1,
                                     router_groups=2, router_group_limit=1)  # fmt: skip
    model = GPT(config).eval()
    apply_lora(model, r=2, alpha=4, targets=["router", "kv_up_proj"])
    _with_random_adapters(model, 9)
    x = torch.randint(64, (2, 8), generator=torch.Generator().manual_seed(10))
    model(x).square().mean().backward()
    adapters = lora_modules(model)
    assert {name.rsplit(".", 1)[-1] for name in adapters} == {"router", "kv_up_proj"}
    for name, layer in adapters.items():
        assert layer.lora_A.grad.abs().sum() > 0 and layer.lora_B.grad.abs().sum() > 0, name
    with torch.no_grad():
        adapted = model(x)
        assert_close(merge_lora(model)(x), adapted, rtol=1e-5, atol=1e-5)


# --- rank-stabilised LoRA -----------------------------------------------------------------------------------


@pytest.mark.parametrize("r", [1, 4, 16])
def test_rslora_scales_by_alpha_over_root_r(r: int) -> None:
    torch.manual_seed(0)
    base = nn.Linear(16, 12)
    plain, rs = LoRALinear(base, r=r, alpha=8), LoRALinear(base, r=r, alpha=8, rslora=True)
    assert plain.scaling == 8 / r and math.isclose(rs.scaling, 8 / math.sqrt(r))
    with torch.no_grad():
        rs.lora_A.copy_(plain.lora_A)
        rs.lora_B.copy_(torch.randn(12, r))
        plain.lora_B.copy_(rs.lora_B)
    x = torch.randn(3, 16)
    with torch.no_grad():  # the updates differ by the ratio of the factors, √r
        assert_close(rs(x) - base(x), (plain(x) - base(x)) * math.sqrt(r))
        assert_close(rs.merged().weight, base.weight + (8 / math.sqrt(r)) * rs.lora_B @ rs.lora_A)
    model = apply_lora(tiny_gpt(), r=r, alpha=8, targets=["q_proj"], rslora=True)
    assert all(m.rslora and math.isclose(m.scaling, 8 / math.sqrt(r)) for m in lora_modules(model).values())
    with pytest.raises(TypeError, match="rslora"):
        apply_lora(tiny_gpt(), r=r, alpha=8, rslora="yes")


# --- GRPO -----------------------------------------------------------------------------------------------------


def test_group_advantages_by_hand() -> None:
    """Group [1, 0, 0, 1]: mean 0.5, sample std √(4 · 0.25 / 3) = 0.5774; group [1, 1, 1, 1]: no spread, 0."""
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0]), group_size=4)
    s = math.sqrt(1 / 3) + 1e-4
    assert_close(adv, torch.tensor([0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, 0.0, 0.0, 0.0, 0.0]))
    with pytest.raises(ValueError, match="group_size=3"):
        group_advantages(torch.ones(8), group_size=3)
    with pytest.raises(ValueError, match="group_size=1"):
        group_advantages(torch.ones(8), group_size=1)


def _grpo_by_hand(logps, old, ref, adv, mask, eps, beta) -> float:
    """DeepSeekMath eq. 3, one token at a time with Python floats; returns −J."""
    total = 0.0
    for i in range(len(adv)):
        terms = []
        for t in range(len(mask[i])):
            if not mask[i][t]:
                continue
            ratio = math.exp(logps[i][t] - old[i][t])
            clipped = min(max(ratio, 1 - eps), 1 + eps)
            q = math.exp(ref[i][t] - logps[i][t])  # π_ref / π_θ
            terms.append(min(ratio * adv[i], clipped * adv[i]) - beta * (q - math.log(q) - 1))
        total += sum(terms) / len(terms)
    return -total / len(adv)


@pytest.mark.parametrize("beta", [0.0, 0.04, 0.5])
def test_grpo_loss_is_the_papers_formula(beta: float) -> None:
    g = torch.Generator().manual_seed(0)
    logps = -torch.rand(4, 6, generator=g) * 3
    old = logps + 0.4 * torch.randn(4, 6, generator=g)  # ratios far enough from 1 to be clipped
    ref = logps + 0.3 * torch.randn(4, 6, generator=g)
    adv = torch.tensor([1.2, -0.7, 0.0, 0.4])
    mask = torch.tensor([[0, 0, 1, 1, 1, 0], [0, 1, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [1, 1, 1, 1, 1, 1]])
    ours = grpo_loss(logps, old, ref, adv, mask, clip_eps=0.2, beta=beta)
    want = _grpo_by_hand(logps.tolist(), old.tolist(), ref.tolist(), adv.tolist(), mask.tolist(), 0.2, beta)
    assert math.isclose(ours.item(), want, rel_tol=1e-5, abs_tol=1e-6)
    ratio = torch.exp(logps - old)[mask.bool()]
    assert ((ratio < 0.8) | (ratio > 1.2)).any()  # the clip was exercised


def test_grpo_gradient_on_fresh_samples() -> None:
    """At π_θ = π_old = π_ref: ρ = 1, the KL and its gradient vanish, and ∂(−J)/∂ log π_i,t = −Â_i / (G |o_i|)."""
    logps = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.3, 0.6, 0.1]])).requires_grad_(True)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv = torch.tensor([0.8, -0.8])
    loss = grpo_loss(logps, logps.detach(), logps.detach().clone(), adv, mask, beta=0.04)
    loss.backward()
    want = torch.tensor([[-0.8 / 4, -0.8 / 4, 0.0], [0.8 / 6, 0.8 / 6, 0.8 / 6]])
    assert_close(logps.grad, want)
    assert math.isclose(loss.item(), 0.0, abs_tol=1e-7)  # Σ Â = 0 and no KL


def test_grpo_kl_term_is_k3_and_never_negative() -> None:
    logps = torch.log(torch.tensor([[0.5, 0.2]]))
    ref = torch.log(torch.tensor([[0.25, 0.4]]))
    zero = torch.zeros(1)
    loss = grpo_loss(logps, logps, ref, zero, torch.ones(1, 2), beta=1.0)
    q = torch.tensor([0.5, 2.0])  # π_ref / π_θ at each token
    assert_close(loss, (q - q.log() - 1).mean())
    assert loss > 0


def test_bad_grpo_inputs() -> None:
    x, m, a = torch.zeros(2, 3), torch.ones(2, 3), torch.zeros(2)
    with pytest.raises(ValueError, match="old_logps has shape"):
        grpo_loss(x, torch.zeros(2, 4), x, a, m)
    with pytest.raises(ValueError, match="advantages has 3 values"):
        grpo_loss(x, x, x, torch.zeros(3), m)
    with pytest.raises(ValueError, match=r"no token in answer\(s\) \[1\]"):
        grpo_loss(x, x, x, a, torch.tensor([[1, 0, 0], [0, 0, 0]]))
    with pytest.raises(ValueError, match="clip_eps=1.5"):
        grpo_loss(x, x, x, a, m, clip_eps=1.5)
    with pytest.raises(ValueError, match="beta=-1"):
        grpo_loss(x, x, x, a, m, beta=-1)
    with pytest.raises(ValueError, match="logps contains NaN"):
        grpo_loss(torch.full((2, 3), float("nan")), x, x, a, m)


# --- real chat templates --------------------------------------------------------------------------------------

TEMPLATE_CHATS = [
    CHAT,
    [{"role": "user", "content": "Translate into English: 我爱NLP"}, {"role": "assistant", "content": "I love NLP"},
     {"role": "user", "content": "And 他们在家看他的书?"}, {"role": "assistant", "content": "They read his book."}],
]


def _masked_spans(ids: list[int], mask: list[int], decode) -> list[str]:
    spans, current = [], []
    for i, m in zip(ids, mask):
        if m:
            current.append(i)
        elif current:
            spans.append(decode(current))
            current = []
    return spans + ([decode(current)] if current else [])


@pytest.mark.parametrize("name", ["chatml", "llama3"])
@pytest.mark.parametrize("chat", TEMPLATE_CHATS)
def test_our_template_and_mask_map_onto_a_real_one(name: str, chat: list[dict[str, str]]) -> None:
    """transformers renders the published layout; ours with its markers renamed is the same text, with and
    without the generation prompt, and the assistant-token masks cover the same spans (content + end marker)."""
    pytest.importorskip("transformers")
    hf = hf_chat_tokenizer(name)
    assert hf.apply_chat_template(chat, tokenize=False) == rename_markers(chat_template(chat), name)
    prompt = chat[:-1]
    assert hf.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True) == \
        rename_markers(chat_template(prompt, add_generation_prompt=True), name)  # fmt: skip
    out = hf.apply_chat_template(chat, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    theirs = _masked_spans(out["input_ids"], out["assistant_masks"], hf.decode)
    tok = byte_tokenizer()
    ids, mask = encode_chat(chat, tok)
    end = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>"}[name]
    ours = [s.replace(END, end) for s in _masked_spans(ids, mask, tok.decode)]
    assert theirs == ours == [m["content"] + end for m in chat if m["role"] == "assistant"]


def test_template_names_are_checked() -> None:
    with pytest.raises(ValueError, match="name='qwen'"):
        rename_markers("<|user|>hi<|end|>", "qwen")
    with pytest.raises(TypeError, match="text must be a str"):
        rename_markers(None, "chatml")

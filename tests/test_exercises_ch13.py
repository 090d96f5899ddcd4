"""Chapter 13 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from companion.exercises.testing import assert_fails, assert_passes
from companion.finetune import IGNORE_INDEX, add_chat_tokens, apply_lora, encode_chat, sft_batch
from companion.models import GPT, ModelConfig, num_parameters
from companion.tokens import BPETokenizer


def labels_ok(ids, mask):
    return [ids[t + 1] if mask[t + 1] else -100 for t in range(len(ids) - 1)]


def test_sft_labels_agree_with_sft_batch_on_a_real_chat() -> None:
    tok = BPETokenizer()
    tok.train("", 256)
    add_chat_tokens(tok)
    ids, mask = encode_chat([{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], tok)
    _, labels = sft_batch([(ids, mask)], pad_id=0)
    assert labels_ok(ids, mask) == labels[0].tolist() and IGNORE_INDEX == -100
    assert_passes("sft_labels", labels_ok)
    assert_passes("sft_labels", lambda ids, mask: torch.tensor(labels_ok(ids, mask)))  # a tensor is fine too


def test_sft_labels_mistakes() -> None:
    n = lambda ids: range(len(ids) - 1)  # noqa: E731
    assert_fails("sft_labels", lambda ids, mask: [ids[t] if mask[t] else -100 for t in n(ids)], "no shift")
    assert_fails("sft_labels", lambda ids, mask: [ids[t + 1] if mask[t] else -100 for t in n(ids)], "not shifted")
    assert_fails("sft_labels", lambda ids, mask: list(ids[1:]), "every position is scored")
    assert_fails("sft_labels", lambda ids, mask: [ids[t + 1] if mask[t + 1] else 0 for t in n(ids)], "use -100")
    assert_fails("sft_labels", lambda ids, mask: [ids[t] if mask[t] else -100 for t in range(len(ids))],
                 "one label per *position*")  # fmt: skip
    assert_fails("sft_labels", lambda ids, mask: "labels", "expected a list")


def test_lora_params_formula_agrees_with_apply_lora() -> None:
    """r · (D_in + D_out) per adapted matrix, as apply_lora counts it on a small model (2 layers, q and v)."""
    torch.manual_seed(0)
    model = GPT(ModelConfig.llama(vocab_size=50, d_model=32, d_ff=64, n_layers=2, n_heads=4, max_seq_len=16))
    apply_lora(model, r=4, alpha=8, targets=["q_proj", "v_proj"])
    assert num_parameters(model, trainable_only=True) == 2 * 2 * 4 * (32 + 32)
    assert_passes("lora_params", 32 * 2 * 8 * (4096 + 4096))
    assert_passes("lora_params", 4_194_304)
    assert_fails("lora_params", 32 * 2 * 8 * 4096, "both A")  # A alone; = one matrix per layer, both A and B
    assert_fails("lora_params", 32 * 2 * 4096 * 4096, "freezes")
    assert_fails("lora_params", 2 * 8 * 8192, "one layer")
    assert_fails("lora_params", 32 * 8 * 8192, "both W_Q and W_V")
    assert_fails("lora_params", 32 * 4 * 8 * 8192, "all four")
    assert_fails("lora_params", 32 * 2 * 64, "not r × r")
    assert_fails("lora_params", 1e9, "too high")


def merge_ok(weight, lora_A, lora_B, alpha, r):
    return weight + (alpha / r) * (lora_B @ lora_A)


def test_lora_merge() -> None:
    assert_passes("lora_merge", merge_ok)
    assert_fails("lora_merge", lambda w, a, b, alpha, r: w + b @ a, "scaled by alpha / r")
    assert_fails("lora_merge", lambda w, a, b, alpha, r: w + (r / alpha) * (b @ a), "not r / alpha")
    assert_fails("lora_merge", lambda w, a, b, alpha, r: w + alpha * (b @ a), "divide by r")
    assert_fails("lora_merge", lambda w, a, b, alpha, r: (alpha / r) * (b @ a), "ΔW alone")
    assert_fails("lora_merge", lambda w, a, b, alpha, r: w + (alpha / r) * (b @ a).T if w.shape[0] == w.shape[1]
                 else merge_ok(w, a, b, alpha, r), "transpose")  # fmt: skip
    assert_fails("lora_merge", lambda w, a, b, alpha, r: w + (alpha / r) * (a.T @ b.T), "transpose")  # square case


def dpo_ok(pc, pr, rc, rr, beta):
    return -F.logsigmoid(beta * ((pc - rc) - (pr - rr))).mean()


def test_dpo_loss_by_hand() -> None:
    assert_passes("dpo_loss_by_hand", dpo_ok)
    assert_fails("dpo_loss_by_hand", lambda pc, pr, rc, rr, b: -F.logsigmoid(b * (pc - pr)).mean(),
                 "reference is missing")  # fmt: skip
    assert_fails("dpo_loss_by_hand", lambda pc, pr, rc, rr, b: -F.logsigmoid(-b * ((pc - rc) - (pr - rr))).mean(),
                 "sign is flipped")  # fmt: skip
    assert_fails("dpo_loss_by_hand", lambda pc, pr, rc, rr, b: -b * F.logsigmoid((pc - rc) - (pr - rr)).mean(),
                 "inside the sigmoid")  # fmt: skip
    assert_fails("dpo_loss_by_hand", lambda pc, pr, rc, rr, b: -F.logsigmoid(b * ((pc - rc) - (pr - rr))).sum(),
                 "not the sum")  # fmt: skip
    assert_fails("dpo_loss_by_hand", lambda pc, pr, rc, rr, b: -dpo_ok(pc, pr, rc, rr, b), "minus log σ")
    assert_fails("dpo_loss_by_hand", lambda pc, pr, rc, rr, b: dpo_ok(pc, pr, rc, rr, 1.0), "β is missing")


def test_dpo_beta() -> None:
    assert_passes("dpo_beta", "b")
    assert_fails("dpo_beta", "a", "log-ratio margin")
    assert_fails("dpo_beta", "c", "computed once")
    assert_fails("dpo_beta", "d", "log 2")

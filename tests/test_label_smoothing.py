"""Label smoothing in companion.training's losses: the formula written out, padding left out, the floor."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from companion.models import GPT, ModelConfig, Transformer
from companion.training import lm_loss, seq2seq_loss

V = 11


def smoothed_by_hand(logits: torch.Tensor, targets: torch.Tensor, eps: float, pad_id: int) -> torch.Tensor:
    """Cross-entropy against (1 - eps) one-hot + eps / V, averaged over the targets that are not padding."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # (N, V)
    q = torch.full_like(logp, eps / logp.size(-1))
    q.scatter_(-1, targets[:, None], 1 - eps + eps / logp.size(-1))
    per_token = -(q * logp).sum(-1)  # (N,)
    real = targets != pad_id
    return per_token[real].sum() / real.sum()


@pytest.mark.parametrize("eps", [0.0, 0.1, 0.3])
def test_seq2seq_loss_with_label_smoothing_is_the_formula(eps: float) -> None:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=V, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=16,
                                    positions="sinusoidal")).eval()
    src = torch.tensor([[3, 4, 5, 2], [6, 2, 0, 0]])
    tgt = torch.tensor([[1, 7, 8, 9, 2], [1, 5, 2, 0, 0]])  # <bos> ... <eos> <pad>
    with torch.no_grad():
        pad = (src != 0)[:, None, None, :]
        logits = model.decode(tgt[:, :-1], model.encode(src, pad), pad)  # (B, T, V)
        expected = smoothed_by_hand(logits.reshape(-1, V), tgt[:, 1:].reshape(-1), eps, pad_id=0)
        torch.testing.assert_close(seq2seq_loss(model, (src, tgt), label_smoothing=eps), expected)


def test_lm_loss_with_label_smoothing_is_the_formula() -> None:
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=V, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=16)).eval()
    batch = torch.tensor([[3, 4, 5, 6, 0, 0], [7, 8, 9, 10, 3, 4]])
    with torch.no_grad():
        logits = model(batch[:, :-1])
        expected = smoothed_by_hand(logits.reshape(-1, V), batch[:, 1:].reshape(-1), 0.2, pad_id=0)
        torch.testing.assert_close(lm_loss(model, batch, pad_id=0, label_smoothing=0.2), expected)


def test_the_smoothed_loss_has_a_floor_at_the_entropy_of_the_smoothed_target() -> None:
    """The best logits give the smoothed target itself: p(correct) = 1 - eps + eps/V, the rest eps/V each, and
    the loss is that distribution's entropy, > 0; a one-hot-confident prediction scores worse."""
    eps, target = 0.1, torch.tensor([3])
    q = torch.full((V,), eps / V)
    q[3] = 1 - eps + eps / V
    entropy = float(-(q * q.log()).sum())
    at_floor = F.cross_entropy(q.log()[None], target, label_smoothing=eps)
    confident = F.cross_entropy((20 * F.one_hot(target, V)).float(), target, label_smoothing=eps)
    assert math.isclose(float(at_floor), entropy, rel_tol=1e-5)
    assert float(confident) > entropy + 0.5


@pytest.mark.parametrize("eps", [-0.1, 1.0, "0.1"])
def test_bad_label_smoothing_is_rejected(eps) -> None:
    torch.manual_seed(0)
    model = GPT(ModelConfig(vocab_size=V, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=16))
    with pytest.raises((ValueError, TypeError), match="label_smoothing"):
        lm_loss(model, torch.tensor([[1, 2, 3]]), label_smoothing=eps)

"""GPT.forward(position_ids=...): left-padded batches keep each real token at its own position.

A left-padded row read with the default positions puts its first real token at position ``n_pad``;
with learned or sinusoidal positions that changes its logits. Positions derived from the padding mask
(``padding.cumsum(-1) - 1``) give each row exactly the logits it has alone, in one pass and through a
KV cache. RoPE is shift-invariant, so it needs no position ids (and rejects them).
"""

from __future__ import annotations

import pytest
import torch

from companion.models import GPT, ModelConfig

PAD = 0


def tiny(positions: str) -> GPT:
    torch.manual_seed(0)
    config = ModelConfig(
        vocab_size=32, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_seq_len=16, positions=positions, dropout=0.0
    )
    return GPT(config).eval()


def left_padded() -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    rows = [torch.tensor([5, 6, 7, 8, 9]), torch.tensor([11, 12])]
    width = max(len(r) for r in rows)
    ids = torch.stack([torch.cat([torch.full((width - len(r),), PAD), r]) for r in rows])  # (B, T)
    real = ids != PAD  # (B, T): True = real token
    return ids, real, rows


@pytest.mark.parametrize("positions", ["learned", "sinusoidal"])
def test_positions_from_the_mask_give_each_row_its_own_logits(positions):
    model = tiny(positions)
    ids, real, rows = left_padded()
    position_ids = (real.long().cumsum(-1) - 1).clamp(min=0)  # (B, T): 0 at each row's first real token
    with torch.no_grad():
        fixed = model(ids, padding_mask=real[:, None, None, :], position_ids=position_ids)
        naive = model(ids, padding_mask=real[:, None, None, :])
        alone = model(rows[1][None])
    torch.testing.assert_close(fixed[1, -2:], alone[0], atol=1e-5, rtol=1e-5)
    assert (naive[1, -1] - alone[0, -1]).abs().max() > 1e-3  # the pitfall: shifted positions


def test_default_positions_are_arange():
    model = tiny("learned")
    ids = torch.tensor([[3, 4, 5, 6]])
    with torch.no_grad():
        torch.testing.assert_close(model(ids), model(ids, position_ids=torch.arange(4)[None]))


def test_position_ids_with_a_cache_match_one_pass():
    model = tiny("learned")
    ids, real, _ = left_padded()
    position_ids = (real.long().cumsum(-1) - 1).clamp(min=0)
    pad = real[:, None, None, :]
    with torch.no_grad():
        full = model(ids, padding_mask=pad, position_ids=position_ids)
        caches = model.new_kv_caches()
        first = model(ids[:, :3], caches, padding_mask=pad[..., :3], position_ids=position_ids[:, :3])
        rest = model(ids[:, 3:], caches, padding_mask=pad, position_ids=position_ids[:, 3:])
    torch.testing.assert_close(torch.cat([first, rest], 1)[real], full[real], atol=1e-5, rtol=1e-5)


def test_rope_is_shift_invariant_and_rejects_position_ids():
    model = tiny("rope")
    ids, real, rows = left_padded()
    with torch.no_grad():
        padded = model(ids, padding_mask=real[:, None, None, :])
        alone = model(rows[1][None])
    torch.testing.assert_close(padded[1, -2:], alone[0], atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="position_ids"):
        model(ids, position_ids=torch.zeros_like(ids))


@pytest.mark.parametrize(
    "bad",
    [torch.zeros(1, 3, dtype=torch.long), torch.zeros(2, 5), torch.full((2, 5), 16), torch.full((2, 5), -1)],
)
def test_bad_position_ids_are_rejected(bad):
    model = tiny("learned")
    ids, _, _ = left_padded()
    with pytest.raises(ValueError, match="position_ids"):
        model(ids, position_ids=bad)

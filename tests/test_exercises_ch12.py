"""Chapter 12 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import torch

from companion.exercises.testing import assert_fails, assert_passes
from companion.models import ModelConfig, ViT, mask_tokens, num_parameters, patchify


def patchify_ok(images, p):
    b, c, h, w = images.shape
    x = images.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(b, -1, c * p * p)


def test_patchify() -> None:
    assert_passes("patchify", patchify_ok)
    assert_passes("patchify", patchify)
    unfold = lambda x, p: x.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(x.size(0), -1, x.size(1) * p * p)  # noqa: E501, E731
    assert_passes("patchify", unfold)
    assert_fails("patchify", lambda x, p: x.reshape(x.size(0), -1, x.size(1) * p * p), "without permuting")

    def channel_last(x, p):
        b, c, h, w = x.shape
        return x.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 3, 5, 1).reshape(b, -1, c * p * p)

    def by_columns(x, p):
        b, c, h, w = x.shape
        return x.reshape(b, c, h // p, p, w // p, p).permute(0, 4, 2, 1, 3, 5).reshape(b, -1, c * p * p)

    assert_fails("patchify", channel_last, "channel last")
    assert_fails("patchify", by_columns, "column by column")
    assert_fails("patchify", lambda x, p: patchify_ok(x, p).transpose(1, 2), "shape")


def test_vit_b16_parameters() -> None:
    with torch.device("meta"):
        right = num_parameters(ViT(ModelConfig.vit(), num_labels=1000))
    assert right == 86_567_656
    assert "your answer is right" in assert_passes("vit_b16_parameters", right)
    for rounded in (86.6e6, 86_500_000):  # the paper's rounding, and a near miss: close, and the exact count given
        assert "close; the exact count is 86,567,656" in assert_passes("vit_b16_parameters", rounded)
    assert_fails("vit_b16_parameters", right - 769_000, "classification head")
    assert_fails("vit_b16_parameters", right - 198 * 768, "[CLS] vector")
    assert_fails("vit_b16_parameters", right - 16 * 16 * 2 * 768, "three colour channels")
    assert_fails("vit_b16_parameters", 85_054_464, "only the 12 encoder layers")
    assert_fails("vit_b16_parameters", 109_482_240, "BERT-base")
    assert_fails("vit_b16_parameters", 124_439_808, "GPT-2 small")
    assert_fails("vit_b16_parameters", 70e6, "too low")


def masking_ok(ids, mask_id, vocab_size, generator=None, special_ids=()):
    chosen = torch.rand(ids.shape, generator=generator) < 0.15
    for s in special_ids:
        chosen &= ids != s
    action = torch.rand(ids.shape, generator=generator)
    random_ids = torch.randint(vocab_size, ids.shape, generator=generator)
    inputs = torch.where(chosen & (action < 0.8), mask_id, ids)
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)
    return inputs, torch.where(chosen, ids, -100)


def test_mask_tokens_and_the_package_pass() -> None:
    assert_passes("mask_tokens_80_10_10", masking_ok)
    assert_passes("mask_tokens_80_10_10", mask_tokens)  # the package's own recipe


def test_mask_tokens_mistakes() -> None:
    def all_masked(ids, mask_id, vocab_size, generator=None, special_ids=()):
        chosen = torch.rand(ids.shape, generator=generator) < 0.15
        for s in special_ids:
            chosen &= ids != s
        return torch.where(chosen, mask_id, ids), torch.where(chosen, ids, -100)

    def labels_everywhere(ids, mask_id, vocab_size, generator=None, special_ids=()):
        inputs, _ = masking_ok(ids, mask_id, vocab_size, generator, special_ids)
        return inputs, ids.clone()

    def specials_too(ids, mask_id, vocab_size, generator=None, special_ids=()):
        return masking_ok(ids, mask_id, vocab_size, generator, ())

    def labels_only_masked(ids, mask_id, vocab_size, generator=None, special_ids=()):
        inputs, labels = masking_ok(ids, mask_id, vocab_size, generator, special_ids)
        return inputs, torch.where(inputs == mask_id, labels, -100)

    def one_draw(ids, mask_id, vocab_size, generator=None, special_ids=()):  # no token is kept unchanged
        u = torch.rand(ids.shape, generator=generator)
        chosen = u < 0.15
        for s in special_ids:
            chosen &= ids != s
        random_ids = torch.randint(vocab_size, ids.shape, generator=generator)
        inputs = torch.where(chosen & (u < 0.12), mask_id, torch.where(chosen, random_ids, ids))
        return inputs, torch.where(chosen, ids, -100)

    assert_fails("mask_tokens_80_10_10", all_masked, "80 %")
    assert_fails("mask_tokens_80_10_10", labels_everywhere, "-100")
    assert_fails("mask_tokens_80_10_10", specials_too, "[CLS] and [PAD] are never chosen")
    assert_fails("mask_tokens_80_10_10", labels_only_masked, "12 %")
    assert_fails("mask_tokens_80_10_10", one_draw, "none of the chosen tokens stays unchanged")
    assert_fails("mask_tokens_80_10_10", lambda ids, *a, **k: ids, "pair")


def test_mean_pool() -> None:
    def ok(h, mask):
        keep = mask.unsqueeze(-1).float()
        return (h * keep).sum(1) / keep.sum(1)

    assert_passes("mean_pool", ok)
    assert_fails("mean_pool", lambda h, mask: h.mean(1), "padding positions")
    assert_fails("mean_pool", lambda h, mask: (h * mask.unsqueeze(-1)).sum(1) / h.size(1), "padded length")
    assert_fails("mean_pool", lambda h, mask: h[:, 0], "[CLS] pooling")
    assert_fails("mean_pool", lambda h, mask: (h * mask.unsqueeze(-1)).sum(1), "without dividing")


def test_family_for_tagging() -> None:
    assert_passes("family_for_tagging", "b")
    assert_fails("family_for_tagging", "a", "0..i")
    assert_fails("family_for_tagging", "c", "aligned")
    assert_fails("family_for_tagging", "d", "image patches")
    assert_fails("family_for_tagging", "e", "not one of the choices")

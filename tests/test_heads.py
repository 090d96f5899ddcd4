"""The task heads (SequenceClassifier, TokenClassifier on the encoder; LastTokenClassifier on a GPT), pooling, losses.

Identities rather than numbers: [CLS] pooling reads position 0, mean pooling ignores padding (so padding a
sequence changes nothing), ``from_encoder`` carries the pretrained body over exactly, ``mlm_loss`` equals the
cross-entropy of the full MLM logits, and a classifier learns a task that needs attention across tokens.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from companion.masks import padding_mask
from companion.models import (
    GPT,
    Encoder,
    LastTokenClassifier,
    ModelConfig,
    SequenceClassifier,
    TokenClassifier,
    mask_tokens,
    pool,
)
from companion.training import TrainConfig, classification_loss, mlm_loss, train

PAD = 0


def tiny(**changes) -> ModelConfig:
    base = dict(vocab_size=20, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_seq_len=12, dropout=0.0)
    return ModelConfig.bert_base(**{**base, **changes})


def test_pool_by_hand() -> None:
    h = torch.arange(24.0).reshape(2, 3, 4)  # (B, S, D)
    real = torch.tensor([[True, True, True], [True, False, False]])
    assert torch.equal(pool(h, "cls"), h[:, 0])
    assert_close(pool(h, "mean"), h.mean(1))
    assert_close(pool(h, "mean", real), torch.stack([h[0].mean(0), h[1, 0]]))
    assert_close(pool(h, "mean", real[:, None, None, :]), pool(h, "mean", real))  # (B, 1, 1, S) masks too
    with pytest.raises(ValueError, match="pooling='max' is not supported; expected one of 'cls', 'mean'"):
        pool(h, "max")


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_padding_changes_no_prediction(pooling: str) -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(tiny(), num_labels=3, pooling=pooling).eval()
    tagger = TokenClassifier(tiny(), num_labels=4).eval()
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    padded = torch.tensor([[1, 5, 6, 7, 8, PAD, PAD, PAD]])
    with torch.no_grad():
        assert_close(model(ids), model(padded, padding_mask(padded, PAD)))
        assert_close(tagger(ids), tagger(padded, padding_mask(padded, PAD))[:, :5])


def test_mean_pooling_differs_from_cls() -> None:
    torch.manual_seed(0)
    cls_model = SequenceClassifier(tiny(), 3, pooling="cls").eval()
    mean_model = SequenceClassifier(tiny(), 3, pooling="mean").eval()
    mean_model.load_state_dict(cls_model.state_dict())  # same weights, different pooling
    ids = torch.tensor([[1, 5, 6, 7, 8]])
    with torch.no_grad():
        h = cls_model.encoder.hidden_states(ids)
        assert_close(mean_model(ids), mean_model.classifier(torch.tanh(mean_model.pooler(h.mean(1)))))
        assert not torch.allclose(cls_model(ids), mean_model(ids))


def test_from_encoder_carries_the_body_and_leaves_the_mlm_head() -> None:
    torch.manual_seed(0)
    pretrained = Encoder(tiny(type_vocab_size=2)).eval()
    ids = torch.randint(1, 20, (2, 6))
    heads = SequenceClassifier.from_encoder(pretrained, 4, pooling="mean"), TokenClassifier.from_encoder(pretrained, 3)
    for head in heads:
        assert not head.encoder.has_mlm_head
        assert not any(name.startswith(("encoder.mlm", "encoder.lm_head")) for name, _ in head.named_parameters())
        with torch.no_grad():
            assert_close(head.encoder.hidden_states(ids), pretrained.hidden_states(ids))
        assert head.encoder.embed.token.weight is not pretrained.embed.token.weight  # a copy: fine-tuning is separate
    dropped = Encoder(tiny(type_vocab_size=2, dropout=0.1))
    SequenceClassifier.from_encoder(dropped, 2)  # dropout may differ
    with pytest.raises(ValueError, match="config differs from the head's in d_model=32 vs 16"):
        head = SequenceClassifier(tiny(), 2)
        from companion.models.heads import _copy_body

        _copy_body(head.encoder, Encoder(tiny(d_model=32)))
    with pytest.raises(TypeError, match="encoder must be a companion.models.Encoder, got Linear"):
        SequenceClassifier.from_encoder(torch.nn.Linear(2, 2), 2)


def test_bad_heads_are_refused() -> None:
    with pytest.raises(ValueError, match="num_labels=1 is invalid; expected at least 2"):
        SequenceClassifier(tiny(), 1)
    with pytest.raises(ValueError, match="num_labels=0 is invalid"):
        TokenClassifier(tiny(), 0)
    with pytest.raises(TypeError, match="num_labels must be an int, got 2.0"):
        TokenClassifier(tiny(), 2.0)
    with pytest.raises(ValueError, match="pooling='first' is not supported"):
        SequenceClassifier(tiny(), 2, pooling="first")
    with pytest.raises(ValueError, match="mlm_head=False and has no MLM head"):
        Encoder(tiny(), mlm_head=False)(torch.tensor([[1, 2]]))


def test_classification_loss_checks_the_labels() -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(tiny(), 3)
    ids = torch.randint(1, 20, (4, 6))
    labels = torch.tensor([0, 2, 1, 2])
    expected = F.cross_entropy(model(ids), labels)
    assert_close(classification_loss(model, (ids, labels)), expected)
    with pytest.raises(ValueError, match="label 3 in labels is out of range; expected 0 <= label < num_labels=3"):
        classification_loss(model, (ids, torch.tensor([0, 3, 1, 2])))
    with pytest.raises(ValueError, match="label -1 in labels is out of range"):
        classification_loss(model, (ids, torch.tensor([0, -1, 1, 2])))
    with pytest.raises(TypeError, match="integer class labels"):
        classification_loss(model, (ids, labels.float()))
    with pytest.raises(ValueError, match="labels has shape \\(3,\\); expected \\(4,\\)"):
        classification_loss(model, (ids, labels[:3]))
    with pytest.raises(TypeError, match="batch must be \\(inputs, labels\\)"):
        classification_loss(model, ids)
    tagger = TokenClassifier(tiny(), 4)
    tags = torch.randint(0, 4, (4, 6))
    tags[:, 4:] = -100  # not scored
    mask = padding_mask(ids, PAD)
    expected = F.cross_entropy(tagger(ids, mask)[:, :4].reshape(-1, 4), tags[:, :4].reshape(-1))
    assert_close(classification_loss(tagger, (ids, tags, mask)), expected)


def test_classification_loss_passes_the_token_types_of_a_pair() -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(tiny(type_vocab_size=2), 2)
    ids, labels = torch.randint(1, 20, (4, 6)), torch.tensor([0, 1, 1, 0])
    types = torch.tensor([[0, 0, 0, 1, 1, 1]] * 4)  # segment A, then segment B
    mask = padding_mask(ids, PAD)
    expected = F.cross_entropy(model(ids, mask, types), labels)
    assert_close(classification_loss(model, (ids, labels, mask, types)), expected)
    assert not torch.equal(model(ids, mask), model(ids, mask, types))  # the types reach the model
    with pytest.raises(TypeError, match="of length 4"):
        mlm_loss(Encoder(tiny()), (ids, labels, mask, types))  # only a classifier takes token types


def test_mlm_loss_scores_only_the_chosen_tokens() -> None:
    torch.manual_seed(0)
    model = Encoder(tiny())
    ids = torch.randint(3, 20, (4, 12))
    inputs, labels = mask_tokens(ids, mask_id=2, vocab_size=20, generator=torch.Generator().manual_seed(0))
    full = F.cross_entropy(model(inputs).reshape(-1, 20), labels.reshape(-1))  # -100 ignored
    assert_close(mlm_loss(model, (inputs, labels)), full)
    with pytest.raises(ValueError, match="labels scores no position"):
        mlm_loss(model, (inputs, torch.full_like(labels, -100)))
    with pytest.raises(ValueError, match="labels has shape"):
        mlm_loss(model, (inputs, labels[:, :5]))


def test_a_classifier_learns_a_task_that_needs_attention() -> None:
    """Label = whether token 3 occurs anywhere after position 0: [CLS]'s vector must gather it by attention."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(4, 20, (256, 8), generator=g)
    has = torch.rand(256, generator=g) < 0.5
    where = torch.randint(1, 8, (256,), generator=g)
    ids[has, where[has]] = 3
    ids[:, 0] = 1  # [CLS]
    labels = has.long()
    torch.manual_seed(0)
    model = SequenceClassifier(tiny(), 2, pooling="cls")
    config = TrainConfig(steps=120, lr=3e-3, warmup_steps=10)
    train(model, lambda step: (ids[(step * 32) % 256:][:32], labels[(step * 32) % 256:][:32]), classification_loss,
          config, progress=False)  # fmt: skip
    with torch.no_grad():
        accuracy = (model(ids).argmax(-1) == labels).float().mean().item()
    assert accuracy > 0.95


# --- issue 28: masks as the encoder takes them, rows with nothing to classify ------------------------------------


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_an_additive_padding_mask_classifies_as_the_boolean_one(pooling: str) -> None:
    """The encoder takes 0 / -inf masks as well as booleans; the pooling must read them the same way (mean
    pooling multiplied the vectors by -inf: every logit NaN)."""
    torch.manual_seed(0)
    model = SequenceClassifier(tiny(), 3, pooling=pooling).eval()
    ids = torch.tensor([[5, 6, 7, PAD, PAD], [8, 9, 10, 11, 12]])
    mask = padding_mask(ids, PAD)  # (B, 1, 1, S) bool
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    with torch.no_grad():
        assert_close(model(ids, additive), model(ids, mask))
    assert_close(pool(torch.ones(2, 5, 4), "mean", additive), torch.ones(2, 4))


def test_an_all_padding_row_is_refused() -> None:
    torch.manual_seed(0)
    model = SequenceClassifier(tiny(), 3, pooling="mean").eval()
    ids = torch.tensor([[5, 6, 7], [PAD, PAD, PAD]])
    with pytest.raises(ValueError, match="padding_mask hides every token of row 1"):
        model(ids, padding_mask(ids, PAD))
    with pytest.raises(ValueError, match=r"padding_mask has shape \(2, 4\); expected"):
        pool(torch.ones(2, 3, 4), "mean", torch.ones(2, 4, dtype=torch.bool))


def _tiny_gpt() -> GPT:
    torch.manual_seed(0)
    return GPT(ModelConfig(vocab_size=20, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_seq_len=12, dropout=0.0))


def test_gpt_hidden_states_are_the_logits_before_the_head() -> None:
    gpt = _tiny_gpt().eval()
    ids = torch.randint(0, 20, (3, 7))
    torch.testing.assert_close(gpt.lm_head(gpt.hidden_states(ids)), gpt(ids))


def test_last_token_classifier_reads_the_last_real_token() -> None:
    """The logits are the linear layer on the hidden vector of the token before the first pad."""
    gpt = _tiny_gpt()
    model = LastTokenClassifier.from_decoder(gpt, num_labels=3).eval()
    ids = torch.tensor([[1, 2, 3, 4, 0, 0], [5, 6, 7, 8, 9, 10]])
    real = ids != 0
    real[1] = True  # the second row has no padding
    with torch.no_grad():
        h = gpt.hidden_states(ids)  # the copied decoder gives the same vectors
        expected = model.classifier(torch.stack([h[0, 3], h[1, 5]]))
        torch.testing.assert_close(model(ids, real), expected)
        torch.testing.assert_close(model(ids[1:]), expected[1:])  # no mask: the last position


def test_last_token_classifier_ignores_padding_and_what_follows() -> None:
    model = LastTokenClassifier(_tiny_gpt().config, num_labels=2).eval()
    ids = torch.tensor([[3, 4, 5, 0, 0, 0]])
    other = torch.tensor([[3, 4, 5, 7, 8, 9]])  # other tokens where the first row has padding
    with torch.no_grad():
        a = model(ids, padding_mask(ids, 0))
        b = model(other, torch.tensor([[True, True, True, False, False, False]]))
        c = model(ids[:, :3])
    torch.testing.assert_close(a, b)
    torch.testing.assert_close(a, c)


def test_last_token_classifier_trains_with_classification_loss() -> None:
    model = LastTokenClassifier(_tiny_gpt().config, num_labels=2)
    ids = torch.tensor([[1, 2, 3, 0], [4, 5, 0, 0]])
    loss = classification_loss(model, (ids, torch.tensor([0, 1]), padding_mask(ids, 0)))
    loss.backward()
    assert loss.ndim == 0 and model.classifier.weight.grad is not None


def test_bad_last_token_classifiers_are_refused() -> None:
    model = LastTokenClassifier(_tiny_gpt().config, num_labels=2)
    ids = torch.tensor([[0, 1, 2, 3]])
    with pytest.raises(ValueError, match="right padding"):
        model(ids, torch.tensor([[False, True, True, True]]))  # left padding
    with pytest.raises(ValueError, match="right padding"):
        model(ids, torch.tensor([[True, False, True, True]]))  # a hole
    with pytest.raises(ValueError, match="token_type_ids"):
        model(ids, None, torch.zeros_like(ids))
    with pytest.raises(TypeError, match="GPT"):
        LastTokenClassifier.from_decoder(Encoder(tiny()), 2)
    with pytest.raises(ValueError):
        LastTokenClassifier(_tiny_gpt().config, num_labels=1)

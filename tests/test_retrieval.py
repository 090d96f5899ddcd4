"""Retrieval with an encoder (companion.models.retrieval) and entity-level tagging scores (heads.span_scores).

Identities and hand-worked examples: the InfoNCE loss equals its formula written out with exp and log and
the cross-entropy of the similarity matrix; perfectly aligned pairs at a low temperature cost almost nothing;
padding changes no embedding; recall@k and span scores are counted by hand in the docstrings.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

from companion.masks import padding_mask
from companion.models import Encoder, ModelConfig, embed, info_nce_loss, recall_at_k, span_scores, tag_spans

PAD = 0


def tiny_encoder() -> Encoder:
    torch.manual_seed(0)
    cfg = dict(vocab_size=20, d_model=16, n_heads=2, n_layers=2, d_ff=32, max_seq_len=12, dropout=0.0)
    return Encoder(ModelConfig.bert_base(**cfg)).eval()


def test_info_nce_equals_its_formula_written_out() -> None:
    torch.manual_seed(0)
    q, k, tau = torch.randn(5, 8), torch.randn(5, 8), 0.1
    qn, kn = q / q.norm(dim=1, keepdim=True), k / k.norm(dim=1, keepdim=True)
    by_hand = 0.0
    for i in range(5):
        sims = [float(qn[i] @ kn[j]) / tau for j in range(5)]
        by_hand -= math.log(math.exp(sims[i]) / sum(math.exp(s) for s in sims)) / 5
    assert_close(info_nce_loss(q, k, tau).item(), by_hand, rtol=1e-5, atol=1e-6)
    matrix = F.normalize(q, dim=1) @ F.normalize(k, dim=1).T / tau  # (B, B)
    assert_close(info_nce_loss(q, k, tau), F.cross_entropy(matrix, torch.arange(5)))


def test_info_nce_rewards_aligned_pairs_and_ignores_length() -> None:
    torch.manual_seed(1)
    q = torch.randn(4, 6)
    assert info_nce_loss(q, 3 * q, 0.01) < 1e-3  # each key points where its query does; scale is ignored
    assert info_nce_loss(q, q.roll(1, dims=0), 0.01) > 1.0  # each query's key is another query's
    at_chance = info_nce_loss(torch.ones(4, 6), torch.ones(4, 6), 1.0)  # all keys alike: log B
    assert_close(at_chance.item(), math.log(4))


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: info_nce_loss(torch.ones(3, 4), torch.ones(3, 5)), ValueError, "keys has"),
        (lambda: info_nce_loss(torch.ones(1, 4), torch.ones(1, 4)), ValueError, "at least 2"),
        (lambda: info_nce_loss(torch.ones(3, 4), torch.ones(3, 4), 0.0), ValueError, "temperature=0.0"),
        (lambda: info_nce_loss(torch.ones(3), torch.ones(3)), ValueError, "queries must have 2 dimensions"),
        (lambda: embed(torch.nn.Linear(2, 2), torch.ones(1, 2, dtype=torch.long)), TypeError, "Linear"),
        (lambda: recall_at_k(torch.ones(2, 3), torch.tensor([0, 3]), 1), ValueError, r"\[0, 3\)"),
        (lambda: recall_at_k(torch.ones(2, 3), torch.tensor([0]), 1), ValueError, "one per query, 2"),
        (lambda: recall_at_k(torch.ones(2, 3), torch.tensor([0, 1]), 0), ValueError, "k=0"),
        (lambda: span_scores(torch.zeros(2, 3), torch.zeros(2, 4)), ValueError, "gold has"),
        (lambda: tag_spans(torch.zeros(2, 3)), TypeError, "integer tag ids"),
    ],
)
def test_bad_input_is_refused(call, error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


def test_embeddings_are_unit_mean_pooled_vectors_that_padding_does_not_change() -> None:
    encoder = tiny_encoder()
    short = torch.tensor([[3, 4, 5]])
    padded = torch.tensor([[3, 4, 5, PAD, PAD]])
    with torch.no_grad():
        a = embed(encoder, short, padding_mask(short, PAD))
        b = embed(encoder, padded, padding_mask(padded, PAD))
        raw = embed(encoder, short, normalize=False)
        mean_of_states = encoder.hidden_states(short).mean(1)  # (1, D)
    assert_close(a, b)
    assert_close(a.norm(dim=1), torch.ones(1))
    assert_close(raw, mean_of_states)


def test_recall_at_k_by_hand() -> None:
    """Query 0: its document (2) scores 0.9, best of all: a hit at k = 1. Query 1: its document (0) scores
    0.5, behind 0.7: a hit only at k = 2. Query 2: every score is 0, a tie that counts against it, so it is
    found only at k = 3 (all documents)."""
    scores = torch.tensor([[0.1, 0.2, 0.9], [0.5, 0.7, 0.1], [0.0, 0.0, 0.0]])
    targets = torch.tensor([2, 0, 1])
    assert [recall_at_k(scores, targets, k) for k in (1, 2, 3)] == [1 / 3, 2 / 3, 1.0]


def test_tag_spans_and_span_scores_by_hand() -> None:
    """Gold [0, 2, 2, 0, 3, 1] holds three entities: tag 2 at 1-3, tag 3 at 4-5, tag 1 at 5-6. The prediction
    [0, 2, 0, 0, 3, 1] cuts the first one short (no credit), finds the other two and invents the span 1-2:
    precision 2/3, recall 2/3. Per-token accuracy is 5/6: span scores are stricter."""
    gold = torch.tensor([[0, 2, 2, 0, 3, 1]])
    predicted = torch.tensor([[0, 2, 0, 0, 3, 1]])
    assert tag_spans(gold) == {(0, 1, 3, 2), (0, 4, 5, 3), (0, 5, 6, 1)}
    scores = span_scores(predicted, gold)
    assert_close(scores["precision"], 2 / 3)
    assert_close(scores["recall"], 2 / 3)
    assert_close(scores["f1"], 2 / 3)
    assert span_scores(predicted, gold, tag=2) == {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    assert span_scores(gold, gold)["f1"] == 1.0


def test_unscored_positions_split_spans_and_are_ignored() -> None:
    gold = torch.tensor([[-100, 2, 2, -100, -100], [-100, 2, -100, 2, 2]])
    predicted = torch.tensor([[1, 2, 2, 2, 2], [0, 2, 2, 2, 2]])  # tags at -100 positions do not count
    assert tag_spans(gold) == {(0, 1, 3, 2), (1, 1, 2, 2), (1, 3, 5, 2)}
    assert span_scores(predicted, gold)["f1"] == 1.0

"""Task heads on the encoder: ``SequenceClassifier`` (one label per sequence) and ``TokenClassifier`` (one per token).

BERT's fine-tuning recipe (Devlin et al. 2019, §3.2 and Figure 4): keep the pretrained encoder, add one small
layer for the task, and train everything on the labelled examples.

- Sequence classification (sentiment, topic, "which chapter?"): pool the S hidden vectors into one, then
  BERT's pooler (dense + tanh) and a linear layer to ``num_labels`` logits. ``pooling="cls"`` takes the vector
  of the first token, [CLS], as BERT does; ``pooling="mean"`` averages the vectors of the real tokens
  (padding left out), as Sentence-BERT does (Reimers & Gurevych 2019).
- Token classification (named entities, tags): a linear layer on every hidden vector; no pooling.
  ``span_scores`` scores its tags the way named-entity recognition is scored (CoNLL-2003, Tjong Kim Sang &
  De Meulder 2003): an entity counts only if its whole span and its tag are right.

- Sequence classification with a decoder (GPT-1's fine-tuning, Radford et al. 2018, §3.2): a causal model's
  position t has read tokens 0..t only, so the vector of the *last real token* stands for the text, and a
  linear layer on it gives the logits (``LastTokenClassifier``, as ``transformers``' ``GPT2ForSequenceClassification``
  reads the last token that is not padding).

``from_encoder`` starts a head's encoder from a pretrained ``Encoder`` (its masked-LM head is left behind,
as ``transformers`` drops ``cls.predictions`` when it builds a classifier from a BERT checkpoint).
Checked against ``BertForSequenceClassification`` / ``BertForTokenClassification`` from random weights
(tests/test_bert.py). The loss with its label checks is ``companion.training.classification_loss``.
"""

from __future__ import annotations

import dataclasses

import torch
from torch import Tensor, nn

from companion._checks import check_choice, check_num_labels, check_tensor
from companion.models.blocks import init_weights
from companion.models.config import ModelConfig
from companion.models.encoder import Encoder
from companion.models.gpt import GPT

__all__ = ["POOLINGS", "LastTokenClassifier", "SequenceClassifier", "TokenClassifier", "pool", "span_scores",
           "tag_spans"]

POOLINGS = ("cls", "mean")  # how a SequenceClassifier turns S vectors into one


def pool(h: Tensor, pooling: str = "cls", padding_mask: Tensor | None = None) -> Tensor:
    """One vector per sequence: the first token's (``"cls"``) or the mean over real tokens (``"mean"``).

    ``padding_mask`` (B, 1, 1, S) or (B, S): boolean, True = a real token, or additive as the encoder takes it,
    0 = a real token and -inf = padding; None: every token is real.
    Raises ``ValueError`` for a row with no real token (its vector would be made up) or a mask of another shape.
    Shapes: h (B, S, D) -> (B, D).
    """
    check_choice("pooling", pooling, POOLINGS)
    check_tensor("h", h, ndim=3)
    real = None if padding_mask is None else _real_tokens(padding_mask, h.shape[:2])  # (B, S) bool
    if pooling == "cls":
        return h[:, 0]  # (B, D): [CLS] sits at position 0
    if real is None:
        return h.mean(dim=1)  # (B, D)
    keep = real.to(h.dtype).unsqueeze(-1)  # (B, S, 1): 1 = real token
    return (h * keep).sum(dim=1) / keep.sum(dim=1)  # (B, D)


def _real_tokens(padding_mask: Tensor, shape: tuple[int, int]) -> Tensor:
    """The (B, S) boolean "real token" of a boolean or additive (0 / -inf) padding mask, every row with one."""
    check_tensor("padding_mask", padding_mask)
    if padding_mask.numel() != shape[0] * shape[1]:
        raise ValueError(f"padding_mask has shape {tuple(padding_mask.shape)}; expected (B, 1, 1, S) or (B, S) = "
                         f"{tuple(shape)}")
    mask = padding_mask.reshape(shape)
    real = mask if mask.dtype == torch.bool else mask > float("-inf")  # additive: 0 keeps a token, -inf hides it
    empty = (~real.any(dim=1)).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"padding_mask hides every token of row {empty[0]}; expected at least one real token per "
                         "row (an all-padding row has nothing to classify)")
    return real


def _init_head(model: nn.Module) -> None:
    """GPT-2/BERT initialisation for the new layers only (the encoder initialised itself)."""
    for name, module in model.named_children():
        if name != "encoder":
            init_weights(module, model.config.n_layers)


def _config_of(encoder: Encoder) -> ModelConfig:
    if not isinstance(encoder, Encoder):
        raise TypeError(f"encoder must be a companion.models.Encoder, got {type(encoder).__name__}")
    return encoder.config


def _copy_body(target: Encoder, source: Encoder) -> None:
    """Copy the encoder weights (embeddings, layers, final norm) of ``source`` into ``target``; the masked-LM
    head of ``source``, if any, is left behind. Raises ``TypeError``/``ValueError`` on a mismatch."""
    theirs, ours = _config_of(source), target.config
    differ = [f.name for f in dataclasses.fields(ours)
              if f.name != "dropout" and getattr(theirs, f.name) != getattr(ours, f.name)]  # fmt: skip
    if differ:
        detail = ", ".join(f"{name}={getattr(theirs, name)!r} vs {getattr(ours, name)!r}" for name in differ)
        raise ValueError(f"encoder's config differs from the head's in {detail}; expected the same model")
    body = {k: v for k, v in source.state_dict().items() if k in target.state_dict()}
    target.load_state_dict(body)  # strict: every weight of the body must be there


class SequenceClassifier(nn.Module):
    """An ``Encoder`` (without its MLM head), a pooling step, BERT's pooler and a linear classifier.

    ``forward`` returns (B, num_labels) logits. ``pooling``: ``"cls"`` (BERT) or ``"mean"``.
    """

    def __init__(self, config: ModelConfig, num_labels: int, pooling: str = "cls") -> None:
        super().__init__()
        check_num_labels("num_labels", num_labels)
        check_choice("pooling", pooling, POOLINGS)
        self.config, self.num_labels, self.pooling = config, num_labels, pooling
        self.encoder = Encoder(config, mlm_head=False)
        self.pooler = nn.Linear(config.d_model, config.d_model)  # BERT's pooler: dense + tanh
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, num_labels)
        _init_head(self)

    @classmethod
    def from_encoder(cls, encoder: Encoder, num_labels: int, pooling: str = "cls") -> SequenceClassifier:
        """A classifier whose encoder starts from ``encoder``'s weights (e.g. after masked-LM pretraining);
        the pooler and classifier start fresh."""
        model = cls(_config_of(encoder), num_labels, pooling)
        _copy_body(model.encoder, encoder)
        return model

    def forward(
        self, ids: Tensor, padding_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Shapes: ids (B, S), padding_mask (B, 1, 1, S) True = real token -> logits (B, num_labels)."""
        h = self.encoder.hidden_states(ids, padding_mask, token_type_ids)  # (B, S, D)
        pooled = torch.tanh(self.pooler(pool(h, self.pooling, padding_mask)))  # (B, D)
        return self.classifier(self.dropout(pooled))  # (B, num_labels)

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}, pooling={self.pooling!r}"


class TokenClassifier(nn.Module):
    """An ``Encoder`` (without its MLM head) and a linear classifier on every token's vector.

    ``forward`` returns (B, S, num_labels) logits.
    """

    def __init__(self, config: ModelConfig, num_labels: int) -> None:
        super().__init__()
        check_num_labels("num_labels", num_labels)
        self.config, self.num_labels = config, num_labels
        self.encoder = Encoder(config, mlm_head=False)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, num_labels)
        _init_head(self)

    @classmethod
    def from_encoder(cls, encoder: Encoder, num_labels: int) -> TokenClassifier:
        """A tagger whose encoder starts from ``encoder``'s weights; the classifier starts fresh."""
        model = cls(_config_of(encoder), num_labels)
        _copy_body(model.encoder, encoder)
        return model

    def forward(
        self, ids: Tensor, padding_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Shapes: ids (B, S), padding_mask (B, 1, 1, S) True = real token -> logits (B, S, num_labels)."""
        h = self.encoder.hidden_states(ids, padding_mask, token_type_ids)  # (B, S, D)
        return self.classifier(self.dropout(h))  # (B, S, num_labels)

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}"


class LastTokenClassifier(nn.Module):
    """A decoder-only ``GPT`` and a linear classifier on the vector of each sequence's last real token.

    ``forward`` returns (B, num_labels) logits. Padding must come after the text (right padding): causal attention
    then keeps it out of every real token's vector, and the last real token is the one before the first pad.
    The GPT keeps its output head (tied to the token table, it adds no parameters) so that ``from_decoder`` can copy
    a pretrained model whole; the classifier does not use it.
    """

    def __init__(self, config: ModelConfig, num_labels: int) -> None:
        super().__init__()
        check_num_labels("num_labels", num_labels)
        self.config, self.num_labels = config, num_labels
        self.decoder = GPT(config)
        self.dropout = nn.Dropout(config.dropout)
        self.classifier = nn.Linear(config.d_model, num_labels)
        init_weights(self.classifier, config.n_layers)

    @classmethod
    def from_decoder(cls, decoder: GPT, num_labels: int) -> LastTokenClassifier:
        """A classifier whose decoder starts from ``decoder``'s weights (e.g. after next-token pretraining); the
        classifier starts fresh. Raises ``TypeError`` for a model that is not a ``GPT``."""
        if not isinstance(decoder, GPT):
            raise TypeError(f"decoder must be a companion.models.GPT, got {type(decoder).__name__}")
        model = cls(decoder.config, num_labels)
        model.decoder.load_state_dict(decoder.state_dict())
        return model

    def forward(
        self, ids: Tensor, padding_mask: Tensor | None = None, token_type_ids: Tensor | None = None
    ) -> Tensor:
        """Shapes: ids (B, S), padding_mask (B, 1, 1, S) or (B, S), True = real token -> logits (B, num_labels).

        ``token_type_ids`` must be None (a GPT has no token types); it is accepted so that the training losses can
        call every classifier alike. Raises ``ValueError`` for padding before a real token (left padding).
        """
        if token_type_ids is not None:
            raise ValueError("token_type_ids must be None for a LastTokenClassifier: a GPT has no token types")
        h = self.decoder.hidden_states(ids)  # (B, S, D): causal, so padding after the text changes nothing before it
        if padding_mask is None:
            last = torch.full((ids.size(0),), ids.size(1) - 1, device=ids.device)  # (B,)
        else:
            real = _real_tokens(padding_mask, h.shape[:2])  # (B, S) bool
            last = real.sum(dim=1) - 1  # (B,): the real tokens should be 0 .. last
            if not bool((real == (torch.arange(real.size(1), device=ids.device) <= last[:, None])).all()):
                raise ValueError("padding_mask has padding before a real token; expected right padding (the text "
                                 "first, then padding), so that the last real token has read the whole text")
        vector = h[torch.arange(ids.size(0), device=ids.device), last]  # (B, D)
        return self.classifier(self.dropout(vector))  # (B, num_labels)

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}"


def tag_spans(tags: Tensor, outside: int = 0, ignore_index: int = -100) -> set[tuple[int, int, int, int]]:
    """The entities of a batch of tag sequences: maximal runs of one tag other than ``outside``.

    Returns ``(row, start, end, tag)`` tuples, ``end`` exclusive. A position labelled ``ignore_index``
    ([CLS], padding) ends a run and belongs to none. Example: tags ``[0, 2, 2, 0, 3, 1]`` with
    ``outside=0`` hold the spans ``(0, 1, 3, 2)``, ``(0, 4, 5, 3)`` and ``(0, 5, 6, 1)``.
    Shapes: tags (B, S) or (S,).
    """
    check_tensor("tags", tags, ndim=(1, 2))
    if tags.dtype.is_floating_point:
        raise TypeError(f"tags must be integer tag ids, got dtype {tags.dtype}")
    spans = set()
    for row, seq in enumerate(tags.reshape(-1, tags.size(-1)).tolist()):
        start = None
        for pos, tag in enumerate([*seq, ignore_index]):  # a sentinel closes the last run
            if start is not None and tag != seq[start]:
                spans.add((row, start, pos, seq[start]))
                start = None
            if start is None and tag not in (outside, ignore_index):
                start = pos
    return spans


def span_scores(
    predicted: Tensor, gold: Tensor, outside: int = 0, tag: int | None = None, ignore_index: int = -100
) -> dict[str, float]:
    """Entity-level precision, recall and F1: a predicted span counts only if a gold span has the same
    row, start, end and tag (exact match, as CoNLL-2003 scores named entities).

    ``gold`` holds ``ignore_index`` where a token is not scored; those positions are taken out of
    ``predicted`` too. ``tag``: score that tag's spans only (None: all tags but ``outside``). A score with
    nothing to count (no predicted span for precision, no gold span for recall) is 0.
    Raises ``ValueError`` if the shapes differ. Shapes: predicted (B, S), gold (B, S).
    """
    check_tensor("predicted", predicted, ndim=(1, 2))
    check_tensor("gold", gold, ndim=(1, 2))
    if predicted.shape != gold.shape:
        raise ValueError(f"predicted has shape {tuple(predicted.shape)} but gold has {tuple(gold.shape)}; expected "
                         "the same shape, one tag per token")
    predicted = torch.where(gold == ignore_index, ignore_index, predicted)  # unscored positions: no entity
    found, true = (tag_spans(t, outside, ignore_index) for t in (predicted, gold))
    if tag is not None:
        found, true = ({s for s in spans if s[3] == tag} for spans in (found, true))
    hits = len(found & true)
    precision = hits / len(found) if found else 0.0
    recall = hits / len(true) if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if hits else 0.0
    return {"precision": precision, "recall": recall, "f1": f1}

"""Task heads on the encoder: ``SequenceClassifier`` (one label per sequence) and ``TokenClassifier`` (one per token).

BERT's fine-tuning recipe (Devlin et al. 2019, §3.2 and Figure 4): keep the pretrained encoder, add one small
layer for the task, and train everything on the labelled examples.

- Sequence classification (sentiment, topic, "which chapter?"): pool the S hidden vectors into one, then
  BERT's pooler (dense + tanh) and a linear layer to ``num_labels`` logits. ``pooling="cls"`` takes the vector
  of the first token, [CLS], as BERT does; ``pooling="mean"`` averages the vectors of the real tokens
  (padding left out), as Sentence-BERT does (Reimers & Gurevych 2019).
- Token classification (named entities, tags): a linear layer on every hidden vector; no pooling.

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

__all__ = ["POOLINGS", "SequenceClassifier", "TokenClassifier", "pool"]

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

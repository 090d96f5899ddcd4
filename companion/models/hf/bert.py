"""BERT (Devlin et al. 2019) in Hugging Face's format: the names of ``BertModel`` and its task models.

One encoder body, four kinds of checkpoint, told apart by their keys:

- ``BertModel`` (``embeddings.*``, ``encoder.layer.*``, usually ``pooler.*``): the encoder alone. Its pooler
  (dense + tanh over [CLS]) belongs to sentence classification, so an ``Encoder`` leaves it out.
- ``BertForMaskedLM`` (``bert.*`` + ``cls.predictions.*``): the encoder and the masked-LM head.
- ``BertForSequenceClassification`` (``bert.*`` with ``bert.pooler.*``, + ``classifier.*``).
- ``BertForTokenClassification`` (``bert.*`` without a pooler, + ``classifier.*``).

Never loaded: the pooler (except into a ``SequenceClassifier``), the next-sentence head of ``BertForPreTraining``
(``cls.seq_relationship``) and the index buffers older files saved; any other tensor left over is an error.

BERT is post-norm: the norm after each residual sum is ``attention.output.LayerNorm`` / ``output.LayerNorm``
(our ``self_attn_block.norm`` / ``ffn_block.norm``); the embeddings have their own LayerNorm.
Checked against ``transformers`` models built from random configs (tests/test_bert.py).
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.hf.common import Weights, check_depth, count_layers, strip_prefix, tied_head

__all__ = ["KINDS", "SOURCE", "config_from_state_dict", "kind_of", "num_labels_of", "to_companion"]

SOURCE = "BERT"
LAYER = r"encoder\.layer\.(\d+)\."  # layer index in the (prefix-stripped) checkpoint names
KINDS = ("encoder", "masked_lm", "sequence", "token")  # what a state dict holds (see the module docstring)
HEAD_WIDTH = 64  # D_h of every published BERT (tiny 128 / 2 ... base 768 / 12, large 1024 / 16)
PUBLISHED_WIDTHS = (128, 256, 512, 768, 1024)  # D of the published BERTs: the only ones whose heads config=None guesses
IGNORED = r"pooler\..*|cls\.seq_relationship\..*|embeddings\.(position_ids|token_type_ids)"  # never loaded (see above)
LAYER_NAMES = {  # ours -> theirs, inside layers.{i} / encoder.layer.{i}
    "self_attn.q_proj": "attention.self.query", "self_attn.k_proj": "attention.self.key",
    "self_attn.v_proj": "attention.self.value", "self_attn.o_proj": "attention.output.dense",
    "self_attn_block.norm": "attention.output.LayerNorm", "ffn.up_proj": "intermediate.dense",
    "ffn.down_proj": "output.dense", "ffn_block.norm": "output.LayerNorm",
}  # fmt: skip
EMBEDDING_NAMES = {
    "embed.token": "embeddings.word_embeddings", "embed.position": "embeddings.position_embeddings",
    "embed.token_type": "embeddings.token_type_embeddings",
}  # fmt: skip


def _body(sd: Mapping[str, Tensor]) -> dict[str, Tensor]:
    return strip_prefix(sd, "bert.")


def kind_of(sd: Mapping[str, Tensor]) -> str:
    """Which of :data:`KINDS` the state dict ``sd`` is (see the module docstring)."""
    if not any(k.startswith(("embeddings.", "bert.embeddings.")) for k in sd):
        raise ValueError(f"{SOURCE} state dict has no embeddings.* weights; is it a BERT checkpoint?")
    if any(k.startswith("cls.predictions.") for k in sd):
        return "masked_lm"
    if "classifier.weight" in sd:
        return "sequence" if "bert.pooler.dense.weight" in sd else "token"
    return "encoder"


def num_labels_of(sd: Mapping[str, Tensor]) -> int:
    """The number of classes of a classification checkpoint (rows of ``classifier.weight``)."""
    return Weights(sd, SOURCE)["classifier.weight"].shape[0]


def config_from_state_dict(sd: Mapping[str, Tensor]) -> ModelConfig:
    """A ``ModelConfig.bert_base`` with the sizes read from the tensors (dropout 0: a loaded model is for
    inference). The tensors cannot tell the head count, and a wrong one gives wrong outputs without an error:
    it is guessed (heads of width 64) only for the widths of the published BERTs (:data:`PUBLISHED_WIDTHS`),
    and refused otherwise. Pass a config for other models (and for ``layer_norm_eps`` other than 1e-12)."""
    body = Weights(_body(sd), SOURCE)
    v, d = body["embeddings.word_embeddings.weight"].shape
    if d not in PUBLISHED_WIDTHS:
        raise ValueError(f"{SOURCE} state dict has width {d}, which no published BERT has ({PUBLISHED_WIDTHS}, all "
                         f"with heads of width {HEAD_WIDTH}), and the tensors cannot tell the head count; pass "
                         "config=ModelConfig.bert_base(..., n_heads=...) to say how many heads it has")
    types = body["embeddings.token_type_embeddings.weight"].shape[0] \
        if "embeddings.token_type_embeddings.weight" in body else 0  # fmt: skip
    return ModelConfig.bert_base(
        vocab_size=v, d_model=d, n_heads=d // HEAD_WIDTH, n_layers=count_layers(body, LAYER),
        d_ff=body["encoder.layer.0.intermediate.dense.weight"].shape[0],
        max_seq_len=body["embeddings.position_embeddings.weight"].shape[0], type_vocab_size=types, dropout=0.0,
    )  # fmt: skip


def to_companion(sd: Mapping[str, Tensor], config: ModelConfig, kind: str | None = None) -> dict[str, Tensor]:
    """A BERT state dict under the names of the companion module of its kind: ``Encoder`` (with its MLM head
    for ``"masked_lm"``, without for ``"encoder"``), ``SequenceClassifier`` or ``TokenClassifier``."""
    kind = kind_of(sd) if kind is None else kind
    body = Weights(_body(sd), SOURCE)
    if config.norm != "layernorm" or config.norm_placement != "post" or not config.embed_norm or config.final_norm:
        raise ValueError(
            "a BERT checkpoint needs a BERT-shaped config (norm='layernorm', norm_placement='post', embed_norm=True, "
            f"final_norm=False), got norm={config.norm!r}, norm_placement={config.norm_placement!r}, "
            f"embed_norm={config.embed_norm}, final_norm={config.final_norm}; start from ModelConfig.bert_base(...)"
        )
    check_depth(body, LAYER, config, SOURCE)
    types = "embeddings.token_type_embeddings.weight"
    if not config.type_vocab_size and types in body:
        raise ValueError(f"{SOURCE} state dict has a token-type table ({types}, {body[types].shape[0]} rows) but "
                         f"the config has type_vocab_size=0; expected type_vocab_size={body[types].shape[0]}")
    ours: dict[str, Tensor] = {}
    for mine, theirs in EMBEDDING_NAMES.items():
        if mine != "embed.token_type" or config.type_vocab_size:
            ours[mine + ".weight"] = body[theirs + ".weight"]
    ours |= {"embed.norm.weight": body["embeddings.LayerNorm.weight"],
             "embed.norm.bias": body["embeddings.LayerNorm.bias"]}  # fmt: skip
    for i in range(config.n_layers):
        for mine, theirs in LAYER_NAMES.items():
            for part in ("weight", "bias"):
                ours[f"layers.{i}.{mine}.{part}"] = body[f"encoder.layer.{i}.{theirs}.{part}"]
    if kind == "masked_lm":
        head = body  # cls.* keeps its name: only "bert." is stripped
        ours |= {
            "mlm_dense.weight": head["cls.predictions.transform.dense.weight"],
            "mlm_dense.bias": head["cls.predictions.transform.dense.bias"],
            "mlm_norm.weight": head["cls.predictions.transform.LayerNorm.weight"],
            "mlm_norm.bias": head["cls.predictions.transform.LayerNorm.bias"],
            "lm_head.bias": head["cls.predictions.bias"],
        }
        if not config.tie_embeddings:
            ours["lm_head.weight"] = head["cls.predictions.decoder.weight"]
        else:
            tied_head(head, "cls.predictions.decoder.weight", "embeddings.word_embeddings.weight")
        tied_head(head, "cls.predictions.decoder.bias", "cls.predictions.bias")  # one bias under two names
    elif kind != "encoder":
        ours = {"encoder." + k: v for k, v in ours.items()}
        ours |= {"classifier.weight": body["classifier.weight"], "classifier.bias": body["classifier.bias"]}
        if kind == "sequence":
            ours |= {"pooler.weight": body["pooler.dense.weight"], "pooler.bias": body["pooler.dense.bias"]}
    body.refuse_unread(IGNORED)
    return ours

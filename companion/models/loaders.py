"""Models from Hugging Face state dicts: GPT-2, Llama, BERT and ViT.

The loaders take a plain state dict (``hf_model.state_dict()`` or tensors read from a checkpoint file), so
``transformers`` is not needed to use them. The name mapping lives in :mod:`companion.models.hf` (checkpoint
names never leave that package); this module builds the model and copies the weights in strictly.
tests/test_hf_equivalence.py, tests/test_bert.py and tests/test_vit.py build ``GPT2LMHeadModel``,
``LlamaForCausalLM``, the BERT models and ``ViTForImageClassification`` from small random configs and check
that the outputs agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.encoder import Encoder
from companion.models.gpt import GPT
from companion.models.heads import SequenceClassifier, TokenClassifier
from companion.models.hf import bert, gpt2, llama, vit
from companion.models.hf.common import load_into
from companion.models.vit import ViT

__all__ = ["load_bert_state_dict", "load_gpt2_state_dict", "load_llama_state_dict", "load_vit_state_dict"]


def load_gpt2_state_dict(sd: Mapping[str, Tensor], config: ModelConfig | None = None) -> GPT:
    """A ``GPT`` holding the weights of a Hugging Face ``GPT2LMHeadModel`` / ``GPT2Model`` state dict.

    ``config=None`` reads the sizes from the tensors and assumes GPT-2's head width of 64
    (``ModelConfig.gpt2_small`` otherwise); pass a config for other head counts.
    """
    config = gpt2.config_from_state_dict(sd) if config is None else config
    return load_into(GPT(config), gpt2.to_companion(sd, config), gpt2.SOURCE)


def load_llama_state_dict(sd: Mapping[str, Tensor], config: ModelConfig) -> GPT:
    """A ``GPT`` holding the weights of a Hugging Face ``LlamaForCausalLM`` state dict.

    ``config`` must describe the same model, e.g. ``ModelConfig.llama(d_model=..., n_heads=...,
    n_kv_heads=..., rope_base=..., norm_eps=rms_norm_eps, tie_embeddings=tie_word_embeddings)``.
    """
    return load_into(GPT(config), llama.to_companion(sd, config), llama.SOURCE)


def load_bert_state_dict(
    sd: Mapping[str, Tensor], config: ModelConfig | None = None
) -> Encoder | SequenceClassifier | TokenClassifier:
    """The companion model of a Hugging Face BERT state dict, by what it holds:

    - ``BertModel``: an ``Encoder`` without an MLM head (``mlm_head=False``); its pooler is left out;
    - ``BertForMaskedLM``: an ``Encoder`` with its MLM head;
    - ``BertForSequenceClassification``: a ``SequenceClassifier`` (pooling ``"cls"``, BERT's pooler);
    - ``BertForTokenClassification``: a ``TokenClassifier``.

    ``config=None`` reads the sizes from the tensors and assumes BERT's head width of 64; pass
    ``ModelConfig.bert_base(...)`` for other head counts or ``norm_eps`` (``layer_norm_eps``).
    """
    kind = bert.kind_of(sd)
    config = bert.config_from_state_dict(sd) if config is None else config
    if kind in ("encoder", "masked_lm"):
        model = Encoder(config, mlm_head=kind == "masked_lm")
    elif kind == "sequence":
        model = SequenceClassifier(config, bert.num_labels_of(sd), pooling="cls")
    else:
        model = TokenClassifier(config, bert.num_labels_of(sd))
    return load_into(model, bert.to_companion(sd, config, kind), bert.SOURCE)


def load_vit_state_dict(sd: Mapping[str, Tensor], config: ModelConfig | None = None) -> ViT:
    """A ``ViT`` holding the weights of a Hugging Face ``ViTForImageClassification`` state dict.

    ``config=None`` reads the sizes (width, depth, patch and image size, channels) from the tensors and
    assumes a head width of 64; pass ``ModelConfig.vit(...)`` for other head counts or ``norm_eps``.
    """
    config = vit.config_from_state_dict(sd) if config is None else config
    return load_into(ViT(config, vit.num_labels_of(sd)), vit.to_companion(sd, config), vit.SOURCE)

"""Models of the course: one configurable core for decoder-only, encoder-decoder and encoder-only models.

One module per concept, each importing only the ones above it in this list:

- :mod:`~companion.models.config` -- ``ModelConfig``: every architectural choice, one field each, with presets.
- :mod:`~companion.models.blocks` -- the pieces: ``Embeddings``, ``EncoderLayer``, ``DecoderLayer``, the
  attention mask one call needs, GPT-2's initialisation; the choice of multi-head or latent attention (MLA) and of
  a dense FFN or a mixture of experts (chapter 14).
- :mod:`~companion.models.hf` -- Hugging Face formats (checkpoint names and ``config.json`` keys, both
  directions; model folders on disk): GPT-2, Llama, Mixtral, Qwen3, DeepSeek-V3. It builds no model.
- :mod:`~companion.models.base` -- what the models share: ``num_parameters``, input checks, the output head.
- :mod:`~companion.models.gpt` -- ``GPT`` (decoder-only; ``from_pretrained`` / ``save_pretrained``).
- :mod:`~companion.models.encoder_decoder` -- ``Transformer`` (encoder–decoder) and T5's ``span_corruption``.
- :mod:`~companion.models.encoder` -- ``Encoder`` (BERT-style, token types, masked-LM head) and ``mask_tokens``.
- :mod:`~companion.models.heads` -- ``SequenceClassifier`` ([CLS] or mean pooling) and ``TokenClassifier``:
  task heads on the encoder; ``LastTokenClassifier``: a GPT read at its last real token; ``tag_spans`` /
  ``span_scores``: entity-level scores of a tagger.
- :mod:`~companion.models.retrieval` -- ``embed`` (mean-pooled unit vectors), ``info_nce_loss`` (in-batch
  negatives) and ``recall_at_k``: retrieval with an encoder.
- :mod:`~companion.models.vit` -- ``ViT`` (Vision Transformer) and ``patchify``.
- :mod:`~companion.models.loaders` -- ``load_gpt2_state_dict`` / ``load_llama_state_dict`` /
  ``load_bert_state_dict`` / ``load_vit_state_dict``: a model from a Hugging Face state dict.
"""

from companion.models.base import num_parameters
from companion.models.blocks import DecoderLayer, DecoderLayerCache, Embeddings, EncoderLayer, attention_mask
from companion.models.config import ModelConfig
from companion.models.encoder import Encoder, mask_tokens
from companion.models.encoder_decoder import Transformer, span_corruption
from companion.models.gpt import GPT
from companion.models.heads import (
    LastTokenClassifier,
    SequenceClassifier,
    TokenClassifier,
    pool,
    span_scores,
    tag_spans,
)
from companion.models.loaders import (
    load_bert_state_dict,
    load_gpt2_state_dict,
    load_llama_state_dict,
    load_vit_state_dict,
)
from companion.models.retrieval import embed, info_nce_loss, recall_at_k
from companion.models.vit import ViT, patchify

__all__ = [
    "GPT", "DecoderLayer", "DecoderLayerCache", "Embeddings", "Encoder", "EncoderLayer", "ModelConfig", "Transformer",
    "attention_mask", "load_gpt2_state_dict", "load_llama_state_dict", "mask_tokens", "num_parameters",
    "SequenceClassifier", "TokenClassifier", "LastTokenClassifier", "pool", "ViT", "patchify", "load_bert_state_dict",
    "load_vit_state_dict",
    "span_corruption", "span_scores", "tag_spans", "embed", "info_nce_loss", "recall_at_k",
]  # fmt: skip

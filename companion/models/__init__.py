"""Models of the course: one configurable core for encoder-decoder, decoder-only and encoder-only.

``ModelConfig`` (config.py) holds every architectural choice; ``blocks.py`` builds layers from
``companion.attention``, ``companion.layers``, ``companion.positions`` and ``companion.embeddings``;
``transformer.py`` stacks them into ``Transformer``, ``GPT`` and ``Encoder``; ``hf_loaders.py`` maps
Hugging Face GPT-2 / Llama state dicts onto ``GPT`` (checkpoint names never leave that file).
"""

from companion.models.blocks import DecoderLayer, DecoderLayerCache, Embeddings, EncoderLayer, attention_mask
from companion.models.config import ModelConfig
from companion.models.hf_loaders import load_gpt2_state_dict, load_llama_state_dict
from companion.models.transformer import GPT, Encoder, Transformer, mask_tokens, num_parameters

__all__ = [
    "GPT",
    "DecoderLayer",
    "DecoderLayerCache",
    "Embeddings",
    "Encoder",
    "EncoderLayer",
    "ModelConfig",
    "Transformer",
    "attention_mask",
    "load_gpt2_state_dict",
    "load_llama_state_dict",
    "mask_tokens",
    "num_parameters",
]

"""Models from Hugging Face state dicts: ``load_gpt2_state_dict`` and ``load_llama_state_dict``.

The loaders take a plain state dict (``hf_model.state_dict()`` or tensors read from a checkpoint file), so
``transformers`` is not needed to use them. The name mapping lives in :mod:`companion.models.hf` (checkpoint
names never leave that package); this module builds the model and copies the weights in strictly.
tests/test_hf_equivalence.py builds ``GPT2LMHeadModel`` and ``LlamaForCausalLM`` from small random configs
and checks the logits agree.
"""

from __future__ import annotations

from collections.abc import Mapping

from torch import Tensor

from companion.models.config import ModelConfig
from companion.models.gpt import GPT
from companion.models.hf import gpt2, llama
from companion.models.hf.common import load_into

__all__ = ["load_gpt2_state_dict", "load_llama_state_dict"]


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

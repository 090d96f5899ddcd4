"""Generation: from logits to text (chapter 9), one module per step of the story.

- :mod:`companion.generation.sampling` -- choosing one token from logits: ``apply_temperature``,
  ``top_k_filter``, ``top_p_filter`` (Holtzman et al. 2020), ``min_p_filter``, ``apply_repetition_penalty``,
  ``apply_presence_frequency_penalty``, ``no_repeat_ngram_filter``, ``pick_next``.
- :mod:`companion.generation.utf8` -- ``Utf8Mask``: only tokens that keep a byte-level tokenizer's output valid
  UTF-8 (a finite automaton over the pending partial character).
- :mod:`companion.generation.decoding` -- the loop: the :class:`Decodable` protocol (what a model must offer),
  ``generate`` (greedy or sampled, with or without a KV cache), ``beam_search``, ``eval_mode``.
- :mod:`companion.generation.adapters` -- what makes other models decodable: ``ConditionedDecoder`` (an
  encoder–decoder with its source fixed), ``FunctionModel`` (a logits function), ``BigramModel`` (a table).
- :mod:`companion.generation.translate` -- ``translate``: encode once, decode greedily (chapters 8 and 9).
- :mod:`companion.generation.speculative` -- ``speculative_accept`` (the acceptance rule) and
  ``speculative_generate``: a draft model proposes, the target checks several tokens per pass (chapter 9).

Each module imports only the ones listed above it. Import from here: ``from companion.generation import
generate, translate``.
"""

from companion.generation.adapters import BigramModel, ConditionedDecoder, DecodingConfig, FunctionModel, TokenHistory
from companion.generation.decoding import Decodable, beam_search, eval_mode, generate
from companion.generation.sampling import (
    apply_presence_frequency_penalty,
    apply_repetition_penalty,
    apply_temperature,
    min_p_filter,
    no_repeat_ngram_filter,
    pick_next,
    top_k_filter,
    top_p_filter,
)
from companion.generation.speculative import speculative_accept, speculative_generate
from companion.generation.translate import translate
from companion.generation.utf8 import Utf8Mask

__all__ = [
    "BigramModel", "ConditionedDecoder", "Decodable", "DecodingConfig", "FunctionModel", "TokenHistory",
    "apply_temperature", "beam_search", "eval_mode", "generate", "pick_next", "top_k_filter", "top_p_filter",
    "translate", "Utf8Mask", "apply_repetition_penalty", "min_p_filter", "speculative_accept", "speculative_generate",
    "apply_presence_frequency_penalty", "no_repeat_ngram_filter",
]  # fmt: skip

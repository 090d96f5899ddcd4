"""The course's data: a toy zh→en translation task, a small English corpus, a source of known entropy.

Nothing is downloaded; everything is generated from a seed or shipped with the package. Import from here
(``from companion.data import toy_translation``); one module per data set:

- :mod:`companion.data.translation` -- ``toy_translation``: Chinese→English sentence pairs from a small
  grammar whose word order really differs between the languages, with ``Vocab``, ``encode_batch`` and
  ``detokenize``; it holds the notes' running example 我爱NLP → I love NLP in its test set.
- :mod:`companion.data.corpus` -- ``char_corpus``: a few KB of English prose about transformers, written
  for this course, for the character-level language model.
- :mod:`companion.data.markov` -- ``markov_source``: a random order-k Markov chain whose entropy rate
  (nats/token) is computed exactly, the irreducible loss E of the scaling-law experiment.
"""

from __future__ import annotations

from companion.data.corpus import char_corpus
from companion.data.markov import MarkovSource, markov_source
from companion.data.translation import (
    BOS,
    EOS,
    MAX_SENTENCES,
    PAD,
    SPECIALS,
    UNK,
    Pair,
    TranslationData,
    Vocab,
    detokenize,
    encode_batch,
    toy_translation,
    translation_lexicon,
)

__all__ = [
    "PAD", "BOS", "EOS", "UNK", "SPECIALS", "Pair", "MAX_SENTENCES", "Vocab", "TranslationData", "toy_translation",
    "translation_lexicon", "detokenize", "encode_batch", "char_corpus", "MarkovSource", "markov_source",
]

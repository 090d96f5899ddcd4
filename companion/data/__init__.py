"""The course's data, in one place: the bundled data sets, and your own text as training data.

Nothing is downloaded; everything is generated from a seed, shipped with the package, or read from a file
you give. Import from here (``from companion.data import toy_translation, TokenData``); one module each:

- :mod:`companion.data.translation` -- ``toy_translation``: Chinese→English sentence pairs from a small
  grammar whose word order really differs between the languages, with ``Vocab``, ``encode_batch`` and
  ``detokenize``; it holds the notes' running example 我爱NLP → I love NLP in its test set.
- :mod:`companion.data.corpus` -- ``char_corpus``: a few KB of English prose about transformers, written
  for this course, for the character-level language model.
- :mod:`companion.data.markov` -- ``markov_source``: a random order-k Markov chain whose entropy rate
  (nats/token) is computed exactly, the irreducible loss E of the scaling-law experiment.
- :mod:`companion.data.instructions` -- instructions with known answers for fine-tuning (chapter 13): the
  glossary's terms in English and Chinese, the self-check questions, the toy translations; held-out splits by
  key, and a corrupted answer for preference pairs.
- :mod:`companion.data.markdown` -- ``paragraphs`` of a markdown page and ``tag_segments``: the pieces of a
  paragraph tagged English / Chinese / maths / code by its own markup (chapter 12's labelled data).
- :mod:`companion.data.text` -- your own text (chapter 11, ``companion-train``): ``read_text_file``,
  ``train_tokenizer`` / ``save_tokenizer`` / ``load_tokenizer``, the ids on disk (``write_token_file``) and
  ``TokenData``, which serves random training windows and fixed validation windows from them.
"""

from __future__ import annotations

from companion.data.corpus import char_corpus
from companion.data.instructions import (
    GLOSSARY_FAMILIES,
    GlossaryTerm,
    Instruction,
    SelfCheckQuestion,
    first_sentence,
    glossary_instructions,
    glossary_terms,
    self_check_instructions,
    self_check_questions,
    split_by_key,
    swap_adjacent_words,
    translation_instructions,
)
from companion.data.markdown import TAGS, paragraphs, plain_text, tag_segments
from companion.data.markov import MarkovSource, markov_source
from companion.data.text import (
    TOKENIZER_FILES,
    VAL_FRACTION,
    HFTokenizer,
    TokenData,
    Tokenizer,
    load_tokenizer,
    read_text_file,
    save_tokenizer,
    text_sha256,
    token_dtype,
    tokenizer_kind,
    train_tokenizer,
    write_token_file,
)
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
    "TOKENIZER_FILES", "VAL_FRACTION", "HFTokenizer", "TokenData", "Tokenizer", "load_tokenizer", "read_text_file",
    "save_tokenizer", "text_sha256", "token_dtype", "tokenizer_kind", "train_tokenizer", "write_token_file",
    "GLOSSARY_FAMILIES", "GlossaryTerm", "Instruction", "SelfCheckQuestion", "first_sentence",
    "glossary_instructions", "glossary_terms", "self_check_instructions", "self_check_questions", "split_by_key",
    "swap_adjacent_words", "translation_instructions", "TAGS", "paragraphs", "plain_text", "tag_segments",
]

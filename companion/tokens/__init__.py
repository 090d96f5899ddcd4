"""Tokenizers: text -> tokens -> ids, three ways (chapter 01_tokens).

One module per tokenizer; import them from here (``from companion.tokens import BPETokenizer``):

* :mod:`companion.tokens.char` -- ``CharTokenizer``: one id per character seen in a training text.
* :mod:`companion.tokens.bpe` -- ``BPETokenizer`` (with ``merge_pair`` and the GPT-2/GPT-4 split patterns):
  byte-level byte-pair encoding (Sennrich et al. 2016, "Neural Machine Translation of Rare Words with
  Subword Units"; byte-level as in GPT-2, Radford et al. 2019), written in the style of karpathy/minbpe
  but trained with an incremental algorithm instead of recounting every pair each step.
* :mod:`companion.tokens.wordpiece` -- ``WordPieceTokenizer``: greedy longest-match-first with ``##``
  continuation pieces, as in BERT (Devlin et al. 2019); inference only, from a given vocabulary.

Checked against Hugging Face ``tokenizers`` (tests/test_tokens.py): the BPE trainer produces the same
merges, in the same order, as ``tokenizers.trainers.BpeTrainer`` with a ``ByteLevel`` pre-tokenizer, and
WordPiece gives the same pieces as ``tokenizers.models.WordPiece`` behind a BERT pre-tokenizer.

Left out on purpose: normalisation (NFC, lower-casing), dropout, training WordPiece, SentencePiece.
"""

from __future__ import annotations

from companion.tokens.bpe import GPT2_SPLIT_PATTERN, GPT4_SPLIT_PATTERN, BPETokenizer
from companion.tokens.bpe import merge_pair as merge_pair  # re-exported for chapter 01 and the exercises
from companion.tokens.char import CharTokenizer
from companion.tokens.wordpiece import WordPieceTokenizer

__all__ = ["GPT2_SPLIT_PATTERN", "GPT4_SPLIT_PATTERN", "BPETokenizer", "CharTokenizer", "WordPieceTokenizer"]

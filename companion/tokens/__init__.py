"""Tokenizers: text -> tokens -> ids, three ways (chapter 01_tokens).

One module per tokenizer; import them from here (``from companion.tokens import BPETokenizer``). All three
share one small interface, :class:`~companion.tokens.base.Tokenizer` (``encode``, ``decode``, ``vocab_size``,
``token_to_id``, ``id_to_token``); ``decode`` accepts a list or a 1-D tensor of any integer dtype, so
``tok.decode(generate(...)[0])`` works for each.

* :mod:`companion.tokens.base` -- the ``Tokenizer`` protocol and the checks the tokenizers share.
* :mod:`companion.tokens.char` -- ``CharTokenizer``: one id per character seen in a training text.
* :mod:`companion.tokens.bpe` -- ``BPETokenizer`` (with ``merge_pair``): byte-level byte-pair encoding
  (Sennrich et al. 2016, "Neural Machine Translation of Rare Words with Subword Units"; byte-level as in
  GPT-2, Radford et al. 2019), in the style of karpathy/minbpe: ``train`` (with ``special_tokens``),
  ``from_merges`` / ``from_gpt2_files`` (merges and vocabularies given as bytes, GPT-2's published files),
  ``encode`` / ``encode_iterable`` (a file, streamed) / ``decode``, ``save`` / ``load``. Its parts, one
  concept each:

  * :mod:`companion.tokens.pretokenize` -- cutting text before BPE: special tokens (longest wins), the
    GPT-2/GPT-4 split patterns (``GPT2_SPLIT_PATTERN``, ``GPT4_SPLIT_PATTERN``), streams;
  * :mod:`companion.tokens.bpe_train` -- the incremental trainer (recounts only around each merge);
  * :mod:`companion.tokens.bpe_import` -- merges and vocabularies from outside (bytes, GPT-2's files);
  * :mod:`companion.tokens.bpe_files` -- the companion file that ``save`` writes and ``load`` reads.
* :mod:`companion.tokens.wordpiece` -- ``WordPieceTokenizer``: greedy longest-match-first with ``##``
  continuation pieces, as in BERT (Devlin et al. 2019); inference only, from a given vocabulary.

Checked against Hugging Face ``tokenizers`` and tiktoken (tests/test_tokens.py,
tests/test_tokens_gpt2.py): the BPE trainer produces the same merges, in the same order, as
``tokenizers.trainers.BpeTrainer`` with a ``ByteLevel`` pre-tokenizer; GPT-2's files give the same ids as
tiktoken's ``gpt2`` encoding and ``tokenizers``; WordPiece gives the same pieces as
``tokenizers.models.WordPiece`` behind a BERT pre-tokenizer.

Left out on purpose: normalisation (NFC, lower-casing), dropout, training WordPiece, SentencePiece.
"""

from __future__ import annotations

from companion.tokens.base import Tokenizer
from companion.tokens.bpe import GPT2_SPLIT_PATTERN, GPT4_SPLIT_PATTERN, BPETokenizer, merge_pair
from companion.tokens.char import CharTokenizer
from companion.tokens.wordpiece import WordPieceTokenizer

__all__ = [
    "Tokenizer", "GPT2_SPLIT_PATTERN", "GPT4_SPLIT_PATTERN", "BPETokenizer", "merge_pair", "CharTokenizer",
    "WordPieceTokenizer",
]

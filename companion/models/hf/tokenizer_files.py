"""The tokenizer side of a Hugging Face model folder: ``tokenizer.json``, ``tokenizer_config.json`` and
``generation_config.json``, so that ``transformers.AutoTokenizer`` and ``pipeline("text-generation")`` work on
a folder ``GPT.save_pretrained`` wrote.

- ``tokenizer.json``: the tokenizer in the ``tokenizers`` library's format, converted from the course's
  ``BPETokenizer`` or ``CharTokenizer`` (:func:`companion.tokens.hf_export.to_hf_tokenizer`) or taken as it is
  from a ``tokenizers.Tokenizer`` (anything with ``to_str()``, such as the one ``GPT.from_pretrained`` attaches).
- ``tokenizer_config.json``: ``PreTrainedTokenizerFast`` over that file, its beginning/end-of-text tokens,
  ``model_max_length`` = the model's context (``max_seq_len``, ``--seq-len`` of ``companion-train``), and no
  clean-up of spaces on decoding (the ids must decode to exactly the text).
- ``generation_config.json`` (when the tokenizer has ``<|endoftext|>``): the bos/eos ids, and the eos as the
  padding id. Generation must stay within the
  context: a GPT-2-shaped model has ``n_positions`` = ``max_seq_len`` learned positions and fails past them,
  so keep prompt + ``max_new_tokens`` within it.

``tokenizer_ids(tokenizer)`` gives the bos/eos ids that also go into ``config.json``. Checked in
tests/test_pretrained.py: ``AutoTokenizer`` gives companion's ids on mixed Chinese/English text, and
``pipeline("text-generation")`` on the folder continues a prompt as ``companion.generation.generate`` does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from companion._files import atomic_write_text
from companion.models.config import ModelConfig
from companion.tokens import BPETokenizer, CharTokenizer
from companion.tokens.hf_export import special_token_roles, to_hf_tokenizer

__all__ = ["TOKENIZER_FILES", "as_hf_tokenizer", "check_tokenizer_fits", "tokenizer_ids", "write_tokenizer_files"]

# The files of a folder that transformers' tokenizer and generation settings are read from: the three written
# here, and those of other tokenizers that AutoTokenizer would read beside them (a save removes the stale ones).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "generation_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")  # fmt: skip


def as_hf_tokenizer(tokenizer: Any) -> Any:
    """A ``tokenizers.Tokenizer`` (or anything with ``to_str()``) for ``tokenizer``; converts the course's own.

    Raises ``TypeError`` for anything else, ``ModuleNotFoundError`` without the ``tokenizers`` package.
    """
    if isinstance(tokenizer, (BPETokenizer, CharTokenizer)):
        return to_hf_tokenizer(tokenizer)
    if callable(getattr(tokenizer, "to_str", None)):
        return tokenizer
    raise TypeError(f"tokenizer must be a companion BPETokenizer or CharTokenizer, or a tokenizers.Tokenizer; got "
                    f"{type(tokenizer).__name__}")


def _specials(hf: Any) -> dict[str, int]:
    state = json.loads(hf.to_str())
    return {t["content"]: t["id"] for t in state.get("added_tokens", []) if t.get("special")}


def tokenizer_ids(hf: Any) -> dict[str, int | None]:
    """``{"bos_token_id": ..., "eos_token_id": ...}`` of a converted tokenizer (``None`` where it has none)."""
    roles = special_token_roles(_specials(hf))
    return {f"{role}_token_id": (found[1] if found else None) for role, found in roles.items()}


def check_tokenizer_fits(hf: Any, config: ModelConfig, name: str) -> None:
    """``ValueError`` unless every id of the tokenizer ``hf`` has a row in the model's token table."""
    get_vocab = getattr(hf, "get_vocab", None)
    if get_vocab is None:
        return
    vocab = get_vocab(with_added_tokens=True)
    top = max(vocab.values(), default=-1)
    if top >= config.vocab_size:
        token = min((t for t, i in vocab.items() if i >= config.vocab_size), key=vocab.get)
        raise ValueError(f"{name} has {len(vocab)} tokens with ids up to {top} ({token!r} is "
                         f"{vocab[token]}), but the model's token table has vocab_size={config.vocab_size} rows; "
                         "expected every id < vocab_size")


def write_tokenizer_files(folder: Path, hf: Any, config: ModelConfig) -> list[str]:
    """Write the three files into ``folder`` (atomically), for ``hf`` from :func:`as_hf_tokenizer`; returns
    the names written (``generation_config.json`` only for a tokenizer with an end-of-text token)."""
    roles = special_token_roles(_specials(hf))
    atomic_write_text(folder / "tokenizer.json", hf.to_str())
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": roles["bos"][0] if roles["bos"] else None,
        "eos_token": roles["eos"][0] if roles["eos"] else None,
        "model_max_length": config.max_seq_len,
        "clean_up_tokenization_spaces": False,
    }
    atomic_write_text(folder / "tokenizer_config.json", json.dumps(tokenizer_config, indent=2) + "\n")
    ids = tokenizer_ids(hf)
    generation = {**ids, "pad_token_id": ids["eos_token_id"]}
    generation = {k: v for k, v in generation.items() if v is not None}
    if not generation:  # a tokenizer without an end-of-text token leaves transformers' defaults
        return ["tokenizer.json", "tokenizer_config.json"]
    atomic_write_text(folder / "generation_config.json", json.dumps(generation, indent=2, sort_keys=True) + "\n")
    return ["tokenizer.json", "tokenizer_config.json", "generation_config.json"]

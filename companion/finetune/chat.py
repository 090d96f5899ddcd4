"""The chat template and the SFT batch: how a conversation becomes token ids, and which of them carry loss.

Supervised fine-tuning (SFT; Ouyang et al. 2022, "InstructGPT", step 1) trains a pretrained language model on
conversations. The model still only predicts the next token; what changes is the text, laid out by a **chat
template** with one special token per role, and the **loss mask**: only the assistant's tokens are scored.

The template, one line per message, nothing between them (ChatML's idea with shorter markers)::

    <|system|>{content}<|end|>        optional, first
    <|user|>{content}<|end|>
    <|assistant|>{content}<|end|>     the model learns to write this, <|end|> included (so it learns to stop)

To generate, the prompt is the conversation so far plus ``<|assistant|>`` (``add_generation_prompt=True``)
and decoding stops at ``<|end|>``. The four markers are special tokens: ids of their own, added after the
tokenizer's vocabulary (``add_chat_tokens``); message text is encoded with ``encode_ordinary``, so a user who
types "<|end|>" gets the characters, never the marker.

The loss mask marks a token True when the model is trained to produce it: the content of every assistant
message and its closing ``<|end|>``. Role markers, the system and user turns are False: they are given, not
predicted. ``sft_batch`` shifts the mask with the ids: position ``t`` reads ``ids[t]`` and is scored on
``ids[t + 1]`` only if ``mask[t + 1]``; its label is ``IGNORE_INDEX`` otherwise (and on padding).

Checked in tests/test_finetune.py: the ids equal the tokenizer's encoding of the rendered text, the mask token
by token on a hand-worked example, padding changes no loss, ``sft_loss`` equals the masked cross-entropy.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion._checks import check_bool, check_labels, check_positive_int, check_token_id
from companion.finetune.logprobs import IGNORE_INDEX, check_labelled_batch

__all__ = ["ROLES", "ROLE_TOKENS", "END", "CHAT_TOKENS", "add_chat_tokens", "grow_token_rows", "chat_template",
           "encode_chat", "encode_prompt", "sft_batch", "sft_loss", "JINJA_CHAT_TEMPLATE"]  # fmt: skip

ROLES = ("system", "user", "assistant")
ROLE_TOKENS = {"system": "<|system|>", "user": "<|user|>", "assistant": "<|assistant|>"}  # opens a message
END = "<|end|>"  # closes every message; for the assistant it is also "stop generating"
CHAT_TOKENS = (*ROLE_TOKENS.values(), END)
# chat_template in Jinja, for tokenizer_config.json: transformers' apply_chat_template renders the same text
JINJA_CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|' + message['role'] + '|>' + message['content'] + "
                       "'<|end|>' }}{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


def add_chat_tokens(tokenizer: Any) -> dict[str, int]:
    """Register the four chat markers as special tokens of a ``BPETokenizer``, after its vocabulary (ids
    V, V+1, V+2, V+3), unless they are there already; return ``{marker: id}``.

    A model trained before they were added needs ``vocab_size`` rows for them: build it with the tokenizer's
    ``vocab_size`` after this call.
    """
    if not hasattr(tokenizer, "register_special_tokens") or not hasattr(tokenizer, "special_tokens"):
        raise TypeError(f"tokenizer must be a companion BPETokenizer (special tokens), got {type(tokenizer).__name__}")
    missing = [t for t in CHAT_TOKENS if t not in tokenizer.special_tokens]
    start = tokenizer.vocab_size
    tokenizer.register_special_tokens({t: start + i for i, t in enumerate(missing)})
    return {t: tokenizer.special_tokens[t] for t in CHAT_TOKENS}


def grow_token_rows(state: Mapping[str, Tensor], vocab_size: int) -> dict[str, Tensor]:
    """A GPT state dict with ``vocab_size`` rows in its token table and output head, for tokens added to the
    tokenizer after training (``add_chat_tokens``). The new rows start at the mean of the old ones (Hewitt 2021,
    "Initializing new word embeddings"): the model's outputs on old tokens barely move, and a new token's logit
    starts at the average logit, neither dominant nor impossible. A tied head stays tied (both entries grow alike).

    Raises ``ValueError`` if ``vocab_size`` is smaller than the table.
    """
    out = dict(state)
    for key in ("embed.token.weight", "lm_head.weight"):
        old = state[key]  # (V_old, D)
        if vocab_size < old.size(0):
            raise ValueError(f"vocab_size={vocab_size} is smaller than the {old.size(0)} rows of {key}; expected more")
        extra = old.float().mean(0, keepdim=True).to(old.dtype).expand(vocab_size - old.size(0), -1)  # (V_new, D)
        out[key] = torch.cat([old, extra])  # (vocab_size, D)
    return out


def _check_messages(messages: Any) -> list[tuple[str, str]]:
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise TypeError(f"messages must be a non-empty list of {{'role', 'content'}} dicts, got {messages!r:.80}")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise TypeError(f"messages[{i}] must be a dict with 'role' and 'content', got {m!r:.80}")
        role, content = m["role"], m["content"]
        if role not in ROLES:
            raise ValueError(f"messages[{i}]['role']={role!r} is not a role of the template; expected one of "
                             f"{', '.join(map(repr, ROLES))}")
        if not isinstance(content, str):
            raise TypeError(f"messages[{i}]['content'] must be a str, got {type(content).__name__}")
        if role == "system" and i != 0:
            raise ValueError(f"messages[{i}] is a system message; expected it first (messages[0]) or not at all")
        out.append((role, content))
    return out


def chat_template(messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = False) -> str:
    """The conversation as text: ``<|role|>content<|end|>`` per message (then ``<|assistant|>`` to generate)."""
    check_bool("add_generation_prompt", add_generation_prompt)
    text = "".join(f"{ROLE_TOKENS[role]}{content}{END}" for role, content in _check_messages(messages))
    return text + (ROLE_TOKENS["assistant"] if add_generation_prompt else "")


def _chat_ids(tokenizer: Any) -> dict[str, int]:
    specials = getattr(tokenizer, "special_tokens", None)
    if not isinstance(specials, Mapping) or not hasattr(tokenizer, "encode_ordinary"):
        raise TypeError(f"tokenizer must be a companion BPETokenizer, got {type(tokenizer).__name__}")
    missing = [t for t in CHAT_TOKENS if t not in specials]
    if missing:
        raise ValueError(f"tokenizer has no special tokens {missing}; call add_chat_tokens(tokenizer) first")
    return {t: specials[t] for t in CHAT_TOKENS}


def encode_chat(messages: Sequence[Mapping[str, str]], tokenizer: Any) -> tuple[list[int], list[bool]]:
    """Token ids of ``chat_template(messages)`` and the loss mask: True for each token the model is trained to
    write (assistant content and its ``<|end|>``), False for role markers and the other turns."""
    ids_of = _chat_ids(tokenizer)
    ids: list[int] = []
    mask: list[bool] = []
    for role, content in _check_messages(messages):
        body = tokenizer.encode_ordinary(content) + [ids_of[END]]  # content, then <|end|>
        trained = role == "assistant"
        ids += [ids_of[ROLE_TOKENS[role]]] + body
        mask += [False] + [trained] * len(body)
    return ids, mask


def encode_prompt(messages: Sequence[Mapping[str, str]], tokenizer: Any) -> list[int]:
    """Ids of the conversation so far followed by ``<|assistant|>``: what the model continues to answer."""
    ids, _ = encode_chat(messages, tokenizer)
    return ids + [_chat_ids(tokenizer)[ROLE_TOKENS["assistant"]]]


def sft_batch(
    examples: Sequence[tuple[Sequence[int], Sequence[bool]]], pad_id: int, max_len: int | None = None
) -> tuple[Tensor, Tensor]:
    """Pad ``(ids, mask)`` pairs from ``encode_chat`` into ``(inputs, labels)`` for ``sft_loss``.

    ``inputs[b, t] = ids[t]`` and ``labels[b, t] = ids[t + 1]`` where ``mask[t + 1]``, else ``IGNORE_INDEX``;
    rows are right-padded with ``pad_id`` (labels ``IGNORE_INDEX``) to the longest, ``len(ids) - 1`` positions.
    Right padding cannot change the scored positions of a causal model: they never attend to later tokens.

    Raises ``ValueError`` for an example longer than ``max_len + 1`` ids (naming it), one with no trained
    token, or ids and mask of different lengths.
    Shapes: -> inputs (B, T) int64, labels (B, T) int64.
    """
    check_token_id("pad_id", pad_id)
    if max_len is not None:
        check_positive_int("max_len", max_len)
    if not isinstance(examples, Sequence) or not examples:
        raise TypeError(f"examples must be a non-empty list of (ids, mask) pairs, got {type(examples).__name__}")
    rows = []
    for i, example in enumerate(examples):
        if not isinstance(example, (tuple, list)) or len(example) != 2:
            raise TypeError(f"examples[{i}] must be a pair (ids, mask) from encode_chat")
        ids, mask = list(example[0]), [bool(m) for m in example[1]]
        bad = next((t for t in ids if isinstance(t, bool) or not isinstance(t, int) or t < 0), None)
        if bad is not None:
            raise ValueError(f"examples[{i}] holds the id {bad!r}; expected token ids, ints >= 0 (from encode_chat)")
        if len(ids) != len(mask):
            raise ValueError(f"examples[{i}] has {len(ids)} ids but a mask of {len(mask)}; expected equal lengths")
        if max_len is not None and len(ids) - 1 > max_len:
            raise ValueError(f"examples[{i}] has {len(ids)} ids, {len(ids) - 1} positions; expected at most "
                             f"max_len={max_len} (drop or shorten it)")
        labels = [t if m else IGNORE_INDEX for t, m in zip(ids[1:], mask[1:])]
        if all(label == IGNORE_INDEX for label in labels):
            raise ValueError(f"examples[{i}] has no trained token (no assistant reply after the first token)")
        rows.append((ids[:-1], labels))
    width = max(len(x) for x, _ in rows)
    inputs = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, T)
    labels = torch.full((len(rows), width), IGNORE_INDEX, dtype=torch.long)  # (B, T)
    for b, (x, y) in enumerate(rows):
        inputs[b, : len(x)] = torch.tensor(x)
        labels[b, : len(y)] = torch.tensor(y)
    return inputs, labels


def sft_loss(model: nn.Module, batch: tuple[Tensor, Tensor]) -> Tensor:
    """Mean cross-entropy over the scored positions of an ``sft_batch`` (every response token weighs the same).

    Raises ``ValueError`` for a batch that scores no position, or labels outside ``[0, V)`` other than
    ``IGNORE_INDEX``; ``TypeError`` for labels that are not integers.
    Shapes: batch (inputs (B, T), labels (B, T)) -> scalar.
    """
    inputs, labels = check_labelled_batch(batch)
    logits = model(inputs)  # (B, T, V)
    check_labels("labels", labels, logits.size(-1), ignore_index=IGNORE_INDEX, bound="vocab_size",
                 require_scored=True)  # fmt: skip
    # float32 for the log-softmax even when the model runs in half precision
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), labels.reshape(-1), ignore_index=IGNORE_INDEX)

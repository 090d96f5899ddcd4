"""``companion-train --chat FILE`` and ``--dpo FILE``: JSON Lines of conversations and of preference pairs.

One example per line, in the forms ``trl`` and most data sets use (chapter 13)::

    {"messages": [{"role": "user", "content": "Translate: 我爱NLP"}, {"role": "assistant", "content": "I love NLP"}]}
    {"prompt": "Translate: 我爱NLP", "chosen": "I love NLP", "rejected": "NLP love I"}

A chat line holds one conversation: messages with roles ``system`` (first, optional), ``user`` and ``assistant``,
and at least one assistant message (the only text trained on: the loss mask of ``companion.finetune.encode_chat``).
A preference line becomes two one-turn conversations that share the prompt as a user turn, one answered with
``chosen``, one with ``rejected`` (the pair that ``dpo_loss`` compares). Blank lines are skipped.

``read_examples(path, kind)`` checks every line before anything is written and stops at the first bad one with a
``ValueError`` that names the file, the line number and what was expected. ``encode_examples`` renders them with
the chat template and leaves out, by line number, an example longer than the model's window (the run says so).
``split_examples`` keeps the last 10 % (at least one) for validation, as ``companion.data.TokenData`` does with a
text: a contiguous cut, the same every time.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from companion._checks import plural
from companion.data import VAL_FRACTION, read_text_file
from companion.finetune import ROLES, encode_chat

__all__ = ["KINDS", "Example", "read_examples", "encode_examples", "dropped_note", "split_examples"]

KINDS = ("chat", "dpo")  # --chat FILE, --dpo FILE
_FORMS = {
    "chat": '{"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}',
    "dpo": '{"prompt": "...", "chosen": "...", "rejected": "..."}',
}


@dataclass(frozen=True)
class Example:
    """One line of the file: a conversation (``--chat``) or the two answered conversations of a pair (``--dpo``)."""

    line: int  # its line number in the file, from 1
    chats: tuple[list[dict[str, str]], ...]  # (conversation,) or (chosen conversation, rejected conversation)


def _messages(value: Any, where: str) -> list[dict[str, str]]:
    if not isinstance(value, list) or not value:
        raise ValueError(f"{where}: \"messages\" is {json.dumps(value)[:60]}; expected a non-empty list of "
                         "{\"role\": ..., \"content\": ...} objects")
    for i, m in enumerate(value):
        if not isinstance(m, dict) or set(m) - {"role", "content"} or "role" not in m or "content" not in m:
            raise ValueError(f"{where}: messages[{i}] is {json.dumps(m, ensure_ascii=False)[:60]}; expected an object "
                             "with exactly \"role\" and \"content\"")
        if m["role"] not in ROLES:
            raise ValueError(f"{where}: messages[{i}] has role {json.dumps(m['role'], ensure_ascii=False)[:30]}; "
                             f"expected one of {', '.join(ROLES)}")
        if not isinstance(m["content"], str):
            raise ValueError(f"{where}: messages[{i}] has content of type {type(m['content']).__name__}; expected "
                             "a string")
        if m["role"] == "system" and i != 0:
            raise ValueError(f"{where}: messages[{i}] is a system message; expected it first or not at all")
    if not any(m["role"] == "assistant" for m in value):
        raise ValueError(f"{where}: the conversation has no assistant message; expected at least one (the text the "
                         "model is trained to write)")
    return [{"role": m["role"], "content": m["content"]} for m in value]


def _pair(value: dict[str, Any], where: str) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    for key in ("prompt", "chosen", "rejected"):
        if not isinstance(value[key], str) or not value[key]:
            raise ValueError(f"{where}: \"{key}\" is {json.dumps(value[key], ensure_ascii=False)[:40]}; expected a "
                             "non-empty string")
    if value["chosen"] == value["rejected"]:
        raise ValueError(f"{where}: \"chosen\" and \"rejected\" are the same text; expected two different answers")
    user = {"role": "user", "content": value["prompt"]}
    return ([user, {"role": "assistant", "content": value["chosen"]}],
            [user, {"role": "assistant", "content": value["rejected"]}])  # fmt: skip


def read_examples(path: str | Path, kind: str) -> tuple[list[Example], str]:
    """The examples of a ``--chat`` or ``--dpo`` file and the file's text (to keep a copy and its fingerprint).

    Raises ``FileNotFoundError`` for a missing file, ``ValueError`` naming the line for the first bad line, and
    ``ValueError`` for a file with fewer than two examples (one to train on, one to validate with).
    """
    flag = f"--{kind}"
    text = read_text_file(path)  # UTF-8, not empty, not binary: named by the file
    keys = {"chat": {"messages"}, "dpo": {"prompt", "chosen", "rejected"}}[kind]
    examples = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{flag} {str(path)!r} line {number}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{where} is not valid JSON ({err.msg} at column {err.colno}); expected one object per "
                             f"line: {_FORMS[kind]}") from None
        if not isinstance(value, dict) or set(value) != keys:
            got = sorted(value) if isinstance(value, dict) else type(value).__name__
            raise ValueError(f"{where} has {got}; expected an object with the keys {sorted(keys)}: {_FORMS[kind]}")
        chats = (_messages(value["messages"], where),) if kind == "chat" else _pair(value, where)
        examples.append(Example(number, chats))
    if len(examples) < 2:
        raise ValueError(f"{flag} {str(path)!r} holds {plural(len(examples), 'example')}; expected at least 2 (the "
                         "last 10 %, at least one, is the validation split)")
    return examples, text


def encode_examples(examples: Sequence[Example], tokenizer: Any, window: int, path: str | Path,
                    kind: str) -> tuple[list[tuple[tuple[list[int], list[bool]], ...]], list[int]]:  # fmt: skip
    """Each example's conversations as ``encode_chat`` ``(ids, mask)`` pairs, and the line numbers of the examples
    left out because a conversation has more than ``window + 1`` tokens (the model reads ``window`` at once; a
    cut conversation would teach replies that stop in the middle). ``ValueError`` if that leaves fewer than two."""
    out, dropped = [], []
    for example in examples:
        encoded = tuple(encode_chat(chat, tokenizer) for chat in example.chats)
        if max(len(ids) for ids, _ in encoded) > window + 1:
            dropped.append(example.line)
        else:
            out.append(encoded)
    if len(out) < 2:
        raise ValueError(f"--{kind} {str(path)!r}: {plural(len(dropped), 'example')} of {len(examples)} are longer "
                         f"than --seq-len {window} tokens with the chat template, which leaves {len(out)}; expected "
                         "at least 2: shorten them, or pass a larger --seq-len (up to the model's context)")
    return out, dropped


def dropped_note(dropped: list[int], window: int, unit: str) -> str | None:
    """What a run says about the examples ``encode_examples`` left out (None if none)."""
    if not dropped:
        return None
    lines = ", ".join(map(str, dropped[:8])) + (", ..." if len(dropped) > 8 else "")
    return (f"{plural(len(dropped), unit)} longer than --seq-len {window} tokens with the chat template left out "
            f"(line {lines}); a larger --seq-len (up to the model's context) keeps them")


def split_examples(items: list[Any]) -> tuple[list[Any], list[Any]]:
    """(training, validation): the last 10 % of the examples, at least one, validate."""
    n_val = max(1, int(len(items) * VAL_FRACTION))
    return items[:-n_val], items[-n_val:]


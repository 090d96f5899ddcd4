"""Instruction data for supervised fine-tuning and preference pairs (chapter 13), made from the course itself.

Nothing is downloaded. Every example is an instruction with a known answer, built from:

- the book's bilingual glossary (``book/appendix/glossary.md``, a Markdown table English | 中文 | definition):
  three questions per term, "What is X?" (its definition), "What is X in Chinese?" and "“中文”的英文是什么？";
- the self-check appendix (``book/appendix/self_check.md``): each question with the first sentence of its answer;
  both keep the chapter each entry belongs to, so a chapter can take the entries of chapters 0 to N only;
- chapter 8's toy zh→en translation (:mod:`companion.data.translation`): "Translate into English: 我爱NLP"
  -> "I love NLP", as many as wanted, with answers known from the grammar.

``split_by_key`` holds out whole keys (a glossary term with its three questions, a sentence, a self-check
question), so no held-out question has a sibling in the training set. ``swap_adjacent_words`` makes the
rejected answer of a preference pair: the right words with two neighbours exchanged, an error of word order.

Checked in tests/test_instructions.py: the parsers on the real appendix pages and on small hand-written
tables, the families and their answers, splits that share no key, and the corruption.
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass

from companion._checks import check_positive_int, check_probability, check_string
from companion.data.translation import Pair, detokenize

__all__ = ["GLOSSARY_FAMILIES", "GlossaryTerm", "SelfCheckQuestion", "Instruction", "glossary_terms",
           "self_check_questions", "glossary_instructions", "self_check_instructions", "translation_instructions",
           "split_by_key", "swap_adjacent_words", "first_sentence"]  # fmt: skip


GLOSSARY_FAMILIES = ("define", "en→zh", "zh→en")  # the three questions asked about each glossary term


@dataclass(frozen=True)
class GlossaryTerm:
    """One row of the glossary."""

    english: str  # the term, without its bracketed abbreviation: "batch normalisation", not "... (BatchNorm)"
    chinese: str  # 中文术语
    definition: str  # the one-line definition
    chapter: str = ""  # the notebook that introduces it ("11_train_your_gpt"), from the row's link


@dataclass(frozen=True)
class SelfCheckQuestion:
    """One question of the self-check page."""

    question: str
    answer: str  # the first sentence of the answer
    chapter: str = ""  # the notebook of its section ("03_attention"), from the section's "Chapter: [...](...)" line


@dataclass(frozen=True)
class Instruction:
    """An instruction with its known answer."""

    family: str  # the task: "define", "en→zh", "zh→en", "self-check" or "translate"
    prompt: str  # what the user says
    answer: str  # what the assistant should say
    key: str  # what held-out splits group by (the term, the question, the sentence)


def glossary_terms(markdown: str) -> list[GlossaryTerm]:
    """The rows of the glossary's Markdown table ``| English | 中文 | Definition | Introduced in |``."""
    check_string("markdown", markdown, allow_empty=True)
    terms = []
    for line in markdown.splitlines():
        # split on the table's pipes, not on escaped ones inside a cell (`<\|endoftext\|>`)
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        header = cells[0] in ("English", "") or set(cells[0]) <= {"-"}
        if len(cells) != 4 or not line.lstrip().startswith("|") or header:
            continue
        english = re.sub(r"\s*\([^)]*\)", "", cells[0]).strip()  # "ALiBi (attention with linear biases)" -> "ALiBi"
        terms.append(GlossaryTerm(english, cells[1], cells[2], _notebook(cells[3])))
    if not terms:
        raise ValueError("markdown holds no glossary table (| English | 中文 | Definition | Introduced in |)")
    return terms


def _notebook(text: str) -> str:
    """The stem of the first ``.ipynb`` a Markdown link points to: "[Tokens](../01_tokens.ipynb)" -> "01_tokens"."""
    match = re.search(r"\(([^)]*?)([^/()]+)\.ipynb\)", text)
    return match.group(2) if match else ""


def first_sentence(text: str) -> str:
    """The first sentence of ``text`` (up to the first ``.``, ``!`` or ``?`` followed by a space or the end)."""
    check_string("text", text, allow_empty=True)
    flat = " ".join(text.split())
    match = re.match(r"(.+?[.!?])(\s|$)", flat)
    return match.group(1) if match else flat


def self_check_questions(markdown: str) -> list[SelfCheckQuestion]:
    """Every ``{dropdown}`` of the self-check page: its question, the first sentence of its answer, and the
    chapter of the section it is in (the last "Chapter: [...](NN_x.ipynb)" line above it)."""
    check_string("markdown", markdown, allow_empty=True)
    out = []
    pattern = re.compile(r"^(`{3,}|:{3,})\{dropdown\} (.+?)\n(.+?)\n\1\s*$", re.S | re.M)
    for match in pattern.finditer(markdown):
        before = re.findall(r"^Chapter: .*$", markdown[: match.start()], re.M)
        chapter = _notebook(before[-1]) if before else ""
        out.append(SelfCheckQuestion(match.group(2).strip(), first_sentence(match.group(3)), chapter))
    if not out:
        raise ValueError("markdown holds no {dropdown} question")
    return out


def glossary_instructions(terms: Sequence[GlossaryTerm]) -> list[Instruction]:
    """Three questions per term, in English and in Chinese (the key is the English term)."""
    out = []
    for t in _items("terms", terms, GlossaryTerm, "glossary_terms"):
        out += [Instruction("define", f"What is {t.english}?", t.definition, t.english),
                Instruction("en→zh", f"What is {t.english} in Chinese?", t.chinese, t.english),
                Instruction("zh→en", f"“{t.chinese}”的英文是什么？", t.english, t.english)]  # fmt: skip
    return out


def self_check_instructions(questions: Sequence[SelfCheckQuestion]) -> list[Instruction]:
    """One instruction per question: the question, the first sentence of its answer."""
    questions = _items("questions", questions, SelfCheckQuestion, "self_check_questions")
    return [Instruction("self-check", q.question, q.answer, q.question) for q in questions]


def translation_instructions(pairs: Sequence[Pair]) -> list[Instruction]:
    """Chapter 8's sentence pairs as instructions: the Chinese words joined, the English detokenized."""
    out = []
    for i, pair in enumerate(_items("pairs", pairs, (tuple, list), "toy_translation")):
        if len(pair) != 2 or not all(isinstance(side, Sequence) for side in pair):
            raise TypeError(f"pairs[{i}]={pair!r:.60} is not a (Chinese words, English words) pair")
        zh, en = pair
        source = "".join(zh)
        out.append(Instruction("translate", f"Translate into English: {source}", detokenize(en), source))
    return out


def split_by_key(
    instructions: Sequence[Instruction], held_out: float, seed: int = 0
) -> tuple[list[Instruction], list[Instruction]]:
    """``(train, test)``: a random ``held_out`` fraction of the keys of each family, with all their questions,
    goes to test. Order within each part is kept."""
    instructions = _items("instructions", instructions, Instruction, "glossary_instructions")
    check_probability("held_out", held_out)
    check_positive_int("seed", seed, allow_zero=True)
    rng = random.Random(seed)

    def group(i: Instruction) -> str:  # one glossary term is three questions: held out together
        return "glossary" if i.family in GLOSSARY_FAMILIES else i.family

    test_keys: set[tuple[str, str]] = set()
    for g in sorted({group(i) for i in instructions}):
        keys = sorted({i.key for i in instructions if group(i) == g})
        rng.shuffle(keys)
        test_keys |= {(g, k) for k in keys[: round(held_out * len(keys))]}
    train = [i for i in instructions if (group(i), i.key) not in test_keys]
    test = [i for i in instructions if (group(i), i.key) in test_keys]
    return train, test


def _items(name: str, items: object, kind: type | tuple[type, ...], maker: str) -> list:
    """``items`` as a list, or ``TypeError`` naming the first entry that is not a ``kind`` (made by ``maker``)."""
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(f"{name} must be a list (from {maker}), got {type(items).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, kind):
            expected = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            raise TypeError(f"{name}[{i}] is of type {type(item).__name__}; expected {expected} (from {maker})")
    return list(items)


def swap_adjacent_words(answer: str, rng: random.Random) -> str:
    """``answer`` with one pair of neighbouring words exchanged (chosen by ``rng``; never two equal words).

    "The teacher bought this cat" -> "The teacher bought cat this". Raises ``ValueError`` for an answer with
    no two different neighbouring words.
    """
    check_string("answer", answer, allow_empty=True)
    if not isinstance(rng, random.Random):
        raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
    words = answer.split()
    spots = [i for i in range(len(words) - 1) if words[i] != words[i + 1]]
    if not spots:
        raise ValueError(f"answer={answer!r} has no two different neighbouring words to swap")
    i = rng.choice(spots)
    words[i], words[i + 1] = words[i + 1], words[i]
    return " ".join(words)

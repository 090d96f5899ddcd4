"""companion.data.instructions: instructions with known answers, from the book's appendix and chapter 8's grammar."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from companion.data import (
    GlossaryTerm,
    SelfCheckQuestion,
    glossary_instructions,
    glossary_terms,
    self_check_instructions,
    self_check_questions,
    split_by_key,
    swap_adjacent_words,
    toy_translation,
    translation_instructions,
)
from companion.data.instructions import first_sentence

APPENDIX = Path(__file__).resolve().parents[1] / "book" / "appendix"

TABLE = """# Glossary

| English | 中文 | Definition | Introduced in |
|---|---|---|---|
| attention head | 注意力头 | one of the H parallel attentions | [Multi-head](../04.ipynb) |
| ALiBi (attention with linear biases) | 线性偏置注意力 | subtracts m·(i − j) from the scores | [Pos](../05.ipynb) |
"""

SELF_CHECK = """## A chapter

Chapter: [Tokens](../01_tokens.ipynb).

````{dropdown} What is a token?
One piece of text. It may be a word.

*Source: notes.*
````

```{dropdown} Why mask?
So that a position cannot see the future!
```
"""


def test_glossary_table_is_parsed_and_asked_three_ways() -> None:
    terms = glossary_terms(TABLE)
    assert terms == [GlossaryTerm("attention head", "注意力头", "one of the H parallel attentions", "04"),
                     GlossaryTerm("ALiBi", "线性偏置注意力", "subtracts m·(i − j) from the scores", "05")]  # fmt: skip
    asked = glossary_instructions(terms[:1])
    assert [(i.family, i.prompt, i.answer) for i in asked] == [
        ("define", "What is attention head?", "one of the H parallel attentions"),
        ("en→zh", "What is attention head in Chinese?", "注意力头"),
        ("zh→en", "“注意力头”的英文是什么？", "attention head"),
    ]
    assert {i.key for i in asked} == {"attention head"}
    with pytest.raises(ValueError, match="no glossary table"):
        glossary_terms("# nothing here")


def test_self_check_dropdowns_give_the_first_sentence() -> None:
    assert self_check_questions(SELF_CHECK) == [
        SelfCheckQuestion("What is a token?", "One piece of text.", "01_tokens"),
        SelfCheckQuestion("Why mask?", "So that a position cannot see the future!", "01_tokens"),
    ]
    assert first_sentence("e^x is\n  positive. Always.") == "e^x is positive."
    assert first_sentence("no full stop") == "no full stop"
    with pytest.raises(ValueError, match="no {dropdown}"):
        self_check_questions("text")


def test_the_real_appendix_pages() -> None:
    """The book's own pages parse: every glossary row and every self-check question becomes an instruction."""
    glossary = (APPENDIX / "glossary.md").read_text(encoding="utf-8")
    rows = [line for line in glossary.splitlines() if line.startswith("| ") and not line.startswith("| English")]
    terms = glossary_terms(glossary)
    assert len(terms) == len(rows) > 100 and all(t.chinese and t.definition and t.chapter for t in terms)
    assert [t for t in terms if t.english == "special token"][0].definition.startswith("a reserved token such as `<|")
    questions = self_check_questions((APPENDIX / "self_check.md").read_text(encoding="utf-8"))
    assert len(questions) > 50 and sum(q.question.endswith("?") for q in questions) > 0.9 * len(questions)
    assert {q.chapter for q in questions} >= {"00_overview", "03_attention", "11_train_your_gpt"}
    assert len(self_check_instructions(questions)) == len(questions)


def test_translations_keep_the_grammars_answers() -> None:
    pairs = toy_translation(seed=0).test
    made = translation_instructions(pairs)
    assert len(made) == len(pairs)
    running = [i for i in made if i.key == "我爱NLP"]
    assert running and running[0].prompt == "Translate into English: 我爱NLP" and running[0].answer == "I love NLP"


def test_split_holds_out_whole_keys() -> None:
    terms = [GlossaryTerm(f"term {k}", f"术语{k}", f"definition {k}") for k in range(20)]
    made = glossary_instructions(terms) + translation_instructions(toy_translation(seed=0).train[:50])
    train, test = split_by_key(made, held_out=0.2, seed=0)
    assert len(train) + len(test) == len(made)
    assert not {i.key for i in train} & {i.key for i in test}  # no question of a held-out key is trained
    held_terms = {i.key for i in test if i.family != "translate"}
    assert len(held_terms) == 4 and sum(i.family != "translate" for i in test) == 12  # 20 % of 20 terms, 3 each
    assert split_by_key(made, 0.2, seed=0) == (train, test) and split_by_key(made, 0.2, seed=1) != (train, test)
    with pytest.raises(ValueError, match="held_out"):
        split_by_key(made, 1.5)


def test_swap_adjacent_words() -> None:
    rng = random.Random(0)
    for answer in ("They read his book at home", "Did the teacher buy two cats?", "I love NLP"):
        bad = swap_adjacent_words(answer, rng)
        assert bad != answer and sorted(bad.split()) == sorted(answer.split())
        diff = [k for k, (a, b) in enumerate(zip(answer.split(), bad.split())) if a != b]
        assert len(diff) == 2 and diff[1] == diff[0] + 1  # exactly two neighbours exchanged
    with pytest.raises(ValueError, match="no two different neighbouring words"):
        swap_adjacent_words("yes yes", rng)

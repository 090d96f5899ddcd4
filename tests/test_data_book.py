"""companion.data.book: the frozen snapshot of chapters 0-11 that chapters 11-14 train on."""

from __future__ import annotations

import json
import lzma
import pathlib

import pytest

from companion.data import Book, book_snapshot, read_book, write_book_snapshot

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _notebook(path: pathlib.Path, cells: list[tuple[str, str]]) -> None:
    nb = {"cells": [{"cell_type": kind, "id": f"c{i}", "metadata": {}, "source": text.splitlines(True),
                     **({"outputs": [], "execution_count": None} if kind == "code" else {})}
                    for i, (kind, text) in enumerate(cells)],
          "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
    path.write_text(json.dumps(nb), encoding="utf-8")


@pytest.fixture
def tiny_book(tmp_path: pathlib.Path) -> pathlib.Path:
    book = tmp_path / "book"
    (book / "appendix").mkdir(parents=True)
    _notebook(book / "00_overview.ipynb", [("markdown", "# Zero\n\nfirst"), ("code", "x = 1"), ("raw", "skip")])
    _notebook(book / "01_tokens.ipynb", [("markdown", "# One"), ("markdown", "second\nline")])
    _notebook(book / "12_family.ipynb", [("markdown", "# Twelve: not in the snapshot")])
    (book / "appendix" / "glossary.md").write_text("| term | 术语 |\n", encoding="utf-8")
    (book / "appendix" / "self_check.md").write_text("## Questions\n", encoding="utf-8")
    return book


def test_read_book_keeps_the_sources_of_chapters_0_to_11(tiny_book: pathlib.Path) -> None:
    book = read_book(tiny_book)
    assert sorted(book.chapters) == [0, 1]
    assert book.chapters[0] == [{"cell_type": "markdown", "source": "# Zero\n\nfirst"},
                                {"cell_type": "code", "source": "x = 1"}]
    assert book.prose() == "# Zero\n\nfirst\n\n# One\n\nsecond\nline"
    assert book.prose(1, 1) == "# One\n\nsecond\nline"
    assert book.glossary == "| term | 术语 |\n" and book.self_check == "## Questions\n"


def test_the_written_snapshot_reads_back_equal(tiny_book: pathlib.Path, tmp_path: pathlib.Path) -> None:
    target = tmp_path / "snap.json.xz"
    written = write_book_snapshot(tiny_book, target)
    payload = json.loads(lzma.decompress(target.read_bytes()))
    again = Book({int(n): cells for n, cells in payload["chapters"].items()}, payload["glossary"],
                 payload["self_check"])
    assert again == written == read_book(tiny_book)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["book", "snap.json.xz"]  # no temporary file left


def test_the_shipped_snapshot_is_this_book_s_chapters_in_order() -> None:
    book = book_snapshot()
    assert sorted(book.chapters) == list(range(12))
    assert len(book.prose(0, 10)) > 300_000 and book.prose().startswith(book.prose(0, 10))
    assert "自注意力" in book.glossary and "self-attention" in book.glossary
    assert book.self_check.count("{dropdown}") > 50
    live = ROOT / "book"
    for n, cells in book.chapters.items():  # each chapter's title is the live chapter's title
        path = next(live.glob(f"{n:02d}_*.ipynb"))
        title = next(c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "markdown")
        assert cells[0]["source"].splitlines()[0] == "".join(title["source"]).splitlines()[0], path.name


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="folder="):
        read_book(ROOT / "tests")
    with pytest.raises(ValueError, match="first=5, last=2"):
        book_snapshot().prose(5, 2)
    with pytest.raises(ValueError, match="last=12"):
        book_snapshot().prose(0, 12)
    with pytest.raises(TypeError, match="first"):
        book_snapshot().prose("0", 3)

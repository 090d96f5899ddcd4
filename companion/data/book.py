"""The book as data: a frozen snapshot of chapters 0-11 and of two appendices, for the chapters that train on it.

Chapters 11 to 14 train models on the course's own text: chapter 11 a GPT on the prose of chapters 0-10,
chapter 12 an encoder on the paragraphs of chapters 1-11 (labelled by chapter), chapters 13 and 14 a GPT on the
prose of chapters 0-11, chapter 13 also instructions made from the glossary and the self-check questions. Read
from the live book, every edit of a comma in chapter 2 would change the tokenizer, every number those chapters
print, and the prose that quotes them. So they read a snapshot instead: the cells' source (no outputs) of
chapters 0-11 and the text of ``appendix/glossary.md`` and ``appendix/self_check.md``, shipped in the package
(``data_files/book_snapshot.json.xz``, about 0.2 MB) so that it is also there on Colab.

- ``book_snapshot()``: the shipped snapshot, a :class:`Book`.
- ``read_book(folder)``: the same from a ``book/`` folder of the repository (the live text).
- ``write_book_snapshot(folder, path)``: make a snapshot (``scripts/book_snapshot.py``), written atomically.

``Book.prose(first, last)`` is the markdown cells of chapters ``first``..``last`` in order, joined by blank lines:
chapter 11's corpus is ``prose(0, 10)``.
"""

from __future__ import annotations

import json
import lzma
import os
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

from companion._checks import check_positive_int
from companion._files import atomic_write_bytes

__all__ = ["Book", "book_snapshot", "read_book", "write_book_snapshot"]

SNAPSHOT = "data_files/book_snapshot.json.xz"
LAST_CHAPTER = 11  # the snapshot holds chapters 0..11


@dataclass(frozen=True)
class Book:
    """Chapters 0-11 (``chapters[n]``: a list of ``{"cell_type", "source"}`` with ``source`` one string) and the
    text of the glossary and of the self-check appendix."""

    chapters: dict[int, list[dict[str, str]]]
    glossary: str
    self_check: str

    def prose(self, first: int = 0, last: int = LAST_CHAPTER) -> str:
        """The markdown cells of chapters ``first`` to ``last`` (both included), in order, joined by blank lines."""
        check_positive_int("first", first, allow_zero=True)
        check_positive_int("last", last, allow_zero=True)
        if not first <= last <= LAST_CHAPTER:
            raise ValueError(f"first={first}, last={last}: expected 0 <= first <= last <= {LAST_CHAPTER}")
        return "\n\n".join(cell["source"] for n in range(first, last + 1) for cell in self.chapters.get(n, [])
                           if cell["cell_type"] == "markdown")


def read_book(folder: str | os.PathLike[str]) -> Book:
    """The chapters 0-11 and the two appendices of the ``book/`` folder ``folder``, as they are now.

    Raises:
        ValueError: ``folder`` has no ``NN_*.ipynb`` chapters or no ``appendix/glossary.md``.
    """
    folder = Path(folder)
    found = sorted(folder.glob("[0-9][0-9]_*.ipynb"))
    if not found or not (folder / "appendix" / "glossary.md").is_file():
        raise ValueError(f"folder={str(folder)!r} holds no book: expected NN_*.ipynb chapters and "
                         "appendix/glossary.md (the repository's book/ folder)")
    chapters = {}
    for path in found:
        if int(path.name[:2]) <= LAST_CHAPTER:
            cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
            chapters[int(path.name[:2])] = [{"cell_type": c["cell_type"], "source": "".join(c["source"])}
                                            for c in cells if c["cell_type"] in ("markdown", "code")]
    appendix = folder / "appendix"
    return Book(chapters, (appendix / "glossary.md").read_text(encoding="utf-8"),
                (appendix / "self_check.md").read_text(encoding="utf-8"))


def write_book_snapshot(folder: str | os.PathLike[str], path: str | os.PathLike[str]) -> Book:
    """Write the snapshot of ``folder`` (see :func:`read_book`) to ``path`` as xz-compressed JSON, atomically."""
    book = read_book(folder)
    payload = {"chapters": {str(n): cells for n, cells in book.chapters.items()}, "glossary": book.glossary,
               "self_check": book.self_check}
    data = json.dumps(payload, ensure_ascii=False, indent=0, sort_keys=True).encode("utf-8")
    atomic_write_bytes(path, lzma.compress(data, preset=9))
    return book


@lru_cache(maxsize=1)
def book_snapshot() -> Book:
    """The snapshot shipped with the package (read once)."""
    data = resources.files("companion").joinpath(SNAPSHOT).read_bytes()
    payload = json.loads(lzma.decompress(data))
    return Book({int(n): cells for n, cells in payload["chapters"].items()}, payload["glossary"],
                payload["self_check"])

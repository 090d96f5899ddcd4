"""What the command-line tests share: a tiny model's flags, an in-process ``companion-train``, the one-line error
check, and the course's little corpus as a file."""

from __future__ import annotations

from pathlib import Path

import pytest

from companion.cli.train import main as train_main
from companion.data import char_corpus

TINY = ["--tokenizer", "char", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--seq-len", "16",
        "--batch-size", "4", "--eval-every", "5", "--eval-windows", "4", "--no-progress"]  # fmt: skip


def train(*args: str | Path) -> int:
    """``companion-train`` called in-process; returns its exit code."""
    return train_main([str(a) for a in args])


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command printed on stderr (and no traceback)."""
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def corpus_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The course's little English corpus, written to a file."""
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text(char_corpus(), encoding="utf-8")
    return path

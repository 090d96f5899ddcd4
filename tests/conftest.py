"""Shared fixtures and settings.

Every test process uses one torch thread: `make test` runs two pytest workers on a 2-core machine, and
tiny models run several times slower when two processes each start two threads (oversubscription).

``built_book``: builds the HTML book once per test session, exactly as ``make book`` does but from a
fresh environment (``--all``), so that every page is read again and every warning is reported.
It fails with the build log when the build fails or prints a warning.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest
import torch

torch.set_num_threads(1)

ROOT = pathlib.Path(__file__).resolve().parents[1]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclasses.dataclass(frozen=True)
class BuiltBook:
    """Where the book was built and what the build printed."""

    html: pathlib.Path  # _build/html
    log: str  # stdout + stderr of `jupyter-book build`, colour codes removed
    warnings: tuple[str, ...]  # the lines of the log that report a warning or an error


def _jupyter_book() -> list[str]:
    exe = pathlib.Path(sys.executable).with_name("jupyter-book")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "jupyter_book.cli.main"]


@pytest.fixture(scope="session")
def built_book() -> BuiltBook:
    """Build the book into _build/html once (about 10 s); fail with the log on any warning."""
    html = ROOT / "_build" / "html"
    shutil.rmtree(html, ignore_errors=True)  # no stale pages from earlier builds
    env = {
        **os.environ,
        "MPLBACKEND": "Agg",
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
    }
    cmd = [*_jupyter_book(), "build", ".", "--path-output", ".", "--all", "-n", "-W", "--keep-going"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    log = _ANSI.sub("", proc.stdout + "\n" + proc.stderr)
    warnings = tuple(line for line in log.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line))
    if proc.returncode != 0 or warnings:
        shown = "\n".join(warnings) if warnings else log[-6000:]
        pytest.fail(
            f"`{' '.join(cmd[1:])}` exited {proc.returncode} with {len(warnings)} warning(s):\n{shown}",
            pytrace=False,
        )
    return BuiltBook(html=html, log=log, warnings=warnings)

"""Shared fixtures and settings.

Every test process uses one torch thread: `make test` runs two pytest workers on a 2-core machine, and
tiny models run several times slower when two processes each start two threads (oversubscription).

``built_book``: both editions of the HTML book, built as ``make book`` does but from a fresh environment
(``scripts/i18n.py build-all --fresh``: every page read again, every warning reported), English into
``_build/html`` and Chinese into ``_build/html/zh``. ``make test`` builds before the book tests and sets
``BOOK_PREBUILT=1``, so that its two pytest workers share that build. The fixture fails with the build log
when a build failed or printed a warning.
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

torch.set_num_threads(1)

ROOT = pathlib.Path(__file__).resolve().parents[1]
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The modules that hold a ``slow`` test go first, each kept whole (its module fixtures are set up once).

    ``make test`` runs two workers, which take tests (or whole files, ``--dist loadfile``) in this order: a
    30-second test handed out last would keep one core busy while the other has nothing left to do."""
    def module(item: pytest.Item) -> str | None:
        return getattr(getattr(item, "module", None), "__name__", None)

    slow = {module(item) for item in items if item.get_closest_marker("slow")} - {None}
    items.sort(key=lambda item: module(item) not in slow)  # a stable sort: the order within is kept


@dataclasses.dataclass(frozen=True)
class BuiltBook:
    """Where the book was built and what the build printed."""

    html: pathlib.Path  # _build/html (English); the Chinese edition is html / "zh"
    log: str  # stdout + stderr of both builds, colour codes removed
    warnings: tuple[str, ...]  # the lines of the log that report a warning or an error


@pytest.fixture(scope="session")
def built_book() -> BuiltBook:
    """Both editions, built once (two processes, about 40 s); fail with the log on any warning.

    ``make test`` builds them before the book tests (``scripts/i18n.py build-all --fresh``) and sets
    ``BOOK_PREBUILT=1``, so that the two pytest workers share one build; otherwise this fixture builds."""
    html = ROOT / "_build" / "html"
    logs = ROOT / "_build" / "logs"
    if os.environ.get("BOOK_PREBUILT") != "1":
        if os.environ.get("PYTEST_XDIST_WORKER"):
            pytest.fail("with pytest -n, build first (`scripts/i18n.py build-all --fresh`) and set BOOK_PREBUILT=1",
                        pytrace=False)
        env = {
            **os.environ,
            "MPLBACKEND": "Agg",
            "PYDEVD_DISABLE_FILE_VALIDATION": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
        }
        cmd = [sys.executable, str(ROOT / "scripts" / "i18n.py"), "build-all", "--fresh"]
        proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        if proc.returncode != 0:
            pytest.fail(f"`{' '.join(cmd[1:])}` exited {proc.returncode}:\n{proc.stdout[-6000:]}", pytrace=False)
    text = []
    for name in ("en", "zh_CN"):
        path = logs / f"{name}.log"
        if not path.exists():
            pytest.fail(f"no build log {path}: build with `scripts/i18n.py build-all --fresh`", pytrace=False)
        log = _ANSI.sub("", path.read_text(encoding="utf-8"))
        text.append(log)
        warnings = tuple(line for line in log.splitlines() if re.search(r"\b(WARNING|ERROR|CRITICAL)\b", line))
        if warnings:
            pytest.fail(f"the {name} build printed {len(warnings)} warning(s):\n" + "\n".join(warnings),
                        pytrace=False)
    return BuiltBook(html=html, log="\n".join(text), warnings=())

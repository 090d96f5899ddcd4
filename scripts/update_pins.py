"""Regenerate requirements.txt and environment.yml from the packages installed in .venv.

Run after changing a dependency: `.venv/bin/python scripts/update_pins.py`. Both files then list the
same exact versions (tests/test_skeleton.py checks that they agree).
"""

from __future__ import annotations

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
HEADER = """\
# Exact, tested versions of everything `make test` uses, then the companion package itself
# (editable, with its book and dev extras). Regenerate with `scripts/update_pins.py`.
# torch==2.13.0 is the CPU build only where a CPU wheel is served (PyTorch's CPU index, or local wheels);
# from PyPI, pip takes the default wheel, a multi-GB CUDA build on Linux. See the README for the CPU build.
"""


def main() -> None:
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "freeze", "--all", "--exclude-editable"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.splitlines()
    pins = sorted(
        # setuptools and wheel too (--all): packages require them, and scripts/install_pins.py installs
        # the pins without resolving; pip itself is the venv's own.
        (line.replace("+cpu", "") for line in frozen if "==" in line and not line.startswith(("-e", "pip=="))),
        key=str.lower,
    )
    (ROOT / "requirements.txt").write_text(HEADER + "\n".join(pins) + "\n-e .[book,dev]\n")
    env = [
        "# conda / Binder environment: the same Python and the same pins as requirements.txt.",
        "name: transformers-piece-by-piece",
        "channels:",
        "  - conda-forge",
        "dependencies:",
        f"  - python={sys.version_info.major}.{sys.version_info.minor}",
        "  - pip",
        "  - pip:",
        *(f"      - {p}" for p in pins),
        "      - -e .[book,dev]",
    ]
    (ROOT / "environment.yml").write_text("\n".join(env) + "\n")
    print(f"pinned {len(pins)} packages")


if __name__ == "__main__":
    main()

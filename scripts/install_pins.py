"""Install requirements.txt into the running interpreter's environment, several pip processes at once.

requirements.txt pins every package `make test` needs, dependencies included (scripts/update_pins.py writes it
from a working venv). So pip has nothing to resolve: each pin can be installed with ``--no-deps``, and the
pins can be split between processes. On a fresh clone most of a single pip's time is spent fetching one index
page after another (about 40 s of its 70 s on the course machine); four processes fetch four at a time, and
torch's large wheel unpacks in its own process while the others fetch.

Afterwards ``pip check`` must find every dependency satisfied. Where it does not, for example on a platform
whose packages need one more dependency than Linux's (appnope on macOS, colorama on Windows), the ordinary
resolving ``pip install -r requirements.txt`` runs and adds what is missing.

Usage (the Makefile's venv rule): ``.venv/bin/python scripts/install_pins.py [requirements.txt]``.
Nothing is byte-compiled here; the Makefile says why.
"""

from __future__ import annotations

import pathlib
import subprocess
import sys
import tempfile

PROCESSES = 4
# One process for the package whose wheel dwarfs the others (unpacking it takes longer than fetching the rest).
ALONE = ("torch",)
PIP = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-compile"]


def split_requirements(lines: list[str], processes: int = PROCESSES) -> list[list[str]]:
    """The requirement lines, grouped for concurrent ``pip install --no-deps`` runs.

    Pins (``name==version``) go round-robin into ``processes - 1`` groups, except the names in ``ALONE``,
    which get a group each; every other line (``-e .[book,dev]``, options) forms the last group.
    """
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 2:
        raise ValueError(f"processes must be an int >= 2, got {processes!r}")
    pins, other, alone = [], [], []
    for raw in lines:
        line = raw.split("#", 1)[0].strip() if not raw.lstrip().startswith("-") else raw.strip()
        if not line:
            continue
        if line.startswith("-"):
            other.append(line)
        elif line.split("==")[0].strip().lower() in ALONE:
            alone.append([line])
        else:
            pins.append(line)
    n = max(1, processes - 1 - len(alone))
    groups = alone + [pins[i::n] for i in range(n)]
    if other:
        groups.append(other)
    return [g for g in groups if g]


def main(argv: list[str]) -> int:
    requirements = pathlib.Path(argv[0] if argv else "requirements.txt")
    groups = split_requirements(requirements.read_text(encoding="utf-8").splitlines())
    with tempfile.TemporaryDirectory() as tmp:
        running = []
        for i, group in enumerate(groups):
            part = pathlib.Path(tmp) / f"part{i}.txt"
            part.write_text("\n".join(group) + "\n", encoding="utf-8")
            running.append(subprocess.Popen([*PIP, "--no-deps", "-r", str(part)]))
        codes = [p.wait() for p in running]
    check = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    if any(codes) or check.returncode:
        print(
            "install_pins: the pinned set is incomplete here (pip check: "
            f"{check.stdout.strip() or 'pip failed'}); installing with pip's resolver",
            file=sys.stderr,
        )
        return subprocess.run([*PIP, "-r", str(requirements)]).returncode
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

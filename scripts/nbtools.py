"""Small, deterministic edits of the chapter notebooks that every chapter shares.

- :data:`INSTALL_SNIPPET`: the lines at the top of each chapter's first code cell that install the
  ``companion`` package from the course repository when it is missing (Colab, a bare Binder), and only
  then. The repository URL is read from ``_config.yml`` (``repository: url:``), the one place it is set.
  It never runs ``pip install companion``: that name on PyPI is an unrelated package.
- :func:`apply`: inserts (or refreshes) that snippet, collapses the solution cells (tag ``solution`` ->
  ``metadata.jupyter.source_hidden``), gives cells without an id a stable one, and sets the notebook
  metadata to what JupyterLab writes on save.
- :func:`set_kernel_metadata`: ``kernelspec`` of the kernel that runs the chapters (as JupyterLab 4 stores
  it: ``display_name`` "Python 3 (ipykernel)") and the ``language_info`` the kernel reported; nothing else.

Usage::

    .venv/bin/python scripts/nbtools.py apply book/03_attention.ipynb [...]   # then `make notebooks NB=...`
    .venv/bin/python scripts/nbtools.py metadata book/*.ipynb    # ids and metadata only; `make notebooks` runs it

Files are written atomically, in the format nbformat (and so JupyterLab) writes: indent 1, sorted keys,
non-ASCII kept, a final newline.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import sys
import tempfile
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parents[1]


def repository_url(config: pathlib.Path = ROOT / "_config.yml") -> str:
    """The ``repository: url:`` of ``_config.yml``."""
    text = config.read_text(encoding="utf-8")
    match = re.search(r"^repository:\s*\n(?:[ \t]+.*\n)*?[ \t]+url:\s*(\S+)", text, re.M)
    if not match:
        raise ValueError(f"{config} has no `repository: url:` entry")
    return match.group(1).strip("\"'")


_SNIPPET_START = "# Colab / Binder: install the course's `companion` package from its repository if it is missing."


def install_snippet(url: str | None = None) -> str:
    """The install lines that open each chapter's first code cell (ending with a blank line)."""
    url = repository_url() if url is None else url
    return (
        f"{_SNIPPET_START}\n"
        "# (Never `pip install companion`: that name on PyPI is an unrelated package.)\n"
        "try:\n"
        "    import companion\n"
        "except ModuleNotFoundError:\n"
        "    import importlib\n"
        "    import subprocess\n"
        "    import sys\n"
        "\n"
        f'    _repository = "git+{url}"\n'
        '    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", _repository], check=True)\n'
        "    importlib.invalidate_caches()\n"
        "    import companion\n"
        "\n"
    )


INSTALL_SNIPPET = install_snippet()
# An earlier version of the snippet: from the start line to the `import companion` after the except.
_OLD_SNIPPET = re.compile(
    re.escape(_SNIPPET_START) + r"\n(?:.*\n)*?except ModuleNotFoundError:\n(?:(?:    .*)?\n)*?    import companion\n\n?"
)

# What JupyterLab 4 writes for a notebook run with the python3 kernel of this environment.
KERNELSPEC = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}


def language_info() -> dict[str, Any]:
    """The ``language_info`` that ipykernel reports in this interpreter (what a kernel writes into a run
    notebook), without starting a kernel."""
    from ipykernel.ipkernel import IPythonKernel

    return json.loads(json.dumps(IPythonKernel.language_info))


def source(cell: dict) -> str:
    src = cell.get("source", "")
    return "".join(src) if isinstance(src, list) else src


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def set_install_snippet(nb: dict, snippet: str = INSTALL_SNIPPET) -> bool:
    """Put ``snippet`` at the top of the first code cell (replacing an earlier version); True if changed."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if not code:
        raise ValueError("the notebook has no code cell to put the install snippet in")
    cell = code[0]
    text = source(cell)
    rest = _OLD_SNIPPET.sub("", text, count=1) if text.startswith(_SNIPPET_START) else text
    new = snippet + rest.lstrip("\n")
    if new == text:
        return False
    cell["source"] = _lines(new)
    return True


def collapse_solutions(nb: dict) -> bool:
    """Set ``metadata.jupyter.source_hidden`` on every code cell tagged ``solution``; True if changed."""
    changed = False
    for cell in nb["cells"]:
        meta = cell.setdefault("metadata", {})
        if cell["cell_type"] == "code" and "solution" in meta.get("tags", []):
            jupyter = meta.setdefault("jupyter", {})
            if jupyter.get("source_hidden") is not True:
                jupyter["source_hidden"] = True
                changed = True
    return changed


def set_cell_ids(nb: dict) -> bool:
    """Give every cell a unique id (nbformat 4.5 requires them; JupyterLab would add random ones on save):
    a missing or repeated id becomes ``cell-NNN`` from the cell's position (deterministic); True if changed."""
    seen: set[str] = set()
    taken = {c.get("id") for c in nb["cells"]}
    changed = False
    for i, cell in enumerate(nb["cells"]):
        cid = cell.get("id")
        if not cid or cid in seen:
            n, cid = 0, f"cell-{i:03d}"
            while cid in taken or cid in seen:
                n += 1
                cid = f"cell-{i:03d}-{n}"
            cell["id"] = cid
            changed = True
        seen.add(cid)
    return changed


def set_kernel_metadata(nb: dict) -> bool:
    """Keep exactly ``kernelspec`` and ``language_info``, as JupyterLab writes them; True if changed."""
    info = nb.get("metadata", {}).get("language_info") or {}
    wanted = {"kernelspec": dict(KERNELSPEC), "language_info": language_info()}
    if info.get("version"):  # the version the notebook was last run with (make notebooks refreshes it)
        wanted["language_info"]["version"] = info["version"]
    if nb.get("metadata") == wanted:
        return False
    nb["metadata"] = wanted
    return True


def dumps(nb: dict) -> str:
    """The notebook as nbformat (and JupyterLab's save) writes it."""
    return json.dumps(nb, indent=1, sort_keys=True, ensure_ascii=False, separators=(",", ": ")) + "\n"


def write_atomic(path: pathlib.Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and ``os.replace``."""
    umask = os.umask(0)
    os.umask(umask)
    mode = 0o666 & ~umask  # what open() would give a new file
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        os.chmod(tmp, mode)  # mkstemp makes the file private (0600); keep the usual permissions
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def _edit(path: pathlib.Path, *steps: Any) -> bool:
    nb = json.loads(path.read_text(encoding="utf-8"))
    changed = [step(nb) for step in steps]
    if any(changed):
        write_atomic(path, dumps(nb))
    return any(changed)


def apply(nb_path: str | os.PathLike) -> bool:
    """Install snippet first, solutions collapsed, JupyterLab's metadata; returns whether the file changed."""
    return _edit(pathlib.Path(nb_path), set_cell_ids, set_install_snippet, collapse_solutions, set_kernel_metadata)


def main(argv: list[str]) -> int:
    if len(argv) < 2 or argv[0] not in {"apply", "metadata"}:
        print("usage: nbtools.py {apply|metadata} NOTEBOOK.ipynb [...]", file=sys.stderr)
        return 2
    action = apply if argv[0] == "apply" else (lambda p: _edit(pathlib.Path(p), set_cell_ids, set_kernel_metadata))
    for name in argv[1:]:
        if action(name):
            print(f"updated {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Small, deterministic edits of the chapter notebooks that every chapter shares.

- :data:`INSTALL_SNIPPET`: the lines at the top of each chapter's first code cell that install the
  ``companion`` package from the course repository when it is missing (Colab, a bare Binder), and only
  then. The repository URL is read from ``_config.yml`` (``repository: url:``), the one place it is set.
  It never runs ``pip install companion``: that name on PyPI is an unrelated package.
- :func:`apply`: inserts (or refreshes) that snippet, collapses the solution cells (tag ``solution`` ->
  ``metadata.jupyter.source_hidden``) and opens each with a line that gives nothing away (JupyterLab shows a
  collapsed cell's first line), records each exercise's form in its cells' metadata (read by
  ``python -m companion.exercises progress``), writes citations as links JupyterLab can show (see
  ``book/_ext/citations.py``), gives cells without an id a stable one, and sets the notebook metadata to
  what JupyterLab writes on save.
- :func:`set_kernel_metadata`: ``kernelspec`` of the kernel that runs the chapters (as JupyterLab 4 stores
  it: ``display_name`` "Python 3 (ipykernel)") and the ``language_info`` the kernel reported; nothing else.

Usage::

    .venv/bin/python scripts/nbtools.py apply book/03_attention.ipynb [...]   # then `make notebooks NB=...`
    .venv/bin/python scripts/nbtools.py metadata book/*.ipynb    # ids and metadata only; `make notebooks` runs it

Files are written atomically, in the format nbformat (and so JupyterLab) writes: indent 1, sorted keys,
non-ASCII kept, a final newline.
"""

from __future__ import annotations

import functools
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
    """The install lines that open each chapter's first code cell (ending with a blank line).

    pip's output is printed line by line as it comes (through ``print``, so Colab shows it too). When pip
    fails (no access to the repository, as on Colab behind a firewall), the cell ends with one line saying
    what failed and what to do, instead of a chained traceback: IPython shows an exception through its
    ``_render_traceback_`` method when it has one.
    """
    url = repository_url() if url is None else url
    folder = url.rstrip("/").rsplit("/", 1)[-1]
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
        "    _pip = subprocess.Popen([sys.executable, \"-m\", \"pip\", \"install\", _repository],\n"
        "                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)\n"
        "    for _line in _pip.stdout:  # pip's progress, as it comes\n"
        "        print(_line, end=\"\")\n"
        "    if _pip.wait() != 0:\n"
        "\n"
        "        class InstallError(Exception):\n"
        "            def _render_traceback_(self):  # IPython and Colab show this one line, no traceback\n"
        "                return [f\"{type(self).__name__}: {self}\"]\n"
        "\n"
        "        raise InstallError(\n"
        "            f\"pip could not install {_repository} (see its output above). Without access to GitHub, \"\n"
        f"            \"clone it elsewhere, copy the folder here and run: pip install ./{folder}\"\n"
        "        ) from None\n"
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


def without_install_snippet(text: str) -> str:
    """``text`` (a cell's source) without the install snippet at its top, of this version or an earlier one;
    the HTML book shows the first code cell this way (book/_ext/code_cells.py)."""
    return _OLD_SNIPPET.sub("", text, count=1).lstrip("\n") if text.startswith(_SNIPPET_START) else text


def set_install_snippet(nb: dict, snippet: str = INSTALL_SNIPPET) -> bool:
    """Put ``snippet`` at the top of the first code cell (replacing an earlier version); True if changed."""
    code = [c for c in nb["cells"] if c["cell_type"] == "code"]
    if not code:
        raise ValueError("the notebook has no code cell to put the install snippet in")
    cell = code[0]
    text = source(cell)
    new = snippet + without_install_snippet(text).lstrip("\n")
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


_SOLUTION_HEADER = re.compile(r"# Solution of [^\n]*\n")


def _exercise_texts(nb: dict) -> list[tuple[str | None, str]]:
    """For each cell, the label of the exercise it belongs to (the last ``{exercise}`` above it) and the
    exercise's text after its directive line, or (None, "")."""
    from companion.exercises import _notebooks  # the one reading of the exercise markup

    found, current = [], (None, "")
    for cell in nb["cells"]:
        text = source(cell)
        directive = _notebooks._EXERCISE.search(text) if cell["cell_type"] == "markdown" else None
        if directive:
            label = _notebooks._LABEL.search(text)
            current = (label.group("label") if label else None, text[directive.end() :])
        found.append(current)
    return found


def head_solutions(nb: dict) -> bool:
    """Open every solution cell with ``# Solution of ex-NN-name``; True if changed.

    JupyterLab shows the first line of a collapsed cell as its placeholder, so that line must give nothing
    of the solution away. An existing header is refreshed (the exercise's label may have changed)."""
    changed = False
    for cell, (label, _) in zip(nb["cells"], _exercise_texts(nb)):
        if cell["cell_type"] != "code" or "solution" not in cell.get("metadata", {}).get("tags", []):
            continue
        text = source(cell)
        body = text[_SOLUTION_HEADER.match(text).end() :] if _SOLUTION_HEADER.match(text) else text
        new = f"# Solution of {label or 'this exercise'}\n" + body
        if new != text:
            cell["source"] = _lines(new)
            changed = True
    return changed


# The form an exercise's text may state first: "**Write.**", "*Fix.*", "**Predict**" ...
_FORM_WORD = re.compile(r"^[*_]{1,2}(write|fix|predict|choose)\b", re.I)


def set_exercise_forms(nb: dict) -> bool:
    """Record each exercise's form (write / fix / predict / choose) in its code cells' metadata,
    ``{"exercise": {"form": ...}}``, where the chapter has none yet; True if changed.

    The form is the one the exercise's text states first ("**Fix.** ..."), else the one its starting code
    shows (``companion.exercises._notebooks.guess_form``: a value check is predict or choose, a stub raising
    NotImplementedError is write, other code is fix). Workbooks keep this metadata, so ``progress`` reports
    the form of the exercise, whatever the learner has written since."""
    from companion.exercises import _notebooks

    texts = _exercise_texts(nb)
    changed = False
    for ex in _notebooks.exercises_in(nb):
        cells = [nb["cells"][i] for i in ex.cells]
        if not cells or any(_notebooks.stored_form(c) for c in cells):
            continue
        text = texts[ex.cells[0]][1]  # the exercise's text, options (":label: ...") and closing fence aside
        body = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith(":"))
        stated = _FORM_WORD.match(body.strip())
        code = "".join(source(c) for c in cells)
        form = stated.group(1).lower() if stated else _notebooks.guess_form(code, ex.targets)
        for cell in cells:
            cell.setdefault("metadata", {})["exercise"] = {"form": form}
        changed = True
    return changed


@functools.lru_cache(maxsize=4)
def citation_labels(bib: pathlib.Path = ROOT / "book" / "references.bib") -> dict[str, tuple[str, str]]:
    """``key -> (who, year)`` for every entry of ``bib``: "Vaswani et al.", "Press and Wolf", "Gage"; an
    entry without authors is named by its title up to any translation in brackets."""
    from pybtex.backends.plaintext import Backend
    from pybtex.database import parse_file
    from pybtex.richtext import Text

    backend = Backend()  # one backend: render_as("text") would look it up among the entry points every time

    def plain(latex: str) -> str:
        return str(Text.from_latex(latex).render(backend)).replace("[", "(").replace("]", ")")

    labels = {}
    for key, entry in parse_file(str(bib)).entries.items():
        names = [plain(" ".join(p.prelast_names + p.last_names)) for p in entry.persons.get("author", [])]
        if len(names) >= 3:
            who = f"{names[0]} et al."
        elif names:
            who = " and ".join(names)
        else:
            who = plain(entry.fields.get("title", key)).split(" (")[0]
        labels[key] = (who, plain(entry.fields.get("year", "n.d.")))
    return labels


def citation_link(role: str, keys: list[str], labels: dict[str, tuple[str, str]]) -> str:
    """The link a ``{role}`keys``` citation is written as: ``[(Vaswani et al., 2017)](#cite:vaswani2017attention)``,
    or for a textual citation (``cite:t``) ``[Vaswani et al. (2017)](#cite:t:vaswani2017attention)``."""
    missing = [k for k in keys if k not in labels]
    if missing:
        raise ValueError(f"citation key(s) {missing} are not in book/references.bib")
    if role in ("cite:t", "cite:ct", "cite:ts", "cite:cts"):
        text = ", ".join(f"{labels[k][0]} ({labels[k][1]})" for k in keys)
    else:
        text = "(" + "; ".join(f"{labels[k][0]}, {labels[k][1]}" for k in keys) + ")"
    return f"[{text}](#{role}:{','.join(keys)})"


def _citations_module() -> Any:
    sys.path.insert(0, str(ROOT / "book" / "_ext"))
    try:
        import citations
    finally:
        sys.path.pop(0)
    return citations


def link_citations(nb: dict, labels: dict[str, tuple[str, str]] | None = None) -> bool:
    """Write every ``{cite}`` role of the markdown cells as a citation link (``book/_ext/citations.py``) and
    refresh the text of the links already there; True if changed."""
    citations = _citations_module()
    labels = citation_labels() if labels is None else labels
    changed = False
    for cell in nb["cells"]:
        if cell["cell_type"] != "markdown":
            continue
        text = source(cell)
        roles = citations.to_roles(text)  # links back to roles, then every role to a fresh link
        new = citations.ROLE.sub(lambda m: citation_link(m["role"], citations.keys_of(m["keys"]), labels), roles)
        if new != text:
            cell["source"] = _lines(new)
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
    """Install snippet first, solutions collapsed and headed, exercise forms recorded, citations as links,
    JupyterLab's metadata; returns whether the file changed."""
    steps = (set_cell_ids, set_install_snippet, collapse_solutions, head_solutions, set_exercise_forms,
             link_citations, set_kernel_metadata)  # fmt: skip
    return _edit(pathlib.Path(nb_path), *steps)


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

"""Atomic file writes: a file is either the old version or the complete new one, never half of either.

Every file the package writes (tokenizer files, checkpoints, run folders) goes through this module:

- ``atomic_write(path)``: a context manager yielding a temporary path in the SAME folder as ``path``
  (``tempfile.mkstemp``, so two writers never share a name). Write the whole file there -- with ``open``,
  ``torch.save``, ``np.save``, anything that takes a path. On a clean exit the temporary file is flushed to
  disk (``os.fsync``) and renamed over ``path`` with ``os.replace``, which is atomic on POSIX and Windows
  when both names are on one file system (hence the same folder); the folder entry is then fsynced too.
  If the block raises, the temporary file is removed and ``path`` is untouched: a full disk or a crash
  mid-write leaves the previous version in place.
- ``atomic_write_bytes(path, data)`` / ``atomic_write_text(path, text)``: the one-call versions.

Errors name the path: a missing or unwritable folder, or ``path`` being a folder, raises before anything is
written (``FileNotFoundError`` / ``PermissionError`` / ``IsADirectoryError``, subclasses of ``OSError``).

    >>> from companion._files import atomic_write, atomic_write_text
    >>> atomic_write_text("notes.txt", "hello\\n")             # doctest: +SKIP
    >>> with atomic_write("model.pt") as tmp:                   # doctest: +SKIP
    ...     torch.save(state, tmp)

Checked in ``tests/test_files.py``: the content arrives whole, a failing writer leaves the old file and no
temporary file behind, and the errors for bad folders.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

__all__ = ["atomic_write", "atomic_write_bytes", "atomic_write_text", "check_writable_file"]


def check_writable_file(path: str | os.PathLike[str], name: str = "path") -> Path:
    """Return ``Path(path)`` if a file can be written there; else raise an ``OSError`` subclass naming it.

    Checks that the folder exists, is a folder and is writable, and that ``path`` itself is not a folder.
    Nothing is created. Command lines call this before hours of work, not after.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{name} must be a str or os.PathLike, got {type(path).__name__}")
    path = Path(path)
    folder = path.parent
    if path.is_dir():
        raise IsADirectoryError(f"{name}={str(path)!r} is a folder; expected a file name")
    if not folder.exists():
        raise FileNotFoundError(f"{name}={str(path)!r}: the folder {str(folder)!r} does not exist")
    if not folder.is_dir():
        raise NotADirectoryError(f"{name}={str(path)!r}: {str(folder)!r} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise PermissionError(f"{name}={str(path)!r}: the folder {str(folder)!r} is not writable")
    return path


def _umask() -> int:
    mask = os.umask(0)  # the only portable way to read it is to set it and put it back
    os.umask(mask)
    return mask


_DEFAULT_MODE = 0o666 & ~_umask()  # what ``open(path, "w")`` would give a new file


def _fsync_folder(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where folders cannot be opened (Windows)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and ``os.replace`` it onto ``path``.

    On an exception inside the block the temporary file is deleted, ``path`` keeps its old content (if it
    had one) and the exception propagates unchanged.
    """
    path = check_writable_file(path)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    mode = path.stat().st_mode & 0o7777 if path.exists() else _DEFAULT_MODE
    try:
        yield tmp
        # mkstemp makes the file private (0o600), and a writer may replace it with a private file of its own
        # (safetensors does): give it the mode the file had, or a new file's default, once it is written
        os.chmod(tmp, mode)
        with open(tmp, "rb+") as f:  # the writer may have closed its own handle: reopen to flush to disk
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_folder(path.parent)


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    with atomic_write(path) as tmp, open(tmp, "wb") as f:
        f.write(data)


def atomic_write_text(path: str | os.PathLike[str], text: str, encoding: str = "utf-8") -> None:
    """Write ``text`` to ``path`` atomically (see :func:`atomic_write`); newlines are written as given."""
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    with atomic_write(path) as tmp, open(tmp, "w", encoding=encoding, newline="") as f:
        f.write(text)

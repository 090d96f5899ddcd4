"""Tests of companion._files: atomic writes keep either the old file or the whole new one."""

from __future__ import annotations

import os
import stat

import pytest

from companion._files import atomic_write, atomic_write_bytes, atomic_write_text, check_writable_file


def test_text_and_bytes_arrive_whole(tmp_path) -> None:
    path = tmp_path / "notes.txt"
    atomic_write_text(path, "first\nline two 我爱NLP\n")
    assert path.read_text(encoding="utf-8") == "first\nline two 我爱NLP\n"
    atomic_write_bytes(path, b"\x00\x01replaced")
    assert path.read_bytes() == b"\x00\x01replaced"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"], "no temporary file is left"


def test_a_failing_writer_keeps_the_old_file_and_leaves_no_temporary(tmp_path) -> None:
    path = tmp_path / "model.bin"
    path.write_bytes(b"old")
    with pytest.raises(RuntimeError, match="disk full"):
        with atomic_write(path) as tmp:
            assert tmp.parent == tmp_path and tmp != path, "the temporary file sits beside the target"
            tmp.write_bytes(b"half of the new")
            raise RuntimeError("disk full")
    assert path.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.bin"]


def test_two_writers_get_distinct_temporary_names(tmp_path) -> None:
    path = tmp_path / "x.txt"
    with atomic_write(path) as a, atomic_write(path) as b:
        assert a != b
        a.write_text("a")
        b.write_text("b")
    assert path.read_text() == "a", "the outer block finishes last and wins"


def test_new_file_gets_the_ordinary_mode_and_a_replaced_file_keeps_its_own(tmp_path) -> None:
    fresh = tmp_path / "fresh.txt"
    atomic_write_text(fresh, "x")
    reference = tmp_path / "plain.txt"
    reference.write_text("x")  # what open(..., "w") gives under the current umask
    assert stat.S_IMODE(fresh.stat().st_mode) == stat.S_IMODE(reference.stat().st_mode)
    os.chmod(reference, 0o640)
    atomic_write_text(reference, "y")
    assert stat.S_IMODE(reference.stat().st_mode) == 0o640


def test_a_writer_that_replaces_the_file_privately_still_gives_the_ordinary_mode(tmp_path) -> None:
    """safetensors' save_file replaces the file it is given with a new one of mode 0600 (issue 23.16)."""
    reference = tmp_path / "plain.txt"
    reference.write_text("x")
    with atomic_write(tmp_path / "weights.bin") as tmp:
        os.unlink(tmp)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, b"weights")
        os.close(fd)
    assert stat.S_IMODE((tmp_path / "weights.bin").stat().st_mode) == stat.S_IMODE(reference.stat().st_mode)


def test_bad_destinations_are_named_before_anything_is_written(tmp_path) -> None:
    with pytest.raises(FileNotFoundError, match="missing"):
        atomic_write_text(tmp_path / "missing" / "x.txt", "x")
    with pytest.raises(IsADirectoryError, match="is a folder"):
        atomic_write_text(tmp_path, "x")
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="is not a folder"):
        check_writable_file(tmp_path / "file" / "x.txt")
    with pytest.raises(TypeError, match="text must be a str"):
        atomic_write_text(tmp_path / "x.txt", b"bytes")
    with pytest.raises(TypeError, match="data must be bytes"):
        atomic_write_bytes(tmp_path / "x.txt", "text")
    with pytest.raises(TypeError, match="save_to must be a str"):
        check_writable_file(3, "save_to")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="needs POSIX permissions and a non-root user")
def test_read_only_folder_is_refused(tmp_path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(PermissionError, match="not writable"):
            check_writable_file(folder / "x.txt", "--save")
    finally:
        folder.chmod(0o700)

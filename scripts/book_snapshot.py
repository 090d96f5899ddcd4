"""Write companion/data_files/book_snapshot.json.xz: the text of chapters 0-11 and of the glossary and self-check
appendices that chapters 11-14 train on (see companion/data/book.py).

    python scripts/book_snapshot.py            # from the book/ folder as it is now
    python scripts/book_snapshot.py --rev REV  # from the book/ folder of a git revision

Refreshing the snapshot changes what chapters 11-14 print: re-execute them (make notebooks NB=...) and check
the numbers their prose quotes.
"""

from __future__ import annotations

import argparse
import io
import pathlib
import subprocess
import tarfile
import tempfile

from companion.data.book import SNAPSHOT, write_book_snapshot

ROOT = pathlib.Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", help="a git revision to take book/ from (default: the working tree)")
    args = parser.parse_args()
    target = ROOT / "companion" / SNAPSHOT
    if args.rev is None:
        book = write_book_snapshot(ROOT / "book", target)
    else:
        archive = subprocess.run(["git", "archive", args.rev, "book"], cwd=ROOT, check=True, capture_output=True).stdout
        with tempfile.TemporaryDirectory() as tmp:
            with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
                tar.extractall(tmp, filter="data")
            book = write_book_snapshot(pathlib.Path(tmp) / "book", target)
    print(f"wrote {target.relative_to(ROOT)} ({target.stat().st_size:,} bytes): chapters {sorted(book.chapters)}, "
          f"{len(book.prose()):,} characters of prose")


if __name__ == "__main__":
    main()

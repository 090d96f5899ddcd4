"""Time ``companion.tokens.BPETokenizer``'s training and encoding against Hugging Face ``tokenizers`` and tiktoken.

Training (``--what train``): corpus, the running interpreter's standard-library ``.py`` files, in sorted path
order, concatenated up to 1 MB (offline and deterministic for a given Python). Both trainers use byte-level
BPE with the same pre-split (``--pattern``: gpt4, ``BPETokenizer.train``'s default, or gpt2) and the same
target vocabulary, and run in this one process. Prints the time ratio (ours / tokenizers; target <= 5) and
whether the two learned the same merges.

Encoding (``--what encode``): GPT-2's tokenizer three ways, ``BPETokenizer.from_gpt2_files``, tiktoken's
``gpt2`` encoding and a ``tokenizers`` byte-level BPE, all from GPT-2's own files (they ship with the tests,
in tests/data/gpt2/; skipped without tiktoken). Text: about 1 MB, half the book's Chinese catalogs
(English and Chinese prose with Markdown) and half standard-library source. Each encodes the whole text as
one string on one thread, best of three (our chunk cache emptied before each); prints the time ratios and
whether the ids are equal.

    .venv/bin/python benchmarks/bench_bpe.py [--what all|train|encode] [--vocab-size 4096] [--megabytes 1.0]
                                             [--pattern gpt4]
"""

from __future__ import annotations

import argparse
import hashlib
import lzma
import os
import sysconfig
import tempfile
import time
from pathlib import Path

from companion.tokens import GPT4_SPLIT_PATTERN, BPETokenizer

GPT2_DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "gpt2"


def stdlib_corpus(n_bytes: int) -> str:
    """Concatenate standard-library sources (sorted paths) until ``n_bytes`` UTF-8 bytes are reached."""
    root = Path(sysconfig.get_paths()["stdlib"])
    parts, total = [], 0
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        parts.append(text)
        total += len(text.encode("utf-8"))
        if total >= n_bytes:
            break
    return "".join(parts).encode("utf-8")[:n_bytes].decode("utf-8", errors="ignore")


def train_tokenizers(text: str, vocab_size: int, pattern: str) -> tuple[list[tuple[bytes, bytes]], float]:
    """Train ``tokenizers``' byte-level BPE; return its merges as byte pairs and the seconds taken."""
    from tokenizers import Regex, Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if pattern == "gpt2":  # ByteLevel's own regex is GPT-2's
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(GPT4_SPLIT_PATTERN), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ])
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False, special_tokens=[],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    start = time.perf_counter()
    tok.train_from_iterator([text], trainer)
    seconds = time.perf_counter() - start
    import json

    decoder = {c: b for b, c in _bytes_to_unicode().items()}
    merges = json.loads(tok.to_str())["model"]["merges"]
    as_bytes = []
    for m in merges:
        left, right = m if isinstance(m, list) else m.split(" ")
        as_bytes.append((bytes(decoder[c] for c in left), bytes(decoder[c] for c in right)))
    return as_bytes, seconds


def _bytes_to_unicode() -> dict[int, str]:
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    mapping, n = {}, 0
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(256 + n)
            n += 1
    return mapping


def mixed_corpus(n_bytes: int) -> str:
    """Half the book's Chinese catalogs (``locales/``, English msgid and Chinese msgstr), half stdlib source."""
    parts, total = [], 0
    for path in sorted((Path(__file__).resolve().parents[1] / "locales").rglob("*.po")):
        text = path.read_text(encoding="utf-8")
        parts.append(text)
        total += len(text.encode("utf-8"))
        if total >= n_bytes // 2:
            break
    half = "".join(parts).encode("utf-8")[: n_bytes // 2].decode("utf-8", errors="ignore")
    return half + stdlib_corpus(n_bytes - len(half.encode("utf-8")))


def best_of(n: int, fn) -> tuple[float, object]:
    times, out = [], None
    for _ in range(n):
        start = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - start)
    return min(times), out


def bench_encode(megabytes: float) -> None:
    try:
        import tiktoken
        from tokenizers import Tokenizer, models, pre_tokenizers
    except ImportError as err:
        print(f"encoding: skipped ({err.name} is not installed; pip install -e .[dev])")
        return
    data = Path(tempfile.mkdtemp(prefix="gpt2-files-"))  # GPT-2's files ship with the tests, xz-compressed
    for name in ("encoder.json", "vocab.bpe"):
        (data / name).write_bytes(lzma.decompress((GPT2_DATA / f"{name}.xz").read_bytes()))
    vocab_json, merges_txt = data / "encoder.json", data / "vocab.bpe"
    cache = tempfile.mkdtemp(prefix="tiktoken-cache-")  # tiktoken reads GPT-2's files from its cache, offline
    base = "https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/"
    for path in (vocab_json, merges_txt):
        (Path(cache) / hashlib.sha1(f"{base}{path.name}".encode()).hexdigest()).write_bytes(path.read_bytes())
    os.environ["TIKTOKEN_CACHE_DIR"] = cache
    enc = tiktoken.get_encoding("gpt2")
    theirs = Tokenizer(models.BPE.from_file(str(vocab_json), str(merges_txt)))
    theirs.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    ours = BPETokenizer.from_gpt2_files(vocab_json, merges_txt)

    text = mixed_corpus(int(megabytes * 1_000_000))
    print(f"encoding: {len(text.encode('utf-8')):,} bytes (book catalogs in English and Chinese, stdlib source), "
          "GPT-2's vocabulary, one thread, best of 3")

    def encode_ours() -> list[int]:
        ours._cache.clear()  # measure from an empty chunk cache each time
        return ours.encode(text)

    t_ours, ids_ours = best_of(3, encode_ours)
    t_tik, ids_tik = best_of(3, lambda: enc.encode_ordinary(text))
    t_hf, ids_hf = best_of(3, lambda: theirs.encode(text).ids)
    print(f"companion from_gpt2_files: {t_ours:.2f} s   tiktoken: {t_tik:.3f} s   tokenizers: {t_hf:.3f} s")
    print(f"ratio companion / tiktoken = {t_ours / t_tik:.1f}   companion / tokenizers = {t_ours / t_hf:.1f}")
    print(f"same ids: tiktoken {ids_ours == ids_tik}, tokenizers {ids_ours == ids_hf} ({len(ids_ours):,} ids)")


def bench_train(args: argparse.Namespace) -> None:
    text = stdlib_corpus(int(args.megabytes * 1_000_000))
    n_bytes = len(text.encode("utf-8"))
    print(f"corpus: {n_bytes:,} bytes of standard-library source; vocab_size={args.vocab_size}; "
          f"pre-split {args.pattern}")

    theirs, t_theirs = train_tokenizers(text, args.vocab_size, args.pattern)
    ours = BPETokenizer()
    start = time.perf_counter()
    ours.train(text, args.vocab_size, pattern=args.pattern)
    t_ours = time.perf_counter() - start

    ours_bytes = [(ours.vocab[a], ours.vocab[b]) for a, b in ours.merges]
    same = ours_bytes == theirs
    print(f"tokenizers BpeTrainer: {t_theirs:.2f} s   companion BPETokenizer.train: {t_ours:.2f} s")
    print(f"ratio companion / tokenizers = {t_ours / t_theirs:.2f} (target <= 5)")
    print(f"same merges in the same order: {same} ({len(ours_bytes)} vs {len(theirs)} merges)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--what", choices=("all", "train", "encode"), default="all")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--pattern", choices=("gpt4", "gpt2"), default="gpt4", help="pre-split (default: gpt4)")
    args = parser.parse_args()
    if args.what in ("all", "train"):
        bench_train(args)
    if args.what in ("all", "encode"):
        bench_encode(args.megabytes)


if __name__ == "__main__":
    main()

"""Time ``companion.tokens.BPETokenizer.train`` against Hugging Face ``tokenizers``' BpeTrainer.

Corpus: the running interpreter's standard-library ``.py`` files, in sorted path order, concatenated up to
1 MB (offline and deterministic for a given Python). Both trainers use byte-level BPE with the same
pre-split (``--pattern``: gpt4, ``BPETokenizer.train``'s default, or gpt2) and the same target vocabulary,
and run in this one process. Prints the time ratio (ours / tokenizers; target <= 5) and whether the two
learned the same merges.

    .venv/bin/python benchmarks/bench_bpe.py [--vocab-size 4096] [--megabytes 1.0] [--pattern gpt4]
"""

from __future__ import annotations

import argparse
import sysconfig
import time
from pathlib import Path

from companion.tokens import GPT4_SPLIT_PATTERN, BPETokenizer


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--megabytes", type=float, default=1.0)
    parser.add_argument("--pattern", choices=("gpt4", "gpt2"), default="gpt4", help="pre-split (default: gpt4)")
    args = parser.parse_args()
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


if __name__ == "__main__":
    main()

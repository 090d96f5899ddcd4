"""The course's command line: train a GPT on your own text, sample from it, score it (chapter 11).

Three console scripts, declared in ``pyproject.toml`` and also runnable with ``python -m``:

- ``companion-train TEXT_FILE --out DIR`` = ``python -m companion.cli.train`` (:mod:`companion.cli.train`; its
  flags in :mod:`companion.cli.train_args`, its set-up in :mod:`companion.cli.train_setup`, what it says in
  :mod:`companion.cli.train_report`);
- ``companion-sample DIR --prompt "..."`` = ``python -m companion.cli.sample`` (:mod:`companion.cli.sample`);
- ``companion-eval DIR FILE`` = ``python -m companion.cli.eval`` (:mod:`companion.cli.eval`): loss, perplexity and
  bits per byte of a run on another text;
- ``companion-export DIR HF_DIR`` = ``python -m companion.cli.export`` (:mod:`companion.cli.export`): the run as a
  Hugging Face folder for ``transformers`` (``pipeline``, ``AutoTokenizer.apply_chat_template``).

``companion-train --init-from SOURCE [--lora R]`` fine-tunes a run or a Hugging Face folder instead
(:mod:`companion.cli.init_from`, chapter 13): on a text, on conversations (``--chat FILE``) or on preference pairs
(``--dpo FILE --beta B``), JSON Lines read by :mod:`companion.cli.chat_data`, trained by the tasks of
:mod:`companion.cli.train_tasks`; ``companion-sample --chat`` talks to the result. The run folder DIR and its
checkpoints (``checkpoint.pt``, the latest; ``best.pt``, the lowest validation loss) are described in
:mod:`companion.cli.run_folder`; where a command runs (``--device``, ``--dtype``, ``--threads``) in
:mod:`companion.cli.machine`; the data pipeline (text file -> tokenizer -> ids on disk -> batches) is
:mod:`companion.data`.

Every ``main(argv)`` returns the exit code instead of exiting, so a notebook or a test can call it in-process:
0 success, 2 bad input (one line on stderr, no traceback), 130 interrupted by Ctrl-C (after saving a
checkpoint), 1 an operating-system error (disk full, no permission). From Python:

    from companion.cli.train import main as train, read_log
    from companion.cli.run_folder import load_run
    from companion.cli.sample import sample

    train(["book.txt", "--out", "run", "--steps", "500", "--tokenizer", "char"])   # -> 0
    rows = read_log("run")          # [{"step": 1, "loss": ..., "lr": ..., "grad_norm": ...}, ...]
    run = load_run("run")           # .model (a GPT), .tokenizer, .checkpoint; load_run("run", checkpoint="best")
    print(sample(run, "The cat", 100, temperature=0.8, seed=0))   # samples(..., num_samples=5): a list
    run.model.save_pretrained("hf") # weights and tokenizer: transformers' AutoModelForCausalLM, AutoTokenizer, pipeline

Checked in tests/test_cli*.py: a run end to end, resume equivalence (stopped or interrupted, bit for bit),
a real SIGINT, two processes under torchrun, a failure in the middle of a checkpoint save, every bad input,
best.pt, extending a run, the machine flags, companion-eval, valid UTF-8 samples; tests/test_cli_chat.py: --chat,
--dpo, companion-export into transformers' pipeline.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["UsageError", "ArgumentParser", "run_main", "number_type", "positive_int", "non_negative_int",
           "positive_float", "seed_int", "encode_for", "EXIT_OK", "EXIT_OS_ERROR", "EXIT_USAGE",
           "EXIT_INTERRUPTED"]  # fmt: skip

EXIT_OK, EXIT_OS_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130  # 130 = 128 + SIGINT, the shell convention


class UsageError(Exception):
    """Bad command-line input; ``run_main`` prints it as one line and returns exit code 2."""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors (unknown flags, bad values) raise ``UsageError`` instead of printing the usage
    block and exiting, so every bad input is reported the same way: one line, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


def number_type(kind: str, convert: Callable[[str], Any], ok: Callable[[Any], bool]) -> Callable[[str], Any]:
    """An argparse ``type``: ``convert`` the text, then require ``ok(value)``; errors say ``kind`` in words
    ("'ten' is not an integer >= 1"), where argparse would name the converting function."""

    def parse(text: str) -> Any:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text} is invalid; expected {kind}")
        return value

    return parse


positive_int = number_type("an integer >= 1", int, lambda v: v >= 1)
non_negative_int = number_type("an integer >= 0", int, lambda v: v >= 0)
positive_float = number_type("a finite number > 0", float, lambda v: math.isfinite(v) and v > 0)
seed_int = number_type("an integer in [0, 2**32)", int, lambda v: 0 <= v < 1 << 32)  # what NumPy's seed takes


def encode_for(tokenizer: Any, text: str, what: str, whose: str = "the run's tokenizer") -> list[int]:
    """``tokenizer.encode(text)``; a ``ValueError`` naming ``what`` (e.g. "the prompt") if it cannot encode it.

    A character tokenizer refuses a character it never saw; its Python API offers ``unk_token`` for that, which
    the command line has no flag for, so the message says what a user of the commands can do instead.
    """
    try:
        return tokenizer.encode(text)
    except ValueError as err:
        reason = str(err).replace(", or give unk_token", "")
        raise ValueError(f"{whose} cannot encode {what}: {reason}; a character tokenizer knows "
                         "only the characters of its training text (remove the character, or train with "
                         "companion-train --tokenizer bpe, the default, which encodes any text)") from None


def run_main(prog: str, body: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None) -> int:
    """Call ``body(argv)``; turn the errors a user can cause into one line on stderr and an exit code.

    ``UsageError``, ``ValueError`` and ``FileNotFoundError`` (bad input) -> 2; other ``OSError`` -> 1;
    Ctrl-C outside the training loop (which handles it itself) -> 130. Anything else is a bug and keeps
    its traceback.
    """
    try:
        return body(argv)
    except SystemExit as done:  # --help: argparse printed the help and "exits"; a notebook gets the code back
        return done.code if isinstance(done.code, int) else EXIT_OK
    except KeyboardInterrupt:
        code, message = EXIT_INTERRUPTED, "interrupted"
    except (UsageError, ValueError, FileNotFoundError) as err:
        code, message = EXIT_USAGE, str(err)
    except OSError as err:
        code, message = EXIT_OS_ERROR, str(err)
    print(f"{prog}: error: {' '.join(message.split())}", file=sys.stderr)  # one line, whatever the message
    return code

"""The course's command line: train a GPT on your own text, then sample from it (chapter 11).

Two console scripts, declared in ``pyproject.toml`` and also runnable with ``python -m``:

- ``companion-train TEXT_FILE --out DIR`` = ``python -m companion.cli.train`` (:mod:`companion.cli.train`);
- ``companion-sample DIR --prompt "..."`` = ``python -m companion.cli.sample`` (:mod:`companion.cli.sample`).

``companion-train --init-from SOURCE [--lora R]`` fine-tunes a run or a Hugging Face folder instead
(:mod:`companion.cli.init_from`, chapter 13). The run folder DIR and its checkpoint are described in
:mod:`companion.cli.run_folder`; the data pipeline
(text file -> tokenizer -> ids on disk -> batches) is :mod:`companion.data`.

Both ``main(argv)`` functions return the exit code instead of exiting, so a notebook or a test can call
them in-process: 0 success, 2 bad input (one line on stderr, no traceback), 130 interrupted by Ctrl-C
(after saving a checkpoint), 1 an operating-system error (disk full, no permission). From Python:

    from companion.cli.train import main as train, read_log
    from companion.cli.run_folder import load_run
    from companion.cli.sample import sample

    train(["book.txt", "--out", "run", "--steps", "500", "--tokenizer", "char"])   # -> 0
    rows = read_log("run")          # [{"step": 1, "loss": ..., "lr": ..., "grad_norm": ...}, ...]
    run = load_run("run")           # .model (a GPT), .tokenizer, .checkpoint
    print(sample(run, "The cat", 100, temperature=0.8, seed=0))
    run.model.save_pretrained("hf") # a folder transformers.AutoModelForCausalLM loads

Checked in tests/test_cli.py: a run end to end, resume equivalence (stopped or interrupted, bit for bit),
a real SIGINT, two processes under torchrun, a failure in the middle of a checkpoint save, every bad input.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

__all__ = ["UsageError", "ArgumentParser", "run_main", "EXIT_OK", "EXIT_OS_ERROR", "EXIT_USAGE", "EXIT_INTERRUPTED"]

EXIT_OK, EXIT_OS_ERROR, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130  # 130 = 128 + SIGINT, the shell convention


class UsageError(Exception):
    """Bad command-line input; ``run_main`` prints it as one line and returns exit code 2."""


class ArgumentParser(argparse.ArgumentParser):
    """``argparse`` whose errors (unknown flags, bad values) raise ``UsageError`` instead of printing the usage
    block and exiting, so every bad input is reported the same way: one line, exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see {self.prog} --help)")


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

"""``companion-export RUN DIR``: a trained run as a Hugging Face model folder that ``transformers`` uses as it is.

    companion-export run hf                       # the run's latest checkpoint
    companion-export chat-run hf --checkpoint best

DIR gets what ``GPT.save_pretrained`` writes (``config.json``, ``model.safetensors``, ``tokenizer.json``,
``tokenizer_config.json``, ``generation_config.json``; :mod:`companion.models.hf.folder`), with three additions:

- **A chat template** when the run was chat-tuned (``companion-train --chat`` or ``--dpo``; its tokenizer has the
  markers ``<|user|>`` ... ``<|end|>``): ``tokenizer_config.json`` holds it in Jinja
  (``companion.finetune.JINJA_CHAT_TEMPLATE``), so ``AutoTokenizer.apply_chat_template`` gives the ids of
  ``companion.finetune.encode_prompt``, and ``generation_config.json`` lists ``<|end|>`` among the end tokens, so
  ``pipeline("text-generation")`` given a list of messages stops at the end of the assistant's turn.
- **No IndexError past the context.** A GPT-2-shaped model has one learned position per token of its context T
  (``--seq-len``); ``transformers`` generates past it when asked for ``max_new_tokens`` more and then fails inside
  the position table. The export gives the table :data:`EXPORT_POSITIONS` rows, the ones past T a copy of
  position T − 1 (every later token reads as "at the end of the context"): within T the logits are exactly the
  run's, past it the text degrades gradually instead of crashing. ``model_max_length`` (tokenizer) and
  ``max_length`` (generation) stay at T, the context the model was trained for, and the command says so.
  RoPE models (``--arch llama``) compute any position and need no change.
- DIR must be new or empty: nothing of an older save can be mixed in.

``companion-sample DIR`` reads such a folder back (its context from ``model_max_length``). Checked in
tests/test_cli_chat.py: ``AutoTokenizer.apply_chat_template`` equals ``encode_prompt``, and ``pipeline`` answers a
chat and continues a prompt with ``max_new_tokens=100`` on a model of context 32, offline.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from companion._files import atomic_write_text
from companion.cli import EXIT_OK, ArgumentParser, UsageError, run_main
from companion.cli.run_folder import CHECKPOINTS, load_run
from companion.finetune import END, JINJA_CHAT_TEMPLATE
from companion.models.hf.folder import write_folder
from companion.tokens import END_OF_TEXT

__all__ = ["EXPORT_POSITIONS", "export_run", "main"]

PROG = "companion-export"
EXPORT_POSITIONS = 1024  # rows of an exported learned position table (GPT-2's n_positions)


def _specials(tokenizer: Any) -> dict[str, int]:
    return dict(getattr(tokenizer, "special_tokens", {}) or {})


def _update_json(path: Path, changes: dict[str, Any]) -> None:
    data = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    data.update(changes)
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def export_run(run_folder: str | Path, folder: str | Path, checkpoint: str = "latest") -> list[str]:
    """Write the run in ``run_folder`` as a Hugging Face folder ``folder``; return what to tell the user.

    Raises ``FileNotFoundError`` / ``ValueError`` (a missing or bad run, a ``folder`` that is a file or not
    empty) before writing anything.
    """
    folder = Path(folder)
    if folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ValueError(f"DIR {str(folder)!r} is {'a file' if not folder.is_dir() else 'not empty'}; expected a new "
                         "or empty folder (nothing of an older save may be mixed in)")
    run = load_run(run_folder, checkpoint=checkpoint, decode_layout=False)  # the plain layout: transformers' names
    config, state, tokenizer = run.model.config, dict(run.model.state_dict()), run.tokenizer
    context = config.max_seq_len
    lines = [f"{PROG}: {str(Path(run_folder))!r} ({checkpoint} checkpoint, step {run.checkpoint['step']}) -> "
             f"{str(folder)!r}"]
    if config.positions == "learned" and context < EXPORT_POSITIONS:
        table = state["embed.position.weight"]  # (T, D)
        state["embed.position.weight"] = torch.cat([table, table[-1:].expand(EXPORT_POSITIONS - context, -1)])
        config = config.replace(max_seq_len=EXPORT_POSITIONS)
        lines.append(f"{PROG}: the model was trained on {context} tokens at a time; its {EXPORT_POSITIONS} learned "
                     f"positions past {context} repeat position {context - 1}, so transformers can generate past the "
                     f"context without an IndexError, more and more loosely; keep prompt + max_new_tokens within "
                     f"{context} for the quality the run measured (model_max_length and max_length say {context})")
    write_folder(config, state, folder, tokenizer=tokenizer)
    _update_json(folder / "tokenizer_config.json", {"model_max_length": context})
    generation: dict[str, Any] = {"max_length": context}
    specials = _specials(tokenizer)
    if END in specials:  # chat-tuned: the template, and the end of a turn ends generation
        _update_json(folder / "tokenizer_config.json", {"chat_template": JINJA_CHAT_TEMPLATE})
        generation["eos_token_id"] = [specials[END]] + ([specials[END_OF_TEXT]] if END_OF_TEXT in specials else [])
        lines.append(f"{PROG}: chat template written to tokenizer_config.json (apply_chat_template); generation "
                     f"stops at {END}")
    _update_json(folder / "generation_config.json", generation)
    lines.append(f'{PROG}: use it with transformers.pipeline("text-generation", model={str(folder)!r}), '
                 f"AutoModelForCausalLM / AutoTokenizer.from_pretrained, or companion-sample {str(folder)!r}")
    return lines


def _parser() -> ArgumentParser:
    p = ArgumentParser(prog=PROG, description="Write the model trained in RUN (companion-train) as a Hugging Face "
                       "folder DIR: weights, config, tokenizer, generation config, and the chat template of a "
                       "chat-tuned run.")
    p.add_argument("run", metavar="RUN", help="a run folder written by companion-train")
    p.add_argument("folder", metavar="DIR", help="the Hugging Face folder to write (new or empty)")
    p.add_argument("--checkpoint", choices=tuple(CHECKPOINTS), default="latest",
                   help="latest: the last checkpoint (default); best: the lowest validation loss (best.pt)")
    return p


def _export(argv: Sequence[str] | None) -> int:
    args = _parser().parse_args(argv)
    if Path(args.run).resolve() == Path(args.folder).resolve():
        raise UsageError("RUN and DIR are the same folder; expected a new folder for the Hugging Face files")
    for line in export_run(args.run, args.folder, args.checkpoint):
        print(line)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``companion-export`` / ``python -m companion.cli.export``; returns the exit code."""
    return run_main(PROG, _export, argv)


if __name__ == "__main__":
    sys.exit(main())

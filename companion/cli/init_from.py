"""``companion-train --init-from SOURCE [--lora R]``: what a fine-tuning run starts from (chapter 13).

SOURCE is either a run folder of ``companion-train`` (its ``checkpoint.pt`` and tokenizer) or a Hugging Face
model folder that ``GPT.from_pretrained`` reads (GPT-2 or Llama ``config.json``, weights, and a
``tokenizer.json``). ``read_source`` returns its model config, weights and tokenizer; ``encode_text`` encodes the
new text with that tokenizer and refuses a text it cannot represent, so a fine-tuning run never trains on
``<unk>`` tokens or on a lossy encoding without saying so.

The rule "the tokenizer can encode the text" is checked the same way for every kind: the ids must decode back
to exactly the text (a byte-level BPE always can; a character tokenizer cannot when the text has a character
it never saw; a lower-casing or ``[UNK]``-producing tokenizer cannot either), and every id must be a row of the
model's embedding table.

Checked in tests/test_cli.py: a run fine-tuned from a run starts at a lower loss than one trained from scratch
and from exactly the source's weights; a Hugging Face folder as SOURCE; each refusal, with one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

from companion.cli import encode_for
from companion.cli.run_folder import CHECKPOINT, load_run
from companion.data import HFTokenizer, Tokenizer
from companion.finetune import grow_token_rows
from companion.models import GPT, ModelConfig

__all__ = ["Source", "read_source", "source_state", "encode_text", "lora_targets"]


@dataclass
class Source:
    """The model and tokenizer a fine-tuning run starts from."""

    folder: Path  # the SOURCE folder as given
    kind: str  # "run" (a companion-train folder) or "hf" (a Hugging Face model folder)
    config: ModelConfig  # the model's architecture, as the source describes it
    state: dict[str, torch.Tensor]  # its weights (a LoRA run's adapters already merged)
    tokenizer: Tokenizer  # the tokenizer it was trained with
    seq_len: int  # default training window: the run's own, or min(64, max_seq_len) for a Hugging Face model


def read_source(path: str | Path) -> Source:
    """Read ``--init-from SOURCE``.

    Raises:
        FileNotFoundError: SOURCE does not exist.
        ValueError: SOURCE is neither a run folder nor a Hugging Face folder, or is a Hugging Face folder
            without a ``tokenizer.json``, or holds weights that do not fit their config.
    """
    folder = Path(path)
    if not folder.is_dir():
        raise FileNotFoundError(f"--init-from {str(folder)!r} does not exist; expected a companion-train run folder "
                                "or a Hugging Face model folder")
    if (folder / CHECKPOINT).is_file():
        run = load_run(folder, decode_layout=False)  # the run's own config: the new run trains it
        state = {k: v.detach().clone() for k, v in run.model.state_dict().items()}
        return Source(folder, "run", run.model.config, state, run.tokenizer, run.checkpoint["args"]["seq_len"])
    if (folder / "config.json").is_file():
        model = GPT.from_pretrained(folder)
        if model.tokenizer is None:
            raise ValueError(f"--init-from {str(folder)!r} has no tokenizer.json; fine-tuning needs the tokenizer the "
                             "model was trained with")
        seq_len = min(64, model.config.max_seq_len)
        return Source(folder, "hf", model.config, model.state_dict(), HFTokenizer(model.tokenizer), seq_len)
    raise ValueError(f"--init-from {str(folder)!r} holds neither a {CHECKPOINT} (a companion-train run) nor a "
                     "config.json (a Hugging Face model folder)")


def source_state(path: str | Path, vocab_size: int) -> dict[str, torch.Tensor]:
    """The weights of ``--init-from SOURCE``, with rows for the tokens a chat run added (``grow_token_rows``)."""
    state = read_source(path).state
    rows = state["embed.token.weight"].size(0)
    return grow_token_rows(state, vocab_size) if vocab_size > rows else state


def encode_text(source: Source, text: str, name: str) -> np.ndarray:
    """The ids of ``text`` (the file ``name``) under the source's tokenizer; ``ValueError`` if it cannot encode it.

    Shapes: -> (N,) int64.
    """
    where = f"the tokenizer of --init-from {str(source.folder)!r}"
    ids = encode_for(source.tokenizer, text, repr(name), whose=where)  # a CharTokenizer names the character
    decoded = source.tokenizer.decode(ids)
    if decoded != text:
        at = next((i for i, (a, b) in enumerate(zip(decoded, text)) if a != b), min(len(decoded), len(text)))
        raise ValueError(f"{where} cannot encode {name!r} faithfully: its ids decode to a different text from "
                         f"character {at} on ({text[at:at + 20]!r} became {decoded[at:at + 20]!r})")
    ids = np.asarray(ids, dtype=np.int64)
    if len(ids) and int(ids.max()) >= source.config.vocab_size:
        raise ValueError(f"{where} gives id {int(ids.max())}, but the model has only {source.config.vocab_size} "
                         "embedding rows")
    return ids


def lora_targets(model: GPT) -> list[str]:
    """What ``--lora R`` adapts: every projection inside the layers (attention q/k/v/o, FFN up/down/gate).
    QLoRA's finding (Dettmers et al. 2023) is that adapting all of them, not only q and v, is what matches full
    fine-tuning."""
    return sorted({name.rsplit(".", 1)[-1] for name, m in model.layers.named_modules() if isinstance(m, nn.Linear)})

"""companion: the code behind *Transformers, Piece by Piece*.

Every concept of the course lives once, here. The chapters in ``book/`` explain and use it; the
tests in ``tests/`` prove it right against references others maintain.

Shape legend, used in every docstring and every ``# (B, H, T, D_h)`` comment of the package:

    B     batch size
    T     query (target) length
    S     key / source length (S == T in self-attention without a cache)
    D     model width, d_model
    H     attention heads
    H_kv  key/value heads (H_kv == H for MHA, 1 for MQA, in between for GQA)
    D_h   head width, D // H
    V     vocabulary size

The package reads as the course's table of contents. Modules, one concept each, imported on first use
(``import companion; companion.models`` works), in the order the chapters use them:

    tokens        text -> ids: characters, byte-level BPE, WordPiece (chapter 1)
    embeddings    ids -> vectors, weight tying (chapter 2)
    attention     scaled dot-product and multi-head attention, the KV cache (chapters 3, 4)
    positions     sinusoidal, learned, RoPE, ALiBi, T5 buckets (chapter 5)
    layers        feed-forward networks, norms, the residual block (chapter 6)
    masks         causal, padding and sliding-window masks (chapter 7)
    models        ModelConfig, GPT, Transformer, Encoder and its heads, ViT, Hugging Face formats (chapters 8, 11, 12)
    generation    sampling, the decoding loop, beam search, translation (chapter 9)
    packing       weights laid out for fast decoding: (in, out), q/k/v in one matrix (chapter 9)
    scaling       parameter / FLOP / KV-cache counts, power-law fits (chapter 10)
    data          the course's data sets, your own text as training data, labelled markdown (chapters 11, 12)
    training      losses, schedule, the loop, checkpoints, the trainers, data parallelism
    cli           companion-train / companion-sample (chapter 11)
    exercises     check(name, answer) for every chapter's exercises
    plots, timing notebook helpers;  scratch: forward-only NumPy twins written to be read

Lower modules never import higher ones (tests/test_architecture.py checks the layers and that no import
cycle exists, counting imports inside functions).

Importing ``companion`` loads torch and numpy only: no Jupyter module, no matplotlib.
"""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
from typing import Any

from companion.experiments import seed_everything

__version__ = "0.1.0"

__all__ = ["__version__", "seed_everything", "setup_notebook"]


def __getattr__(name: str) -> Any:
    """Import a submodule on first access (PEP 562): ``import companion; companion.models.GPT`` works,
    while ``import companion`` alone still loads only what this file needs (no Jupyter, no matplotlib)."""
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # also binds it as an attribute of the package
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    submodules = [m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_")]
    return sorted({*globals(), *submodules})


def setup_notebook(seed: int = 0, precision: int = 4) -> None:
    """Make a chapter deterministic and readable; every chapter calls this in its first cell.

    - seeds Python, NumPy and torch with ``seed``;
    - uses one CPU thread, so that float sums happen in the same order on every machine;
    - prints tensors and arrays with ``precision`` decimals, without scientific clutter;
    - selects a matplotlib font that has Chinese glyphs (Noto Sans CJK SC, shipped by the ``mplfonts``
      package, so no system font is needed), keeps the minus sign renderable, and fixes the figure
      size and resolution so that stored figures look the same everywhere.
    """
    import numpy as np
    import torch

    seed_everything(seed)
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.set_printoptions(precision=precision, sci_mode=False, linewidth=110)
    np.set_printoptions(precision=precision, suppress=True, linewidth=110)
    from companion.plots import use_cjk_font

    use_cjk_font()

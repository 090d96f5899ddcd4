"""Figures for the chapters: attention heatmaps and encoding plots whose Chinese labels render.

Matplotlib's default font (DejaVu Sans) has no CJK glyphs, so 我爱NLP would be drawn as empty boxes.
`use_cjk_font` registers Noto Sans CJK SC, which ships inside the ``mplfonts`` package (a PyPI
dependency, so no system font is needed), and puts it first in the sans-serif list. Matplotlib is
imported lazily: ``import companion`` must not pull in a plotting stack.
"""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.axes import Axes

CJK_FONT_NAME = "Noto Sans CJK SC"
_CJK_FONT_FILE = "NotoSansCJKsc-Regular.otf"


def cjk_font_path() -> pathlib.Path:
    """Path of the bundled Noto Sans CJK SC font file (from the ``mplfonts`` package)."""
    import mplfonts

    path = pathlib.Path(mplfonts.__file__).parent / "fonts" / _CJK_FONT_FILE
    if not path.exists():
        raise FileNotFoundError(f"the CJK font {_CJK_FONT_FILE} is missing from mplfonts at {path.parent}")
    return path


def use_cjk_font() -> str:
    """Register the bundled CJK font with matplotlib and make it the default; return its family name.

    Also fixes figure size, resolution and the SVG/PNG metadata so figures are the same on every machine.
    """
    import logging

    from matplotlib import font_manager, rcParams

    # The CJK font has a single (regular) weight; matplotlib would log a warning for every bold title.
    logging.getLogger("matplotlib.font_manager").setLevel(logging.ERROR)
    path = cjk_font_path()
    if CJK_FONT_NAME not in {f.name for f in font_manager.fontManager.ttflist}:
        font_manager.fontManager.addfont(str(path))
    rcParams["font.family"] = "sans-serif"
    rcParams["font.sans-serif"] = [CJK_FONT_NAME, "DejaVu Sans"]
    rcParams["axes.unicode_minus"] = False  # the CJK font lacks U+2212; use the ASCII hyphen-minus
    rcParams["figure.figsize"] = (6.4, 4.0)
    rcParams["figure.dpi"] = 80
    rcParams["savefig.dpi"] = 80
    rcParams["svg.hashsalt"] = "transformers-piece-by-piece"
    return CJK_FONT_NAME


def resolved_font(text: str = "我爱NLP") -> str:
    """Name of the font file matplotlib picks for ``text`` with the current settings (for checks)."""
    from matplotlib import font_manager

    prop = font_manager.FontProperties(family=["sans-serif"])
    return pathlib.Path(font_manager.findfont(prop, fallback_to_default=False)).name


def heatmap(
    weights: Any,
    row_labels: Sequence[str] | None = None,
    col_labels: Sequence[str] | None = None,
    *,
    ax: Axes | None = None,
    title: str | None = None,
    annotate: bool = True,
    cmap: str = "Blues",
    vmin: float | None = 0.0,
    vmax: float | None = None,
    fmt: str = "{:.2f}",
) -> Axes:
    """Draw a (T, S) matrix, e.g. attention weights, with token labels on both axes.

    Rows are queries (who is looking), columns are keys (who is looked at).
    """
    import matplotlib.pyplot as plt
    import numpy as np

    w = np.asarray(weights.detach().cpu() if hasattr(weights, "detach") else weights, dtype=float)
    if w.ndim != 2:
        raise ValueError(f"weights must be a 2-D matrix, got shape {w.shape}")
    for name, labels, n in (("row_labels", row_labels, w.shape[0]), ("col_labels", col_labels, w.shape[1])):
        if labels is not None and len(labels) != n:
            raise ValueError(f"{name} has {len(labels)} labels but the matrix has {n} along that axis")
    if ax is None:
        _, ax = plt.subplots(figsize=(0.55 * w.shape[1] + 2.0, 0.45 * w.shape[0] + 1.2))
    finite = np.where(np.isfinite(w), w, np.nan)
    im = ax.imshow(finite, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.figure.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    if col_labels is not None:
        ax.set_xticks(range(w.shape[1]), labels=list(col_labels), rotation=45, ha="right")
    if row_labels is not None:
        ax.set_yticks(range(w.shape[0]), labels=list(row_labels))
    ax.set_xlabel("key (attended to)")
    ax.set_ylabel("query (attending)")
    if title:
        ax.set_title(title)
    if annotate and w.size <= 144:
        hi = np.nanmax(finite) if np.isfinite(finite).any() else 1.0
        for i in range(w.shape[0]):
            for j in range(w.shape[1]):
                text = "-inf" if np.isneginf(w[i, j]) else fmt.format(w[i, j])
                color = "white" if np.isfinite(w[i, j]) and w[i, j] > 0.6 * hi else "black"
                ax.text(j, i, text, ha="center", va="center", fontsize=7, color=color)
    return ax


def encoding_image(
    pe: Any, *, ax: Axes | None = None, title: str = "positional encoding", cmap: str = "RdBu"
) -> Axes:
    """Show a (T, D) encoding table: x = dimension, y = position, colour = value."""
    import matplotlib.pyplot as plt
    import numpy as np

    pe = np.asarray(pe.detach().cpu() if hasattr(pe, "detach") else pe, dtype=float)
    if pe.ndim != 2:
        raise ValueError(f"pe must be a 2-D (positions, dims) table, got shape {pe.shape}")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 3.5))
    im = ax.imshow(pe, cmap=cmap, aspect="auto", vmin=-1, vmax=1)
    ax.figure.colorbar(im, ax=ax)
    ax.set_xlabel("dimension i")
    ax.set_ylabel("position p")
    ax.set_title(title)
    return ax

"""Where a command runs: ``--device auto|cpu|cuda|mps``, ``--dtype float32|bfloat16`` and ``--threads N``.

Shared by ``companion-train``, ``companion-sample`` and ``companion-eval``:

- ``device_for(name)``: ``auto`` takes a CUDA GPU if torch sees one, else Apple's GPU (MPS), else the CPU; a
  device asked for by name and absent is a ``UsageError`` saying what torch sees and what to pass instead.
- ``autocast(device, dtype)``: ``bfloat16`` runs the matrix products in bfloat16 under ``torch.autocast``
  (mixed precision: the weights, the optimiser state and the loss's softmax stay float32), on any device
  including the CPU; ``float32`` runs everything in float32.
- ``threads(n)``: ``torch.set_num_threads(n)`` for the CPU work inside the block (default: torch's choice,
  usually one thread per core), put back afterwards: a notebook or a test that calls a command's ``main``
  keeps its own setting.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from companion.cli import UsageError

__all__ = ["DEVICES", "DTYPES", "device_for", "autocast", "threads"]

DEVICES = ("auto", "cpu", "cuda", "mps")
DTYPES = ("float32", "bfloat16")


def _mps_available() -> bool:
    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def device_for(name: str, local_rank: int = 0) -> torch.device:
    """``torch.device`` of ``--device NAME`` (``local_rank``: the GPU of this process under torchrun)."""
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "mps" if _mps_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UsageError(f"--device cuda: no CUDA GPU is available to this torch {torch.__version__} "
                             "(torch.cuda.is_available() is False); use --device cpu (or auto)")
        return torch.device("cuda", local_rank)
    if name == "mps":
        if not _mps_available():
            raise UsageError("--device mps: Apple's Metal GPU is not available (torch.backends.mps.is_available() "
                             "is False); use --device cpu (or auto)")
        return torch.device("mps")
    if name != "cpu":
        raise UsageError(f"--device {name} is not supported; expected one of {', '.join(DEVICES)}")
    return torch.device("cpu")


@contextlib.contextmanager
def autocast(device: torch.device, dtype: str) -> Iterator[None]:
    """Run the block in ``dtype`` (mixed precision for ``bfloat16``); ``float32`` changes nothing."""
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype} is not supported; expected one of {', '.join(DTYPES)}")
    with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=dtype == "bfloat16"):
        yield


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[None]:
    """Use ``n`` CPU threads for torch's operations inside the block (``None``: leave torch's setting)."""
    before = torch.get_num_threads()
    if n is not None:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)

"""Hugging Face model folders on disk, in and out: what ``GPT.from_pretrained`` / ``save_pretrained`` call.

A Hugging Face model folder holds ``config.json`` (the architecture, with its ``model_type``) and the weights,
in ``model.safetensors`` or ``pytorch_model.bin`` (or shards of either plus an ``*.index.json``), often with a
``tokenizer.json``. :data:`FAMILIES` maps each ``model_type`` this course rebuilds to the module that converts
it; nothing here builds a model:

- ``read_folder(folder)`` -> ``(config, state, tokenizer)``: the ``ModelConfig`` from ``config.json`` (no
  hand-made config), the weights under our names, and the ``tokenizer.json`` as a ``tokenizers.Tokenizer``
  (``None`` if the folder has none).
- ``write_folder(config, state, folder, ...)``: the inverse, for configs one family's shape fits; each file is
  written atomically, and a config no family fits is refused before anything is written.

Nothing is downloaded: with internet access, fetch a folder first, e.g.
``huggingface_hub.snapshot_download("openai-community/gpt2")``, then pass its path.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from companion._files import atomic_write, atomic_write_text
from companion.models.config import ModelConfig
from companion.models.hf import deepseek_v3, gpt2, llama, mixtral, qwen3

__all__ = ["FAMILIES", "family_of", "hf_config", "load_tokenizer", "read_folder", "read_weights", "write_folder"]

FAMILIES: dict[str, ModuleType] = {  # model_type -> its conversion module
    "gpt2": gpt2, "llama": llama, "mixtral": mixtral, "qwen3": qwen3, "deepseek_v3": deepseek_v3,
}  # fmt: skip


def hf_config(folder: str | Path) -> dict[str, Any]:
    """The folder's ``config.json`` as a dict (``FileNotFoundError`` / ``ValueError`` naming the problem)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FileNotFoundError(f"model folder {str(folder)!r} does not exist; nothing is downloaded -- fetch it "
                                "first, e.g. huggingface_hub.snapshot_download('openai-community/gpt2')")
    path = folder / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{str(folder)!r} has no config.json; expected a Hugging Face model folder")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(path)!r} is not valid JSON ({err})") from None


def _family(cfg: Mapping[str, Any], source: str) -> ModuleType:
    kind = cfg.get("model_type")
    if kind not in FAMILIES:
        supported = ", ".join(repr(k) for k in FAMILIES)
        raise ValueError(f"{source}: model_type={kind!r} is not supported; expected one of {supported}")
    return FAMILIES[kind]


def read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor of the folder's weight files (safetensors preferred, then pytorch_model.bin; shards too)."""
    for name, index in (("model.safetensors", "model.safetensors.index.json"),
                        ("pytorch_model.bin", "pytorch_model.bin.index.json")):  # fmt: skip
        if (folder / index).is_file():
            files = sorted(set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values()))
        elif (folder / name).is_file():
            files = [name]
        else:
            continue
        sd: dict[str, Tensor] = {}
        for file in files:
            path = folder / file
            try:
                if file.endswith(".safetensors"):
                    from safetensors.torch import load_file  # an optional dependency, needed for this format only

                    sd.update(load_file(path))
                else:  # weights_only refuses arbitrary pickled objects
                    sd.update(torch.load(path, map_location="cpu", weights_only=True))
            except ImportError:
                raise
            except Exception as err:
                raise ValueError(f"weights file {str(path)!r} is corrupt or unreadable ({err})") from None
        return sd
    raise FileNotFoundError(f"{str(folder)!r} holds no model.safetensors or pytorch_model.bin (nor their shards)")


def load_tokenizer(folder: str | Path) -> Any:
    """The folder's ``tokenizer.json`` as a ``tokenizers.Tokenizer``, or ``None`` if there is none."""
    path = Path(folder) / "tokenizer.json"
    if not path.is_file():
        return None
    from tokenizers import Tokenizer  # only needed when the folder has a tokenizer

    return Tokenizer.from_file(str(path))


def read_folder(folder: str | Path) -> tuple[ModelConfig, dict[str, Tensor], Any]:
    """``(config, state, tokenizer)`` of a local Hugging Face folder; ``state`` under our parameter names.

    Raises:
        FileNotFoundError: no folder, no ``config.json``, or no weights file.
        ValueError: an unsupported ``model_type`` or feature, or a corrupt weights file.
    """
    folder = Path(folder)
    cfg = hf_config(folder)
    source = str(folder / "config.json")
    family = _family(cfg, source)
    config = family.config_from_hf(cfg, source)
    state = family.to_companion(read_weights(folder), config)
    return config, state, load_tokenizer(folder)


def family_of(config: ModelConfig) -> str:
    """The ``model_type`` whose shape ``config`` has; ``ValueError`` naming the fields that differ otherwise."""
    differences = {}
    for kind, family in FAMILIES.items():
        off = family.shape_differences(config)
        if not off:
            return kind
        differences[kind] = ", ".join(off)
    detail = "; ".join(f"from {kind} in {off}" for kind, off in differences.items())
    raise ValueError(
        f"save_pretrained needs a config of one of the families {list(FAMILIES)}; this one differs {detail}"
    )


def write_folder(
    config: ModelConfig,
    state: Mapping[str, Tensor],
    folder: str | Path,
    *,
    safe_serialization: bool = True,
    tokenizer: Any = None,
) -> None:
    """Write ``config.json`` and ``model.safetensors`` (``pytorch_model.bin`` with ``safe_serialization=False``)
    for a model with ``config`` and state dict ``state`` (our names), plus ``tokenizer.json`` when a
    ``tokenizers.Tokenizer`` is given. The folder is created if needed; each file is written atomically.

    Raises ``ValueError`` for a config that fits no family in :data:`FAMILIES`, before writing anything.
    """
    kind = family_of(config)
    family = FAMILIES[kind]
    theirs = family.from_companion(state, config)
    # float32 copies on the CPU: safetensors refuses tensors that share memory (a tied head)
    theirs = {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in theirs.items()}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if safe_serialization:
        from safetensors.torch import save_file  # an optional dependency, needed for this format only

        with atomic_write(folder / "model.safetensors") as tmp:
            save_file(theirs, str(tmp), metadata={"format": "pt"})
    else:
        with atomic_write(folder / "pytorch_model.bin") as tmp:
            torch.save(theirs, tmp)
    atomic_write_text(folder / "config.json", json.dumps(family.config_to_hf(config), indent=2, sort_keys=True) + "\n")
    if tokenizer is not None:
        atomic_write_text(folder / "tokenizer.json", tokenizer.to_str())

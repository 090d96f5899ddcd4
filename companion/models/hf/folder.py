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
import os
import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch import Tensor

from companion._files import atomic_write, atomic_write_text
from companion.models.config import ModelConfig
from companion.models.hf import deepseek_v3, gpt2, llama, mixtral, qwen3
from companion.models.hf.quantized import dequantize
from companion.models.hf.tokenizer_files import (
    TOKENIZER_FILES,
    as_hf_tokenizer,
    check_tokenizer_fits,
    tokenizer_ids,
    write_tokenizer_files,
)

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
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{str(path)!r} is not valid JSON ({err})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{str(path)!r} holds a JSON {type(cfg).__name__}; expected an object of settings")
    return cfg


def _family(cfg: Mapping[str, Any], source: str) -> ModuleType:
    kind = cfg.get("model_type")
    if kind not in FAMILIES:
        supported = ", ".join(repr(k) for k in FAMILIES)
        raise ValueError(f"{source}: model_type={kind!r} is not supported; expected one of {supported}")
    return FAMILIES[kind]


WEIGHT_FILES = (("model.safetensors", "model.safetensors.index.json"),
                ("pytorch_model.bin", "pytorch_model.bin.index.json"))  # in the order they are looked for
SHARD = re.compile(r"(model|pytorch_model)-\d+-of-\d+\.(safetensors|bin)")  # transformers' shard names


def _shards(index: Path) -> list[str]:
    """The weight files a sharded checkpoint's ``*.index.json`` lists (``weight_map``: tensor -> file)."""
    try:
        weight_map = json.loads(index.read_text(encoding="utf-8")).get("weight_map")
    except (json.JSONDecodeError, AttributeError) as err:
        raise ValueError(f"{str(index)!r} is not a JSON object with a 'weight_map' ({err})") from None
    if not isinstance(weight_map, dict) or not all(isinstance(f, str) and "/" not in f for f in weight_map.values()):
        raise ValueError(f"{str(index)!r} has no valid 'weight_map'; expected {{tensor name: file name in the "
                         f"folder}}, got {type(weight_map).__name__}")
    return sorted(set(weight_map.values()))


def read_weights(folder: Path) -> dict[str, Tensor]:
    """Every tensor of the folder's weight files (safetensors preferred, then pytorch_model.bin; shards too)."""
    for name, index in WEIGHT_FILES:
        if (folder / index).is_file():
            files = _shards(folder / index)
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

    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # tokenizers raises its own Exception for a file it cannot parse
        raise ValueError(f"tokenizer file {str(path)!r} is corrupt or not a tokenizers file ({err})") from None


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
    try:
        config = family.config_from_hf(cfg, source)
    except (TypeError, ValueError) as err:  # ModelConfig's own checks name its fields: say which file they came from
        raise type(err)(str(err) if str(err).startswith(source) else f"{source}: {err}") from None
    weights = dequantize(read_weights(folder), cfg, source)
    extra = {"mtp_layers": cfg.get("num_nextn_predict_layers") or 0} if family is deepseek_v3 else {}
    state = family.to_companion(weights, config, **extra)
    tokenizer = load_tokenizer(folder)
    if tokenizer is not None:
        check_tokenizer_fits(tokenizer, config, str(folder / "tokenizer.json"))
    return config, state, tokenizer


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
    for a model with ``config`` and state dict ``state`` (our names), plus, when ``tokenizer`` is given (the
    course's BPE or character tokenizer, or a ``tokenizers.Tokenizer``), ``tokenizer.json``,
    ``tokenizer_config.json`` and ``generation_config.json`` (:mod:`companion.models.hf.tokenizer_files`).
    The folder is created if needed; each file is written atomically.

    Over an earlier save, what this one supersedes is removed once the new weights are in place: the other
    weights format, a sharded checkpoint (its ``*.index.json`` and shards), and the tokenizer files this save
    does not write (:data:`~companion.models.hf.tokenizer_files.TOKENIZER_FILES`: all of them without a
    tokenizer), so that ``from_pretrained`` and ``transformers`` read back this model and nothing of the one
    before. Other files in the folder are left alone.

    Raises, before writing anything: ``ValueError`` for a config that fits no family in :data:`FAMILIES`, a
    state with unmerged LoRA adapters, or a tokenizer with ids beyond ``config.vocab_size``;
    ``NotADirectoryError`` when ``folder`` is a file; ``ModuleNotFoundError`` naming the package to install
    when ``safetensors`` (or, for a tokenizer, ``tokenizers``) is missing.
    """
    folder = _save_folder(folder)
    adapters = sorted(k for k in state if ".lora_" in k)
    if adapters:
        raise ValueError(f"the model has unmerged LoRA adapters ({adapters[0]}, ...); call "
                         "companion.finetune.merge_lora(model) first: a Hugging Face folder holds plain weights")
    kind = family_of(config)
    family = FAMILIES[kind]
    theirs = family.from_companion(state, config)
    # float32 copies on the CPU: safetensors refuses tensors that share memory (a tied head)
    theirs = {k: v.detach().to("cpu", torch.float32).contiguous().clone() for k, v in theirs.items()}
    if safe_serialization:
        try:
            from safetensors.torch import save_file  # an optional dependency, needed for this format only
        except ImportError:
            raise ModuleNotFoundError("model.safetensors is written by the safetensors package, which is not "
                                      "installed: pip install safetensors, or pass safe_serialization=False to write "
                                      "pytorch_model.bin") from None
    hf_tokenizer = as_hf_tokenizer(tokenizer) if tokenizer is not None else None
    if hf_tokenizer is not None:
        check_tokenizer_fits(hf_tokenizer, config, "tokenizer")
    folder.mkdir(parents=True, exist_ok=True)
    weights = "model.safetensors" if safe_serialization else "pytorch_model.bin"
    with atomic_write(folder / weights) as tmp:
        if safe_serialization:
            save_file(theirs, str(tmp), metadata={"format": "pt"})
        else:
            torch.save(theirs, tmp)
    _remove(folder, _weight_files(folder) - {weights})
    cfg = family.config_to_hf(config)
    if hf_tokenizer is not None:
        cfg.update(tokenizer_ids(hf_tokenizer))  # the beginning/end-of-text ids, as the tokenizer names them
    atomic_write_text(folder / "config.json", json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    written = write_tokenizer_files(folder, hf_tokenizer, config) if hf_tokenizer is not None else []
    _remove(folder, set(TOKENIZER_FILES) - set(written))


def _save_folder(folder: Any) -> Path:
    if not isinstance(folder, (str, os.PathLike)):
        raise TypeError(f"folder must be a str or os.PathLike, got {type(folder).__name__}")
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise NotADirectoryError(f"folder={str(folder)!r} is a file; expected a folder (or a new name) to write "
                                 "config.json and the weights into")
    return folder


def _weight_files(folder: Path) -> set[str]:
    """Every weights file of a Hugging Face folder: single files, indexes and the shards they (or the usual
    shard names) point to."""
    found = {p.name for p in folder.iterdir() if SHARD.fullmatch(p.name)}
    for name, index in WEIGHT_FILES:
        found |= {name, index}
        if (folder / index).is_file():
            try:
                found |= {f for f in _shards(folder / index) if f.endswith((".safetensors", ".bin"))}
            except ValueError:
                pass  # a broken index goes anyway; its shards, if named as usual, were found above
    return found


def _remove(folder: Path, names: set[str]) -> None:
    """Delete the files ``names`` of ``folder`` that exist, indexes before the shards they list."""
    for name in sorted(names, key=lambda n: (not n.endswith(".json"), n)):
        path = folder / name
        if path.is_file():
            path.unlink()

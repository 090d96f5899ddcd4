"""LoRA: fine-tune a frozen linear layer through a low-rank update ΔW = B A (Hu et al. 2022).

A pretrained weight ``W`` (D_out, D_in) stays frozen; the layer learns two small matrices instead,
``A`` (r, D_in) and ``B`` (D_out, r) with a rank ``r`` much smaller than D_in and D_out::

    y = x Wᵀ + b + (α / r) · x Aᵀ Bᵀ          i.e. the weight W + (α / r) · B A

- ``B`` starts at zero, so ΔW = 0: the adapted model is *exactly* the pretrained one at step 0, and training
  starts from its loss. ``A`` starts random (Kaiming-uniform, as PyTorch's and peft's ``nn.Linear``), so the
  gradient of ``B`` is not zero. (Both zero would stay zero: each one's gradient is proportional to the other.)
- The scale α / r: the paper sets α "to the first r we try and do not tune it", so a larger rank gets a smaller
  factor. Kalajdzievski (2023, rsLoRA) showed that with Adam this makes learning slow down as r grows, and that
  α / √r is the rank-stable choice; ``rslora=True`` uses it (peft's ``use_rslora``). α = 2r, common in
  practice, keeps the factor at 2 for every rank.
- Trainable parameters per layer: r · (D_in + D_out) instead of D_in · D_out; AdamW keeps two moments for each
  trainable parameter, so the optimiser state shrinks by the same factor.
- ``merge_lora`` folds the update into the weight, W' = W + (α / r) B A: the same outputs at no extra cost at
  inference, and a plain model (``GPT.save_pretrained`` writes it as any other). An adapted output head that
  was tied to the token table gets a weight of its own, and the model's config then says so
  (``tie_embeddings=False``): its state dict and its saved folder rebuild the merged model.
- α is saved with the adapters (the buffer ``lora_alpha`` beside ``lora_A`` and ``lora_B``), so a state dict
  loaded into a model adapted with another α brings the trained scale back.

Names follow Hugging Face peft (``lora_A``, ``lora_B``, ``scaling``, the target modules by name); the default
targets, the query and value projections, are the paper's choice (section 7.1).

Checked in tests/test_finetune.py against peft's LoRA on the same base weights and the same A and B (a single
linear layer, and a Hugging Face Llama adapted by peft vs our GPT with its weights), peft's
``merge_and_unload`` against ``merge_lora``, the zero start, the parameter count, and bad arguments.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from companion._checks import check_bool, check_input_dtype, check_positive_float, check_positive_int, check_probability

__all__ = ["LoRALinear", "apply_lora", "merge_lora", "lora_modules", "DEFAULT_TARGETS"]

DEFAULT_TARGETS = ("q_proj", "v_proj")  # Hu et al. 2022, section 7.1: adapt W_q and W_v


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update ``(alpha / r) · B A`` (``alpha / √r`` with rslora).

    Args:
        base: the pretrained layer; its weight and bias are frozen (``requires_grad=False``), not copied.
        r: the rank of the update, >= 1 (at most min(D_in, D_out) to be low-rank; larger is allowed).
        alpha: the scale numerator, > 0; the update is multiplied by ``alpha / r``.
        dropout: dropout on the adapter's input only (peft's ``lora_dropout``), in [0, 1).
        rslora: scale by ``alpha / √r`` instead (rank-stabilised LoRA, Kalajdzievski 2023; peft's ``use_rslora``).
    """

    def __init__(self, base: nn.Linear, r: int, alpha: float, dropout: float = 0.0, rslora: bool = False) -> None:
        super().__init__()
        if not isinstance(base, nn.Linear):
            raise TypeError(f"base must be a torch.nn.Linear, got {type(base).__name__}")
        check_positive_int("r", r)
        check_positive_float("alpha", alpha)
        check_probability("dropout", dropout, allow_one=False)
        check_bool("rslora", rslora)
        self.base = base
        self.base.requires_grad_(False)
        self.r = r
        self.rslora = rslora
        d_out, d_in = base.weight.shape
        factory = {"dtype": base.weight.dtype, "device": base.weight.device}
        # saved with the adapters: B A was trained at this scale
        self.register_buffer("lora_alpha", torch.tensor(float(alpha), device=base.weight.device))
        self.lora_A = nn.Parameter(torch.empty(r, d_in, **factory))  # (r, D_in)
        self.lora_B = nn.Parameter(torch.zeros(d_out, r, **factory))  # (D_out, r): zero, so ΔW = 0 at the start
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # nn.Linear's own init (peft's default too)
        self.dropout = nn.Dropout(dropout)

    @property
    def alpha(self) -> float:
        """The scale numerator α (as saved in the state dict)."""
        return float(self.lora_alpha)

    @property
    def scaling(self) -> float:
        """The factor of the update: α / r, or α / √r with rslora."""
        return self.alpha / self._divisor

    @property
    def _divisor(self) -> float:
        return math.sqrt(self.r) if self.rslora else float(self.r)

    @property
    def weight(self) -> Tensor:
        """The frozen base weight W (as peft's layers expose it), so code that reads ``layer.weight`` still works."""
        return self.base.weight

    @property
    def bias(self) -> Tensor | None:
        """The frozen base bias."""
        return self.base.bias

    def delta_weight(self) -> Tensor:
        """ΔW = (alpha / r) · B A (alpha / √r with rslora). Shapes: -> (D_out, D_in)."""
        return (self.lora_B @ self.lora_A) * (self.lora_alpha / self._divisor).to(self.lora_B.dtype)  # (D_out, D_in)

    def merged(self) -> nn.Linear:
        """A plain ``nn.Linear`` with weight W + ΔW and the base's bias (frozen as the base was)."""
        layer = nn.Linear(self.base.in_features, self.base.out_features, bias=self.base.bias is not None,
                          device=self.base.weight.device, dtype=self.base.weight.dtype)  # fmt: skip
        with torch.no_grad():
            layer.weight.copy_(self.base.weight + self.delta_weight())
            if self.base.bias is not None:
                layer.bias.copy_(self.base.bias)
        return layer.requires_grad_(False)

    def forward(self, x: Tensor) -> Tensor:
        """Shapes: x (..., D_in) -> (..., D_out)."""
        check_input_dtype("x", x, self.lora_A)
        update = self.dropout(x) @ self.lora_A.T  # (..., r): the only D_in-to-r product
        scaling = (self.lora_alpha / self._divisor).to(update.dtype)  # a tensor: no read-back to the host
        return self.base(x) + (update @ self.lora_B.T) * scaling  # (..., D_out)

    def extra_repr(self) -> str:
        rs = ", rslora=True" if self.rslora else ""
        return f"r={self.r}, alpha={self.alpha:g}{rs}, scaling={self.scaling:g}"


def _matches(name: str, target: str) -> bool:
    """peft's rule: a target names a module by its full dotted name or by its last parts (``q_proj``)."""
    return name == target or name.endswith("." + target)


def lora_modules(model: nn.Module) -> dict[str, LoRALinear]:
    """The ``LoRALinear`` layers of ``model`` by name."""
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return {name: m for name, m in model.named_modules() if isinstance(m, LoRALinear)}


def apply_lora(
    model: nn.Module,
    r: int,
    alpha: float,
    targets: Sequence[str] = DEFAULT_TARGETS,
    dropout: float = 0.0,
    rslora: bool = False,
) -> nn.Module:
    """Replace each ``nn.Linear`` named by ``targets`` with a ``LoRALinear``; freeze every other parameter.

    In place; returns ``model``, whose only trainable parameters are then the adapters' ``lora_A``, ``lora_B``.
    Each target must match at least one linear layer (by full name or by its last dotted parts, e.g. "q_proj"
    matches "layers.0.self_attn.q_proj"). ``rslora=True`` scales each update by α / √r instead of α / r.

    Raises:
        ValueError: ``r`` <= 0, ``alpha`` <= 0, a target that matches no ``nn.Linear`` (naming it and the
            layers there are), or a model that already has LoRA layers (merge them first).
        TypeError: ``model`` is not an ``nn.Module`` or ``targets`` is not a list of names.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    check_positive_int("r", r)
    check_positive_float("alpha", alpha)
    check_bool("rslora", rslora)
    if isinstance(targets, str) or not isinstance(targets, Sequence) or not targets or \
            not all(isinstance(t, str) for t in targets):  # fmt: skip
        raise TypeError(f"targets must be a non-empty list of module names such as ['q_proj', 'v_proj'], "
                        f"got {targets!r}")
    if lora_modules(model):
        raise ValueError("model already has LoRA layers; call merge_lora(model) before applying LoRA again")
    linears = {name: m for name, m in model.named_modules() if isinstance(m, nn.Linear)}
    chosen: dict[str, nn.Linear] = {}
    for target in targets:
        found = {n: m for n, m in linears.items() if _matches(n, target)}
        if not found:
            kinds = sorted({n.rsplit(".", 1)[-1] for n in linears})
            raise ValueError(f"targets entry {target!r} matches no nn.Linear of {type(model).__name__}; its linear "
                             f"layers are named {kinds}")
        chosen.update(found)
    model.requires_grad_(False)
    for name, layer in chosen.items():
        _replace(model, name, LoRALinear(layer, r, alpha, dropout, rslora))
    return model


def merge_lora(model: nn.Module) -> nn.Module:
    """Fold every ``LoRALinear`` into its base ``nn.Linear``: weight W + (alpha / r) B A, in place.

    The outputs are unchanged (up to float rounding); the model is again the architecture it was before
    ``apply_lora``, so it saves and loads as one. Returns ``model``.

    A head tied to the token table (``tie_embeddings``) gets a weight of its own and the config of the model
    that holds it becomes ``config.replace(tie_embeddings=False)``, so that ``state_dict`` into a fresh model and
    ``save_pretrained`` / ``from_pretrained`` give the merged model back.

    Raises ``ValueError`` if ``model`` has no LoRA layer, or a tied one with no config to untie (before merging).
    """
    found = lora_modules(model)
    if not found:
        raise ValueError(f"model ({type(model).__name__}) has no LoRA layers to merge; apply_lora adds them")
    uses = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    tied = {name: _config_holder(model, name) for name, layer in found.items() if uses[id(layer.base.weight)] > 1}
    for name, layer in found.items():
        if name in tied:  # a head sharing the token table: a new layer, the table unchanged, the config untied
            tied[name].config = tied[name].config.replace(tie_embeddings=False)
            _replace(model, name, layer.merged())
            continue
        with torch.no_grad():  # W += ΔW in place: the base keeps its storage (decode_layout, companion.packing)
            layer.base.weight += layer.delta_weight()
        _replace(model, name, layer.base)
    return model


def _config_holder(model: nn.Module, name: str) -> nn.Module:
    """The nearest module above the tied layer ``name`` whose config says ``tie_embeddings``: merging gives the
    layer a weight of its own, so that config must then say so, or a fresh model built from it (or its saved
    folder) would tie them again. A tied layer with no such config is refused: merging would untie it unseen."""
    parts = name.split(".")
    for depth in range(len(parts) - 1, -1, -1):
        holder = model.get_submodule(".".join(parts[:depth]))
        config = getattr(holder, "config", None)
        if getattr(config, "tie_embeddings", False) and hasattr(config, "replace"):
            return holder
    raise ValueError(f"{name} shares its weight with another layer (tied) and {type(model).__name__} has no config "
                     "with tie_embeddings to untie; merging would give it a weight of its own unseen. Leave it out "
                     "of apply_lora's targets")


def _replace(model: nn.Module, name: str, new: nn.Module) -> None:
    parent_name, _, child = name.rpartition(".")
    parent = model.get_submodule(parent_name) if parent_name else model
    setattr(parent, child, new)

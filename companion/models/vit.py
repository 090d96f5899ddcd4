"""``ViT``: the Vision Transformer (Dosovitskiy et al. 2021), an encoder whose tokens are image patches.

"An image is worth 16x16 words": cut the image into p×p patches, flatten each into C·p·p numbers, project it
linearly to D, put a learned [CLS] vector in front, add learned positions, run pre-norm encoder layers, and
classify from the final norm of [CLS]'s vector (§3.1, eq. 1-4)::

    image (B, C, H, W) --patchify--> (B, N, C·p·p) --linear--> (B, N, D) --[CLS] + positions--> (B, N + 1, D)
      --> L × EncoderLayer --> norm --> h[:, 0] --> head --> logits (B, num_labels)

``patchify`` orders each patch's numbers channel first, then row, then column, the order of a ``Conv2d``
weight (D, C, p, p): the linear projection of flattened patches *is* a convolution with kernel = stride = p,
which is how Hugging Face writes it (``load_vit_state_dict`` reshapes that weight). Checked against
``transformers.ViTForImageClassification`` from random weights (tests/test_vit.py).

Left out on purpose: interpolating the position table for other image sizes, the pre-training MLP head,
2-D positions (the paper found 1-D learned positions as good, Table 8 / Appendix D.4).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from companion._checks import check_choice, check_input_dtype, check_num_labels, check_positive_int, check_tensor
from companion.models.base import ENCODER_IGNORES, check_unused, final_norm
from companion.models.blocks import EncoderLayer, init_weights
from companion.models.config import ModelConfig
from companion.positions import LearnedPositionalEmbedding

__all__ = ["ViT", "patchify"]


def patchify(images: Tensor, patch_size: int) -> Tensor:
    """Cut images into non-overlapping ``patch_size`` × ``patch_size`` patches, left to right, top to bottom,
    each flattened channel first (the order of a ``Conv2d`` weight).

    Raises ``ValueError`` if the height or width is not a multiple of ``patch_size``.
    Shapes: images (B, C, H, W) -> (B, N, C·p·p) with N = (H/p)·(W/p).
    """
    check_tensor("images", images, ndim=4)
    check_positive_int("patch_size", patch_size)
    b, c, h, w = images.shape
    if h % patch_size or w % patch_size:
        raise ValueError(f"images of size {h}×{w} do not split into {patch_size}×{patch_size} patches; expected "
                         f"a height and width that are multiples of patch_size={patch_size}")
    p = patch_size
    x = images.reshape(b, c, h // p, p, w // p, p)  # (B, C, rows, p, cols, p)
    x = x.permute(0, 2, 4, 1, 3, 5)  # (B, rows, cols, C, p, p)
    return x.reshape(b, (h // p) * (w // p), c * p * p)  # (B, N, C·p·p)


class ViT(nn.Module):
    """Vision Transformer for image classification: patches -> linear -> [CLS] + positions -> encoder -> head.

    ``config`` needs ``image_size`` (e.g. ``ModelConfig.vit(...)``); ``positions`` is ``"learned"`` (ViT) or
    ``"none"`` (for the ablation: then the encoder sees the patches as an unordered set).
    """

    def __init__(self, config: ModelConfig, num_labels: int) -> None:
        super().__init__()
        if config.image_size is None:
            raise ValueError("ViT needs config.image_size (the side of the input images in pixels); start from "
                             "ModelConfig.vit(image_size=..., patch_size=...)")
        check_choice("config.positions (ViT)", config.positions, ("learned", "none"))
        check_num_labels("num_labels", num_labels)
        self.config, self.num_labels = config, num_labels
        self.n_patches = (config.image_size // config.patch_size) ** 2
        # its positions follow the image: (image_size / patch_size)² patches + [CLS], whatever max_seq_len says
        check_unused(config, "a ViT", {**ENCODER_IGNORES, "max_seq_len": self.n_patches + 1})
        patch_dim = config.num_channels * config.patch_size**2
        self.patch_embed = nn.Linear(patch_dim, config.d_model)  # the same for every patch
        self.cls_token = nn.Parameter(torch.zeros(1, 1, config.d_model))  # learned, prepended to every image
        self.position = LearnedPositionalEmbedding(self.n_patches + 1, config.d_model) \
            if config.positions == "learned" else None  # fmt: skip
        self.dropout = nn.Dropout(config.dropout)
        self.layers = nn.ModuleList(EncoderLayer(config) for _ in range(config.n_layers))
        self.norm = final_norm(config)
        self.head = nn.Linear(config.d_model, num_labels)
        init_weights(self, config.n_layers)
        nn.init.normal_(self.cls_token, 0.0, 0.02)

    def embed(self, images: Tensor) -> Tensor:
        """The token sequence of each image: [CLS] then one vector per patch, plus positions.

        Raises ``ValueError`` for a channel count or an image size the config does not describe.
        Shapes: images (B, C, H, W) -> (B, N + 1, D).
        """
        check_tensor("images", images, ndim=4)
        check_input_dtype("images", images, self.patch_embed.weight)
        c, size = self.config.num_channels, self.config.image_size
        if images.size(1) != c:
            raise ValueError(f"images have {images.size(1)} channels (shape {tuple(images.shape)}); expected "
                             f"num_channels={c}, as (B, {c}, {size}, {size})")
        x = self.patch_embed(patchify(images, self.config.patch_size))  # (B, N, D)
        if images.shape[-2:] != (size, size):
            raise ValueError(f"images are {images.size(2)}×{images.size(3)} pixels; expected image_size={size} "
                             f"({self.n_patches} patches for the {self.n_patches + 1} learned positions)")
        cls = self.cls_token.expand(x.size(0), -1, -1)  # (B, 1, D)
        x = torch.cat([cls, x], dim=1)  # (B, N + 1, D)
        if self.position is not None:
            x = x + self.position(x.size(1))  # (N + 1, D) broadcast over B
        return self.dropout(x)

    def hidden_states(self, images: Tensor) -> Tensor:
        """The encoder's output for every token ([CLS] first), after the final norm. (B, C, H, W) -> (B, N + 1, D)."""
        h = self.embed(images)  # (B, N + 1, D)
        for layer in self.layers:
            h = layer(h)  # (B, N + 1, D): every token attends to every token, no mask

        return self.norm(h) if self.norm is not None else h

    def attention_weights(self, images: Tensor) -> list[Tensor]:
        """Every layer's attention weights, row ``i`` = how token ``i`` spreads its attention; row 0 is the
        [CLS] query, columns 1.. are the patches in ``patchify``'s order.

        Shapes: images (B, C, H, W) -> L tensors (B, H, N + 1, N + 1), each row summing to 1.
        """
        h = self.embed(images)  # (B, N + 1, D)
        weights = []
        for layer in self.layers:
            x = layer.self_attn_block.norm(h) if self.config.norm_placement == "pre" else h  # what attention reads
            weights.append(layer.self_attn(x, return_weights=True)[1])  # (B, H, N + 1, N + 1)
            h = layer(h)  # (B, N + 1, D)
        return weights

    def forward(self, images: Tensor) -> Tensor:
        """Class logits from the [CLS] vector. Shapes: images (B, C, H, W) -> (B, num_labels)."""
        return self.head(self.hidden_states(images)[:, 0])  # (B, num_labels)

    def extra_repr(self) -> str:
        return f"num_labels={self.num_labels}, n_patches={self.n_patches}"

"""companion's ViT: patchify by hand, the projection as a convolution, ViT-B/16's size, and equality with
Hugging Face's ``ViTForImageClassification`` built from random weights (nothing is downloaded).

The comparison uses a geometry unlike chapter 12's (two channels, 12×12 images, 3×3 patches, width 128), so a
loader that only works for one shape would fail here.
"""

from __future__ import annotations

import pytest
import torch
from model_helpers import randomize
from torch import nn
from torch.testing import assert_close

from companion.models import ModelConfig, ViT, load_vit_state_dict, num_parameters, patchify


def test_patchify_by_hand() -> None:
    """A 4×4 image numbered 0..15 row by row, 2×2 patches: left to right, top to bottom."""
    image = torch.arange(16.0).reshape(1, 1, 4, 4)
    expected = torch.tensor([[[0.0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]])
    assert torch.equal(patchify(image, 2), expected)
    two = torch.cat([image, 100 + image], dim=1)  # a second channel: each patch lists channel 0, then channel 1
    assert torch.equal(patchify(two, 2)[0, 0], torch.tensor([0.0, 1, 4, 5, 100, 101, 104, 105]))


def test_linear_on_patches_is_a_strided_convolution() -> None:
    """The identity behind every ViT implementation: Conv2d with kernel = stride = p on the image equals one
    linear layer applied to each flattened patch (weight reshaped from (D, C, p, p) to (D, C·p·p))."""
    torch.manual_seed(0)
    images = torch.randn(2, 3, 12, 8)  # not square: rows and columns must not be swapped
    conv = nn.Conv2d(3, 10, kernel_size=4, stride=4)
    tokens = patchify(images, 4) @ conv.weight.reshape(10, -1).T + conv.bias  # (B, N, D)
    assert_close(tokens, conv(images).flatten(2).transpose(1, 2))
    unfolded = images.unfold(2, 4, 4).unfold(3, 4, 4)  # (B, C, rows, cols, p, p)
    assert_close(patchify(images, 4), unfolded.permute(0, 2, 3, 1, 4, 5).reshape(2, 6, 48))


def test_vit_b16_has_86_6_million_parameters() -> None:
    """ViT-B/16 with a 1000-class head (Dosovitskiy et al. 2021, Table 1: 86M): counted by hand and by numel."""
    config = ModelConfig.vit()
    d, layers, patches = 768, 12, (224 // 16) ** 2
    layer = 4 * (d * d + d) + (2 * d * 3072 + 3072 + d) + 2 * 2 * d  # attention, FFN, two LayerNorms
    by_hand = (16 * 16 * 3 * d + d) + d + (patches + 1) * d + layers * layer + 2 * d + (d * 1000 + 1000)
    with torch.device("meta"):
        model = ViT(config, num_labels=1000)
    assert config.max_seq_len == patches + 1 == 197
    assert num_parameters(model) == by_hand == 86_567_656


def test_attention_weights_are_what_the_layers_use() -> None:
    """Rows sum to 1, and the weights rebuild the first layer's attention output."""
    torch.manual_seed(0)
    model = ViT(ModelConfig.vit(image_size=8, patch_size=2, num_channels=1, d_model=32, n_heads=4, n_layers=2,
                                d_ff=64), num_labels=3).eval()  # fmt: skip
    images = torch.rand(2, 1, 8, 8)
    weights = model.attention_weights(images)
    assert len(weights) == 2 and weights[0].shape == (2, 4, 17, 17)
    assert_close(weights[1].sum(-1), torch.ones(2, 4, 17))
    layer, h = model.layers[0], model.embed(images)
    x = layer.self_attn_block.norm(h)
    v = layer.self_attn.v_proj(x).reshape(2, 17, 4, 8).transpose(1, 2)  # (B, H, N + 1, D_h)
    out = layer.self_attn.o_proj((weights[0] @ v).transpose(1, 2).reshape(2, 17, 32))
    assert_close(out, layer.self_attn(x))


def test_bad_images_and_configs_are_refused() -> None:
    model = ViT(ModelConfig.vit(image_size=8, patch_size=2, num_channels=1, d_model=16, n_heads=2, n_layers=1,
                                d_ff=32), num_labels=10)  # fmt: skip
    with pytest.raises(ValueError, match="do not split into 3×3 patches"):
        patchify(torch.zeros(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match="images have 3 channels .* expected num_channels=1"):
        model(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ValueError, match="images are 6×6 pixels; expected image_size=8"):
        model(torch.zeros(2, 1, 6, 6))
    with pytest.raises(ValueError, match="do not split into 2×2 patches"):
        model(torch.zeros(2, 1, 9, 9))
    with pytest.raises(ValueError, match="images must have 4 dimensions, got shape \\(1, 8, 8\\)"):
        model(torch.zeros(1, 8, 8))
    with pytest.raises(ValueError, match="num_labels=1 is invalid"):
        ViT(model.config, num_labels=1)
    with pytest.raises(ValueError, match="image_size=30 is not a multiple of patch_size=16"):
        ModelConfig.vit(image_size=30)
    with pytest.raises(ValueError, match="ViT needs config.image_size"):
        ViT(ModelConfig(), num_labels=2)
    with pytest.raises(ValueError, match="config.positions \\(ViT\\)='rope'"):
        ViT(model.config.replace(positions="rope"), num_labels=2)


def test_without_positions_the_patches_are_a_set() -> None:
    """positions='none' (the ablation): shuffling the patches leaves the [CLS] output unchanged."""
    torch.manual_seed(0)
    config = ModelConfig.vit(image_size=8, patch_size=2, num_channels=1, d_model=16, n_heads=2, n_layers=2, d_ff=32)
    images = torch.rand(1, 1, 8, 8)
    flipped = images.flip(-1)  # the same patches (each mirrored) in a different order: not a permutation
    shuffled = images.reshape(1, 1, 4, 2, 4, 2)[:, :, [2, 0, 3, 1]].reshape(1, 1, 8, 8)  # rows of patches permuted
    with torch.no_grad():
        unordered = ViT(config.replace(positions="none"), num_labels=3).eval()
        assert_close(unordered(images), unordered(shuffled))
        ordered = ViT(config, num_labels=3).eval()
        assert not torch.allclose(ordered(images), ordered(shuffled))
        assert not torch.allclose(unordered(images), unordered(flipped))


# --- Hugging Face ------------------------------------------------------------------------------------------

OLD_NAMES = {  # transformers 5 layer names -> the names of the published checkpoints (transformers 4)
    "attention.q_proj": "attention.attention.query", "attention.k_proj": "attention.attention.key",
    "attention.v_proj": "attention.attention.value", "attention.o_proj": "attention.output.dense",
    "mlp.fc1": "intermediate.dense", "mlp.fc2": "output.dense",
}  # fmt: skip


def hf_reference(**changes) -> nn.Module:
    transformers = pytest.importorskip("transformers")
    base = dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2, intermediate_size=96, image_size=12,
                patch_size=3, num_channels=2, num_labels=5, hidden_dropout_prob=0.0,
                attention_probs_dropout_prob=0.0)  # fmt: skip
    config = transformers.ViTConfig(**{**base, **changes})
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return randomize(transformers.ViTForImageClassification(config))


def images(seed: int = 1) -> torch.Tensor:
    return torch.randn(3, 2, 12, 12, generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def test_logits_equal_vit_for_image_classification() -> None:
    ref = hf_reference()
    ours = load_vit_state_dict(ref.state_dict()).eval()
    c = ours.config
    assert (c.image_size, c.patch_size, c.num_channels, c.d_model, c.n_heads, c.n_layers, c.d_ff) == \
        (12, 3, 2, 128, 2, 2, 96) and ours.num_labels == 5  # fmt: skip
    x = images()
    assert (ours(x) - ref(pixel_values=x).logits).abs().max() <= 1e-5


@torch.no_grad()
def test_an_explicit_config_and_the_published_layer_names() -> None:
    """Four heads of width 32 (the tensors alone would say two of 64), and a state dict under the names of
    the published checkpoints (``vit.encoder.layer.*``), as a file from the Hub holds them."""
    ref = hf_reference(num_attention_heads=4)
    config = ModelConfig.vit(image_size=12, patch_size=3, num_channels=2, d_model=128, n_heads=4, n_layers=2, d_ff=96)
    sd = ref.state_dict()
    if any(k.startswith("vit.layers.") for k in sd):  # transformers >= 5: rename to the published layout
        old = {}
        for k, v in sd.items():
            for new_name, old_name in OLD_NAMES.items():
                k = k.replace(f".{new_name}.", f".{old_name}.")
            old[k.replace("vit.layers.", "vit.encoder.layer.")] = v
        sd = old
    ours = load_vit_state_dict(sd, config).eval()
    x = images()
    assert (ours(x) - ref(pixel_values=x).logits).abs().max() <= 1e-5
    guessed = load_vit_state_dict(sd).eval()
    assert (guessed(x) - ref(pixel_values=x).logits).abs().max() > 1e-3


def test_vit_b16_count_equals_hugging_face() -> None:
    transformers = pytest.importorskip("transformers")
    with torch.device("meta"):
        ref = transformers.ViTForImageClassification(transformers.ViTConfig(num_labels=1000))  # ViT-B/16's sizes
        ours = ViT(ModelConfig.vit(), num_labels=1000)
    assert num_parameters(ours) == num_parameters(ref) == 86_567_656


def test_loader_refuses_what_is_not_a_vit() -> None:
    ref = hf_reference()
    sd = {k: v for k, v in ref.state_dict().items() if not k.startswith("classifier")}
    with pytest.raises(ValueError, match="ViT state dict has no weight 'classifier.weight'"):
        load_vit_state_dict(sd)
    sd = {k: v for k, v in ref.state_dict().items() if ".layers." not in k and ".layer." not in k}
    with pytest.raises(ValueError, match="no layer weights"):
        load_vit_state_dict(sd)


@torch.no_grad()
def test_a_vit_without_qkv_biases_loads_with_zero_biases() -> None:
    """``ViTConfig(qkv_bias=False)``: the q/k/v projections have no bias; a zero one computes the same."""
    ref = hf_reference(qkv_bias=False)
    assert not any(k.endswith(("q_proj.bias", "query.bias")) for k in ref.state_dict())
    ours = load_vit_state_dict(ref.state_dict()).eval()
    assert not ours.layers[0].self_attn.q_proj.bias.any()
    x = images()
    assert (ours(x) - ref(pixel_values=x).logits).abs().max() <= 1e-5


def test_vit_h_is_guessed_with_its_16_heads_of_80() -> None:
    """The one published ViT whose heads are not 64 wide: ViT-H/14, D = 1280 (shapes only, on the meta device)."""
    transformers = pytest.importorskip("transformers")
    from companion.models.hf import vit as hf_vit

    with torch.device("meta"):
        ref = transformers.ViTForImageClassification(transformers.ViTConfig(
            hidden_size=1280, num_hidden_layers=1, num_attention_heads=16, intermediate_size=64, image_size=28,
            patch_size=14, num_labels=2))  # fmt: skip
    assert hf_vit.config_from_state_dict(ref.state_dict()).n_heads == 16

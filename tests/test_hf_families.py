"""Today's Hugging Face families in both directions: Mixtral, Qwen3 (dense) and DeepSeek-V3 (chapter 14).

``transformers`` builds small models with random weights (nothing is downloaded); every weight is redrawn at a
visible scale, DeepSeek's balancing bias too, so a matrix in the wrong place, a wrong routing rule (softmax vs
sigmoid, renormalising, groups, the scaling factor, the bias used for the weights instead of the choice only)
or the wrong RoPE pairing changes the logits. Checked: logits equal within 1e-4 in float32, greedy
``generate`` with the KV cache equal to ``transformers``' ``generate``, the folder round trip back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from model_helpers import randomize
from torch import nn
from torch.testing import assert_close

from companion.generation import generate
from companion.models import GPT, ModelConfig

transformers = pytest.importorskip("transformers")
VOCAB = 97


def hf_config(family: str, **changes: object) -> object:
    if family == "mixtral":
        base = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2, max_position_embeddings=64,
                    rms_norm_eps=1e-5, tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)  # fmt: skip
        return transformers.MixtralConfig(**{**base, **changes})
    if family == "qwen3":
        base = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=16, max_position_embeddings=64, rms_norm_eps=1e-6,
                    tie_word_embeddings=True, bos_token_id=0, eos_token_id=0)  # fmt: skip
        return transformers.Qwen3Config(**{**base, **changes})
    base = dict(vocab_size=VOCAB, hidden_size=48, intermediate_size=96, moe_intermediate_size=32, num_hidden_layers=3,
                num_attention_heads=4, num_key_value_heads=4, n_routed_experts=8, n_group=4, topk_group=2,
                num_experts_per_tok=3,
                n_shared_experts=1, first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8,
                qk_nope_head_dim=12, v_head_dim=10, routed_scaling_factor=2.5, max_position_embeddings=64,
                tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)  # fmt: skip
    return transformers.DeepseekV3Config(**{**base, **changes})


CLASSES = {"mixtral": "MixtralForCausalLM", "qwen3": "Qwen3ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM"}


def hf_model(family: str, **changes: object) -> nn.Module:
    model = getattr(transformers, CLASSES[family])(hf_config(family, **changes))
    model.config._attn_implementation = "eager"
    randomize(model)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, buffer in model.named_buffers():
            if name.endswith("e_score_correction_bias"):  # DeepSeek's balancing bias: steers the choice only
                buffer.copy_(0.1 * torch.randn(buffer.shape, generator=g))
    return model


def ids(length: int = 12) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(1))


CASES = [
    ("mixtral", {}),
    ("mixtral", {"sliding_window": 5, "num_experts_per_tok": 1}),
    ("qwen3", {}),
    ("qwen3", {"tie_word_embeddings": False, "head_dim": 12}),
    ("deepseek_v3", {}),
    ("deepseek_v3", {"q_lora_rank": None, "rope_interleave": False, "n_group": 1, "topk_group": 1,
                     "norm_topk_prob": False, "n_shared_experts": 2, "routed_scaling_factor": 1.0}),
]  # fmt: skip
IDS = [f"{family}-{i}" for i, (family, _) in enumerate(CASES)]


@pytest.mark.parametrize(("family", "changes"), CASES, ids=IDS)
@torch.no_grad()
def test_from_pretrained_equals_transformers(tmp_path: Path, family: str, changes: dict[str, object]) -> None:
    ref = hf_model(family, **changes)
    ref.save_pretrained(tmp_path)
    ours = GPT.from_pretrained(tmp_path)
    x = ids()
    assert_close(ours(x), ref(x).logits, atol=1e-4, rtol=1e-4)
    prompt = x[:, :4]
    theirs = ref.generate(prompt, max_new_tokens=14, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(generate(ours, prompt, 14, greedy=True), theirs)  # with our KV cache (rolling if windowed)


@pytest.mark.parametrize(("family", "changes"), CASES[::2], ids=IDS[::2])
@torch.no_grad()
def test_in_memory_state_dict_loads_too(tmp_path: Path, family: str, changes: dict[str, object]) -> None:
    """transformers 5 fuses the experts in memory (``gate_up_proj``); a folder of that state dict loads the same."""
    ref = hf_model(family, **changes)
    ref.config.save_pretrained(tmp_path)
    torch.save(ref.state_dict(), tmp_path / "pytorch_model.bin")
    x = ids()
    assert_close(GPT.from_pretrained(tmp_path)(x), ref(x).logits, atol=1e-4, rtol=1e-4)


def our_config(family: str) -> ModelConfig:
    if family == "mixtral":
        return ModelConfig.mixtral_8x7b(vocab_size=VOCAB, d_model=48, n_heads=4, n_kv_heads=2, n_layers=2, d_ff=64,
                                        max_seq_len=64, n_experts=4, sliding_window=6)  # fmt: skip
    if family == "qwen3":
        return ModelConfig.qwen3(vocab_size=VOCAB, d_model=48, n_heads=4, n_kv_heads=2, d_head=16, n_layers=2, d_ff=96,
                                 max_seq_len=64, tie_embeddings=False)  # fmt: skip
    return ModelConfig.deepseek_v3(vocab_size=VOCAB, d_model=48, n_heads=4, n_layers=3, d_ff=96, max_seq_len=64,
                                   kv_rank=16, q_rank=24, rope_head_dim=8, nope_head_dim=12, v_head_dim=10,
                                   n_experts=8, n_experts_per_token=3, d_expert=32, n_dense_layers=1,
                                   router_groups=4, router_group_limit=2)  # fmt: skip


@pytest.mark.parametrize("family", ["mixtral", "qwen3", "deepseek_v3"])
@torch.no_grad()
def test_save_pretrained_is_loaded_by_transformers(tmp_path: Path, family: str) -> None:
    torch.manual_seed(0)
    ours = randomize(GPT(our_config(family)))
    for buffer in ours.buffers():
        if buffer.dim() == 1 and buffer.numel() == 8 and family == "deepseek_v3":  # MoE.score_bias
            buffer.copy_(0.1 * torch.randn(8))
    ours.save_pretrained(tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == family
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert type(ref).__name__ == CLASSES[family]
    x = ids(20)
    assert_close(ref(x).logits, ours(x), atol=1e-4, rtol=1e-4)
    prompt = x[:, :4]
    theirs = ref.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(generate(ours, prompt, 12, greedy=True), theirs)
    back = GPT.from_pretrained(tmp_path)
    assert back.config == ours.config
    assert_close(back(x), ours(x), rtol=0, atol=0)


# --- errors ---------------------------------------------------------------------------------------------


def test_unsupported_model_type_lists_the_supported_ones(tmp_path: Path) -> None:
    hf_model("qwen3").save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"model_type": "qwen3_moe"}))
    with pytest.raises(ValueError, match="model_type='qwen3_moe' is not supported; expected one of 'gpt2', 'llama', "
                                         "'mixtral', 'qwen3', 'deepseek_v3'"):  # fmt: skip
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    ("family", "change", "needle"),
    [("qwen3", {"use_sliding_window": True, "sliding_window": 4, "max_window_layers": 0}, "sliding-window layers"),
     ("deepseek_v3", {"rope_parameters": {"rope_type": "dynamic", "factor": 4.0, "rope_theta": 10000.0}},
      "rope scaling 'dynamic' is not supported for DeepSeek-V3; expected none or 'yarn'"),
     ("qwen3", {"rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0,
                                    "original_max_position_embeddings": 16}}, "rope scaling 'yarn'"),
     ("mixtral", {"hidden_act": "gelu"}, "hidden_act='gelu'")],
)  # fmt: skip
def test_unsupported_features_are_named(tmp_path: Path, family: str, change: dict[str, object], needle: str) -> None:
    hf_model(family).save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg | change))
    with pytest.raises(ValueError, match=needle):
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    ("config", "needle"),
    [(ModelConfig.llama_tiny(vocab_size=VOCAB, n_experts=4, router="sigmoid"), "router='sigmoid'"),
     (ModelConfig.llama_tiny(vocab_size=VOCAB, qk_norm=True, sliding_window=8), "sliding_window=8"),
     (ModelConfig.llama_tiny(vocab_size=VOCAB, kv_rank=16, n_experts=0), "n_experts=0"),
     (ModelConfig.llama_tiny(vocab_size=VOCAB, sliding_window=8, attention_sinks=2), "attention_sinks=2")],
)  # fmt: skip
def test_save_pretrained_refuses_what_no_family_has(tmp_path: Path, config: ModelConfig, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        GPT(config).save_pretrained(tmp_path)
    assert not list(tmp_path.iterdir())


# --- DeepSeek-V3's released format: FP8 weights with 128x128 block scales, YaRN, the MTP layer ------------------

BLOCK = 128
YARN = {"type": "yarn", "factor": 40, "original_max_position_embeddings": 16, "beta_fast": 32, "beta_slow": 1,
        "mscale": 1.0, "mscale_all_dim": 1.0}  # the released rope_scaling, with a 16-token "original" context
QUANTIZATION = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8", "weight_block_size": [128, 128]}


def quantize_blocks(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(FP8 codes, one scale per 128x128 block, the dequantised weight), block by block as DeepSeek's kernels do:
    the scale maps each block's largest magnitude to e4m3's largest finite value, 448."""
    rows, cols = -(-w.shape[0] // BLOCK), -(-w.shape[1] // BLOCK)
    codes, scale, back = torch.empty(w.shape, dtype=torch.float8_e4m3fn), torch.empty(rows, cols), torch.empty(w.shape)
    for r in range(rows):
        for c in range(cols):
            part = (slice(r * BLOCK, (r + 1) * BLOCK), slice(c * BLOCK, (c + 1) * BLOCK))
            scale[r, c] = w[part].abs().max() / 448.0
            codes[part] = (w[part] / scale[r, c]).to(torch.float8_e4m3fn)
            back[part] = codes[part].float() * scale[r, c]
    return codes, scale, back


def is_quantised(key: str) -> bool:
    """What DeepSeek-V3 stores in FP8: the layers' linear weights, not the norms, the router or the two tables."""
    return key.startswith("model.layers.") and key.endswith("proj.weight")


def test_fp8_block_dequantisation_cuts_the_edge_blocks() -> None:
    from companion.models.hf.quantized import dequantize_fp8_blocks

    w = torch.randn(200, 130, generator=torch.Generator().manual_seed(0))  # neither side a multiple of 128
    codes, scale, back = quantize_blocks(w)
    assert scale.shape == (2, 2)
    assert torch.equal(dequantize_fp8_blocks(codes, scale, (BLOCK, BLOCK)), back)
    assert (back - w).abs().max() < 0.07 * w.abs().max()  # 3 mantissa bits: a few per cent per weight
    with pytest.raises(ValueError, match=r"weight_scale_inv has shape \(2, 1\); expected \(2, 2\)"):
        dequantize_fp8_blocks(codes, scale[:, :1], (BLOCK, BLOCK))


@torch.no_grad()
def test_the_released_layout_loads_as_transformers_with_the_dequantised_weights(tmp_path: Path) -> None:
    """FP8 codes + ``weight_scale_inv``, bfloat16 elsewhere, the YaRN ``rope_scaling`` and one multi-token-prediction
    layer after the last, as in DeepSeek-V3's release; compared with transformers given the dequantised weights."""
    from safetensors.torch import load_file, save_file

    ref = hf_model("deepseek_v3", intermediate_size=160, max_position_embeddings=640, rope_scaling=YARN)
    assert ref.model.layers[0].self_attn.scaling != 20**-0.5  # YaRN's temperature is on the softmax scale
    ref.save_pretrained(tmp_path / "tmp")
    on_disk = load_file(tmp_path / "tmp" / "model.safetensors")
    cfg = json.loads((tmp_path / "tmp" / "config.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k != "rope_parameters"} | {"rope_scaling": YARN, "rope_theta": 10000.0}
    mtp = {k.replace(".layers.2.", ".layers.3."): v for k, v in on_disk.items() if ".layers.2." in k}
    mtp |= {"model.layers.3.enorm.weight": torch.ones(48), "model.layers.3.hnorm.weight": torch.ones(48),
            "model.layers.3.eh_proj.weight": torch.randn(48, 96)}  # the MTP layer's own pieces
    released, dequantised = {}, {}
    for key, w in (on_disk | mtp).items():
        if is_quantised(key):
            released[key], released[key + "_scale_inv"], dequantised[key] = quantize_blocks(w)
        else:
            released[key] = w.to(torch.bfloat16)
            dequantised[key] = released[key].float()
    (tmp_path / "fp8").mkdir()
    save_file(released, str(tmp_path / "fp8" / "model.safetensors"), metadata={"format": "pt"})
    cfg_fp8 = cfg | {"quantization_config": QUANTIZATION, "num_nextn_predict_layers": 1}
    (tmp_path / "fp8" / "config.json").write_text(json.dumps(cfg_fp8))
    assert released["model.layers.0.mlp.gate_proj.weight_scale_inv"].shape == (2, 1)  # 160 rows: a cut edge block
    (tmp_path / "bf16").mkdir()
    save_file({k: v for k, v in dequantised.items() if ".layers.3." not in k}, str(tmp_path / "bf16" /
              "model.safetensors"), metadata={"format": "pt"})  # fmt: skip
    (tmp_path / "bf16" / "config.json").write_text(json.dumps(cfg))
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "bf16", attn_implementation="eager").eval()
    ours = GPT.from_pretrained(tmp_path / "fp8")
    c = ours.config
    assert (c.n_layers, c.rope_scaling, c.rope_factor, c.rope_original_max_seq_len, c.rope_mscale) == (3, "yarn", 40,
                                                                                                       16, 1.0)
    x = ids(24)
    assert_close(ours(x), theirs(x).logits, atol=1e-4, rtol=1e-4)
    ours.save_pretrained(tmp_path / "back")  # plain float32 weights and YaRN in rope_parameters: transformers agrees
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back", attn_implementation="eager").eval()
    assert_close(back(x).logits, theirs(x).logits, atol=1e-4, rtol=1e-4)
    assert GPT.from_pretrained(tmp_path / "back").config == c


@pytest.mark.parametrize("method", ["bitsandbytes", "gptq", "awq"])
def test_other_quantisations_are_refused_by_name(tmp_path: Path, method: str) -> None:
    hf_model("qwen3").save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"quantization_config": {"quant_method": method}}))
    with pytest.raises(ValueError, match=f"quant_method='{method}', which is not supported; expected 'fp8'"):
        GPT.from_pretrained(tmp_path)


def test_integer_weights_and_their_statistics_are_refused() -> None:
    """bitsandbytes' int8 layout read as a plain state dict: int8 codes and an ``SCB`` per row."""
    from companion.models import load_llama_state_dict

    ref = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2))
    config = ModelConfig.llama(vocab_size=VOCAB, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=64)
    sd = dict(ref.state_dict())
    q = "model.layers.0.self_attn.q_proj.weight"
    with pytest.raises(ValueError, match=r"model.layers.0.self_attn.q_proj.SCB; expected none"):
        load_llama_state_dict(sd | {q.replace("weight", "SCB"): torch.ones(16)}, config)
    with pytest.raises(ValueError, match=r"layers.0.self_attn.q_proj.weight has dtype torch.int8; expected floating"):
        load_llama_state_dict(sd | {q: sd[q].to(torch.int8)}, config)
    with pytest.raises(ValueError, match="dtype torch.float8_e4m3fn"):  # FP8 codes without their scales
        load_llama_state_dict(sd | {q: sd[q].to(torch.float8_e4m3fn)}, config)


def test_mixtral_without_rope_theta_uses_transformers_default(tmp_path: Path) -> None:
    hf_model("mixtral").save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg = {k: v for k, v in cfg.items() if k not in ("rope_theta", "rope_parameters")}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert transformers.AutoConfig.from_pretrained(tmp_path).rope_parameters["rope_theta"] == 1e6
    assert GPT.from_pretrained(tmp_path).config.rope_base == 1e6


@pytest.mark.parametrize(("layers", "mtp"), [(1, 0), (1, 1), (2, 2)])
def test_deepseek_drops_exactly_the_mtp_layers(tmp_path: Path, layers: int, mtp: int) -> None:
    """A 3-layer checkpoint whose config says fewer layers: only num_nextn_predict_layers of them may be MTP."""
    hf_model("deepseek_v3").save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"num_hidden_layers": layers,
                                                            "num_nextn_predict_layers": mtp}))  # fmt: skip
    with pytest.raises(ValueError, match=f"has 3 layers; expected n_layers={layers} .*num_nextn_predict_layers={mtp}"):
        GPT.from_pretrained(tmp_path)

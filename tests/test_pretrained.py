"""Hugging Face folders in both directions: ``GPT.from_pretrained`` and ``GPT.save_pretrained``.

Nothing is downloaded: ``transformers`` builds small GPT-2 and Llama models with random weights and writes
them into a temporary folder (``model.safetensors``; ``pytorch_model.bin`` is written with ``torch.save``, the
format older ``transformers`` versions wrote). Every weight is redrawn at a visible scale, so a matrix put in
the wrong place or left untransposed changes the logits.
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



def hf_model(family: str, tie: bool) -> nn.Module:
    if family == "gpt2":
        config = transformers.GPT2Config(vocab_size=VOCAB, n_positions=32, n_embd=48, n_layer=2, n_head=4,
                                         resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, tie_word_embeddings=tie,
                                         bos_token_id=0, eos_token_id=0)  # fmt: skip
        model = transformers.GPT2LMHeadModel(config)
    else:
        config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=48, intermediate_size=128, num_hidden_layers=2,
                                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                          rope_theta=500000.0, rms_norm_eps=1e-5, tie_word_embeddings=tie,
                                          bos_token_id=0, eos_token_id=0)  # fmt: skip
        model = transformers.LlamaForCausalLM(config)
    model.config._attn_implementation = "eager"
    return randomize(model)


def write_hf_folder(model: nn.Module, folder: Path, fmt: str) -> Path:
    if fmt == "safetensors":
        model.save_pretrained(folder)
    else:
        model.config.save_pretrained(folder)
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    return folder


def our_config(family: str, tie: bool) -> ModelConfig:
    if family == "gpt2":
        return ModelConfig.gpt2_small(vocab_size=VOCAB, d_model=48, n_heads=4, n_layers=2, d_ff=192, max_seq_len=32,
                                      dropout=0.0, tie_embeddings=tie)  # fmt: skip
    return ModelConfig.llama_tiny(vocab_size=VOCAB, d_model=48, n_heads=4, n_kv_heads=2, d_ff=128, max_seq_len=64,
                                  rope_base=500000.0, tie_embeddings=tie)  # fmt: skip


def ids(length: int = 11) -> torch.Tensor:
    return torch.randint(0, VOCAB, (2, length), generator=torch.Generator().manual_seed(1))


CASES = [(family, tie, fmt) for family in ("gpt2", "llama") for tie in (True, False)
         for fmt in ("safetensors", "bin")]  # fmt: skip


@pytest.mark.parametrize(("family", "tie", "fmt"), CASES)
@torch.no_grad()
def test_from_pretrained_reads_a_transformers_folder(tmp_path: Path, family: str, tie: bool, fmt: str) -> None:
    ref = hf_model(family, tie)
    folder = write_hf_folder(ref, tmp_path, fmt)
    ours = GPT.from_pretrained(folder)
    assert ours.config == our_config(family, tie)  # read from config.json, not written by hand
    assert ours.tokenizer is None  # the folder has no tokenizer.json
    x = ids()
    assert_close(ours(x), ref(x).logits, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize(("family", "tie", "fmt"), CASES)
@torch.no_grad()
def test_save_pretrained_is_loaded_by_transformers(tmp_path: Path, family: str, tie: bool, fmt: str) -> None:
    torch.manual_seed(0)
    ours = randomize(GPT(our_config(family, tie)))
    ours.save_pretrained(tmp_path, safe_serialization=fmt == "safetensors")
    weights = {"safetensors": "model.safetensors", "bin": "pytorch_model.bin"}[fmt]
    assert (tmp_path / weights).is_file() and (tmp_path / "config.json").is_file()
    ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path, attn_implementation="eager").eval()
    assert type(ref).__name__ == {"gpt2": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}[family]
    x = ids()
    assert_close(ref(x).logits, ours(x), atol=1e-4, rtol=1e-4)
    prompt = x[:, :4]
    theirs = ref.generate(prompt, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
    assert torch.equal(generate(ours, prompt, 12, greedy=True), theirs)
    back = GPT.from_pretrained(tmp_path)  # and the round trip back into companion
    assert back.config == ours.config
    assert_close(back(x), ours(x), rtol=0, atol=0)


def test_sharded_safetensors(tmp_path: Path) -> None:
    ref = hf_model("llama", tie=False)
    ref.save_pretrained(tmp_path, max_shard_size="30KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    x = ids()
    with torch.no_grad():
        assert_close(GPT.from_pretrained(tmp_path)(x), ref(x).logits, atol=1e-4, rtol=1e-4)


def test_tokenizer_json_is_attached_and_saved(tmp_path: Path) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=VOCAB)  # every id within the model's VOCAB rows
    tok.train_from_iterator(["I love NLP. The cat sat because it was tired."] * 20, trainer)
    folder = write_hf_folder(hf_model("gpt2", tie=True), tmp_path / "in", "safetensors")
    tok.save(str(folder / "tokenizer.json"))
    model = GPT.from_pretrained(folder)
    text = "I love NLP"
    assert model.tokenizer.encode(text).ids == tok.encode(text).ids
    assert model.tokenizer.decode(model.tokenizer.encode(text).ids) == text
    model.save_pretrained(tmp_path / "out")  # the attached tokenizer travels with the model
    assert json.loads((tmp_path / "out" / "tokenizer.json").read_text()) == json.loads(tok.to_str())


@torch.no_grad()
def test_a_model_trained_by_companion_train_leaves_the_course(tmp_path: Path) -> None:
    from companion.cli.run_folder import load_run
    from companion.cli.train import main
    from companion.data import char_corpus

    (tmp_path / "text.txt").write_text(char_corpus(), encoding="utf-8")
    for arch in ("gpt2", "llama"):
        run = tmp_path / arch
        assert main([str(tmp_path / "text.txt"), "--out", str(run), "--tokenizer", "char", "--arch", arch,
                     "--d-model", "16", "--n-heads", "2", "--n-layers", "1", "--seq-len", "16", "--steps", "3",
                     "--no-progress"]) == 0  # fmt: skip
        ours = load_run(run).model
        ours.save_pretrained(tmp_path / f"{arch}-hf")
        ref = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / f"{arch}-hf").eval()
        x = torch.randint(0, ours.config.vocab_size, (2, 16), generator=torch.Generator().manual_seed(0))
        assert_close(ref(x).logits, ours(x), atol=1e-4, rtol=1e-4)


MIXED = ("Transformer 的核心是自注意力：每个位置直接关注所有其他位置。I love NLP → 我爱NLP！"
         "The model predicts the next token 🙂, 然后再预测下一个。\n") * 12


@pytest.mark.parametrize("tokenizer", ["bpe", "char"])
@torch.no_grad()
def test_a_run_saved_for_hugging_face_brings_its_tokenizer(tmp_path: Path, tokenizer: str) -> None:
    """``AutoTokenizer`` on the folder gives companion's ids on mixed Chinese/English text, and
    ``pipeline("text-generation")`` continues a prompt exactly as ``generate`` does (greedy)."""
    import stat

    from companion.cli.run_folder import load_run
    from companion.cli.train import main

    (tmp_path / "text.txt").write_text(MIXED, encoding="utf-8")
    run_dir, hf = tmp_path / "run", tmp_path / "hf"
    vocab = ["--vocab-size", "320"] if tokenizer == "bpe" else []
    assert main([str(tmp_path / "text.txt"), "--out", str(run_dir), "--tokenizer", tokenizer, *vocab, "--d-model",
                 "32", "--n-heads", "2", "--n-layers", "1", "--seq-len", "32", "--steps", "20", "--lr", "1e-2",
                 "--no-progress"]) == 0  # fmt: skip
    run = load_run(run_dir)
    run.model.save_pretrained(hf)  # the run's tokenizer travels with the model
    names = {p.name for p in hf.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json"} == names  # fmt: skip
    reference = tmp_path / "plain"
    reference.write_text("")
    assert {stat.S_IMODE((hf / n).stat().st_mode) for n in names} == {stat.S_IMODE(reference.stat().st_mode)}

    theirs = transformers.AutoTokenizer.from_pretrained(hf)
    eot = run.tokenizer.token_to_id("<|endoftext|>")
    assert theirs.eos_token_id == theirs.bos_token_id == eot
    config = json.loads((hf / "config.json").read_text())
    assert config["eos_token_id"] == config["bos_token_id"] == eot
    assert json.loads((hf / "generation_config.json").read_text())["eos_token_id"] == eot
    text = MIXED[:120]
    assert theirs(text)["input_ids"] == run.tokenizer.encode(text)
    assert theirs.decode(run.tokenizer.encode(text)) == text

    pipe = transformers.pipeline("text-generation", model=str(hf))
    prompt = "Transformer 的核心是"
    ids = torch.tensor([run.tokenizer.encode(prompt)])
    ours = run.tokenizer.decode(generate(run.model, ids, 12, greedy=True)[0].tolist())
    out = pipe(prompt, max_new_tokens=12, do_sample=False)[0]["generated_text"]
    assert out == ours


# --- errors ---------------------------------------------------------------------------------------------


def test_missing_folder_config_or_weights(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist.*snapshot_download"):
        GPT.from_pretrained(tmp_path / "gpt2")
    with pytest.raises(FileNotFoundError, match="no config.json"):
        GPT.from_pretrained(tmp_path)
    hf_model("gpt2", tie=True).config.save_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match="no model.safetensors or pytorch_model.bin"):
        GPT.from_pretrained(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00" * 40)
    with pytest.raises(ValueError, match="corrupt or unreadable"):
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    ("change", "needle"),
    [({"model_type": "bert"}, "model_type='bert' is not supported"),
     ({"activation_function": "swish"}, "activation_function='swish'"),
     ({"scale_attn_by_inverse_layer_idx": True}, "attention scaling")],
)  # fmt: skip
def test_unsupported_configs_are_named(tmp_path: Path, change: dict[str, object], needle: str) -> None:
    write_hf_folder(hf_model("gpt2", tie=True), tmp_path, "safetensors")
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg | change))
    with pytest.raises(ValueError, match=needle):
        GPT.from_pretrained(tmp_path)


def test_weights_that_do_not_fit_config_json(tmp_path: Path) -> None:
    write_hf_folder(hf_model("llama", tie=False), tmp_path, "safetensors")
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"intermediate_size": 64}))
    with pytest.raises(ValueError, match="shape"):
        GPT.from_pretrained(tmp_path)


@pytest.mark.parametrize(
    ("config", "needle"),
    [(ModelConfig.transformer_base(vocab_size=VOCAB, d_model=48, n_heads=4, n_layers=1, d_ff=64), "norm_placement"),
     (ModelConfig.llama_tiny(vocab_size=VOCAB, rope_pairing="adjacent"), "rope_pairing='adjacent'"),
     (ModelConfig.gpt2_small(vocab_size=VOCAB, d_model=48, n_heads=4, n_kv_heads=2, n_layers=1, d_ff=64,
                             max_seq_len=16), "n_kv_heads=2")],
)  # fmt: skip
def test_save_pretrained_refuses_other_shapes(tmp_path: Path, config: ModelConfig, needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        GPT(config).save_pretrained(tmp_path)
    assert not list(tmp_path.iterdir())  # nothing written


# --- over an earlier save: nothing of the old model is read back ---------------------------------------------


def other_weights(family: str = "llama") -> GPT:
    torch.manual_seed(3)
    return randomize(GPT(our_config(family, tie=False)), seed=3)


@pytest.mark.parametrize("earlier", ["sharded", "safetensors beside a new bin"])
@torch.no_grad()
def test_save_pretrained_supersedes_an_earlier_save(tmp_path: Path, earlier: str) -> None:
    """A stale ``model.safetensors.index.json`` (or ``model.safetensors``) would be read before the new weights."""
    ref, x = hf_model("llama", tie=False), ids()
    if earlier == "sharded":
        ref.save_pretrained(tmp_path, max_shard_size="40KB")
        assert len(list(tmp_path.glob("model-*-of-*.safetensors"))) > 1
        assert_close(GPT.from_pretrained(tmp_path)(x), ref(x).logits, atol=1e-4, rtol=1e-4)  # shards are read
    else:
        ref.save_pretrained(tmp_path)
    ours = other_weights()
    ours.save_pretrained(tmp_path, safe_serialization=earlier == "sharded")
    weights = {p.name for p in tmp_path.iterdir() if p.suffix in (".safetensors", ".bin") or "index" in p.name}
    assert weights == ({"model.safetensors"} if earlier == "sharded" else {"pytorch_model.bin"})
    assert_close(GPT.from_pretrained(tmp_path)(x), ours(x), rtol=0, atol=0)


def test_save_pretrained_without_a_tokenizer_removes_another_models(tmp_path: Path) -> None:
    from companion.tokens import CharTokenizer

    tok = CharTokenizer.from_text("abc", ["<|endoftext|>"])
    GPT(our_config("gpt2", tie=True)).save_pretrained(tmp_path, tokenizer=tok)
    (tmp_path / "special_tokens_map.json").write_text("{}")
    assert {"tokenizer.json", "tokenizer_config.json", "generation_config.json"} <= {p.name for p in
                                                                                      tmp_path.iterdir()}  # fmt: skip
    other_weights().save_pretrained(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"config.json", "model.safetensors"}
    assert GPT.from_pretrained(tmp_path).tokenizer is None


# --- errors that name the file, the value and what was expected -----------------------------------------------


def test_save_pretrained_refuses_before_writing(tmp_path: Path) -> None:
    from companion.finetune import apply_lora

    model = GPT(our_config("gpt2", tie=True))
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(NotADirectoryError, match="folder=.*file' is a file; expected a folder"):
        model.save_pretrained(tmp_path / "file")
    with pytest.raises(TypeError, match="folder must be a str or os.PathLike, got int"):
        model.save_pretrained(3)
    with pytest.raises(ValueError, match=f"ids up to {VOCAB}.*vocab_size={VOCAB} rows"):
        model.save_pretrained(tmp_path / "out", tokenizer=big_tokenizer())
    with pytest.raises(ValueError, match="type_vocab_size=2"):  # no decoder family has a token-type table
        GPT(our_config("gpt2", tie=True).replace(type_vocab_size=2)).save_pretrained(tmp_path / "out")
    with pytest.raises(ValueError, match=r"unmerged LoRA adapters \(layers.0.self_attn.q_proj.lora_A, ...\); call "
                                         r"companion.finetune.merge_lora\(model\) first"):  # fmt: skip
        apply_lora(model, r=2, alpha=4.0).save_pretrained(tmp_path / "out")
    assert not (tmp_path / "out").exists()


def big_tokenizer() -> object:
    from companion.tokens import CharTokenizer, to_hf_tokenizer

    return to_hf_tokenizer(CharTokenizer.from_text("".join(chr(0x4E00 + i) for i in range(VOCAB + 1))))  # 0 .. VOCAB


def extra_tensor(folder: Path, name: str) -> Path:
    from safetensors.torch import load_file, save_file

    save_file(load_file(folder / "model.safetensors") | {name: torch.zeros(VOCAB)}, str(folder / "model.safetensors"))
    return folder


def corrupt(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder


@pytest.mark.parametrize(
    ("damage", "error", "needle"),
    [(lambda f: corrupt(f, "model.safetensors.index.json", '{"metadata": {}}'), ValueError,
      r"model.safetensors.index.json' has no valid 'weight_map'"),
     (lambda f: corrupt(f, "config.json", json.dumps(json.loads((f / "config.json").read_text()) |
                                                     {"hidden_size": "48"})), TypeError,
      r"config.json: hidden_size='48' is a str; expected int"),
     (lambda f: corrupt(f, "config.json", json.dumps(json.loads((f / "config.json").read_text()) |
                                                     {"num_key_value_heads": 2.0})), TypeError,
      r"config.json: n_kv_heads must be an int or None, got 2.0"),
     (lambda f: corrupt(f, "tokenizer.json", '{"version": "1.0", "model": 3}'), ValueError,
      r"tokenizer file .*tokenizer.json' is corrupt"),
     (lambda f: corrupt(f, "tokenizer.json", big_tokenizer().to_str()), ValueError,
      rf"tokenizer.json has {VOCAB + 1} tokens with ids up to {VOCAB} .* vocab_size={VOCAB} rows"),
     (lambda f: extra_tensor(f, "lm_head.bias"), ValueError,
      r"1 tensor\(s\) that no weight of the model reads: lm_head.bias; expected none")],
    ids=["index without weight_map", "hidden_size a string", "heads a float", "corrupt tokenizer.json",
         "tokenizer too large", "tensors nothing reads"],
)  # fmt: skip
def test_bad_folders_are_named(tmp_path: Path, damage, error: type, needle: str) -> None:
    write_hf_folder(hf_model("llama", tie=False), tmp_path, "safetensors")
    with pytest.raises(error, match=needle):
        GPT.from_pretrained(damage(tmp_path))


def test_a_tied_config_with_a_different_head_is_refused(tmp_path: Path) -> None:
    write_hf_folder(hf_model("llama", tie=False), tmp_path, "safetensors")
    cfg = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(cfg | {"tie_word_embeddings": True}))
    with pytest.raises(ValueError, match="lm_head.weight that differs from model.embed_tokens.weight"):
        GPT.from_pretrained(tmp_path)

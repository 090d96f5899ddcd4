"""``companion-train --init-from SOURCE [--lora R]``: fine-tuning a run or a Hugging Face folder (chapter 13).

Runs call ``main(argv)`` in-process on a few KB of text with a tiny model. The first loss a fine-tuning run
logs is checked to be exactly the source model's loss on that batch (it starts from those weights and that
tokenizer), and lower than a run from scratch. Every refusal gives exit code 2, one line, and no folder.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from companion.cli.run_folder import CHECKPOINT, TOKENS, load_run, read_run_checkpoint
from companion.cli.sample import main as sample_main
from companion.cli.train import main as train_main
from companion.cli.train import read_log
from companion.data import TokenData, char_corpus, train_tokenizer
from companion.finetune import lora_modules
from companion.models import GPT, ModelConfig
from companion.training import lm_loss

SIZES = ["--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--seq-len", "16"]
LOOP = ["--batch-size", "4", "--eval-every", "5", "--eval-windows", "4", "--no-progress"]


def train(*args: str | Path) -> int:
    return train_main([str(a) for a in args])


def assert_one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> None:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("companion-train: error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def texts(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The course's little corpus cut in two: the source run reads the first half, fine-tuning the second."""
    folder = tmp_path_factory.mktemp("text")
    corpus = char_corpus()
    first, second = folder / "first.txt", folder / "second.txt"
    first.write_text(corpus[: len(corpus) // 2], encoding="utf-8")
    second.write_text(corpus[len(corpus) // 2 :], encoding="utf-8")
    return first, second


@pytest.fixture(scope="module")
def source(texts: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run trained for 60 steps on the first half (byte-level BPE: it can encode any text)."""
    out = tmp_path_factory.mktemp("runs") / "source"
    assert train(texts[0], "--out", out, "--tokenizer", "bpe", "--vocab-size", "300", *SIZES, *LOOP, "--steps", "60",
                 "--lr", "3e-3") == 0  # fmt: skip
    return out


def first_batch_loss(model: GPT, run: Path) -> float:
    """The loss of ``model`` on the first training batch of ``run`` (what its log's step 1 reports)."""
    info = read_run_checkpoint(run / CHECKPOINT)
    args = info["args"]
    data = TokenData.open(run / TOKENS, info["data"]["vocab_size"], args["seq_len"], args["batch_size"], args["seed"])
    with torch.no_grad():
        return lm_loss(model.eval(), data.train_batch(0)).item()


def test_fine_tuning_starts_from_the_source_and_below_a_run_from_scratch(
    texts: tuple[Path, Path], source: Path, tmp_path: Path
) -> None:
    tuned, scratch = tmp_path / "tuned", tmp_path / "scratch"
    assert train(texts[1], "--out", tuned, "--init-from", source, *LOOP, "--steps", "10") == 0
    assert train(texts[1], "--out", scratch, "--tokenizer", "bpe", "--vocab-size", "300", *SIZES, *LOOP,
                 "--steps", "10") == 0  # fmt: skip
    start_tuned, start_scratch = read_log(tuned)[0]["loss"], read_log(scratch)[0]["loss"]
    # The first logged loss is the source model's loss on that batch: the run starts from its weights and tokens.
    assert start_tuned == pytest.approx(first_batch_loss(load_run(source).model, tuned), rel=1e-5)
    assert (tuned / "tokenizer.bpe").read_bytes() == (source / "tokenizer.bpe").read_bytes()
    # A model that read English prose predicts more English prose far better than a random one (about ln V).
    assert start_tuned < start_scratch - 0.5
    info = read_run_checkpoint(tuned / CHECKPOINT)
    assert info["args"]["init_from"] == str(source) and info["args"]["d_model"] == 16
    assert info["model_config"] == read_run_checkpoint(source / CHECKPOINT)["model_config"]


def test_lora_trains_adapters_only_and_the_finished_run_holds_merged_weights(
    texts: tuple[Path, Path], source: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "lora"
    assert train(texts[1], "--out", out, "--init-from", source, "--lora", "2", *LOOP, "--steps", "10",
                 "--lr", "1e-2") == 0  # fmt: skip
    printed = capsys.readouterr().out
    # rank 2 on one layer: q, k, v, o are 16 -> 16, so 2 · (16 + 16) = 64 each; up and down 16 <-> 64, so
    # 2 · (16 + 64) = 160 each; 4 · 64 + 2 · 160 = 576
    assert ("576 trainable parameters, all of them LoRA adapters (lora_A, lora_B; rank 2, alpha 4) on down_proj, "
            "k_proj, o_proj, q_proj, up_proj, v_proj; the model's own 8,368 weights are frozen") in printed  # 31.5
    checkpoint = read_run_checkpoint(out / CHECKPOINT)
    assert checkpoint["lora"] == {"r": 2, "alpha": 4.0, "targets": ["down_proj", "k_proj", "o_proj", "q_proj",
                                                                      "up_proj", "v_proj"], "merged": True}
    before, after = load_run(source).model.state_dict(), checkpoint["model"]
    assert set(after) == set(before)  # a plain GPT again
    assert torch.equal(after["embed.token.weight"], before["embed.token.weight"])  # frozen
    assert torch.equal(after["layers.0.self_attn_block.norm.weight"], before["layers.0.self_attn_block.norm.weight"])
    assert torch.equal(after["layers.0.self_attn.q_proj.bias"], before["layers.0.self_attn.q_proj.bias"])
    assert not torch.equal(after["layers.0.self_attn.q_proj.weight"], before["layers.0.self_attn.q_proj.weight"])
    assert sample_main([str(out), "--prompt", "The model", "--max-new-tokens", "5", "--seed", "0"]) == 0


def test_a_stopped_lora_run_resumes_to_the_same_merged_weights(
    texts: tuple[Path, Path], source: Path, tmp_path: Path
) -> None:
    flags = ["--init-from", source, "--lora", "2", *LOOP, "--steps", "10", "--lr", "1e-2"]
    assert train(texts[1], "--out", tmp_path / "once", *flags) == 0
    assert train(texts[1], "--out", tmp_path / "twice", *flags, "--stop-at", "4") == 0
    stopped = read_run_checkpoint(tmp_path / "twice" / CHECKPOINT)
    assert stopped["lora"]["merged"] is False and any(k.endswith("lora_B") for k in stopped["model"])
    run = load_run(tmp_path / "twice")  # a stopped run is read back with its adapters folded in
    assert not lora_modules(run.model)
    assert train("--out", tmp_path / "twice", "--resume", "--no-progress") == 0
    once = read_run_checkpoint(tmp_path / "once" / CHECKPOINT)["model"]
    twice = read_run_checkpoint(tmp_path / "twice" / CHECKPOINT)["model"]
    assert all(torch.equal(once[k], twice[k]) for k in once)
    assert read_log(tmp_path / "once") == read_log(tmp_path / "twice")


def _hf_folder(folder: Path, text: str, *, lowercase: bool = False, with_tokenizer: bool = True) -> Path:
    """A Hugging Face GPT-2 folder: random weights, and a byte-level BPE tokenizer.json trained on ``text``
    (``lowercase``: a tokenizer that lower-cases its input, so it cannot give the text back)."""
    tokenizers = pytest.importorskip("tokenizers")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    if lowercase:
        tok.normalizer = tokenizers.normalizers.Lowercase()
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    trainer = tokenizers.trainers.BpeTrainer(vocab_size=300,
                                             initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([text], trainer)
    torch.manual_seed(0)
    config = ModelConfig.gpt2_small(vocab_size=tok.get_vocab_size(), d_model=16, n_heads=2, n_layers=1, d_ff=64,
                                    max_seq_len=32, dropout=0.0)  # fmt: skip
    GPT(config).save_pretrained(folder, safe_serialization=False, tokenizer=tok if with_tokenizer else None)
    return folder


def test_a_hugging_face_folder_as_source(texts: tuple[Path, Path], tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    hf = _hf_folder(tmp_path / "hf", texts[0].read_text(encoding="utf-8"))
    out = tmp_path / "tuned"
    assert train(texts[1], "--out", out, "--init-from", hf, *LOOP, "--steps", "5") == 0
    assert (out / "tokenizer.json").read_text(encoding="utf-8") == (hf / "tokenizer.json").read_text(encoding="utf-8")
    info = read_run_checkpoint(out / CHECKPOINT)
    assert info["args"]["seq_len"] == 32 and info["tokenizer"]["kind"] == "hf"  # min(64, the model's context)
    assert read_log(out)[0]["loss"] == pytest.approx(first_batch_loss(GPT.from_pretrained(hf), out), rel=1e-5)
    capsys.readouterr()
    assert sample_main([str(out), "--prompt", "The model", "--max-new-tokens", "5", "--seed", "0"]) == 0
    assert capsys.readouterr().out.startswith("The model")


def test_refusals(texts: tuple[Path, Path], source: Path, tmp_path: Path,
                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "out"
    cases = [
        (["--init-from", tmp_path / "nowhere"], "--init-from", "does not exist"),
        (["--init-from", texts[0].parent], "neither a checkpoint.pt", "nor a config.json"),
        (["--init-from", source, "--seq-len", "32"], "--seq-len 32 is longer than the context", "max_seq_len=16"),
        (["--init-from", source, "--d-model", "32"], "--d-model cannot be combined with --init-from"),
        (["--init-from", source, "--tokenizer", "char"], "--tokenizer cannot be combined with --init-from"),
        (["--lora", "4"], "--lora 4", "--init-from"),
        (["--init-from", source, "--lora", "0"], "--lora"),
    ]
    for args, *needles in cases:
        assert train(texts[1], "--out", out, *LOOP, *args) == 2, args
        assert_one_line_error(capsys, *needles)
        assert not out.exists()


def test_a_tokenizer_that_cannot_encode_the_text_is_refused(texts: tuple[Path, Path], tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    chars = tmp_path / "chars"
    assert train(texts[0], "--out", chars, "--tokenizer", "char", *SIZES, *LOOP, "--steps", "2") == 0
    chinese = tmp_path / "chinese.txt"
    chinese.write_text(texts[0].read_text(encoding="utf-8") + "注意力\n", encoding="utf-8")  # one new character
    out = tmp_path / "out"
    assert train(chinese, "--out", out, "--init-from", chars, *LOOP) == 2
    assert_one_line_error(capsys, "cannot encode", "'注'")
    lower = _hf_folder(tmp_path / "lower", texts[0].read_text(encoding="utf-8"), lowercase=True)
    assert train(texts[1], "--out", out, "--init-from", lower, *LOOP) == 2
    assert_one_line_error(capsys, "cannot encode", "faithfully")
    bare = _hf_folder(tmp_path / "bare", texts[0].read_text(encoding="utf-8"), with_tokenizer=False)
    assert train(texts[1], "--out", out, "--init-from", bare, *LOOP) == 2
    assert_one_line_error(capsys, "has no tokenizer.json")
    assert not out.exists()


def test_resume_refusals(texts: tuple[Path, Path], source: Path, tmp_path: Path,
                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "lora"
    assert train(texts[1], "--out", out, "--init-from", source, "--lora", "2", *LOOP, "--steps", "5") == 0
    capsys.readouterr()
    assert train("--out", out, "--resume", "--steps", "10", "--no-progress") == 2
    assert_one_line_error(capsys, "adapters were merged", f"--init-from {str(out)!r}")
    assert train("--out", out, "--resume", "--init-from", source, "--no-progress") == 2
    assert_one_line_error(capsys, "--init-from starts a new run")


def test_the_char_tokenizer_round_trip_is_the_rule() -> None:
    """The refusal rule in one line: a tokenizer can encode a text when its ids decode back to that text."""
    tok = train_tokenizer("abc ", "char")
    assert tok.decode(tok.encode("a cab")) == "a cab"
    with pytest.raises(ValueError, match="'z'"):
        tok.encode("za")

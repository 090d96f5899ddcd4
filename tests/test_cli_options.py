"""What learners look for in ``companion-train`` / ``companion-sample`` / ``companion-eval`` (issue 23.10, 14-16):
the machine flags (``--device``, ``--dtype``, ``--grad-accum``, ``--threads``), many samples of valid UTF-8,
scoring a run on another text, the default vocabulary of Chinese text, and the messages of things gone wrong.

Runs call ``main(argv)`` in-process on small texts with tiny models.
"""

from __future__ import annotations

import math
import shutil
import sys
from pathlib import Path

import pytest
import torch
from cli_helpers import TINY, corpus_file, one_line_error, train

from companion.cli import train_tasks
from companion.cli.eval import main as eval_main
from companion.cli.run_folder import CHECKPOINT, load_run, read_run_checkpoint
from companion.cli.sample import SEPARATOR
from companion.cli.sample import main as sample_main
from companion.cli.train import read_log
from companion.data import (
    DEFAULT_VOCAB,
    VAL_FRACTION,
    WIDE_SCRIPT_VOCAB,
    TokenData,
    char_corpus,
    default_vocab_size,
    read_text_file,
)

BPE_TINY = [a for a in TINY if a not in ("--tokenizer", "char")]
CHINESE = ("注意力机制让每个位置直接关注所有其他位置。我爱自然语言处理🙂！模型学会了预测下一个词元🚀。"
           "编码器负责理解输入，解码器逐个生成输出；位置编码告诉模型词元的顺序👩‍💻。") * 30


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus_file(tmp_path_factory)


@pytest.fixture(scope="module")
def chinese_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A byte-level BPE run on Chinese and emoji text, 3 steps: its samples are nearly random byte tokens."""
    folder = tmp_path_factory.mktemp("zh")
    (folder / "zh.txt").write_text(CHINESE, encoding="utf-8")
    out = folder / "run"
    assert train(folder / "zh.txt", "--out", out, *BPE_TINY, "--vocab-size", "300", "--steps", "3") == 0
    return out


# --- machine flags -------------------------------------------------------------------------------------------


def test_device_auto_takes_the_cpu_here_and_a_missing_mps_is_named(corpus: Path, tmp_path: Path, capsys) -> None:
    if torch.cuda.is_available() or torch.backends.mps.is_available():
        pytest.skip("checks the fallback on a machine without a GPU")
    assert train(corpus, "--out", tmp_path / "run", *TINY, "--steps", "2") == 0
    assert "on cpu (float32)" in capsys.readouterr().out
    assert read_run_checkpoint(tmp_path / "run" / CHECKPOINT)["args"]["device"] == "auto"
    assert train(corpus, "--out", tmp_path / "mps", *TINY, "--device", "mps") == 2
    assert "--device mps" in one_line_error(capsys) and not (tmp_path / "mps").exists()


def test_bfloat16_autocast_trains_on_the_cpu(corpus: Path, tmp_path: Path) -> None:
    """Mixed precision changes the numbers a little (so autocast is really on) but not the training."""
    assert train(corpus, "--out", tmp_path / "fp32", *TINY, "--steps", "20", "--lr", "1e-2") == 0
    assert train(corpus, "--out", tmp_path / "bf16", *TINY, "--steps", "20", "--lr", "1e-2", "--dtype", "bfloat16") == 0
    fp32, bf16 = read_log(tmp_path / "fp32"), read_log(tmp_path / "bf16")
    assert [r["loss"] for r in fp32] != [r["loss"] for r in bf16]  # bfloat16 matrix products: other roundings
    for a, b in zip(fp32, bf16):
        assert b["loss"] == pytest.approx(a["loss"], rel=0.03)  # ...of the same training
    assert bf16[-1]["val_loss"] < bf16[4]["val_loss"]  # and it learns
    model = load_run(tmp_path / "bf16").model
    assert all(p.dtype == torch.float32 for p in model.parameters())  # the weights stay float32


def test_gradient_accumulation_takes_the_same_steps(corpus: Path, tmp_path: Path) -> None:
    """A batch of 4 windows in 2 micro-batches of 2: the same gradients up to float rounding, so the same run."""
    assert train(corpus, "--out", tmp_path / "one", *TINY, "--steps", "10") == 0
    assert train(corpus, "--out", tmp_path / "two", *TINY, "--steps", "10", "--grad-accum", "2") == 0
    one, two = read_log(tmp_path / "one"), read_log(tmp_path / "two")
    for a, b in zip(one, two, strict=True):
        for key in a:
            assert b[key] == pytest.approx(a[key], rel=1e-4, abs=1e-6), (a["step"], key)


def test_threads_apply_to_the_run_only(corpus: Path, tmp_path: Path) -> None:
    seen = []
    real = train_tasks.lm_loss

    def spy(model, batch):  # noqa: ANN001, ANN202
        seen.append(torch.get_num_threads())
        return real(model, batch)

    before = torch.get_num_threads()
    train_tasks.lm_loss = spy
    try:
        assert train(corpus, "--out", tmp_path / "run", *TINY, "--steps", "2", "--threads", "3") == 0
    finally:
        train_tasks.lm_loss = real
    assert seen == [3, 3] and torch.get_num_threads() == before  # and put back after


# --- sampling: many samples, valid UTF-8 -------------------------------------------------------------------


def test_num_samples_prints_that_many_continuations(corpus: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "5") == 0
    capsys.readouterr()
    args = [str(out), "--prompt", "The", "--max-new-tokens", "12", "--num-samples", "3", "--seed", "4"]
    assert sample_main(args) == 0
    printed = capsys.readouterr().out
    texts = printed.removesuffix("\n").split(f"\n{SEPARATOR}\n")
    # a character each, or fewer where a sample ended with <|endoftext|>
    assert len(texts) == 3 and all(t.startswith("The") and len(t) <= 3 + 12 for t in texts)
    assert not any("<|endoftext|>" in t for t in texts)
    assert len(set(texts)) == 3
    assert sample_main(args) == 0 and capsys.readouterr().out == printed  # the same seed, the same samples


def test_a_hundred_samples_of_a_chinese_bpe_run_have_no_replacement_character(chinese_run: Path, capsys) -> None:
    capsys.readouterr()
    args = [str(chinese_run), "--prompt", "注意力", "--max-new-tokens", "40", "--num-samples", "100"]
    assert sample_main(args) == 0
    texts = capsys.readouterr().out.removesuffix("\n").split(f"\n{SEPARATOR}\n")
    assert len(texts) == 100 and sum("\ufffd" in t for t in texts) == 0
    assert sample_main([*args, "--no-valid-utf8"]) == 0  # the same model unconstrained: broken characters
    free = capsys.readouterr().out.removesuffix("\n").split(f"\n{SEPARATOR}\n")
    assert sum("\ufffd" in t for t in free) >= 50


# --- companion-eval --------------------------------------------------------------------------------------------


def test_eval_on_the_validation_text_gives_the_runs_validation_loss(corpus: Path, tmp_path: Path, capsys) -> None:
    """Character tokenizer, every validation window evaluated: ``companion-eval`` on the same characters cut to
    the same windows must print the run's own last validation loss."""
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "10", "--eval-windows", "1000") == 0
    text = read_text_file(corpus)
    n = len(text)
    n_train = n - int(n * VAL_FRACTION)
    seq_len = 16
    windows = (int(n * VAL_FRACTION) - seq_len - 1) // seq_len + 1  # as TokenData.val_batches cuts them
    (tmp_path / "val.txt").write_text(text[n_train : n_train + windows * seq_len + 1], encoding="utf-8")
    capsys.readouterr()
    assert eval_main([str(out), str(tmp_path / "val.txt")]) == 0
    printed = capsys.readouterr().out
    loss = float(printed.split("loss ")[1].split(" nats")[0])
    assert loss == pytest.approx(read_log(out)[-1]["val_loss"], abs=1e-4)
    assert f"{windows * seq_len:,} tokens predicted" in printed
    n_bytes = len(text[n_train + 1 : n_train + windows * seq_len + 1].encode("utf-8"))
    bpb = float(printed.split("perplexity ")[1].split(", ")[1].split(" bits")[0])
    assert bpb == pytest.approx(loss * windows * seq_len / n_bytes / math.log(2), abs=2e-3)
    assert float(printed.split("perplexity ")[1].split(",")[0]) == pytest.approx(math.exp(loss), abs=0.01)


def test_eval_errors(corpus: Path, chinese_run: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "2") == 0
    (tmp_path / "zh.txt").write_text(CHINESE, encoding="utf-8")
    capsys.readouterr()
    assert eval_main([str(out), str(tmp_path / "zh.txt")]) == 2  # characters the char tokenizer never saw
    assert "cannot encode" in one_line_error(capsys)
    assert eval_main([str(chinese_run), str(tmp_path / "zh.txt")]) == 0  # a byte-level BPE encodes anything
    capsys.readouterr()
    assert eval_main([str(corpus), str(corpus)]) == 2
    assert "is a file; expected a run folder" in one_line_error(capsys)


# --- the default vocabulary of Chinese text -------------------------------------------------------------------


def test_the_default_vocabulary_follows_the_script(tmp_path: Path, capsys) -> None:
    assert default_vocab_size(char_corpus())[0] == DEFAULT_VOCAB
    size, why = default_vocab_size(CHINESE)
    assert size == WIDE_SCRIPT_VOCAB and "three or four bytes" in why
    assert default_vocab_size("café " * 100)[0] == DEFAULT_VOCAB  # two-byte letters: an alphabet
    # 40 % of the bytes in Chinese is only 18 % of the characters: the bytes decide (issue 31.5)
    mixed = "注意力机" + " attention, all of it"[:18]  # 4 Chinese characters (12 bytes) and 18 ASCII bytes
    assert len(mixed.encode("utf-8")) == 30 and sum(1 for ch in mixed if ord(ch) >= 0x800) / len(mixed) < 0.2
    assert default_vocab_size(mixed * 50)[0] == WIDE_SCRIPT_VOCAB
    (tmp_path / "zh.txt").write_text(CHINESE, encoding="utf-8")
    assert train(tmp_path / "zh.txt", "--out", tmp_path / "run", *BPE_TINY, "--steps", "1") == 0
    assert f"BPE vocabulary {WIDE_SCRIPT_VOCAB:,} (--vocab-size left out" in capsys.readouterr().out
    assert read_run_checkpoint(tmp_path / "run" / CHECKPOINT)["args"]["vocab_size"] == WIDE_SCRIPT_VOCAB


# --- messages and files (issue 23.16) -------------------------------------------------------------------------


def test_divergence_says_how_to_continue(corpus: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    real = train_tasks.lm_loss
    calls = []

    def blows_up_at_step_8(model, batch):  # noqa: ANN001, ANN202
        calls.append(1)
        loss = real(model, batch)
        return loss * float("inf") if len(calls) == 8 else loss

    monkeypatch.setattr(train_tasks, "lm_loss", blows_up_at_step_8)
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "20", "--lr", "3e-3") == 2
    line = one_line_error(capsys)
    assert "the loss became inf at step 8" in line and "checkpoint of step 5" in line
    assert f"--out '{out}' --resume --lr 1e-3" in line and "new --out" in line
    monkeypatch.undo()
    assert train("--out", out, "--resume", "--lr", "1e-3", "--no-progress") == 0  # and the advice works
    assert [r["step"] for r in read_log(out)] == list(range(1, 21))


def test_sample_messages(corpus: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "2") == 0
    capsys.readouterr()
    assert sample_main([str(out), "--temperature", "0"]) == 2
    assert "--greedy" in one_line_error(capsys)
    assert sample_main([str(corpus)]) == 2
    line = one_line_error(capsys)
    assert "is a file; expected a run folder" in line and "does not exist" not in line
    assert sample_main([str(out), "--max-new-tokens", "ten"]) == 2
    assert "'ten' is not an integer" in one_line_error(capsys)


def test_a_checkpoint_holding_other_objects_is_refused_without_torchs_advice(corpus: Path, tmp_path: Path,
                                                                             capsys) -> None:  # fmt: skip
    import argparse

    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "2") == 0
    torch.save({"format": "companion-run-checkpoint-v1", "args": argparse.Namespace()}, out / CHECKPOINT)
    capsys.readouterr()
    assert sample_main([str(out)]) == 2
    line = one_line_error(capsys)
    assert "checkpoint.pt" in line and "weights_only" not in line and "Python objects" in line


def test_a_byte_order_mark_is_not_text(tmp_path: Path) -> None:
    (tmp_path / "bom.txt").write_bytes("\ufeff".encode() + char_corpus().encode())
    assert read_text_file(tmp_path / "bom.txt") == char_corpus()
    assert train(tmp_path / "bom.txt", "--out", tmp_path / "run", *TINY, "--steps", "1") == 0
    assert "\ufeff" not in load_run(tmp_path / "run").tokenizer.itos


def test_one_token_is_singular(tmp_path: Path, capsys) -> None:
    (tmp_path / "a.txt").write_text("a", encoding="utf-8")
    assert train(tmp_path / "a.txt", "--out", tmp_path / "run", *TINY) == 2
    line = one_line_error(capsys)
    assert "the text has 1 token," in line and "(0 tokens)" in line
    with pytest.raises(ValueError, match="has 1 token,"):
        TokenData(torch.tensor([1]).numpy(), 4, 1)


def test_save_pretrained_without_safetensors_names_the_package(tmp_path: Path, monkeypatch) -> None:
    from companion.models import GPT, ModelConfig

    model = GPT(ModelConfig.gpt2_small(vocab_size=20, d_model=16, n_heads=2, n_layers=1, d_ff=32, max_seq_len=8))
    monkeypatch.setitem(sys.modules, "safetensors", None)  # import safetensors now raises ImportError
    monkeypatch.setitem(sys.modules, "safetensors.torch", None)
    with pytest.raises(ModuleNotFoundError, match="pip install safetensors.*safe_serialization=False"):
        model.save_pretrained(tmp_path / "hf")
    assert not (tmp_path / "hf").exists()  # nothing was created
    model.save_pretrained(tmp_path / "hf", safe_serialization=False)  # the way out it names works
    assert (tmp_path / "hf" / "pytorch_model.bin").is_file()
    shutil.rmtree(tmp_path / "hf")

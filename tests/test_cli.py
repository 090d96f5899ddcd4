"""The command line of chapter 11: ``companion-train`` and ``companion-sample``, end to end on a tiny text.

Runs call ``main(argv)`` in-process (fast, and a monkeypatch can break things on purpose); one test sends a
real SIGINT to a subprocess. Every bad input must give exit code 2 and ONE line on stderr, and leave the
output folder as it was.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from companion.cli import run_folder
from companion.cli.eval import main as eval_main
from companion.cli.export import main as export_main
from companion.cli.run_folder import BEST, CHECKPOINT, LOG, load_run, read_run_checkpoint
from companion.cli.sample import main as sample_main
from companion.cli.train import main as train_main
from companion.cli.train import read_log
from companion.data import TokenData, char_corpus, write_token_file

REPO = Path(__file__).resolve().parents[1]
TINY = ["--tokenizer", "char", "--d-model", "16", "--n-layers", "1", "--n-heads", "2", "--seq-len", "16",
        "--batch-size", "4", "--eval-every", "5", "--eval-windows", "4", "--no-progress"]  # fmt: skip


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_text(char_corpus(), encoding="utf-8")
    return path


def train(*args: str | Path) -> int:
    return train_main([str(a) for a in args])


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` and its bytes: to show that a failed run changed nothing."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.exists() else {}


@pytest.fixture(scope="module")
def trained(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run stopped after 5 of its 10 steps (so it can be resumed)."""
    out = tmp_path_factory.mktemp("runs") / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "10", "--stop-at", "5") == 0
    return out


# --- the data pipeline (companion.data) ------------------------------------------------------------


def test_windows_come_from_their_split_and_depend_only_on_the_step() -> None:
    ids = np.arange(1000)  # id == position, so a window shows where it was cut from
    data = TokenData(ids, seq_len=16, batch_size=8, seed=3)
    assert (data.n_train, data.n_val) == (900, 100)
    batch = data.train_batch(5)
    assert batch.shape == (8, 17) and batch.dtype == torch.int64
    assert (batch[:, 1:] - batch[:, :-1] == 1).all()  # contiguous windows: targets are inputs shifted by one
    assert batch.max() < 900  # never a validation token
    assert torch.equal(data.train_batch(5), batch) and not torch.equal(data.train_batch(6), batch)
    assert not torch.equal(TokenData(ids, 16, 8, seed=4).train_batch(5), batch)
    val = torch.cat(data.val_batches())
    assert val.min() >= 900 and val.max() < 1000
    starts = val[:, 0]
    assert (starts[1:] - starts[:-1] >= 16).all()  # windows do not overlap (apart from the shared target)
    assert all(torch.equal(a, b) for a, b in zip(data.val_batches(), data.val_batches()))


def test_token_file_round_trip(tmp_path: Path) -> None:
    ids = np.array([0, 5, 65535, 7] * 300)
    write_token_file(ids, tmp_path / "small.bin", vocab_size=65536)
    write_token_file(ids * 2, tmp_path / "large.bin", vocab_size=200_000)
    assert (tmp_path / "small.bin").stat().st_size == 2 * len(ids)  # uint16 when the vocabulary fits
    assert (tmp_path / "large.bin").stat().st_size == 4 * len(ids)
    assert np.array_equal(TokenData.open(tmp_path / "small.bin", 65536, 8, 2).ids, ids)
    assert np.array_equal(TokenData.open(tmp_path / "large.bin", 200_000, 8, 2).ids, ids * 2)


# --- the happy path -------------------------------------------------------------------------------------


def test_train_then_sample(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "30", "--lr", "3e-3") == 0
    assert {"checkpoint.pt", "best.pt", "log.csv", "run.json", "tokens.bin", "tokenizer.char.json"} == {
        p.name for p in out.iterdir()}  # nothing else, no temporary file left behind  # fmt: skip
    rows = read_log(out)
    assert [r["step"] for r in rows] == list(range(1, 31))
    assert [r["step"] for r in rows if "val_loss" in r] == [5, 10, 15, 20, 25, 30]
    config = load_run(out).model.config
    vocab = config.vocab_size
    assert config.use_sdpa and config.fused_norm  # training goes by the fast paths (tested equal to the explicit)
    assert config.decode_layout  # and sampling by the decoding layout (tests/test_packing.py)
    assert not read_run_checkpoint(out / CHECKPOINT)["model_config"]["decode_layout"]  # not for training
    # a uniform guess costs ln V per token; 30 steps must already do better on held-out text
    assert rows[-1]["val_loss"] < torch.log(torch.tensor(float(vocab))).item()
    assert read_run_checkpoint(out / CHECKPOINT)["step"] == 30
    capsys.readouterr()

    assert sample_main([str(out), "--prompt", "The model", "--max-new-tokens", "40", "--seed", "1"]) == 0
    first = capsys.readouterr().out
    # the char tokenizer: one token is one character
    assert first.startswith("The model") and len(first.removesuffix("\n")) == len("The model") + 40
    assert sample_main([str(out), "--prompt", "The model", "--max-new-tokens", "40", "--seed", "1"]) == 0
    assert capsys.readouterr().out == first  # same seed, same text
    assert sample_main([str(out), "--max-new-tokens", "5", "--greedy"]) == 0  # no prompt: starts from the text
    assert len(capsys.readouterr().out.removesuffix("\n")) == 6


def test_bpe_tokenizer_and_llama_arch(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = [a for a in TINY if a not in ("--tokenizer", "char")]
    assert train(corpus, "--out", out, *args, "--tokenizer", "bpe", "--vocab-size", "300", "--arch", "llama",
                 "--steps", "5") == 0  # fmt: skip
    run = load_run(out)
    assert run.checkpoint["tokenizer"]["kind"] == "bpe" and run.model.config.vocab_size == 300
    assert run.model.config.positions == "rope" and run.model.config.norm == "rmsnorm"
    text = "attention is all"
    assert run.tokenizer.decode(run.tokenizer.encode(text)) == text


# --- resume ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["stop-at", "ctrl-c"])
def test_resume_reproduces_an_uninterrupted_run(corpus: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                how: str) -> None:  # fmt: skip
    """7 + 13 steps (stopped, or interrupted by Ctrl-C, then --resume) log exactly what 20 steps in one go log.

    Dropout is on, so this also checks that the checkpoint restores the random-number generators; step 7 is
    not an evaluation step (every 5), so this also checks that stopping there adds nothing to the log.
    """
    args = [*TINY, "--steps", "20", "--dropout", "0.1"]
    assert train(corpus, "--out", tmp_path / "whole", *args) == 0
    if how == "stop-at":
        assert train(corpus, "--out", tmp_path / "parts", *args, "--stop-at", "7") == 0
    else:
        real = TokenData.train_batch

        def interrupt_at_step_8(self: TokenData, step: int) -> torch.Tensor:
            if step == 7:  # 0-based: steps 1..7 are done
                raise KeyboardInterrupt  # what Ctrl-C raises outside the CLI's own SIGINT handler
            return real(self, step)

        monkeypatch.setattr(TokenData, "train_batch", interrupt_at_step_8)
        assert train(corpus, "--out", tmp_path / "parts", *args) == 130
        monkeypatch.setattr(TokenData, "train_batch", real)
    assert read_run_checkpoint(tmp_path / "parts" / CHECKPOINT)["step"] == 7
    assert read_log(tmp_path / "parts") == read_log(tmp_path / "whole")[:7]
    assert train("--out", tmp_path / "parts", "--resume", "--no-progress") == 0
    assert read_log(tmp_path / "parts") == read_log(tmp_path / "whole")  # every number, bit for bit
    whole, parts = (read_run_checkpoint(tmp_path / d / CHECKPOINT)["model"] for d in ("whole", "parts"))
    for name in whole:
        torch.testing.assert_close(parts[name], whole[name], rtol=0, atol=0, msg=name)


def test_resume_drops_log_rows_the_checkpoint_does_not_have(trained: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    with open(out / LOG, "a", encoding="utf-8") as f:
        f.write("6,9.0,0.001,1.0,\n")  # a step logged by a run that crashed before its next checkpoint
    assert train("--out", out, "--resume", "--no-progress") == 0
    rows = read_log(out)
    assert [r["step"] for r in rows] == list(range(1, 11)) and rows[5]["loss"] != 9.0


@pytest.mark.slow
def test_sigint_saves_a_checkpoint_and_exits_130(corpus: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "companion.cli.train", str(corpus), "--out", str(out), *TINY,
           "--steps", "100000", "--eval-every", "1000"]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (
            (out / LOG).exists() and len((out / LOG).read_text().splitlines()) > 5
        ):  # fmt: skip
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "--resume" in stdout
    step = read_run_checkpoint(out / CHECKPOINT)["step"]
    assert step > 0 and step == read_log(out)[-1]["step"]  # the checkpoint is the last logged step


@pytest.mark.slow
def test_two_processes_under_torchrun_log_the_losses_of_one(corpus: Path, tmp_path: Path) -> None:
    """DDP: each process takes half of the same global batch; the logged loss is their mean. With
    ``--grad-accum 2`` each process runs its half as two micro-batches, averaging gradients only after the last.
    (One run, about 10 s: the plain DDP step is tested against one process in tests/test_training.py.)"""
    accum = ["--grad-accum", "2"]
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [str(corpus), *TINY, "--steps", "6", *accum]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
           f"--master_port={port}", "-m", "companion.cli.train", *args, "--out", str(tmp_path / "ddp")]  # fmt: skip
    done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-3000:]
    assert train(str(corpus), *TINY, "--steps", "6", "--out", tmp_path / "one") == 0  # one process, one batch
    ddp, one = read_log(tmp_path / "ddp"), read_log(tmp_path / "one")
    assert [r["step"] for r in ddp] == [r["step"] for r in one] == list(range(1, 7))
    for a, b in zip(ddp, one):
        assert a.keys() == b.keys()
        for key in a:
            assert a[key] == pytest.approx(b[key], rel=1e-5, abs=1e-6), (a["step"], key)


# --- checkpoints are written atomically -----------------------------------------------------------------


def test_a_failure_while_saving_keeps_the_previous_checkpoint(trained: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    before = (out / CHECKPOINT).read_bytes()
    real_save = torch.save

    def save_half_then_fail(obj: object, f: str | Path) -> None:
        real_save(obj, f)
        with open(f, "r+b") as handle:  # the disk fills up half-way through the file
            handle.truncate(len(before) // 2)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(run_folder.torch, "save", save_half_then_fail)
    assert train("--out", out, "--resume", "--no-progress") == 1  # an OS error, reported in one line
    monkeypatch.undo()
    assert (out / CHECKPOINT).read_bytes() == before  # the previous checkpoint, whole
    assert read_run_checkpoint(out / CHECKPOINT)["step"] == 5
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]  # no temporary file left
    assert train("--out", out, "--resume", "--no-progress") == 0  # and it still resumes


# --- bad input: exit code 2, one line, nothing in DIR lost ----------------------------------------------


def _bad_text(tmp_path: Path, kind: str) -> Path:
    path = tmp_path / f"{kind}.txt"
    content = {"empty": b"", "blank": b" \n\t\n", "binary": b"abc\x00\x01\x02def" * 50,
               "latin1": "caf\u00e9 na\u00efve ".encode("latin-1") * 100,
               "short": b"Too short to train on.\n"}  # fmt: skip
    path.write_bytes(content[kind])
    return path


def assert_one_line_error(capsys: pytest.CaptureFixture[str], *needles: str) -> str:
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("companion-")
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize(
    ("kind", "needle"),
    [("missing", "does not exist"), ("empty", "is empty"), ("blank", "is empty"), ("binary", "binary"),
     ("latin1", "not UTF-8"), ("short", "shorter than one training window")],
)  # fmt: skip
def test_bad_text_files(tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str, needle: str) -> None:
    text = tmp_path / "missing.txt" if kind == "missing" else _bad_text(tmp_path, kind)
    assert train(text, "--out", tmp_path / "run", *TINY, "--steps", "5") == 2
    assert_one_line_error(capsys, needle)
    assert not (tmp_path / "run").exists()  # nothing was created


@pytest.mark.parametrize(
    ("args", "needle"),
    [(["--no-such-flag"], "unrecognized arguments: --no-such-flag"), (["--steps", "0"], "--steps"),
     (["--steps", "ten"], "--steps"), (["--tokenizer", "word"], "--tokenizer"),
     (["--d-model", "30", "--n-heads", "4"], "d_model=30 is not divisible by n_heads=4"),
     (["--tokenizer", "bpe", "--vocab-size", "100"], "--vocab-size 100"),
     # issue 23.16: every number is checked before anything is written, and named by its flag
     (["--lr", "inf"], "--lr: inf is invalid; expected a finite number > 0"), (["--lr", "nan"], "--lr: nan"),
     (["--lr", "0"], "--lr: 0 is invalid"), (["--min-lr-ratio", "2"], "--min-lr-ratio: 2 is invalid"),
     (["--grad-clip", "inf"], "--grad-clip"), (["--beta2", "1"], "--beta2: 1 is invalid"),
     (["--weight-decay", "-0.1"], "--weight-decay"), (["--warmup", "-1"], "--warmup: -1 is invalid"),
     (["--seed", "-1"], "--seed"), (["--dropout", "1"], "--dropout: 1 is invalid"),
     (["--steps", "ten"], "--steps: 'ten' is not an integer >= 1"),
     (["--batch-size", "4", "--grad-accum", "3"], "--batch-size 4 is not divisible by --grad-accum 3"),
     (["--device", "tpu"], "--device")],
)  # fmt: skip
def test_bad_flags(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
                   needle: str) -> None:  # fmt: skip
    assert train(corpus, "--out", tmp_path / "run", *TINY, *args) == 2
    line = assert_one_line_error(capsys, needle)
    assert "_positive_int" not in line and "TrainConfig" not in line  # the flag, never the code's names
    assert not (tmp_path / "run").exists()


def test_a_folder_with_unrelated_files_is_refused(corpus: Path, tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "chapter1.tex").write_text("precious")
    assert train(corpus, "--out", out, *TINY) == 2
    assert_one_line_error(capsys, "not part of a companion run", "chapter1.tex")
    assert snapshot(out) == {"chapter1.tex": b"precious"}


@pytest.mark.parametrize(
    ("args", "needle"),
    [([], "already holds a training run"), (["--d-model", "32"], "already holds a training run"),
     (["--resume", "--d-model", "32"], "holds another model"),
     (["--resume", "--tokenizer", "bpe"], "holds another model")],
)  # fmt: skip
def test_a_folder_holding_a_run_is_not_overwritten(corpus: Path, trained: Path, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str], args: list[str],
                                                   needle: str) -> None:  # fmt: skip
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    before = snapshot(out)
    assert train(corpus, "--out", out, "--no-progress", *args) == 2
    assert_one_line_error(capsys, needle)
    assert snapshot(out) == before


def test_a_run_stopped_before_its_first_checkpoint_can_start_again(corpus: Path, trained: Path,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    # as if Ctrl-C came while the tokenizer and the token ids were being written: no checkpoint, no step logged
    for name in (CHECKPOINT, BEST):
        (out / name).unlink()
    (out / LOG).write_text((out / LOG).read_text(encoding="utf-8").splitlines(keepends=True)[0], encoding="utf-8")
    assert train(corpus, "--out", out, *TINY, "--steps", "5") == 0
    assert read_run_checkpoint(out / CHECKPOINT)["step"] == 5


def test_a_trained_run_without_its_checkpoint_is_not_overwritten(corpus: Path, trained: Path, tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 28.8: checkpoint.pt deleted by hand, best.pt and log.csv left: a new run must not replace them."""
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    (out / CHECKPOINT).unlink()
    before = snapshot(out)
    assert train(corpus, "--out", out, *TINY, "--steps", "5") == 2
    assert_one_line_error(capsys, BEST, "logged steps", "is gone")
    assert snapshot(out) == before
    (out / BEST).unlink()  # the log alone is evidence too
    assert train(corpus, "--out", out, *TINY, "--steps", "5") == 2
    assert_one_line_error(capsys, "logged steps")


def test_resume_refuses_another_text(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.txt"
    other.write_text(char_corpus()[::-1], encoding="utf-8")
    before = snapshot(trained)
    assert train(other, "--out", trained, "--resume") == 2
    assert_one_line_error(capsys, "is not the text")
    assert snapshot(trained) == before


@pytest.mark.parametrize("damage", ["truncated", "garbage", "foreign"])
def test_a_corrupt_checkpoint_is_reported(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                          damage: str) -> None:  # fmt: skip
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    data = (out / CHECKPOINT).read_bytes()
    if damage == "truncated":
        (out / CHECKPOINT).write_bytes(data[: len(data) // 3])
    elif damage == "garbage":
        (out / CHECKPOINT).write_bytes(b"not a checkpoint at all")
    else:
        torch.save({"weights": torch.zeros(3)}, out / CHECKPOINT)
    before = snapshot(out)
    assert train("--out", out, "--resume") == 2
    assert_one_line_error(capsys, "checkpoint.pt")
    assert sample_main([str(out), "--prompt", "a"]) == 2
    assert_one_line_error(capsys, "checkpoint.pt")
    assert snapshot(out) == before


def test_sample_errors(trained: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert sample_main([str(tmp_path / "nowhere")]) == 2
    assert_one_line_error(capsys, "does not exist")
    assert sample_main([str(trained), "--prompt", "\u6ce8\u610f\u529b"]) == 2  # characters the char tokenizer never saw
    line = assert_one_line_error(capsys, "prompt", "--tokenizer bpe")
    assert "unk_token" not in line  # the Python API's way out; no command has such a flag (issue 31.5)
    for seed in (str(2**70), "-1"):  # issue 28: the flag is named, not torch's overflow
        assert sample_main([str(trained), "--seed", seed]) == 2
        assert_one_line_error(capsys, "--seed", "[0, 2**32)")
    assert sample_main([str(trained), "--temperature", "0"]) == 2
    assert_one_line_error(capsys, "temperature")
    assert sample_main([str(trained), "--bogus"]) == 2
    assert_one_line_error(capsys, "unrecognized arguments")


def test_resume_needs_a_checkpoint_and_a_finished_run_needs_more_steps(
    tmp_path: Path, trained: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert train("--out", tmp_path / "empty", "--resume") == 2
    assert_one_line_error(capsys, "holds no checkpoint.pt")
    out = tmp_path / "run"
    shutil.copytree(trained, out)
    assert train("--out", out, "--resume", "--no-progress", "--stop-at", "3") == 2
    assert_one_line_error(capsys, "--stop-at 3")
    assert train("--out", out, "--resume", "--no-progress") == 0
    assert train("--out", out, "--resume", "--no-progress") == 2
    assert_one_line_error(capsys, "already finished")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message on a machine without CUDA")
def test_device_cuda_without_a_gpu(corpus: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert train(corpus, "--out", tmp_path / "run", *TINY, "--device", "cuda") == 2
    assert_one_line_error(capsys, "--device cuda", "no CUDA")
    assert sample_main([str(tmp_path / "run"), "--device", "cuda"]) == 2
    assert_one_line_error(capsys, "--device cuda")


# --- packaging ------------------------------------------------------------------------------------------


def test_help_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert train("--help") == 0 and "--resume" in capsys.readouterr().out
    assert sample_main(["--help"]) == 0 and "--top-p" in capsys.readouterr().out
    assert eval_main(["--help"]) == 0 and "bits per byte" in capsys.readouterr().out
    assert export_main(["--help"]) == 0 and "Hugging Face folder" in capsys.readouterr().out
    assert train("--help") == 0 and "--chat FILE" in (out := capsys.readouterr().out) and "--dpo FILE" in out


def test_console_scripts_are_declared() -> None:
    text = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    scripts = text.split("[project.scripts]\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert scripts == ['companion-train = "companion.cli.train:main"', 'companion-sample = "companion.cli.sample:main"',
                       'companion-eval = "companion.cli.eval:main"', 'companion-export = "companion.cli.export:main"']
    for line in scripts:  # each names a main(argv) -> int
        module, func = line.split('"')[1].split(":")
        assert callable(getattr(__import__(module, fromlist=[func]), func))

"""``companion-train``'s checkpoints over a run's life (issue 23.11-12): the lowest-validation checkpoint kept
beside the latest (``best.pt``), the summary that names both, and ``--resume --steps N`` training on past the
schedule at its floor instead of stretching it.

Runs call ``main(argv)`` in-process on the course's little corpus with a tiny character model.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path

import pytest
import torch
from cli_helpers import TINY, corpus_file, train

from companion.cli.run_folder import BEST, CHECKPOINT, RUN_FILES, load_run, read_run_checkpoint
from companion.cli.sample import main as sample_main
from companion.cli.train import read_log
from companion.models import num_parameters
from companion.training import TrainConfig, lr_at


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return corpus_file(tmp_path_factory)


@pytest.fixture(scope="module")
def overfit(corpus: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A run whose validation loss turns up: a high learning rate on a few KB, 60 steps."""
    out = tmp_path_factory.mktemp("runs") / "overfit"
    import contextlib
    import io

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        assert train(corpus, "--out", out, *TINY, "--d-model", "32", "--steps", "60", "--lr", "3e-2",
                     "--warmup", "0", "--min-lr-ratio", "1") == 0  # fmt: skip
    return out, printed.getvalue()


def test_best_pt_holds_the_step_of_the_lowest_validation_loss(overfit: tuple[Path, str]) -> None:
    out, printed = overfit
    evals = [r for r in read_log(out) if "val_loss" in r]
    lowest = min(evals, key=lambda r: r["val_loss"])
    assert lowest["step"] < 60, "the run must overfit for this test to mean something"
    best = read_run_checkpoint(out / BEST)
    assert best["step"] == lowest["step"] and best["optimizer"] is None  # weights only
    assert best["best"]["val_loss"] == lowest["val_loss"]
    latest = read_run_checkpoint(out / CHECKPOINT)
    assert latest["step"] == 60 and latest["best"] == best["best"]  # the latest checkpoint knows where the best is
    assert BEST in RUN_FILES
    # the two checkpoints hold different weights, and load_run reads either
    run_best, run_latest = load_run(out, checkpoint="best"), load_run(out)
    assert run_best.checkpoint["step"] == lowest["step"] and run_latest.checkpoint["step"] == 60
    assert not torch.equal(run_best.model.embed.token.weight, run_latest.model.embed.token.weight)


def test_the_summary_says_parameters_bits_per_byte_and_the_best_step(overfit: tuple[Path, str]) -> None:
    out, printed = overfit
    run = load_run(out)
    evals = [r for r in read_log(out) if "val_loss" in r]
    lowest = min(evals, key=lambda r: r["val_loss"])
    summary = printed[printed.index("companion-train: steps 1..60"):]
    assert f"{num_parameters(run.model):,} parameters" in summary
    best_line = next(line for line in summary.splitlines() if "best checkpoint" in line)
    assert f"(step {lowest['step']})" in best_line and f"val loss {lowest['val_loss']:.4f}" in best_line
    assert "--checkpoint best" in best_line
    # bits per byte: the character tokenizer's ids each spell one character of this ASCII text, one byte
    bpb = float(re.search(r"([\d.]+) bits per byte", best_line).group(1))
    assert bpb == pytest.approx(lowest["val_loss"] / math.log(2), abs=1e-3)


def test_companion_sample_chooses_the_best_checkpoint(overfit: tuple[Path, str], capsys) -> None:
    out, _ = overfit
    capsys.readouterr()
    args = [str(out), "--prompt", "The model", "--max-new-tokens", "30", "--seed", "0"]  # same draws, other weights
    assert sample_main([*args, "--checkpoint", "best"]) == 0
    from_best = capsys.readouterr().out
    assert sample_main(args) == 0
    from_latest = capsys.readouterr().out
    assert from_best.startswith("The model") and from_best != from_latest


def test_best_pt_needs_an_evaluation_first(corpus: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "10", "--stop-at", "3") == 0
    assert not (out / BEST).exists()
    capsys.readouterr()
    assert sample_main([str(out), "--checkpoint", "best"]) == 2
    assert "holds no best.pt yet" in capsys.readouterr().err


# --- extending a run ------------------------------------------------------------------------------------


def schedule(steps: int, lr: float = 1e-3) -> TrainConfig:
    return TrainConfig(steps=steps, lr=lr, min_lr_ratio=0.1, warmup_steps=min(100, steps // 10))


def test_resume_with_more_steps_trains_on_at_the_floor(corpus: Path, tmp_path: Path, capsys) -> None:
    """A finished 20-step run resumed to 30: steps 21..30 at the floor, no jump at the join (the old behaviour
    re-stretched the cosine over 30 steps, so step 21's rate jumped above step 20's)."""
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "20") == 0
    before = read_log(out)
    capsys.readouterr()
    assert train("--out", out, "--resume", "--steps", "30", "--no-progress") == 0
    said = capsys.readouterr().out
    rows = read_log(out)
    assert rows[:20] == before  # the first 20 steps are untouched
    floor = 1e-3 * 0.1
    assert [r["lr"] for r in rows[20:]] == pytest.approx([floor] * 10)
    assert rows[19]["lr"] == pytest.approx(floor)  # the schedule had reached its floor: the rate is continuous
    assert "steps 21..30 come after the end of the run's cosine schedule (step 20)" in said
    assert "--init-from" in said and "--steps 30" in said  # the honest alternatives are named
    assert read_run_checkpoint(out / CHECKPOINT)["args"]["schedule_steps"] == 20


def test_a_stopped_run_resumed_with_more_steps_keeps_its_schedule(corpus: Path, tmp_path: Path) -> None:
    """Stopped at step 8 of 20, resumed with --steps 30: steps 9..20 follow the 20-step cosine exactly (as an
    uninterrupted 20-step run), steps 21..30 its floor."""
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "20", "--stop-at", "8") == 0
    assert train("--out", out, "--resume", "--steps", "30", "--no-progress") == 0
    lrs = [r["lr"] for r in read_log(out)]
    expected = [lr_at(s, schedule(20)) for s in range(30)]
    assert lrs == pytest.approx(expected)


def test_a_finished_run_says_how_to_train_on(corpus: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "run"
    assert train(corpus, "--out", out, *TINY, "--steps", "5") == 0
    capsys.readouterr()
    assert train("--out", out, "--resume", "--no-progress") == 2
    err = capsys.readouterr().err
    assert "already finished" in err and "larger --steps" in err and "floor" in err


def test_a_resumed_run_keeps_its_best_record(corpus: Path, tmp_path: Path) -> None:
    """10 steps stopped at 5 then resumed: best.pt and the record are those of the uninterrupted run."""
    whole, parts = tmp_path / "whole", tmp_path / "parts"
    assert train(corpus, "--out", whole, *TINY, "--steps", "10") == 0
    assert train(corpus, "--out", parts, *TINY, "--steps", "10", "--stop-at", "5") == 0
    assert train("--out", parts, "--resume", "--no-progress") == 0
    a, b = read_run_checkpoint(whole / BEST), read_run_checkpoint(parts / BEST)
    assert a["step"] == b["step"] and a["best"] == b["best"]
    for name in a["model"]:
        torch.testing.assert_close(a["model"][name], b["model"][name], rtol=0, atol=0)
    shutil.rmtree(whole)

"""Chapter 11 exercise checks: each right answer passes, each classic mistake fails with the hint naming it."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from companion.exercises.ch11_train_your_gpt import bits_per_byte_reference
from companion.exercises.testing import assert_fails, assert_passes
from companion.models import GPT, ModelConfig
from companion.tokens import CharTokenizer
from companion.training import TrainConfig, lm_loss, lr_at


def test_initial_loss_is_ln_v_and_an_untrained_model_agrees() -> None:
    """The predicted value is what a freshly initialised model really scores on random tokens."""
    torch.manual_seed(0)
    model = GPT(ModelConfig.gpt2_small(vocab_size=512, d_model=64, n_heads=4, n_layers=2, d_ff=256, max_seq_len=64,
                                       dropout=0.0)).eval()  # fmt: skip
    batch = torch.randint(512, (8, 65), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        measured = lm_loss(model, batch).item()
    assert abs(measured - math.log(512)) < 0.05  # the premise: an untrained model scores about ln V
    v = 50_257  # the exercise asks about GPT-2's vocabulary
    assert_passes("initial_loss", math.log(v))
    assert_passes("initial_loss", 10.8)  # rounded, within 2 %
    assert_fails("initial_loss", math.log2(v), "bits")
    assert_fails("initial_loss", math.log10(v), "base 10")
    assert_fails("initial_loss", v, "perplexity")
    assert_fails("initial_loss", 1 / v, "probability")
    assert_fails("initial_loss", 0, "certainty")
    assert_fails("initial_loss", math.log(512), "too low")


def batch_ok(ids, starts, seq_len):
    inputs = torch.stack([ids[s : s + seq_len] for s in starts])
    targets = torch.stack([ids[s + 1 : s + seq_len + 1] for s in starts])
    return inputs, targets


def test_lm_batch_agrees_with_what_lm_loss_scores() -> None:
    """The reader's (inputs, targets) give the same loss as lm_loss on the (B, T + 1) windows."""
    ids = torch.randint(50, (200,), generator=torch.Generator().manual_seed(2))
    starts, t = [0, 17, 120], 16
    model = GPT(ModelConfig(vocab_size=50, d_model=32, n_heads=2, n_layers=1, d_ff=64, max_seq_len=t)).eval()
    x, y = batch_ok(ids, starts, t)
    with torch.no_grad():
        by_hand = F.cross_entropy(model(x).reshape(-1, 50), y.reshape(-1))
        windows = torch.stack([ids[s : s + t + 1] for s in starts])
        torch.testing.assert_close(by_hand, lm_loss(model, windows))
    assert_passes("lm_batch", batch_ok)


def test_lm_batch_mistakes() -> None:
    def same(ids, starts, seq_len):
        rows = [ids[s : s + seq_len] for s in starts]
        return torch.stack(rows), torch.stack(rows)

    def swapped(ids, starts, seq_len):
        x, y = batch_ok(ids, starts, seq_len)
        return y, x

    def short(ids, starts, seq_len):
        w = torch.stack([ids[s : s + seq_len] for s in starts])
        return w[:, :-1], w[:, 1:]

    assert_fails("lm_batch", same, "shifted one position")
    assert_fails("lm_batch", swapped, "swapped")
    assert_fails("lm_batch", short, "one token short")
    assert_fails("lm_batch", lambda ids, starts, seq_len: batch_ok(ids, starts, seq_len)[0], "pair")
    assert_fails("lm_batch", lambda ids, starts, seq_len: tuple(t.float() for t in batch_ok(ids, starts, seq_len)),
                 "dtype")  # fmt: skip


def lr_ok(step, config):
    if step < config.warmup_steps:
        return config.lr * (step + 1) / config.warmup_steps
    progress = (step - config.warmup_steps) / max(1, config.steps - 1 - config.warmup_steps)
    floor = config.lr * config.min_lr_ratio
    return floor + (config.lr - floor) * (1 + math.cos(math.pi * progress)) / 2


def test_warmup_cosine_lr() -> None:
    config = TrainConfig(steps=300, lr=3e-3, warmup_steps=30)
    assert all(math.isclose(lr_ok(s, config), lr_at(s, config)) for s in range(300))  # the reader's = the package's
    assert_passes("warmup_cosine_lr", lr_ok)
    assert_passes("warmup_cosine_lr", lr_at)
    assert_fails("warmup_cosine_lr", lambda s, c: lr_ok(s, c) if s >= c.warmup_steps else c.lr * s / c.warmup_steps,
                 "(step + 1)")  # fmt: skip
    assert_fails("warmup_cosine_lr", lambda s, c: lr_ok(s, c.__class__(steps=c.steps, lr=c.lr, warmup_steps=0,
                 min_lr_ratio=c.min_lr_ratio)), "no warm-up")  # fmt: skip
    no_floor = lambda s, c: lr_ok(s, TrainConfig(steps=c.steps, lr=c.lr, warmup_steps=c.warmup_steps, min_lr_ratio=0))  # noqa: E731
    assert_fails("warmup_cosine_lr", no_floor, "floor")

    def linear(step, c):
        if step < c.warmup_steps:
            return lr_ok(step, c)
        progress = (step - c.warmup_steps) / max(1, c.steps - 1 - c.warmup_steps)
        return c.lr * c.min_lr_ratio + (c.lr - c.lr * c.min_lr_ratio) * (1 - progress)

    assert_fails("warmup_cosine_lr", linear, "straight line")

    def whole_run(step, c):
        if step < c.warmup_steps:
            return lr_ok(step, c)
        floor = c.lr * c.min_lr_ratio
        return floor + (c.lr - floor) * (1 + math.cos(math.pi * step / (c.steps - 1))) / 2

    assert_fails("warmup_cosine_lr", whole_run, "end of the warm-up")
    assert_fails("warmup_cosine_lr", lambda s, c: "fast", "expected a number")


def test_bits_per_byte_reference_equals_total_bits_over_bytes() -> None:
    """Summed cross-entropy in bits over a text, divided by its UTF-8 bytes, equals the reference formula."""
    text = "注意力 is all you need, 注意力!"  # 3 bytes per Chinese character, 1 per ASCII one
    tok = CharTokenizer.from_text(text)
    ids = torch.tensor([tok.encode(text)])  # (1, N)
    n_bytes = len(text[1:].encode("utf-8"))  # the bytes of the predicted characters (all but the first)
    assert n_bytes == len(text) - 1 + 2 * (text[1:].count("注") + text[1:].count("意") + text[1:].count("力"))
    model = GPT(ModelConfig(vocab_size=tok.vocab_size, d_model=16, n_heads=2, n_layers=1, d_ff=32,
                            max_seq_len=64)).eval()  # fmt: skip
    with torch.no_grad():
        logits = model(ids[:, :-1])  # (1, N - 1, V)
        nats = F.cross_entropy(logits[0], ids[0, 1:], reduction="sum").item()
    mean = nats / (ids.size(1) - 1)
    assert math.isclose(bits_per_byte_reference(mean, ids.size(1) - 1, n_bytes), nats / math.log(2) / n_bytes)
    assert_passes("bits_per_byte", lambda loss, n_tokens, n_bytes: loss * n_tokens / n_bytes / math.log(2))
    assert_passes("bits_per_byte", lambda loss, n_tokens, n_bytes: loss * n_tokens / n_bytes * math.log2(math.e))


def test_bits_per_byte_mistakes() -> None:
    assert_fails("bits_per_byte", lambda loss, t, b: loss * t / b, "nats per byte")
    assert_fails("bits_per_byte", lambda loss, t, b: loss / math.log(2), "bits per *token*")
    assert_fails("bits_per_byte", lambda loss, t, b: loss * b / t / math.log(2), "wrong way round")
    assert_fails("bits_per_byte", lambda loss, t, b: loss * t / b * math.log(2), "1 / ln 2")
    assert_fails("bits_per_byte", lambda loss, t, b: loss * t / b / math.log(10), "ln 10")
    assert_fails("bits_per_byte", lambda loss, t, b: str(loss), "expected a number")


def test_rising_val_loss() -> None:
    assert_passes("rising_val_loss", "c")
    assert_passes("rising_val_loss", " (C) ")
    assert_fails("rising_val_loss", "a", "memorises")
    assert_fails("rising_val_loss", "b", "warm-up")
    assert_fails("rising_val_loss", "d", "bigger model")
    assert_fails("rising_val_loss", "e", "not one of the choices")

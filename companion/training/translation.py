"""Chapter 8's toy zh→en translation: the encoder–decoder, its training run, its exact-match accuracy and chrF.

The model is the Transformer of Vaswani et al., *Attention Is All You Need* (2017), scaled down to
2 + 2 pre-norm layers and D=64 (``translation_model_config``), trained with :func:`companion.training.loop.train`
and ``seq2seq_loss`` on ``companion.data.toy_translation`` and decoded greedily with
:func:`companion.generation.translate`. Checked in ``tests/test_training.py``: at least 99 % exact
matches on sentences left out of training, after the default 600 steps. ``chrf`` is Popović's character
n-gram F-score (WMT 2015), in its original form (averaged n-gram precisions and recalls, spaces removed);
``tests/test_training.py`` checks it on hand-worked examples.
"""

from __future__ import annotations

from collections import Counter

import torch
from torch import Tensor, nn

from companion._checks import check_choice, check_positive_int
from companion.data import TranslationData, encode_batch, toy_translation
from companion.generation import translate
from companion.models import ModelConfig, Transformer
from companion.training.loop import train
from companion.training.losses import seq2seq_loss
from companion.training.schedule import TrainConfig

__all__ = ["chrf", "train_translation", "translation_accuracy", "translate_pairs", "translation_model_config"]


def translation_model_config(vocab_size: int) -> ModelConfig:
    """The small encoder–decoder of chapter 8: 2 + 2 pre-norm layers, D=64, 4 heads, sinusoidal positions."""
    return ModelConfig(
        vocab_size=vocab_size, d_model=64, n_heads=4, n_layers=2, d_ff=256, max_seq_len=32,
        norm="layernorm", norm_placement="pre", activation="relu", positions="sinusoidal", embed_scale=True,
        dropout=0.0,
    )  # fmt: skip


@torch.no_grad()
def translate_pairs(model: nn.Module, data: TranslationData, pairs: list, *, batch_size: int = 500) -> list[list[str]]:
    """Greedy translations (English token lists) of the Chinese side of ``pairs``."""
    out: list[list[str]] = []
    for i in range(0, len(pairs), batch_size):
        src, _ = encode_batch(pairs[i : i + batch_size], data.src_vocab, data.tgt_vocab)
        ids = translate(model, src, data.tgt_vocab.bos_id, data.tgt_vocab.eos_id, max_new_tokens=24, src_pad_id=0)
        out += [data.tgt_vocab.decode(row) for row in ids]
    return out


def translation_accuracy(model: nn.Module, data: TranslationData, split: str = "test") -> float:
    """Exact-match rate of greedy translations on ``data.<split>`` (every English word must be right)."""
    check_choice("split", split, ("train", "val", "test"))
    pairs = getattr(data, split)
    hyps = translate_pairs(model, data, pairs)
    return sum(h == en for h, (_, en) in zip(hyps, pairs)) / len(pairs)


def chrf(hypotheses: list[str], references: list[str], *, char_order: int = 6, beta: float = 2.0) -> float:
    """Corpus chrF (Popović 2015), 0 to 100: an F-score over character n-grams of orders 1..``char_order``.

    Spaces are removed; for each order n the matched n-gram counts (clipped, as in BLEU) are summed over the
    corpus, giving a precision P_n and a recall R_n; chrP and chrR are their means over the orders that occur
    in both sides, and chrF = (1 + beta²) chrP chrR / (beta² chrP + chrR). ``beta=2`` weighs recall twice as
    much as precision. Unlike exact match it gives partial credit: one wrong word costs only its n-grams.

    Raises:
        TypeError: not two lists of strings.
        ValueError: lists of different lengths or empty; ``char_order`` < 1; ``beta`` <= 0.
    """
    for name, texts in (("hypotheses", hypotheses), ("references", references)):
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise TypeError(f"{name} must be a list of strings, got {type(texts).__name__}")
    if len(hypotheses) != len(references) or not hypotheses:
        raise ValueError(f"hypotheses ({len(hypotheses)}) and references ({len(references)}) must be equally long "
                         "and not empty")
    check_positive_int("char_order", char_order)
    if not beta > 0:
        raise ValueError(f"beta={beta!r} is invalid; expected a number > 0")
    precisions, recalls = [], []
    for n in range(1, char_order + 1):
        matched = in_hyp = in_ref = 0
        for hyp, ref in zip(hypotheses, references):
            h, r = hyp.replace(" ", ""), ref.replace(" ", "")
            h_grams = Counter(h[i : i + n] for i in range(len(h) - n + 1))
            r_grams = Counter(r[i : i + n] for i in range(len(r) - n + 1))
            matched += sum((h_grams & r_grams).values())  # clipped: min of the two counts
            in_hyp, in_ref = in_hyp + sum(h_grams.values()), in_ref + sum(r_grams.values())
        if in_hyp and in_ref:  # orders longer than every sentence are left out
            precisions.append(matched / in_hyp)
            recalls.append(matched / in_ref)
    if not precisions:
        return 0.0
    p, r = sum(precisions) / len(precisions), sum(recalls) / len(recalls)
    return 0.0 if p + r == 0 else 100 * (1 + beta**2) * p * r / (beta**2 * p + r)


def train_translation(
    data: TranslationData | None = None,
    *,
    steps: int = 600,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    eval_every: int = 0,
    progress: bool = True,
    num_threads: int | None = 1,
) -> tuple[nn.Module, list[dict[str, float]]]:
    """Train the encoder–decoder of chapter 8 on ``companion.data.toy_translation`` (default: seed 0).

    Returns ``(model, history)``; the model is in eval mode. ``eval_every`` > 0 adds the validation
    exact-match rate (``val_accuracy``) to the history every that many steps.
    ``num_threads``: torch CPU threads while training (restored afterwards; None: leave as is). The
    default is 1: a D=64 model's matrices are too small to gain from intra-op threads, and on a busy
    2-core machine two threads ran 70 times slower than one (threads spin-waiting for each other).
    """
    if num_threads is None:
        return _train_translation(data, steps, batch_size, lr, seed, eval_every, progress)
    check_positive_int("num_threads", num_threads)
    before = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        return _train_translation(data, steps, batch_size, lr, seed, eval_every, progress)
    finally:
        torch.set_num_threads(before)


def _train_translation(
    data: TranslationData | None, steps: int, batch_size: int, lr: float, seed: int, eval_every: int, progress: bool
) -> tuple[nn.Module, list[dict[str, float]]]:
    data = data if data is not None else toy_translation(seed)
    torch.manual_seed(seed)
    model = Transformer(translation_model_config(len(data.tgt_vocab)))
    if data.src_vocab is not data.tgt_vocab:
        raise ValueError("data must use one shared vocabulary (toy_translation(shared_vocab=True)): "
                         "companion.models.Transformer shares one embedding table")
    src_all, tgt_all = encode_batch(data.train, data.src_vocab, data.tgt_vocab)  # (N, S), (N, T + 1)
    g = torch.Generator().manual_seed(seed)
    epochs = steps * batch_size // len(src_all) + 1
    order = torch.cat([torch.randperm(len(src_all), generator=g) for _ in range(epochs)])  # shuffled epochs

    def get_batch(step: int) -> tuple[Tensor, Tensor]:
        idx = order[step * batch_size : (step + 1) * batch_size]  # epochs of shuffled sentences
        src, tgt = src_all[idx], tgt_all[idx]
        s, t = int((src != 0).sum(1).max()), int((tgt != 0).sum(1).max())
        return src[:, :s], tgt[:, :t]  # trim columns that are padding in the whole batch

    config = TrainConfig(steps=steps, lr=lr, warmup_steps=min(100, steps // 10 + 1), eval_every=eval_every,
                         weight_decay=0.01, grad_clip=1.0)
    eval_fn = (lambda m: {"val_accuracy": translation_accuracy(m, data, "val")}) if eval_every else None
    history = train(model, get_batch, seq2seq_loss, config, eval_fn=eval_fn, progress=progress)
    return model, history

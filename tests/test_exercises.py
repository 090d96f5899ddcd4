"""Tests of companion.exercises: right answers pass; the classic wrong answers fail with the hint naming them.

Every reader-style implementation below is written independently of the package (as a reader would), so a
passing correct version also cross-checks the package reference, and each wrong version must be rejected.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from companion import exercises

# ---------------------------------------------------------------- right answers, as a reader writes them


def softmax_ok(x, dim=-1):
    e = (x - x.amax(dim, keepdim=True)).exp()
    return e / e.sum(dim, keepdim=True)


def stable_softmax_ok(x, dim=-1):
    m = x.amax(dim, keepdim=True)
    e = (x - m.masked_fill(m == float("-inf"), 0.0)).exp()  # a fully masked row: subtract 0, not -inf
    s = e.sum(dim, keepdim=True)
    return e / s.masked_fill(s == 0, 1.0)  # and give it zeros


def softmax_in_place(x, dim=-1):  # modifies its input: the checker must hand each case a fresh copy
    x.sub_(x.amax(dim, keepdim=True)).exp_()
    return x / x.sum(dim, keepdim=True)


def attention_ok(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention_mask_then_renormalise(q, k, v, mask=None):  # masking after the softmax is fine if renormalised
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        w = w * mask
        w = w / w.sum(-1, keepdim=True)
    return w @ v


def split_ok(x, n_heads):
    b, t, d = x.shape
    return x.view(b, t, n_heads, d // n_heads).transpose(1, 2)


def merge_ok(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).contiguous().view(b, t, h * dh)


def causal_bool(t):
    return torch.tril(torch.ones(t, t, dtype=torch.bool))


def causal_additive(t):
    return torch.full((t, t), float("-inf")).triu(1)


def sinusoidal_ok(seq_len, d_model):
    pe = torch.zeros(seq_len, d_model)
    pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    pe[:, 0::2] = torch.sin(pos * div)
    pe[:, 1::2] = torch.cos(pos * div)
    return pe


def _angles(x, positions):
    d = x.shape[-1]
    theta = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float32) / d)
    ang = positions[:, None].float() * theta  # (T, D_h/2)
    return ang.cos(), ang.sin()


def rope_adjacent_ok(x, positions):
    cos, sin = _angles(x, positions)
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), -1).flatten(-2)


def rope_complex_ok(x, positions):  # RoFormer's view: pairs as complex numbers times e^{i m θ}
    cos, sin = _angles(x, positions)
    z = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2).contiguous())
    return torch.view_as_real(z * torch.complex(cos, sin)).flatten(-2)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


def rotate_adjacent(x):
    return torch.stack((-x[..., 1::2], x[..., 0::2]), -1).flatten(-2)


def rope_half_ok(x, positions):
    cos, sin = _angles(x, positions)
    cos, sin = torch.cat((cos, cos), -1), torch.cat((sin, sin), -1)
    return x * cos + rotate_half(x) * sin


def layer_norm_ok(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def layer_norm_torch(x, gamma, beta, eps=1e-5):
    return F.layer_norm(x, (x.shape[-1],), gamma, beta, eps)


def bpe_merge_ok(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and (ids[i], ids[i + 1]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def top_p_ok(logits, p):
    probs, order = torch.softmax(logits, -1).sort(-1, descending=True)
    drop = (probs.cumsum(-1) - probs) >= p
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


def rms_norm_ok(x, weight, eps=1e-6):
    return x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt() * weight


def swiglu_ok(x, gate_weight, up_weight, down_weight):
    return (F.silu(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T


def swiglu_sigmoid_gate(x, gate_weight, up_weight, down_weight):
    return (torch.sigmoid(x @ gate_weight.T) * (x @ up_weight.T)) @ down_weight.T


def swiglu_activates_up(x, gate_weight, up_weight, down_weight):
    return ((x @ gate_weight.T) * F.silu(x @ up_weight.T)) @ down_weight.T


RIGHT = [
    ("softmax", softmax_ok, 6),
    ("softmax", softmax_in_place, 6),
    ("softmax", torch.softmax, 6),
    ("stable_softmax", stable_softmax_ok, 7),
    ("softmax", stable_softmax_ok, 6),
    ("scaled_dot_product_attention", attention_ok, 6),
    ("scaled_dot_product_attention", attention_mask_then_renormalise, 6),
    ("split_heads", split_ok, 4),
    ("merge_heads", merge_ok, 4),
    ("causal_mask", causal_bool, 4),
    ("causal_mask", causal_additive, 4),
    ("sinusoidal_encoding", sinusoidal_ok, 4),
    ("rope", rope_adjacent_ok, 4),
    ("rope", rope_complex_ok, 4),
    ("rope_half", rope_half_ok, 4),
    ("layer_norm", layer_norm_ok, 5),
    ("layer_norm", layer_norm_torch, 5),
    ("bpe_merge", bpe_merge_ok, 8),
    ("top_p_filter", top_p_ok, 4),
    ("rms_norm", rms_norm_ok, 4),
    ("swiglu", swiglu_ok, 3),
]


@pytest.mark.parametrize(("name", "fn", "n_cases"), RIGHT, ids=lambda v: getattr(v, "__name__", None))
def test_right_answers_pass(name, fn, n_cases, capsys) -> None:
    assert exercises.check(name, fn) is True
    assert capsys.readouterr().out == f"✅ PASS {name}: all {n_cases} cases match\n"


# ---------------------------------------------------------------- the classic mistakes


def softmax_wrong_axis(x, dim=-1):
    e = (x - x.amax(0, keepdim=True)).exp()
    return e / e.sum(0, keepdim=True)


def softmax_no_max(x, dim=-1):
    e = x.exp()
    return e / e.sum(dim, keepdim=True)


def attention_no_scale(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def attention_mask_after_softmax(q, k, v, mask=None):
    w = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    if mask is not None:
        w = w * mask  # not renormalised: rows sum to less than 1
    return w @ v


def attention_inverted_mask(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def split_no_transpose(x, n_heads):
    b, t, d = x.shape
    return x.view(b, n_heads, t, d // n_heads)


def merge_no_transpose(x):
    b, h, t, dh = x.shape
    return x.reshape(b, t, h * dh)


def merge_view_after_transpose(x):
    b, h, t, dh = x.shape
    return x.transpose(1, 2).view(b, t, h * dh)


def sinusoidal_halves(seq_len, d_model):
    pe = sinusoidal_ok(seq_len, d_model)
    return torch.cat((pe[:, 0::2], pe[:, 1::2]), -1)


def sinusoidal_exponent_i(seq_len, d_model):
    pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
    ang = pos / 10000.0 ** (torch.arange(d_model // 2, dtype=torch.float32) / d_model)  # i instead of 2i
    return torch.stack((ang.sin(), ang.cos()), -1).flatten(-2)


def rope_interleaved_cos_rotate_half(x, positions):
    cos, sin = _angles(x, positions)
    return x * cos.repeat_interleave(2, -1) + rotate_half(x) * sin.repeat_interleave(2, -1)


def rope_cat_cos_rotate_adjacent(x, positions):
    cos, sin = _angles(x, positions)
    return x * torch.cat((cos, cos), -1) + rotate_adjacent(x) * torch.cat((sin, sin), -1)


def layer_norm_wrong_axis(x, gamma, beta, eps=1e-5):
    mean = x.mean(0, keepdim=True)
    var = x.var(0, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def layer_norm_unbiased(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(x.var(-1, keepdim=True) + eps) * gamma + beta


def layer_norm_one_pass_variance(x, gamma, beta, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = (x * x).mean(-1, keepdim=True) - mean**2
    return (x - mean) / torch.sqrt(var + eps) * gamma + beta


def layer_norm_ignores_eps(x, gamma, beta, eps=1e-5):
    return layer_norm_ok(x, gamma, beta)


def bpe_merge_overlapping(ids, pair, new_id):  # replaces every position where the pair starts
    out = []
    for i, t in enumerate(ids):
        if i + 1 < len(ids) and (t, ids[i + 1]) == pair:
            out.append(new_id)
        elif i > 0 and (ids[i - 1], t) == pair:
            continue
        else:
            out.append(t)
    return out


def bpe_merge_unordered(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if i + 1 < len(ids) and {ids[i], ids[i + 1]} == set(pair):
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def top_p_drops_crossing_token(logits, p):
    probs, order = torch.softmax(logits, -1).sort(-1, descending=True)
    drop = probs.cumsum(-1) > p
    return logits.masked_fill(drop.scatter(-1, order, drop), float("-inf"))


WRONG = [
    ("softmax", softmax_wrong_axis, "wrong axis"),
    ("softmax", softmax_no_max, "subtract the row max before exp"),
    ("stable_softmax", torch.softmax, "must give zeros, not NaN"),
    ("stable_softmax", softmax_ok, "must give zeros, not NaN"),
    ("scaled_dot_product_attention", attention_no_scale, "divide the scores by √d_k"),
    ("scaled_dot_product_attention", attention_mask_after_softmax, "BEFORE the softmax"),
    ("scaled_dot_product_attention", attention_inverted_mask, "True = may attend"),
    ("split_heads", split_no_transpose, "you reshaped without transposing"),
    ("merge_heads", merge_no_transpose, "you reshaped without transposing"),
    ("merge_heads", merge_view_after_transpose, "raised RuntimeError"),
    ("causal_mask", lambda t: ~causal_bool(t), "True = blocked"),
    ("causal_mask", lambda t: causal_bool(t).T.contiguous(), "transposed"),
    ("causal_mask", lambda t: torch.ones(t, t, dtype=torch.bool).tril(-1), "attend to itself"),
    ("causal_mask", lambda t: causal_bool(t).float(), "not 1 and 0"),
    ("causal_mask", lambda t: torch.full((t, t), -1e9).triu(1), "-1e9 is not -inf"),
    ("sinusoidal_encoding", sinusoidal_halves, "interleave"),
    ("sinusoidal_encoding", lambda t, d: sinusoidal_ok(t + 1, d)[1:], "positions start at 0"),
    ("sinusoidal_encoding", sinusoidal_exponent_i, "even column index 2i"),
    ("rope", rope_interleaved_cos_rotate_half, "mixed the two pairings"),
    ("rope", rope_cat_cos_rotate_adjacent, "mixed the two pairings"),
    ("rope", rope_half_ok, "that is the 'half' pairing"),
    ("rope_half", rope_interleaved_cos_rotate_half, "mixed the two pairings"),
    ("rope_half", rope_cat_cos_rotate_adjacent, "mixed the two pairings"),
    ("rope_half", rope_adjacent_ok, "that is the 'adjacent' pairing"),
    ("layer_norm", layer_norm_wrong_axis, "normalise over the last axis"),
    ("layer_norm", layer_norm_unbiased, "use the biased variance"),
    ("layer_norm", layer_norm_one_pass_variance, "not mean(x²) - mean(x)²"),
    ("layer_norm", layer_norm_ignores_eps, "use the `eps` argument"),
    ("bpe_merge", bpe_merge_overlapping, "must not overlap"),
    ("bpe_merge", bpe_merge_unordered, "(a, b) is ordered; (b, a) differs"),
    ("top_p_filter", top_p_drops_crossing_token, "keep the token that crosses p"),
    ("rms_norm", lambda x, w, eps=1e-6: F.layer_norm(x, x.shape[-1:], w, None, eps), "that is LayerNorm"),
    ("rms_norm", lambda x, w, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True) + eps) * w, "take the square root"),
    ("rms_norm", lambda x, w, eps=1e-6: x / (x.pow(2).mean(-1, keepdim=True).sqrt() + eps) * w, "inside the square"),
    ("rms_norm", lambda x, w, eps=1e-6: x / (x.pow(2).mean(0, keepdim=True) + eps).sqrt() * w, "the last axis"),
    ("rms_norm", lambda x, w, eps=1e-6: rms_norm_ok(x, w), "use the `eps` argument"),
    ("swiglu", swiglu_sigmoid_gate, "not a plain sigmoid"),
    ("swiglu", swiglu_activates_up, "not to the up projection"),
]


@pytest.mark.parametrize(("name", "fn", "hint"), WRONG, ids=lambda v: getattr(v, "__name__", None))
def test_classic_mistakes_fail_with_their_hint(name, fn, hint, capsys) -> None:
    assert exercises.check(name, fn) is False
    out = capsys.readouterr().out
    assert out.startswith(f"❌ FAIL {name}: case '"), out
    assert hint in out, out
    assert "Hint: " in out


def test_softmax_overflow_reports_the_nan_and_where() -> None:
    x = torch.tensor([[1000.0, 1001.0, 1002.0]])
    assert torch.isnan(softmax_no_max(x)).all()  # the mistake really overflows
    assert torch.isfinite(softmax_ok(x)).all()


def test_verdict_names_case_error_and_index(capsys) -> None:
    exercises.check("softmax", softmax_no_max)
    out = capsys.readouterr().out
    assert out.splitlines()[0] == (
        "❌ FAIL softmax: case 'large logits' differs at index (0, 0): got nan, expected 0.09; 5 of 6 cases match."
    )
    exercises.check("softmax", softmax_wrong_axis)
    assert "differs (max abs error " in capsys.readouterr().out


def test_an_exception_in_the_readers_function_is_reported_not_raised(capsys) -> None:
    def broken(x, dim=-1):
        raise ValueError("I have not written this yet")

    assert exercises.check("softmax", broken) is False
    out = capsys.readouterr().out
    assert "raised ValueError: I have not written this yet" in out
    assert "Hint: " in out


@pytest.mark.parametrize(
    ("fn", "problem"),
    [
        (lambda x, dim=-1: softmax_ok(x, dim).tolist(), "returned a list object, expected a torch.Tensor"),
        (lambda x, dim=-1: None, "returned None (a missing `return`?)"),
        (lambda x, dim=-1: softmax_ok(x, dim).double(), "dtype torch.float64, expected torch.float32"),
        (lambda x, dim=-1: softmax_ok(x, dim)[..., :1], "returned shape"),
    ],
)
def test_wrong_type_dtype_or_shape_is_a_failure(fn, problem, capsys) -> None:
    assert exercises.check("softmax", fn) is False
    assert problem in capsys.readouterr().out


def test_a_tensor_where_a_list_is_expected_is_a_failure_not_a_crash(capsys) -> None:
    def as_tensor(ids, pair, new_id):
        return torch.tensor(bpe_merge_ok(ids, pair, new_id))

    assert exercises.check("bpe_merge", as_tensor) is False
    assert "returned a Tensor object, expected a list of ints" in capsys.readouterr().out


def test_output_is_deterministic_and_leaves_global_state_alone(capsys) -> None:
    state, threads = torch.random.get_rng_state(), torch.get_num_threads()
    runs = []
    for _ in range(2):
        for name, fn, _hint in WRONG:
            exercises.check(name, fn)
        runs.append(capsys.readouterr().out)
    assert runs[0] == runs[1]
    assert "0x" not in runs[0]
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.get_num_threads() == threads


def test_unknown_name_lists_the_available_checks() -> None:
    with pytest.raises(ValueError, match="softmax") as info:
        exercises.check("sofmax", softmax_ok)
    for name in exercises.list_checks():
        assert repr(name) in str(info.value)


def test_names_are_forgiving_about_case_spaces_and_hyphens(capsys) -> None:
    assert exercises.check("Layer-Norm", layer_norm_ok) is True
    assert exercises.check(" scaled dot product attention ", attention_ok) is True
    assert capsys.readouterr().out.count("✅") == 2


def test_bad_arguments_raise() -> None:
    with pytest.raises(TypeError, match="expects your function"):
        exercises.check("softmax", 42)
    with pytest.raises(TypeError, match="name must be a str"):
        exercises.check(3, softmax_ok)


def test_list_shows_every_check_with_its_signature() -> None:
    table = exercises.list()
    assert exercises.list is exercises.list_checks
    names = {name for name, _fn, _n in RIGHT}
    assert set(table) == set(exercises.CHECKS) and names <= set(table)
    text = repr(table)
    for name in table:
        assert exercises.CHECKS[name].signature in text
        assert table[name] in text
    assert str(table) == text


# ---------------------------------------------------------------- the framework: kinds, limits, robustness

from companion.exercises import _runner  # noqa: E402
from companion.exercises._runner import Case, Check, choice_check, value_check  # noqa: E402


def _verdict(check_obj, answer, capsys):
    ok = _runner.run(check_obj, answer)
    return ok, capsys.readouterr().out


PARAMS = value_check(
    "params_demo",
    4 * 64 * 64,
    description="parameters of four 64x64 projections",
    hint="count every projection: W_Q, W_K, W_V and W_O.",
    signature="a number: the parameter count",
    mistakes={3 * 64 * 64: "you forgot W_O, the output projection."},
)


@pytest.mark.parametrize("answer", [16384, 16384.0, 16390, torch.tensor(16384), np.int64(16384)])
def test_a_value_check_accepts_the_right_number_within_tolerance(answer, capsys) -> None:
    assert _verdict(PARAMS, answer, capsys) == (True, "✅ PASS params_demo: your answer is right\n")


def test_a_value_check_names_the_known_mistake_and_never_reveals_the_value(capsys) -> None:
    ok, out = _verdict(PARAMS, 3 * 64 * 64, capsys)
    assert not ok
    assert (
        out == "❌ FAIL params_demo: your answer 12288 is too low.\n   Hint: you forgot W_O, the output projection.\n"
    )
    ok, out = _verdict(PARAMS, 10**6, capsys)
    assert "too high (off by a factor of about 61)" in out and "16384" not in out
    assert "Hint: count every projection" in out


@pytest.mark.parametrize(
    ("answer", "problem"),
    [
        (None, "no answer yet — replace None with your answer (a number: the parameter count)"),
        ("lots", "is 'lots', expected a number"),
        (float("nan"), "is nan"),
        (True, "expected a number"),
    ],
)
def test_a_value_check_reports_a_missing_or_malformed_answer(answer, problem, capsys) -> None:
    ok, out = _verdict(PARAMS, answer, capsys)
    assert not ok and problem in out, out


def test_structured_answers_are_compared_part_by_part(capsys) -> None:
    shapes = value_check(
        "shapes_demo",
        {"q": (2, 4, 5, 16), "k": (2, 1, 5, 16)},
        description="d",
        hint="h",
        signature="a dict",
        mistakes=[({"q": (2, 4, 5, 16), "k": (2, 4, 5, 16)}, "with MQA, K has one head.")],
        rtol=0,
    )
    assert _verdict(shapes, {"q": (2, 4, 5, 16), "k": torch.Size([2, 1, 5, 16])}, capsys)[0]
    ok, out = _verdict(shapes, {"q": (2, 4, 5, 16), "k": (2, 4, 5, 16)}, capsys)
    assert not ok and "['k'] [1] 4 is too high" in out and "with MQA, K has one head." in out
    ok, out = _verdict(shapes, {"q": (2, 4, 5, 16)}, capsys)
    assert not ok and "has no key 'k'" in out


def test_a_tensor_answer_is_compared_with_tolerance(capsys) -> None:
    weights = value_check(
        "weights_demo",
        torch.tensor([[0.5, 0.5], [0.25, 0.75]]),
        description="d",
        hint="h",
        signature="a (2, 2) tensor",
        atol=1e-2,
        rtol=0,
    )
    assert _verdict(weights, [[0.501, 0.499], [0.25, 0.75]], capsys)[0]  # a nested list is fine
    ok, out = _verdict(weights, [[0.5, 0.5], [0.75, 0.25]], capsys)
    assert not ok and "at index (1, 0)" in out


def test_a_choice_check_has_one_hint_per_wrong_choice(capsys) -> None:
    choose = choice_check(
        "choice_demo",
        "b",
        ("a", "b", "c"),
        description="d",
        hint="general",
        mistakes={"a": "a is the query axis.", "c": "c has no softmax."},
    )
    assert _verdict(choose, " (B) ", capsys)[0]
    assert _verdict(choose, "a", capsys) == (
        False,
        "❌ FAIL choice_demo: your answer 'a' is not right.\n   Hint: a is the query axis.\n",
    )
    ok, out = _verdict(choose, "d", capsys)
    assert not ok and "'d' is not one of the choices 'a', 'b', 'c'" in out
    with pytest.raises(ValueError, match="answer='x'"):
        choice_check("bad", "x", ("a", "b"), description="d", hint="h")


def test_a_stub_gets_a_friendly_not_implemented_line(capsys) -> None:
    def my_softmax(x, dim=-1):
        raise NotImplementedError("Exercise ex-03-softmax: write the stable softmax")

    assert exercises.check("softmax", my_softmax) is False
    assert capsys.readouterr().out == (
        "❌ FAIL softmax: not implemented yet — Exercise ex-03-softmax: write the stable softmax\n"
    )

    def bare(x, dim=-1):
        raise NotImplementedError

    exercises.check("softmax", bare)
    assert "not implemented yet — replace `raise NotImplementedError`" in capsys.readouterr().out


def _forever(x, dim=-1):
    while True:
        try:
            x = x + 1
        except Exception:  # a reader's catch-all cannot swallow the time limit
            pass


def test_an_endless_loop_is_stopped_by_the_time_limit(monkeypatch, capsys) -> None:
    import time

    monkeypatch.setattr(_runner, "TIME_LIMIT_S", 0.3)
    start = time.monotonic()
    assert exercises.check("softmax", _forever) is False
    assert time.monotonic() - start < 5
    out = capsys.readouterr().out
    assert "case 'random rows' ran longer than the time limit (0.3 s) and was stopped (an endless loop?)" in out
    import signal

    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)  # the timer is cancelled afterwards


def test_the_time_limit_also_works_outside_the_main_thread(monkeypatch) -> None:
    import threading

    monkeypatch.setattr(_runner, "TIME_LIMIT_S", 0.3)
    results = []
    with __import__("contextlib").redirect_stdout(__import__("io").StringIO()) as buf:
        worker = threading.Thread(target=lambda: results.append(exercises.check("softmax", _forever)))
        worker.start()
        worker.join(10)
    assert not worker.is_alive() and results == [False]
    assert "ran longer than the time limit" in buf.getvalue()


def test_a_failure_of_the_judging_step_is_reported_not_raised(capsys) -> None:
    def broken_judge(out):
        raise KeyError("oops")

    demo = Check("judge_demo", "fn()", "d", "h", lambda: [Case("only", (), broken_judge)])
    ok, out = _verdict(demo, lambda: 1, capsys)
    assert not ok
    assert out.startswith("❌ FAIL judge_demo: the check itself failed while judging case 'only' (raised KeyError")
    bad_cases = Check("cases_demo", "fn()", "d", "h", lambda: 1 / 0)
    ok, out = _verdict(bad_cases, lambda: 1, capsys)
    assert not ok and "the check itself failed while preparing its cases (raised ZeroDivisionError" in out


def test_star_import_does_not_shadow_builtins() -> None:
    namespace: dict = {}
    exec("from companion.exercises import *", namespace)
    assert "list" not in namespace and "check" in namespace
    assert set(exercises.__all__) == {"check", "list_checks"}


def test_every_chapter_module_declares_its_chapter_and_checks() -> None:
    import pkgutil

    modules = [m.name for m in pkgutil.iter_modules(exercises.__path__) if m.name.startswith("ch")]
    assert modules == sorted(modules) and modules
    assert list(exercises.CHAPTERS) == sorted(exercises.CHAPTERS)
    for chapter, checks in exercises.CHAPTERS.items():
        assert re.fullmatch(r"\d\d_[a-z0-9_]+", chapter), chapter
        assert checks and all(exercises.CHECKS[c.name] is c for c in checks)
    assert sum(len(c) for c in exercises.CHAPTERS.values()) == len(exercises.CHECKS)


def test_testing_helpers(capsys) -> None:
    from companion.exercises.testing import assert_fails, assert_passes

    assert assert_passes("softmax", softmax_ok).startswith("✅ PASS softmax")
    assert "Hint:" in assert_fails("softmax", softmax_wrong_axis, ["wrong axis", "keepdim"])
    with pytest.raises(AssertionError, match="accepted a wrong answer"):
        assert_fails("softmax", softmax_ok, "anything")
    with pytest.raises(AssertionError, match="expected 'no such words'"):
        assert_fails("softmax", softmax_wrong_axis, "no such words")


def test_list_checks_of_one_chapter() -> None:
    chapter, checks = next(iter(exercises.CHAPTERS.items()))
    assert list(exercises.list_checks(chapter)) == [c.name for c in checks]
    assert repr(exercises.list_checks(chapter)).startswith(f"{chapter}:\n")
    with pytest.raises(ValueError, match="chapter"):
        exercises.list_checks("99_nothing")

"""T5's span corruption: the input and target together give back the text, with T5's counts of dropped tokens
and spans (Raffel et al. 2020, §3.1.4: 15 % of the tokens, spans of mean length 3)."""

from __future__ import annotations

import pytest
import torch

from companion.models import span_corruption


def restore(inputs: list, targets: list) -> list:
    """Put each span of the target back in place of its sentinel in the input."""
    spans, current = {}, None
    for token in targets:
        if token.startswith("<extra_id_"):
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    return [t for token in inputs for t in (spans[token] if token.startswith("<extra_id_") else [token])]


@pytest.mark.parametrize("n", [2, 10, 20, 60, 500])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_input_and_target_give_back_the_text(n: int, seed: int) -> None:
    words = [f"w{i}" for i in range(n)]
    inputs, targets = span_corruption(words, generator=torch.Generator().manual_seed(seed))
    assert restore(inputs, targets) == words
    dropped = [t for t in targets if not t.startswith("<extra_id_")]
    assert len(dropped) == min(max(round(0.15 * n), 1), n - 1)
    spans = sum(t.startswith("<extra_id_") for t in inputs)
    assert spans == max(round(len(dropped) / 3), 1)
    assert targets[-1] == f"<extra_id_{spans}>"  # T5 ends the target with one more sentinel
    assert inputs[0] == "w0"  # T5's layout: a kept run first


def test_the_same_generator_gives_the_same_corruption_and_other_sentinels_work() -> None:
    ids = list(range(100, 160))
    a = span_corruption(ids, generator=torch.Generator().manual_seed(4), sentinel=lambda i: 999 - i)
    b = span_corruption(ids, generator=torch.Generator().manual_seed(4), sentinel=lambda i: 999 - i)
    assert a == b and 999 in a[0] and a[1][0] == 999


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        span_corruption(["one"])
    with pytest.raises(ValueError, match="noise_density=0 is invalid"):
        span_corruption(["a", "b", "c"], noise_density=0)
    with pytest.raises(ValueError, match="mean_span_length=0 is invalid"):
        span_corruption(["a", "b", "c"], mean_span_length=0)

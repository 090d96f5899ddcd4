"""Speed of companion.attention.MultiHeadAttention against PyTorch's own attention.

Times one forward pass (no gradients, eval mode) of:

* ``explicit``  MultiHeadAttention, the written-out path (matmul, masked_fill, float32 softmax, matmul);
* ``fast``      MultiHeadAttention(use_sdpa=True), the same projections around
                ``torch.nn.functional.scaled_dot_product_attention``;
* ``sdpa``      the reference: the same four nn.Linear projections and F.scaled_dot_product_attention,
                with no checks and no module around it;
* ``torch_mha`` torch.nn.MultiheadAttention of the same size.

With ``--causal`` the reference calls ``F.scaled_dot_product_attention(..., is_causal=True)`` (no mask in
memory), ``fast`` and ``explicit`` are called with ``is_causal=True`` as the GPT calls them, and one more
variant, ``fast_mask``, passes the same causal mask as a boolean (T, T) tensor instead (what a causal model
did before it had ``is_causal``).

Prints the median over ``--repeats`` runs and each time as a ratio to ``sdpa``.
Targets: fast <= 1.1x, explicit <= 3x. Default size B=8, T=1024, D=768, H=12 (GPT-2 small's layer);
``--small`` uses B=2, T=256 for a quick check.

    python benchmarks/bench_attention.py [--small] [--causal] [--repeats 5] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from companion.attention import MultiHeadAttention
from companion.masks import causal_mask


def median_seconds(variants: dict[str, Callable[[], Tensor]], repeats: int) -> dict[str, float]:
    """Median wall time of each variant. The variants take turns, in an order rotated every round, so that
    a busy machine or a cold cache does not favour one of them."""
    for fn in variants.values():
        fn()  # warm-up: allocator, kernels, thread pool
    names = list(variants)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            start = time.perf_counter()
            variants[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def reference_sdpa(attn: MultiHeadAttention, x: Tensor, causal: bool) -> Tensor:
    """The same projections as ``attn`` around PyTorch's fused attention, with nothing else."""
    b, t, d = x.shape
    h, d_h = attn.n_heads, attn.head_dim
    q = attn.q_proj(x).view(b, t, h, d_h).transpose(1, 2)  # (B, H, T, D_h)
    k = attn.k_proj(x).view(b, t, h, d_h).transpose(1, 2)  # (B, H, T, D_h)
    v = attn.v_proj(x).view(b, t, h, d_h).transpose(1, 2)  # (B, H, T, D_h)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=causal)  # (B, H, T, D_h)
    return attn.o_proj(out.transpose(1, 2).reshape(b, t, d))  # (B, T, D)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="B=2, T=256 instead of B=8, T=1024")
    parser.add_argument("--causal", action="store_true", help="causal attention (is_causal=True)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per variant (median reported)")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    b, t, d, h = (2, 256, 768, 12) if args.small else (8, 1024, 768, 12)

    torch.manual_seed(0)
    explicit = MultiHeadAttention(d, h).eval()
    fast = MultiHeadAttention(d, h, use_sdpa=True).eval()
    fast.load_state_dict(explicit.state_dict())
    torch_mha = nn.MultiheadAttention(d, h, batch_first=True).eval()
    x = torch.randn(b, t, d)
    mask = causal_mask(t) if args.causal else None
    blocked = None if mask is None else ~mask  # nn.MultiheadAttention: True = blocked

    causal = args.causal
    variants: dict[str, Callable[[], Tensor]] = {
        "sdpa": lambda: reference_sdpa(explicit, x, causal),
        "fast": lambda: fast(x, is_causal=causal),
        "explicit": lambda: explicit(x, is_causal=causal),
        "torch_mha": lambda: torch_mha(x, x, x, attn_mask=blocked, need_weights=False)[0],
    }
    if causal:
        variants["fast_mask"] = lambda: fast(x, mask=mask)  # the (T, T) boolean mask built and passed
    with torch.no_grad():
        torch.testing.assert_close(variants["fast"](), variants["sdpa"]())
        torch.testing.assert_close(variants["explicit"](), variants["sdpa"](), atol=1e-4, rtol=1e-4)
        if causal:
            torch.testing.assert_close(variants["fast_mask"](), variants["sdpa"](), atol=1e-5, rtol=1e-5)
        times = median_seconds(variants, args.repeats)

    print(f"B={b} T={t} D={d} H={h} causal={args.causal} threads={torch.get_num_threads()} "
          f"repeats={args.repeats} torch={torch.__version__}")  # fmt: skip
    targets = {"fast": 1.1, "explicit": 3.0}
    for name, seconds in times.items():
        ratio = seconds / times["sdpa"]
        verdict = "ok" if ratio <= targets.get(name, 0) else "MISSED"
        target = f"  (target <= {targets[name]}x: {verdict})" if name in targets else ""
        print(f"{name:>10}: {seconds * 1e3:9.1f} ms   {ratio:5.2f}x sdpa{target}")


if __name__ == "__main__":
    main()

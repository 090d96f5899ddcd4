"""Tokens per second of greedy generation with and without the KV cache, at GPT-2 small's shape.

Random weights (nothing is downloaded); the same tokens come out both ways (checked below), so the
ratio measures only the work the cache saves: without it, step t recomputes all t positions in every
layer (O(n²) positions over a generation), with it each step processes one new token (O(n)).

    .venv/bin/python benchmarks/bench_generation.py            # GPT-2 small, 200 new tokens, CPU
    .venv/bin/python benchmarks/bench_generation.py --device cuda --sdpa

Target: the cached path is at least 6× faster.
"""

from __future__ import annotations

import argparse
import time

import torch

from companion.generation import generate
from companion.models import GPT, ModelConfig, num_parameters


def timed(model: GPT, prompt: torch.Tensor, new_tokens: int, use_cache: bool) -> tuple[torch.Tensor, float]:
    if prompt.device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = generate(model, prompt, new_tokens, greedy=True, use_cache=use_cache)
    if prompt.device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave torch's default)")
    parser.add_argument("--sdpa", action="store_true", help="use torch's fused attention kernel")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    torch.manual_seed(0)
    config = ModelConfig.gpt2_small(dropout=0.0, use_sdpa=args.sdpa)
    model = GPT(config).to(args.device).eval()
    prompt = torch.randint(0, config.vocab_size, (1, args.prompt_len), device=args.device)
    print(
        f"GPT-2 small shape: {num_parameters(model):,} parameters, device={args.device}, "
        f"threads={torch.get_num_threads()}, prompt {args.prompt_len} tokens, {args.new_tokens} new tokens"
    )

    generate(model, prompt, 4, greedy=True)  # warm-up (allocator, kernels)
    n = args.new_tokens
    cached, t_cached = timed(model, prompt, n, use_cache=True)
    print(f"with KV cache:    {n / t_cached:8.1f} tokens/s  ({t_cached:.2f} s)", flush=True)
    uncached, t_uncached = timed(model, prompt, n, use_cache=False)
    print(f"without KV cache: {n / t_uncached:8.1f} tokens/s  ({t_uncached:.2f} s)")
    if not torch.equal(cached, uncached):
        raise SystemExit("cached and uncached generation produced different tokens")
    print(f"speed-up: {t_uncached / t_cached:.1f}x (target >= 6x)")


if __name__ == "__main__":
    main()

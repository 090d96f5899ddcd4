"""Tokens per second of greedy generation at GPT-2 small's shape: companion against Hugging Face.

Three ways to decode the same random GPT-2-small-shaped weights (built by ``transformers`` from a
config, copied into ``companion.models.GPT`` with ``load_gpt2_state_dict``; nothing is downloaded):

* ``hf``        ``transformers`` ``GPT2LMHeadModel.generate`` (greedy, its own KV cache): the reference;
* ``cached``    ``companion.generation.generate(..., use_cache=True)``, with the fast paths ``companion-sample``
                uses (fused attention and norms; ``--explicit``: the explicit ones the chapters read);
* ``uncached``  ``companion.generation.generate(..., use_cache=False)`` (every step recomputes everything).

The same tokens must come out of all three (checked below), so the ratios measure only speed. Runs
take turns (median of ``--repeats``), so a busy machine does not favour one of them; the figures are
ratios against the reference measured in the same run, never absolute claims.

    .venv/bin/python benchmarks/bench_generation.py            # GPT-2 small, 200 new tokens, CPU
    .venv/bin/python benchmarks/bench_generation.py --device cuda
    .venv/bin/python benchmarks/bench_generation.py --new-tokens 50 --repeats 1 --skip-uncached   # quick

Targets: cached >= 1.0x the tokens/s of ``hf``; cached >= 6x uncached.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from companion.generation import generate
from companion.models import ModelConfig, load_gpt2_state_dict, num_parameters


def timed(fn: Callable[[], torch.Tensor], device: str) -> tuple[torch.Tensor, float]:
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return out, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=200)
    parser.add_argument("--prompt-len", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per variant (median reported)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave torch's default)")
    parser.add_argument("--explicit", action="store_true", help="companion's explicit attention and norms instead "
                        "of the fast paths (use_sdpa, fused_norm) companion-sample uses")
    parser.add_argument("--skip-uncached", action="store_true", help="leave out the slow uncached variant")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers

    torch.manual_seed(0)
    hf_config = transformers.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)  # GPT-2 small's shape
    hf = transformers.GPT2LMHeadModel(hf_config).to(args.device).eval()
    config = ModelConfig.gpt2_small(dropout=0.0, use_sdpa=not args.explicit, fused_norm=not args.explicit)
    ours = load_gpt2_state_dict({k: v.cpu() for k, v in hf.state_dict().items()}, config).to(args.device).eval()
    prompt = torch.randint(0, config.vocab_size, (1, args.prompt_len), device=args.device)
    n = args.new_tokens
    hf_kwargs = dict(max_new_tokens=n, min_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0,
                     attention_mask=torch.ones_like(prompt))  # fmt: skip
    print(
        f"GPT-2 small shape: {num_parameters(ours):,} parameters, device={args.device}, "
        f"threads={torch.get_num_threads()}, prompt {args.prompt_len} tokens, {n} new tokens, "
        f"companion: {'explicit attention and norms' if args.explicit else 'fast paths'}, "
        f"hf attention={hf.config._attn_implementation}, "
        f"torch {torch.__version__}, transformers {transformers.__version__}"
    )

    variants: dict[str, Callable[[], torch.Tensor]] = {
        "hf": lambda: hf.generate(prompt, **hf_kwargs),
        "cached": lambda: generate(ours, prompt, n, greedy=True, use_cache=True),
    }
    if not args.skip_uncached:
        variants["uncached"] = lambda: generate(ours, prompt, n, greedy=True, use_cache=False)
    with torch.no_grad():
        hf.generate(prompt, **{**hf_kwargs, "max_new_tokens": 4, "min_new_tokens": 4})  # warm-up
        generate(ours, prompt, 4, greedy=True)
        outputs: dict[str, torch.Tensor] = {}
        times: dict[str, list[float]] = {name: [] for name in variants}
        names = list(variants)
        for r in range(args.repeats):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                if name == "uncached" and r > 0:
                    continue  # one run is enough for the slow one
                outputs[name], seconds = timed(variants[name], args.device)
                times[name].append(seconds)
    for name, out in outputs.items():
        if not torch.equal(out.cpu(), outputs["hf"].cpu()):
            raise SystemExit(f"{name} produced different tokens from transformers' generate")
    median = {name: statistics.median(ts) for name, ts in times.items()}
    for name, seconds in median.items():
        speed = median["hf"] / seconds
        print(f"{name:>9}: {n / seconds:8.1f} tokens/s  {speed:5.2f}x hf  (median of {len(times[name])})")
    print(f"same tokens from all {len(outputs)} variants")
    verdict = "ok" if median["hf"] / median["cached"] >= 1.0 else "MISSED"
    print(f"cached vs hf: {median['hf'] / median['cached']:.2f}x tokens/s (target >= 1.0x: {verdict})")
    if "uncached" in median:
        print(f"cached vs uncached: {median['uncached'] / median['cached']:.1f}x (target >= 6x)")


if __name__ == "__main__":
    main()

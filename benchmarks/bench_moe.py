"""The mixture-of-experts layer against ``transformers``' ``MixtralSparseMoeBlock``, same weights, same tokens.

Both layers route with a softmax over E experts, keep the top k and renormalise, then run each expert on the
tokens routed to it. ``companion.moe.MoE`` gathers each expert's tokens once and adds the results back with
``index_add_`` (``moe_per_expert``), as Mixtral's block does in its "eager" experts implementation, the
reference; transformers' "grouped_mm" implementation (one grouped matrix product over all experts, where torch
supports it) is timed too. Its "batched_mm" is left out: it copies an expert's weights for each of the k·N routed
tokens (about 18 GB at the default sizes). The chapter's explicit
per-token loop is timed with ``--explicit`` (slow: one expert call per token and choice). The outputs must
agree (checked below), so the ratios measure only speed. Runs take turns (median of ``--repeats``); each
result is a ratio against the reference measured in the same run, never an absolute claim.

    .venv/bin/python benchmarks/bench_moe.py                      # D=512, 8 experts of 1024, k=2, 2048 tokens
    .venv/bin/python benchmarks/bench_moe.py --backward           # forward + backward (training)
    .venv/bin/python benchmarks/bench_moe.py --device cuda --d-model 4096 --d-expert 14336 --tokens 8192

Target: companion's forward within 1.1x of the reference's time (ratio <= 1.1).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from companion.moe import MoE, moe_per_token, route


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--d-model", type=int, default=512)
    parser.add_argument("--d-expert", type=int, default=1024)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=2048)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: leave torch's default)")
    parser.add_argument("--backward", action="store_true", help="time forward + backward instead of forward only")
    parser.add_argument("--explicit", action="store_true", help="also time the explicit per-token loop (on 256 tokens)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    import transformers
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

    dtype = getattr(torch, args.dtype)
    d, width, e = args.d_model, args.d_expert, args.experts
    config = transformers.MixtralConfig(hidden_size=d, intermediate_size=width, num_local_experts=e,
                                        num_experts_per_tok=args.k)  # fmt: skip
    config._experts_implementation = "eager"  # transformers' own per-expert loop, the reference
    torch.manual_seed(0)
    theirs = MixtralSparseMoeBlock(config)
    theirs.experts.config = config  # the experts read their implementation from here
    ours = MoE(d, width, e, args.k)
    with torch.no_grad():
        theirs.gate.weight.normal_(0, 0.02)
        theirs.experts.gate_up_proj.normal_(0, 0.02)
        theirs.experts.down_proj.normal_(0, 0.02)
        ours.router.weight.copy_(theirs.gate.weight)
        for j, expert in enumerate(ours.experts):
            expert.gate_proj.weight.copy_(theirs.experts.gate_up_proj[j, :width])
            expert.up_proj.weight.copy_(theirs.experts.gate_up_proj[j, width:])
            expert.down_proj.weight.copy_(theirs.experts.down_proj[j])
    theirs, ours = theirs.to(args.device, dtype), ours.to(args.device, dtype)
    x = torch.randn(1, args.tokens, d, device=args.device, dtype=dtype)

    def run(layer: torch.nn.Module) -> torch.Tensor:
        if args.backward:
            inp = x.clone().requires_grad_(True)
            out = layer(inp)
            out.float().square().mean().backward()
            return out.detach()
        with torch.no_grad():
            return layer(x)

    def timed(impl: str | None) -> float:
        if impl is not None:
            config._experts_implementation = impl
        layer = ours if impl is None else theirs
        sync(args.device)
        start = time.perf_counter()
        run(layer)
        sync(args.device)
        return time.perf_counter() - start

    tol = 1e-4 if dtype == torch.float32 else 3e-2
    out_ours = run(ours)  # warm-up, and every implementation's output must agree with ours
    impls = []
    for impl in ("eager", "grouped_mm"):
        config._experts_implementation = impl
        try:
            torch.testing.assert_close(run(theirs), out_ours, atol=tol, rtol=tol)
            impls.append(impl)
        except (RuntimeError, ValueError, ImportError, KeyError, NotImplementedError) as err:
            print(f"  (transformers' {impl!r} experts do not run here: {type(err).__name__})")
    times: dict[str | None, list[float]] = {impl: [] for impl in [*impls, None]}
    for _ in range(args.repeats):
        for impl in times:
            times[impl].append(timed(impl))
    median = {impl: statistics.median(t) for impl, t in times.items()}
    what = "forward + backward" if args.backward else "forward"
    print(f"MoE layer, {what}: D={d}, {e} experts of width {width}, k={args.k}, {args.tokens} tokens, "
          f"{args.dtype} on {args.device}, {torch.get_num_threads()} threads")
    for impl in impls:
        note = "(reference)" if impl == "eager" else f"{median[impl] / median['eager']:.2f}x the reference's time"
        print(f"  transformers MixtralSparseMoeBlock, {impl + ' experts':18s} {median[impl] * 1e3:8.1f} ms  {note}")
    mine = median[None]
    print(f"  companion MoE (moe_per_expert){'':20s} {mine * 1e3:8.1f} ms  "
          f"ratio {mine / median['eager']:.2f}x the reference's time")
    if args.explicit:
        n = min(256, args.tokens)
        flat = x[0, :n]
        with torch.no_grad():
            weights, experts, _ = route(flat.float() @ ours.router.weight.float().t(), args.k)
            start = time.perf_counter()
            moe_per_token(flat, weights, experts, ours.experts)
            per_token = (time.perf_counter() - start) / n
            start = time.perf_counter()
            ours(x[:, :n])
            batched = (time.perf_counter() - start) / n
        print(f"  explicit per-token loop on {n} tokens: {per_token / batched:.1f}x the batched layer's time per token")


if __name__ == "__main__":
    main()

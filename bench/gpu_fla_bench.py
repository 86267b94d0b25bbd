"""scripts/gpu-check's flash-linear-attention phase: the anchors of issue 27 timed on the same GPU
in the same run as our kernels (attention_bench), at bf16, batch 1, H 8 and the same N:
flash-linear-attention's `parallel_based` (the 2nd-order Taylor map, quadratic form, flash-style;
d <= 128), `fused_chunk_based` (the same map in linear time with the state on-chip; d <= 16) and
`chunk_linear_attn` (first-order linear attention, N·d² work), beside PyTorch's SDPA flash.
fla's kernels are causal and ours are not, so the figures are anchors, not like-for-like.

fla comes from the wheels scripts/gpu-bundle carries (fla-core, einops; Triton is PyTorch's own),
installed by gpu-check into a folder on PYTHONPATH. Times: CUDA events, the median of --repeats
calls after --warmup. Writes one JSON: {"gpu", "torch", "fla", "results": [{"kernel", "tokens",
"head_dim", "ms" | "error"}]}. Exit 3 without a CUDA device, 1 when every kernel failed."""
import argparse
import json
import statistics
import sys


def time_ms(torch, call, warmup, repeats):
    for _ in range(warmup):
        call()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        call()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def kernels(torch):
    """(name, function of q, k, v in [B, N, H, d], largest head dimension)."""
    found = []
    try:
        from fla.ops.based import fused_chunk_based, parallel_based
        found.append(("fla_parallel_based", lambda q, k, v: parallel_based(q, k, v), 128))
        found.append(("fla_fused_chunk_based", lambda q, k, v: fused_chunk_based(q, k, v), 16))
    except Exception as error:  # noqa: BLE001 - an import failure is a result to report
        found.append(("fla_based", error, 0))
    try:
        from fla.ops.linear_attn import chunk_linear_attn
        found.append(("fla_chunk_linear_attn", lambda q, k, v: chunk_linear_attn(q, k, v)[0], 256))
    except Exception as error:  # noqa: BLE001
        found.append(("fla_linear_attn", error, 0))

    def sdpa_flash(q, k, v):
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
            return torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
    found.append(("sdpa_flash", sdpa_flash, 256))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--tokens", default="1024,4096,16384")
    parser.add_argument("--head-dims", default="16,32,64")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    import torch
    if not torch.cuda.is_available():
        print("gpu_fla_bench: no CUDA device; nothing was timed")
        return 3
    try:
        import fla
        fla_version = getattr(fla, "__version__", "unknown")
    except Exception as error:  # noqa: BLE001
        fla_version = f"not importable: {error}"
    results = []
    for name, call, max_dim in kernels(torch):
        for n in (int(x) for x in args.tokens.split(",")):
            for d in (int(x) for x in args.head_dims.split(",")):
                row = {"kernel": name, "tokens": n, "head_dim": d}
                if not callable(call):
                    row["error"] = f"import: {call}"
                elif d > max_dim:
                    continue
                else:
                    shape = (args.batch, n, args.heads, d)
                    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16)
                               for _ in range(3))
                    try:
                        row["ms"] = time_ms(torch, lambda: call(q, k, v), args.warmup,
                                            args.repeats)
                    except Exception as error:  # noqa: BLE001
                        row["error"] = f"{type(error).__name__}: {error}"[:300]
                    del q, k, v
                    torch.cuda.empty_cache()
                results.append(row)
                print(json.dumps(row), flush=True)
    with open(args.out, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                   "fla": fla_version, "batch": args.batch, "heads": args.heads,
                   "results": results}, f, indent=1)
    return 0 if any("ms" in row for row in results) else 1


if __name__ == "__main__":
    sys.exit(main())

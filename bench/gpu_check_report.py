"""scripts/gpu-check's last phase: one page of text (summary.txt) and one JSON (gpu-check.json)
from the phases' results, plus the CUDA tests' results merged into tests.json. Standard library
only. Benchmarks: Google Benchmark JSON files bench-*.json in --out, and the training benchmark's
train.json and train-fused.json in --work (merged into gpu-check.json: $OUT holds at most 8
files)."""
import argparse
import glob
import json
import os
import math
import re


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def phases(work):
    rows = []
    try:
        with open(os.path.join(work, "phases.tsv")) as f:
            for line in f:
                name, verdict, seconds = line.rstrip("\n").split("\t")
                rows.append({"phase": name, "result": verdict, "seconds": int(seconds)})
    except OSError:
        pass
    return rows


def tests(work):
    """gtest JSON of every binary → (counts, failures, merged)."""
    merged, counts, failures = {}, {"passed": 0, "failed": 0, "skipped": 0}, []
    for path in sorted(glob.glob(os.path.join(work, "tests", "*.json"))):
        data = load(path)
        if not data:
            continue
        binary = os.path.basename(path)[:-5]
        merged[binary] = data
        for suite in data.get("testsuites", []):
            for case in suite.get("testsuite", []):
                name = f"{suite['name']}.{case['name']}"
                if case.get("failures"):
                    counts["failed"] += 1
                    failures.append(f"{binary}: {name}: "
                                    + case["failures"][0].get("failure", "")[:300])
                elif case.get("result") == "SKIPPED":
                    counts["skipped"] += 1
                else:
                    counts["passed"] += 1
    return counts, failures, merged


def benchmarks(path):
    """{name: (ms, counters)} of one Google Benchmark JSON."""
    data = load(path)
    rows = {}
    for b in (data or {}).get("benchmarks", []):
        if b.get("error_occurred"):
            rows[b["name"]] = (None, {"error": b.get("error_message", "")})
            continue
        ms = b["real_time"] * {"ms": 1, "us": 1e-3, "ns": 1e-6, "s": 1e3}[b.get("time_unit", "ms")]
        rows[b["name"]] = (ms, {k: v for k, v in b.items() if k in ("peak_MiB", "paper_FLOP/s",
                                                                     "tokens/s", "FLOP/s",
                                                                     "examples/s")})
    return rows


def attention_table(rows):
    """Lines: N, d, ms of each path / backend / implementation; the best SDPA backend over the
    fused efficient kernel, and SDPA flash over the fused direct kernel."""
    by_shape = {}
    for name, (ms, _) in rows.items():
        m = re.match(r"BM_Attention_(\w+?)/N:(\d+)/d:(\d+)", name)
        if m:
            by_shape.setdefault((int(m.group(3)), int(m.group(2))), {})[m.group(1)] = ms
    columns = ["softmax_flash", "softmax_efficient", "softmax_cudnn", "direct_aten", "direct_cuda",
               "efficient_aten", "efficient_cuda"]
    present = [c for c in columns if any(times.get(c) for times in by_shape.values())]
    present = present or ["softmax", "direct", "efficient"]
    lines = ["    d      N " + "".join(f"{c:>15}" for c in present) +
             "  SDPA/eff_cuda  flash/dir_cuda"]
    for (d, n), times in sorted(by_shape.items()):
        sdpa = [t for k, t in times.items() if k.startswith("softmax") and t]
        fused = times.get("efficient_cuda") or times.get("efficient")
        ratio = f"{min(sdpa) / fused:>13.2f}x" if sdpa and fused else f"{'-':>14}"
        flash, direct = times.get("softmax_flash"), times.get("direct_cuda")
        direct_ratio = f"{flash / direct:>14.2f}x" if flash and direct else f"{'-':>15}"
        cells = "".join(f"{times[c]:>15.3f}" if times.get(c) else f"{'-':>15}" for c in present)
        lines.append(f"{d:>5} {n:>6} {cells} {ratio} {direct_ratio}")
    return lines


def times_by(rows, prefix):
    """{(variant, d or None, N): ms} of the benchmarks named prefix + variant + "/N:..."."""
    out = {}
    for name, (ms, _) in rows.items():
        m = re.match(prefix + r"(\w+?)/N:(\d+)(?:/d:(\d+))?", name)
        if m and ms:
            out[(m.group(1), int(m.group(3)) if m.group(3) else None, int(m.group(2)))] = ms
    return out


def crossover(direct, efficient):
    """The N at which the efficient path's time meets the direct path's, interpolated on log N
    between the two measured lengths around it; None where it does not cross in the range."""
    ns = sorted(set(direct) & set(efficient))
    for lo, hi in zip(ns, ns[1:]):
        a, b = direct[lo] - efficient[lo], direct[hi] - efficient[hi]
        if a <= 0 < b:
            t = -a / (b - a)
            return round(2 ** ((1 - t) * math.log2(lo) + t * math.log2(hi)))
    if ns and direct[ns[0]] > efficient[ns[0]]:
        return f"<= {ns[0]}"
    return None


def targets(out, serve=None):
    """Issue 27's targets, each as (what, measured, met): bf16, B 1, H 8, d 32 at attention-b1's
    shapes, the paper-size encoder, and serving's load runs (`serve`: gpu_check_serve.py's
    report); None where the run has no figure for it."""
    b1 = benchmarks(os.path.join(out, "bench-attention-b1.json"))
    att = times_by(b1, "BM_Attention_")
    d = 32
    found = []

    def at(variant, n):
        return att.get((variant, d, n))

    def best_sdpa(n):
        times = [ms for (v, dd, nn), ms in att.items() if v.startswith("softmax") and dd == d
                 and nn == n]
        return min(times) if times else None

    for n, goal in ((16384, 10), (4096, 3)):
        sdpa, fused = best_sdpa(n), at("efficient_cuda", n)
        ratio = sdpa / fused if sdpa and fused else None
        found.append((f"efficient forward at N {n}: best SDPA / fused >= {goal}x", ratio,
                      ratio is not None and ratio >= goal))
    gemm = max((c.get("FLOP/s", 0) for name, (ms, c) in b1.items()
                if name.startswith("BM_Gemm_bf16")), default=0)
    rates = [c.get("paper_FLOP/s", 0) for name, (ms, c) in b1.items()
             if name.startswith("BM_Attention_efficient_cuda/") and f"/d:{d}/" in name]
    share = max(rates) / gemm if rates and gemm else None
    found.append(("efficient forward: paper FLOP/s over the bf16 GEMM rate of the run >= 0.5",
                  share, share is not None and share >= 0.5))
    flash_ratios = [at("direct_cuda", n) / at("softmax_flash", n)
                    for n in sorted({nn for (_, _, nn) in att})
                    if at("direct_cuda", n) and at("softmax_flash", n)]
    worst = max(flash_ratios) if flash_ratios else None
    found.append(("direct forward / SDPA flash, worst N <= 1.3", worst,
                  worst is not None and worst <= 1.3))
    direct = {n: ms for (v, dd, n), ms in att.items() if v == "direct_cuda" and dd == d}
    efficient = {n: ms for (v, dd, n), ms in att.items() if v == "efficient_cuda" and dd == d}
    cross = crossover(direct, efficient)
    found.append(("crossover direct / efficient (fused) <= 2000 tokens", cross,
                  isinstance(cross, int) and cross <= 2000 or isinstance(cross, str)))
    enc = times_by(benchmarks(os.path.join(out, "bench-encoder.json")), "BM_Encoder_")
    flash = enc.get(("softmax_flash", None, 16384))
    taylor = [ms for (v, _, n), ms in enc.items() if v.startswith("efficient") and n == 16384]
    ratio = flash / min(taylor) if flash and taylor else None
    found.append(("paper encoder at N 16384: softmax (flash) / efficient >= 5x", ratio,
                  ratio is not None and ratio >= 5))
    load = (serve or {}).get("load") or {}
    ratio = load.get("ratio")
    found.append(("serving source-lang at 4000 bytes: GPU requests/s / 2 CPU cores' >= 50x",
                  ratio, ratio is not None and ratio >= 50))
    p99 = ((load.get("gpu") or {}).get("latency_ms") or {}).get("p99")
    found.append(("serving on the GPU at that load: p99 <= 50 ms", p99,
                  p99 is not None and p99 <= 50))
    return found


def train_table(rows):
    """Lines: per sequence length, each path's ms per training step and peak MiB, and the softmax
    (SDPA) step's time over each Taylor path's."""
    by_length = {}
    for name, (ms, counters) in rows.items():
        m = re.match(r"BM_TrainStep_(\w+?)/L:(\d+)", name)
        kernel = re.search(r"/kernel:(\w+)", name)
        if m:
            path = m.group(1) + (f"[{kernel.group(1)}]" if kernel else "")
            by_length.setdefault(int(m.group(2)), {})[path] = (ms, counters)
    lines = []
    for length, paths in sorted(by_length.items()):
        softmax = (paths.get("softmax") or (None, {}))[0]
        cells = []
        for path, (ms, counters) in sorted(paths.items()):
            if ms is None:
                cells.append(f"{path} {counters.get('error', 'error')[:60]}")
                continue
            ratio = f" ({softmax / ms:.2f}x SDPA)" if softmax and path != "softmax" else ""
            cells.append(f"{path} {ms:.1f} ms, {counters.get('peak_MiB', 0):.0f} MiB{ratio}")
        lines.append(f"  L {length:6}: " + "; ".join(cells))
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--work", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--gpu", default="")
    parser.add_argument("--torch", default="")
    parser.add_argument("--seconds", type=int, default=0)
    args = parser.parse_args()
    result = {"gpu": args.gpu, "torch": args.torch, "seconds": args.seconds,
              "phases": phases(args.work)}
    counts, failures, merged = tests(args.work)
    result["tests"] = dict(counts, failures=failures)
    with open(os.path.join(args.out, "tests.json"), "w") as f:
        json.dump(merged, f)
    serve = load(os.path.join(args.work, "serve.json"))
    result["serve"] = serve
    bench = {}
    for path in sorted(glob.glob(os.path.join(args.out, "bench-*.json"))):
        bench[os.path.basename(path)[:-5]] = {
            name: {"ms": ms, **counters} for name, (ms, counters) in benchmarks(path).items()}
    result["benchmarks"] = bench

    lines = [f"gpu-check: {args.gpu} · torch {args.torch} · {args.seconds} s"]
    lines.append("phases: " + ", ".join(f"{p['phase']} {p['result']} ({p['seconds']} s)"
                                         for p in result["phases"]))
    lines.append(f"CUDA tests: {counts['passed']} passed, {counts['failed']} failed, "
                 f"{counts['skipped']} skipped")
    lines += ["  FAILED " + f for f in failures[:12]]
    if serve:
        bad = [c for c in serve.get("cases", []) if c.get("problems")]
        lines.append(f"serving on the GPU: {len(serve.get('cases', []))} files through tsctl and "
                     f"v2 REST, {len(bad)} differing from the CPU; errors: "
                     f"{'; '.join(serve.get('errors', [])) or 'none'}")
        for job in serve.get("jobs", []):
            lines.append(f"{job['kind']} job on the GPU: {job.get('state')} in "
                         f"{job.get('seconds')} s {json.dumps(job.get('figures', {}))} "
                         f"{'; '.join(job.get('problems', [])) or 'ok'}")
        for c in bad[:6]:
            lines.append(f"  {c['model']} {c['file']}: {'; '.join(c['problems'])}")
    for name in ("bench-attention-b1", "bench-attention-b8"):
        if name in bench:
            lines.append(f"{name} (ms per call, bf16, H 8):")
            lines += ["  " + line for line in attention_table(benchmarks(
                os.path.join(args.out, name + ".json")))]
    goals = targets(args.out, serve)
    result["targets"] = [{"target": what, "measured": value, "met": met}
                         for what, value, met in goals]
    lines.append("issue 27's targets (d 32, bf16):")
    for what, value, met in goals:
        shown = "no figure" if value is None else (
            f"{value:.2f}" if isinstance(value, float) else str(value))
        lines.append(f"  {'met    ' if met else 'NOT met'} {what}: {shown}")
    if "bench-encoder" in bench:
        lines.append("bench-encoder (C 512, depth 4, H 16, bf16, B 1; ms per forward):")
        for name, row in bench["bench-encoder"].items():
            ms = f"{row['ms']:.2f}" if row.get("ms") else row.get("error", "-")
            lines.append(f"  {name:48} {ms}")
    if "bench-classify" in bench:
        lines.append("bench-classify (source-lang demo, ClassifyBatch on the GPU; ms per batch):")
        for name, row in bench["bench-classify"].items():
            ms = f"{row['ms']:.2f}" if row.get("ms") else row.get("error", "-")
            lines.append(f"  {name:48} {ms}")
    rows = {}
    for name in ("train.json", "train-fused.json"):
        if os.path.exists(os.path.join(args.work, name)):
            rows.update(benchmarks(os.path.join(args.work, name)))
    if rows:
        result["train"] = {name: {"ms": ms, **counters} for name, (ms, counters) in rows.items()}
        lines.append("train (Trainer::Step, bf16 autocast, AdamW; ms per step, peak MiB above the "
                     "step's start):")
        lines += train_table(rows)
    fla = load(os.path.join(args.work, "fla.json"))
    if fla:
        result["fla"] = fla
        lines.append(f"flash-linear-attention {fla.get('fla')} (causal; bf16, B {fla.get('batch')}, "
                     f"H {fla.get('heads')}; ms per call):")
        for row in fla.get("results", []):
            ms = f"{row['ms']:.3f}" if "ms" in row else row.get("error", "-")[:80]
            lines.append(f"  {row['kernel']:24} N {row['tokens']:6} d {row['head_dim']:3} {ms}")
    text = "\n".join(lines[:160]) + "\n"
    with open(os.path.join(args.out, "summary.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(args.out, "gpu-check.json"), "w") as f:
        json.dump(result, f, indent=1)


if __name__ == "__main__":
    main()

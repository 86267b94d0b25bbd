#!/usr/bin/python3
"""What each CPU level of model/kernels/cpu_features.h runs and how fast, measured on one machine: runs
build/bench/model_profile once per level from this CPU's best down to the generic x86-64
baseline, with the project's kernels capped by TS_CPU_CAPABILITY and LibTorch's GEMM libraries
capped to match (oneDNN by ONEDNN_MAX_CPU_ISA, OpenBLAS by OPENBLAS_CORETYPE), so each row is
what a CPU that stops at that level would run. Prints a Markdown table (the README's CPU-kernel
table) and, with --json FILE, the raw model_profile objects.

A capped run is not the same CPU as a real one of that level (clock, caches, and the 512-bit
units stay this machine's), so the rows compare code paths on one machine, side by side in one
run; they are not a measurement of other CPUs.

Usage: /usr/bin/python3 bench/cpu_levels.py [--build build] [--threads 1] [--repeats 5]
       [--preset paper] [--direct-length 1024] [--efficient-length 4096] [--json out.json]
"""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# level -> (ONEDNN_MAX_CPU_ISA, OPENBLAS_CORETYPE)
LEVELS = [
    ("amx", "AVX512_CORE_AMX", "SapphireRapids"),
    ("avx512_bf16", "AVX512_CORE_BF16", "CooperLake"),
    ("avx512", "AVX512_CORE", "SkylakeX"),
    ("avx2", "AVX2", "Haswell"),
    ("default", "SSE41", "Nehalem"),
]


def detected():
    """The best level this CPU has, from /proc/cpuinfo (as model/kernels/cpu_features.cc reads it)."""
    with open("/proc/cpuinfo") as f:
        flags = set()
        for line in f:
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    if not {"avx2", "fma"} <= flags:
        return "default"
    if not {"avx512f", "avx512bw", "avx512vl", "avx512dq"} <= flags:
        return "avx2"
    if "avx512_bf16" not in flags:
        return "avx512"
    if {"amx_bf16", "amx_tile"} <= flags:
        return "amx"
    return "avx512_bf16"


def run(tool, level, onednn, openblas, precision, path, length, args):
    env = dict(os.environ, TS_CPU_CAPABILITY=level, ONEDNN_MAX_CPU_ISA=onednn,
               OPENBLAS_CORETYPE=openblas)
    command = [tool, "--preset", args.preset, "--precision", precision, "--batch",
               str(args.batch), "--threads", str(args.threads), "--repeats", str(args.repeats),
               "--path", path, "--length", str(length), "--json"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} (TS_CPU_CAPABILITY={level}) failed: {out.stderr}")
    return json.loads(out.stdout)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--preset", default="paper")
    p.add_argument("--direct-length", type=int, default=1024)
    p.add_argument("--efficient-length", type=int, default=4096)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--json")
    args = p.parse_args()
    tool = os.path.join(args.build, "bench", "model_profile")
    best = detected()
    names = [name for name, _, _ in LEVELS]
    rows = []
    for name, onednn, openblas in LEVELS[names.index(best):]:
        precisions = ["fp32"] + (["bf16"] if name in ("amx", "avx512_bf16") else [])
        for precision in precisions:
            direct = run(tool, name, onednn, openblas, precision, "direct", args.direct_length,
                         args)
            efficient = run(tool, name, onednn, openblas, precision, "efficient",
                            args.efficient_length, args)
            rows.append({"level": name, "precision": precision, "direct": direct,
                         "efficient": efficient})
            print(f"{name} {precision}: {direct['whole_ms']:.1f} ms, "
                  f"{efficient['whole_ms']:.1f} ms", file=sys.stderr)
    print(f"model_profile --preset {args.preset} --batch {args.batch} --threads {args.threads} "
          f"--repeats {args.repeats}, direct at N = {args.direct_length}, efficient at "
          f"N = {args.efficient_length}; one run, the levels capped on one CPU\n")
    print("| level | precision | GEMM GFLOP/s | direct attention ms | efficient attention ms |"
          " whole model ms (efficient) | × roofline |")
    print("|---|---|---:|---:|---:|---:|---:|")

    def attention(result):
        return next(part["ms"] for part in result["parts"]
                    if part["name"].startswith("attention"))

    for r in rows:
        e = r["efficient"]
        gemm = e["bf16_gemm_gflops"] if r["precision"] == "bf16" else e["fp32_gemm_gflops"]
        print(f"| {r['level']} | {r['precision']} | {gemm:.0f} | {attention(r['direct']):.1f} | "
              f"{attention(e):.1f} | {e['whole_ms']:.1f} | {e['whole_over_roofline']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

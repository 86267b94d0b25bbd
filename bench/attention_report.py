#!/usr/bin/python3
"""Turns attention_bench JSON into the tables, target checks and plot of docs/PERFORMANCE.md.

Usage: /usr/bin/python3 bench/attention_report.py RESULTS.json [--markdown OUT.md] [--plot OUT.png]
(Debian's python3 with python3-matplotlib; see bench/run_attention_bench.)
"""
import argparse
import json
import math
import re
import sys
from collections import defaultdict

NAME = re.compile(r"BM_Attention_(\w+)/N:(\d+)/d:(\d+)/H:(\d+)")
PATHS = ["softmax", "direct", "efficient", "direct_reference", "efficient_reference"]


def n0(d):
    return math.ceil((4 * d**3 + 10 * d**2 + 9 * d + 4) / (4 * d + 6))


def n1(d):
    return math.ceil(0.25 * (d * d + 2 * d + 1 + math.sqrt(d**4 + 12 * d**3 + 14 * d * d + 4 * d + 1)))


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = defaultdict(dict)  # (d) -> {(path, N): row}
    sgemm = 0.0
    for b in data["benchmarks"]:
        if b.get("run_type") == "aggregate":
            continue
        if b["name"].startswith("BM_Sgemm"):
            sgemm = max(sgemm, b["FLOP/s"])
            continue
        m = NAME.match(b["name"])
        if not m:
            continue
        p, n, d, _ = m.group(1), int(m.group(2)), int(m.group(3)), int(m.group(4))
        scale = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[b["time_unit"]]
        runs[d][(p, n)] = {
            "seconds": b["real_time"] * scale,
            "peak_mib": b.get("peak_MiB", float("nan")),
            "rate": b.get("paper_FLOP/s", float("nan")),
        }
    return data.get("context", {}), sgemm, runs


def crossover(rows, key, a="direct", b="efficient"):
    """First N (log-interpolated) from which path b stays below path a."""
    ns = sorted({n for (p, n) in rows if p in (a, b)})
    pts = [(n, rows[(a, n)][key], rows[(b, n)][key]) for n in ns if (a, n) in rows and (b, n) in rows]
    last_lose = None
    for i, (n, ta, tb) in enumerate(pts):
        if tb >= ta:
            last_lose = i
    if last_lose is None:
        return f"< {pts[0][0]}" if pts else "n/a"
    if last_lose == len(pts) - 1:
        return f"> {pts[-1][0]}"
    (n_lo, a_lo, b_lo), (n_hi, a_hi, b_hi) = pts[last_lose], pts[last_lose + 1]
    r_lo, r_hi = math.log(max(a_lo, 1e-12) / max(b_lo, 1e-12)), math.log(max(a_hi, 1e-12) / max(b_hi, 1e-12))
    t = -r_lo / (r_hi - r_lo) if r_hi != r_lo else 0.5
    return str(round(math.exp(math.log(n_lo) + t * (math.log(n_hi) - math.log(n_lo)))))


def markdown(context, sgemm, runs):
    out = []
    out.append(f"Machine: {context.get('num_cpus', '?')} CPUs, intra-op threads "
               f"{context.get('intra_op_threads', '?')}, device {context.get('device', '?')}, "
               f"LibTorch {context.get('torch_version', '?')}, run {context.get('date', '?')}.\n")
    out.append(f"Measured sgemm rate (best of BM_Sgemm, same run): **{sgemm / 1e9:.1f} GFLOP/s**.\n")
    for d in sorted(runs):
        rows = runs[d]
        ns = sorted({n for (_, n) in rows})
        out.append(f"\n### d = {d}, H = 8, B = 1, fp32 — time per call (ms) / peak tensor memory (MiB)\n")
        out.append("| N | " + " | ".join(PATHS) + " |")
        out.append("|---:|" + "---:|" * len(PATHS))
        for n in ns:
            cells = []
            for p in PATHS:
                r = rows.get((p, n))
                cells.append("—" if r is None else f"{r['seconds'] * 1e3:.1f} / {r['peak_mib']:.0f}")
            out.append(f"| {n} | " + " | ".join(cells) + " |")
    out.append("\n### Crossovers (tokens from which efficient beats direct)\n")
    out.append("| d | measured speed crossover | N0 (formula) | memory crossover vs direct "
               "| memory crossover vs direct_reference | N1 (formula) |")
    out.append("|---:|---:|---:|---:|---:|---:|")
    for d in sorted(runs):
        out.append(f"| {d} | {crossover(runs[d], 'seconds')} | {n0(d)} | "
                   f"{crossover(runs[d], 'peak_mib')} | "
                   f"{crossover(runs[d], 'peak_mib', a='direct_reference')} | {n1(d)} |")
    checks = []
    rows = runs.get(32, {})
    def t(p, n=4096):
        r = rows.get((p, n))
        return None if r is None else r["seconds"]
    if all(t(p) for p in PATHS):
        eff_speedup = t("efficient_reference") / t("efficient")
        eff_rate = rows[("efficient", 4096)]["rate"] / sgemm if sgemm else float("nan")
        dir_speedup = t("direct_reference") / t("direct")
        dir_vs_softmax = t("softmax") / t("direct")
        checks = [
            ("efficient vs efficient_reference (N=4096, d=32)", f"{eff_speedup:.2f}x", eff_speedup >= 3.0, ">= 3x"),
            ("efficient paper-FLOP rate / sgemm rate", f"{100 * eff_rate:.0f}%", eff_rate >= 0.40, ">= 40%"),
            ("direct vs direct_reference", f"{dir_speedup:.2f}x", dir_speedup >= 1.5, ">= 1.5x"),
            ("softmax time / direct time", f"{dir_vs_softmax:.2f}x", dir_vs_softmax >= 1.0, ">= 1x"),
        ]
    for d in sorted(runs):
        c = crossover(runs[d], "seconds")
        ok = c.startswith("<") or (c.isdigit() and int(c) <= n0(d))
        checks.append((f"measured speed crossover d={d} at or below N0={n0(d)}", c, ok, f"<= {n0(d)}"))
    out.append("\n### Targets (ratios from this one run)\n")
    out.append("| check | measured | target | met |")
    out.append("|---|---:|---:|:---:|")
    for name, value, ok, target in checks:
        out.append(f"| {name} | {value} | {target} | {'yes' if ok else 'NO'} |")
    return "\n".join(out) + "\n"


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    dims = sorted(runs)
    fig, axes = plt.subplots(2, len(dims), figsize=(5 * len(dims), 8), squeeze=False)
    for col, d in enumerate(dims):
        rows = runs[d]
        for p in PATHS:
            ns = sorted(n for (q, n) in rows if q == p)
            if not ns:
                continue
            axes[0][col].plot(ns, [rows[(p, n)]["seconds"] * 1e3 for n in ns], marker="o", label=p)
            axes[1][col].plot(ns, [rows[(p, n)]["peak_mib"] for n in ns], marker="o", label=p)
        for row, (mark, name) in enumerate([(n0(d), "N0"), (n1(d), "N1")]):
            axes[row][col].axvline(mark, color="grey", linestyle="--")
            axes[row][col].text(mark, axes[row][col].get_ylim()[0], f" {name}={mark}", color="grey")
        axes[0][col].set_title(f"d = {d}, H = 8, B = 1")
        axes[0][col].set_ylabel("time per call (ms)")
        axes[1][col].set_ylabel("peak tensor memory (MiB)")
        for row in range(2):
            axes[row][col].set_xscale("log", base=2)
            axes[row][col].set_yscale("log")
            axes[row][col].set_xlabel("N (tokens)")
            axes[row][col].grid(True, which="both", alpha=0.3)
    axes[0][0].legend()
    fig.tight_layout(rect=(0, 0, 1, 0.97))
    fig.savefig(path, dpi=90)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results")
    parser.add_argument("--markdown")
    parser.add_argument("--plot")
    args = parser.parse_args()
    context, sgemm, runs = load(args.results)
    if not runs:
        sys.exit(f"{args.results}: no BM_Attention results")
    text = markdown(context, sgemm, runs)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)
    if args.plot:
        plot(runs, args.plot)


if __name__ == "__main__":
    main()

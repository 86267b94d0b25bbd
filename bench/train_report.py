#!/usr/bin/python3
"""Turns train_bench JSON into the training-throughput table of docs/PERFORMANCE.md.

Usage: /usr/bin/python3 bench/train_report.py RESULTS.json [RESULTS.json ...] [--markdown OUT.md]
(see bench/run_train_bench). One section per file; every ratio is between benchmarks of the one run
in that file; with --benchmark_repetitions, between the medians of the repetitions.
"""
import argparse
import json
import math
import re
import sys
from collections import defaultdict

NAME = re.compile(r"BM_TrainStep_(\w+)/L:(\d+)/C:(\d+)/H:(\d+)/depth:(\d+)/batch:(\d+)")
PATHS = ["direct", "efficient", "auto"]
# Paths closer than this (relative) count as a tie: either choice is right within noise.
TIE = 0.03


def n0(d):
    """The formula crossover N0 of docs/MODEL.md in tokens (incl. CLS), as kAuto uses by default."""
    return math.ceil((4 * d**3 + 10 * d**2 + 9 * d + 4) / (4 * d + 6))


def crossover(rows):
    """Length L from which efficient trains faster than direct, log-interpolated between the
    measured lengths ("< L" / "> L" outside them)."""
    pts = []
    for n in sorted({n for (_, n) in rows}):
        d, e = rows.get(("direct", n)), rows.get(("efficient", n))
        if d and e and "error" not in d and "error" not in e:
            pts.append((n, math.log(e["examples_per_s"] / d["examples_per_s"])))
    if not pts:
        return "n/a"
    last_lose = max((i for i, (_, r) in enumerate(pts) if r <= 0), default=None)
    if last_lose is None:
        return f"< {pts[0][0]}"
    if last_lose == len(pts) - 1:
        return f"> {pts[-1][0]}"
    (n_lo, r_lo), (n_hi, r_hi) = pts[last_lose], pts[last_lose + 1]
    t = -r_lo / (r_hi - r_lo)
    return str(round(math.exp(math.log(n_lo) + t * (math.log(n_hi) - math.log(n_lo)))))


def load(path):
    with open(path) as f:
        data = json.load(f)
    runs = defaultdict(dict)  # (C, H, depth, batch) -> {(path, L): row}
    # With repetitions, use the medians; without, the single runs.
    medians = any(b.get("aggregate_name") == "median" for b in data["benchmarks"])
    for b in data["benchmarks"]:
        if medians != (b.get("aggregate_name") == "median"):
            continue
        m = NAME.match(b["run_name"] if medians else b["name"])
        if not m:
            continue
        p, length = m.group(1), int(m.group(2))
        model = tuple(int(m.group(i)) for i in range(3, 7))
        if b.get("error_occurred"):
            runs[model][(p, length)] = {"error": b.get("error_message", "error")}
            continue
        runs[model][(p, length)] = {
            "examples_per_s": b["examples/s"],
            "tokens_per_s": b["tokens/s"],
            "peak_mib": b.get("peak_MiB", float("nan")),
            "ran": b.get("label", p),
        }
    return data.get("context", {}), runs


def machine_line(context):
    load_avg = context.get("load_avg", "?")
    if isinstance(load_avg, list):
        load_avg = ", ".join(f"{x:.2f}" for x in load_avg)
    return (f"Machine: {context.get('num_cpus', '?')} CPUs "
            f"({context.get('mhz_per_cpu', '?')} MHz), intra-op threads "
            f"{context.get('intra_op_threads', '?')}, LibTorch "
            f"{context.get('torch_version', '?')}, run {context.get('date', '?')}, "
            f"load average at the start {load_avg}.")


def model_table(model, rows):
    c, h, depth, batch = model
    lengths = sorted({n for (_, n) in rows})
    out = [f"\n### C = {c}, H = {h} (d = {c // h}), depth {depth}, batch {batch}\n",
           "| L | direct ex/s | efficient ex/s | auto ex/s | efficient/direct | auto/best "
           "| auto ran | peak MiB direct / efficient | memory efficient/direct |",
           "|---:|---:|---:|---:|---:|---:|:---|---:|---:|"]
    for n in lengths:
        d, e, a = (rows.get((p, n)) for p in PATHS)

        def ok(r):
            return r is not None and "error" not in r

        def rate(r):
            if r is None:
                return "—"
            return "error" if "error" in r else f"{r['examples_per_s']:.2f}"

        def peak(r):
            return f"{r['peak_mib']:.0f}" if ok(r) else "—"

        ratio, auto_ratio, picks, memory = "—", "—", "—", "—"
        if ok(d) and ok(e):
            ratio = f"{e['examples_per_s'] / d['examples_per_s']:.2f}x"
            if d["peak_mib"] > 0:
                memory = f"{e['peak_mib'] / d['peak_mib']:.2f}x"
        if ok(d) and ok(e) and ok(a):
            best_path = "efficient" if e["examples_per_s"] >= d["examples_per_s"] else "direct"
            best = max(d["examples_per_s"], e["examples_per_s"])
            auto_ratio = f"{a['examples_per_s'] / best:.2f}x"
            if abs(e["examples_per_s"] / d["examples_per_s"] - 1) < TIE:
                picks = f"{a['ran']} (tie)"
            elif a["ran"] == best_path:
                picks = f"{a['ran']} (right)"
            else:
                picks = f"{a['ran']} (wrong: {best_path} is faster)"
        out.append(f"| {n} | {rate(d)} | {rate(e)} | {rate(a)} | {ratio} | {auto_ratio} "
                   f"| {picks} | {peak(d)} / {peak(e)} | {memory} |")
    return out


def markdown(results):
    """results: [(context, runs)] in the order of the files."""
    out = []
    for context, runs in results:
        out.append(machine_line(context) + "\n")
        out.append(f"Model: {context.get('model', '?')}; ListOps batches of exactly L bytes "
                   "(L + 1 tokens with CLS).\n")
        for model in sorted(runs, key=lambda m: -m[1]):
            out.extend(model_table(model, runs[model]))
        out.append("")
    out.append("\n### Training crossover (L from which efficient trains faster than direct)\n")
    out.append("| C | H | d | batch | measured (log-interpolated) | N0 formula (tokens incl. CLS) |")
    out.append("|---:|---:|---:|---:|---:|---:|")
    for _, runs in results:
        for (c, h, depth, batch) in sorted(runs, key=lambda m: -m[1]):
            out.append(f"| {c} | {h} | {c // h} | {batch} "
                       f"| {crossover(runs[(c, h, depth, batch)])} | {n0(c // h)} |")
    return "\n".join(out) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("results", nargs="+")
    parser.add_argument("--markdown")
    args = parser.parse_args()
    results = []
    for path in args.results:
        context, runs = load(path)
        if not runs:
            sys.exit(f"{path}: no BM_TrainStep results")
        results.append((context, runs))
    text = markdown(results)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Roofline profile report: runs build/bench/model_profile for the paper ListOps encoder at
fp32 and bf16, batch 1 and 8 (one process each, in this run), writes docs/model_profile.json and
draws docs/model_profile.png: per configuration, the measured time of each part next to the time
its FLOPs take at the GEMM rate of the same run.

Usage: /usr/bin/python3 bench/profile_report.py [--build build] [--threads 2] [--repeats 3]
(Debian's python3 with python3-matplotlib.)
"""
import argparse
import json
import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    tool = os.path.join(args.build, "bench", "model_profile")
    runs = []
    for precision in ("fp32", "bf16"):
        for batch in (1, 8):
            out = subprocess.run([tool, "--preset", "paper", "--precision", precision, "--batch",
                                  str(batch), "--threads", str(args.threads), "--repeats",
                                  str(args.repeats), "--json"],
                                 check=True, capture_output=True, text=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
    with open(os.path.join(ROOT, "docs", "model_profile.json"), "w") as f:
        json.dump(runs, f, indent=1)
    plot(runs, os.path.join(ROOT, "docs", "model_profile.png"))
    for r in runs:
        print(f"{r['precision']} batch {r['batch']}: {r['docs_per_s']:.2f} docs/s, whole model "
              f"{r['whole_ms']:.0f} ms = {r['whole_over_roofline']:.2f}x its roofline")
    by = {(r["precision"], r["batch"]): r for r in runs}
    for batch in (1, 8):
        print(f"bf16 / fp32 docs/s at batch {batch}: "
              f"{by[('bf16', batch)]['docs_per_s'] / by[('fp32', batch)]['docs_per_s']:.2f}x")


def plot(runs, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [part["name"] for part in runs[0]["parts"] if part["gflop"] > 0]
    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 4.5), sharey=False)
    for ax, r in zip(axes, runs):
        parts = {part["name"]: part for part in r["parts"]}
        per_doc = lambda ms: ms / r["batch"]
        measured = [per_doc(parts[n]["ms"]) for n in names]
        ideal = [per_doc(parts[n]["roofline_ms"]) for n in names]
        x = range(len(names))
        ax.bar([i - 0.2 for i in x], measured, width=0.4, label="measured")
        ax.bar([i + 0.2 for i in x], ideal, width=0.4, label="at GEMM rate")
        ax.set_xticks(list(x))
        ax.set_xticklabels([n.split(" (")[0] for n in names], rotation=30, ha="right")
        ax.set_title(f"{r['precision']}, batch {r['batch']}: {r['whole_over_roofline']:.2f}x roofline")
        ax.set_ylabel("ms per document")
    axes[0].legend()
    fig.suptitle("Paper ListOps encoder (C 512, H 16, depth 4, N 2000), "
                 f"{runs[0]['threads']} threads: time per part vs its roofline")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


if __name__ == "__main__":
    main()

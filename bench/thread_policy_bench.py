#!/usr/bin/python3
"""Short documents against the issue-11 baseline, and what models[].single_thread_tokens trades.

Starts one tsserver on loopback serving one checkpoint (the demo model's size, C 64, depth 2,
max length 4096; untrained) several times:
  * `before`: fixed queue delay (start_when_idle: false) and always intra_op_threads
    (single_thread_tokens: 0), the behaviour when issue 11 was filed;
  * `tN` for each --thresholds value N: continuous batching with single_thread_tokens N.
Then runs `tsctl bench` on each model in turn (so machine noise hits them alike) for short
documents at concurrency 8, long ones at saturation, and lone long requests, and prints
requests/s per run as a Markdown table (docs/PERFORMANCE.md, "Short inputs against the
issue's baseline"), then each variant's throughput over the baseline's in the same round (the
runs of one round follow each other, so they share the machine's state).

Usage: /usr/bin/python3 bench/thread_policy_bench.py [--build build] [--rounds 2]
       [--thresholds 1024,4096,16384]
"""
import argparse
import os
import tempfile

from bench_server import init_checkpoint, serve
from continuous_batching_bench import ROOT, run_json

SCENARIOS = [
    ("concurrency 8, uniform 10-200 B",
     ["--concurrency", "8", "--requests", "1600", "--lengths", "uniform:10:200"]),
    ("concurrency 16, 4000 B", ["--concurrency", "16", "--requests", "240", "--lengths",
                                "fixed:4000"]),
    ("concurrency 1, 4000 B", ["--concurrency", "1", "--requests", "60", "--lengths",
                               "fixed:4000"]),
    ("concurrency 1, 2000 B", ["--concurrency", "1", "--requests", "100", "--lengths",
                               "fixed:2000"]),
]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--rounds", type=int, default=2, help="runs per model and scenario")
    p.add_argument("--thresholds", default="1024,4096,16384",
                   help="single_thread_tokens values to serve beside the baseline")
    args = p.parse_args()
    work = tempfile.mkdtemp(prefix="ts-thread-policy-")
    checkpoint = init_checkpoint(args.build, work)
    variants = [("before", "false", 0)] + [
        (f"t{n}", "true", int(n)) for n in args.thresholds.split(",")]
    models = "".join(f"""  - name: {name}
    checkpoint: {checkpoint}
    device: cpu
    single_thread_tokens: {tokens}
    batching: {{max_batch_size: 32, max_queue_delay_us: 5000, start_when_idle: {idle}}}
""" for name, idle, tokens in variants)
    rates = {}
    with serve(args.build, work, "listen: 127.0.0.1:0\nmetrics_listen: ''\nintra_op_threads: 2\n"
               f"jobs: {{enabled: false}}\nmodels:\n{models}") as address:
        for scenario, bench_args in SCENARIOS:
            for _ in range(args.rounds):
                for name, _, _ in variants:
                    run = run_json([os.path.join(args.build, "client", "tsctl"), "bench",
                                    "--server", address, "--model", name, "--json", *bench_args])
                    rates.setdefault(scenario, {}).setdefault(name, []).append(
                        run["ok"] / run["elapsed_s"])
    names = [name for name, _, _ in variants]
    print("| scenario | " + " | ".join(names) + " |")
    print("|---|" + "---:|" * len(names))
    for scenario, _ in SCENARIOS:
        cells = [f"{min(rates[scenario][n]):.1f}-{max(rates[scenario][n]):.1f}" for n in names]
        print(f"| {scenario} | " + " | ".join(cells) + " |")
    print()
    print("| scenario | " + " | ".join(f"{n} / before, per round" for n in names[1:]) + " |")
    print("|---|" + "---:|" * (len(names) - 1))
    for scenario, _ in SCENARIOS:
        before = rates[scenario]["before"]
        cells = []
        for n in names[1:]:
            ratios = [r / b for r, b in zip(rates[scenario][n], before)]
            cells.append(f"{min(ratios):.2f}-{max(ratios):.2f}×")
        print(f"| {scenario} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

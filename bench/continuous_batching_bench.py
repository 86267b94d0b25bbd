#!/usr/bin/python3
"""Continuous batching (batching.start_when_idle) against the fixed queue delay, side by side.

Starts one tsserver on loopback serving the same checkpoint twice: `idle` with
start_when_idle: true (a request to a model with no batch running starts at once) and `fixed`
with start_when_idle: false (every batch waits for max_queue_delay_us or a full budget, the
behaviour before). Both use the default max_queue_delay_us of 5000. Then runs `tsctl bench`
on each model in alternation (so machine noise hits both alike), for:
  * concurrency 1 (latency = queue + compute: the idle queue delay shows here);
  * concurrency 8 on short documents (uniform 10-200 bytes);
  * concurrency 16 on long documents (saturation throughput must not drop).
Writes docs/continuous_batching_bench.json and prints a Markdown table.

Usage: /usr/bin/python3 bench/continuous_batching_bench.py [--build build] [--threads 2]
       [--rounds 2] [--quick]
"""
import argparse
import json
import os
import subprocess
import tempfile

from bench_server import init_checkpoint, serve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCENARIOS = [
    # (key, description, tsctl bench arguments)
    ("c1_short", "concurrency 1, uniform 10-200 B",
     ["--concurrency", "1", "--requests", "300", "--lengths", "uniform:10:200"]),
    ("c1_long", "concurrency 1, 4000 B",
     ["--concurrency", "1", "--requests", "60", "--lengths", "fixed:4000"]),
    ("c8_short", "concurrency 8, uniform 10-200 B",
     ["--concurrency", "8", "--requests", "1600", "--lengths", "uniform:10:200"]),
    ("c16_long", "concurrency 16, 4000 B (saturation)",
     ["--concurrency", "16", "--requests", "320", "--lengths", "fixed:4000"]),
]


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def scaled(args, scale):
    out = list(args)
    i = out.index("--requests")
    out[i + 1] = str(max(20, int(int(out[i + 1]) * scale)))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--rounds", type=int, default=2, help="alternations per scenario")
    p.add_argument("--quick", action="store_true", help="fewer requests (smoke run)")
    args = p.parse_args()
    scale = 0.2 if args.quick else 1.0
    tsctl = os.path.join(args.build, "client", "tsctl")
    work = tempfile.mkdtemp(prefix="ts-continuous-bench-")
    checkpoint = init_checkpoint(args.build, work)
    models = "".join(f"""  - name: {name}
    checkpoint: {checkpoint}
    device: cpu
    batching: {{max_batch_size: 32, max_queue_delay_us: 5000, start_when_idle: {flag}}}
""" for name, flag in [("idle", "true"), ("fixed", "false")])
    results = {"threads": args.threads, "model": "C 64, depth 2, 4 heads, MLP 128, max 4096",
               "rounds": args.rounds, "runs": {}}
    with serve(args.build, work,
               f"listen: 127.0.0.1:0\nmetrics_listen: ''\nintra_op_threads: {args.threads}\n"
               f"jobs: {{enabled: false}}\nmodels:\n{models}") as address:
        for key, _, bench_args in SCENARIOS:
            for _ in range(args.rounds):
                for model in ("idle", "fixed"):
                    run = run_json([tsctl, "bench", "--server", address, "--model", model,
                                    "--json", *scaled(bench_args, scale)])
                    results["runs"].setdefault(key, {}).setdefault(model, []).append(run)
    with open(os.path.join(ROOT, "docs", "continuous_batching_bench.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(report(results))


def summary(runs):
    """Totals over the rounds: requests/s over all requests, medians of the per-run p50/p99."""
    requests = sum(r["ok"] for r in runs)
    elapsed = sum(r["elapsed_s"] for r in runs)
    med = lambda xs: sorted(xs)[len(xs) // 2]
    return {
        "requests_per_s": requests / elapsed,
        "p50": med([r["latency_ms"]["p50"] for r in runs]),
        "p99": med([r["latency_ms"]["p99"] for r in runs]),
        "queue": med([r["server_ms"]["queue_mean"] for r in runs]),
        "compute": med([r["server_ms"]["compute_mean"] for r in runs]),
        "batch": sum(r["batch_size"]["mean"] * r["ok"] for r in runs) / max(1, requests),
        "failed": sum(r["failed"] for r in runs),
    }


def report(r):
    lines = [
        f"intra-op threads: {r['threads']}, model {r['model']}, {r['rounds']} alternating "
        "rounds per row",
        "",
        "| scenario | batching | requests/s | p50 ms | p99 ms | queue ms | compute ms | mean batch "
        "| failed |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    ratios = []
    for key, name, _ in SCENARIOS:
        s = {m: summary(r["runs"][key][m]) for m in ("idle", "fixed")}
        for model, label in (("fixed", "fixed delay (before)"), ("idle", "start_when_idle")):
            x = s[model]
            lines.append(f"| {name} | {label} | {x['requests_per_s']:.1f} | {x['p50']:.2f} | "
                         f"{x['p99']:.2f} | {x['queue']:.2f} | {x['compute']:.2f} | "
                         f"{x['batch']:.1f} | {x['failed']} |")
        ratios.append(f"- {name}: throughput **{s['idle']['requests_per_s'] / s['fixed']['requests_per_s']:.2f}×**, "
                      f"p50 **{s['idle']['p50'] / s['fixed']['p50']:.2f}×** of the fixed delay's")
    return "\n".join(lines + [""] + ratios)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Serving benchmark: tsserver + tsctl bench against the in-process model (classify_bench).

Starts a real tsserver on loopback with a 4096-token byte model (untrained weights: speed does
not depend on them), then measures in one run:
  * in-process throughput of ClassifyBatch at the batch sizes the server forms;
  * server throughput at saturation (closed loop, concurrency 16) for 4000-byte documents and for
    a mixed length distribution, and the same at concurrency 1 (the gain from batching);
  * p50/p99 latency at half of the saturation rate (open loop).
Writes docs/serving_bench.json and prints a Markdown summary (docs/PERFORMANCE.md has a copy).

Usage: /usr/bin/python3 bench/serving_bench.py [--build build] [--threads 2] [--quick]
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    p.add_argument("--quick", action="store_true", help="fewer requests (smoke run)")
    args = p.parse_args()
    scale = 0.2 if args.quick else 1.0
    tsmodel = os.path.join(args.build, "model", "tsmodel")
    tsserver = os.path.join(args.build, "server", "tsserver")
    tsctl = os.path.join(args.build, "client", "tsctl")
    classify_bench = os.path.join(args.build, "bench", "classify_bench")
    work = tempfile.mkdtemp(prefix="ts-serving-bench-")
    ckpt = os.path.join(work, "bench.tsckpt")
    subprocess.run([tsmodel, "init", "--out", ckpt, "--labels", "neg,pos", "--embed-dim", "64",
                    "--depth", "2", "--heads", "8", "--mlp-ratio", "2", "--max-length", "4096",
                    "--seed", "1"], check=True, capture_output=True)
    config = os.path.join(work, "bench.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:0
metrics_listen: ''
intra_op_threads: {args.threads}
models:
  - name: bench
    checkpoint: bench.tsckpt
    device: cpu
    batching:
      bucket_boundaries: [64, 128, 256, 512, 1024, 2048, 4096]
      max_batch_tokens: 70000
      max_batch_size: 16
      max_queue_delay_us: 2000
      max_queue_size: 4096
""")
    ready = os.path.join(work, "ready")
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([tsserver, "--config", config, "--ready-file", ready], stderr=log)
    try:
        for _ in range(600):
            if os.path.exists(ready):
                break
            time.sleep(0.1)
        address = open(ready).read().split("grpc=")[1].split()[0]
        results = {"threads": args.threads}
        inproc = subprocess.run([classify_bench, f"--checkpoint={ckpt}", f"--threads={args.threads}",
                                 "--benchmark_format=json"], check=True, capture_output=True,
                                text=True).stdout
        results["in_process"] = {b["name"]: b["docs_per_s"] for b in json.loads(inproc)["benchmarks"]}

        def bench(*extra):
            return run_json([tsctl, "bench", "--server", address, "--model", "bench", "--json", *extra])

        n = lambda k: str(max(10, int(k * scale)))
        results["fixed_c1"] = bench("--concurrency", "1", "--requests", n(60), "--lengths", "fixed:4000")
        results["fixed_c16"] = bench("--concurrency", "16", "--requests", n(480), "--lengths", "fixed:4000")
        mixed = "lognormal:800:1.0:4000"
        results["mixed_c1"] = bench("--concurrency", "1", "--requests", n(150), "--lengths", mixed)
        results["mixed_c16"] = bench("--concurrency", "16", "--requests", n(800), "--lengths", mixed)
        half = results["fixed_c16"]["requests_per_s"] / 2
        results["fixed_half_rate"] = bench("--rate", f"{half:.2f}", "--concurrency", "64",
                                           "--duration-s", str(max(5, int(30 * scale))),
                                           "--lengths", "fixed:4000")
        half_mixed = results["mixed_c16"]["requests_per_s"] / 2
        results["mixed_half_rate"] = bench("--rate", f"{half_mixed:.2f}", "--concurrency", "64",
                                           "--duration-s", str(max(5, int(30 * scale))),
                                           "--lengths", mixed)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    out = os.path.join(ROOT, "docs", "serving_bench.json")
    with open(out, "w") as f:
        json.dump(results, f, indent=1)
    print(report(results))


def report(r):
    ip = r["in_process"]
    c16 = r["fixed_c16"]
    mean_batch = c16["batch_size"]["mean"]
    # The in-process rate at the batch size the server actually formed (nearest measured size).
    sizes = [1, 2, 4, 8, 16]
    nearest = min(sizes, key=lambda s: abs(s - mean_batch))
    inproc = ip[f"BM_Classify/len:4000/batch:{nearest}/min_time:1.000/real_time"]
    lines = [
        f"intra-op threads: {r['threads']}",
        "",
        "| measurement | requests/s | p50 ms | p99 ms | mean batch | paths |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for key, name in [("fixed_c1", "4000 B, concurrency 1"), ("fixed_c16", "4000 B, concurrency 16 (saturation)"),
                      ("fixed_half_rate", "4000 B, open loop at half saturation"),
                      ("mixed_c1", "mixed lengths, concurrency 1"), ("mixed_c16", "mixed lengths, concurrency 16 (saturation)"),
                      ("mixed_half_rate", "mixed lengths, open loop at half saturation")]:
        b = r[key]
        lines.append(f"| {name} | {b['requests_per_s']:.1f} | {b['latency_ms']['p50']:.1f} | "
                     f"{b['latency_ms']['p99']:.1f} | {b['batch_size']['mean']:.1f} | "
                     f"{', '.join(f'{k} {v}' for k, v in sorted(b['paths'].items()))} |")
    lines += [
        "",
        "| in-process ClassifyBatch (4000 B) | docs/s |",
        "|---|---:|",
    ] + [f"| batch {s} | {ip[f'BM_Classify/len:4000/batch:{s}/min_time:1.000/real_time']:.1f} |" for s in sizes]
    lines += [
        "",
        f"- server at saturation / in-process at batch {nearest} (server's mean batch {mean_batch:.1f}): "
        f"**{c16['requests_per_s'] / inproc:.2f}×** (target ≥ 0.85×)",
        f"- gain from batching, 4000 B (concurrency 16 / 1): **{c16['requests_per_s'] / r['fixed_c1']['requests_per_s']:.2f}×**",
        f"- gain from batching, mixed (concurrency 16 / 1): **{r['mixed_c16']['requests_per_s'] / r['mixed_c1']['requests_per_s']:.2f}×**",
        f"- errors: " + ", ".join(f"{k}: {r[k]['errors']}" for k in r if isinstance(r[k], dict) and r[k].get('errors')) if any(isinstance(r[k], dict) and r[k].get('errors') for k in r) else "- errors: none",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Jobs beside serving (issue 10): one run of a real tsserver on loopback measures
  * Classify latency p50/p99 under a steady open-loop load, without and then with a training
    job running in its worker process (same server, same load, side by side);
  * training examples/s of the same job as 1 rank x 2 threads and as 2 ranks x 1 thread
    (data-parallel, c10d Gloo over loopback), each alone on the machine.
Writes docs/isolation_bench.json and prints a Markdown summary (docs/PERFORMANCE.md has a copy).

Usage: /usr/bin/python3 bench/isolation_bench.py [--build build] [--seconds 30] [--rate 20]
"""
import argparse
import json
import os
import signal
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--seconds", type=int, default=30, help="duration of each latency measurement")
    p.add_argument("--rate", type=float, default=20.0, help="Classify requests/s of the load")
    p.add_argument("--steps", type=int, default=60, help="steps of each throughput job")
    args = p.parse_args()
    tsmodel = os.path.join(args.build, "model", "tsmodel")
    tsserver = os.path.join(args.build, "server", "tsserver")
    tsctl = os.path.join(args.build, "client", "tsctl")
    work = tempfile.mkdtemp(prefix="ts-isolation-bench-")
    os.makedirs(os.path.join(work, "data"))
    subprocess.run([tsmodel, "init", "--out", os.path.join(work, "serve.tsckpt"), "--labels", "neg,pos",
                    "--embed-dim", "64", "--depth", "2", "--heads", "8", "--mlp-ratio", "2",
                    "--max-length", "1024", "--seed", "1"], check=True, capture_output=True)
    with open(os.path.join(work, "config.yaml"), "w") as f:
        f.write("""listen: 127.0.0.1:0
metrics_listen: ''
intra_op_threads: 1
state_dir: state
data_root: data
jobs: {max_concurrent: 1}
models:
  - name: serve
    checkpoint: serve.tsckpt
    device: cpu
    batching: {max_batch_size: 8, max_queue_delay_us: 2000}
""")

    def spec(name, steps, workers, threads):
        path = os.path.join(work, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(f"""name: {name}
model: {{embed_dim: 64, depth: 2, heads: 4, max_length: 512}}
data:
  train: {{format: listops, generate: {{count: 2000, min_length: 300, max_length: 512}}}}
batch_size: 16
steps: {steps}
log_interval: 10
checkpoint_interval: {steps}
workers: {workers}
threads: {threads}
""")
        return path

    ready = os.path.join(work, "ready")
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([tsserver, "--config", "config.yaml", "--ready-file", ready], stderr=log, cwd=work)
    results = {"rate": args.rate, "seconds": args.seconds}
    try:
        for _ in range(600):
            if os.path.exists(ready):
                break
            time.sleep(0.1)
        address = open(ready).read().split("grpc=")[1].split()[0]
        ctl = lambda cmd, *a: subprocess.run([tsctl, *cmd.split(), "--server", address, *a], check=True,
                                             capture_output=True, text=True).stdout

        def load():
            out = ctl("bench", "--model", "serve", "--rate", str(args.rate), "--concurrency", "32",
                      "--duration-s", str(args.seconds), "--requests", "1000000", "--lengths", "uniform:200:1000", "--json")
            return json.loads(out.strip().splitlines()[-1])

        def parse(text):
            try:
                return json.loads(text)
            except json.JSONDecodeError:
                return json.loads(text.strip().splitlines()[-1])

        def job(job_id):
            return parse(ctl("jobs get", job_id, "--json"))

        def wait(job_id, until):
            for _ in range(6000):
                j = job(job_id)
                if until(j):
                    return j
                time.sleep(0.1)
            raise RuntimeError(f"job {job_id} did not get there")

        results["serving_alone"] = load()
        busy = ctl("train", "--spec", spec("busy", 100000, 1, 1)).strip().splitlines()[-1]
        wait(busy, lambda j: (j.get("step") or 0) >= 10)
        results["serving_beside_training"] = load()
        results["training_during_load"] = job(busy).get("progress", {})
        ctl("jobs cancel", busy)
        wait(busy, lambda j: j["state"] == "CANCELLED")

        for key, workers, threads in [("one_rank_two_threads", 1, 2), ("two_ranks_one_thread", 2, 1)]:
            job_id = ctl("train", "--spec", spec(key.replace("_", "-"), args.steps, workers, threads)).strip().splitlines()[-1]
            done = wait(job_id, lambda j: j["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"))
            if done["state"] != "SUCCEEDED":
                raise RuntimeError(f"{key}: {done['state']} {done.get('reason')}")
            history = parse(ctl("jobs get", job_id, "--curve", "--json"))
            rates = [p["examples_per_second"] for p in history.get("history", {}).get("loss_curve", [])][1:]
            results[key] = {"examples_per_second": sum(rates) / max(len(rates), 1), "points": len(rates)}
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    with open(os.path.join(ROOT, "docs", "isolation_bench.json"), "w") as f:
        json.dump(results, f, indent=1)
    print(report(results))


def report(r):
    a, b = r["serving_alone"], r["serving_beside_training"]
    one, two = r["one_rank_two_threads"], r["two_ranks_one_thread"]
    return "\n".join([
        f"Classify load: {r['rate']} requests/s, documents of 200-1000 bytes, {r['seconds']} s each",
        "",
        "| serving | requests/s | p50 ms | p99 ms | errors |",
        "|---|---:|---:|---:|---:|",
        f"| alone | {a['requests_per_s']:.1f} | {a['latency_ms']['p50']:.1f} | {a['latency_ms']['p99']:.1f} | {a.get('errors', 0)} |",
        f"| beside a training job (1 thread) | {b['requests_per_s']:.1f} | {b['latency_ms']['p50']:.1f} | {b['latency_ms']['p99']:.1f} | {b.get('errors', 0)} |",
        "",
        f"- p99 beside training / alone: **{b['latency_ms']['p99'] / a['latency_ms']['p99']:.2f}×**",
        "",
        "| training (same job, alone) | examples/s |",
        "|---|---:|",
        f"| 1 rank × 2 threads | {one['examples_per_second']:.1f} |",
        f"| 2 ranks × 1 thread | {two['examples_per_second']:.1f} |",
        "",
        f"- 2 ranks × 1 thread / 1 rank × 2 threads: **{two['examples_per_second'] / one['examples_per_second']:.2f}×**",
    ])


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Job memory admission against measured peaks: trains real jobs over a grid of shapes through a
tsserver on loopback (memory admission off, so every shape runs) and records each job's estimate
(the job's progress.memory_estimate_bytes, what admission compares with the budget) beside the
peak resident set of its worker processes (VmHWM of every rank, summed), polled every 50 ms.

Usage: /usr/bin/python3 bench/memory_grid.py [--build build] [--steps 12] [--out FILE.json]
       [--only INDEX,...]
Data: source-lang windows (bench/debian_tasks.py, 1-2 KiB documents) made in a scratch folder.
Prints a Markdown table (docs/JOBS.md, "Memory admission") and writes the rows as JSON."""
import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from bench_server import tsworker_children  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# embed_dim, depth, heads, max_length, batch_size, path, workers, dtype
GRID = [
    (64, 2, 8, 2048, 16, "auto", 1, "float32"),       # docs/JOBS.md's first job, the demo recipe
    (64, 2, 8, 2048, 16, "efficient", 1, "float32"),
    (64, 2, 8, 2048, 16, "auto", 2, "float32"),
    (64, 2, 8, 1024, 8, "direct", 1, "float32"),
    (128, 2, 4, 1024, 8, "auto", 1, "float32"),
    (32, 1, 4, 512, 32, "direct", 1, "float64"),
    (256, 4, 8, 1024, 4, "efficient", 1, "float32"),
    (64, 4, 4, 2048, 32, "efficient", 1, "float32"),
]


def children(pid):
    """PIDs of the tsworker processes whose parent is `pid`."""
    return [child for child, _, _ in tsworker_children(pid)]


def vm_hwm(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def tsctl(build, address, *args):
    return subprocess.run([os.path.join(build, "client", "tsctl"), *args, "--server", address],
                          capture_output=True, text=True, timeout=120)


def run_job(build, address, server_pid, work, index, shape, steps):
    embed, depth, heads, max_length, batch, path, workers, dtype = shape
    spec = os.path.join(work, f"spec{index}.yaml")
    with open(spec, "w") as f:
        f.write(f"""name: grid-{index}
model: {{embed_dim: {embed}, depth: {depth}, heads: {heads}, mlp_ratio: 2, max_length: {max_length}}}
data:
  train: {{format: jsonl, path: source-lang/train.jsonl}}
  validation: {{format: jsonl, path: source-lang/validation.jsonl}}
steps: {steps}
eval_interval: {steps // 2}
batch_size: {batch}
path: {path}
workers: {workers}
dtype: {dtype}
threads: {2 // workers}
""")
    submitted = tsctl(build, address, "train", "--spec", spec, "--json")
    if submitted.returncode != 0:
        return {"error": submitted.stderr.strip()[:300]}
    job = json.loads(submitted.stdout.splitlines()[-1])
    job_id = job["id"]
    started = time.time()
    peaks = {}
    deadline = time.time() + 900
    state = ""
    last_poll = 0.0
    while time.time() < deadline:
        for pid in children(server_pid):
            peak = vm_hwm(pid)
            if peak:
                peaks[pid] = max(peaks.get(pid, 0), peak)
        if time.time() - last_poll > 1.0:
            last_poll = time.time()
            record = json.loads(tsctl(build, address, "jobs", "get", job_id, "--json").stdout)
            state = record.get("state", "")
            if state in ("SUCCEEDED", "FAILED", "CANCELLED"):
                break
        time.sleep(0.05)
    estimate = int(record.get("progress", {}).get("memory_estimate_bytes", 0))
    peak = sum(peaks.values())
    return {"shape": dict(zip(("embed_dim", "depth", "heads", "max_length", "batch_size", "path",
                               "workers", "dtype"), shape)),
            "job": job_id, "state": state, "estimate_bytes": estimate, "peak_rss_bytes": peak,
            "wall_seconds": round(time.time() - started, 1),
            "ranks_seen": len(peaks), "ratio": (estimate / peak) if peak else None}


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", default="")
    parser.add_argument("--only", default="", help="grid rows to run, e.g. 0,1")
    parser.add_argument("--heap-keep-freed-bytes", type=int, default=1 << 30,
                        help="the server's heap_keep_freed_bytes, which its workers take")
    args = parser.parse_args()
    rows = [int(i) for i in args.only.split(",")] if args.only else range(len(GRID))
    work = tempfile.mkdtemp(prefix="memory-grid-")
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "debian_tasks.py"),
                    "source-lang", os.path.join(work, "data", "source-lang"), "--train", "4000",
                    "--validation", "400", "--test", "10", "--seed", "11"],
                   check=True, capture_output=True)
    subprocess.run([os.path.join(args.build, "model", "tsmodel"), "init", "--out",
                    os.path.join(work, "stand-in.tsckpt"), "--labels", "a,b", "--embed-dim", "8",
                    "--depth", "1", "--heads", "1", "--max-length", "16", "--seed", "1"],
                   check=True, capture_output=True)
    with open(os.path.join(work, "config.yaml"), "w") as f:
        f.write(f"""listen: 127.0.0.1:0
metrics_listen: ""
heap_keep_freed_bytes: {args.heap_keep_freed_bytes}
intra_op_threads: 1
state_dir: state
data_root: data
jobs: {{memory_admission: false, max_concurrent: 1}}
models:
  - {{name: stand-in, checkpoint: stand-in.tsckpt, device: cpu}}
""")
    ready = os.path.join(work, "ready")
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([os.path.join(args.build, "server", "tsserver"), "--config",
                               os.path.join(work, "config.yaml"), "--ready-file", ready],
                              stderr=log)
    results = []
    try:
        for _ in range(600):
            if os.path.exists(ready) or server.poll() is not None:
                break
            time.sleep(0.1)
        address = open(ready).read().split("grpc=")[1].split()[0]
        for i in rows:
            result = run_job(args.build, address, server.pid, work, i, GRID[i], args.steps)
            results.append(result)
            print(json.dumps(result), file=sys.stderr, flush=True)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)
    print("| embed_dim | depth | heads | max_length | batch | path | workers | dtype | estimate (GiB) "
          "| measured peak (GiB) | estimate / peak |")
    print("|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|")
    for r in results:
        if "shape" not in r:
            print(f"| error: {r.get('error')} |")
            continue
        s = r["shape"]
        ratio = f"{r['ratio']:.2f}" if r["ratio"] else "-"
        print(f"| {s['embed_dim']} | {s['depth']} | {s['heads']} | {s['max_length']} | "
              f"{s['batch_size']} | {s['path']} | {s['workers']} | {s['dtype']} | "
              f"{r['estimate_bytes'] / 2**30:.2f} | {r['peak_rss_bytes'] / 2**30:.2f} | {ratio} |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

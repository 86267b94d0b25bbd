#!/usr/bin/python3
"""Triton's perf_analyzer beside the project's own `tsctl bench`, on one server, in one run
(issue 44).

Starts one tsserver on loopback (free ports; gRPC and the HTTP front end; jobs off) serving the
bundled source-lang model (models/source-lang-demo.tsckpt, max 2048 bytes), builds real
documents with bench/debian_tasks.py (1-2 KiB windows of C headers, Perl, Python and shell files
under /usr, the model's own test distribution), and measures, for every concurrency in
--concurrency (1, 4, 8):

- perf_analyzer (the PyPI wheel through scripts/setup's wrapper, .venv-triton/bin/perf_analyzer)
  over gRPC (`-i grpc`), HTTP (`-i http`: tritonclient's binary tensor data extension) and gRPC
  streaming (`--streaming`: ModelStreamInfer), with the documents through `--input-data`, one
  document per request;
- `tsctl bench` over the same documents (`--files`, round-robin) with `--protocol classify`
  (taylorshift.v1.Classifier), `v2-grpc` (ModelInfer) and `v2-rest` (JSON tensors).

Every client runs `--rounds` times; the order of the clients rotates each round, so machine noise
and warm-up hit all alike. Each run measures for about --seconds: perf_analyzer with three
windows of a third of it (`--stability-percentage 1000`: its first three windows are reported, whatever their spread),
tsctl bench for the whole of it (`--duration-s`). perf_analyzer exits non-zero when a request
fails; tsctl bench reports failed requests, and any failure fails this script. Figures: infer/s
over all runs of a client and concurrency; p50 and p99 the median of the runs' values. Writes
docs/triton_bench.json and prints a Markdown table with ratios to `tsctl bench --protocol
v2-grpc` at the same concurrency (the same RPC as perf_analyzer's `-i grpc`). Stops the server by
its PID at the end.

Usage: /usr/bin/python3 bench/triton_bench.py [--build build] [--perf-analyzer PATH]
       [--rounds 2] [--seconds 6] [--concurrency 1,4,8] [--documents 96] [--threads 2] [--quick]
"""
import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile

from protocol_bench import stop, wait_ready  # bench/, beside this script

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = "source-lang"
PERF = [("perf_analyzer -i grpc", ["-i", "grpc"]),
        ("perf_analyzer -i http", ["-i", "http"]),
        ("perf_analyzer -i grpc --streaming", ["-i", "grpc", "--streaming"])]
TSCTL = [("tsctl bench --protocol classify", "classify"),
         ("tsctl bench --protocol v2-grpc", "v2-grpc"),
         ("tsctl bench --protocol v2-rest", "v2-rest")]
BASELINE = "tsctl bench --protocol v2-grpc"


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def make_documents(work, count):
    """`count` test windows of the source-lang task, as files (for tsctl) and as perf_analyzer's
    --input-data JSON, byte for byte the same (the windows are ASCII but for a few bytes; each
    is sent as its UTF-8 encoding by both clients)."""
    task = os.path.join(work, "task")
    per_class = max(1, count // 4)
    subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "bench", "debian_tasks.py"),
                    "source-lang", task, "--train", "4", "--validation", "4",
                    "--test", str(per_class * 4), "--seed", "7"], check=True,
                   stdout=subprocess.DEVNULL)
    texts = [json.loads(line)["text"] for line in open(os.path.join(task, "test.jsonl"))]
    files = []
    for i, text in enumerate(texts):
        path = os.path.join(work, f"doc-{i:04d}.txt")
        with open(path, "wb") as f:
            f.write(text.encode("utf-8"))
        files.append(path)
    data = os.path.join(work, "input-data.json")
    with open(data, "w") as f:
        json.dump({"data": [{"document": [text]} for text in texts]}, f)
    sizes = [len(t.encode("utf-8")) for t in texts]
    return files, data, {"count": len(texts), "min_bytes": min(sizes), "max_bytes": max(sizes),
                         "mean_bytes": sum(sizes) / len(sizes)}


def run_perf_analyzer(binary, address_args, mode_args, data, concurrency, seconds, work):
    report = os.path.join(work, "perf.csv")
    window_ms = max(200, int(seconds * 1000 / 3))
    command = [binary, "-m", MODEL, *address_args, *mode_args, "--input-data", data,
               "--concurrency-range", str(concurrency), "-p", str(window_ms),
               "--max-trials", "3", "--stability-percentage", "1000", "-f", report]
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds * 10 + 60)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({out.returncode}):\n"
                         f"{out.stdout[-3000:]}{out.stderr[-3000:]}")
    with open(report) as f:
        row = next(csv.DictReader(f))
    return {"infer_per_s": float(row["Inferences/Second"]),
            "p50_ms": float(row["p50 latency"]) / 1000, "p99_ms": float(row["p99 latency"]) / 1000,
            # perf_analyzer reports rates, not counts: requests = rate × measured time.
            "seconds": 3 * window_ms / 1000, "failed": 0}


def run_tsctl(binary, address_args, protocol, files, concurrency, seconds):
    command = [binary, "bench", "--model", MODEL, "--protocol", protocol, *address_args,
               "--concurrency", str(concurrency), "--requests", "0",
               "--duration-s", str(seconds), "--json", "--files", *files]
    out = subprocess.run(command, capture_output=True, text=True, timeout=seconds * 10 + 60)
    if out.returncode != 0:
        raise SystemExit(f"tsctl bench --protocol {protocol} failed ({out.returncode}):\n"
                         f"{out.stdout[-3000:]}{out.stderr[-3000:]}")
    run = json.loads(out.stdout.strip().splitlines()[-1])
    if run["failed"]:
        raise SystemExit(f"tsctl bench --protocol {protocol}: {run['failed']} failed requests")
    return {"infer_per_s": run["requests_per_s"], "p50_ms": run["latency_ms"]["p50"],
            "p99_ms": run["latency_ms"]["p99"], "seconds": run["elapsed_s"], "failed": 0}


def summary(runs):
    med = lambda xs: sorted(xs)[len(xs) // 2]
    total_s = sum(r["seconds"] for r in runs)
    return {"infer_per_s": sum(r["infer_per_s"] * r["seconds"] for r in runs) / total_s,
            "p50_ms": med([r["p50_ms"] for r in runs]),
            "p99_ms": med([r["p99_ms"] for r in runs]),
            "failed": sum(r["failed"] for r in runs),
            "per_round_infer_per_s": [round(r["infer_per_s"], 1) for r in runs]}


def report(r):
    lines = [f"{r['rounds']} interleaved rounds, about {r['seconds']} s per run; "
             f"{r['documents']['count']} source-lang documents "
             f"({r['documents']['min_bytes']}-{r['documents']['max_bytes']} bytes); "
             f"intra-op threads {r['intra_op_threads']}; {r['machine']}", ""]
    lines.append("| client | concurrency | infer/s | p50 ms | p99 ms | × v2-grpc infer/s "
                 "| × v2-grpc p50 | errors |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|---:|")
    for concurrency in r["concurrency"]:
        s = r["summary"][str(concurrency)]
        base = s[BASELINE]
        for client, x in s.items():
            lines.append(f"| {client} | {concurrency} | {x['infer_per_s']:.0f} | "
                         f"{x['p50_ms']:.2f} | {x['p99_ms']:.2f} | "
                         f"{x['infer_per_s'] / base['infer_per_s']:.2f}× | "
                         f"{x['p50_ms'] / base['p50_ms']:.2f}× | {x['failed']} |")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--perf-analyzer",
                   default=os.path.join(os.environ.get("TS_TRITON_VENV",
                                                       os.path.join(ROOT, ".venv-triton")),
                                        "bin", "perf_analyzer"))
    p.add_argument("--checkpoint", default=os.path.join(ROOT, "models", "source-lang-demo.tsckpt"))
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--seconds", type=float, default=6)
    p.add_argument("--concurrency", default="1,4,8")
    p.add_argument("--documents", type=int, default=96)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="intra_op_threads")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "triton_bench.json"))
    p.add_argument("--quick", action="store_true",
                   help="1 round of 1.5 s runs at concurrency 1 and 4 (smoke run)")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.seconds, args.concurrency = 1, 1.5, "1,4"
    concurrencies = [int(c) for c in args.concurrency.split(",")]
    tsserver = os.path.join(args.build, "server", "tsserver")
    tsctl = os.path.join(args.build, "client", "tsctl")
    if not os.access(args.perf_analyzer, os.X_OK):
        raise SystemExit(f"no perf_analyzer at {args.perf_analyzer}: run scripts/setup, which "
                         "installs it into .venv-triton")

    with tempfile.TemporaryDirectory(prefix="ts-triton-bench-") as work:
        files, data, documents = make_documents(work, args.documents)
        config = os.path.join(work, "bench.yaml")
        with open(config, "w") as f:
            json.dump({"listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0",
                       "intra_op_threads": args.threads, "jobs": {"enabled": False},
                       "http": {"listen": "127.0.0.1:0", "threads": max(8, max(concurrencies))},
                       "models": [{"name": MODEL, "checkpoint": os.path.abspath(args.checkpoint),
                                   "device": "cpu"}]}, f)
        ready = os.path.join(work, "ready")
        log = open(os.path.join(work, "server.log"), "w")
        server = subprocess.Popen([tsserver, "--config", config, "--ready-file", ready,
                                   "--state-dir", os.path.join(work, "state"),
                                   "--data-root", os.path.join(work, "data")],
                                  stdout=log, stderr=log)
        results = {
            "date": datetime.date.today().isoformat(),
            "machine": f"{cpu_name()}, {os.cpu_count()} cores; clients and server on the same "
                       "cores",
            "model": "models/source-lang-demo.tsckpt (C 64, depth 2, 8 heads, max 2048 bytes)",
            "documents": documents, "intra_op_threads": args.threads,
            "rounds": args.rounds, "seconds": args.seconds, "concurrency": concurrencies,
            "command": " ".join(["/usr/bin/python3", "bench/triton_bench.py"] + sys.argv[1:]),
            "runs": {str(c): {name: [] for name, _ in PERF + TSCTL} for c in concurrencies},
        }
        try:
            addresses = wait_ready(ready, server, needed=("grpc", "http"))
            grpc, http = addresses["grpc"], addresses["http"]

            def measure(client, concurrency, seconds):
                for name, mode in PERF:
                    if name == client:
                        address = ["-u", http if "http" in mode else grpc]
                        return run_perf_analyzer(args.perf_analyzer, address, mode, data,
                                                 concurrency, seconds, work)
                protocol = dict(TSCTL)[client]
                address = ["--http", http] if protocol == "v2-rest" else ["--server", grpc]
                return run_tsctl(tsctl, address, protocol, files, concurrency, seconds)

            clients = [name for name, _ in PERF + TSCTL]
            for client in clients:  # warm-up: connections, allocator, caches; not recorded
                measure(client, max(concurrencies), 1)
            for round_index in range(args.rounds):
                for concurrency in concurrencies:
                    shift = round_index % len(clients)
                    for client in clients[shift:] + clients[:shift]:
                        run = measure(client, concurrency, args.seconds)
                        results["runs"][str(concurrency)][client].append(run)
                        print(f"round {round_index + 1} c={concurrency} {client:36s} "
                              f"{run['infer_per_s']:8.1f}/s p50 {run['p50_ms']:.2f} ms "
                              f"p99 {run['p99_ms']:.2f} ms", file=sys.stderr)
        finally:
            results["server_exit"] = stop(server)
            log.close()
    results["summary"] = {c: {client: summary(runs) for client, runs in by_client.items()}
                          for c, by_client in results["runs"].items()}
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    print(report(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

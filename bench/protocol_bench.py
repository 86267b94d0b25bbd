#!/usr/bin/python3
"""The four front ends side by side: Classifier/Classify, KServe v2 over gRPC, KServe v2 REST
and the plain HTTP route (issue 13), on one server, the same load, interleaved.

Starts one tsserver on loopback (free ports: gRPC, HTTP and metrics on port 0, jobs off)
serving the ListOps demo checkpoint (models/listops-demo.tsckpt, 256 bytes max), then runs
`tsctl bench --protocol P` for P in classify, v2-grpc, v2-rest, rest, round after round (the
order rotates each round, so machine noise and warm-up hit all alike), each run with the same
--concurrency, --lengths, --requests and --seed (so every protocol sends the same documents).
Besides tsctl's report it records, per run, the CPU time the server process and the tsctl
process spent per request and, from the server's metrics (the same for every protocol; v2
answers carry no batch size or timing), the mean batch size and the compute time per request,
and the TCP connections opened and listen-queue overflows while tsctl ran. Writes docs/protocol_bench.json and prints a Markdown table with ratios to
classify. Stops the server by its PID at the end.

Usage: /usr/bin/python3 bench/protocol_bench.py [--build build] [--tsctl PATH] [--rounds 3]
       [--requests 600] [--concurrency 8] [--lengths uniform:20:250] [--threads 2] [--quick]
"""
import argparse
import datetime
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTOCOLS = ["classify", "v2-grpc", "v2-rest", "rest"]
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid):
    """utime + stime of a process, in seconds (/proc/PID/stat fields 14 and 15)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def scrape(metrics_address):
    """Σ over label sets of the batch-size histogram's _sum and _count and of the compute
    histogram's _sum (both are observed once per computed batch)."""
    totals = {"taylorshift_batch_size_sum": 0.0, "taylorshift_batch_size_count": 0.0,
              "taylorshift_compute_duration_seconds_sum": 0.0}
    text = urllib.request.urlopen(f"http://{metrics_address}/metrics", timeout=10).read().decode()
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in totals:
            totals[name] += float(line.rsplit(" ", 1)[1])
    return totals


def tcp_counters():
    """System-wide TCP connections opened (Tcp ActiveOpens) and listen-queue overflows
    (TcpExt ListenOverflows: a SYN dropped because a listener's accept queue was full; the
    client retries after 1 s). Only this benchmark uses loopback while it runs."""
    counters = {}
    for path, table, name in (("/proc/net/snmp", "Tcp:", "ActiveOpens"),
                              ("/proc/net/netstat", "TcpExt:", "ListenOverflows")):
        rows = [line.split() for line in open(path) if line.startswith(table)]
        counters[name] = int(rows[1][rows[0].index(name)])
    return counters


def children_cpu_s():
    t = os.times()
    return t.children_user + t.children_system


def wait_ready(ready, server, timeout_s=120, needed=("grpc",)):
    """tsserver's --ready-file fields once they name every address in `needed`."""
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if os.path.exists(ready):
            lines = dict(line.split("=", 1) for line in open(ready).read().split() if "=" in line)
            if all(key in lines for key in needed):
                return lines
        if server.poll() is not None:
            break
        time.sleep(0.1)
    raise SystemExit(f"tsserver did not become ready (exit {server.poll()})")


def stop(server):
    """SIGTERM by PID, then SIGKILL if it does not drain in time."""
    if server.poll() is not None:
        return server.returncode
    os.kill(server.pid, signal.SIGTERM)
    try:
        return server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.kill(server.pid, signal.SIGKILL)
        return server.wait()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"),
                   help="build directory with server/tsserver (and client/tsctl)")
    p.add_argument("--tsctl", help="tsctl binary (default BUILD/client/tsctl)")
    p.add_argument("--checkpoint", default=os.path.join(ROOT, "models", "listops-demo.tsckpt"))
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=600, help="requests per run")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--lengths", default="uniform:20:250")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="intra_op_threads")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "protocol_bench.json"))
    p.add_argument("--quick", action="store_true", help="1 round of 100 requests (smoke run)")
    args = p.parse_args()
    if args.quick:
        args.rounds, args.requests = 1, 100
    tsserver = os.path.join(args.build, "server", "tsserver")
    tsctl = args.tsctl or os.path.join(args.build, "client", "tsctl")

    work = tempfile.mkdtemp(prefix="ts-protocol-bench-")
    config = os.path.join(work, "bench.yaml")
    with open(config, "w") as f:
        f.write(f"""listen: 127.0.0.1:0
metrics_listen: 127.0.0.1:0
intra_op_threads: {args.threads}
jobs: {{enabled: false}}
http: {{listen: "127.0.0.1:0", threads: {max(8, args.concurrency)}}}
models:
  - name: listops
    checkpoint: {os.path.abspath(args.checkpoint)}
    device: cpu
""")
    ready = os.path.join(work, "ready")
    log = open(os.path.join(work, "server.log"), "w")
    server = subprocess.Popen([tsserver, "--config", config, "--ready-file", ready,
                               "--state-dir", os.path.join(work, "state"),
                               "--data-root", os.path.join(work, "data")],
                              stdout=log, stderr=log)
    common = ["--model", "listops", "--json", "--concurrency", str(args.concurrency),
              "--lengths", args.lengths, "--seed", "1"]
    results = {
        "date": datetime.date.today().isoformat(),
        "machine": f"{os.cpu_count()}-core shared VM, client and server on the same cores",
        "model": "models/listops-demo.tsckpt (C 64, depth 2, 4 heads, max 256 bytes, CPU)",
        "intra_op_threads": args.threads,
        "concurrency": args.concurrency,
        "lengths": args.lengths,
        "requests_per_run": args.requests,
        "rounds": args.rounds,
        "command": " ".join(["/usr/bin/python3", "bench/protocol_bench.py"] + sys.argv[1:]),
        "runs": {protocol: [] for protocol in PROTOCOLS},
    }
    try:
        addresses = wait_ready(ready, server)
        if "http" not in addresses:
            raise SystemExit("tsserver wrote no http= line: is http.listen set?")
        target = {"classify": ["--server", addresses["grpc"]],
                  "v2-grpc": ["--server", addresses["grpc"]],
                  "v2-rest": ["--http", addresses["http"]],
                  "rest": ["--http", addresses["http"]]}

        def bench(protocol, requests):
            before = scrape(addresses["metrics"])
            server_cpu, client_cpu = process_cpu_s(server.pid), children_cpu_s()
            tcp = tcp_counters()
            out = subprocess.run([tsctl, "bench", "--protocol", protocol, *target[protocol],
                                  *common, "--requests", str(requests)],
                                 capture_output=True, text=True)
            if out.returncode != 0:
                raise SystemExit(f"tsctl bench --protocol {protocol} failed ({out.returncode}):\n"
                                 f"{out.stdout}{out.stderr}")
            tcp_after = tcp_counters()
            run = json.loads(out.stdout.strip().splitlines()[-1])
            run["tcp_connections"] = tcp_after["ActiveOpens"] - tcp["ActiveOpens"]
            run["listen_overflows"] = tcp_after["ListenOverflows"] - tcp["ListenOverflows"]
            ok = max(1, run["ok"])
            run["server_cpu_ms_per_request"] = (process_cpu_s(server.pid) - server_cpu) * 1e3 / ok
            run["client_cpu_ms_per_request"] = (children_cpu_s() - client_cpu) * 1e3 / ok
            # The server's own view (its metrics), the same for every protocol: v2 answers do
            # not carry batch sizes or timings.
            after = scrape(addresses["metrics"])
            delta = {k: after[k] - before[k] for k in after}
            batches = max(1.0, delta["taylorshift_batch_size_count"])
            run["server_mean_batch"] = delta["taylorshift_batch_size_sum"] / batches
            run["server_compute_ms_per_request"] = (
                delta["taylorshift_compute_duration_seconds_sum"] * 1e3
                / max(1.0, delta["taylorshift_batch_size_sum"]))
            return run

        for protocol in PROTOCOLS:  # warm-up: connections, allocator, caches; not recorded
            bench(protocol, max(20, args.requests // 10))
        for round_index in range(args.rounds):
            shift = round_index % len(PROTOCOLS)
            for protocol in PROTOCOLS[shift:] + PROTOCOLS[:shift]:
                run = bench(protocol, args.requests)
                results["runs"][protocol].append(run)
                print(f"round {round_index + 1} {protocol:9s} {run['requests_per_s']:8.1f} req/s "
                      f"p50 {run['latency_ms']['p50']:.2f} ms p99 {run['latency_ms']['p99']:.2f} "
                      f"ms failed {run['failed']}", file=sys.stderr)
    finally:
        results["server_exit"] = stop(server)
    results["summary"] = {protocol: summary(results["runs"][protocol]) for protocol in PROTOCOLS}
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
        f.write("\n")
    print(report(results))
    failed = sum(s["failed"] for s in results["summary"].values())
    return 1 if failed else 0


def summary(runs):
    """Over the rounds: requests/s over all requests, medians of the per-run percentiles."""
    med = lambda xs: sorted(xs)[len(xs) // 2]
    ok = sum(r["ok"] for r in runs)
    return {
        "requests_per_s": ok / sum(r["elapsed_s"] for r in runs),
        "p50_ms": med([r["latency_ms"]["p50"] for r in runs]),
        "p99_ms": med([r["latency_ms"]["p99"] for r in runs]),
        "max_ms": max(r["latency_ms"]["max"] for r in runs),
        "tcp_connections_per_run": med([r["tcp_connections"] for r in runs]),
        "listen_overflows": sum(r["listen_overflows"] for r in runs),
        "server_mean_batch": med([r["server_mean_batch"] for r in runs]),
        "server_compute_ms_per_request": med([r["server_compute_ms_per_request"] for r in runs]),
        "server_cpu_ms_per_request": med([r["server_cpu_ms_per_request"] for r in runs]),
        "client_cpu_ms_per_request": med([r["client_cpu_ms_per_request"] for r in runs]),
        "ok": ok,
        "failed": sum(r["failed"] for r in runs),
        "per_round_requests_per_s": [round(r["requests_per_s"], 1) for r in runs],
    }


def report(r):
    s = r["summary"]
    base = s["classify"]
    lines = [
        f"{r['rounds']} interleaved rounds of {r['requests_per_run']} requests per protocol, "
        f"concurrency {r['concurrency']}, lengths {r['lengths']}, intra-op threads "
        f"{r['intra_op_threads']}; {r['machine']}",
        "",
        "| protocol | requests/s | p50 ms | p99 ms | × classify req/s | × classify p50 "
        "| × classify p99 | max ms | mean batch | compute ms/req | server CPU ms/req "
        "| tsctl CPU ms/req | connections/run | listen overflows | ok | failed |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for protocol in PROTOCOLS:
        x = s[protocol]
        lines.append(
            f"| {protocol} | {x['requests_per_s']:.1f} | {x['p50_ms']:.2f} | {x['p99_ms']:.2f} | "
            f"{x['requests_per_s'] / base['requests_per_s']:.2f}× | "
            f"{x['p50_ms'] / base['p50_ms']:.2f}× | {x['p99_ms'] / base['p99_ms']:.2f}× | "
            f"{x['max_ms']:.0f} | "
            f"{x['server_mean_batch']:.2f} | {x['server_compute_ms_per_request']:.2f} | "
            f"{x['server_cpu_ms_per_request']:.2f} | {x['client_cpu_ms_per_request']:.2f} | "
            f"{x['tcp_connections_per_run']} | {x['listen_overflows']} | "
            f"{x['ok']} | {x['failed']} |")
    lines.append("")
    lines.append("requests/s per round: " + "; ".join(
        f"{protocol} {s[protocol]['per_round_requests_per_s']}" for protocol in PROTOCOLS))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

"""scripts/gpu-check's serving phase: tsserver with both demo models on the GPU (bf16), real files
classified through tsctl (gRPC) and the KServe v2 REST route, each answer compared with the
CPU's (tsmodel predict, fp32) for the same file; then load at 4000-byte documents (tsctl bench,
closed loop) on the GPU server and on a second tsserver held to 2 CPU cores (taskset, 2 threads,
fp32), side by side in the same run: requests/s and p99. Writes a JSON report; exits 1 on any
mismatch or failure. Standard library only (the GPU machines' python3 runs it)."""
import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

# (model, files of this repository that are real inputs of it, expected label or None)
CASES = [
    ("source-lang", "scripts/setup", "shell"),
    ("source-lang", "scripts/build", "shell"),
    ("source-lang", "bench/debian_tasks.py", "python"),
    ("source-lang", "bench/attention_report.py", "python"),
    ("source-lang", "model/networks/encoder.h", "c-header"),
    ("source-lang", "model/kernels/taylor_attention.h", "c-header"),
]
LISTOPS = ["[MAX 4 3 [MIN 2 3 ] 1 0 [MED 2 9 ] ]", "[SM 1 2 [MAX 3 4 ] 5 ]", "[FIRST 7 [LAST 1 2 ] ]"]
BF16_TOLERANCE = 0.02  # probabilities, absolute: bf16 products against the CPU's fp32
LOAD_SECONDS = 8  # each load run
LOAD_CONCURRENCY = {"gpu": 64, "cpu2": 4}  # closed-loop workers


def start_server(args, work, name, config_text, prefix=()):
    """tsserver on `config_text` (under `prefix`, e.g. taskset), waited for: (process, log, grpc,
    http)."""
    config = os.path.join(work, name + ".yaml")
    with open(config, "w") as f:
        f.write(config_text)
    ready = os.path.join(work, name + ".ready")
    log = open(os.path.join(work, name + ".log"), "w")
    server = subprocess.Popen(list(prefix) + [os.path.join(args.bin, "tsserver"), "--config",
                                              config, "--ready-file", ready], stderr=log)
    for _ in range(600):
        if os.path.exists(ready) or server.poll() is not None:
            break
        time.sleep(0.1)
    if not os.path.exists(ready):
        stop_server(server, log)
        raise RuntimeError(f"tsserver ({name}) did not start: " + open(log.name).read()[-2000:])
    fields = dict(item.split("=", 1) for item in open(ready).read().split())
    return server, log, fields["grpc"], fields.get("http")


def stop_server(server, log):
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        server.kill()
    log.close()


def bench(args, grpc, concurrency):
    """tsctl bench on source-lang at 4000-byte documents: its JSON report, or {"error": ...}."""
    answer = subprocess.run(
        [os.path.join(args.bin, "tsctl"), "bench", "--server", grpc, "--model", "source-lang",
         "--lengths", "fixed:4000", "--concurrency", str(concurrency), "--requests", "0",
         "--duration-s", str(LOAD_SECONDS), "--json"],
        capture_output=True, text=True, timeout=LOAD_SECONDS + 60)
    if answer.returncode != 0:
        return {"error": answer.stderr[-500:]}
    return json.loads(answer.stdout.splitlines()[-1])


def run_load(args, grpc, work, report):
    """The GPU server's load, then the same on a tsserver held to 2 CPU cores."""
    load = {"gpu": bench(args, grpc, LOAD_CONCURRENCY["gpu"])}
    cpu_config = f"""listen: 127.0.0.1:0
metrics_listen: ""
state_dir: {work}/state-cpu
intra_op_threads: 2
jobs: {{enabled: false}}
models:
  - {{name: source-lang, checkpoint: {args.root}/models/source-lang-demo.tsckpt, device: cpu, precision: fp32}}
"""
    if shutil.which("taskset") is None:
        load["cpu2"] = {"error": "no taskset on this machine: the 2-core server was not run"}
        report["load"] = load
        return
    server, log, cpu_grpc, _ = start_server(args, work, "cpu2", cpu_config,
                                            prefix=("taskset", "-c", "0,1"))
    try:
        load["cpu2"] = bench(args, cpu_grpc, LOAD_CONCURRENCY["cpu2"])
    finally:
        stop_server(server, log)
    gpu, cpu = load["gpu"].get("requests_per_s"), load["cpu2"].get("requests_per_s")
    load["ratio"] = gpu / cpu if gpu and cpu else None
    report["load"] = load


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bin", required=True, help="folder with tsserver, tsctl, tsmodel")
    parser.add_argument("--root", required=True, help="the repository")
    parser.add_argument("--out", required=True, help="the JSON report to write")
    parser.add_argument("--device", default="cuda", help="where tsserver serves (cpu to try it)")
    parser.add_argument("--precision", default="bf16", help="the served models' precision")
    parser.add_argument("--no-jobs", dest="jobs", action="store_false",
                        help="skip the training and evaluation jobs on the device")
    parser.add_argument("--no-load", dest="load", action="store_false",
                        help="skip the load runs (GPU server against 2 CPU cores)")
    args = parser.parse_args()
    args.root = os.path.abspath(args.root)
    work = tempfile.mkdtemp(prefix="gpu-check-serve-")
    inputs = []
    for model, path, expected in CASES:
        inputs.append((model, os.path.join(args.root, path), expected))
    for i, text in enumerate(LISTOPS):
        path = os.path.join(work, f"expr{i}.txt")
        with open(path, "w") as f:
            f.write(text)
        inputs.append(("listops", path, None))

    os.makedirs(os.path.join(work, "data"), exist_ok=True)
    report = {"cases": [], "errors": [], "jobs": []}
    server = None
    try:
        server, log, grpc, http = start_server(args, work, "gpu", f"""listen: 127.0.0.1:0
metrics_listen: ""
state_dir: {work}/state
data_root: {work}/data
http: {{listen: 127.0.0.1:0}}
jobs: {{enabled: {"true" if args.jobs else "false"}, worker_binary: {args.bin}/tsworker}}
models:
  - {{name: listops, checkpoint: {args.root}/models/listops-demo.tsckpt, device: {args.device}, precision: {args.precision}}}
  - {{name: source-lang, checkpoint: {args.root}/models/source-lang-demo.tsckpt, device: {args.device}, precision: {args.precision}}}
""")
        report["server"] = {"grpc": grpc, "http": http}
        for model, path, expected in inputs:
            case = {"model": model, "file": os.path.relpath(path, args.root), "expected": expected}
            cpu = subprocess.run(
                [os.path.join(args.bin, "tsmodel"), "predict", "--device", "cpu", "--checkpoint",
                 os.path.join(args.root, "models",
                              ("source-lang" if model == "source-lang" else "listops") + "-demo.tsckpt"),
                 path], capture_output=True, text=True, timeout=60)
            case["cpu"] = json.loads(cpu.stdout.splitlines()[0]) if cpu.returncode == 0 else None
            start = time.time()
            grpc_answer = subprocess.run(
                [os.path.join(args.bin, "tsctl"), "classify", "--server", grpc, "--model", model,
                 "--json", path], capture_output=True, text=True, timeout=60)
            case["tsctl_ms"] = round(1000 * (time.time() - start), 1)
            case["gpu_grpc"] = (json.loads(grpc_answer.stdout.splitlines()[0])
                                if grpc_answer.returncode == 0 else {"error": grpc_answer.stderr})
            with open(path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
            body = json.dumps({"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1],
                                           "data": [text]}]}).encode()
            request = urllib.request.Request(f"http://{http}/v2/models/{model}/infer", data=body,
                                             headers={"Content-Type": "application/json"})
            start = time.time()
            with urllib.request.urlopen(request, timeout=60) as answer:
                case["gpu_rest"] = json.loads(answer.read())
            case["rest_ms"] = round(1000 * (time.time() - start), 1)
            case["problems"] = check(case)
            report["cases"].append(case)
        if args.load:
            run_load(args, grpc, work, report)
        if args.jobs:
            run_jobs(args, grpc, work, report)
    except Exception as error:  # the report says what failed; the exit status says that it did
        report["errors"].append(repr(error))
    finally:
        if server is not None:
            stop_server(server, log)
            report["server_log_tail"] = open(log.name).read()[-3000:]
    load_errors = [v["error"] for v in report.get("load", {}).values()
                   if isinstance(v, dict) and "error" in v]
    report["passed"] = (not report["errors"] and all(not c["problems"] for c in report["cases"])
                        and all(not j["problems"] for j in report["jobs"]) and not load_errors)
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    for case in report["cases"]:
        label = case.get("gpu_grpc", {}).get("label")
        print(f"{case['model']:12} {case['file']:40} gpu {label!s:9} cpu "
              f"{(case['cpu'] or {}).get('label')!s:9} {'; '.join(case['problems']) or 'ok'}")
    for job in report["jobs"]:
        print(f"job {job['kind']:10} on {args.device}: {job.get('state')} in {job.get('seconds')} s "
              f"{json.dumps(job.get('figures', {}))} {'; '.join(job['problems']) or 'ok'}")
    for name, load in report.get("load", {}).items():
        if isinstance(load, dict):
            print(f"load {name}: {load.get('requests_per_s')} requests/s, p99 "
                  f"{(load.get('latency_ms') or {}).get('p99')} ms {load.get('error', '')}")
    for error in report["errors"]:
        print("error:", error)
    return 0 if report["passed"] else 1


# A training job on the device (procedural ListOps, nothing to upload), then an evaluation job of
# its best checkpoint there: what a user submits with `device: cuda`.
TRAINING_SPEC = """name: gpu-check-listops
device: {device}
model: {{embed_dim: 64, depth: 2, heads: 4, mlp_ratio: 2, max_length: 128, conv_embed: true}}
data:
  train: {{format: listops, generate: {{count: 9600, min_length: 10, max_length: 120, seed: 11}}}}
  validation: {{format: listops, generate: {{count: 500, min_length: 10, max_length: 120, seed: 12}}}}
optimizer: {{name: adamw, lr: 0.005, warmup_steps: 30}}
batch_size: 32
steps: 300
checkpoint_interval: 100
log_interval: 20
"""
EVALUATION_SPEC = """name: gpu-check-eval
device: {device}
job_id: {job_id}
data: {{format: listops, generate: {{count: 500, min_length: 10, max_length: 120, seed: 13}}}}
"""


def submit(args, grpc, command, spec_text, work):
    """tsctl train|eval --wait --json: every event, then the job (the last line)."""
    spec = os.path.join(work, command + ".yaml")
    with open(spec, "w") as f:
        f.write(spec_text)
    start = time.time()
    answer = subprocess.run([os.path.join(args.bin, "tsctl"), command, "--spec", spec, "--wait",
                             "--json", "--server", grpc], capture_output=True, text=True,
                            timeout=150)
    lines = [json.loads(line) for line in answer.stdout.splitlines() if line.startswith("{")]
    job = lines[-1] if lines else {}
    return job, lines, round(time.time() - start, 1), answer


def run_jobs(args, grpc, work, report):
    job, events, seconds, answer = submit(
        args, grpc, "train", TRAINING_SPEC.format(device=args.device), work)
    entry = {"kind": "training", "state": job.get("state"), "seconds": seconds, "problems": []}
    # tsctl's JSON (client/job_format.h): {"event": "progress", "loss": ...} per event, then
    # the job with "metrics" (its best validation) and "progress".
    losses = [e["loss"] for e in events if e.get("event") == "progress" and e.get("step", 0) > 0]
    accuracy = (job.get("metrics") or {}).get("accuracy")
    speed = (job.get("progress") or {}).get("examples_per_second")
    entry["figures"] = {"first_loss": losses[0] if losses else None,
                        "last_loss": losses[-1] if losses else None,
                        "best_accuracy": accuracy, "examples_per_second": speed}
    if "succeeded" not in str(job.get("state")).lower():
        entry["problems"].append(f"state {job.get('state')} ({job.get('reason')}): "
                                 + answer.stderr[-500:])
    elif len(losses) < 2 or not losses[-1] < losses[0]:
        entry["problems"].append(f"the loss did not fall: {losses}")
    report["jobs"].append(entry)
    if entry["problems"] or not job.get("id"):
        return
    job, _, seconds, answer = submit(
        args, grpc, "eval", EVALUATION_SPEC.format(device=args.device, job_id=job["id"]), work)
    entry = {"kind": "evaluation", "state": job.get("state"), "seconds": seconds, "problems": [],
             "figures": {"accuracy": (job.get("metrics") or {}).get("accuracy")}}
    if "succeeded" not in str(job.get("state")).lower():
        entry["problems"].append(f"state {job.get('state')} ({job.get('reason')}): "
                                 + answer.stderr[-500:])
    report["jobs"].append(entry)


def probabilities(answer):
    """{label: probability} from tsctl's/tsmodel's JSON."""
    return {p["label"]: p["probability"] for p in answer.get("probabilities", [])}


def check(case):
    problems = []
    cpu, grpc, rest = case["cpu"], case["gpu_grpc"], case["gpu_rest"]
    if cpu is None:
        return ["tsmodel predict on the CPU failed"]
    if "error" in grpc:
        return ["tsctl classify failed: " + str(grpc["error"])[:200]]
    expected = probabilities(cpu)
    for label, p in probabilities(grpc).items():
        if abs(p - expected.get(label, -1)) > BF16_TOLERANCE:
            problems.append(f"gRPC P({label}) {p:.4f} vs CPU {expected.get(label)}")
    outputs = {o["name"]: o for o in rest.get("outputs", [])}
    rest_probs = outputs.get("probabilities", {}).get("data", [])
    labels = [p["label"] for p in sorted(cpu["probabilities"], key=lambda p: p["index"])]
    for label, p in zip(labels, rest_probs):
        if abs(p - expected[label]) > BF16_TOLERANCE:
            problems.append(f"REST P({label}) {p:.4f} vs CPU {expected[label]:.4f}")
    if case["expected"] and grpc.get("label") != case["expected"]:
        problems.append(f"label {grpc.get('label')}, expected {case['expected']}")
    return problems


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/python3
"""Learning benchmark: does a training job learn real byte-level tasks as well as the PyTorch
reference recipe, on the same data and the same cores?

Usage (after scripts/build; about 12 minutes on 2 cores with --max-length 512 --threads 1
--references pytorch, several times that with the defaults):
  /usr/bin/python3 bench/learning_bench.py [--build build] [--tasks man-section,source-lang,listops]
      [--steps 300] [--eval-every 50] [--threads 2] [--out docs/learning_bench.json]
      [--plot docs/learning_curves.png] [--markdown docs/learning_table.md]
      [--references pytorch,vit] [--keep DIR]

For each task it
  1. builds the data: bench/debian_tasks.py for the Debian-file tasks (1600 train / 400
     validation / 400 test windows of 1-2 KiB), `tsmodel listops` for generated ListOps (the
     service's own generator, written out as JSON Lines so both trainers see the same bytes);
  2. trains through the real server: a tsserver on 127.0.0.1 with a scratch state dir, a spec
     that gives only the architecture, the data, the steps and the evaluation interval (every
     optimizer setting is the service's default), `tsctl train --wait --json`; the validation
     events are the service's curve; then `tsctl eval` of the job's best checkpoint on the
     held-out test set;
  3. trains the PyTorch reference recipe (bench/reference_train.py: the issue's recipe, AdamW lr
     1e-3, weight decay 0.001, 20 warmup steps, batch 16) on the same files with each initialisation
     in --references, evaluated on the same validation set at the same steps.
The service's job and the reference runs of a task go side by side (each with --threads intra-op
threads, so give the machine 1 + len(references) times that many cores), which on a shared, noisy
machine is the fair way to compare training examples/s: the service's is the mean over its
progress events (optimizer steps only), the reference's over its optimizer steps only.
"""
import argparse
import concurrent.futures
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PY = "/usr/bin/python3"

# The model of every task: the byte-level model (docs/JOBS.md's first example).
TASKS = {
    "man-section": {"model": {"embed_dim": 64, "depth": 2, "heads": 8, "mlp_ratio": 2,
                              "max_length": 2048}},
    "source-lang": {"model": {"embed_dim": 64, "depth": 2, "heads": 8, "mlp_ratio": 2,
                              "max_length": 2048}},
    # ListOps expressions of 10-200 characters, as the bundled demo model.
    "listops": {"model": {"embed_dim": 64, "depth": 2, "heads": 8, "mlp_ratio": 2,
                          "max_length": 256},
                "generate": {"train": (16000, 1), "validation": (1000, 2), "test": (2000, 3)},
                "min_length": 10, "max_length": 200},
}


def log(*args):
    print("learning_bench:", *args, file=sys.stderr, flush=True)


def make_data(task, data_dir, build):
    os.makedirs(data_dir, exist_ok=True)
    if task == "listops":
        spec = TASKS[task]
        for split, (count, seed) in spec["generate"].items():
            subprocess.run([os.path.join(build, "model", "tsmodel"), "listops", "--out",
                            os.path.join(data_dir, f"{split}.jsonl"), "--count", str(count),
                            "--min-length", str(spec["min_length"]), "--max-length",
                            str(spec["max_length"]), "--seed", str(seed)], check=True,
                           stdout=subprocess.DEVNULL)
        return
    subprocess.run([PY, os.path.join(ROOT, "bench", "debian_tasks.py"), task, data_dir], check=True)


class Server:
    """A tsserver on loopback with a scratch state dir; data_root is `data_root`."""

    def __init__(self, build, work, data_root, threads):
        self.build, self.work = build, work
        stand_in = os.path.join(work, "stand-in.tsckpt")
        subprocess.run([os.path.join(build, "model", "tsmodel"), "init", "--out", stand_in,
                        "--labels", "a,b", "--embed-dim", "8", "--depth", "1", "--heads", "1",
                        "--max-length", "16", "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        config = os.path.join(work, "config.yaml")
        with open(config, "w") as f:
            f.write(f"listen: 127.0.0.1:0\nmetrics_listen: \"\"\nintra_op_threads: 1\n"
                    f"state_dir: {os.path.join(work, 'state')}\ndata_root: {data_root}\n"
                    f"jobs: {{threads_per_job: {threads}}}\n"
                    f"models:\n  - {{name: stand-in, checkpoint: {stand_in}, device: cpu}}\n")
        ready = os.path.join(work, "ready")
        self.log = open(os.path.join(work, "server.log"), "w")
        self.proc = subprocess.Popen([os.path.join(build, "server", "tsserver"), "--config", config,
                                      "--ready-file", ready], stdout=self.log, stderr=self.log)
        deadline = time.time() + 120
        while not os.path.exists(ready):
            if self.proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"tsserver did not start; see {self.log.name}")
            time.sleep(0.1)
        time.sleep(0.1)
        with open(ready) as f:
            self.address = [l.split("=", 1)[1].strip() for l in f if l.startswith("grpc=")][0]

    def tsctl(self, *args):
        out = subprocess.run([os.path.join(self.build, "client", "tsctl"), *args, "--server",
                              self.address], check=True, capture_output=True, text=True)
        return [json.loads(l) for l in out.stdout.splitlines() if l.strip().startswith("{")]

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


def train_service(server, task, work, steps, eval_every, threads):
    model = TASKS[task]["model"]
    spec = os.path.join(work, f"{task}.yaml")
    with open(spec, "w") as f:
        f.write(f"name: {task}\nmodel: {json.dumps(model)}\n"
                f"data:\n  train: {{format: jsonl, path: {task}/train.jsonl}}\n"
                f"  validation: {{format: jsonl, path: {task}/validation.jsonl}}\n"
                f"steps: {steps}\neval_interval: {eval_every}\nlog_interval: 10\n"
                f"threads: {threads}\nkeep_checkpoints: 1\n")
    start = time.time()
    events = server.tsctl("train", "--spec", spec, "--wait", "--json")
    wall = time.time() - start
    final = events[-1]
    if final.get("state") != "SUCCEEDED":
        raise RuntimeError(f"{task}: training job ended {final.get('state')}: {final}")
    curve = [{"step": e["step"], "validation_accuracy": e["metrics"]["accuracy"]}
             for e in events if e.get("event") == "validation"]
    rates = [e["examples_per_second"] for e in events
             if e.get("event") == "progress" and e.get("examples_per_second")]
    losses = [(e["step"], e["loss"]) for e in events if e.get("event") == "progress"]
    eval_spec = os.path.join(work, f"{task}-test.yaml")
    with open(eval_spec, "w") as f:
        f.write(f"name: {task}-test\njob_id: {final['id']}\n"
                f"data: {{format: jsonl, path: {task}/test.jsonl}}\nbatch_size: 32\n"
                f"threads: {threads}\n")
    test = server.tsctl("eval", "--spec", eval_spec, "--wait", "--json")[-1]
    return {"job": final["id"], "spec": final.get("spec"), "curve": curve, "loss": losses,
            "train_examples_per_second": sum(rates) / len(rates) if rates else None,
            "test_accuracy": test["metrics"]["accuracy"], "wall_seconds": wall}


def train_reference(task, data_dir, work, init, steps, eval_every, threads):
    model = TASKS[task]["model"]
    out = os.path.join(work, f"{task}-{init}.json")
    subprocess.run([PY, os.path.join(ROOT, "bench", "reference_train.py"), data_dir, "--out", out,
                    "--init", init, "--embed-dim", str(model["embed_dim"]), "--depth",
                    str(model["depth"]), "--heads", str(model["heads"]), "--mlp-ratio",
                    str(model["mlp_ratio"]), "--max-length", str(model["max_length"]),
                    "--steps", str(steps), "--eval-every", str(eval_every), "--threads",
                    str(threads)], check=True, stdout=subprocess.DEVNULL)
    with open(out) as f:
        r = json.load(f)
    best = max(r["curve"], key=lambda p: p["validation_accuracy"])
    return {"curve": [{"step": p["step"], "validation_accuracy": p["validation_accuracy"]}
                      for p in r["curve"]],
            "train_examples_per_second": r["train_examples_per_second"],
            "test_accuracy": best["test_accuracy"], "torch": r["torch"]}


def markdown(results):
    lines = []
    for task, r in results["tasks"].items():
        runs = [("service (defaults)", r["service"])] + [
            (f"PyTorch reference, {k} init", v) for k, v in r["reference"].items()]
        steps = [p["step"] for p in r["service"]["curve"]]
        lines.append(f"**{task}** — validation accuracy at step; held-out test accuracy of the "
                     f"best-validation model; training examples/s ({results['threads']} intra-op "
                     f"thread{'s' if results['threads'] > 1 else ''} each, side by side)\n")
        lines.append("| run | " + " | ".join(str(s) for s in steps) + " | test | examples/s |")
        lines.append("|---|" + "---:|" * (len(steps) + 2))
        for name, run in runs:
            acc = {p["step"]: p["validation_accuracy"] for p in run["curve"]}
            cells = [f"{acc[s]:.3f}" if s in acc else "—" for s in steps]
            lines.append(f"| {name} | " + " | ".join(cells) +
                         f" | {run['test_accuracy']:.3f} | {run['train_examples_per_second']:.1f} |")
        lines.append("")
    return "\n".join(lines)


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    tasks = list(results["tasks"])
    fig, axes = plt.subplots(1, len(tasks), figsize=(5 * len(tasks), 3.8), squeeze=False)
    for ax, task in zip(axes[0], tasks):
        r = results["tasks"][task]
        runs = [("service (defaults)", r["service"], "C0", "-")] + [
            (f"reference, {k} init", v, c, "--")
            for (k, v), c in zip(r["reference"].items(), ["C1", "C2", "C3"])]
        for name, run, color, style in runs:
            xs = [p["step"] for p in run["curve"]]
            ys = [p["validation_accuracy"] for p in run["curve"]]
            ax.plot(xs, ys, style, color=color, marker="o", ms=3, label=name)
        ax.axhline(1.0 / r["classes"], color="gray", lw=0.8, ls=":", label="chance")
        ax.set_title(task)
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("validation accuracy")
        ax.set_ylim(0, 1)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--tasks", default="man-section,source-lang,listops")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--eval-every", type=int, default=50)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--references", default="pytorch,vit")
    p.add_argument("--max-length", type=int, default=2048,
                   help="max_length of the Debian-file tasks' model (ListOps: 256)")
    p.add_argument("--out", default=os.path.join(ROOT, "docs", "learning_bench.json"))
    p.add_argument("--plot", default=os.path.join(ROOT, "docs", "learning_curves.png"))
    p.add_argument("--markdown")
    p.add_argument("--keep", help="keep data, server state and logs in this directory")
    args = p.parse_args()

    work = args.keep or tempfile.mkdtemp(prefix="learning_bench.")
    os.makedirs(work, exist_ok=True)
    data_root = os.path.join(work, "data")
    for task in ("man-section", "source-lang"):
        TASKS[task]["model"]["max_length"] = args.max_length
    results = {"threads": args.threads, "steps": args.steps, "eval_every": args.eval_every,
               "concurrent": True, "tasks": {}}
    server = None
    try:
        for task in args.tasks.split(","):
            make_data(task, os.path.join(data_root, task), args.build)
        server = Server(args.build, work, data_root, args.threads)
        for task in args.tasks.split(","):
            data_dir = os.path.join(data_root, task)
            with open(os.path.join(data_dir, "train.jsonl")) as f:
                classes = len({json.loads(l)["label"] for l in f if l.strip()})
            entry = {"classes": classes, "model": dict(TASKS[task]["model"])}
            # The service's job and the reference runs go side by side, each with --threads
            # intra-op threads: both see the same machine at the same time, which on a shared,
            # noisy machine is the fair way to compare their examples/s.
            inits = [i for i in args.references.split(",") if i]
            log(f"{task}: service ({server.address}) and reference ({', '.join(inits)}) "
                "side by side")
            with concurrent.futures.ThreadPoolExecutor(max_workers=1 + len(inits)) as pool:
                service = pool.submit(train_service, server, task, work, args.steps,
                                      args.eval_every, args.threads)
                references = {i: pool.submit(train_reference, task, data_dir, work, i, args.steps,
                                             args.eval_every, args.threads) for i in inits}
                entry["service"] = service.result()
                entry["reference"] = {i: f.result() for i, f in references.items()}
            for name, run in [("service", entry["service"])] + list(entry["reference"].items()):
                log(f"{task}: {name}: test accuracy {run['test_accuracy']:.3f}, "
                    f"{run['train_examples_per_second']:.1f} examples/s")
            results["tasks"][task] = entry
            with open(args.out, "w") as f:
                json.dump(results, f, indent=1)
    finally:
        if server:
            server.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.plot:
        plot(results, args.plot)
    table = markdown(results)
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(table)
    print(table)


if __name__ == "__main__":
    main()

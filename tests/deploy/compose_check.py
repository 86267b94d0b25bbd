#!/usr/bin/python3
"""The compose stack (docker-compose.yml) as a user runs it, checked from outside the containers.

scripts/deploy-check builds the images and runs this with the engine's commands in the
environment (TS_COMPOSE: podman-compose, TS_COMPOSE_PROJECT, TS_PODMAN, PROMETHEUS_IMAGE). It
brings up tsserver and Prometheus on free loopback ports (TS_GRPC_PORT, TS_HTTP_PORT,
TS_METRICS_PORT, TS_PROMETHEUS_PORT) with a data folder of its own (TS_DATA_DIR), then checks:
  - tsctl health/models/classify and the README's curl examples on the published ports, and the
    image's HEALTHCHECK;
  - the metrics port as the quick start reads it (curl 127.0.0.1:9464/metrics);
  - a training job on JSON Lines files put into the data folder as docs/DEPLOYMENT.md says, then
    `tsctl promote` and a classification by the promoted model;
  - Prometheus: the tsserver target up, a query over tsserver's series returning data, every alert
    rule of deploy/prometheus loaded;
  - `compose stop`: requests queued when it starts are all answered, within stop_grace_period,
    and tsserver exits by itself (code 0, not killed);
  - `compose up` again: the job, its metrics history and the promotion are still there (volumes).
The caller removes what compose made (`down -v`). Only Debian's python3 and the standard library.

Usage: compose_check.py --root REPO --tsctl TSCTL"""

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from deploy_lib import alert_rules, wait_for  # noqa: E402

QUEUED_REQUESTS = 128
STOP_GRACE_S = 45


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Stack:
    def __init__(self, root, tsctl, data_dir):
        self.root = root
        self.tsctl_bin = tsctl
        self.compose = os.environ["TS_COMPOSE"].split()
        self.project = os.environ.get("TS_COMPOSE_PROJECT", "taylorshift-check")
        self.podman = os.environ.get("TS_PODMAN", "podman").split()
        self.ports = {name: free_port() for name in
                      ("TS_GRPC_PORT", "TS_HTTP_PORT", "TS_METRICS_PORT", "TS_PROMETHEUS_PORT")}
        self.env = dict(os.environ, TS_DATA_DIR=data_dir, **{k: str(v) for k, v in
                                                             self.ports.items()})
        self.grpc = f"127.0.0.1:{self.ports['TS_GRPC_PORT']}"
        self.http = f"127.0.0.1:{self.ports['TS_HTTP_PORT']}"

    def run_compose(self, *args, timeout=300):
        command = self.compose + ["-p", self.project,
                                  "-f", os.path.join(self.root, "docker-compose.yml"), *args]
        result = subprocess.run(command, env=self.env, capture_output=True, text=True,
                                timeout=timeout, check=False)
        if result.returncode != 0:
            raise AssertionError(f"{' '.join(args)}: exit {result.returncode}\n"
                                 f"{result.stdout[-3000:]}{result.stderr[-3000:]}")
        return result.stdout

    def container(self, service):
        out = subprocess.run(self.podman + ["ps", "-a", "--format", "{{.Names}}", "--filter",
                                            f"label=io.podman.compose.project={self.project}",
                                            "--filter", f"label=io.podman.compose.service={service}"],
                             capture_output=True, text=True, check=True, timeout=60).stdout.split()
        if len(out) != 1:
            raise AssertionError(f"expected one {service} container, got {out}")
        return out[0]

    def tsctl(self, *args, timeout=120, cwd=None):
        # --server after the (sub)command: `tsctl jobs list --server ...`.
        split = 2 if args[0] == "jobs" else 1
        result = subprocess.run([self.tsctl_bin, *args[:split], "--server", self.grpc,
                                 *args[split:]],
                                capture_output=True, text=True, timeout=timeout, cwd=cwd,
                                check=False)
        if result.returncode != 0:
            raise AssertionError(f"tsctl {' '.join(args)}: exit {result.returncode}\n"
                                 f"{result.stdout}{result.stderr}")
        return result.stdout

    def logs(self, service):
        name = self.container(service)
        result = subprocess.run(self.podman + ["logs", "--tail", "40", name],
                                capture_output=True, text=True, timeout=60, check=False)
        return result.stdout + result.stderr


def curl(*args):
    result = subprocess.run(["curl", "-sS", "--max-time", "30", *args], capture_output=True,
                            text=True, timeout=60, check=False)
    if result.returncode != 0:
        raise AssertionError(f"curl {' '.join(args)}: exit {result.returncode} {result.stderr}")
    return result.stdout


def readme_curl_examples(root):
    """(command, expected) for every `curl` line of the README's sh blocks; expected is the text
    of the "# =>" comment on the line or the next one ('' when there is none)."""
    with open(os.path.join(root, "README.md"), encoding="utf-8") as f:
        lines = f.read().splitlines()
    examples, in_sh, i = [], False, 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            in_sh = line.strip() == "```sh" and not in_sh
            i += 1
            continue
        if not (in_sh and line.startswith("curl ")):
            i += 1
            continue
        command = line
        while (command.endswith("\\") or not complete(command)) and i + 1 < len(lines):
            i += 1
            command = command + "\n" + lines[i]
        code, _, expected = command.partition("# =>")
        if not expected and i + 1 < len(lines) and lines[i + 1].lstrip().startswith("# =>"):
            expected = lines[i + 1].split("# =>", 1)[1]
            i += 1
        examples.append((code.rstrip(), expected.strip()))
        i += 1
    return examples


def complete(command):
    """Whether a shell command has no quote left open (a README example may span lines)."""
    try:
        shlex.split(command.split("# =>")[0])
        return True
    except ValueError:
        return False


def matches(output, expected):
    """The README's "# =>" convention: the pieces between "..." appear in order."""
    position = 0
    for piece in (p for p in expected.split("...") if p.strip()):
        found = output.find(piece.strip(), position)
        if found < 0:
            return False
        position = found + len(piece.strip())
    return True


def get_json(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.load(response)


def wait_healthy(stack, timeout_s=180):
    def healthy():
        result = subprocess.run([stack.tsctl_bin, "health", "--server", stack.grpc,
                                 "--timeout-ms", "2000"], capture_output=True, text=True,
                                timeout=30, check=False)
        return result.returncode == 0 and "SERVING" in result.stdout
    try:
        wait_for(healthy, timeout_s, "tsserver's health SERVING", interval_s=1)
    except AssertionError as error:
        raise AssertionError(f"{error}\n{stack.logs('tsserver')}") from None


def check(name, function, *args):
    start = time.monotonic()
    function(*args)
    print(f"compose_check: ok  {name} ({time.monotonic() - start:.1f} s)", flush=True)


def check_serving(stack):
    models = stack.tsctl("models")
    for model in ("listops", "source-lang"):
        assert model in models, f"tsctl models lacks {model}:\n{models}"
    out = stack.tsctl("classify", "--model", "source-lang", "--top-k", "2",
                      "/usr/include/stdio.h")
    assert "c-header" in out, f"stdio.h not classified as c-header:\n{out}"
    # Every curl example of the README, on the published ports, with its "# =>" answer.
    examples = readme_curl_examples(stack.root)
    assert len(examples) >= 5, f"README curl examples: {examples}"
    for command, expected in examples:
        command = (command.replace("127.0.0.1:8080", stack.http)
                   .replace("127.0.0.1:9464", f"127.0.0.1:{stack.ports['TS_METRICS_PORT']}"))
        result = subprocess.run(["bash", "-c", "set -o pipefail; " + command],
                                capture_output=True, text=True, timeout=60, check=False)
        assert result.returncode == 0, f"{command}: exit {result.returncode} {result.stderr}"
        assert matches(result.stdout, expected), f"{command}\n=> {result.stdout[:2000]}\n" \
            f"expected {expected}"
    # The image's HEALTHCHECK (podman runs it on request: no systemd timers here).
    result = subprocess.run(stack.podman + ["healthcheck", "run", stack.container("tsserver")],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, f"HEALTHCHECK: {result.returncode} {result.stdout}{result.stderr}"


def check_metrics_port(stack):
    text = curl(f"http://127.0.0.1:{stack.ports['TS_METRICS_PORT']}/metrics")
    assert "taylorshift_requests_total" in text, text[:2000]
    rss = re.search(r"^taylorshift_process_resident_memory_bytes (\S+)$", text, re.M)
    assert rss, text[:2000]
    print(f"compose_check: tsserver's resident memory after the serving checks: "
          f"{float(rss.group(1)) / 2**30:.2f} GiB", flush=True)


def write_dataset(data_dir):
    """Two classes a tiny model tells apart in a few steps: C headers and shell scripts."""
    rng = random.Random(20261206)
    words = ["alpha", "beta", "gamma", "delta", "count", "value", "index", "buffer"]
    def header():
        name = rng.choice(words)
        return f"#include <{name}.h>\nint {name}_{rng.randint(0, 99)}(void);\n"
    def shell():
        return f"#!/bin/sh\necho {rng.choice(words)} {rng.randint(0, 99)}\nexit 0\n"
    folder = os.path.join(data_dir, "filetype")
    os.makedirs(folder, exist_ok=True)
    for name, count in (("train.jsonl", 400), ("val.jsonl", 60)):
        with open(os.path.join(folder, name), "w", encoding="utf-8") as out:
            for i in range(count):
                text, label = (header(), "c") if i % 2 == 0 else (shell(), "sh")
                out.write(json.dumps({"text": text, "label": label}) + "\n")
    # The container's tsserver (uid 10001) reads the folder: world-readable, as files usually are.
    for path, dirs, files in os.walk(data_dir):
        os.chmod(path, 0o755)
        for name in files:
            os.chmod(os.path.join(path, name), 0o644)


def check_training(stack, work):
    spec = os.path.join(work, "spec.yaml")
    with open(spec, "w", encoding="utf-8") as out:
        out.write("name: filetype\n"
                  "model: {embed_dim: 32, depth: 1, heads: 4, mlp_ratio: 2, max_length: 64}\n"
                  "data:\n"
                  "  train: {format: jsonl, path: filetype/train.jsonl}\n"
                  "  validation: {format: jsonl, path: filetype/val.jsonl}\n"
                  "optimizer: {name: adamw, lr: 0.003, warmup_steps: 5}\n"
                  "batch_size: 16\nsteps: 60\nseed: 1\n")
    job = json.loads(stack.tsctl("train", "--spec", spec, "--wait", "--json", timeout=600)
                     .strip().splitlines()[-1])
    assert job.get("state") == "SUCCEEDED", job
    job_id = job["id"]
    out = stack.tsctl("promote", "--job", job_id, "--model", "filetype")
    assert "promoted filetype" in out, out
    sample = os.path.join(work, "sample.sh")
    with open(sample, "w", encoding="utf-8") as f:
        f.write("#!/bin/sh\necho gamma 7\nexit 0\n")
    out = stack.tsctl("classify", "--model", "filetype", "--json", sample)
    assert '"label":"sh"' in out.replace(" ", ""), out
    return job_id


def check_memory_budget(stack, work):
    """The jobs' budget is half of compose's mem_limit (or of the machine's memory when lower):
    tsserver sees the container's limit (cgroup v1 or v2), and says the budget when it refuses."""
    with open(os.path.join(stack.root, "docker-compose.yml"), encoding="utf-8") as f:
        limit_gib = int(re.search(r"mem_limit: (\d+)g", f.read()).group(1))
    with open("/proc/meminfo", encoding="utf-8") as f:
        machine_gib = int(re.search(r"MemTotal: +(\d+) kB", f.read()).group(1)) / 2**20
    budget_gib = min(limit_gib, machine_gib) / 2
    spec = os.path.join(work, "huge.yaml")
    with open(spec, "w", encoding="utf-8") as out:
        out.write("name: huge\n"
                  "model: {embed_dim: 1024, depth: 24, heads: 16, max_length: 8192}\n"
                  "data:\n  train: {format: jsonl, path: filetype/train.jsonl}\n"
                  "batch_size: 64\nsteps: 10\n")
    result = subprocess.run([stack.tsctl_bin, "train", "--server", stack.grpc, "--spec", spec],
                            capture_output=True, text=True, timeout=60, check=False)
    message = result.stdout + result.stderr
    assert result.returncode != 0 and "RESOURCE_EXHAUSTED" in message, message
    expected = f"({budget_gib:.2f} GiB)"
    assert expected in message, f"expected the budget {expected} in: {message}"


def check_prometheus(stack):
    base = f"http://127.0.0.1:{stack.ports['TS_PROMETHEUS_PORT']}"

    def target_up():
        try:
            targets = get_json(f"{base}/api/v1/targets")["data"]["activeTargets"]
        except OSError:
            return False
        return any(t["labels"].get("job") == "taylorshift" and t["health"] == "up"
                   for t in targets)
    wait_for(target_up, 90, "Prometheus' taylorshift target up", interval_s=1)

    def has_data():
        query = urllib.parse.quote('sum(taylorshift_requests_total{job="taylorshift"})')
        result = get_json(f"{base}/api/v1/query?query={query}")["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) > 0
    wait_for(has_data, 60, "a query over tsserver's requests", interval_s=1)
    groups = get_json(f"{base}/api/v1/rules")["data"]["groups"]
    loaded = {rule["name"] for group in groups for rule in group["rules"]
              if rule["type"] == "alerting"}
    expected = {rule["alert"] for _, rule in alert_rules() if "alert" in rule}
    missing = expected - loaded
    assert not missing and expected, f"alert rules not loaded: {sorted(missing)}"


def v2_infer(http_address, document, sent_event):
    host, port = http_address.split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=STOP_GRACE_S + 30)
    body = json.dumps({"inputs": [{"name": "document", "shape": [1], "datatype": "BYTES",
                                   "data": [document]}]})
    connection.request("POST", "/v2/models/source-lang/infer", body,
                       {"Content-Type": "application/json"})
    sent = time.monotonic()
    sent_event.release()
    response = connection.getresponse()
    text = response.read().decode("utf-8", "replace")
    connection.close()
    return response.status, sent, text[:300]


def check_stop_drains(stack):
    """Requests queued when `compose stop` starts are all answered, and tsserver exits 0."""
    rng = random.Random(7)
    documents = ["".join(rng.choice("abcdefgh ;{}()\n") for _ in range(2000))
                 for _ in range(QUEUED_REQUESTS)]
    with concurrent.futures.ThreadPoolExecutor(QUEUED_REQUESTS) as pool:
        sent = threading.Semaphore(0)
        futures = [pool.submit(v2_infer, stack.http, d, sent) for d in documents]
        for _ in documents:   # every request sent before the stop begins
            assert sent.acquire(timeout=30), "a request could not be sent in 30 s"
        done_before = sum(f.done() for f in futures)
        start = time.monotonic()
        stack.run_compose("stop", "tsserver", timeout=STOP_GRACE_S + 60)
        stop_s = time.monotonic() - start
        answers = [f.result() for f in futures]
    late = [f"{status} (sent {sent - start:+.2f} s from the stop): {text}"
            for status, sent, text in answers if status != 200]
    assert not late, "answers while stopping:\n" + "\n".join(late)
    assert stop_s < STOP_GRACE_S, f"compose stop took {stop_s:.1f} s (grace {STOP_GRACE_S} s)"
    code = subprocess.run(stack.podman + ["inspect", "--format", "{{.State.ExitCode}}",
                                          stack.container("tsserver")],
                          capture_output=True, text=True, timeout=60, check=True).stdout.strip()
    assert code == "0", f"tsserver exited {code} (137 = killed at the end of the grace)"
    print(f"compose_check: stop: {QUEUED_REQUESTS - done_before} of {QUEUED_REQUESTS} requests "
          f"still unanswered when it began, all answered 200; stop took {stop_s:.1f} s", flush=True)
    assert done_before < QUEUED_REQUESTS, "every request was answered before the stop began"


def check_restart_keeps_state(stack, job_id):
    stack.run_compose("up", "-d", "--no-build", "tsserver")
    wait_healthy(stack)
    jobs = stack.tsctl("jobs", "list", "--json")
    assert job_id in jobs and "SUCCEEDED" in jobs, jobs
    assert "filetype" in stack.tsctl("models"), "the promotion did not survive the restart"
    job = stack.tsctl("jobs", "get", job_id, "--json")
    assert "loss" in job, job[:2000]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    parser.add_argument("--tsctl", required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="ts-compose-") as work:
        data_dir = os.path.join(work, "data")
        os.makedirs(data_dir)
        os.chmod(work, 0o755)
        write_dataset(data_dir)
        stack = Stack(args.root, args.tsctl, data_dir)
        print(f"compose_check: ports {stack.ports}", flush=True)
        start = time.monotonic()
        stack.run_compose("up", "-d", "--no-build", "tsserver", "prometheus")
        wait_healthy(stack)
        print(f"compose_check: ok  up and SERVING ({time.monotonic() - start:.1f} s)", flush=True)
        check("serving: tsctl, curl, HEALTHCHECK", check_serving, stack)
        check("metrics port", check_metrics_port, stack)
        job_id = None

        def training():
            nonlocal job_id
            job_id = check_training(stack, work)
        check("training job on the data folder, promote, classify", training)
        check("jobs' memory budget from the container's limit", check_memory_budget, stack,
              work)
        check("prometheus: target up, query, alert rules", check_prometheus, stack)
        check("compose stop drains the queue", check_stop_drains, stack)
        check("restart keeps jobs and promotions", check_restart_keeps_state, stack, job_id)
    print("compose_check: all passed", flush=True)


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Soak with faults (issue 28): N minutes of mixed load on one tsserver while jobs run and
things go wrong, with every answer checked.

What runs, all on loopback against one tsserver (fixed free ports, so clients find it again
after each restart) whose state_dir is a small filesystem of its own:

- Load: LOAD_THREADS threads rotate over the five ways to classify — Classifier.Classify,
  Classifier.ClassifyStream (4 requests per stream, matched by request_id), KServe v2
  ModelInfer over gRPC (contents and raw_input_contents alternating), KServe v2 REST
  (/v2/models/M/infer) and the plain route (POST /v1/models/M:classify, text and
  document_base64 alternating) — over the bundled models (listops, source-lang) and the models
  that promotions create.
- Jobs: a driver keeps two jobs queued or running: small ListOps training jobs from scratch
  (C 32, one block), fine-tunings of models/listops-demo.tsckpt (init_from), evaluations of a
  finished job's best checkpoint and of the served listops model (generated ListOps data,
  nothing read from disk). Every training job that succeeds is promoted (best, every third
  one `last`, every fourth with require_at_least_current_accuracy): from-scratch jobs to model
  `soak-fresh`, fine-tunings to `listops-tuned`. Every job is watched with WatchJob.
- Faults, at fixed fractions of the run: SIGKILL of a job worker (3x), SIGSTOP of a worker
  shorter than jobs.heartbeat_timeout_ms then SIGCONT (2x) and longer than it (2x), the state
  directory filled to the last byte for a while (1x, a promotion and submissions tried while
  it is full), CancelJob of a running training job (1x), two restarts of the server
  (SIGTERM, wait for exit, start again on the same config and state dir), and issue 41's
  attacks on the HTTP listener while the load runs (1x, at 58 %, for 4 % of the run, 15 to 60
  s, at most 60,000 connections opened): 1,000
  idle and 300 slowloris connections (one header byte every 3 s) from 127.0.0.2-7, each
  reopened when the server closes it, a chunked body of up to 1 GiB and a gzip bomb (1 GiB of
  zeros in about 1 MB), each of which must be answered 413 (tests/deploy/attack_test.py's
  attacks, imported).

What it asserts (exit status 1 on any violation, each listed):
- no wrong answer: a fixed oracle set (12 ListOps documents, 1 to ~700 bytes, some past the
  model's 256 tokens; 4 source files) gets its probabilities from one clean Classify each at
  start; every later answer of any front end is compared with the oracle of the model and the
  version the answer names, within --tolerance (absolute, per probability; answers ride in
  batches of other requests and may take the other attention path, so they are not bitwise
  equal; the largest difference seen is reported). Promotions replace the promoted models'
  answers: their oracle is computed once per version, right after the promotion, by one
  Classify per document; the bundled models are never replaced and keep the start's oracle;
- every failed call failed with a specific status: no gRPC UNKNOWN or INTERNAL (also in a
  ClassifyStream's per-request error_code and on Jobs calls), no HTTP 500 or other 5xx besides
  503/504, no connection dropped or refused outside the restart windows;
- server RSS flat after warm-up: for each server process, the largest VmRSS (from /proc,
  every second) after its warm-up minus its VmRSS at the end of the warm-up < 50 MiB; while
  the listener attack runs, < 50 MiB + the one body of http.max_body_bytes (64 MiB) that the
  server reads before it refuses the chunked attack body;
- every job ends in the state its history says: the state GetJob reports at the end is the
  final STATE event WatchJob streamed, the first terminal state the driver saw, and what the
  faults it took predict (SIGKILL or a long SIGSTOP: FAILED naming the signal or the missing
  heartbeat, or SUCCEEDED with progress.retries counting them when max_retries allows;
  CancelJob: CANCELLED; a full disk: SUCCEEDED or FAILED with a reason; a restart: resumed,
  progress.resumes >= 1); its GetJobHistory agrees (loss steps strictly increasing, a
  succeeded training job's curve and validations reach total_steps, an evaluation's report
  counts every example);
- nothing acknowledged is lost: after each restart and at the end every job a Submit* call
  returned exists (GetJob and ListJobs), a finished job keeps its state, and every promoted
  model is served at the version its last acknowledged promotion returned.

The state directory is a tmpfs of --state-mib MiB mounted by the script (it runs as root);
if mounting a tmpfs fails it tries an ext4 image on a loop device; if that fails too it uses
a plain directory and skips the disk-full fault (the summary says which was used).

Usage: /usr/bin/python3 bench/soak.py [--minutes 30] [--tsserver build/server/tsserver]
       [--load-threads 4] [--tolerance 1e-5] [--state-mib 192] [--out soak.json] [--keep]
Prints progress on stderr and a summary (calls per front end, failures by code, RSS
start/end/max, jobs by final state, faults injected, violations) on stdout.
"""
import argparse
import base64
import collections
import errno
import http.client
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import grpc

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "deploy"))
sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from deploy_lib import listops_expression  # noqa: E402  (the same documents as protocols_test)
from bench_server import tsworker_children  # noqa: E402
import attack_test as attack  # noqa: E402  (issue 41's attacks, tests/deploy/attack_test.py)

sys.dont_write_bytecode = True
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, "proto")
GRPC_PYTHON_PLUGIN = "/usr/bin/grpc_python_plugin"
MIB = 1 << 20
RSS_LIMIT_BYTES = 50 * MIB
# The largest request body the server reads (http.max_body_bytes, here max_message_bytes' 64 MiB).
ATTACK_BODY_BYTES = 64 * MIB
HEARTBEAT_TIMEOUT_MS = 8000
TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
FRONT_ENDS = ("classify", "stream", "v2_grpc", "v2_rest", "plain")
BAD_GRPC_CODES = ("UNKNOWN", "INTERNAL")
CODE_BY_NUMBER = {code.value[0]: code.name for code in grpc.StatusCode}

pb = pb_grpc = v2 = v2_grpc = jobs_pb = jobs_grpc = None


def log(message):
    print(f"{time.strftime('%H:%M:%S')} soak: {message}", file=sys.stderr, flush=True)


def generate_stubs(directory):
    global pb, pb_grpc, v2, v2_grpc, jobs_pb, jobs_grpc
    os.makedirs(directory, exist_ok=True)
    command = ["protoc", "-I", PROTO_DIR, f"--python_out={directory}",
               f"--grpc_python_out={directory}",
               f"--plugin=protoc-gen-grpc_python={GRPC_PYTHON_PLUGIN}",
               os.path.join(PROTO_DIR, "inference", "grpc_predict_v2.proto"),
               os.path.join(PROTO_DIR, "inference", "model_config.proto"),
               os.path.join(PROTO_DIR, "taylorshift", "v1", "classifier.proto"),
               os.path.join(PROTO_DIR, "taylorshift", "v1", "jobs.proto")]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    sys.path.insert(0, directory)
    from inference import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc
    from taylorshift.v1 import classifier_pb2, classifier_pb2_grpc, jobs_pb2, jobs_pb2_grpc
    pb, pb_grpc, v2, v2_grpc = (classifier_pb2, classifier_pb2_grpc, grpc_predict_v2_pb2,
                                grpc_predict_v2_pb2_grpc)
    jobs_pb, jobs_grpc = jobs_pb2, jobs_pb2_grpc


# --- documents -----------------------------------------------------------------------------------


def oracle_documents():
    """{model: [document bytes]}: 12 ListOps expressions of 1 to ~700 bytes (some past
    listops' 256 tokens, one with UTF-8) and 4 source files."""
    rng = random.Random(28)
    listops = []
    for budget in (1, 10, 25, 50, 90, 140, 200, 250, 320, 450, 600, 700):
        text = listops_expression(rng, budget)
        listops.append(text.encode())
    listops[5] = listops[5].replace(b" ", " ü ".encode(), 1)
    source = [b"#include <stdio.h>\nint main(void) { return 0; }\n",
              b"#!/bin/sh\nset -e\nfor f in *.txt; do echo \"$f\"; done\n",
              b"import sys\n\ndef main():\n    print(sys.argv)\n",
              b"use strict;\nmy $x = shift;\nprint \"$x\\n\";\n"]
    return {"listops": listops, "source-lang": source}


# --- bookkeeping -----------------------------------------------------------------------------------

class Record:
    """Everything the soak saw, behind one lock."""

    def __init__(self, start):
        self.start = start
        self.lock = threading.Lock()
        self.ok = collections.Counter()  # front end -> answers checked
        self.unchecked = collections.Counter()  # answers of a version with no oracle yet
        self.failures = collections.defaultdict(collections.Counter)  # front end -> code -> n
        self.failures_outside = collections.defaultdict(collections.Counter)
        self.max_diff = collections.defaultdict(float)
        self.violations = []
        self.faults = []  # dicts
        self.windows = []  # [start, end] of restart windows (end None while open)
        self.rss = []  # (t, incarnation, bytes)
        self.notes = []

    def now(self):
        return time.monotonic() - self.start

    def violation(self, text):
        with self.lock:
            self.violations.append(f"[{self.now():7.1f}s] {text}")
        log(f"VIOLATION: {text}")

    def note(self, text):
        with self.lock:
            self.notes.append(f"[{self.now():7.1f}s] {text}")
        log(text)

    def fault(self, kind, **detail):
        entry = dict(kind=kind, t=round(self.now(), 1), **detail)
        with self.lock:
            self.faults.append(entry)
        log(f"fault: {json.dumps(entry)}")
        return entry

    def in_restart_window(self, t, slack_s=3.0):
        with self.lock:
            for start, end in self.windows:
                if start - 0.5 <= t and (end is None or t <= end + slack_s):
                    return True
        return False

    def failed(self, front_end, code, t_sent, detail=""):
        """A call that got `code` (e.g. grpc:UNAVAILABLE, http:503, conn:refused)."""
        outside = not self.in_restart_window(t_sent)
        with self.lock:
            self.failures[front_end][code] += 1
            if outside:
                self.failures_outside[front_end][code] += 1
        name = code.split(":", 1)[1]
        if code.startswith("grpc:") and name in BAD_GRPC_CODES:
            self.violation(f"{front_end}: a call failed with {code} {detail}")
        elif code.startswith("http:") and int(name.split()[0]) >= 500 and \
                int(name.split()[0]) not in (503, 504):
            self.violation(f"{front_end}: HTTP {name}")
        elif code.startswith("conn:") and outside:
            self.violation(f"{front_end}: connection failed outside a restart window ({code})")


class Oracle:
    """Probabilities per (model, version, document index), computed by one Classify each."""

    def __init__(self, record, tolerance):
        self.record = record
        self.tolerance = tolerance
        self.lock = threading.Lock()
        # (model, version) -> [[(label, [p])] per promotion]: a version string can name more
        # than one checkpoint (see check_collision), so an answer matches any of them.
        self.table = {}
        self.fixed_versions = {}  # bundled model -> version at start
        # Models being promoted: an answer of theirs that matches no known checkpoint may come
        # from the new one, whose oracle is not computed yet; it is checked once it is.
        self.promoting = set()
        self.deferred = []

    def begin_promotion(self, model):
        with self.lock:
            self.promoting.add(model)

    def end_promotion(self, model):
        with self.lock:
            self.promoting.discard(model)
            mine = [d for d in self.deferred if d[1] == model]
            self.deferred = [d for d in self.deferred if d[1] != model]
        for item in mine:
            self.check(*item, defer=False)

    def compute(self, classifier, model, documents, expect_version=None):
        rows, version = [], None
        for document in documents:
            response = classifier.Classify(pb.ClassifyRequest(model=model, document=document),
                                           timeout=60)
            if version is None:
                version = response.model_version
            if response.model_version != version:
                raise RuntimeError(f"{model}: version changed while computing its oracle")
            rows.append((response.label, [p.probability for p in response.probabilities]))
        if expect_version is not None and version != expect_version:
            raise RuntimeError(f"{model}: oracle computed on version {version}, "
                               f"promotion said {expect_version}")
        with self.lock:
            known = self.table.setdefault((model, version), [])
            before = list(known)
            known.append(rows)
        if before:
            self.check_collision(model, version, before, rows)
        return version

    def check_collision(self, model, version, before, rows):
        """A promotion that kept the version string must have kept the answers."""
        diff = max(abs(a - b) for old in before for (_, x), (_, y) in zip(old, rows)
                   for a, b in zip(x, y))
        if diff > self.tolerance:
            self.record.violation(
                f"version collision: {model} kept version {version} across a promotion, but "
                f"its answers changed by up to {diff:.3g}: two different checkpoints, one "
                "version string")

    def check(self, front_end, model, index, version, label, probabilities, defer=True):
        with self.lock:
            candidates = list(self.table.get((model, version), []))
            fixed = self.fixed_versions.get(model)
            promoting = model in self.promoting
        if fixed is not None and version != fixed:
            self.record.violation(f"{front_end}: {model} answered as version {version}, "
                                  f"served version is {fixed}")
            return
        if not candidates:
            with self.record.lock:
                self.record.unchecked[front_end] += 1
            return
        best = None
        for rows in candidates:
            want_label, want = rows[index]
            if len(want) != len(probabilities):
                continue
            diff = max(abs(a - b) for a, b in zip(want, probabilities))
            if best is None or diff < best[0]:
                best = (diff, want_label, want)
        if best is None:
            self.record.violation(f"{front_end}: {model}@{version} document {index}: "
                                  f"{len(probabilities)} probabilities, not as the oracle")
            return
        diff, want_label, want = best
        if diff > self.tolerance and promoting and defer:
            with self.lock:
                self.deferred.append((front_end, model, index, version, label, probabilities))
            return
        with self.record.lock:
            self.record.ok[front_end] += 1
            if diff > self.record.max_diff[front_end]:
                self.record.max_diff[front_end] = diff
        if diff > self.tolerance:
            self.record.violation(f"wrong answer: {front_end}: {model}@{version} document "
                                  f"{index}: differs from the oracle by {diff:.3g}")
        elif label != want_label:
            ordered = sorted(want, reverse=True)
            if len(ordered) < 2 or ordered[0] - ordered[1] > 2 * self.tolerance:
                self.record.violation(f"wrong answer: {front_end}: {model}@{version} document "
                                      f"{index}: label {label!r}, oracle {want_label!r}")


# --- the server --------------------------------------------------------------------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """tsserver on fixed loopback ports; start() again after stop() reuses config and state."""

    def __init__(self, tsserver, work, state_dir, data_root):
        self.tsserver = tsserver
        self.work = work
        self.grpc_port, self.http_port, self.metrics_port = free_port(), free_port(), free_port()
        self.grpc_address = f"127.0.0.1:{self.grpc_port}"
        self.http_address = ("127.0.0.1", self.http_port)
        self.config = os.path.join(work, "tsserver.yaml")
        config = {
            "listen": self.grpc_address,
            "metrics_listen": f"127.0.0.1:{self.metrics_port}",
            "http": {"listen": f"127.0.0.1:{self.http_port}", "threads": 8},
            "intra_op_threads": 1,
            "shutdown_grace_ms": 5000,
            "state_dir": state_dir,
            "data_root": data_root,
            "models": [
                {"name": "listops", "checkpoint": os.path.join(ROOT, "models",
                                                               "listops-demo.tsckpt")},
                {"name": "source-lang", "checkpoint": os.path.join(ROOT, "models",
                                                                   "source-lang-demo.tsckpt")},
            ],
            "jobs": {"max_concurrent": 2, "max_queued": 8, "threads_per_job": 1,
                     "keep_checkpoints": 1, "heartbeat_interval_ms": 1000,
                     "heartbeat_timeout_ms": HEARTBEAT_TIMEOUT_MS, "stop_grace_ms": 5000},
        }
        with open(self.config, "w") as f:
            json.dump(config, f, indent=1)  # JSON is YAML
        self.process = None
        self.incarnation = 0
        self.log_path = os.path.join(work, "tsserver.log")

    def start(self):
        ready = os.path.join(self.work, "ready")
        if os.path.exists(ready):
            os.unlink(ready)
        self.incarnation += 1
        with open(self.log_path, "a") as log_file:
            log_file.write(f"=== soak: start {self.incarnation}\n")
            log_file.flush()
            self.process = subprocess.Popen([self.tsserver, "--config", self.config,
                                             "--ready-file", ready],
                                            stdout=log_file, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"tsserver exited with {self.process.returncode}: "
                                   + self.log_tail())
            if os.path.exists(ready) and "grpc=" in open(ready).read():
                self.started = time.monotonic()
                return
            time.sleep(0.1)
        raise RuntimeError("tsserver did not become ready in 120 s" + self.log_tail())

    def stop(self, timeout_s=60):
        """SIGTERM by PID; (exit status, seconds) or (None, seconds) if it had to be killed."""
        started = time.monotonic()
        if self.process is None or self.process.poll() is not None:
            return (self.process.returncode if self.process else None), 0.0
        self.process.send_signal(signal.SIGTERM)
        try:
            rc = self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            rc = None
        return rc, time.monotonic() - started

    def pid(self):
        return self.process.pid if self.process else None

    def rss_bytes(self):
        try:
            with open(f"/proc/{self.process.pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1]) * 1024
        except (OSError, AttributeError):
            pass
        return None

    def workers(self):
        """[(pid, job id, seconds running)] of the tsworker children."""
        found = []
        pid = self.pid()
        ticks = os.sysconf("SC_CLK_TCK")
        with open("/proc/uptime") as f:
            uptime = float(f.read().split()[0])
        for child, fields, argv in tsworker_children(pid):
            job = next((a.split("/jobs/")[1].split("/")[0] for a in argv
                        if a.startswith("--task=") and "/jobs/" in a), None)
            age = uptime - int(fields[19]) / ticks
            found.append((child, job, age, fields[0]))
        return found

    def metrics(self):
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.metrics_port, timeout=10)
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
            connection.close()
            return text
        except (OSError, http.client.HTTPException):
            return ""

    def log_tail(self):
        try:
            with open(self.log_path) as f:
                return "\n--- tsserver.log\n" + f.read()[-3000:]
        except OSError:
            return ""


def channel_for(address):
    # Short reconnect backoff: after a restart clients find the server again within a second.
    return grpc.insecure_channel(address, options=[
        ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.min_reconnect_backoff_ms", 200),
        ("grpc.max_reconnect_backoff_ms", 1000)])


# --- load -------------------------------------------------------------------------------------

class Load:
    """LOAD_THREADS threads, each rotating over the five front ends."""

    def __init__(self, record, oracle, server, documents, threads):
        self.record, self.oracle, self.server = record, oracle, server
        self.documents = documents
        self.stop_event = threading.Event()
        self.models_lock = threading.Lock()
        self.promoted = []  # promoted model names, served with listops documents
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                        for i in range(threads)]
        self.channel = channel_for(server.grpc_address)
        self.classifier = pb_grpc.ClassifierStub(self.channel)
        self.inference = v2_grpc.GRPCInferenceServiceStub(self.channel)

    def add_model(self, name):
        with self.models_lock:
            if name not in self.promoted:
                self.promoted.append(name)

    def start(self):
        for thread in self.threads:
            thread.start()

    def stop(self):
        self.stop_event.set()
        for thread in self.threads:
            thread.join(timeout=60)
        self.channel.close()

    def pick(self, rng):
        with self.models_lock:
            names = ["listops", "listops", "source-lang"] + self.promoted
        model = rng.choice(names)
        docs = self.documents["source-lang" if model == "source-lang" else "listops"]
        return model, docs

    def run(self, index):
        rng = random.Random(1000 + index)
        calls = [self.classify, self.stream, self.v2_grpc, self.v2_rest, self.plain]
        turn = index
        while not self.stop_event.is_set():
            front_end = FRONT_ENDS[turn % len(FRONT_ENDS)]
            call = calls[turn % len(calls)]
            turn += 1
            model, docs = self.pick(rng)
            t_sent = self.record.now()
            try:
                failed = call(rng, model, docs, t_sent)
            except Exception as error:  # a bug of the soak itself: say so and go on
                self.record.violation(f"{front_end}: soak error {error!r}\n"
                                      + traceback.format_exc())
                failed = True
            time.sleep(0.2 if failed else 0.01)

    def grpc_failed(self, front_end, error, t_sent):
        self.record.failed(front_end, f"grpc:{error.code().name}", t_sent)
        return True

    def classify(self, rng, model, docs, t_sent):
        i = rng.randrange(len(docs))
        try:
            response = self.classifier.Classify(pb.ClassifyRequest(model=model,
                                                                    document=docs[i]),
                                                timeout=30)
        except grpc.RpcError as error:
            return self.grpc_failed("classify", error, t_sent)
        self.oracle.check("classify", model, i, response.model_version, response.label,
                          [p.probability for p in response.probabilities])
        return False

    def stream(self, rng, model, docs, t_sent):
        picks = [rng.randrange(len(docs)) for _ in range(4)]
        requests = [pb.ClassifyRequest(model=model, document=docs[i], request_id=f"r{n}")
                    for n, i in enumerate(picks)]
        seen = set()
        failed = False
        try:
            for response in self.classifier.ClassifyStream(iter(requests), timeout=30):
                n = int(response.request_id[1:])
                if n in seen:
                    self.record.violation(f"stream: request_id {response.request_id} "
                                          "answered twice")
                seen.add(n)
                if response.error_code != 0:
                    code = CODE_BY_NUMBER.get(response.error_code, str(response.error_code))
                    self.record.failed("stream", f"grpc:{code}", t_sent)
                    failed = True
                    continue
                self.oracle.check("stream", model, picks[n], response.model_version,
                                  response.label, [p.probability for p in response.probabilities])
        except grpc.RpcError as error:
            return self.grpc_failed("stream", error, t_sent)
        if len(seen) != len(requests):
            self.record.violation(f"stream: {len(requests)} requests, {len(seen)} answers and "
                                  "no error")
        return failed

    def v2_grpc(self, rng, model, docs, t_sent):
        i = rng.randrange(len(docs))
        request = v2.ModelInferRequest(model_name=model, id="soak")
        tensor = request.inputs.add(name="document", datatype="BYTES", shape=[1])
        if rng.random() < 0.5:
            request.raw_input_contents.append(struct.pack("<I", len(docs[i])) + docs[i])
        else:
            tensor.contents.bytes_contents.append(docs[i])
        try:
            response = self.inference.ModelInfer(request, timeout=30)
        except grpc.RpcError as error:
            return self.grpc_failed("v2_grpc", error, t_sent)
        outputs = {o.name: (o, raw) for o, raw in zip(response.outputs,
                                                     response.raw_output_contents)}
        raw = outputs["probabilities"][1]
        probabilities = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        label_raw = outputs["label"][1]
        label = label_raw[4:4 + struct.unpack_from("<I", label_raw)[0]].decode()
        self.oracle.check("v2_grpc", model, i, response.model_version, label, probabilities)
        return False

    def http(self, front_end, path, body, t_sent):
        """(status, parsed body) or None after recording the failure."""
        connection = http.client.HTTPConnection(*self.server.http_address, timeout=30)
        try:
            connection.request("POST", path, body=json.dumps(body).encode(),
                               headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            status, data = response.status, response.read()
        except ConnectionRefusedError:
            self.record.failed(front_end, "conn:refused", t_sent)
            return None
        except (OSError, http.client.HTTPException) as error:
            self.record.failed(front_end, f"conn:{type(error).__name__}", t_sent)
            return None
        finally:
            connection.close()
        try:
            parsed = json.loads(data)
        except ValueError:
            self.record.violation(f"{front_end}: HTTP {status} with a body that is not JSON: "
                                  f"{data[:200]!r}")
            return None
        if status != 200:
            self.record.failed(front_end, f"http:{status} {parsed.get('code', '?')}", t_sent)
            return None
        return parsed

    def v2_rest(self, rng, model, docs, t_sent):
        i = rng.randrange(len(docs))
        body = {"id": "soak", "inputs": [{"name": "document", "datatype": "BYTES", "shape": [1],
                                          "data": [docs[i].decode()]}]}
        parsed = self.http("v2_rest", f"/v2/models/{model}/infer", body, t_sent)
        if parsed is None:
            return True
        outputs = {o["name"]: o["data"] for o in parsed["outputs"]}
        self.oracle.check("v2_rest", model, i, parsed.get("model_version"), outputs["label"][0],
                          outputs["probabilities"])
        return False

    def plain(self, rng, model, docs, t_sent):
        i = rng.randrange(len(docs))
        if rng.random() < 0.5:
            body = {"text": docs[i].decode()}
        else:
            body = {"document_base64": base64.b64encode(docs[i]).decode()}
        parsed = self.http("plain", f"/v1/models/{model}:classify", body, t_sent)
        if parsed is None:
            return True
        probabilities = [p["probability"] for p in sorted(parsed["probabilities"],
                                                          key=lambda p: p["index"])]
        self.oracle.check("plain", model, i, parsed.get("model_version"), parsed["label"],
                          probabilities)
        return False


# --- jobs ---------------------------------------------------------------------------------------

STATE_NAME = None  # filled after the stubs exist
KIND_NAME = None


class JobInfo:
    def __init__(self, job_id, kind, flavour, max_retries, submitted_t, spec_summary):
        self.id, self.kind, self.flavour = job_id, kind, flavour
        self.max_retries = max_retries
        self.submitted_t = submitted_t
        self.spec_summary = spec_summary
        self.last = None  # the last Job message seen
        self.first_terminal = None
        self.watch_final = None  # the state of the last STATE event streamed
        self.watch_final_t = None
        self.lag_reported = False
        self.watch_events = collections.Counter()
        self.faults = []  # fault kinds this job took
        self.resumed_expected = False
        self.promoted = False
        self.outcome = None  # the final check's verdict


class Jobs:
    """Submits, watches, promotes; answers what the fault injector asks about jobs."""

    def __init__(self, record, oracle, load, server, args, documents):
        self.record, self.oracle, self.load, self.server = record, oracle, load, server
        self.args = args
        self.documents = documents
        self.lock = threading.Lock()
        self.jobs = collections.OrderedDict()  # id -> JobInfo, in submission order
        self.promotions = {}  # model -> last acknowledged version
        self.promotion_log = []
        self.calls = collections.Counter()  # Jobs RPC -> ok
        self.submit_enabled = threading.Event()
        self.submit_enabled.set()
        self.disk_full = threading.Event()  # set while the state directory is full
        self.stop_event = threading.Event()
        self.channel = channel_for(server.grpc_address)
        self.stub = jobs_grpc.JobsStub(self.channel)
        self.classifier = pb_grpc.ClassifierStub(self.channel)
        self.turn = 0
        self.promotion_count = 0
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.watchers = []
        self.fresh_steps = args.fresh_steps
        self.tune_steps = args.tune_steps

    # -- calls ---------------------------------------------------------------------------------

    def call(self, name, request, timeout=30):
        """One Jobs RPC; the response, or None after recording its failure code."""
        t_sent = self.record.now()
        try:
            response = getattr(self.stub, name)(request, timeout=timeout)
        except grpc.RpcError as error:
            self.record.failed("jobs", f"grpc:{error.code().name}", t_sent,
                               f"({name}: {error.details()[:300]})")
            with self.record.lock:
                self.record.notes.append(f"[{t_sent:7.1f}s] {name}: {error.code().name}: "
                                         f"{error.details()[:300]}")
            return None
        with self.record.lock:
            self.calls[name] += 1
        return response

    def training_spec(self, flavour, n, max_retries):
        spec = jobs_pb.TrainingSpec(name=f"soak-{flavour}-{n}", batch_size=16, log_interval=10,
                                    threads=1, max_retries=max_retries, seed=n)
        if flavour == "fresh":
            steps = self.fresh_steps
            spec.model.CopyFrom(jobs_pb.ModelSpec(embed_dim=32, depth=1, heads=4, mlp_ratio=2,
                                                  max_length=128))
            length = 120
        else:
            steps = self.tune_steps
            spec.init_from = "listops-demo.tsckpt"
            spec.optimizer.lr = 0.0005
            length = 200
        spec.steps = steps
        spec.checkpoint_interval = steps // 4
        spec.eval_interval = steps // 4
        spec.data.train.format = "listops"
        spec.data.train.generate.CopyFrom(jobs_pb.ListOpsGenerate(
            count=4000, min_length=10, max_length=length, seed=100 + n))
        spec.data.validation.format = "listops"
        spec.data.validation.generate.CopyFrom(jobs_pb.ListOpsGenerate(
            count=200, min_length=10, max_length=length, seed=2002))
        return spec

    def submit_next(self):
        n = self.turn
        self.turn += 1
        flavour = ("fresh", "tune", "eval", "tune")[n % 4]
        if flavour == "eval":
            with self.lock:
                done = [j for j in self.jobs.values()
                        if j.kind == "TRAINING" and j.first_terminal == "SUCCEEDED"]
            spec = jobs_pb.EvaluationSpec(name=f"soak-eval-{n}", batch_size=32, threads=1)
            if done and n % 8 == 2:
                spec.job_id = done[-1].id
                target = f"job_id {done[-1].id}"
            else:
                spec.model = "listops"
                target = "model listops"
            spec.data.format = "listops"
            spec.data.generate.CopyFrom(jobs_pb.ListOpsGenerate(count=300, min_length=10,
                                                                max_length=200, seed=7))
            response = self.call("SubmitEvaluation", jobs_pb.SubmitEvaluationRequest(spec=spec))
            kind, retries, summary = "EVALUATION", 0, f"evaluation of {target}, 300 examples"
        else:
            retries = 1 if (flavour == "tune" and n % 8 == 3) else 0
            spec = self.training_spec(flavour, n, retries)
            response = self.call("SubmitTraining", jobs_pb.SubmitTrainingRequest(spec=spec))
            kind = "TRAINING"
            summary = (f"{flavour} training, {spec.steps} steps, max_retries {retries}")
        if response is None:
            return
        info = JobInfo(response.id, kind, flavour, retries, self.record.now(), summary)
        info.last = response
        if self.disk_full.is_set():  # acknowledged while the disk was full
            info.faults.append("disk_full")
        with self.lock:
            self.jobs[response.id] = info
        log(f"submitted {response.id}: {summary}")
        watcher = threading.Thread(target=self.watch, args=(info,), daemon=True)
        self.watchers.append(watcher)
        watcher.start()

    def watch(self, info):
        """WatchJob until the final STATE event; reconnects across restarts."""
        while not self.stop_event.is_set():
            t_sent = self.record.now()
            try:
                for event in self.stub.WatchJob(jobs_pb.WatchJobRequest(id=info.id),
                                                timeout=3600):
                    kind = jobs_pb.JobEvent.Type.Name(event.type)
                    state = STATE_NAME(event.job.state)
                    with self.lock:
                        info.watch_events[kind] += 1
                        if kind == "STATE":
                            info.watch_final = state
                    if kind in ("SNAPSHOT", "STATE") and state in TERMINAL:
                        with self.lock:
                            info.watch_final = state
                            info.watch_final_t = self.record.now()
                        return
                with self.record.lock:
                    self.calls["WatchJob"] += 1
            except grpc.RpcError as error:
                code = error.code().name
                self.record.failed("jobs_watch", f"grpc:{code}", t_sent)
                if code in BAD_GRPC_CODES:
                    return
            time.sleep(1.0)

    def active(self):
        """Jobs neither GetJob nor WatchJob has seen end (a job whose final state the store
        could not record keeps reading RUNNING: it is reported once and not waited for)."""
        now = self.record.now()
        out = []
        with self.lock:
            jobs = list(self.jobs.values())
        for j in jobs:
            if j.first_terminal is not None:
                continue
            if j.watch_final in TERMINAL and now - j.watch_final_t > 20:
                if not j.lag_reported:
                    j.lag_reported = True
                    self.record.violation(
                        f"{j.id}: WatchJob streamed its final state {j.watch_final} at "
                        f"{j.watch_final_t:.0f} s; GetJob still says "
                        f"{STATE_NAME(j.last.state)} 20 s later")
                continue
            out.append(j)
        return out

    def poll(self):
        for info in self.active():
            response = self.call("GetJob", jobs_pb.GetJobRequest(id=info.id), timeout=10)
            if response is None:
                continue
            state = STATE_NAME(response.state)
            with self.lock:
                info.last = response
                newly_done = state in TERMINAL and info.first_terminal is None
                if newly_done:
                    info.first_terminal = state
            if newly_done:
                log(f"{info.id} {state} {response.reason[:160]}")
                if state == "SUCCEEDED" and info.kind == "TRAINING":
                    self.promote(info)

    def promote(self, info):
        self.promotion_count += 1
        model = "soak-fresh" if info.flavour == "fresh" else "listops-tuned"
        request = jobs_pb.PromoteCheckpointRequest(model=model, job_id=info.id)
        if self.promotion_count % 3 == 0:
            request.which = jobs_pb.CHECKPOINT_CHOICE_LAST
        if self.promotion_count % 4 == 0:
            request.require_at_least_current_accuracy = True
        self.promote_request(request, info)

    def promote_request(self, request, info=None):
        """Promotes; on success computes the new version's oracle. The version or None."""
        self.oracle.begin_promotion(request.model)
        try:
            return self.promote_and_compute(request, info)
        finally:
            self.oracle.end_promotion(request.model)

    def promote_and_compute(self, request, info):
        response = self.call("PromoteCheckpoint", request, timeout=60)
        if response is None:
            return None
        version = response.model.version
        with self.lock:
            self.promotions[request.model] = version
            self.promotion_log.append({"t": round(self.record.now(), 1), "model": request.model,
                                       "version": version, "job": request.job_id,
                                       "which": "last" if request.which else "best",
                                       "previous": response.previous_version})
            if info is not None:
                info.promoted = True
        log(f"promoted {request.job_id} to {request.model} version {version}")
        try:
            self.oracle.compute(self.classifier, request.model, self.documents["listops"],
                                expect_version=version)
        except (grpc.RpcError, RuntimeError) as error:
            self.record.note(f"oracle of {request.model}@{version} not computed: {error}")
        self.load.add_model(request.model)
        return version

    def run(self):
        while not self.stop_event.is_set():
            try:
                self.poll()
                if self.submit_enabled.is_set():
                    active = self.active()
                    if len(active) < 2:
                        self.submit_next()
            except Exception as error:
                self.record.violation(f"job driver: soak error {error!r}\n"
                                      + traceback.format_exc())
            self.stop_event.wait(1.0)

    def start(self):
        self.thread.start()

    def stop(self):
        self.stop_event.set()
        self.thread.join(timeout=60)

    # -- checks --------------------------------------------------------------------------------

    def check_nothing_lost(self, when):
        """Every acknowledged job exists and kept a terminal state; every promotion served."""
        with self.lock:
            jobs = list(self.jobs.values())
            promotions = dict(self.promotions)
        lost = 0
        for info in jobs:
            response = self.call("GetJob", jobs_pb.GetJobRequest(id=info.id), timeout=20)
            if response is None:
                lost += 1
                self.record.violation(f"{when}: acknowledged job {info.id} cannot be read")
                continue
            state = STATE_NAME(response.state)
            if info.first_terminal is not None and state != info.first_terminal:
                self.record.violation(f"{when}: {info.id} was {info.first_terminal}, "
                                      f"now {state}")
        for model, version in promotions.items():
            try:
                served = self.classifier.GetModel(pb.GetModelRequest(name=model), timeout=20)
            except grpc.RpcError as error:
                self.record.violation(f"{when}: promoted model {model} not served: "
                                      f"{error.code().name} {error.details()[:200]}")
                continue
            if served.version != version:
                self.record.violation(f"{when}: {model} serves version {served.version}, the "
                                      f"last acknowledged promotion gave {version}")
        return len(jobs) - lost, len(promotions)

    def history(self, job_id):
        loss, validations, token = [], [], ""
        while True:
            page = self.call("GetJobHistory", jobs_pb.GetJobHistoryRequest(
                id=job_id, page_size=1000, page_token=token), timeout=30)
            if page is None:
                return None, None
            loss += [p.step for p in page.loss_curve]
            validations += [(v.step, v.examples) for v in page.validations]
            token = page.next_page_token
            if not token:
                return loss, validations

    def final_check(self):
        """Each job's end state against its watch stream, its faults and its history."""
        listed, token = set(), ""
        while True:
            page = self.call("ListJobs", jobs_pb.ListJobsRequest(page_size=1000,
                                                                 page_token=token))
            if page is None:
                break
            listed.update(j.id for j in page.jobs)
            token = page.next_page_token
            if not token:
                break
        with self.lock:
            jobs = list(self.jobs.values())
        for info in jobs:
            if info.id not in listed:
                self.record.violation(f"acknowledged job {info.id} missing from ListJobs")
            job = self.call("GetJob", jobs_pb.GetJobRequest(id=info.id))
            if job is None:
                info.outcome = "unreadable"
                continue
            info.last = job
            state = STATE_NAME(job.state)
            problems = self.expected_problems(info, job, state)
            info.outcome = state
            for problem in problems:
                self.record.violation(f"{info.id} ({info.spec_summary}; faults "
                                      f"{info.faults or 'none'}): {problem}")

    def expected_problems(self, info, job, state):
        problems = []
        if state not in TERMINAL:
            return [f"still {state} at the end"]
        if info.watch_final is not None and info.watch_final != state:
            problems.append(f"WatchJob's final STATE event said {info.watch_final}, GetJob "
                            f"says {state}")
        if info.watch_final is None:
            problems.append("WatchJob streamed no final STATE event")
        if info.first_terminal is not None and info.first_terminal != state:
            problems.append(f"first seen {info.first_terminal}, now {state}")
        reason = job.reason
        kills = info.faults.count("kill")
        hangs = info.faults.count("stop_long")
        cancelled = "cancel" in info.faults
        disk = "disk_full" in info.faults
        if cancelled:
            if state != "CANCELLED":
                problems.append(f"cancelled, but ended {state} ({reason[:200]})")
        elif kills + hangs > info.max_retries:
            if state != "FAILED":
                problems.append(f"{kills} SIGKILL and {hangs} long SIGSTOP with max_retries "
                                f"{info.max_retries}, but ended {state}")
            elif kills and not hangs and "SIGKILL" not in reason:
                problems.append(f"FAILED after SIGKILL without naming it: {reason[:200]}")
            elif hangs and not kills and "heartbeat" not in reason:
                problems.append(f"FAILED after a long SIGSTOP without naming the heartbeat: "
                                f"{reason[:200]}")
        elif state == "FAILED":
            if not disk:
                problems.append(f"FAILED without a fault that explains it: {reason[:300]}")
            elif not reason:
                problems.append("FAILED with an empty reason")
        elif state != "SUCCEEDED":
            problems.append(f"ended {state}: {reason[:200]}")
        elif kills + hangs and job.progress.retries < kills + hangs:
            problems.append(f"SUCCEEDED after {kills + hangs} worker failures but "
                            f"progress.retries = {job.progress.retries}")
        if info.resumed_expected and job.progress.resumes < 1 and state == "SUCCEEDED":
            problems.append("running at a restart, but progress.resumes = 0")
        # The history agrees with the state.
        loss, validations = self.history(info.id)
        if loss is None:
            return problems + ["GetJobHistory failed"]
        if any(b <= a for a, b in zip(loss, loss[1:])):
            problems.append(f"loss curve steps not strictly increasing: {loss}")
        if any(b[0] <= a[0] for a, b in zip(validations, validations[1:])):
            problems.append(f"validation steps not strictly increasing: {validations}")
        if info.kind == "TRAINING":
            total = job.progress.total_steps
            if state == "SUCCEEDED":
                if not loss or loss[-1] != total:
                    problems.append(f"SUCCEEDED, but the loss curve ends at step "
                                    f"{loss[-1] if loss else None} of {total}")
                if not validations or validations[-1][0] != total:
                    problems.append(f"SUCCEEDED, but the last validation is "
                                    f"{validations[-1] if validations else None}, not step "
                                    f"{total}")
                if not any(c.kind == "best" for c in job.checkpoints):
                    problems.append("SUCCEEDED without a best checkpoint")
            elif loss and loss[-1] > total:
                problems.append(f"loss curve past total_steps {total}")
        else:
            if state == "SUCCEEDED":
                if validations != [(0, 300)] or job.report.examples != 300:
                    problems.append(f"evaluation SUCCEEDED, history {validations}, report "
                                    f"examples {job.report.examples}")
        return problems


# --- faults ---------------------------------------------------------------------------------------

class StateFs:
    """The state directory's own small filesystem: tmpfs, else ext4 on a loop device."""

    def __init__(self, work, size_mib):
        self.path = os.path.join(work, "statefs")
        os.makedirs(self.path)
        self.kind = None
        self.image = None
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mib}m,mode=0755",
                                 "soak-state", self.path], capture_output=True, text=True)
        if result.returncode == 0:
            self.kind = f"tmpfs of {size_mib} MiB"
            return
        log(f"tmpfs mount failed ({result.stderr.strip()}); trying an ext4 loop image")
        self.image = os.path.join(work, "state.img")
        try:
            with open(self.image, "wb") as f:
                f.truncate(size_mib * MIB)
            subprocess.run(["mkfs.ext4", "-q", "-F", self.image], check=True,
                           capture_output=True)
            subprocess.run(["mount", "-o", "loop", self.image, self.path], check=True,
                           capture_output=True)
            self.kind = f"ext4 image of {size_mib} MiB on a loop device"
        except (OSError, subprocess.CalledProcessError) as error:
            log(f"loop mount failed ({error}); plain directory, no disk-full fault")
            self.kind = None

    def mounted(self):
        return self.kind is not None

    def fill(self):
        """Writes a filler file until ENOSPC; its size."""
        filler = os.path.join(self.path, "soak-filler")
        written = 0
        with open(filler, "wb", buffering=0) as f:
            for chunk in (MIB, 4096, 512):
                block = b"\0" * chunk
                while True:
                    try:
                        f.write(block)
                        written += chunk
                    except OSError as error:
                        if error.errno != errno.ENOSPC:
                            raise
                        break
        return written

    def release(self):
        os.unlink(os.path.join(self.path, "soak-filler"))

    def free_bytes(self):
        s = os.statvfs(self.path)
        return s.f_bavail * s.f_frsize

    def unmount(self):
        if self.kind is None:
            return
        for _ in range(10):
            if subprocess.run(["umount", self.path], capture_output=True).returncode == 0:
                return
            time.sleep(1)
        subprocess.run(["umount", "-l", self.path], capture_output=True)


class Faults:
    def __init__(self, record, server, jobs, load, statefs, duration_s):
        self.record, self.server, self.jobs, self.load = record, server, jobs, load
        self.statefs = statefs
        self.duration_s = duration_s
        self.restarts = []
        self.store_errors = 0.0  # taylorshift_job_store_errors_total of processes stopped
        self.server_lock = threading.Lock()  # held while the server is down on purpose
        d = duration_s
        hold_s = min(90.0, max(10.0, 0.05 * d))
        stop_long_s = HEARTBEAT_TIMEOUT_MS / 1000 + 4
        self.schedule = [
            (0.12, "kill", {}), (0.20, "stop_short", {"seconds": 3.0}),
            (0.28, "stop_long", {"seconds": stop_long_s}), (0.36, "restart", {}),
            (0.46, "disk_full", {"seconds": hold_s}), (0.56, "kill", {}),
            # After the second server process's warm-up, so that RSS flat judges the attack.
            (0.58, "listener_attack", {"seconds": min(60.0, max(15.0, 0.04 * d))}),
            (0.62, "stop_long", {"seconds": stop_long_s}), (0.68, "restart", {}),
            (0.76, "stop_short", {"seconds": 3.0}), (0.82, "kill", {}), (0.88, "cancel", {}),
        ]
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def start(self):
        self.thread.start()

    def run(self):
        for fraction, kind, options in self.schedule:
            if self.stop_event.wait(max(0.0, fraction * self.duration_s - self.record.now())):
                return
            try:
                getattr(self, kind)(**options)
            except Exception as error:
                self.record.violation(f"fault {kind}: soak error {error!r}\n"
                                      + traceback.format_exc())

    def target(self, wait_s=90, prefer_training=True, min_age_s=2.0):
        """(pid, job info, age) of a running worker, waiting for one up to wait_s."""
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and not self.stop_event.is_set():
            candidates = []
            for pid, job_id, age, _ in self.server.workers():
                with self.jobs.lock:
                    info = self.jobs.jobs.get(job_id)
                if info is None or age < min_age_s or info.faults:
                    continue
                candidates.append((info.kind == "TRAINING" and info.flavour == "tune",
                                   info.kind == "TRAINING", pid, info, age))
            if candidates:
                candidates.sort(key=lambda c: (c[0], c[1]) if prefer_training else (0, 0),
                                reverse=True)
                _, _, pid, info, age = candidates[0]
                return pid, info, age
            time.sleep(0.5)
        return None

    def kill(self):
        found = self.target()
        if found is None:
            self.record.fault("kill", injected=False, why="no running worker")
            return
        pid, info, age = found
        with self.jobs.lock:
            info.faults.append("kill")
        os.kill(pid, signal.SIGKILL)
        self.record.fault("kill", injected=True, job=info.id, pid=pid,
                          worker_age_s=round(age, 1), max_retries=info.max_retries)

    def stop(self, kind, seconds):
        found = self.target()
        if found is None:
            self.record.fault(kind, injected=False, why="no running worker")
            return
        pid, info, age = found
        with open(f"/proc/{pid}/stat") as f:
            start_ticks = f.read().rsplit(")", 1)[1].split()[19]
        with self.jobs.lock:
            info.faults.append(kind)
        os.kill(pid, signal.SIGSTOP)
        self.record.fault(kind, injected=True, job=info.id, pid=pid, seconds=seconds,
                          max_retries=info.max_retries)
        time.sleep(seconds)
        try:  # only the same process (not a reused PID)
            with open(f"/proc/{pid}/stat") as f:
                same = f.read().rsplit(")", 1)[1].split()[19] == start_ticks
        except OSError:
            same = False
        if same:
            os.kill(pid, signal.SIGCONT)
        log(f"{kind}: {'SIGCONT sent' if same else 'worker already gone'} after {seconds} s")

    def stop_short(self, seconds):
        self.stop("stop_short", seconds)

    def stop_long(self, seconds):
        self.stop("stop_long", seconds)

    def cancel(self):
        found = self.target(prefer_training=True)
        if found is None:
            self.record.fault("cancel", injected=False, why="no running worker")
            return
        _, info, _ = found
        response = self.jobs.call("CancelJob", jobs_pb.CancelJobRequest(id=info.id))
        if response is not None:
            with self.jobs.lock:
                info.faults.append("cancel")
        self.record.fault("cancel", injected=response is not None, job=info.id)

    def restart(self):
        self.jobs.poll()  # the states right before the SIGTERM
        running = []
        with self.jobs.lock:
            for info in self.jobs.jobs.values():
                if info.first_terminal is None and STATE_NAME(info.last.state) == "RUNNING":
                    info.resumed_expected = True
                    info.faults.append("restart")
                    running.append(info)
        rss_before = self.server.rss_bytes()
        self.store_errors += store_errors(self.server.metrics())
        with self.record.lock:
            self.record.windows.append([self.record.now(), None])
        rc, seconds = self.server.stop()
        exited_wall = time.time()
        if rc != 0:
            self.record.violation(f"restart: tsserver exited with {rc} after SIGTERM "
                                  f"({seconds:.1f} s)" + self.server.log_tail())
        t_stop = self.record.now()
        self.server.start()
        up_s = self.record.now() - t_stop
        self.wait_clients()
        with self.record.lock:
            self.record.windows[-1][1] = self.record.now()
        entry = self.record.fault("restart", injected=True, exit_status=rc,
                                  stop_seconds=round(seconds, 1), start_seconds=round(up_s, 1),
                                  rss_before_mib=round((rss_before or 0) / MIB, 1))
        self.finished_before_exit(running, exited_wall)
        time.sleep(2.0)
        jobs_seen, promotions = self.jobs.check_nothing_lost(f"after restart {len(self.restarts) + 1}")
        entry.update(jobs_checked=jobs_seen, promoted_models_checked=promotions)
        self.restarts.append(entry)

    def finished_before_exit(self, running, exited_wall):
        """A job seen RUNNING before the SIGTERM may still finish while the server drains (its
        worker was past its last step boundary): it ended in the old process, whose store has
        its final state, and has nothing to resume. Such a job's end_time is before the old
        server exited; a resumed job's is after the new one started."""
        for info in running:
            response = self.jobs.call("GetJob", jobs_pb.GetJobRequest(id=info.id), timeout=10)
            if response is None or STATE_NAME(response.state) not in TERMINAL:
                continue
            ended = response.end_time.seconds + response.end_time.nanos / 1e9
            if ended <= exited_wall:
                with self.jobs.lock:
                    info.resumed_expected = False
                self.record.note(f"{info.id} was running at the restart's SIGTERM but "
                                 f"{STATE_NAME(response.state)} before the server exited "
                                 f"({exited_wall - ended:.2f} s before): no resume expected")

    def wait_clients(self):
        """Until the load's and the job driver's channels reach the new server (gRPC clients
        back off between reconnects); at most 30 s."""
        for stub in (self.load.classifier, self.jobs.classifier):
            try:
                stub.ListModels(pb.ListModelsRequest(), timeout=30, wait_for_ready=True)
            except grpc.RpcError as error:
                self.record.note(f"after a restart: ListModels {error.code().name}")

    def listener_attack(self, seconds):
        """Issue 41's attacks on the HTTP listener while the load runs: 1,000 idle and 300
        slowloris connections (from 127.0.0.2-7, not the load's address), each reopened when
        closed, for `seconds`; meanwhile a chunked body of up to 1 GiB and a gzip bomb (1 GiB of
        zeros, about 1 MB) to the plain route, each of which must be answered 413."""
        endpoint = attack.Endpoint(*self.server.http_address)
        t_start = self.record.now()
        rss_before = self.server.rss_bytes() or 0
        flood = attack.ConnectionAttack(
            endpoint, seconds, idle_sources=[f"127.0.0.{i}" for i in (2, 3, 4, 5)],
            slowloris_sources=["127.0.0.6", "127.0.0.7"])
        thread = threading.Thread(target=flood.run, daemon=True)
        thread.start()
        bodies = {}
        try:
            time.sleep(min(5.0, seconds / 3))  # the connections are open
            path = "/v1/models/listops:classify"
            bomb = attack.gzip_bomb()
            for name, pieces, headers, chunked in (
                    ("chunked", attack.json_pieces(attack.GIB), {}, True),
                    ("gzip_bomb", attack.split(bomb, 65536),
                     {"Content-Encoding": "gzip", "Content-Length": str(len(bomb))}, False)):
                try:
                    status, body, sent, took = attack.stream_body(
                        endpoint, path, headers, pieces, max_bytes=attack.GIB, time_limit_s=30,
                        chunked=chunked)
                except OSError as error:
                    status, body, sent, took = None, repr(error).encode(), 0, 0.0
                bodies[name] = {"status": status, "seconds": round(took, 2),
                                "sent_mib": round(sent / MIB, 1),
                                "answer": body[:160].decode(errors="replace")}
                if status != 413 and not self.record.in_restart_window(self.record.now()):
                    self.record.violation(f"listener attack: the {name} body was answered "
                                          f"{status}, not 413: {body[:200]!r}")
        finally:
            thread.join(timeout=seconds + 30)
            flood.stop()
            thread.join(timeout=10)
        self.record.fault("listener_attack", seconds=seconds, started=round(t_start, 1),
                          rss_before_mib=round(rss_before / MIB, 1),
                          rss_after_mib=round((self.server.rss_bytes() or 0) / MIB, 1),
                          opened=flood.opens,
                          closed_by_server=flood.closed_by_server, most_open=flood.most_open,
                          bytes_dripped=flood.bytes_dripped, bodies=bodies)

    def disk_full(self, seconds):
        if not self.statefs.mounted():
            self.record.fault("disk_full", injected=False, why="no filesystem of its own")
            return
        free_before = self.statefs.free_bytes()
        self.jobs.disk_full.set()
        written = self.statefs.fill()
        affected = [j for j in self.jobs.active()]
        with self.jobs.lock:
            for info in affected:
                info.faults.append("disk_full")
        entry = self.record.fault("disk_full", injected=True, filler_mib=round(written / MIB, 1),
                                  free_before_mib=round(free_before / MIB, 1),
                                  seconds=seconds, jobs=[j.id for j in affected])
        # While it is full: a submission and a promotion must fail with a specific code.
        probes = {}
        time.sleep(min(3.0, seconds / 3))
        response = self.jobs.call("SubmitTraining", jobs_pb.SubmitTrainingRequest(
            spec=self.jobs.training_spec("fresh", 9000 + int(self.record.now()), 0)))
        probes["submit"] = "OK" if response is not None else "failed"
        if response is not None:
            info = JobInfo(response.id, "TRAINING", "fresh", 0, self.record.now(),
                           "fresh training submitted while the disk was full")
            info.last = response
            info.faults.append("disk_full")
            with self.jobs.lock:
                self.jobs.jobs[response.id] = info
            threading.Thread(target=self.jobs.watch, args=(info,), daemon=True).start()
        with self.jobs.lock:
            done = [j for j in self.jobs.jobs.values()
                    if j.kind == "TRAINING" and j.first_terminal == "SUCCEEDED"]
        if done:
            version = self.jobs.promote_request(jobs_pb.PromoteCheckpointRequest(
                model="soak-full", job_id=done[-1].id))
            probes["promote"] = version or "failed"
        # The job store's last failure codes are in the notes; the free space must still be 0.
        probes["free_bytes_while_full"] = self.statefs.free_bytes()
        entry["probes"] = probes
        end = time.monotonic() + seconds - min(3.0, seconds / 3)
        while time.monotonic() < end and not self.stop_event.is_set():
            time.sleep(0.5)
        self.statefs.release()
        self.jobs.disk_full.clear()
        log(f"disk_full: released after {seconds} s; probes {probes}")
        # The store writes again: a submission is accepted within 30 s.
        deadline = time.monotonic() + 30
        recovered = None
        while time.monotonic() < deadline:
            response = self.jobs.call("ListJobs", jobs_pb.ListJobsRequest(page_size=1))
            if response is not None:
                recovered = True
                break
            time.sleep(1)
        entry["server_answers_after"] = bool(recovered)


# --- main ------------------------------------------------------------------------------------------

# What glibc, the C++ runtime and the kernel print when a process dies of a bug; tsserver
# forwards its workers' stderr into its own log.
CRASH_SIGNATURES = ("corrupted size", "double free", "free(): invalid", "malloc(): ",
                    "malloc_consolidate", "terminate called", "Segmentation fault",
                    "stack smashing", "Assertion `", "AddressSanitizer", "by signal 11",
                    "by signal 6", "SIGSEGV", "SIGABRT", "SIGBUS", "core dumped")


def scan_log(path):
    """Lines of the server log that say a process crashed."""
    found = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if any(signature in line for signature in CRASH_SIGNATURES):
                    found.append(line.strip()[:400])
    except OSError:
        pass
    return found


def store_errors(metrics_text):
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics_text.splitlines()
               if line.startswith("taylorshift_job_store_errors_total{"))


def rss_sampler(record, server, stop_event):
    while not stop_event.wait(1.0):
        rss = server.rss_bytes()
        if rss is not None:
            with record.lock:
                record.rss.append((record.now(), server.incarnation, rss))


def rss_report(record, warmup_s):
    """Per server process: RSS at warm-up end, end, max after warm-up; violations."""
    windows = [(f["started"], f["t"] + 3.0) for f in record.faults
               if f["kind"] == "listener_attack" and "started" in f]

    def attack(t):
        return any(start <= t <= end for start, end in windows)

    by_incarnation = collections.defaultdict(list)
    for t, incarnation, rss in record.rss:
        by_incarnation[incarnation].append((t, rss))
    rows = []
    for incarnation, samples in sorted(by_incarnation.items()):
        t0 = samples[0][0]
        warm = [(t, rss) for t, rss in samples if t - t0 >= warmup_s]
        row = {"process": incarnation, "seconds": round(samples[-1][0] - t0),
               "start_mib": round(samples[0][1] / MIB, 1),
               "max_mib": round(max(r for _, r in samples) / MIB, 1),
               "end_mib": round(samples[-1][1] / MIB, 1)}
        if len(warm) >= 10:
            base = warm[0][1]
            top = max(rss for _, rss in warm)
            row["after_warmup_mib"] = round(base / MIB, 1)
            row["growth_after_warmup_mib"] = round((top - base) / MIB, 1)
            # While the listener attack runs, the server may hold one body of up to
            # http.max_body_bytes (its chunked body is read up to the limit, then refused):
            # judged against the limit plus that body, and flat again after.
            over = [(t, rss) for t, rss in warm
                    if rss - base >= RSS_LIMIT_BYTES + (ATTACK_BODY_BYTES if attack(t) else 0)]
            if over:
                t, rss = max(over, key=lambda sample: sample[1])
                record.violation(f"server process {incarnation}: RSS grew "
                                 f"{(rss - base) / MIB:.1f} MiB after warm-up at {t:.0f} s "
                                 f"({base / MIB:.1f} -> {rss / MIB:.1f} MiB)"
                                 + (" during the listener attack" if attack(t) else ""))
        else:
            row["growth_after_warmup_mib"] = None  # too short to judge
        rows.append(row)
    return rows


def main():
    global STATE_NAME, KIND_NAME
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--tsserver", default=os.path.join(ROOT, "build", "server", "tsserver"),
                        help="tsserver binary; tsworker is taken from the same folder")
    parser.add_argument("--load-threads", type=int, default=4)
    parser.add_argument("--tolerance", type=float, default=1e-5,
                        help="largest absolute difference of a probability from the oracle")
    parser.add_argument("--state-mib", type=int, default=192)
    parser.add_argument("--fresh-steps", type=int, default=0,
                        help="steps of a from-scratch training job (0: 600, 200 under 10 min)")
    parser.add_argument("--tune-steps", type=int, default=0,
                        help="steps of a fine-tuning job (0: 300, 60 under 10 min)")
    parser.add_argument("--warmup-s", type=float, default=0,
                        help="RSS warm-up per server process (0: 120 s, 30 s under 10 min)")
    parser.add_argument("--out", default="", help="write the summary as JSON here too")
    parser.add_argument("--keep", action="store_true", help="keep the scratch folder")
    args = parser.parse_args()
    short = args.minutes < 10
    args.fresh_steps = args.fresh_steps or (200 if short else 600)
    args.tune_steps = args.tune_steps or (60 if short else 300)
    warmup_s = args.warmup_s or (30 if short else 120)
    duration_s = args.minutes * 60

    work = tempfile.mkdtemp(prefix="ts-soak-")
    generate_stubs(os.path.join(work, "stubs"))
    STATE_NAME = lambda value: jobs_pb.JobState.Name(value).replace("JOB_STATE_", "")  # noqa
    KIND_NAME = lambda value: jobs_pb.JobKind.Name(value).replace("JOB_KIND_", "")  # noqa
    data_root = os.path.join(work, "data")
    os.makedirs(data_root)
    shutil.copy(os.path.join(ROOT, "models", "listops-demo.tsckpt"), data_root)
    statefs = StateFs(work, args.state_mib)
    record = Record(time.monotonic())
    server = Server(os.path.abspath(args.tsserver), work,
                    os.path.join(statefs.path, "state"), data_root)
    log(f"scratch folder {work}; state_dir on {statefs.kind or 'a plain directory'}")
    documents = oracle_documents()
    oracle = Oracle(record, args.tolerance)
    stop_sampler = threading.Event()
    load = jobs = faults = None
    summary = {}
    try:
        server.start()
        record.start = time.monotonic()
        channel = channel_for(server.grpc_address)
        classifier = pb_grpc.ClassifierStub(channel)
        for model in ("listops", "source-lang"):
            oracle.fixed_versions[model] = oracle.compute(classifier, model, documents[model])
        channel.close()
        log(f"oracle: {sum(len(d) for d in documents.values())} documents; "
            f"versions {oracle.fixed_versions}")
        threading.Thread(target=rss_sampler, args=(record, server, stop_sampler),
                         daemon=True).start()
        load = Load(record, oracle, server, documents, args.load_threads)
        jobs = Jobs(record, oracle, load, server, args, documents)
        faults = Faults(record, server, jobs, load, statefs, duration_s)
        load.start()
        jobs.start()
        faults.start()
        next_report = 60
        while record.now() < duration_s:
            time.sleep(1.0)
            if server.process.poll() is not None and faults.thread.is_alive() and \
                    not record.in_restart_window(record.now(), slack_s=0):
                record.violation(f"tsserver died by itself (status {server.process.returncode})"
                                 + server.log_tail())
                with record.lock:
                    record.windows.append([record.now(), None])
                server.start()
                faults.wait_clients()
                with record.lock:
                    record.windows[-1][1] = record.now()
            if record.now() >= 0.9 * duration_s:
                jobs.submit_enabled.clear()
            if record.now() >= next_report:
                next_report += 60
                with record.lock:
                    log(f"{record.now():.0f}s: answers {dict(record.ok)}, "
                        f"rss {server.rss_bytes() / MIB:.0f} MiB, jobs {len(jobs.jobs)}, "
                        f"violations {len(record.violations)}")
        faults.stop_event.set()
        faults.thread.join(timeout=300)
        jobs.submit_enabled.clear()
        # Let the last jobs finish under load (at most 4 minutes).
        deadline = time.monotonic() + 240
        while jobs.active() and time.monotonic() < deadline:
            time.sleep(1.0)
        stop_sampler.set()
        load.stop()
        jobs.stop()
        for watcher in jobs.watchers:
            watcher.join(timeout=5)
        metrics_text = server.metrics()
        jobs.check_nothing_lost("at the end")
        jobs.final_check()
        total_store_errors = faults.store_errors + store_errors(metrics_text)
        rc, seconds = server.stop()
        if rc != 0:
            record.violation(f"final SIGTERM: tsserver exited with {rc}")
        crash_lines = scan_log(server.log_path)
        for line in crash_lines:
            record.violation(f"tsserver.log: a process crashed: {line}")
        rss_rows = rss_report(record, warmup_s)
        all_rss = [r for _, _, r in record.rss]
        by_state = collections.Counter(f"{j.kind} {j.outcome}" for j in jobs.jobs.values())
        summary = {
            "minutes": args.minutes,
            "wall_seconds": round(record.now()),
            "tsserver": os.path.abspath(args.tsserver),
            "state_dir_filesystem": statefs.kind or "plain directory (disk-full fault skipped)",
            "load_threads": args.load_threads,
            "tolerance": args.tolerance,
            "answers_checked": dict(record.ok),
            "answers_unchecked": dict(record.unchecked),
            "max_difference_from_oracle": {k: float(f"{v:.3g}")
                                           for k, v in record.max_diff.items()},
            "failures_by_code": {k: dict(v) for k, v in record.failures.items()},
            "failures_outside_restart_windows": {k: dict(v) for k, v in
                                                 record.failures_outside.items() if v},
            "jobs_calls_ok": dict(jobs.calls),
            "rss_mib": {"first": round(all_rss[0] / MIB, 1) if all_rss else None,
                        "last": round(all_rss[-1] / MIB, 1) if all_rss else None,
                        "max": round(max(all_rss) / MIB, 1) if all_rss else None,
                        "warmup_s": warmup_s, "per_process": rss_rows},
            "jobs_by_final_state": dict(by_state),
            "jobs": [{"id": j.id, "what": j.spec_summary, "faults": j.faults,
                      "state": j.outcome, "reason": j.last.reason[:300] if j.last else "",
                      "retries": j.last.progress.retries if j.last else 0,
                      "resumes": j.last.progress.resumes if j.last else 0,
                      "watch_final": j.watch_final, "watch_events": dict(j.watch_events),
                      "promoted": j.promoted}
                     for j in jobs.jobs.values()],
            "promotions": jobs.promotion_log,
            "job_store_errors_total": total_store_errors,
            "faults": record.faults,
            "notes": record.notes[-60:],
            "violations": record.violations,
        }
    except BaseException as error:
        record.violation(f"soak aborted: {error!r}\n{traceback.format_exc()}"
                         + server.log_tail())
        summary.setdefault("violations", record.violations)
    finally:
        stop_sampler.set()
        if load is not None:
            load.stop_event.set()
        if jobs is not None:
            jobs.stop_event.set()
        if faults is not None:
            faults.stop_event.set()
        if server.process is not None and server.process.poll() is None:
            server.stop(timeout_s=30)
        if args.keep:
            if statefs.mounted():
                shutil.copytree(statefs.path, os.path.join(work, "statefs-copy"),
                                ignore_dangling_symlinks=True, dirs_exist_ok=True)
            log(f"kept {work} (server log: {server.log_path})")
        else:
            shutil.copy(server.log_path, os.path.join(tempfile.gettempdir(),
                                                      "ts-soak-last-server.log"))
        statefs.unmount()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    print_summary(summary)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(summary, f, indent=1)
    return 1 if summary.get("violations") else 0


def print_summary(s):
    print("== soak summary")
    if "answers_checked" not in s:
        print(json.dumps(s, indent=1))
        return
    print(f"minutes {s['minutes']} (wall {s['wall_seconds']} s); state_dir on "
          f"{s['state_dir_filesystem']}; {s['load_threads']} load threads; tolerance "
          f"{s['tolerance']}")
    print("calls per front end (answers checked against the oracle / failed by code):")
    for front_end in FRONT_ENDS + ("jobs", "jobs_watch"):
        failed = s["failures_by_code"].get(front_end, {})
        checked = s["answers_checked"].get(front_end, "-")
        print(f"  {front_end:10s} ok {checked!s:>7}  unchecked "
              f"{s['answers_unchecked'].get(front_end, 0):>4}  max diff "
              f"{s['max_difference_from_oracle'].get(front_end, '-')!s:>8}  failed "
              f"{json.dumps(failed)}")
    print(f"  Jobs RPCs that succeeded: {json.dumps(s['jobs_calls_ok'])}")
    print(f"failures outside restart windows: {json.dumps(s['failures_outside_restart_windows'])}")
    r = s["rss_mib"]
    print(f"server RSS (MiB): first {r['first']}, last {r['last']}, max {r['max']}; warm-up "
          f"{r['warmup_s']} s per process")
    for row in r["per_process"]:
        print(f"  process {row['process']}: {row['seconds']} s, start {row['start_mib']}, "
              f"after warm-up {row.get('after_warmup_mib')}, end {row['end_mib']}, max "
              f"{row['max_mib']}, growth after warm-up {row['growth_after_warmup_mib']}")
    print(f"jobs by final state: {json.dumps(s['jobs_by_final_state'])}")
    for j in s["jobs"]:
        print(f"  {j['id']:8s} {j['state']!s:10s} {j['what']}; faults {j['faults'] or '-'}; "
              f"retries {j['retries']} resumes {j['resumes']}"
              + (f"; promoted" if j["promoted"] else "")
              + (f"; reason: {j['reason'][:140]}" if j["reason"] else ""))
    print("promotions:")
    for p in s["promotions"]:
        print(f"  {p}")
    print(f"job store write errors (taylorshift_job_store_errors_total): "
          f"{s['job_store_errors_total']} (all server processes)")
    print("faults injected:")
    for f in s["faults"]:
        print(f"  {json.dumps(f)}")
    print(f"violations: {len(s['violations'])}")
    for v in s["violations"]:
        print(f"  - {v[:2000]}")


def interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, interrupted)
    sys.exit(main())

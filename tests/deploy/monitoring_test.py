#!/usr/bin/python3
"""The shipped dashboards and alert rules against a real Prometheus scraping a real tsserver.

Starts tsserver through the image's entrypoint (deploy/docker/entrypoint.sh, which writes an
untrained model where the image's trained demo model is missing) with the container config
deploy/config/tsserver.yaml, moved to loopback and a temp dir; starts Prometheus (Debian
package) on a free loopback port with the shipped scrape job and rule files, scraping every
second; runs a tiny training job to success and one that fails on malformed data with `tsctl
train --wait`; sends traffic with tsctl, including errors (unknown model, bad top_k, expired
deadlines, a full queue); then evaluates every PromQL expression of every dashboard panel and
every alert rule through /api/v1/query. Each must succeed; each panel must return finite data,
for all models and jobs and for one of each (only the CUDA device-memory panel on a CPU-only
server may be empty); the jobs panels show the two jobs and TaylorShiftJobFailed fires. Also
runs the Dockerfile's HEALTHCHECK command (`tsctl health`) against the server, up and stopped.

Usage: monitoring_test.py --tsserver BIN --tsctl BIN --tsmodel BIN"""

import argparse
import json
import math
import os
import random
import re
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.parse
import urllib.request

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import deploy_lib as lib  # noqa: E402
from deploy_lib import stop, wait_for  # noqa: E402

ARGS = None
RATE_INTERVAL = "1m"

# A job that trains in about a second on one thread: 3 classes of short byte strings.
TRAINING_SPEC = """\
name: monitoring
model: {embed_dim: 32, depth: 1, heads: 4, mlp_ratio: 2, max_length: 64}
data:
  train: {format: jsonl, path: train.jsonl}
  validation: {split: 0.2}
optimizer: {name: adamw, lr: 0.003, warmup_steps: 5}
batch_size: 16
steps: 60
checkpoint_interval: 20
eval_interval: 20
log_interval: 10
threads: 1
"""
TRAINING_STEPS = 60
# Fails when the job loads its data (a line that is not JSON), after it was accepted.
FAILING_SPEC = """\
name: monitoring-broken
model: {embed_dim: 32, depth: 1, heads: 4, mlp_ratio: 2, max_length: 64}
data:
  train: {format: jsonl, path: broken.jsonl}
batch_size: 16
steps: 10
threads: 1
"""


def training_lines(count, seed=7):
    """JSON lines of three classes: digits, lower-case letters, punctuation."""
    rng = random.Random(seed)
    alphabets = {"digits": "0123456789", "letters": "abcdefghijklmnopqrstuvwxyz",
                 "punctuation": "!?.,;:-()[]"}
    lines = []
    for i in range(count):
        label = sorted(alphabets)[i % len(alphabets)]
        text = "".join(rng.choice(alphabets[label]) for _ in range(rng.randint(8, 48)))
        lines.append(json.dumps({"text": text, "label": label}) + "\n")
    return "".join(lines)


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_get(url, timeout_s=10):
    with urllib.request.urlopen(url, timeout=timeout_s) as response:
        return response.status, response.read().decode()


def healthcheck_command(grpc_address):
    """The runtime stage's HEALTHCHECK command of deploy/Dockerfile, aimed at grpc_address."""
    with open(os.path.join(lib.DEPLOY, "Dockerfile")) as f:
        text = re.sub(r"\\\n", " ", f.read())
    line = [l for l in text.splitlines() if l.startswith("HEALTHCHECK")][0]
    argv = json.loads(line[line.index("CMD") + 3:].strip())
    argv[argv.index("--server") + 1] = grpc_address
    assert argv[0] == "tsctl"
    return [ARGS.tsctl] + argv[1:]


class Stack:
    """tsserver + Prometheus in a temp dir; close() stops both."""

    def __init__(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="ts-monitoring-")
        self.dir = self.tmp.name
        self.server = None
        self.prometheus = None
        self.logs = []

    def start_server(self):
        with open(os.path.join(lib.DEPLOY, "config", "tsserver.yaml")) as f:
            config = yaml.safe_load(f)
        # The container config with its paths moved into the temp dir.
        checkpoint = os.path.join(self.dir, "models", "listops-demo.tsckpt")
        config["state_dir"] = os.path.join(self.dir, "state")
        config["data_root"] = os.path.join(self.dir, "data")
        os.makedirs(config["data_root"])
        with open(os.path.join(config["data_root"], "train.jsonl"), "w") as f:
            f.write(training_lines(240))
        with open(os.path.join(config["data_root"], "broken.jsonl"), "w") as f:
            f.write(training_lines(10) + "this line is not JSON\n")
        config["models"][0]["checkpoint"] = checkpoint
        # The other shipped models from the repository (the image has them at these names).
        for model in config["models"][1:]:
            model["checkpoint"] = os.path.join(lib.ROOT, "models",
                                               os.path.basename(model["checkpoint"]))
        # Loopback, any free port (the container config listens on 0.0.0.0:8080).
        if "http" in config:
            config["http"]["listen"] = "127.0.0.1:0"
        # A second model with a 2-request queue, so that queue_full rejections happen.
        config["models"].append({"name": "tiny-queue", "checkpoint": checkpoint,
                                 "batching": {"max_queue_size": 2, "max_batch_size": 1}})
        # The GPU gauges through the stand-in NVML library (tests/testing/fake_nvml.cc, two
        # GPUs), so that the GPU panel's queries have data on a machine without a GPU.
        if ARGS.fake_nvml:
            config["nvml_library"] = ARGS.fake_nvml
        config_path = os.path.join(self.dir, "tsserver.yaml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)
        self.ready_file = os.path.join(self.dir, "ready")
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([os.path.dirname(ARGS.tsserver),
                                       os.path.dirname(ARGS.tsmodel), env.get("PATH", "")])
        env["TS_DEMO_CHECKPOINT"] = checkpoint
        log = open(os.path.join(self.dir, "tsserver.log"), "w")
        self.logs.append(log)
        self.server = subprocess.Popen(
            [os.path.join(lib.DEPLOY, "docker", "entrypoint.sh"), "--config", config_path,
             "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
             "--ready-file", self.ready_file, "--threads", "2"],
            stdout=log, stderr=subprocess.STDOUT, env=env)

        def ready():
            if self.server.poll() is not None:
                raise AssertionError(f"tsserver exited with {self.server.returncode}: "
                                     + self.log_tail())
            if not os.path.exists(self.ready_file):
                return None
            with open(self.ready_file) as f:
                fields = dict(l.split("=", 1) for l in f.read().split() if "=" in l)
            return fields if "grpc" in fields and "metrics" in fields else None

        fields = wait_for(ready, 90, "tsserver's ready file")
        self.grpc = fields["grpc"]
        self.metrics = fields["metrics"]
        assert os.path.isfile(checkpoint), "the entrypoint did not write the demo model"

    def start_prometheus(self):
        with open(lib.PROMETHEUS_CONFIG) as f:
            shipped = yaml.safe_load(f)
        job = [j for j in shipped["scrape_configs"] if j["job_name"] == "taylorshift"][0]
        for static in job["static_configs"]:
            static["targets"] = [self.metrics]
        job["scrape_interval"] = "1s"
        config = {
            "global": dict(shipped.get("global", {}), scrape_interval="1s",
                           evaluation_interval="1s"),
            "rule_files": lib.rule_files(),
            "scrape_configs": [job],
        }
        config_path = os.path.join(self.dir, "prometheus.yml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)
        check = subprocess.run([lib.PROMTOOL, "check", "config", config_path],
                               capture_output=True, text=True, timeout=60)
        assert check.returncode == 0, check.stdout + check.stderr
        self.prometheus_url = f"http://127.0.0.1:{free_port()}"
        log = open(os.path.join(self.dir, "prometheus.log"), "w")
        self.logs.append(log)
        self.prometheus = subprocess.Popen(
            [lib.PROMETHEUS, f"--config.file={config_path}",
             f"--storage.tsdb.path={os.path.join(self.dir, 'tsdb')}",
             f"--web.listen-address={self.prometheus_url[len('http://'):]}",
             "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)

        def ready():
            if self.prometheus.poll() is not None:
                raise AssertionError(f"prometheus exited with {self.prometheus.returncode}: "
                                     + self.log_tail())
            try:
                return http_get(self.prometheus_url + "/-/ready", 2)[0] == 200
            except OSError:
                return False

        wait_for(ready, 60, "Prometheus /-/ready")

    def log_tail(self):
        out = ""
        for log in self.logs:
            path = log.name
            log.flush()
            with open(path) as f:
                out += f"\n--- {os.path.basename(path)}\n" + f.read()[-3000:]
        return out

    def api(self, path, **params):
        url = f"{self.prometheus_url}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
        try:
            _, body = http_get(url)
        except urllib.error.HTTPError as e:
            body = e.read().decode()
        return json.loads(body)

    def query(self, expr):
        return self.api("query", query=expr)

    def tsctl(self, *args, expect_ok=True):
        result = subprocess.run([ARGS.tsctl, *args, "--server", self.grpc],
                                capture_output=True, text=True, timeout=120)
        if expect_ok:
            assert result.returncode == 0, f"tsctl {args}: {result.stdout}{result.stderr}"
        return result

    def train(self, spec_text, name):
        """Submits a training job and follows it to its end (`tsctl train --wait --json`);
        returns (tsctl's exit status, the job as the last line prints it)."""
        spec = os.path.join(self.dir, f"{name}.yaml")
        with open(spec, "w") as f:
            f.write(spec_text)
        result = self.tsctl("train", "--spec", spec, "--wait", "--json", "--timeout-ms",
                            "120000", expect_ok=False)
        lines = [l for l in result.stdout.splitlines() if l.strip()]
        assert lines, f"tsctl train printed nothing: {result.stderr}"
        return result.returncode, json.loads(lines[-1])

    def close(self):
        for process in (self.prometheus, self.server):
            if process is not None:
                stop(process)
        for log in self.logs:
            log.close()
        self.tmp.cleanup()


def server_counts(stack, prefix):
    """The sum of tsserver's samples whose line starts with prefix, as it reports them now."""
    _, text = http_get(f"http://{stack.metrics}/metrics")
    return sum(float(l.rsplit(" ", 1)[1]) for l in text.splitlines() if l.startswith(prefix))


def scraped_requests_total(stack):
    """sum(taylorshift_requests_total) as tsserver reports it now."""
    return server_counts(stack, "taylorshift_requests_total{")


def exported_families(stack):
    _, text = http_get(f"http://{stack.metrics}/metrics")
    return {l.split()[2] for l in text.splitlines() if l.startswith("# TYPE ")}


def finite_values(result):
    data = result["data"]
    if data["resultType"] == "vector":
        values = [float(s["value"][1]) for s in data["result"]]
    elif data["resultType"] == "matrix":
        values = [float(v[1]) for s in data["result"] for v in s["values"]]
    else:
        values = [float(data["result"][1])]
    return [v for v in values if math.isfinite(v)]


class MonitoringTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.stack = Stack()
        try:
            cls.stack.start_server()
            cls.stack.start_prometheus()
            cls.send_traffic()
        except BaseException:
            log = cls.stack.log_tail()
            cls.stack.close()
            raise AssertionError("setup failed" + log)

    @classmethod
    def tearDownClass(cls):
        cls.stack.close()

    @classmethod
    def send_traffic(cls):
        s = cls.stack
        # One request per model first, so that the series exist and have been scraped before
        # the load: rate() then sees the load as an increase. Without it a model whose series
        # all appear during its burst has a rate of 0 over 0 (NaN) in the error ratio rule.
        for model in ("listops", "tiny-queue"):
            s.tsctl("bench", "--model", model, "--requests", "1", "--lengths", "fixed:100")
        wait_for(lambda: len(finite_values(s.query(
                     'sum by (model) (taylorshift_requests_total{code="OK"})'))) == 2, 60,
                 "the first scrape of tsserver")
        # Jobs: one that succeeds, then one that fails (the server's first failure, so the
        # failed counter's series is new: TaylorShiftJobFailed must still fire).
        code, job = s.train(TRAINING_SPEC, "train")
        assert code == 0 and job["state"].lower() == "succeeded", job
        cls.trained_job = job["id"]
        code, job = s.train(FAILING_SPEC, "broken")
        assert code != 0 and job["state"].lower() == "failed", job
        cls.failed_job = job["id"]
        time.sleep(2)
        # Both attention paths (the demo model's crossover is 73 tokens).
        s.tsctl("bench", "--model", "listops", "--requests", "120", "--concurrency", "4",
                "--lengths", "uniform:20:1500", "--json")
        # Errors: an unknown model, top_k above the class count, expired deadlines, full queue.
        s.tsctl("bench", "--model", "no-such-model", "--requests", "3", expect_ok=False)
        document = os.path.join(s.dir, "doc.txt")
        with open(document, "w") as f:
            f.write("[MAX 4 3 [MIN 2 3 ] 1 0 [MED 2 9 ] ]")
        s.tsctl("classify", "--model", "listops", "--top-k", "50", document, expect_ok=False)
        # Deadlines that pass while the request waits in the server's queue. One too short
        # expires in the client or in gRPC before tsserver sees the call (nothing is counted),
        # so lengthen it until tsserver has counted some.
        for deadline_ms in ("1", "5", "20", "50", "200"):
            s.tsctl("bench", "--model", "listops", "--requests", "16", "--concurrency", "8",
                    "--lengths", "fixed:1500", "--deadline-ms", deadline_ms, expect_ok=False)
            if server_counts(s, 'taylorshift_rejected_total{model="listops",'
                                'reason="deadline_exceeded"}') > 0:
                break
        else:
            raise AssertionError("no request expired in tsserver's queue")
        full = s.tsctl("bench", "--model", "tiny-queue", "--requests", "60", "--concurrency",
                       "16", "--lengths", "fixed:1500", "--json", expect_ok=False)
        assert "RESOURCE_EXHAUSTED" in full.stdout + full.stderr, full.stdout + full.stderr
        # Prometheus has scraped everything that was sent. Requests that expired client-side
        # are answered by the server a little later, so compare with what tsserver reports now.
        def scraped():
            result = s.query("sum(taylorshift_requests_total)")
            values = finite_values(result) if result.get("status") == "success" else []
            return values and values[0] == scraped_requests_total(s)

        wait_for(scraped, 60, "Prometheus to scrape every request tsserver has counted")
        # rate() needs two samples of a series: wait until every request counter has them (a
        # fixed sleep was not enough on a loaded machine, where scrapes come late).
        def two_samples_each():
            result = s.query("count_over_time(taylorshift_requests_total[5m]) < 2")
            return result.get("status") == "success" and not result["data"]["result"]

        wait_for(two_samples_each, 60, "two samples of every request counter")
        # ...and has evaluated every rule at least once since.
        def evaluated():
            groups = s.api("rules")["data"]["groups"]
            rules = [r for g in groups for r in g["rules"]]
            return rules and all(r["lastEvaluation"] > "2000" for r in rules) and rules
        cls.rules = wait_for(evaluated, 30, "the alert rules to be evaluated")

    def server_is_cpu_only(self):
        result = self.stack.query("taylorshift_model_info")
        return all(not s["metric"]["device"].startswith("cuda") for s in result["data"]["result"])

    def may_be_empty(self, names):
        """Device metrics exist only on CUDA; transient ones only while their events happen."""
        if names & lib.TRANSIENT_METRICS:
            return True
        return bool(names & lib.DEVICE_METRICS) and self.server_is_cpu_only()

    def panel(self, title):
        """(dashboard, panel) of the shipped panel with this title."""
        found = [(b, p) for b in lib.dashboards().values() for p in lib.panels(b)
                 if p["title"] == title]
        self.assertEqual(len(found), 1, title)
        return found[0]

    def panel_result(self, title, **values):
        """The panel's first query for the given variable values (others: all), instant."""
        board, panel = self.panel(title)
        assignment = {v["name"]: ".*" for v in lib.variables(board)} | values
        result = self.stack.query(lib.substitute(panel["targets"][0]["expr"], assignment,
                                                 RATE_INTERVAL))
        self.assertEqual(result.get("status"), "success", f"{title}: {result}")
        return result["data"]["result"]

    def variable_values(self, board):
        """{variable: [values]} from the dashboard's label_values() queries."""
        out = {}
        for variable in lib.variables(board):
            if variable["type"] != "query":
                continue
            query = lib.substitute(lib.variable_query(variable), {k: ".*" for k in out} |
                                   {v["name"]: ".*" for v in lib.variables(board)})
            match = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", query.strip())
            self.assertIsNotNone(match, f"unsupported variable query {query}")
            series = self.stack.api("series", **{"match[]": match.group(1)})
            self.assertEqual(series["status"], "success", series)
            out[variable["name"]] = sorted({s[match.group(2)] for s in series["data"]
                                            if match.group(2) in s})
        return out

    def test_metric_names_exist(self):
        exported = exported_families(self.stack)
        known = exported | lib.DEVICE_METRICS | lib.TRANSIENT_METRICS
        exprs = [t["expr"] for b in lib.dashboards().values() for p in lib.panels(b)
                 for t in p["targets"]]
        exprs += [r["expr"] for _, r in lib.alert_rules()]
        for expr in exprs:
            self.assertLessEqual(lib.metric_names(expr), known, expr)
        # Every serving metric tsserver exports is shown somewhere on a dashboard.
        shown = set()
        for b in lib.dashboards().values():
            for p in lib.panels(b):
                for t in p["targets"]:
                    shown |= lib.metric_names(t["expr"])
        self.assertEqual(exported - shown, set())

    def test_template_variables_resolve(self):
        for name, board in lib.dashboards().items():
            values = self.variable_values(board)
            self.assertEqual(values.get("instance"), [self.stack.metrics], name)
            self.assertIn("listops", values.get("model", []), name)
            self.assertEqual(values.get("training_job"),
                             sorted([self.trained_job, self.failed_job]), name)

    def test_every_panel_query_evaluates(self):
        for name, board in lib.dashboards().items():
            names = [v["name"] for v in lib.variables(board)]
            values = self.variable_values(board)
            scenarios = {
                "all": {n: ".*" for n in names},
                # One instance, model and job, as a user picks them; the job that trained
                # (the failed one stopped before its first step).
                "listops": {n: (values[n][0] if values.get(n) else ".*") for n in names}
                | {"model": "listops", "training_job": self.trained_job},
            }
            checked = 0
            for scenario, assignment in scenarios.items():
                for panel in lib.panels(board):
                    for target in panel["targets"]:
                        expr = lib.substitute(target["expr"], assignment, RATE_INTERVAL)
                        where = f"{name} / {panel['title']} / {target['refId']} ({scenario}): {expr}"
                        result = self.stack.query(expr)
                        self.assertEqual(result.get("status"), "success", f"{where}\n{result}")
                        if not self.may_be_empty(lib.metric_names(expr)):
                            self.assertTrue(finite_values(result), f"{where}: no data\n{result}")
                        checked += 1
            self.assertGreater(checked, 0)

    def test_jobs_panels_show_the_jobs(self):
        trained, failed = self.trained_job, self.failed_job
        states = {s["metric"]["state"]: float(s["value"][1])
                  for s in self.panel_result("Jobs by state")}
        self.assertEqual(states, {"queued": 0, "running": 0, "succeeded": 1, "failed": 1,
                                  "cancelled": 0})
        rows = {(s["metric"]["job_id"], s["metric"]["kind"], s["metric"]["state"])
                for s in self.panel_result("Current job states")}
        self.assertEqual(rows, {(trained, "training", "succeeded"),
                                (failed, "training", "failed")})
        # Each kind and state counted once, although both counters were created at 1.
        finished = {(s["metric"]["kind"], s["metric"]["state"]): float(s["value"][1])
                    for s in self.panel_result("Finished jobs by kind and state")}
        self.assertEqual(finished, {("training", "succeeded"): 1, ("training", "failed"): 1})
        step = self.panel_result("Step", training_job=trained)
        self.assertEqual([float(s["value"][1]) for s in step], [TRAINING_STEPS])
        loss = self.panel_result("Training loss", training_job=trained)
        self.assertTrue(0 < float(loss[0]["value"][1]) < 10, loss)
        accuracy = self.panel_result("Validation accuracy", training_job=trained)
        self.assertTrue(0 <= float(accuracy[0]["value"][1]) <= 1, accuracy)
        rate = self.panel_result("Examples per second", training_job=trained)
        self.assertGreater(float(rate[0]["value"][1]), 0, rate)
        # The failed job stopped before its first step: no progress series.
        self.assertEqual(self.panel_result("Step", training_job=failed), [])
        # The trained job ran all its steps: progress 1, nothing left to wait for.
        progress = self.panel_result("Job progress", training_job=trained)
        self.assertEqual([float(s["value"][1]) for s in progress], [1])
        eta = self.panel_result("Job time left (ETA)", training_job=trained)
        self.assertEqual([float(s["value"][1]) for s in eta], [0])
        self.assertEqual(self.panel_result("Job progress", training_job=failed), [])
        self.assertEqual(self.panel_result("Job time left (ETA)", training_job=failed), [])

    def test_latency_panel_shows_each_front_end(self):
        # tsctl bench sent its requests over gRPC (Classify): the panel's p95 by front end has a
        # finite number of seconds for it. Over 10 minutes, not the 1 minute of the other
        # checks: the traffic may be longer ago than that when this test runs.
        board, panel = self.panel("Request latency p95 by front end and by code")
        assignment = {v["name"]: ".*" for v in lib.variables(board)} | {"model": "listops"}
        result = self.stack.query(lib.substitute(panel["targets"][0]["expr"], assignment, "10m"))
        self.assertEqual(result.get("status"), "success", result)
        rows = result["data"]["result"]
        protocols = {s["metric"]["protocol"] for s in rows if math.isfinite(float(s["value"][1]))}
        self.assertIn("grpc", protocols, rows)

    def test_failed_job_alert_fires(self):
        def firing():
            result = self.stack.query('ALERTS{alertname="TaylorShiftJobFailed",'
                                      'alertstate="firing"}')["data"]["result"]
            return [s["metric"]["kind"] for s in result]

        self.assertEqual(wait_for(firing, 30, "TaylorShiftJobFailed to fire"), ["training"])

    def test_every_alert_rule_evaluates(self):
        # Loaded by the real Prometheus without errors.
        for rule in self.rules:
            self.assertEqual(rule["health"], "ok", rule)
        self.assertEqual(len(self.rules), len(lib.alert_rules()))
        for group, rule in lib.alert_rules():
            expr = rule["expr"].strip()
            result = self.stack.query(expr)
            self.assertEqual(result.get("status"), "success", f"{rule['alert']}: {result}")
            # Each selector matches exported series, so metric names and label values (such as
            # reason="queue_full", state="failed") are what tsserver exports.
            for selector in lib.selectors(expr):
                if self.may_be_empty(lib.metric_names(selector)):
                    continue
                selected = self.stack.query(selector)
                self.assertTrue(finite_values(selected),
                                f"{rule['alert']}: {selector} has no data\n{selected}")
            # The expression without its threshold selects real series too: its aggregations
            # and divisions keep them. Not with `and`/`unless`, which leave out the series
            # that are fine (jobs that are not running, steps that moved).
            if re.search(r"\b(and|unless)\b", expr):
                continue
            match = re.fullmatch(r"(.*?)\s*(?:>|<|==|!=|>=|<=)\s*([-0-9.e*+/ ()]+|Inf)", expr,
                                 re.S)
            if match is None or self.may_be_empty(lib.metric_names(expr)):
                continue
            left = self.stack.query(match.group(1))
            self.assertEqual(left.get("status"), "success", f"{rule['alert']}: {left}")
            self.assertTrue(finite_values(left), f"{rule['alert']}: {match.group(1)} has no data")

    # Named to run last (unittest runs tests in name order): it stops the server.
    def test_zz_docker_healthcheck_follows_the_server(self):
        command = healthcheck_command(self.stack.grpc)
        up = subprocess.run(command, capture_output=True, text=True, timeout=30)
        self.assertEqual(up.returncode, 0, up.stdout + up.stderr)
        self.assertEqual(up.stdout, "SERVING\n")
        stop(self.stack.server)
        self.assertEqual(self.stack.server.returncode, 0, self.stack.log_tail())
        down = subprocess.run(command, capture_output=True, text=True, timeout=30)
        self.assertNotEqual(down.returncode, 0, down.stdout + down.stderr)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tsserver", required=True)
    parser.add_argument("--tsctl", required=True)
    parser.add_argument("--tsmodel", required=True)
    parser.add_argument("--fake-nvml", help="a stand-in libnvidia-ml for the GPU gauges")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

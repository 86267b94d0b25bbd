#!/usr/bin/python3
"""Static checks of the deployment bundle: docker-compose.yml (and its GPU override), the
Grafana provisioning, the Kubernetes manifests (with the ServiceMonitor's scrape job) and the
Dockerfiles (with their build-context ignore files) parse, agree with each other and with the
server's configurations, and reference only files that exist. Every shipped tsserver
configuration is also started with the real tsserver, and its health answered by `tsctl
health` as the images' HEALTHCHECK asks for it.

Usage: manifests_test.py --build-dir DIR --tsserver BIN --tsctl BIN --tsmodel BIN
(the binaries' shared libraries must be installed by the runtime images)."""

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import deploy_lib as lib  # noqa: E402

ARGS = None
COMPOSE_FILES = [os.path.join(lib.ROOT, "docker-compose.yml"),
                 os.path.join(lib.DEPLOY, "docker-compose.gpu.yml")]
K8S_DIR = os.path.join(lib.DEPLOY, "k8s")
CONFIG_DIR = os.path.join(lib.DEPLOY, "config")
# Serving and jobs in one process: compose, the Kubernetes jobs replica, the images' default.
SERVER_CONFIG = os.path.join(CONFIG_DIR, "tsserver.yaml")
# The Kubernetes serving replicas: the same with jobs off.
SERVING_CONFIG = os.path.join(CONFIG_DIR, "tsserver-serving.yaml")
DOCKERFILES = [os.path.join(lib.DEPLOY, "Dockerfile"), os.path.join(lib.DEPLOY, "Dockerfile.cuda")]
# What the images ship at the path the configurations serve.
DEMO_MODEL = "models/listops-demo.tsckpt"
# The scrape job the alert rules and dashboards select (`up{job="taylorshift"}`).
SCRAPE_JOB = "taylorshift"


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def server_config():
    return load_yaml(SERVER_CONFIG)


def shipped_configs():
    """Paths of every tsserver configuration in deploy/config."""
    return sorted(glob.glob(os.path.join(CONFIG_DIR, "*.yaml")))


def jobs_enabled(config):
    """tsserver's `jobs.enabled`, true when absent (config/default.yaml)."""
    return (config.get("jobs") or {}).get("enabled", True)


def port_of(address):
    return int(address.rsplit(":", 1)[1])


def compose_mounts(service):
    """[(host path or volume name, container path)] of a compose service (short syntax)."""
    out = []
    for volume in service.get("volumes", []):
        parts = volume.split(":")
        out.append((parts[0], parts[1]))
    return out


def host_path_for(mounts, container_path):
    """The repository path that a compose bind mount puts at container_path, or None."""
    for source, target in mounts:
        if not source.startswith("."):
            continue
        if container_path == target or container_path.startswith(target.rstrip("/") + "/"):
            rest = container_path[len(target):].lstrip("/")
            return os.path.normpath(os.path.join(lib.ROOT, source, rest))
    return None


class ComposeTest(unittest.TestCase):
    def setUp(self):
        self.compose = load_yaml(COMPOSE_FILES[0])
        self.services = self.compose["services"]

    def test_services(self):
        self.assertEqual(set(self.services), {"tsserver", "prometheus", "grafana"})

    def test_builds_and_bind_mounts_exist(self):
        # Paths of every compose file are relative to the first file's folder (the repository).
        for path in COMPOSE_FILES:
            doc = load_yaml(path)
            declared = set((load_yaml(COMPOSE_FILES[0]).get("volumes") or {}).keys())
            for name, service in doc["services"].items():
                build = service.get("build")
                if build:
                    context = os.path.join(lib.ROOT, build["context"])
                    self.assertTrue(os.path.isdir(context), f"{path}: {name} build context")
                    self.assertTrue(os.path.isfile(os.path.join(context, build["dockerfile"])),
                                    f"{path}: {name} dockerfile {build['dockerfile']}")
                for source, target in compose_mounts(service):
                    if source.startswith("."):
                        self.assertTrue(os.path.exists(os.path.join(lib.ROOT, source)),
                                        f"{path}: {name} mounts missing {source}")
                    else:
                        self.assertIn(source, declared, f"{path}: {name}: undeclared volume")

    def test_tsserver_serves_the_mounted_config(self):
        service = self.services["tsserver"]
        command = service["command"]
        config_in_container = command[command.index("--config") + 1]
        mounted = host_path_for(compose_mounts(service), config_in_container)
        self.assertEqual(mounted, SERVER_CONFIG)
        config = server_config()
        published = [p.split(":")[-1] for p in service["ports"]]
        self.assertEqual(published, [str(port_of(config["listen"]))])
        self.assertIn(str(port_of(config["metrics_listen"])), [str(p) for p in service["expose"]])
        # Volumes hold the config's state dir and data root, and jobs run here.
        targets = [t for _, t in compose_mounts(service)]
        for path in (config["state_dir"], config["data_root"]):
            self.assertIn(path, targets)
        self.assertTrue(jobs_enabled(config))
        # The model is the trained one the image ships: no volume hides it.
        shipped = image_files(dockerfile_instructions(os.path.join(lib.DEPLOY, "Dockerfile")))
        for model in config["models"]:
            self.assertEqual(shipped.get(model["checkpoint"]), DEMO_MODEL, model["checkpoint"])
            for target in targets:
                self.assertFalse(model["checkpoint"].startswith(target.rstrip("/") + "/"),
                                 f"{target} hides {model['checkpoint']}")

    def test_prometheus_loads_the_shipped_config_and_scrapes_tsserver(self):
        service = self.services["prometheus"]
        flags = dict(a.split("=", 1) for a in service["command"] if "=" in a)
        mounted = host_path_for(compose_mounts(service), flags["--config.file"])
        self.assertEqual(mounted, lib.PROMETHEUS_CONFIG)
        # Rule files resolve next to the config, inside the same mounted folder.
        for path in lib.rule_files():
            self.assertTrue(path.startswith(lib.PROMETHEUS_DIR + os.sep))
        config = load_yaml(lib.PROMETHEUS_CONFIG)
        job = [j for j in config["scrape_configs"] if j["job_name"] == "taylorshift"][0]
        targets = [t for sc in job["static_configs"] for t in sc["targets"]]
        self.assertEqual(targets, [f"tsserver:{port_of(server_config()['metrics_listen'])}"])

    def test_grafana_provisioning(self):
        service = self.services["grafana"]
        mounts = compose_mounts(service)
        provisioning = host_path_for(mounts, "/etc/grafana/provisioning")
        self.assertEqual(provisioning, os.path.join(lib.DEPLOY, "grafana", "provisioning"))
        datasources = []
        for path in glob.glob(os.path.join(provisioning, "datasources", "*.yml")):
            datasources += load_yaml(path)["datasources"]
        self.assertEqual(len(datasources), 1)
        url = datasources[0]["url"]
        self.assertEqual(url, "http://prometheus:9090")
        providers = []
        for path in glob.glob(os.path.join(provisioning, "dashboards", "*.yml")):
            providers += load_yaml(path)["providers"]
        self.assertTrue(providers)
        for provider in providers:
            folder = host_path_for(mounts, provider["options"]["path"])
            self.assertEqual(folder, lib.DASHBOARD_DIR, provider["options"]["path"])
            self.assertTrue(glob.glob(os.path.join(folder, "*.json")))
        home = host_path_for(mounts, service["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"])
        self.assertTrue(home and os.path.isfile(home), home)


class ServerConfigTest(unittest.TestCase):
    """The shipped tsserver configurations, read by the real tsserver."""

    def test_serving_config_is_the_jobs_config_with_jobs_off(self):
        combined, serving = server_config(), load_yaml(SERVING_CONFIG)
        self.assertEqual(combined["jobs"], {"enabled": True})
        self.assertEqual(serving["jobs"], {"enabled": False})
        self.assertEqual({k: v for k, v in combined.items() if k != "jobs"},
                         {k: v for k, v in serving.items() if k != "jobs"})

    def test_tsserver_runs_every_shipped_config(self):
        """Each config starts tsserver (unknown keys or bad values would stop it), which then
        answers the health checks the probes and the images' HEALTHCHECK send: the server, the
        Classifier and every model SERVING, the Jobs service SERVING exactly when the config
        runs jobs; SIGTERM stops it with status 0. Paths are moved into a temp dir; the
        checkpoint is a small untrained model."""
        healthchecks = [healthcheck_argv(dockerfile_instructions(p)) for p in DOCKERFILES]
        with tempfile.TemporaryDirectory(prefix="ts-configs-") as tmp:
            checkpoint = os.path.join(tmp, "model.tsckpt")
            init = subprocess.run(
                [ARGS.tsmodel, "init", "--out", checkpoint, "--labels", "a,b", "--embed-dim",
                 "32", "--depth", "1", "--heads", "4", "--max-length", "64"],
                capture_output=True, text=True, timeout=120)
            self.assertEqual(init.returncode, 0, init.stdout + init.stderr)
            for path in shipped_configs():
                with self.subTest(config=os.path.basename(path)):
                    self.run_config(path, checkpoint, os.path.join(tmp, os.path.basename(path)),
                                    healthchecks)

    def run_config(self, path, checkpoint, scratch, healthchecks):
        config = load_yaml(path)
        for model in config["models"]:
            model["checkpoint"] = checkpoint
        os.makedirs(scratch)
        config_path = os.path.join(scratch, "tsserver.yaml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)
        ready_file = os.path.join(scratch, "ready")
        log_path = os.path.join(scratch, "tsserver.log")
        with open(log_path, "w") as log:
            server = subprocess.Popen(
                [ARGS.tsserver, "--config", config_path, "--listen", "127.0.0.1:0",
                 "--metrics-listen", "127.0.0.1:0", "--state-dir", os.path.join(scratch, "state"),
                 "--data-root", os.path.join(scratch, "data"), "--threads", "1",
                 "--ready-file", ready_file],
                stdout=log, stderr=subprocess.STDOUT)

        def log_text():
            with open(log_path) as f:
                return f.read()[-3000:]

        try:
            address = None
            deadline = time.monotonic() + 90
            while address is None and time.monotonic() < deadline:
                if server.poll() is not None:
                    self.fail(f"tsserver exited with {server.returncode}:\n{log_text()}")
                if os.path.exists(ready_file):
                    with open(ready_file) as f:
                        fields = dict(l.split("=", 1) for l in f.read().split() if "=" in l)
                    address = fields.get("grpc")
                time.sleep(0.1)
            self.assertIsNotNone(address, f"tsserver did not become ready:\n{log_text()}")

            def health(*args):
                return subprocess.run([ARGS.tsctl, "health", "--server", address, *args],
                                      capture_output=True, text=True, timeout=30)

            expected = {"": "SERVING", "taylorshift.v1.Classifier": "SERVING",
                        "taylorshift.v1.Jobs": "SERVING" if jobs_enabled(config) else "NOT_SERVING"}
            expected.update({m["name"]: "SERVING" for m in config["models"]})
            for service, status in expected.items():
                result = health("--service", service)
                self.assertEqual(result.stdout.strip(), status, f"{service!r}: {result.stderr}")
                self.assertEqual(result.returncode, 0 if status == "SERVING" else 1, service)
            for argv in healthchecks:
                argv = list(argv)
                argv[argv.index("--server") + 1] = address
                result = subprocess.run([ARGS.tsctl] + argv[1:], capture_output=True, text=True,
                                        timeout=30)
                self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()
        self.assertEqual(server.returncode, 0, log_text())


class DashboardTest(unittest.TestCase):
    def test_dashboards_are_well_formed(self):
        boards = lib.dashboards()
        self.assertTrue(boards)
        uids = set()
        for name, board in boards.items():
            self.assertNotIn(board["uid"], uids)
            uids.add(board["uid"])
            defined = {v["name"] for v in lib.variables(board)}
            self.assertIn("datasource", defined, name)
            ids = set()
            for panel in board["panels"] + [p for r in board["panels"] for p in r.get("panels", [])]:
                self.assertNotIn(panel["id"], ids, f"{name}: duplicate panel id")
                ids.add(panel["id"])
                grid = panel["gridPos"]
                self.assertLessEqual(grid["x"] + grid["w"], 24, f"{name}: {panel['title']}")
            for panel in lib.panels(board):
                self.assertEqual(panel["datasource"]["uid"], "${datasource}", panel["title"])
                self.assertTrue(panel.get("targets"), panel["title"])
                for target in panel["targets"]:
                    self.assertTrue(target["expr"].strip(), panel["title"])
                    # Every variable the expression uses is defined (raises KeyError if not).
                    lib.substitute(target["expr"], {v: ".*" for v in defined})

    def test_dashboard_covers_the_issue(self):
        titles = " | ".join(p["title"] for b in lib.dashboards().values() for p in lib.panels(b))
        for wanted in ("Request rate by code", "Error ratio", "p50 / p95 / p99",
                       "Queue vs compute", "Batch size", "tokens per batch", "Padding ratio",
                       "Attention path share", "Sequence length distribution", "Queue depth",
                       "Rejections by reason", "Process memory", "Device memory",
                       "Training loss", "Validation accuracy", "Examples per second",
                       "Jobs by state"):
            self.assertIn(wanted, titles)
        for board in lib.dashboards().values():
            self.assertIn("model", {v["name"] for v in lib.variables(board)})


class KubernetesTest(unittest.TestCase):
    def setUp(self):
        self.docs = {}
        for path in sorted(glob.glob(os.path.join(K8S_DIR, "**", "*.yaml"), recursive=True)):
            with open(path) as f:
                docs = [d for d in yaml.safe_load_all(f) if d is not None]
            self.assertTrue(docs, path)
            self.docs[path] = docs
        # Objects of the manifests; kustomization files and the patches they name are not.
        patches = set()
        for path, docs in self.docs.items():
            if os.path.basename(path) == "kustomization.yaml":
                patches |= {os.path.join(os.path.dirname(path), p["path"])
                            for p in docs[0].get("patches", [])}
        self.objects = {}
        for path, docs in self.docs.items():
            if os.path.basename(path) == "kustomization.yaml" or path in patches:
                continue
            for doc in docs:
                for key in ("apiVersion", "kind", "metadata"):
                    self.assertIn(key, doc, path)
                self.objects.setdefault((doc["kind"], doc["metadata"]["name"]), []).append(doc)

    def test_kustomizations_reference_existing_files(self):
        kustomizations = [p for p in self.docs if os.path.basename(p) == "kustomization.yaml"]
        self.assertEqual(len(kustomizations), 2)
        for path in kustomizations:
            doc = self.docs[path][0]
            here = os.path.dirname(path)
            for resource in doc.get("resources", []):
                self.assertTrue(os.path.exists(os.path.join(here, resource)), f"{path}: {resource}")
            for patch in doc.get("patches", []):
                self.assertTrue(os.path.isfile(os.path.join(here, patch["path"])), f"{path}: {patch}")

    def test_configmap_is_the_shipped_configs(self):
        configmap = self.objects[("ConfigMap", "taylorshift-config")][0]
        self.assertEqual(set(configmap["data"]), {os.path.basename(p) for p in shipped_configs()})
        for path in shipped_configs():
            with open(path) as f:
                self.assertEqual(configmap["data"][os.path.basename(path)], f.read(), path)

    def deployments(self):
        return [d for (kind, _), docs in self.objects.items() if kind == "Deployment"
                for d in docs if d["spec"].get("template")]

    def test_deployments(self):
        names = {d["metadata"]["name"] for d in self.deployments()}
        self.assertEqual(names, {"tsserver", "tsserver-jobs"})
        configmap = self.objects[("ConfigMap", "taylorshift-config")][0]
        shipped = image_files(dockerfile_instructions(DOCKERFILES[0]))
        for deployment in self.deployments():
            name = deployment["metadata"]["name"]
            pod = deployment["spec"]["template"]["spec"]
            container = pod["containers"][0]
            args = container["args"]
            config_path = args[args.index("--config") + 1]
            config = yaml.safe_load(configmap["data"][os.path.basename(config_path)])
            grpc_port = port_of(config["listen"])
            metrics_port = port_of(config["metrics_listen"])
            labels = deployment["spec"]["template"]["metadata"]["labels"]
            for key, value in deployment["spec"]["selector"]["matchLabels"].items():
                self.assertEqual(labels[key], value, name)
            self.assertTrue(pod["securityContext"]["runAsNonRoot"], name)
            self.assertGreater(pod["securityContext"]["runAsUser"], 0, name)
            self.assertGreater(pod["terminationGracePeriodSeconds"] * 1000,
                               config["shutdown_grace_ms"], name)
            volumes = {v["name"]: v for v in pod["volumes"]}
            mounted_config = False
            for mount in container["volumeMounts"]:
                self.assertIn(mount["name"], volumes, f"{name}: {mount['name']}")
                volume = volumes[mount["name"]]
                if "configMap" in volume:
                    self.assertIn(("ConfigMap", volume["configMap"]["name"]), self.objects)
                    if config_path == os.path.join(mount["mountPath"],
                                                   os.path.basename(config_path)):
                        mounted_config = True
                if "persistentVolumeClaim" in volume:
                    self.assertIn(("PersistentVolumeClaim",
                                   volume["persistentVolumeClaim"]["claimName"]), self.objects)
            self.assertTrue(mounted_config, f"{name}: {config_path} is not the mounted ConfigMap")
            ports = {p["name"]: p["containerPort"] for p in container["ports"]}
            self.assertEqual(ports, {"grpc": grpc_port, "metrics": metrics_port}, name)
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                self.assertEqual(container[probe]["grpc"]["port"], grpc_port, f"{name} {probe}")
            self.assertIn("memory", container["resources"]["limits"], name)
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            read_only_root = container["securityContext"].get("readOnlyRootFilesystem", False)
            # tsserver opens its jobs database in state_dir even with jobs off.
            state = mounts.get(config["state_dir"])
            if read_only_root:
                self.assertTrue(state and not state.get("readOnly"),
                                f"{name}: state_dir {config['state_dir']} is not writable")
            # The models served are the trained demo model of the image: no volume hides it.
            for model in config["models"]:
                self.assertEqual(shipped.get(model["checkpoint"]), DEMO_MODEL, name)
                for path in mounts:
                    self.assertFalse(model["checkpoint"].startswith(path.rstrip("/") + "/"),
                                     f"{name}: {path} hides {model['checkpoint']}")
            readiness = container["readinessProbe"]["grpc"]["service"]
            if name == "tsserver":
                # Serving replicas are stateless: jobs off, the state dir an emptyDir.
                self.assertFalse(jobs_enabled(config), f"{name}: {config_path} runs jobs")
                self.assertIn("emptyDir", volumes[state["name"]], name)
                self.assertEqual(readiness, "taylorshift.v1.Classifier")
            else:
                # The jobs replica: the one writer of the jobs database, on a claim, with the
                # datasets on a claim too.
                self.assertTrue(jobs_enabled(config), f"{name}: {config_path} runs no jobs")
                self.assertEqual(deployment["spec"]["replicas"], 1)
                self.assertEqual(deployment["spec"]["strategy"]["type"], "Recreate")
                self.assertIn("persistentVolumeClaim", volumes[state["name"]])
                data = mounts.get(config["data_root"])
                self.assertTrue(data, f"{name}: no volume at data_root {config['data_root']}")
                self.assertIn("persistentVolumeClaim", volumes[data["name"]])
                self.assertEqual(readiness, "taylorshift.v1.Jobs")

    def test_services_select_pods_and_ports(self):
        pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
                for d in self.deployments()}
        services = self.objects[("Service", "tsserver")] + self.objects[("Service", "tsserver-jobs")]
        headless = self.objects[("Service", "tsserver")][0]
        self.assertEqual(headless["spec"]["clusterIP"], "None")
        for service in services:
            selector = service["spec"]["selector"]
            matched = [n for n, labels in pods.items()
                       if all(labels.get(k) == v for k, v in selector.items())]
            self.assertEqual(len(matched), 1, service["metadata"]["name"])
            self.assertEqual({p["targetPort"] for p in service["spec"]["ports"]}, {"grpc", "metrics"})
        hpa = self.objects[("HorizontalPodAutoscaler", "tsserver")][0]
        self.assertEqual(hpa["spec"]["scaleTargetRef"]["name"], "tsserver")
        monitor = self.objects[("ServiceMonitor", "taylorshift-serve")][0]
        for service in services:
            labels = service["metadata"]["labels"]
            self.assertTrue(all(labels.get(k) == v
                                for k, v in monitor["spec"]["selector"]["matchLabels"].items()))
        self.assertEqual(monitor["spec"]["endpoints"][0]["port"], "metrics")

    def test_servicemonitor_scrape_job_is_the_one_the_rules_select(self):
        """The Prometheus Operator names a target's `job` after its Service (or the Service
        label that `jobLabel` names), then applies the endpoint's relabelings: every Service
        the ServiceMonitor selects must come out as the job of prometheus.yml, which the alert
        rules and dashboards select."""
        monitor = self.objects[("ServiceMonitor", "taylorshift-serve")][0]
        selector = monitor["spec"]["selector"]["matchLabels"]
        services = [d for (kind, _), docs in self.objects.items() if kind == "Service"
                    for d in docs
                    if all(d["metadata"].get("labels", {}).get(k) == v
                           for k, v in selector.items())]
        self.assertEqual(len(services), 2)
        for endpoint in monitor["spec"]["endpoints"]:
            for service in services:
                self.assertEqual(operator_job_label(monitor, endpoint, service), SCRAPE_JOB,
                                 service["metadata"]["name"])
        compose_jobs = [j["job_name"] for j in load_yaml(lib.PROMETHEUS_CONFIG)["scrape_configs"]
                        if j["job_name"] != "prometheus"]
        self.assertEqual(compose_jobs, [SCRAPE_JOB])
        selected = set()
        exprs = [r["expr"] for _, r in lib.alert_rules()]
        exprs += [t["expr"] for b in lib.dashboards().values() for p in lib.panels(b)
                  for t in p["targets"]]
        for expr in exprs:
            selected |= set(re.findall(r'\bjob\s*=~?\s*"([^"]*)"', expr))
        self.assertEqual(selected, {SCRAPE_JOB})

    def test_kubectl_kustomize_builds(self):
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            self.skipTest("kubectl is not installed")
        for overlay, image in (("base", "taylorshift-serve:cpu"), ("gpu", "taylorshift-serve:cuda")):
            result = subprocess.run([kubectl, "kustomize", os.path.join(K8S_DIR, overlay)],
                                    capture_output=True, text=True, timeout=60)
            self.assertEqual(result.returncode, 0, result.stderr)
            docs = list(yaml.safe_load_all(result.stdout))
            self.assertEqual(len(docs), 9, overlay)
            serving = [d for d in docs if d["kind"] == "Deployment"
                       and d["metadata"]["name"] == "tsserver"][0]
            container = serving["spec"]["template"]["spec"]["containers"][0]
            self.assertEqual(container["image"], image)
            self.assertEqual("nvidia.com/gpu" in container["resources"]["limits"], overlay == "gpu")


def operator_job_label(monitor, endpoint, service):
    """The `job` label the Prometheus Operator gives the targets of `service` scraped through
    `endpoint` of ServiceMonitor `monitor`: the Service's name, or the value of its label that
    spec.jobLabel names, then the endpoint's `replace` relabelings that target `job`."""
    labels = service["metadata"].get("labels", {})
    job = service["metadata"]["name"]
    job_label = monitor["spec"].get("jobLabel")
    if job_label and labels.get(job_label):
        job = labels[job_label]
    meta = {f"__meta_kubernetes_service_label_{re.sub(r'[^a-zA-Z0-9_]', '_', k)}": v
            for k, v in labels.items()}
    meta["__meta_kubernetes_service_name"] = service["metadata"]["name"]
    for relabel in endpoint.get("relabelings", []):
        if relabel.get("action", "replace").lower() != "replace":
            continue
        if relabel.get("targetLabel") != "job":
            continue
        current = dict(meta, job=job)
        value = relabel.get("separator", ";").join(current.get(label, "")
                                                   for label in relabel.get("sourceLabels", []))
        match = re.fullmatch(relabel.get("regex", "(.*)"), value)
        if match:
            # Prometheus writes groups as $1 or ${1}.
            replacement = re.sub(r"\$\{?(\w+)\}?", r"\\g<\1>", relabel.get("replacement", "$1"))
            job = match.expand(replacement)
    return job


def dockerfile_instructions(path):
    """[(stage index, INSTRUCTION, arguments)] with line continuations joined."""
    with open(path) as f:
        text = f.read()
    text = re.sub(r"\\\n", " ", text)
    out = []
    stage = -1
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM":
            stage += 1
        out.append((stage, instruction, rest.strip()))
    return out


def copy_words(args):
    """(flags, sources, destination) of a COPY/ADD instruction's arguments."""
    words = args.split()
    flags = [w for w in words if w.startswith("--")]
    rest = [w for w in words if not w.startswith("--")]
    return flags, rest[:-1], rest[-1]


def image_files(steps):
    """{path in the final image: repository path} of the files the last stage COPYs from the
    build context (COPY --from=... is left out)."""
    last = max(stage for stage, _, _ in steps)
    out = {}
    for stage, instruction, args in steps:
        if stage != last or instruction not in ("COPY", "ADD"):
            continue
        flags, sources, destination = copy_words(args)
        if any(f.startswith("--from=") for f in flags):
            continue
        for source in sources:
            if destination.endswith("/"):
                out[destination + os.path.basename(source.rstrip("/"))] = source
            else:
                out[destination] = source
    return out


def healthcheck_argv(steps):
    """The exec-form command of the last stage's HEALTHCHECK."""
    last = max(stage for stage, _, _ in steps)
    health = [a for s, i, a in steps if s == last and i == "HEALTHCHECK"]
    return json.loads(health[-1][health[-1].index("CMD") + 3:].strip())


def dockerignore_patterns(dockerfile):
    """[(exception, regex)] of the ignore file BuildKit uses with `dockerfile`: the
    Dockerfile's own <name>.dockerignore, else .dockerignore of the context (the repository)."""
    path = dockerfile + ".dockerignore"
    if not os.path.exists(path):
        path = os.path.join(lib.ROOT, ".dockerignore")
        if not os.path.exists(path):
            return []
    patterns = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            exception = line.startswith("!")
            pattern = os.path.normpath(line.lstrip("!").strip()).lstrip("/")
            # Go's filepath.Match, plus `**` for any number of folders (moby/patternmatcher).
            regex = ""
            i = 0
            while i < len(pattern):
                if pattern.startswith("**/", i):
                    regex += "(?:.*/)?"
                    i += 3
                elif pattern.startswith("**", i):
                    regex += ".*"
                    i += 2
                elif pattern[i] == "*":
                    regex += "[^/]*"
                    i += 1
                elif pattern[i] == "?":
                    regex += "[^/]"
                    i += 1
                else:
                    regex += re.escape(pattern[i])
                    i += 1
            patterns.append((exception, re.compile(regex + "$")))
    return patterns


def excluded_from_context(path, patterns):
    """Whether the ignore patterns leave `path` (relative to the context) out: the last
    pattern that matches it or one of its parent folders decides."""
    parts = os.path.normpath(path).split(os.sep)
    candidates = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    excluded = False
    for exception, regex in patterns:
        if any(regex.match(candidate) for candidate in candidates):
            excluded = not exception
    return excluded


def apt_packages(run_args):
    """Packages named by the `apt-get install` commands of a RUN instruction."""
    packages = []
    for command in run_args.split("&&"):
        words = shlex.split(command.replace("\n", " "))
        if words[:2] == ["apt-get", "install"]:
            packages += [w for w in words[2:] if not w.startswith("-")]
    return packages


def setup_packages():
    with open(os.path.join(lib.ROOT, "scripts", "setup")) as f:
        text = f.read()
    body = re.search(r"packages=\((.*?)\)", text, re.S).group(1)
    return sorted(body.split())


def needed_packages(binaries):
    """Debian packages that provide the libraries the binaries link directly."""
    packages = set()
    for binary in binaries:
        needed = re.findall(r"\(NEEDED\).*\[(.*)\]",
                            subprocess.run(["readelf", "-d", binary], capture_output=True,
                                           text=True, check=True).stdout)
        resolved = {}
        for line in subprocess.run(["ldd", binary], capture_output=True, text=True,
                                   check=True).stdout.splitlines():
            match = re.match(r"\s*(\S+) => (\S+)", line)
            if match:
                resolved[match.group(1)] = match.group(2)
        for library in needed:
            path = os.path.realpath(resolved[library])
            owner = None
            for candidate in (path, path.replace("/usr/lib/", "/lib/", 1)):
                result = subprocess.run(["dpkg", "-S", candidate], capture_output=True, text=True)
                if result.returncode == 0:
                    owner = result.stdout.split(":")[0]
                    break
            if owner is None:
                raise AssertionError(f"{binary}: no package owns {path}")
            packages.add(owner)
    return packages


# Always present in debian:12-slim.
BASE_PACKAGES = {"libc6", "libgcc-s1", "libstdc++6"}
# What the CUDA image takes from the LibTorch zip instead of Debian.
DEBIAN_TORCH = {"libtorch-dev", "libopenblas0-openmp"}


class DockerfileTest(unittest.TestCase):
    def test_dockerfiles(self):
        binaries = [ARGS.tsserver, ARGS.tsctl, ARGS.tsmodel]
        needed = needed_packages(binaries) - BASE_PACKAGES
        relative = sorted(os.path.relpath(b, ARGS.build_dir) for b in binaries)
        for path in DOCKERFILES:
            name = os.path.basename(path)
            steps = dockerfile_instructions(path)
            stages = [a for _, i, a in steps if i == "FROM"]
            self.assertEqual(len(stages), 2, f"{name}: build and runtime stages")
            for image in stages:
                self.assertRegex(image, r"^debian:12(-slim)?\b", name)
            build_runs = [a for s, i, a in steps if s == 0 and i == "RUN"]
            runtime = [(i, a) for s, i, a in steps if s == 1]
            build_packages = sorted(p for a in build_runs for p in apt_packages(a)
                                    if not p.startswith(("cuda-toolkit", "ca-certificates",
                                                         "curl", "unzip")))
            expected = setup_packages()
            if name.endswith(".cuda"):
                expected = sorted(set(expected) - DEBIAN_TORCH)
                self.assertIn("LIBTORCH_URL", " ".join(a for _, i, a in steps if i == "ARG"))
            self.assertEqual(build_packages, expected, f"{name}: build stage vs scripts/setup")
            runtime_packages = {p for i, a in runtime if i == "RUN" for p in apt_packages(a)}
            missing = needed - runtime_packages
            if name.endswith(".cuda"):
                missing = {p for p in missing if not p.startswith("libtorch")}
            self.assertEqual(missing, set(), f"{name}: runtime stage lacks libraries")
            # Sources copied from the context exist; the binaries come from the build tree.
            copied = []
            for stage, instruction, args in steps:
                if instruction not in ("COPY", "ADD"):
                    continue
                words = [w for w in args.split() if not w.startswith("--chmod")]
                if words[0].startswith("--from="):
                    copied += words[1:-1]
                    continue
                for source in words[:-1]:
                    self.assertTrue(os.path.exists(os.path.join(lib.ROOT, source)),
                                    f"{name}: COPY {source}")
            binaries_copied = sorted(os.path.relpath(c, "/src/build") for c in copied
                                     if c.startswith("/src/build/"))
            self.assertEqual(binaries_copied, relative, name)
            users = [a for i, a in runtime if i == "USER"]
            self.assertTrue(users and users[-1].split(":")[0] not in ("0", "root"), name)
            health = [a for i, a in runtime if i == "HEALTHCHECK"]
            self.assertEqual(len(health), 1, name)
            entrypoint = [a for i, a in runtime if i == "ENTRYPOINT"][0]
            self.assertIn("/usr/local/bin/tsserver-entrypoint", entrypoint)
            cmd = [a for i, a in runtime if i == "CMD"][0]
            self.assertIn('"/etc/taylorshift/tsserver.yaml"', cmd)
        self.assertTrue(os.access(os.path.join(lib.DEPLOY, "docker", "entrypoint.sh"), os.X_OK))

    def test_images_ship_the_configs_and_the_demo_model(self):
        config = server_config()
        for path in DOCKERFILES:
            name = os.path.basename(path)
            steps = dockerfile_instructions(path)
            shipped = image_files(steps)
            # Every configuration, and CMD runs the one that serves and runs jobs.
            for config_path in shipped_configs():
                target = "/etc/taylorshift/" + os.path.basename(config_path)
                self.assertEqual(shipped.get(target), os.path.relpath(config_path, lib.ROOT),
                                 f"{name}: {target}")
            cmd = json.loads([a for _, i, a in steps if i == "CMD"][-1])
            self.assertEqual(cmd, ["--config", "/etc/taylorshift/tsserver.yaml"], name)
            # The trained demo model, at the path the configurations serve and the entrypoint
            # checks (it writes an untrained one only when that file is missing).
            for config_path in shipped_configs():
                for model in load_yaml(config_path)["models"]:
                    self.assertEqual(shipped.get(model["checkpoint"]), DEMO_MODEL,
                                     f"{name}: {model['checkpoint']} of {config_path}")
            env = " ".join(a for _, i, a in steps if i == "ENV")
            self.assertIn(f"TS_DEMO_CHECKPOINT={config['models'][0]['checkpoint']}", env, name)

    def test_healthcheck_asks_the_grpc_health_service(self):
        grpc_port = port_of(server_config()["listen"])
        for path in DOCKERFILES:
            argv = healthcheck_argv(dockerfile_instructions(path))
            self.assertEqual(argv[:2], ["tsctl", "health"], path)
            self.assertEqual(argv[argv.index("--server") + 1], f"127.0.0.1:{grpc_port}", path)
            # Without --service: the server as a whole, which turns NOT_SERVING on SIGTERM.
            self.assertNotIn("--service", argv, path)
            self.assertIn("--timeout-ms", argv, path)

    def test_build_context_keeps_what_the_dockerfiles_copy(self):
        for path in DOCKERFILES:
            patterns = dockerignore_patterns(path)
            self.assertTrue(patterns, f"{path}: no ignore file")
            for stage, instruction, args in dockerfile_instructions(path):
                if instruction not in ("COPY", "ADD"):
                    continue
                flags, sources, _ = copy_words(args)
                if any(f.startswith("--from=") for f in flags):
                    continue
                for source in sources:
                    self.assertFalse(excluded_from_context(source, patterns),
                                     f"{os.path.basename(path)}: COPY {source} is excluded by "
                                     "its .dockerignore")
            # ...and that local builds and state stay out.
            for local in ("build-hE/server/tsserver", ".git/HEAD", "state/jobs.db",
                          "models/scratch.tsckpt"):
                self.assertTrue(excluded_from_context(local, patterns), f"{path}: {local}")

    def test_dockerfiles_agree(self):
        """Both images run the same way: what they copy from the context, their user, working
        folder, environment of the entrypoint, ports, health check, entrypoint and command."""
        def runtime(path):
            steps = dockerfile_instructions(path)
            last = max(stage for stage, _, _ in steps)
            kept = {}
            for stage, instruction, args in steps:
                if stage == last and instruction in ("USER", "WORKDIR", "EXPOSE", "ENTRYPOINT",
                                                     "CMD", "HEALTHCHECK"):
                    kept.setdefault(instruction, []).append(args)
            kept["files"] = image_files(steps)
            kept["demo"] = [a for s, i, a in steps if s == last and i == "ENV"
                            and "TS_DEMO_CHECKPOINT" in a]
            kept["HEALTHCHECK"] = healthcheck_argv(steps)
            return kept

        cpu, cuda = (runtime(p) for p in DOCKERFILES)
        self.assertEqual(cpu, cuda)

    def test_build_context_configures(self):
        """The files the Dockerfile copies are enough to configure the CMake project with the
        Dockerfile's options (the image's build step cannot run here: no Docker engine)."""
        steps = dockerfile_instructions(DOCKERFILES[0])
        with tempfile.TemporaryDirectory() as tmp:
            src = os.path.join(tmp, "src")
            os.mkdir(src)
            for stage, instruction, args in steps:
                if stage != 0 or instruction != "COPY":
                    continue
                source, target = args.split()
                target = os.path.join(src, target)
                if os.path.isdir(os.path.join(lib.ROOT, source)):
                    shutil.copytree(os.path.join(lib.ROOT, source), target)
                else:
                    shutil.copy(os.path.join(lib.ROOT, source), target)
            cmake_run = [a for s, i, a in steps if s == 0 and i == "RUN" and "cmake -S" in a][0]
            configure = cmake_run[cmake_run.index("cmake -S"):].split("&&")[0]
            words = shlex.split(configure)
            words[words.index("-B") + 1] = os.path.join(tmp, "build")
            result = subprocess.run(words, cwd=src, capture_output=True, text=True, timeout=240)
            self.assertEqual(result.returncode, 0, result.stdout[-3000:] + result.stderr[-3000:])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--build-dir", required=True)
    parser.add_argument("--tsserver", required=True)
    parser.add_argument("--tsctl", required=True)
    parser.add_argument("--tsmodel", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

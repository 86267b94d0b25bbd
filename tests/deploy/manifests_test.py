#!/usr/bin/python3
"""Static checks of the deployment bundle: docker-compose.yml (and its GPU override), the
Grafana provisioning, the Kubernetes manifests (with the ServiceMonitor's scrape job and the
PyTorchJob of deploy/k8s/training and the KServe runtime of deploy/k8s/kserve) and the Dockerfiles (with their build-context ignore files)
parse, agree with each other and with the server's configurations, and reference only files that
exist. Every shipped tsserver configuration is also started with the real tsserver, and its
health answered by `tsctl health` as the images' HEALTHCHECK asks for it; the PyTorchJob's
command is run by the real tsworker as two ranks on loopback, and the KServe runtime's
command line and configuration start the real tsserver, whose KServe v2 health answers over HTTP.

Usage: manifests_test.py --build-dir DIR --tsserver BIN --tsctl BIN --tsmodel BIN
       [--tsworker BIN]   (default: tsworker next to tsserver)
(the binaries' shared libraries must be installed by the runtime images)."""

import argparse
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import urllib.error
import urllib.request

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
import deploy_lib as lib  # noqa: E402
import k8s_render  # noqa: E402

ARGS = None
COMPOSE_FILES = [os.path.join(lib.ROOT, "docker-compose.yml"),
                 os.path.join(lib.DEPLOY, "docker-compose.gpu.yml")]
K8S_DIR = os.path.join(lib.DEPLOY, "k8s")
# Data-parallel training with tsworker under the Kubeflow Training Operator.
TRAINING_DIR = os.path.join(K8S_DIR, "training")
# tsserver as a KServe custom runtime (ServingRuntime + InferenceService).
KSERVE_DIR = os.path.join(K8S_DIR, "kserve")
# Where KServe's storage initializer puts the files of an InferenceService's storageUri, and the
# file the runtime serves from there.
KSERVE_MODEL_DIR = "/mnt/models"
KSERVE_CHECKPOINT = KSERVE_MODEL_DIR + "/model.tsckpt"
# What KServe replaces by the InferenceService's name in a runtime's arguments.
KSERVE_NAME = "{{.Name}}"
# tsworker's standalone command line (docs/DISTRIBUTED.md): every flag it takes, and those
# without which it cannot run.
TSWORKER_FLAGS = {"--spec", "--job-dir", "--data-root", "--threads", "--collective-timeout"}
TSWORKER_REQUIRED_FLAGS = {"--spec", "--job-dir", "--data-root"}
# What the Training Operator sets in every container of a PyTorchJob that has a Master; a
# manifest that set them too would fight it.
OPERATOR_ENV = {"MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK"}
# The operator takes the rendezvous port from this container's port of this name.
OPERATOR_CONTAINER, OPERATOR_PORT = "pytorch", "pytorchjob-port"
CONFIG_DIR = os.path.join(lib.DEPLOY, "config")
# Serving and jobs in one process: compose, the Kubernetes jobs replica, the images' default.
SERVER_CONFIG = os.path.join(CONFIG_DIR, "tsserver.yaml")
# The Kubernetes serving replicas: the same with jobs off.
SERVING_CONFIG = os.path.join(CONFIG_DIR, "tsserver-serving.yaml")
DOCKERFILES = [os.path.join(lib.DEPLOY, "Dockerfile"), os.path.join(lib.DEPLOY, "Dockerfile.cuda")]
# What the images ship at the path the configurations serve.
# The trained demo models the images ship: config/default.yaml's (the quick start's) models.
DEMO_MODELS = {"models/listops-demo.tsckpt", "models/source-lang-demo.tsckpt"}
DEFAULT_CONFIG = os.path.join(lib.ROOT, "config", "default.yaml")
# The scrape job the alert rules and dashboards select (`up{job="taylorshift"}`).
SCRAPE_JOB = "taylorshift"


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def load_compose(path):
    """A compose file as users get it with no variables set: each ${NAME:-default} becomes its
    default (docker-compose.yml makes ports, images and the data folder variables)."""
    with open(path) as f:
        text = f.read()
    return yaml.safe_load(re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", text))


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


def tsworker():
    """The tsworker binary: --tsworker, else the one built next to tsserver."""
    return ARGS.tsworker or os.path.join(os.path.dirname(ARGS.tsserver), "tsworker")


def generated_files(kustomization):
    """{ConfigMap key: file path} of the files that a kustomization's ConfigMap generators read."""
    here = os.path.dirname(kustomization)
    out = {}
    for generator in load_yaml(kustomization).get("configMapGenerator", []):
        for entry in generator.get("files", []):
            key, _, source = entry.rpartition("=")
            out[key or os.path.basename(source)] = os.path.join(here, source)
    return out


def kustomization_objects(folder):
    """The objects of a kustomization whose resources are files: those files' documents and a
    ConfigMap per generator, as written (before kustomize sets namespace and images)."""
    path = os.path.join(folder, "kustomization.yaml")
    doc = load_yaml(path)
    objects = []
    for resource in doc.get("resources", []):
        with open(os.path.join(folder, resource)) as f:
            objects += [d for d in yaml.safe_load_all(f) if d is not None]
    for generator in doc.get("configMapGenerator", []):
        data = {}
        for entry in generator.get("files", []):
            key, _, source = entry.rpartition("=")
            with open(os.path.join(folder, source)) as f:
                data[key or os.path.basename(source)] = f.read()
        objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                        "metadata": {"name": generator["name"]}, "data": data})
    return objects


def rank_container(job):
    """The Master's container that the Training Operator configures (its name is fixed)."""
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    return [c for c in pod["containers"] if c["name"] == OPERATOR_CONTAINER][0]


def tsworker_argv(container):
    """The container's command line, which must start with tsworker."""
    return list(container.get("command", [])) + list(container.get("args", []))


def flags_of(argv):
    """{--flag: value} of command-line arguments of the form --flag=value (None for others)."""
    out = {}
    for arg in argv:
        name, equals, value = arg.partition("=")
        out[name] = value if equals and name.startswith("--") else None
    return out


def mount_holding(container, path):
    """The volumeMount whose mountPath holds `path` (the deepest one), or None."""
    best = None
    for mount in container.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/")
        if path == root or path.startswith(root + "/"):
            if best is None or len(root) > len(best["mountPath"].rstrip("/")):
                best = mount
    return best


def documented_spec_keys():
    """(keys, data source keys, generate keys) that docs/JOBS.md documents for training specs:
    the dotted keys of its "Spec reference" table (a row's `.depth` continues the key before
    it), the keys of a data source and of a ListOps generator."""
    with open(os.path.join(lib.ROOT, "docs", "JOBS.md")) as f:
        text = f.read()
    section = text.split("## Spec reference", 1)[1]
    keys = set()
    for line in section.split("\n## ", 1)[0].splitlines():
        if not line.startswith("| `"):
            continue
        prefix = ""
        for key in re.findall(r"`([^`]+)`", line.split("|")[1]):
            if key.startswith("."):
                key = prefix + key
            keys.add(key)
            prefix = key.rsplit(".", 1)[0] if "." in key else ""
    sources = re.search(r"Data sources: `\{([^}]*)\}`", section).group(1)
    generate = re.search(r"`generate: \{([^}]*)\}`", section).group(1)
    return (keys, {k.strip() for k in sources.split(",")},
            {k.split(":")[0].strip() for k in generate.split(",")})


def image_binaries(steps):
    """{name: folder} of the files the last stage copies from the build stage."""
    last = max(stage for stage, _, _ in steps)
    out = {}
    for stage, instruction, args in steps:
        if stage != last or instruction not in ("COPY", "ADD"):
            continue
        flags, sources, destination = copy_words(args)
        if any(f.startswith("--from=") for f in flags) and destination.endswith("/"):
            out.update({os.path.basename(s): destination for s in sources})
    return out


def free_port():
    """A TCP port on loopback that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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
        self.compose = load_compose(COMPOSE_FILES[0])
        self.services = self.compose["services"]

    def test_services(self):
        self.assertEqual(set(self.services), {"tsserver", "prometheus", "grafana"})

    def test_builds_and_bind_mounts_exist(self):
        # Paths of every compose file are relative to the first file's folder (the repository).
        for path in COMPOSE_FILES:
            doc = load_compose(path)
            declared = set((load_compose(COMPOSE_FILES[0]).get("volumes") or {}).keys())
            for name, service in doc["services"].items():
                build = service.get("build")
                if build:
                    context = os.path.join(lib.ROOT, build["context"])
                    self.assertTrue(os.path.isdir(context), f"{path}: {name} build context")
                    self.assertTrue(os.path.isfile(os.path.join(context, build["dockerfile"])),
                                    f"{path}: {name} dockerfile {build['dockerfile']}")
                for source, target in compose_mounts(service):
                    if source == "./data":
                        # The data folder: the user's datasets (docs/DEPLOYMENT.md), made by
                        # `mkdir -p data` as the README says, ignored by git.
                        continue
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
        # gRPC, HTTP and metrics, on the host's loopback (the quick start's curl reads metrics).
        self.assertEqual(published,
                         [str(port_of(config["listen"])), str(port_of(config["http"]["listen"])),
                          str(port_of(config["metrics_listen"]))])
        for port in service["ports"]:
            self.assertTrue(port.startswith("127.0.0.1:"), port)
        # Volumes hold the config's state dir and data root, and jobs run here.
        targets = [t for _, t in compose_mounts(service)]
        for path in (config["state_dir"], config["data_root"]):
            self.assertIn(path, targets)
        self.assertTrue(jobs_enabled(config))
        # The model is the trained one the image ships: no volume hides it.
        shipped = image_files(dockerfile_instructions(os.path.join(lib.DEPLOY, "Dockerfile")))
        for model in config["models"]:
            self.assertIn(shipped.get(model["checkpoint"]), DEMO_MODELS, model["checkpoint"])
            for target in targets:
                self.assertFalse(model["checkpoint"].startswith(target.rstrip("/") + "/"),
                                 f"{target} hides {model['checkpoint']}")

    def test_compose_serves_what_the_quick_start_uses(self):
        """README's quick start runs against config/default.yaml: `docker compose up` serves the
        same models under the same names and publishes the same gRPC and HTTP ports on
        loopback, so its tsctl and curl examples work against the compose service too."""
        default, compose_config = load_yaml(DEFAULT_CONFIG), server_config()
        self.assertEqual({m["name"] for m in compose_config["models"]},
                         {m["name"] for m in default["models"]})
        shipped = image_files(dockerfile_instructions(os.path.join(lib.DEPLOY, "Dockerfile")))
        by_name = {m["name"]: m for m in default["models"]}
        for model in compose_config["models"]:
            # default.yaml's paths are relative to its folder.
            served_there = os.path.normpath(os.path.join(os.path.dirname(DEFAULT_CONFIG),
                                                         by_name[model["name"]]["checkpoint"]))
            self.assertEqual(shipped.get(model["checkpoint"]),
                             os.path.relpath(served_there, lib.ROOT), model["name"])
        published = self.services["tsserver"]["ports"]
        for key in ("listen", "http"):
            host_port = port_of(default[key]["listen"] if key == "http" else default[key])
            container_port = port_of(compose_config[key]["listen"] if key == "http"
                                     else compose_config[key])
            self.assertIn(f"127.0.0.1:{host_port}:{container_port}", published, key)
        with open(os.path.join(lib.ROOT, "README.md")) as f:
            readme = f.read()
        for name in by_name:
            self.assertIn(f"--model {name}", readme)

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
        """...and following the jobs replica's promotions through its Service."""
        combined, serving = server_config(), load_yaml(SERVING_CONFIG)
        self.assertEqual(combined["jobs"], {"enabled": True})
        # Jobs off, and the answer to a Jobs RPC names the jobs replica's Service.
        self.assertEqual(serving["jobs"], {"enabled": False,
                                           "elsewhere": "tsserver-jobs.taylorshift:50051"})
        differ = ("jobs", "promotions")
        self.assertEqual({k: v for k, v in combined.items() if k not in differ},
                         {k: v for k, v in serving.items() if k not in differ})
        self.assertNotIn("promotions", combined)
        follow = serving["promotions"]["follow"]
        host, port = follow["server"].rsplit(":", 1)
        with open(os.path.join(K8S_DIR, "base", "service.yaml")) as f:
            services = {d["metadata"]["name"]: d for d in yaml.safe_load_all(f) if d is not None}
        self.assertIn(host, services)
        self.assertEqual(services[host]["spec"]["selector"]["app.kubernetes.io/component"], "jobs")
        self.assertIn(int(port), [p["port"] for p in services[host]["spec"]["ports"]])
        self.assertEqual(port_of(combined["listen"]), int(port))
        # On the serving pods' writable emptyDir (their root file system is read-only).
        self.assertTrue(follow["cache_dir"].startswith(serving["state_dir"] + "/"))

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
        # A follower's cache in the scratch dir; its jobs server (a Service name) stays
        # unreachable here, which it must outlive.
        follow = (config.get("promotions") or {}).get("follow") or {}
        if follow.get("cache_dir"):
            follow["cache_dir"] = os.path.join(scratch, "follow-cache")
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
                       "Jobs by state", "Job progress", "Job time left (ETA)",
                       "Request latency p95 by front end"):
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
        # Objects of the manifests; kustomization files, the patches they name and the files
        # their ConfigMap generators read are not.
        patches = set()
        for path, docs in self.docs.items():
            if os.path.basename(path) == "kustomization.yaml":
                patches |= {os.path.join(os.path.dirname(path), p["path"])
                            for p in docs[0].get("patches", [])}
                patches |= set(generated_files(path).values())
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
        self.assertEqual(len(kustomizations), 4)
        for path in kustomizations:
            doc = self.docs[path][0]
            here = os.path.dirname(path)
            for resource in doc.get("resources", []):
                self.assertTrue(os.path.exists(os.path.join(here, resource)), f"{path}: {resource}")
            for patch in doc.get("patches", []):
                self.assertTrue(os.path.isfile(os.path.join(here, patch["path"])), f"{path}: {patch}")
            for source in generated_files(path).values():
                self.assertTrue(os.path.isfile(source), f"{path}: {source}")

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
            self.assertEqual(ports, {"grpc": grpc_port, "http": port_of(config["http"]["listen"]),
                                     "metrics": metrics_port}, name)
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                self.assertEqual(container[probe]["grpc"]["port"], grpc_port, f"{name} {probe}")
            self.assertIn("memory", container["resources"]["limits"], name)
            mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
            read_only_root = container["securityContext"].get("readOnlyRootFilesystem", False)
            # state_dir is writable: the jobs database, or (jobs off) the promotion follower's
            # cache_dir.
            state = mounts.get(config["state_dir"])
            if read_only_root:
                self.assertTrue(state and not state.get("readOnly"),
                                f"{name}: state_dir {config['state_dir']} is not writable")
            # The models served are the trained demo model of the image: no volume hides it.
            for model in config["models"]:
                self.assertIn(shipped.get(model["checkpoint"]), DEMO_MODELS, name)
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
            self.assertEqual({p["targetPort"] for p in service["spec"]["ports"]},
                             {"grpc", "http", "metrics"})
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

    def test_kustomize_builds(self):
        """The kustomizations as kustomize renders them (k8s_render.py, which
        deploy_k8s_schema_test compares with `kubectl kustomize`)."""
        for overlay, image in (("base", "taylorshift-serve:cpu"), ("gpu", "taylorshift-serve:cuda")):
            docs = k8s_render.render(os.path.join(K8S_DIR, overlay))
            self.assertEqual(len(docs), 12, overlay)
            serving = [d for d in docs if d["kind"] == "Deployment"
                       and d["metadata"]["name"] == "tsserver"][0]
            container = serving["spec"]["template"]["spec"]["containers"][0]
            self.assertEqual(container["image"], image)
            self.assertEqual("nvidia.com/gpu" in container["resources"]["limits"], overlay == "gpu")
        # The training kustomization: the claims, the spec's ConfigMap (spec.yaml verbatim) and
        # the PyTorchJob, in the base's namespace, with the image set on every rank.
        docs = k8s_render.render(TRAINING_DIR)
        self.assertEqual(sorted(d["kind"] for d in docs),
                         ["ConfigMap", "PersistentVolumeClaim", "PersistentVolumeClaim",
                          "PyTorchJob"])
        for doc in docs:
            self.assertEqual(doc["metadata"]["namespace"], "taylorshift", doc["metadata"]["name"])
        configmap = [d for d in docs if d["kind"] == "ConfigMap"][0]
        generated = generated_files(os.path.join(TRAINING_DIR, "kustomization.yaml"))
        for key, source in generated.items():
            with open(source) as f:
                self.assertEqual(configmap["data"][key], f.read(), source)
        job = [d for d in docs if d["kind"] == "PyTorchJob"][0]
        for replica in job["spec"]["pytorchReplicaSpecs"].values():
            for container in replica["template"]["spec"]["containers"]:
                self.assertEqual(container["image"], "taylorshift-serve:cpu")
        # The KServe kustomization: the runtime's ConfigMap, the ServingRuntime (its image set by
        # the kustomization like a Deployment's) and the InferenceService, in the base's namespace.
        docs = k8s_render.render(KSERVE_DIR)
        self.assertEqual(sorted(d["kind"] for d in docs),
                         ["ConfigMap", "InferenceService", "ServingRuntime"])
        for doc in docs:
            self.assertEqual(doc["metadata"]["namespace"], "taylorshift", doc["metadata"]["name"])
        runtime = [d for d in docs if d["kind"] == "ServingRuntime"][0]
        self.assertEqual(runtime["spec"]["containers"][0]["image"], "taylorshift-serve:cpu")


class TrainingKubernetesTest(unittest.TestCase):
    """deploy/k8s/training: a PyTorchJob whose ranks run tsworker on the spec of the
    kustomization's ConfigMap, with the data and the job dir on claims that every rank mounts,
    in the namespace and with the image of the base."""

    def setUp(self):
        self.objects = {(d["kind"], d["metadata"]["name"]): d
                        for d in kustomization_objects(TRAINING_DIR)}
        jobs = [d for (kind, _), d in self.objects.items() if kind == "PyTorchJob"]
        self.assertEqual(len(jobs), 1)
        self.job = jobs[0]
        self.replicas = self.job["spec"]["pytorchReplicaSpecs"]
        self.pod = self.replicas["Master"]["template"]["spec"]
        self.container = rank_container(self.job)
        self.argv = tsworker_argv(self.container)
        self.flags = flags_of(self.argv[1:])
        self.world_size = sum(r.get("replicas", 1) for r in self.replicas.values())
        self.base_jobs = load_yaml(os.path.join(K8S_DIR, "base", "jobs-deployment.yaml"))

    def spec(self):
        """The spec tsworker reads: the ConfigMap key at --spec."""
        path = self.flags["--spec"]
        mount = mount_holding(self.container, path)
        self.assertIsNotNone(mount, f"--spec {path} is on no volume")
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        self.assertIn("configMap", volumes[mount["name"]], path)
        configmap = self.objects[("ConfigMap", volumes[mount["name"]]["configMap"]["name"])]
        key = os.path.relpath(path, mount["mountPath"])
        self.assertIn(key, configmap["data"], path)
        return yaml.safe_load(configmap["data"][key])

    def test_kustomization_is_in_the_namespace_and_image_of_the_base(self):
        base = load_yaml(os.path.join(K8S_DIR, "base", "kustomization.yaml"))
        training = load_yaml(os.path.join(TRAINING_DIR, "kustomization.yaml"))
        self.assertEqual(training["namespace"], base["namespace"])
        self.assertEqual(training["images"], base["images"])
        # The namespace is the base's to create (and to delete with it).
        self.assertNotIn("Namespace", {kind for kind, _ in self.objects})
        base_image = self.base_jobs["spec"]["template"]["spec"]["containers"][0]["image"]
        for replica in self.replicas.values():
            for container in replica["template"]["spec"]["containers"]:
                self.assertEqual(container["image"], base_image)

    def test_job_is_a_master_and_workers_that_restart_on_failure(self):
        self.assertEqual(self.job["apiVersion"], "kubeflow.org/v1")
        self.assertEqual(set(self.replicas), {"Master", "Worker"})
        self.assertEqual(self.replicas["Master"]["replicas"], 1)
        self.assertGreaterEqual(self.replicas["Worker"]["replicas"], 1)
        for name, replica in self.replicas.items():
            self.assertEqual(replica["restartPolicy"], "OnFailure", name)
        # A fixed world: WORLD_SIZE is the replica count, one tsworker per pod.
        self.assertNotIn("elasticPolicy", self.job["spec"])
        self.assertIn(self.job["spec"].get("nprocPerNode", "1"), ("1", 1))
        # Ranks differ only in the RANK the operator gives them.
        self.assertEqual(self.replicas["Master"]["template"], self.replicas["Worker"]["template"])
        ports = {p["name"]: p["containerPort"] for p in self.container.get("ports", [])}
        self.assertIn(OPERATOR_PORT, ports)
        for env in self.container.get("env", []):
            self.assertNotIn(env["name"], OPERATOR_ENV)
        # SIGTERM lets the ranks finish a step and rank 0 save the state before the kill.
        self.assertGreaterEqual(self.pod["terminationGracePeriodSeconds"], 30)

    def test_ranks_run_tsworker_with_flags_it_takes(self):
        self.assertEqual(self.argv[0], "tsworker")
        for arg, value in self.flags.items():
            self.assertIsNotNone(value, f"{arg}: not of the form --flag=value")
        self.assertLessEqual(set(self.flags), TSWORKER_FLAGS)
        self.assertLessEqual(TSWORKER_REQUIRED_FLAGS, set(self.flags))
        for flag in ("--spec", "--job-dir", "--data-root"):
            self.assertTrue(os.path.isabs(self.flags[flag]), flag)
        # Both images put tsworker on PATH next to tsserver.
        for path in DOCKERFILES:
            binaries = image_binaries(dockerfile_instructions(path))
            self.assertEqual(binaries.get("tsworker"), binaries.get("tsserver"), path)
            self.assertIn(binaries.get("tsworker"), ("/usr/local/bin/", "/usr/bin/"), path)
        # Intra-op threads match the CPU request (LibTorch would take every core of the node).
        resources = self.container["resources"]
        self.assertEqual(int(self.flags["--threads"]), int(resources["requests"]["cpu"]))
        self.assertGreater(int(self.flags.get("--collective-timeout", "1")), 0)
        self.assertIn("memory", resources["limits"])
        self.assertIn("memory", resources["requests"])

    def test_pods_run_as_the_images_user(self):
        base = self.base_jobs["spec"]["template"]["spec"]["securityContext"]
        for replica in self.replicas.values():
            context = replica["template"]["spec"]["securityContext"]
            self.assertTrue(context["runAsNonRoot"])
            # The user of the base's pods and the images, so files copied in are readable.
            for key in ("runAsUser", "runAsGroup", "fsGroup"):
                self.assertEqual(context[key], base[key], key)

    def test_volumes_are_the_kustomization_claims_and_config(self):
        volumes = {v["name"]: v for v in self.pod["volumes"]}
        for mount in self.container["volumeMounts"]:
            self.assertIn(mount["name"], volumes)
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                self.assertIn(("PersistentVolumeClaim",
                               volume["persistentVolumeClaim"]["claimName"]), self.objects)
            if "configMap" in volume:
                self.assertIn(("ConfigMap", volume["configMap"]["name"]), self.objects)

        def claim(path):
            mount = mount_holding(self.container, path)
            self.assertIsNotNone(mount, f"{path} is on no volume")
            volume = volumes[mount["name"]]
            self.assertIn("persistentVolumeClaim", volume, path)
            name = volume["persistentVolumeClaim"]["claimName"]
            return mount, self.objects[("PersistentVolumeClaim", name)]

        # Every rank reads the data, on whichever node it runs; none writes it.
        mount, data = claim(self.flags["--data-root"])
        self.assertTrue(mount.get("readOnly"), "the data root is mounted writable")
        self.assertTrue({"ReadWriteMany", "ReadOnlyMany"} & set(data["spec"]["accessModes"]))
        # Rank 0 writes the job dir, every rank reads its training state on a restart.
        mount, checkpoints = claim(self.flags["--job-dir"])
        self.assertFalse(mount.get("readOnly"), "the job dir is mounted read-only")
        self.assertIn("ReadWriteMany", checkpoints["spec"]["accessModes"])
        self.assertNotEqual(data["metadata"]["name"], checkpoints["metadata"]["name"])
        # A job dir per spec name, so that another spec does not resume this one's state.
        self.assertEqual(os.path.basename(self.flags["--job-dir"].rstrip("/")), self.spec()["name"])
        if self.container["securityContext"].get("readOnlyRootFilesystem"):
            tmp = mount_holding(self.container, "/tmp")
            self.assertTrue(tmp and "emptyDir" in volumes[tmp["name"]], "no writable /tmp")

    def test_spec_is_a_training_spec_for_this_world(self):
        spec = self.spec()
        keys, source_keys, generate_keys = documented_spec_keys()
        for key, value in spec.items():
            if key == "data":
                for name, source in value.items():
                    self.assertIn(f"data.{name}", keys)
                    for source_key, source_value in source.items():
                        if name == "validation" and source_key == "split":
                            continue
                        self.assertIn(source_key, source_keys, f"data.{name}")
                        if source_key == "generate":
                            self.assertLessEqual(set(source_value), generate_keys)
                    path = source.get("path")
                    if path is not None:
                        # Inside the data root: relative, without `..`.
                        self.assertFalse(os.path.isabs(path), path)
                        self.assertNotIn("..", path.split("/"), path)
            elif isinstance(value, dict):
                for sub in value:
                    self.assertIn(f"{key}.{sub}", keys, f"{key}.{sub} is not in docs/JOBS.md")
            else:
                self.assertIn(key, keys, f"{key} is not in docs/JOBS.md")
        self.assertRegex(spec["name"], r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
        self.assertIn("train", spec["data"])
        self.assertEqual(len({"steps", "epochs"} & set(spec)), 1, "one of steps and epochs")
        model = spec["model"]
        self.assertEqual(model["embed_dim"] % model["heads"], 0)
        self.assertEqual(model["embed_dim"] % 2, 0)
        # Every rank takes an equal slice of each global batch.
        self.assertEqual(spec.get("batch_size", 16) % self.world_size, 0,
                         f"batch_size is not divisible by the {self.world_size} ranks")
        # The world is the replica count; a `workers` here could only disagree with it.
        self.assertIn(spec.get("workers", self.world_size), (self.world_size,))

    def test_files_pod_mounts_the_claims_where_the_ranks_do(self):
        pod = load_yaml(os.path.join(TRAINING_DIR, "files-pod.yaml"))
        training = load_yaml(os.path.join(TRAINING_DIR, "kustomization.yaml"))
        self.assertNotIn("files-pod.yaml", training["resources"])
        spec = pod["spec"]
        container = spec["containers"][0]
        rank_volumes = {v["name"]: v for v in self.pod["volumes"]}
        rank_claims = {rank_volumes[m["name"]]["persistentVolumeClaim"]["claimName"]: m
                       for m in self.container["volumeMounts"]
                       if "persistentVolumeClaim" in rank_volumes[m["name"]]}
        volumes = {v["name"]: v for v in spec["volumes"]}
        claims = {}
        for mount in container["volumeMounts"]:
            volume = volumes[mount["name"]]
            if "persistentVolumeClaim" in volume:
                claims[volume["persistentVolumeClaim"]["claimName"]] = mount
        self.assertEqual(set(claims), set(rank_claims))
        for name, mount in claims.items():
            self.assertEqual(mount["mountPath"], rank_claims[name]["mountPath"], name)
            self.assertFalse(mount.get("readOnly"), f"{name}: files cannot be copied in")
        for key in ("runAsUser", "runAsGroup", "fsGroup"):
            self.assertEqual(spec["securityContext"][key], self.pod["securityContext"][key], key)

    def test_distributed_doc_uses_the_cli_and_existing_paths(self):
        with open(os.path.join(lib.ROOT, "docs", "DISTRIBUTED.md")) as f:
            text = f.read()
        commands = 0
        for line in re.sub(r"\\\n", " ", text).splitlines():
            words = line.replace("`", " ").split()
            for i, word in enumerate(words):
                if os.path.basename(word) != "tsworker" or i + 1 == len(words):
                    continue
                flags = [w.split("=", 1)[0] for w in words[i + 1:] if w.startswith("--")]
                if flags:
                    commands += 1
                    self.assertLessEqual(set(flags), TSWORKER_FLAGS, line)
        self.assertGreater(commands, 0, "no tsworker command line in docs/DISTRIBUTED.md")
        for path in set(re.findall(r"\b(deploy/[A-Za-z0-9_./-]*[A-Za-z0-9_])", text)):
            self.assertTrue(os.path.exists(os.path.join(lib.ROOT, path)), path)
        self.assertIn(f"{self.job['metadata']['name']}-master-0", text)


class KServeTest(unittest.TestCase):
    """deploy/k8s/kserve: tsserver as a KServe custom runtime. The ServingRuntime runs the
    image's entrypoint with a configuration from the kustomization's ConfigMap and the
    InferenceService's checkpoint (storageUri, copied to /mnt/models) under the
    InferenceService's name; it declares the ports, the protocols and the REST probes that this
    configuration serves. The command line itself is run by the real tsserver."""

    def setUp(self):
        self.objects = {(d["kind"], d["metadata"]["name"]): d
                        for d in kustomization_objects(KSERVE_DIR)}
        runtimes = [d for (kind, _), d in self.objects.items() if kind == "ServingRuntime"]
        services = [d for (kind, _), d in self.objects.items() if kind == "InferenceService"]
        self.assertEqual((len(runtimes), len(services)), (1, 1))
        self.runtime, self.isvc = runtimes[0], services[0]
        self.spec = self.runtime["spec"]
        containers = self.spec["containers"]
        self.assertEqual([c["name"] for c in containers], ["kserve-container"])
        self.container = containers[0]
        self.argv = list(self.container.get("args", []))
        self.config = yaml.safe_load(self.config_text())

    def flag(self, name):
        self.assertIn(name, self.argv)
        return self.argv[self.argv.index(name) + 1]

    def config_text(self):
        """The configuration tsserver reads: the ConfigMap key at --config."""
        path = self.flag("--config")
        mount = mount_holding(self.container, path)
        self.assertIsNotNone(mount, f"--config {path} is on no volume")
        volumes = {v["name"]: v for v in self.spec["volumes"]}
        self.assertIn("configMap", volumes[mount["name"]], path)
        configmap = self.objects[("ConfigMap", volumes[mount["name"]]["configMap"]["name"])]
        key = os.path.relpath(path, mount["mountPath"])
        self.assertIn(key, configmap["data"], path)
        return configmap["data"][key]

    def test_runtime_serves_the_storage_uri_checkpoint_under_the_service_name(self):
        self.assertEqual(self.runtime["apiVersion"], "serving.kserve.io/v1alpha1")
        self.assertEqual(self.flag("--model"), f"{KSERVE_NAME}={KSERVE_CHECKPOINT}")
        # The only model: the configuration names none.
        self.assertFalse(self.config.get("models"))
        self.assertEqual(self.argv.count("--model"), 1)
        # The InferenceService picks this runtime and its format, and its name is a valid
        # model name (it becomes one).
        model = self.isvc["spec"]["predictor"]["model"]
        self.assertEqual(self.isvc["apiVersion"], "serving.kserve.io/v1beta1")
        self.assertEqual(model["runtime"], self.runtime["metadata"]["name"])
        formats = {f["name"] for f in self.spec["supportedModelFormats"]}
        self.assertIn(model["modelFormat"]["name"], formats)
        self.assertIn(model["protocolVersion"], self.spec["protocolVersions"])
        self.assertRegex(self.isvc["metadata"]["name"], r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
        self.assertRegex(model["storageUri"], r"^[a-z0-9]+://")
        # No volume of the runtime hides the storage initializer's folder.
        for mount in self.container.get("volumeMounts", []):
            root = mount["mountPath"].rstrip("/")
            self.assertFalse(KSERVE_MODEL_DIR.startswith(root + "/") or root == KSERVE_MODEL_DIR
                             or root.startswith(KSERVE_MODEL_DIR + "/"), root)
        # --threads matches the CPU request (LibTorch would take every core of the node).
        self.assertEqual(int(self.flag("--threads")),
                         int(self.container["resources"]["requests"]["cpu"]))
        self.assertIn("memory", self.container["resources"]["limits"])

    def test_runtime_declares_the_ports_protocols_and_probes_the_config_serves(self):
        self.assertEqual(self.spec["protocolVersions"], ["v2", "grpc-v2"])
        http_port = port_of(self.config["http"]["listen"])
        grpc_port = port_of(self.config["listen"])
        ports = self.container["ports"]
        # KServe exposes the first port as the Service's port 80 (REST clients), and gives a
        # port whose name contains "grpc" or "h2c" appProtocol h2c.
        self.assertEqual(ports[0]["containerPort"], http_port)
        self.assertNotRegex(ports[0]["name"], "grpc|h2c")
        grpc = [p for p in ports if re.search("grpc|h2c", p["name"])]
        self.assertEqual([p["containerPort"] for p in grpc], [grpc_port])
        self.assertEqual(len(ports), 2)
        # Two ports: a Deployment and Service, not a Knative Service (one port per container).
        annotations = self.isvc["metadata"].get("annotations", {})
        self.assertIn(annotations.get("serving.kserve.io/deploymentMode"),
                      ("RawDeployment", "Standard"))
        for probe, path in (("startupProbe", "/v2/health/live"),
                            ("readinessProbe", "/v2/health/ready"),
                            ("livenessProbe", "/v2/health/live")):
            self.assertEqual(self.container[probe]["httpGet"]["path"], path, probe)
            self.assertEqual(self.container[probe]["httpGet"]["port"], http_port, probe)
        self.assertEqual(self.spec["annotations"]["prometheus.kserve.io/port"],
                         str(port_of(self.config["metrics_listen"])))
        self.assertEqual(self.spec["annotations"]["prometheus.kserve.io/path"], "/metrics")
        # Pods get Kubernetes' default grace (30 s) unless the InferenceService sets one.
        grace_s = self.isvc["spec"]["predictor"].get("terminationGracePeriodSeconds", 30)
        self.assertGreater(grace_s * 1000, self.config["shutdown_grace_ms"])

    def test_runtime_runs_the_image_of_the_base_as_its_user(self):
        self.assertFalse(jobs_enabled(self.config))
        base = load_yaml(os.path.join(K8S_DIR, "base", "deployment.yaml"))
        pod = base["spec"]["template"]["spec"]
        self.assertEqual(self.container["image"], pod["containers"][0]["image"])
        base_kustomization = load_yaml(os.path.join(K8S_DIR, "base", "kustomization.yaml"))
        kustomization = load_yaml(os.path.join(KSERVE_DIR, "kustomization.yaml"))
        self.assertEqual(kustomization["images"], base_kustomization["images"])
        self.assertEqual(kustomization["namespace"], base_kustomization["namespace"])
        self.assertNotIn("Namespace", {kind for kind, _ in self.objects})
        # A ServingRuntime has no pod securityContext: the container's runs as the image's user.
        context = self.container["securityContext"]
        self.assertTrue(context["runAsNonRoot"])
        for key in ("runAsUser", "runAsGroup"):
            self.assertEqual(context[key], pod["securityContext"][key], key)
        volumes = {v["name"]: v for v in self.spec["volumes"]}
        for mount in self.container["volumeMounts"]:
            self.assertIn(mount["name"], volumes)
        if context.get("readOnlyRootFilesystem"):
            state = mount_holding(self.container, self.config["state_dir"])
            self.assertTrue(state and not state.get("readOnly"),
                            f"state_dir {self.config['state_dir']} is not writable")
            self.assertIn("emptyDir", volumes[state["name"]])

    def test_tsserver_runs_the_runtime_command(self):
        """The runtime's arguments (the InferenceService's name for {{.Name}}) and its
        configuration, with ports and folders moved to loopback and a temp dir, start tsserver:
        the ready file names the HTTP listener, whose readiness probe path answers
        200 {"ready": true}, the model is ready under the InferenceService's name, and gRPC
        health answers SERVING. SIGTERM stops it with status 0."""
        name = self.isvc["metadata"]["name"]
        with tempfile.TemporaryDirectory(prefix="ts-kserve-") as tmp:
            checkpoint = os.path.join(tmp, KSERVE_CHECKPOINT.lstrip("/"))
            os.makedirs(os.path.dirname(checkpoint))
            init = subprocess.run(
                [ARGS.tsmodel, "init", "--out", checkpoint, "--labels", "a,b", "--embed-dim",
                 "32", "--depth", "1", "--heads", "4", "--max-length", "64"],
                capture_output=True, text=True, timeout=120)
            self.assertEqual(init.returncode, 0, init.stdout + init.stderr)
            config = dict(self.config, listen="127.0.0.1:0", metrics_listen="127.0.0.1:0",
                          state_dir=os.path.join(tmp, "state"),
                          data_root=os.path.join(tmp, "data"))
            config["http"] = dict(config["http"], listen="127.0.0.1:0")
            config_path = os.path.join(tmp, "tsserver-kserve.yaml")
            with open(config_path, "w") as f:
                yaml.safe_dump(config, f)
            argv = []
            for i, arg in enumerate(self.argv):
                previous = self.argv[i - 1] if i > 0 else ""
                if previous == "--config":
                    arg = config_path
                elif previous == "--model":
                    arg = arg.replace(KSERVE_NAME, name).replace(KSERVE_CHECKPOINT, checkpoint)
                elif previous == "--threads":
                    arg = "1"
                argv.append(arg)
            ready_file = os.path.join(tmp, "ready")
            log_path = os.path.join(tmp, "tsserver.log")
            with open(log_path, "w") as log:
                server = subprocess.Popen([ARGS.tsserver, *argv, "--ready-file", ready_file],
                                          stdout=log, stderr=subprocess.STDOUT)

            def log_text():
                with open(log_path) as f:
                    return f.read()[-3000:]

            try:
                fields = {}
                deadline = time.monotonic() + 90
                while "grpc" not in fields and time.monotonic() < deadline:
                    if server.poll() is not None:
                        self.fail(f"tsserver exited with {server.returncode}:\n{log_text()}")
                    if os.path.exists(ready_file):
                        with open(ready_file) as f:
                            fields = dict(l.split("=", 1) for l in f.read().split() if "=" in l)
                    time.sleep(0.1)
                self.assertIn("grpc", fields, f"tsserver did not become ready:\n{log_text()}")
                self.assertIn("http", fields, f"no HTTP listener in the ready file:\n{log_text()}")

                def get(path):
                    url = f"http://{fields['http']}{path}"
                    try:
                        with urllib.request.urlopen(url, timeout=30) as answer:
                            return answer.status, json.load(answer)
                    except urllib.error.HTTPError as error:
                        return error.code, json.load(error)

                probe = self.container["readinessProbe"]["httpGet"]["path"]
                self.assertEqual(get(probe), (200, {"ready": True, "live": True}))
                self.assertEqual(get(self.container["livenessProbe"]["httpGet"]["path"]),
                                 (200, {"live": True}))
                self.assertEqual(get(f"/v2/models/{name}/ready"),
                                 (200, {"name": name, "ready": True}))
                health = subprocess.run([ARGS.tsctl, "health", "--server", fields["grpc"],
                                         "--service", name],
                                        capture_output=True, text=True, timeout=30)
                self.assertEqual(health.stdout.strip(), "SERVING", health.stderr)
            finally:
                if server.poll() is None:
                    server.send_signal(signal.SIGTERM)
                    try:
                        server.wait(timeout=60)
                    except subprocess.TimeoutExpired:
                        server.kill()
                        server.wait()
            self.assertEqual(server.returncode, 0, log_text())


class TrainingWorkerTest(unittest.TestCase):
    """The PyTorchJob's command run by the real tsworker: two ranks on loopback with the
    environment the Training Operator gives them (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK),
    the ConfigMap's spec with its model made tiny and its steps few, data files at the paths the
    spec names, and the pod's mounts moved into a temp dir (the job dir not created)."""

    def setUp(self):
        self.assertTrue(os.access(tsworker(), os.X_OK), f"{tsworker()}: build target tsworker")
        objects = kustomization_objects(TRAINING_DIR)
        job = [d for d in objects if d["kind"] == "PyTorchJob"][0]
        pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
        self.container = rank_container(job)
        self.tmp = tempfile.mkdtemp(prefix="ts-tsworker-")
        self.addCleanup(shutil.rmtree, self.tmp, ignore_errors=True)
        self.roots = {}
        for mount in self.container["volumeMounts"]:
            self.roots[mount["mountPath"].rstrip("/")] = os.path.join(self.tmp, mount["name"])
            os.makedirs(self.roots[mount["mountPath"].rstrip("/")])
        argv = tsworker_argv(self.container)
        self.flags = flags_of(argv[1:])
        # The ConfigMap's files where its volume is mounted; the spec is kept aside to shrink.
        volumes = {v["name"]: v for v in pod["volumes"]}
        for mount in self.container["volumeMounts"]:
            if "configMap" in volumes[mount["name"]]:
                name = volumes[mount["name"]]["configMap"]["name"]
                configmap = [d for d in objects if d["kind"] == "ConfigMap"
                             and d["metadata"]["name"] == name][0]
                for key, value in configmap["data"].items():
                    with open(os.path.join(self.local(mount["mountPath"]), key), "w") as f:
                        f.write(value)
        with open(self.local(self.flags["--spec"])) as f:
            self.spec = yaml.safe_load(f)
        self.job_dir = self.local(self.flags["--job-dir"])
        self.write_data()

    def local(self, path):
        """Where a path inside the pod is in the temp dir."""
        root = max((r for r in self.roots if path == r or path.startswith(r + "/")), key=len)
        return os.path.join(self.roots[root], os.path.relpath(path, root))

    def write_data(self):
        """Small JSON Lines files (two classes: letters, digits) at the spec's data paths."""
        for name, source in self.spec["data"].items():
            if "path" not in source:
                continue
            self.assertEqual(source.get("format"), "jsonl", f"data.{name}: the test writes jsonl")
            path = os.path.join(self.local(self.flags["--data-root"]), source["path"])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                for i in range(64 if name == "train" else 16):
                    text = ("abcdefgh" if i % 2 else "01234567")[i % 8:] * 3
                    f.write(json.dumps({"text": text, "label": "letters" if i % 2 else "digits"}))
                    f.write("\n")

    def start_ranks(self, steps, world_size=2):
        """Starts world_size tsworker processes with the pod's command and a small spec;
        returns [(process, log path)]."""
        spec = dict(self.spec)
        spec["model"] = dict(spec["model"], embed_dim=16, depth=1, heads=2, max_length=64)
        spec.pop("epochs", None)
        spec.update(steps=steps, checkpoint_interval=2, eval_interval=2, log_interval=1)
        if "warmup_steps" in spec.get("optimizer", {}):
            spec["optimizer"] = dict(spec["optimizer"], warmup_steps=1)
        for source in spec["data"].values():
            if "generate" in source:
                source["generate"] = dict(source["generate"], count=64)
        with open(self.local(self.flags["--spec"]), "w") as f:
            yaml.safe_dump(spec, f)
        argv = [tsworker()]
        for flag, value in self.flags.items():
            if flag == "--threads":
                value = "1"
            elif flag == "--collective-timeout":
                value = "60"  # a rank that dies fails the test in a minute, not ten
            elif value.startswith("/"):
                value = self.local(value)
            argv.append(f"{flag}={value}")
        env = {k: v for k, v in os.environ.items() if k not in OPERATOR_ENV | {"LOCAL_RANK"}}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
                   WORLD_SIZE=str(world_size))
        ranks = []
        for rank in range(world_size):
            log_path = os.path.join(self.tmp, f"rank-{rank}.log")
            with open(log_path, "w") as log:
                process = subprocess.Popen(argv, env=dict(env, RANK=str(rank)), stdout=log,
                                           stderr=subprocess.STDOUT)
            self.addCleanup(self.kill, process)
            ranks.append((process, log_path))
        return ranks

    @staticmethod
    def kill(process):
        if process.poll() is None:
            process.kill()
            process.wait()

    @staticmethod
    def logs(ranks):
        out = []
        for rank, (_, path) in enumerate(ranks):
            with open(path) as f:
                out.append(f"--- rank {rank}:\n{f.read()[-2000:]}")
        return "\n".join(out)

    def wait(self, ranks, timeout_s):
        deadline = time.monotonic() + timeout_s
        for process, _ in ranks:
            try:
                process.wait(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.fail(f"tsworker ranks still running after {timeout_s} s:\n{self.logs(ranks)}")

    def test_ranks_train_the_spec_to_the_end(self):
        ranks = self.start_ranks(steps=4)
        self.wait(ranks, 240)
        for rank, (process, _) in enumerate(ranks):
            self.assertEqual(process.returncode, 0, f"rank {rank}:\n{self.logs(ranks)}")
        # Rank 0 wrote the checkpoints into the job dir, which it created.
        files = set(os.listdir(self.job_dir))
        self.assertLessEqual({"step-4.tsckpt", "best.tsckpt"}, files, self.logs(ranks))
        info = subprocess.run([ARGS.tsmodel, "info", os.path.join(self.job_dir, "best.tsckpt")],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(info.returncode, 0, info.stdout + info.stderr)

    def test_sigterm_stops_every_rank_with_the_state_saved(self):
        """What a deleted PyTorchJob or a drained node does to the pods: the ranks stop
        together, rank 0 saves the training state, and they exit 0 with "stopped" logged."""
        ranks = self.start_ranks(steps=100000)
        state = os.path.join(self.job_dir, "training_state.pt")
        deadline = time.monotonic() + 240
        while not os.path.exists(state):
            for process, _ in ranks:
                if process.poll() is not None:
                    self.fail(f"a rank exited with {process.returncode}:\n{self.logs(ranks)}")
            if time.monotonic() > deadline:
                self.fail(f"no {state} after 240 s:\n{self.logs(ranks)}")
            time.sleep(0.2)
        for process, _ in ranks:
            process.send_signal(signal.SIGTERM)
        self.wait(ranks, 120)
        for rank, (process, _) in enumerate(ranks):
            self.assertEqual(process.returncode, 0, f"rank {rank}:\n{self.logs(ranks)}")
        with open(ranks[0][1]) as f:
            self.assertIn("stopped", f.read().lower())
        self.assertTrue(os.path.exists(state), self.logs(ranks))


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


def stage_names(steps):
    """{stage index: (its base image or stage, its name or None)}."""
    out = {}
    for stage, instruction, args in steps:
        if instruction == "FROM":
            words = args.split()
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            out[stage] = (words[0], name)
    return out


def image_stages(steps, target=None):
    """Stage indices of an image: the target stage (default: the last one, what `docker build`
    builds) and the stages it derives FROM, base first."""
    names = stage_names(steps)
    by_name = {name: index for index, (_, name) in names.items() if name}
    stage = max(names) if target is None else by_name[target]
    chain = [stage]
    while names[stage][0] in by_name:
        stage = by_name[names[stage][0]]
        chain.insert(0, stage)
    return chain


def image_files(steps):
    """{path in the final image: repository path} of the files the default target and the
    stages it derives from COPY from the build context (COPY --from=... is left out)."""
    chain = image_stages(steps)
    out = {}
    for stage, instruction, args in steps:
        if stage not in chain or instruction not in ("COPY", "ADD"):
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
    """The exec-form command of the default target's HEALTHCHECK."""
    chain = image_stages(steps)
    health = [a for s, i, a in steps if s in chain and i == "HEALTHCHECK"]
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


def setup_torch_version():
    """The torch wheel version scripts/setup --cuda installs."""
    with open(os.path.join(lib.ROOT, "scripts", "setup")) as f:
        return re.search(r"^torch_version=(\S+)$", f.read(), re.M).group(1)


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
            if "/site-packages/" in path or path.startswith("/usr/local/cuda"):
                # The CUDA build's LibTorch (PyPI's torch), its CUDA libraries and the CUDA
                # toolkit's: the CUDA image takes them from the torch wheel and its nvidia-* wheels,
                # not from Debian.
                continue
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
# What the CUDA image takes from the torch wheel instead of Debian (the wheel's c10d brings its
# own gloo headers and library, and its own oneDNN, so model/kernels/cpu_gemm keeps at::mm there).
DEBIAN_TORCH = {"libtorch-dev", "libopenblas0-openmp", "libgloo-dev", "libdnnl-dev"}


class DockerfileTest(unittest.TestCase):
    def test_dockerfiles(self):
        binaries = [ARGS.tsserver, tsworker(), ARGS.tsctl, ARGS.tsmodel]
        needed = needed_packages(binaries) - BASE_PACKAGES
        # A sanitizer build's binaries (scripts/sanitize) link the sanitizers' runtimes, and its
        # tsctl needs some of gRPC's own libraries (libssl, re2, c-ares) directly: the images
        # ship the ordinary build, whose libraries are the ones to compare.
        sanitized = any(p.startswith(("libasan", "libubsan", "libtsan", "liblsan"))
                        for p in needed)
        relative = sorted(os.path.relpath(b, ARGS.build_dir) for b in binaries)
        for path in DOCKERFILES:
            name = os.path.basename(path)
            steps = dockerfile_instructions(path)
            names = stage_names(steps)
            self.assertEqual(names[0][1], "build", f"{name}: the first stage builds")
            chain = image_stages(steps)
            # The default target: Debian, then (through named stages) the runtime image.
            self.assertRegex(names[chain[0]][0], r"^debian:12(-slim)?\b", name)
            self.assertNotIn(0, chain, f"{name}: the runtime image derives from the build stage")
            self.assertRegex(names[0][0], r"^debian:12\b", name)
            build_runs = [a for s, i, a in steps if s == 0 and i == "RUN"]
            runtime = [(i, a) for s, i, a in steps if s in chain]
            # runtime-prebuilt (scripts/deploy-check --prebuilt): the same base, the same four
            # binaries from the context's .prebuilt/ instead of the build stage.
            if any(n == "runtime-prebuilt" for _, n in names.values()):
                prebuilt = image_stages(steps, "runtime-prebuilt")
                self.assertEqual(prebuilt[:-1], chain[:-1], f"{name}: runtime-prebuilt's base")
                sources = sorted(os.path.basename(src) for s, i, a in steps
                                 if s == prebuilt[-1] and i == "COPY"
                                 for src in copy_words(a)[1])
                self.assertEqual(sources, sorted(os.path.basename(b) for b in relative),
                                 f"{name}: runtime-prebuilt copies the four binaries")
            build_packages = sorted(p for a in build_runs for p in apt_packages(a)
                                    if not p.startswith(("cuda-toolkit", "ca-certificates",
                                                         "curl", "unzip")))
            # curl is in scripts/setup for the tests; the Dockerfiles' own curl is a download tool.
            expected = [p for p in setup_packages() if p != "curl"]
            if name.endswith(".cuda"):
                # scripts/setup --cuda: the wheel's LibTorch instead of Debian's, from a venv.
                expected = sorted((set(expected) - DEBIAN_TORCH) | {"python3-venv"})
                args = [a for _, i, a in steps if i == "ARG"]
                self.assertIn(f"TORCH_VERSION={setup_torch_version()}", args,
                              f"{name}: the torch wheel scripts/setup --cuda pins")
            self.assertEqual(build_packages, expected, f"{name}: build stage vs scripts/setup")
            runtime_packages = {p for i, a in runtime if i == "RUN" for p in apt_packages(a)}
            missing = needed - runtime_packages
            if name.endswith(".cuda"):
                missing = {p for p in missing
                           if not p.startswith(("libtorch", "libgloo", "libdnnl"))}
            if not sanitized:
                self.assertEqual(missing, set(), f"{name}: runtime stage lacks libraries")
            # Sources copied from the context exist; the binaries come from the build tree.
            copied = []
            for stage, instruction, args in steps:
                if instruction not in ("COPY", "ADD") or stage not in [0] + chain:
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
                    self.assertIn(shipped.get(model["checkpoint"]), DEMO_MODELS,
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
            chain = image_stages(steps)
            kept = {}
            for stage, instruction, args in steps:
                if stage in chain and instruction in ("USER", "WORKDIR", "EXPOSE", "ENTRYPOINT",
                                                     "CMD", "HEALTHCHECK"):
                    kept.setdefault(instruction, []).append(args)
            kept["files"] = image_files(steps)
            kept["demo"] = [a for s, i, a in steps if s in chain and i == "ENV"
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
    parser.add_argument("--tsworker", help="default: tsworker in the folder of --tsserver")
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

#!/usr/bin/python3
"""Every Kubernetes manifest of deploy/k8s validated against the schemas a cluster applies it
with: the kustomizations (base, gpu, kserve, training) as rendered (k8s_render.py, compared with
`kubectl kustomize` where a kubectl is on PATH) and the files applied on their own
(servicemonitor.yaml, training/files-pod.yaml).
- Kubernetes' own kinds against the Kubernetes 1.32 OpenAPI schemas in their strict form (no
  field that the API does not define), from PyPI's kubernetes-validate.
- Custom resources against the openAPIV3Schema of their operators' CRDs (tests/deploy/k8s_crds/,
  sha256-checked): KServe v0.14.1 and v0.20.0 (InferenceService, ServingRuntime), the Kubeflow
  Training Operator v1.9.0 (PyTorchJob kubeflow.org/v1), the Prometheus Operator v0.93.0
  (ServiceMonitor). Strict as the API server's field validation is: an object schema that lists
  its properties admits no other field unless it has x-kubernetes-preserve-unknown-fields;
  metadata against Kubernetes' ObjectMeta.
- Misspelled fields in mutated copies are refused, by both validators.
- The PodDisruptionBudget and the NetworkPolicies (base/pdb.yaml, base/networkpolicy.yaml) do what
  README.md says: a matrix of connections is evaluated against the policies.

Runs in the project venv .venv-deploy (scripts/setup): started by another python, it re-runs
itself with --venv's; without that venv it fails, saying to run scripts/setup.
Usage: k8s_schema_test.py [--venv DIR]   (default: TS_DEPLOY_VENV, else .venv-deploy)"""

import argparse
import copy
import glob
import gzip
import hashlib
import os
import shutil
import subprocess
import sys
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
K8S_DIR = os.path.join(ROOT, "deploy", "k8s")
CRD_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "k8s_crds")
KUBERNETES_VERSION = "1.32"
KUSTOMIZATIONS = ["base", "gpu", "kserve", "training"]
# Applied with kubectl apply -f, not through a kustomization.
STANDALONE = ["servicemonitor.yaml", "training/files-pod.yaml"]
# Files in deploy/k8s that are not Kubernetes objects: a kustomization's generator input.
NOT_OBJECTS = ["training/spec.yaml"]


def parse_args():
    parser = argparse.ArgumentParser()
    parser.add_argument("--venv", default=os.environ.get("TS_DEPLOY_VENV",
                                                         os.path.join(ROOT, ".venv-deploy")))
    return parser.parse_known_args()


def enter_venv(venv):
    """Re-runs this script with the venv's python unless it is the one running."""
    python = os.path.join(venv, "bin", "python")
    if os.path.realpath(sys.prefix) == os.path.realpath(venv):
        return
    if not os.access(python, os.X_OK):
        sys.exit(f"k8s_schema_test: FAIL: no project venv at {venv} (kubernetes-validate and "
                 "jsonschema): run scripts/setup")
    os.execv(python, [python] + sys.argv)


ARGS, REST = parse_args()
enter_venv(ARGS.venv)

import jsonschema  # noqa: E402
import kubernetes_validate  # noqa: E402
import yaml  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import k8s_render  # noqa: E402


# --- custom resources -----------------------------------------------------------------------

def load_crds():
    """[(source entry, CRD object)] of tests/deploy/k8s_crds, each checked against its sha256."""
    with open(os.path.join(CRD_DIR, "SOURCES.yaml")) as f:
        sources = yaml.safe_load(f)
    out = []
    for source in sources:
        with gzip.open(os.path.join(CRD_DIR, source["file"])) as f:
            text = f.read()
        digest = hashlib.sha256(text).hexdigest()
        if digest != source["sha256"]:
            raise AssertionError(f"{source['file']}: sha256 {digest}, SOURCES.yaml says "
                                 f"{source['sha256']}")
        crd = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        if crd.get("kind") != "CustomResourceDefinition":
            raise AssertionError(f"{source['file']}: not a CustomResourceDefinition")
        out.append((source, crd))
    return out


def strict_schema(schema):
    """A CRD's structural OpenAPI v3 schema as a JSON Schema that refuses what the API server's
    strict field validation refuses: unknown fields of an object that lists its properties,
    unless x-kubernetes-preserve-unknown-fields says to keep them; `nullable` admits null;
    x-kubernetes-int-or-string admits an integer or a string; an embedded resource admits
    apiVersion, kind and metadata."""
    if not isinstance(schema, dict):
        return schema
    out = {}
    for key, value in schema.items():
        if key in ("properties", "patternProperties", "definitions"):
            out[key] = {k: strict_schema(v) for k, v in value.items()}
        elif key in ("items", "additionalProperties", "not") and isinstance(value, dict):
            out[key] = strict_schema(value)
        elif key in ("anyOf", "allOf", "oneOf"):
            out[key] = [strict_schema(v) for v in value]
        elif key.startswith("x-kubernetes-") or key in ("description", "default", "example",
                                                        "externalDocs", "format"):
            continue
        else:
            out[key] = value
    if schema.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.pop("anyOf", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if schema.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if schema.get("x-kubernetes-embedded-resource") and "properties" in out:
        for name in ("apiVersion", "kind"):
            out["properties"].setdefault(name, {"type": "string"})
        out["properties"].setdefault("metadata", {"type": "object"})
    if ("properties" in out and "additionalProperties" not in out
            and not schema.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def object_meta_validator():
    """Kubernetes' ObjectMeta (strict), as kubernetes-validate's 1.32 schemas define it."""
    import json
    import importlib_resources
    from referencing import Registry, Resource
    folder = importlib_resources.files("kubernetes_validate").joinpath(
        "kubernetes-json-schema", f"v{KUBERNETES_VERSION}.0-local-strict")
    schema = json.loads(folder.joinpath("objectmeta-meta-v1.json").read_text())
    definitions = json.loads(folder.joinpath("_definitions.json").read_text())
    registry = Resource.from_contents(definitions) @ Registry()
    return jsonschema.Draft202012Validator(schema, registry=registry)


class CustomResourceValidator:
    """Validates custom resources against the CRDs of one operator release each."""

    def __init__(self, crds):
        self.schemas = {}  # (group, version, kind) -> [(source, validator)]
        self.scopes = {}
        self.meta = object_meta_validator()
        for source, crd in crds:
            spec = crd["spec"]
            for version in spec["versions"]:
                if not version.get("served"):
                    continue
                schema = strict_schema(version["schema"]["openAPIV3Schema"])
                jsonschema.Draft7Validator.check_schema(schema)
                key = (spec["group"], version["name"], spec["names"]["kind"])
                self.schemas.setdefault(key, []).append(
                    (source, jsonschema.Draft7Validator(schema)))
                self.scopes[key] = spec["scope"]

    def key(self, obj):
        group, _, version = obj["apiVersion"].rpartition("/")
        return group, version, obj["kind"]

    def knows(self, obj):
        return any(k[0] == self.key(obj)[0] and k[2] == obj["kind"] for k in self.schemas)

    def errors(self, obj):
        """[message] of every violation, for every release of the operator that defines it."""
        key = self.key(obj)
        if key not in self.schemas:
            return [f"{obj['apiVersion']} {obj['kind']}: no served version of a known CRD"]
        out = []
        if self.scopes[key] == "Namespaced" and not obj["metadata"].get("namespace"):
            out.append("namespaced, but no metadata.namespace")
        for error in self.meta.iter_errors(obj.get("metadata", {})):
            out.append(f"metadata.{'.'.join(map(str, error.path))}: {error.message}")
        for source, validator in self.schemas[key]:
            for error in validator.iter_errors(obj):
                where = ".".join(map(str, error.path))
                out.append(f"{source['repository']} {source['tag']}: {where}: {error.message}")
        return out


# --- Kubernetes' own kinds -----------------------------------------------------------------

def kubernetes_errors(obj):
    """[message] of kubernetes-validate's strict 1.32 check (a kind it has no schema for is an
    error too: every object here is either a Kubernetes kind or a known custom resource)."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'.'.join(map(str, error.path))}: {error.message}"]
    except kubernetes_validate.SchemaNotFoundError as error:
        return [error.message]
    return []


# --- what is validated ---------------------------------------------------------------------

def manifests():
    """{source: [objects]}: each kustomization rendered and each standalone file."""
    out = {}
    for name in KUSTOMIZATIONS:
        out[f"kustomization {name}"] = k8s_render.render(os.path.join(K8S_DIR, name))
    for name in STANDALONE:
        out[name] = k8s_render.load_documents(os.path.join(K8S_DIR, name))
    return out


def name_of(obj):
    return f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


class Fixture:
    crs = None

    @classmethod
    def get(cls):
        if cls.crs is None:
            cls.crs = CustomResourceValidator(load_crds())
        return cls.crs


def errors_of(obj):
    crs = Fixture.get()
    return crs.errors(obj) if crs.knows(obj) else kubernetes_errors(obj)


class SchemaTest(unittest.TestCase):
    def test_every_manifest_file_is_validated(self):
        covered = {os.path.join(K8S_DIR, p) for p in STANDALONE + NOT_OBJECTS}
        for name in KUSTOMIZATIONS:
            covered |= set(k8s_render.kustomization_inputs(os.path.join(K8S_DIR, name)))
        present = set(glob.glob(os.path.join(K8S_DIR, "**", "*.yaml"), recursive=True))
        self.assertEqual(sorted(present - covered), [], "files of deploy/k8s no check reads")

    def test_manifests_validate(self):
        kinds = set()
        for source, objects in manifests().items():
            self.assertTrue(objects, source)
            for obj in objects:
                kinds.add(obj["kind"])
                with self.subTest(source=source, object=name_of(obj)):
                    self.assertEqual(errors_of(obj), [])
        # Every kind the issue names was validated, custom resources included.
        for kind in ("Deployment", "Service", "ConfigMap", "PersistentVolumeClaim",
                     "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy", "Pod",
                     "Namespace", "InferenceService", "ServingRuntime", "PyTorchJob",
                     "ServiceMonitor"):
            self.assertIn(kind, kinds)

    def test_crds_are_the_pinned_releases(self):
        crds = load_crds()
        kinds = {(s["repository"], s["tag"], c["spec"]["names"]["kind"]) for s, c in crds}
        self.assertEqual(kinds, {
            ("kserve/kserve", "v0.14.1", "InferenceService"),
            ("kserve/kserve", "v0.14.1", "ServingRuntime"),
            ("kserve/kserve", "v0.20.0", "InferenceService"),
            ("kserve/kserve", "v0.20.0", "ServingRuntime"),
            ("kubeflow/training-operator", "v1.9.0", "PyTorchJob"),
            ("prometheus-operator/prometheus-operator", "v0.93.0", "ServiceMonitor")})

    def test_renderer_refuses_what_it_does_not_render(self):
        import tempfile
        for extra in ({"commonLabels": {"a": "b"}},
                      {"configMapGenerator": [{"name": "c", "literals": ["a=b"]}],
                       "generatorOptions": {"disableNameSuffixHash": True}},
                      {"configMapGenerator": [{"name": "c", "files": ["kustomization.yaml"]}]},
                      {"patches": [{"path": "p.yaml", "target": {"kind": "Deployment"}}]}):
            with self.subTest(extra=extra), tempfile.TemporaryDirectory() as folder:
                with open(os.path.join(folder, "kustomization.yaml"), "w") as f:
                    yaml.safe_dump(dict({"resources": []}, **extra), f)
                with self.assertRaises(NotImplementedError):
                    k8s_render.render(folder)

    def test_kubectl_kustomize_renders_the_same(self):
        kubectl = shutil.which("kubectl")
        if kubectl is None:
            self.skipTest("no kubectl on PATH: the renderer is not compared with kustomize")
        version = subprocess.run([kubectl, "version", "--client"], capture_output=True,
                                 text=True, timeout=60).stdout.strip().replace("\n", ", ")
        for name in KUSTOMIZATIONS:
            with self.subTest(kustomization=name):
                result = subprocess.run([kubectl, "kustomize", os.path.join(K8S_DIR, name)],
                                        capture_output=True, text=True, timeout=60)
                self.assertEqual(result.returncode, 0, result.stderr)

                def key(obj):
                    return obj["kind"], obj["metadata"]["name"]

                theirs = sorted((d for d in yaml.safe_load_all(result.stdout) if d), key=key)
                ours = sorted(k8s_render.render(os.path.join(K8S_DIR, name)), key=key)
                self.assertEqual(ours, theirs, f"{name}: k8s_render vs {version}")


def mutated(objects, kind, path, typo):
    """A copy of the first object of `kind` whose field at `path` (keys and list indexes) is
    renamed to `typo`."""
    obj = copy.deepcopy([o for o in objects if o["kind"] == kind][0])
    node = obj
    for step in path[:-1]:
        node = node[step]
    node[typo] = node.pop(path[-1])
    return obj


class BrokenManifestTest(unittest.TestCase):
    """Misspelled fields are refused: each mutation of a shipped object must fail validation."""

    def test_misspelled_fields_are_refused(self):
        rendered = manifests()
        base = rendered["kustomization base"]
        kserve = rendered["kustomization kserve"]
        training = rendered["kustomization training"]
        monitor = rendered["servicemonitor.yaml"]
        pod = ["spec", "template", "spec"]
        master = ["spec", "pytorchReplicaSpecs", "Master", "template", "spec"]
        cases = [
            (base, "Deployment", ["spec", "replicas"], "replica"),
            (base, "Deployment", pod + ["containers", 0, "livenessProbe"], "livenesProbe"),
            (base, "Deployment", pod + ["securityContext", "runAsNonRoot"], "runAsNonroot"),
            (base, "NetworkPolicy", ["spec", "policyTypes"], "policyType"),
            (base, "PodDisruptionBudget", ["spec", "maxUnavailable"], "maxUnavailabe"),
            (base, "HorizontalPodAutoscaler", ["spec", "minReplicas"], "minReplica"),
            (base, "Service", ["metadata", "labels"], "label"),
            (training, "PyTorchJob", ["spec", "pytorchReplicaSpecs"], "pytorchReplicaSpec"),
            (training, "PyTorchJob", master + ["terminationGracePeriodSeconds"],
             "terminationGracePeriodSecond"),
            (training, "PyTorchJob", master + ["containers", 0, "volumeMounts"], "volumeMount"),
            (kserve, "InferenceService", ["spec", "predictor", "model", "storageUri"],
             "storageURI"),
            (kserve, "ServingRuntime", ["spec", "supportedModelFormats"],
             "supportedModelFormat"),
            (kserve, "ServingRuntime", ["spec", "containers", 0, "readinessProbe"],
             "readynessProbe"),
            (monitor, "ServiceMonitor", ["spec", "endpoints", 0, "relabelings"], "relabellings"),
            (monitor, "ServiceMonitor", ["metadata", "namespace"], "namespce"),
        ]
        for objects, kind, path, typo in cases:
            with self.subTest(kind=kind, typo=typo):
                broken = mutated(objects, kind, path, typo)
                self.assertNotEqual(errors_of(broken), [], f"{kind}: {typo} passed")
        # A wrong type, not only a wrong name.
        deployment = copy.deepcopy([o for o in base if o["kind"] == "Deployment"][0])
        deployment["spec"]["replicas"] = "two"
        self.assertNotEqual(errors_of(deployment), [])
        job = copy.deepcopy([o for o in training if o["kind"] == "PyTorchJob"][0])
        job["spec"]["runPolicy"]["backoffLimit"] = "five"
        self.assertNotEqual(errors_of(job), [])

    def test_preserve_unknown_fields_is_honoured(self):
        schema = strict_schema({
            "type": "object",
            "properties": {
                "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": True,
                         "properties": {"known": {"type": "string"}}},
                "closed": {"type": "object", "properties": {"known": {"type": "string"}}},
                "port": {"x-kubernetes-int-or-string": True,
                         "anyOf": [{"type": "integer"}, {"type": "string"}]},
                "maybe": {"type": "string", "nullable": True}}})
        validator = jsonschema.Draft7Validator(schema)
        self.assertTrue(validator.is_valid({"open": {"known": "a", "other": 1}, "port": 80,
                                            "maybe": None}))
        self.assertTrue(validator.is_valid({"port": "http"}))
        self.assertFalse(validator.is_valid({"closed": {"other": 1}}))
        self.assertFalse(validator.is_valid({"other": 1}))
        self.assertFalse(validator.is_valid({"open": {"known": 1}}))


# --- the PodDisruptionBudget and the NetworkPolicies ---------------------------------------

def matches(selector, labels):
    """A LabelSelector (matchLabels only; matchExpressions are not used here) on labels."""
    if "matchExpressions" in selector:
        raise NotImplementedError("matchExpressions")
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


class Pod:
    def __init__(self, labels, namespace, namespace_labels=None):
        self.labels, self.namespace = labels, namespace
        self.namespace_labels = dict(namespace_labels or {},
                                     **{"kubernetes.io/metadata.name": namespace})


def peer_matches(peer, pod, policy_namespace):
    if "ipBlock" in peer:
        return True  # addresses are not modelled: an ipBlock is taken to reach every pod
    if "namespaceSelector" in peer:
        if not matches(peer["namespaceSelector"], pod.namespace_labels):
            return False
    elif pod.namespace != policy_namespace:
        return False
    return matches(peer.get("podSelector", {}), pod.labels)


def allowed(policies, source, destination, port, protocol="TCP"):
    """Whether NetworkPolicy semantics let `source` open `port` on `destination`: both the
    policies selecting the destination for Ingress and those selecting the source for Egress
    (each direction open when no policy selects the pod for it)."""
    def direction(pod, kind, other):
        selecting = [p for p in policies if p["metadata"]["namespace"] == pod.namespace
                     and matches(p["spec"]["podSelector"], pod.labels)
                     and kind in p["spec"].get("policyTypes", ["Ingress"])]
        if not selecting:
            return True
        key, peers = ("ingress", "from") if kind == "Ingress" else ("egress", "to")
        for policy in selecting:
            for rule in policy["spec"].get(key, []):
                ports = rule.get("ports")
                if any("endPort" in p for p in ports or []):
                    raise NotImplementedError("endPort")
                if ports and not any(p.get("port") == port and p.get("protocol", "TCP") == protocol
                                     for p in ports):
                    continue
                if not rule.get(peers) or any(peer_matches(peer, other, pod.namespace)
                                              for peer in rule[peers]):
                    return True
        return False

    return direction(destination, "Ingress", source) and direction(source, "Egress", destination)


class PolicyTest(unittest.TestCase):
    def setUp(self):
        self.objects = manifests()["kustomization base"]
        self.namespace = [o for o in self.objects if o["kind"] == "Namespace"][0]
        self.deployments = {o["metadata"]["name"]: o for o in self.objects
                            if o["kind"] == "Deployment"}

    def pod_of(self, deployment):
        labels = self.deployments[deployment]["spec"]["template"]["metadata"]["labels"]
        return Pod(labels, self.namespace["metadata"]["name"], self.namespace["metadata"].get(
            "labels"))

    def port(self, deployment, name):
        container = self.deployments[deployment]["spec"]["template"]["spec"]["containers"][0]
        return [p["containerPort"] for p in container["ports"] if p["name"] == name][0]

    def test_disruption_budget_keeps_a_serving_replica(self):
        budgets = [o for o in self.objects if o["kind"] == "PodDisruptionBudget"]
        self.assertEqual(len(budgets), 1)
        budget = budgets[0]["spec"]
        selected = [n for n in self.deployments
                    if matches(budget["selector"], self.pod_of(n).labels)]
        self.assertEqual(selected, ["tsserver"])
        hpa = [o for o in self.objects if o["kind"] == "HorizontalPodAutoscaler"][0]["spec"]
        self.assertEqual(hpa["scaleTargetRef"]["name"], "tsserver")
        floor = min(hpa["minReplicas"], self.deployments["tsserver"]["spec"]["replicas"])
        if "maxUnavailable" in budget:
            self.assertGreaterEqual(floor - budget["maxUnavailable"], 1)
            self.assertGreaterEqual(budget["maxUnavailable"], 1, "a drain could never evict")
        else:
            self.assertLess(budget["minAvailable"], floor, "a drain could never evict")
            self.assertGreaterEqual(budget["minAvailable"], 1)

    def test_network_policies_allow_exactly_the_needed_traffic(self):
        policies = [o for o in self.objects if o["kind"] == "NetworkPolicy"]
        serving, jobs = self.pod_of("tsserver"), self.pod_of("tsserver-jobs")
        ns = serving.namespace
        # Every pod of ours is selected for both directions.
        for pod in (serving, jobs):
            for kind in ("Ingress", "Egress"):
                self.assertTrue(any(matches(p["spec"]["podSelector"], pod.labels)
                                    and kind in p["spec"]["policyTypes"] for p in policies))
        client = Pod({"app": "shop", "taylorshift-serve/client": "true"}, "shop")
        admin = Pod({"taylorshift-serve/admin": "true"}, "ops")
        stranger = Pod({"app": "other"}, ns)  # unlabelled, even in our namespace
        prometheus = Pod({"app.kubernetes.io/name": "prometheus"}, "monitoring")
        prometheus_elsewhere = Pod({"app.kubernetes.io/name": "prometheus"}, "default")
        dns = Pod({"k8s-app": "kube-dns"}, "kube-system")
        outside = Pod({}, "internet")
        grpc, http, metrics = (self.port("tsserver", n) for n in ("grpc", "http", "metrics"))
        jobs_grpc, jobs_http, jobs_metrics = (self.port("tsserver-jobs", n)
                                              for n in ("grpc", "http", "metrics"))
        cases = [
            # (source, destination, port, protocol, allowed)
            (client, serving, grpc, "TCP", True),
            (client, serving, http, "TCP", True),
            (client, serving, metrics, "TCP", False),
            (stranger, serving, grpc, "TCP", False),
            (stranger, serving, http, "TCP", False),
            (prometheus, serving, metrics, "TCP", True),
            (prometheus, jobs, jobs_metrics, "TCP", True),
            (prometheus, serving, grpc, "TCP", False),
            (prometheus_elsewhere, serving, metrics, "TCP", False),
            (admin, jobs, jobs_grpc, "TCP", True),
            (admin, jobs, jobs_http, "TCP", False),
            (admin, serving, grpc, "TCP", False),
            (client, jobs, jobs_grpc, "TCP", False),
            (stranger, jobs, jobs_grpc, "TCP", False),
            (serving, jobs, jobs_grpc, "TCP", True),   # the serving replicas ask for promotions
            (serving, jobs, jobs_http, "TCP", False),
            (serving, jobs, jobs_metrics, "TCP", False),
            (jobs, serving, grpc, "TCP", False),
            (serving, serving, grpc, "TCP", False),
            (serving, dns, 53, "UDP", True),
            (serving, dns, 53, "TCP", True),
            (jobs, dns, 53, "UDP", True),
            (serving, outside, 443, "TCP", False),
            (jobs, outside, 443, "TCP", False),
            (serving, Pod({"k8s-app": "kube-dns"}, "shop"), 53, "UDP", False),
        ]
        for source, destination, port, protocol, expected in cases:
            with self.subTest(source=source.labels, namespace=source.namespace,
                              destination=destination.labels, port=port):
                self.assertEqual(allowed(policies, source, destination, port, protocol),
                                 expected)


if __name__ == "__main__":
    unittest.main(argv=[sys.argv[0]] + REST, verbosity=2)

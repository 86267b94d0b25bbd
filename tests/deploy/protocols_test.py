#!/usr/bin/python3
"""Every front end of one real tsserver gives the same answers and the same errors (issue 13).

Starts tsserver on free loopback ports (gRPC and the HTTP front end, `http.listen:
127.0.0.1:0`) serving the bundled demo models and a copy of listops with a one-request queue,
plus a second tsserver with bearer tokens. Python stubs are generated at start into a temp dir
with protoc and Debian's grpc_python_plugin (nothing generated is kept). Then:

- 40 fixed documents (seeded ListOps-like expressions of 1 to ~700 bytes, some past the model's
  max_length, a few with UTF-8, quotes, backslashes and newlines) get bitwise the same float32
  probabilities from taylorshift.v1.Classifier/Classify, KServe v2 ModelInfer over gRPC
  (raw_output_contents), KServe v2 REST (/v2/models/listops/infer, JSON numbers) and the plain
  route (POST /v1/models/listops:classify), one document per request. Several documents in one
  v2 request (gRPC and REST) agree within 1e-6 (see BATCHED_TOLERANCE).
- `curl` runs a README-style REST infer and a plain-route classify.
- Health and metadata: ServerLive/ServerReady/ModelReady/ServerMetadata/ModelMetadata and
  /v2, /v2/health/{live,ready}, /v2/models/NAME[/ready], /v1/models; the classification
  extension (class_count, top_k) over both transports.
- Each bad input gets its code on every front end: unknown model, wrong datatype, wrong shape,
  bad parameter type, unknown parameter, top_k above the class count, bad JSON, a body over
  http.max_body_bytes, unknown route, wrong method, a full queue, an expired deadline, a missing
  or unknown token, a token without the classify role; afterwards the server still answers.

Only Debian's python3 with python3-grpcio and python3-protobuf, the standard library, protoc,
/usr/bin/grpc_python_plugin and curl.

Usage: protocols_test.py --tsserver BIN"""

import argparse
import base64
import concurrent.futures
import http.client
import json
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import unittest

import grpc

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from deploy_lib import listops_expression, ready_fields, stop  # noqa: E402

ARGS = None
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
PROTO_DIR = os.path.join(ROOT, "proto")
LISTOPS_CHECKPOINT = os.path.join(ROOT, "models", "listops-demo.tsckpt")
SOURCE_LANG_CHECKPOINT = os.path.join(ROOT, "models", "source-lang-demo.tsckpt")
GRPC_PYTHON_PLUGIN = "/usr/bin/grpc_python_plugin"

# Several documents of one v2 request ride the batcher together, and a batch of several rows is
# not computed bitwise like a batch of one (CPU build, intra_op_threads 1): one document sent six
# times in one request came back as rows that differ from each other and from the document alone
# by a few float32 ulps (up to 2.4e-7); of these 40 documents, 35 (requests of 8) and all 40 (one
# request of 40) differed from Classify, by at most 2.8e-7 (document 0, one byte). One document
# per request must match Classify bitwise; batched answers are compared with this absolute
# tolerance.
BATCHED_TOLERANCE = 1e-6
# http.max_body_bytes of the server: the 40-document REST batch (~9 KB) fits.
MAX_BODY_BYTES = 32768
CLASSIFY_TOKEN = "protocols-classify-token"
ADMIN_TOKEN = "protocols-admin-token"
DOCUMENT_COUNT = 40
README_DOCUMENT = "[MAX 2 9 [MIN 4 7 ] 0 ]"
# Requests waiting on a full queue or a short deadline depend on timing: a request is repeated
# at most this many times until the server has rejected one.
TIMING_ATTEMPTS = 5

v2 = None  # inference.grpc_predict_v2_pb2, generated in setUpModule
v2_grpc = None
pb = None  # taylorshift.v1.classifier_pb2
pb_grpc = None
_stub_dir = None


def setUpModule():
    global v2, v2_grpc, pb, pb_grpc, _stub_dir
    _stub_dir = tempfile.TemporaryDirectory(prefix="ts-protocols-stubs-")
    command = ["protoc", "-I", PROTO_DIR, f"--python_out={_stub_dir.name}",
               f"--grpc_python_out={_stub_dir.name}",
               f"--plugin=protoc-gen-grpc_python={GRPC_PYTHON_PLUGIN}",
               os.path.join(PROTO_DIR, "inference", "grpc_predict_v2.proto"),
               os.path.join(PROTO_DIR, "inference", "model_config.proto"),
               os.path.join(PROTO_DIR, "taylorshift", "v1", "classifier.proto")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise AssertionError(f"protoc failed: {result.stdout}{result.stderr}")
    sys.path.insert(0, _stub_dir.name)
    from inference import grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc
    from taylorshift.v1 import classifier_pb2, classifier_pb2_grpc
    v2, v2_grpc = grpc_predict_v2_pb2, grpc_predict_v2_pb2_grpc
    pb, pb_grpc = classifier_pb2, classifier_pb2_grpc


def tearDownModule():
    if _stub_dir is not None:
        _stub_dir.cleanup()


# --- documents ---------------------------------------------------------------------------------

def make_documents(count=DOCUMENT_COUNT, seed=20261123):
    """`count` documents as bytes, the same on every run: lengths from 1 to ~700 bytes in a
    fixed rotation, and a few with UTF-8, JSON-escaped characters and newlines."""
    rng = random.Random(seed)
    budgets = [1, 8, 20, 45, 90, 160, 250, 400, 600, 900]
    documents = []
    for i in range(count):
        for _ in range(20):  # a new document (a single digit may repeat)
            budget = int(budgets[i % len(budgets)] * rng.uniform(0.8, 1.2))
            text = listops_expression(rng, budget)
            if text.encode("utf-8") not in documents:
                break
        if i % 13 == 5:
            text = text.replace(" ", " ü ", 1) + " «é»"
        elif i % 13 == 11:
            text = '"' + text.replace(" ", "\n", 2) + '\\ \t"'
        documents.append(text.encode("utf-8"))
    return documents


def source_lang_documents():
    return [b"#include <stdio.h>\nint main(void) { return 0; }\n",
            b"#!/bin/sh\nset -e\nfor f in *.txt; do echo \"$f\"; done\n",
            b"import sys\n\ndef main():\n    print(sys.argv)\n",
            b"use strict;\nmy $x = shift;\nprint \"$x\\n\";\n"]


# --- helpers -----------------------------------------------------------------------------------

def pack_f32(values):
    """The float32 bit patterns of `values` (Python floats, rounded to float32)."""
    return struct.pack(f"<{len(values)}f", *values)


def unpack_f32(raw):
    return list(struct.unpack(f"<{len(raw) // 4}f", raw))


def split_raw_bytes(raw):
    """BYTES raw contents: each element a 4-byte little-endian length, then its bytes."""
    out, at = [], 0
    while at < len(raw):
        (length,) = struct.unpack_from("<I", raw, at)
        out.append(raw[at + 4:at + 4 + length])
        at += 4 + length
    return out


def raw_bytes(elements):
    return b"".join(struct.pack("<I", len(e)) + e for e in elements)


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"HTTP {self.status} {self.body[:400]!r}"


class Server:
    """One tsserver started from a config in a temp dir; close() stops it by its PID."""

    def __init__(self, name, config):
        self.tmp = tempfile.TemporaryDirectory(prefix=f"ts-protocols-{name}-")
        self.dir = self.tmp.name
        config = dict(config, listen="127.0.0.1:0", metrics_listen="127.0.0.1:0",
                      state_dir=os.path.join(self.dir, "state"),
                      data_root=os.path.join(self.dir, "data"), jobs={"enabled": False},
                      shutdown_grace_ms=2000)
        self.config_path = os.path.join(self.dir, "tsserver.yaml")
        with open(self.config_path, "w") as f:
            json.dump(config, f, indent=1)  # JSON is YAML
        self.ready_file = os.path.join(self.dir, "ready")
        self.log = open(os.path.join(self.dir, "tsserver.log"), "w")
        self.process = subprocess.Popen(
            [ARGS.tsserver, "--config", self.config_path, "--ready-file", self.ready_file],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.grpc = self.http = None
        self.channel = None

    def wait_ready(self):
        fields = ready_fields(self.process, self.ready_file, ["grpc"], self.log_tail)
        self.grpc = fields["grpc"]
        self.http = fields.get("http") or None
        self.metrics = fields.get("metrics") or None
        self.channel = grpc.insecure_channel(self.grpc)
        self.classifier = pb_grpc.ClassifierStub(self.channel)
        self.inference = v2_grpc.GRPCInferenceServiceStub(self.channel)

    def log_tail(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f"\n--- tsserver.log\n{f.read()[-3000:]}"

    def http_address(self):
        if self.http is None:
            raise AssertionError("tsserver wrote no http= line to its ready file: no HTTP front "
                                 "end although http.listen is set")
        return self.http

    def request(self, method, path, body=None, headers=None, timeout_s=60):
        """One HTTP request on a fresh connection; any status comes back as a Response."""
        host, port = self.http_address().rsplit(":", 1)
        if isinstance(body, (dict, list)):
            body = json.dumps(body)
        if isinstance(body, str):
            body = body.encode("utf-8")
        headers = dict(headers or {})
        if body is not None:
            headers.setdefault("Content-Type", "application/json")
        connection = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
        try:
            connection.request(method, path, body=body, headers=headers)
            response = connection.getresponse()
            return Response(response.status, response.headers, response.read())
        finally:
            connection.close()

    def close(self):
        if self.channel is not None:
            self.channel.close()
        stop(self.process)
        self.log.close()
        self.tmp.cleanup()


# --- the four ways to classify -----------------------------------------------------------------

def v2_request(model, documents, raw=False, parameters=None, outputs=None, version=""):
    request = v2.ModelInferRequest(model_name=model, model_version=version, id="protocols")
    tensor = request.inputs.add(name="document", datatype="BYTES", shape=[len(documents)])
    if raw:
        request.raw_input_contents.append(raw_bytes(documents))
    else:
        tensor.contents.bytes_contents.extend(documents)
    for name, value in (parameters or {}).items():
        if isinstance(value, bool):
            request.parameters[name].bool_param = value
        elif isinstance(value, int):
            request.parameters[name].int64_param = value
        else:
            request.parameters[name].string_param = value
    for output in outputs or []:
        out = request.outputs.add(name=output["name"])
        for name, value in output.get("parameters", {}).items():
            out.parameters[name].int64_param = value
    return request


def rest_body(documents, **extra):
    return dict({"id": "protocols", "inputs": [{
        "name": "document", "datatype": "BYTES", "shape": [len(documents)],
        "data": [d.decode("utf-8") for d in documents]}]}, **extra)


def v2_outputs(response_outputs):
    """{name: (datatype, shape, values)} of a REST v2 answer's outputs."""
    return {o["name"]: (o["datatype"], list(o["shape"]), o["data"]) for o in response_outputs}


def grpc_v2_outputs(response):
    """The same for a gRPC answer, decoded from raw_output_contents."""
    out = {}
    for tensor, raw in zip(response.outputs, response.raw_output_contents):
        values = unpack_f32(raw) if tensor.datatype == "FP32" else split_raw_bytes(raw)
        out[tensor.name] = (tensor.datatype, list(tensor.shape), values)
    return out


class ProtocolsTest(unittest.TestCase):
    maxDiff = 4000

    @classmethod
    def setUpClass(cls):
        cls.documents = make_documents()
        cls.main = cls.auth = None
        try:
            models = [{"name": "listops", "checkpoint": LISTOPS_CHECKPOINT},
                      {"name": "source-lang", "checkpoint": SOURCE_LANG_CHECKPOINT},
                      # One request computed, one waiting: a third is RESOURCE_EXHAUSTED.
                      {"name": "tiny-queue", "checkpoint": LISTOPS_CHECKPOINT,
                       "batching": {"max_queue_size": 1, "max_batch_size": 1}}]
            cls.main = Server("main", {
                "intra_op_threads": 1, "models": models,
                "http": {"listen": "127.0.0.1:0", "threads": 8,
                         "max_body_bytes": MAX_BODY_BYTES}})
            cls.auth = Server("auth", {
                "intra_op_threads": 1, "models": models[:1],
                "auth": {"tokens": {CLASSIFY_TOKEN: ["classify"], ADMIN_TOKEN: ["admin"]}},
                "http": {"listen": "127.0.0.1:0", "threads": 4}})
            cls.main.wait_ready()
            cls.auth.wait_ready()
            cls.listops = cls.main.classifier.GetModel(pb.GetModelRequest(name="listops"),
                                                       timeout=30)
            cls.reference = cls.classify_all("listops", cls.documents)
        except BaseException:
            logs = "".join(s.log_tail() for s in (cls.main, cls.auth) if s is not None)
            cls.close_servers()
            raise AssertionError("setup failed" + logs)

    @classmethod
    def tearDownClass(cls):
        cls.close_servers()

    @classmethod
    def close_servers(cls):
        for server in (cls.main, cls.auth):
            if server is not None:
                server.close()

    @classmethod
    def classify_all(cls, model, documents, server=None):
        """Classifier.Classify, one document at a time: [(label, float32 bytes, response)]."""
        server = server or cls.main
        out = []
        for document in documents:
            response = server.classifier.Classify(
                pb.ClassifyRequest(model=model, document=document), timeout=60)
            probabilities = [p.probability for p in response.probabilities]
            out.append((response.label, pack_f32(probabilities), response))
        return out

    # -- helpers that assert ---------------------------------------------------------------------

    def assert_grpc_error(self, call, code, *fragments):
        with self.assertRaises(grpc.RpcError) as raised:
            call()
        error = raised.exception
        self.assertEqual(error.code(), code, error.details())
        for fragment in fragments:
            self.assertIn(fragment, error.details())
        return error

    def assert_http_error(self, response, status, code, *fragments):
        self.assertEqual(response.status, status, response)
        try:
            body = response.json()
        except ValueError:
            self.fail(f"error body is not JSON: {response}")
        self.assertIsInstance(body.get("error"), str, response)
        self.assertEqual(body.get("code"), code, response)
        for fragment in fragments:
            self.assertIn(fragment, body["error"], response)
        if status in (429, 503):
            self.assertEqual(response.headers.get("Retry-After"), "1", response)
        if status == 401:
            challenge = response.headers.get("WWW-Authenticate", "")
            self.assertTrue(challenge.startswith("Bearer"), f"{response} {challenge!r}")
        return body

    def assert_same_bits(self, got, want, where):
        """`got`: [float32 bytes] per document, against the reference Classify answers."""
        self.assertEqual(len(got), len(want), where)
        for i, (g, (_, w, _)) in enumerate(zip(got, want)):
            if g != w:
                self.fail(f"{where}: document {i} ({len(self.documents[i])} bytes) differs: "
                          f"{unpack_f32(g)} vs Classify's {unpack_f32(w)}")

    def assert_close(self, got, want, where):
        """Batched answers: within BATCHED_TOLERANCE; reports the largest difference."""
        self.assertEqual(len(got), len(want), where)
        worst, worst_doc = 0.0, None
        for i, (g, (_, w, _)) in enumerate(zip(got, want)):
            diff = max(abs(a - b) for a, b in zip(unpack_f32(g), unpack_f32(w)))
            if diff > worst:
                worst, worst_doc = diff, i
        self.assertLessEqual(worst, BATCHED_TOLERANCE,
                             f"{where}: document {worst_doc} differs by {worst}")

    def rest_infer(self, model, documents, server=None, headers=None, path=None, **extra):
        server = server or self.main
        return server.request("POST", path or f"/v2/models/{model}/infer",
                              rest_body(documents, **extra), headers)

    def rest_probabilities(self, response, count, classes):
        """[float32 bytes] per document and the labels of a REST v2 answer."""
        self.assertEqual(response.status, 200, response)
        body = response.json()
        outputs = v2_outputs(body["outputs"])
        self.assertEqual([o["name"] for o in body["outputs"]], ["probabilities", "label"])
        datatype, shape, data = outputs["probabilities"]
        self.assertEqual((datatype, shape), ("FP32", [count, classes]), body)
        for value in data:
            self.assertIsInstance(value, (int, float))
        rows = [pack_f32(data[i * classes:(i + 1) * classes]) for i in range(count)]
        self.assertEqual(outputs["label"][:2], ("BYTES", [count]))
        return rows, outputs["label"][2]

    def grpc_probabilities(self, response, count, classes):
        outputs = grpc_v2_outputs(response)
        self.assertEqual([o.name for o in response.outputs], ["probabilities", "label"])
        datatype, shape, data = outputs["probabilities"]
        self.assertEqual((datatype, shape), ("FP32", [count, classes]))
        rows = [pack_f32(data[i * classes:(i + 1) * classes]) for i in range(count)]
        self.assertEqual(outputs["label"][:2], ("BYTES", [count]))
        return rows, [l.decode() for l in outputs["label"][2]]

    def plain_classify(self, model, document, server=None, headers=None, use_base64=False,
                       **extra):
        server = server or self.main
        body = dict(extra)
        if use_base64:
            body["document_base64"] = base64.b64encode(document).decode()
        else:
            body["text"] = document.decode("utf-8")
        return server.request("POST", f"/v1/models/{model}:classify", body, headers)

    # -- the same answers everywhere -------------------------------------------------------------

    def test_documents_cover_short_and_over_length(self):
        lengths = [len(d) for d in self.documents]
        max_length = self.listops.max_length
        self.assertEqual(len(self.documents), DOCUMENT_COUNT)
        self.assertGreaterEqual(sum(l > max_length for l in lengths), 6, lengths)
        self.assertGreaterEqual(sum(l < 16 for l in lengths), 6, lengths)
        self.assertTrue(any(r.truncated for _, _, r in self.reference))
        self.assertEqual(len(set(self.documents)), len(self.documents))

    def check_same_everywhere(self, model, documents, reference):
        classes = len(reference[0][1]) // 4
        labels = [label for label, _, _ in reference]
        # v2 gRPC, one document per request, alternating contents and raw_input_contents.
        rows = []
        for i, document in enumerate(documents):
            response = self.main.inference.ModelInfer(
                v2_request(model, [document], raw=i % 2 == 1), timeout=60)
            self.assertEqual((response.model_name, response.id), (model, "protocols"))
            got, got_labels = self.grpc_probabilities(response, 1, classes)
            self.assertEqual(got_labels, [labels[i]], f"v2 gRPC document {i}")
            rows += got
        self.assert_same_bits(rows, reference, f"{model}: v2 gRPC ModelInfer, one per request")
        # v2 REST, one document per request.
        rows = []
        for i, document in enumerate(documents):
            response = self.rest_infer(model, [document])
            got, got_labels = self.rest_probabilities(response, 1, classes)
            body = response.json()
            self.assertEqual((body["model_name"], body["model_version"], body["id"]),
                             (model, reference[i][2].model_version, "protocols"))
            self.assertEqual(got_labels, [labels[i]], f"v2 REST document {i}")
            rows += got
        self.assert_same_bits(rows, reference, f"{model}: v2 REST infer, one per request")
        # The plain route, text and document_base64 alternating.
        rows = []
        for i, document in enumerate(documents):
            response = self.plain_classify(model, document, use_base64=i % 2 == 1,
                                           request_id=f"doc-{i}")
            self.assertEqual(response.status, 200, response)
            body = response.json()
            want = reference[i][2]
            self.assertEqual(body["label"], want.label)
            self.assertEqual([(p["label"], p["index"]) for p in body["probabilities"]],
                             [(p.label, p.index) for p in want.probabilities])
            self.assertEqual((body["tokens"], body["truncated"], body["windows"],
                              body["model_version"], body["request_id"]),
                             (want.tokens, want.truncated, want.windows, want.model_version,
                              f"doc-{i}"))
            self.assertNotIn("file", body)
            rows.append(pack_f32([p["probability"] for p in body["probabilities"]]))
        self.assert_same_bits(rows, reference, f"{model}: POST /v1/models/{model}:classify")

    def test_same_probabilities_one_document_per_request(self):
        self.check_same_everywhere("listops", self.documents, self.reference)

    def test_same_probabilities_source_lang(self):
        documents = source_lang_documents()
        self.check_same_everywhere("source-lang", documents,
                                   self.classify_all("source-lang", documents))

    def test_same_probabilities_batched(self):
        classes = len(self.listops.labels)
        labels = [label for label, _, _ in self.reference]
        # All 40 in one request, and in requests of 8 (raw contents for gRPC).
        chunks = {size: [self.documents[i:i + size] for i in range(0, DOCUMENT_COUNT, size)]
                  for size in (DOCUMENT_COUNT, 8)}
        for size, requests in chunks.items():
            rows, got_labels = [], []
            for chunk in requests:
                response = self.main.inference.ModelInfer(
                    v2_request("listops", chunk, raw=size == 8), timeout=60)
                r, l = self.grpc_probabilities(response, len(chunk), classes)
                rows, got_labels = rows + r, got_labels + l
            self.assert_close(rows, self.reference, f"v2 gRPC, {size} per request")
            self.assertEqual(got_labels, labels)
        # Shape [B, 1] is a batch too.
        request = v2_request("listops", self.documents[:3])
        request.inputs[0].shape[:] = [3, 1]
        rows, _ = self.grpc_probabilities(self.main.inference.ModelInfer(request, timeout=60),
                                          3, classes)
        self.assert_close(rows, self.reference[:3], "v2 gRPC, shape [3, 1]")
        for size, requests in chunks.items():
            rows, got_labels = [], []
            for chunk in requests:
                r, l = self.rest_probabilities(self.rest_infer("listops", chunk), len(chunk),
                                               classes)
                rows, got_labels = rows + r, got_labels + l
            self.assert_close(rows, self.reference, f"v2 REST, {size} per request")
            self.assertEqual(got_labels, labels)

    def test_curl_examples(self):
        base = f"http://{self.main.http_address()}"
        document = README_DOCUMENT
        want = self.classify_all("listops", [document.encode()])[0][2]
        # As the README would show them (copy-pasteable, the server's address substituted).
        infer = (f"curl -s {base}/v2/models/listops/infer -H 'Content-Type: application/json' "
                 "-d '{\"inputs\": [{\"name\": \"document\", \"datatype\": \"BYTES\", "
                 f"\"shape\": [1], \"data\": [\"{document}\"]}}]}}'")
        classify = (f"curl -s {base}/v1/models/listops:classify "
                    f"-d '{{\"text\": \"{document}\", \"top_k\": 3}}'")
        results = {}
        for name, command in (("infer", infer), ("classify", classify)):
            result = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True,
                                    timeout=60)
            self.assertEqual(result.returncode, 0, f"{command}\n{result.stderr}")
            try:
                results[name] = json.loads(result.stdout)
            except ValueError:
                self.fail(f"{command} printed no JSON: {result.stdout!r}")
        outputs = v2_outputs(results["infer"]["outputs"])
        self.assertEqual(pack_f32(outputs["probabilities"][2]),
                         pack_f32([p.probability for p in want.probabilities]), infer)
        self.assertEqual(outputs["label"][2], [want.label], infer)
        best = sorted(want.probabilities, key=lambda p: -p.probability)[:3]
        self.assertEqual(results["classify"]["label"], want.label, classify)
        self.assertEqual([(p["index"], p["label"]) for p in results["classify"]["probabilities"]],
                         [(p.index, p.label) for p in best], classify)
        self.assertEqual(pack_f32([p["probability"] for p in
                                   results["classify"]["probabilities"]]),
                         pack_f32([p.probability for p in best]), classify)

    # -- health, metadata, the classification extension ------------------------------------------

    def test_health_and_metadata_grpc(self):
        stub = self.main.inference
        self.assertTrue(stub.ServerLive(v2.ServerLiveRequest(), timeout=30).live)
        self.assertTrue(stub.ServerReady(v2.ServerReadyRequest(), timeout=30).ready)
        version = self.listops.version
        self.assertTrue(stub.ModelReady(v2.ModelReadyRequest(name="listops"), timeout=30).ready)
        self.assertTrue(stub.ModelReady(v2.ModelReadyRequest(name="listops", version=version),
                                        timeout=30).ready)
        self.assert_grpc_error(lambda: stub.ModelReady(v2.ModelReadyRequest(name="nope"),
                                                       timeout=30),
                               grpc.StatusCode.NOT_FOUND, "nope")
        self.assert_grpc_error(lambda: stub.ModelReady(
            v2.ModelReadyRequest(name="listops", version="no-such-version"), timeout=30),
            grpc.StatusCode.NOT_FOUND, "no-such-version")
        metadata = stub.ServerMetadata(v2.ServerMetadataRequest(), timeout=30)
        self.assertEqual((metadata.name, metadata.version, list(metadata.extensions)),
                         ("taylorshift-serve", "0.4.0", ["classification"]))
        for name in ("listops", "source-lang"):
            model = self.main.classifier.GetModel(pb.GetModelRequest(name=name), timeout=30)
            got = stub.ModelMetadata(v2.ModelMetadataRequest(name=name), timeout=30)
            self.assertEqual(self.metadata_dict(got), self.expected_metadata(model))
        self.assert_grpc_error(lambda: stub.ModelMetadata(v2.ModelMetadataRequest(name="nope"),
                                                          timeout=30),
                               grpc.StatusCode.NOT_FOUND, "nope")
        self.assert_grpc_error(lambda: stub.ModelMetadata(
            v2.ModelMetadataRequest(name="listops", version="no-such-version"), timeout=30),
            grpc.StatusCode.NOT_FOUND, "no-such-version")

    @staticmethod
    def metadata_dict(message):
        return {"name": message.name, "versions": list(message.versions),
                "platform": message.platform,
                "inputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                           for t in message.inputs],
                "outputs": [{"name": t.name, "datatype": t.datatype, "shape": list(t.shape)}
                            for t in message.outputs]}

    @staticmethod
    def expected_metadata(model):
        return {"name": model.name, "versions": [model.version],
                "platform": "taylorshift_libtorch",
                "inputs": [{"name": "document", "datatype": "BYTES", "shape": [-1, 1]}],
                "outputs": [{"name": "probabilities", "datatype": "FP32",
                             "shape": [-1, len(model.labels)]},
                            {"name": "label", "datatype": "BYTES", "shape": [-1]}]}

    def test_health_and_metadata_rest(self):
        s = self.main
        version = self.listops.version
        response = s.request("GET", "/v2/health/live")
        self.assertEqual((response.status, response.json()), (200, {"live": True}))
        response = s.request("GET", "/v2/health/ready")
        self.assertEqual((response.status, response.json()), (200, {"ready": True, "live": True}))
        response = s.request("GET", "/v2")
        self.assertEqual((response.status, response.json()),
                         (200, {"name": "taylorshift-serve", "version": "0.4.0",
                                "extensions": ["classification"]}))
        for name in ("listops", "source-lang"):
            model = s.classifier.GetModel(pb.GetModelRequest(name=name), timeout=30)
            for path in (f"/v2/models/{name}", f"/v2/models/{name}/versions/{model.version}"):
                response = s.request("GET", path)
                self.assertEqual(response.status, 200, f"{path}: {response}")
                body = response.json()
                self.assertEqual({k: body.get(k) for k in ("name", "versions", "platform",
                                                           "inputs", "outputs")},
                                 self.expected_metadata(model), path)
            for path in (f"/v2/models/{name}/ready",
                         f"/v2/models/{name}/versions/{model.version}/ready"):
                response = s.request("GET", path)
                self.assertEqual((response.status, response.json()),
                                 (200, {"name": name, "ready": True}), path)
        for path in ("/v2/models/nope", "/v2/models/nope/ready",
                     "/v2/models/listops/versions/no-such-version",
                     "/v2/models/listops/versions/no-such-version/ready", "/v1/models/nope"):
            self.assert_http_error(s.request("GET", path), 404, "NOT_FOUND")
        # The plain route's model objects: what GetModel says, by the names tsctl prints.
        response = s.request("GET", "/v1/models")
        self.assertEqual(response.status, 200, response)
        self.assertEqual([m["name"] for m in response.json()["models"]],
                         ["listops", "source-lang", "tiny-queue"])
        response = s.request("GET", "/v1/models/listops")
        self.assertEqual(response.status, 200, response)
        body = response.json()
        m = self.listops
        self.assertEqual({k: body.get(k) for k in ("name", "version", "modality", "labels",
                                                   "max_length", "over_length_policy")},
                         {"name": m.name, "version": m.version, "modality": m.modality,
                          "labels": list(m.labels), "max_length": m.max_length,
                          "over_length_policy": m.over_length_policy})
        # A versioned infer.
        rows, _ = self.rest_probabilities(
            self.rest_infer("listops", self.documents[:1],
                            path=f"/v2/models/listops/versions/{version}/infer"),
            1, len(m.labels))
        self.assert_same_bits(rows, self.reference[:1], "versioned REST infer")
        self.assert_http_error(
            self.rest_infer("listops", self.documents[:1],
                            path="/v2/models/listops/versions/no-such-version/infer"),
            404, "NOT_FOUND", "no-such-version")
        self.assert_grpc_error(lambda: s.inference.ModelInfer(
            v2_request("listops", self.documents[:1], version="no-such-version"), timeout=30),
            grpc.StatusCode.NOT_FOUND, "no-such-version")

    def expected_top(self, indices, k):
        """[(score, index, label)] best first for the reference answers of `indices`."""
        out = []
        for i in indices:
            probabilities = self.reference[i][2].probabilities
            best = sorted(probabilities, key=lambda p: (-p.probability, p.index))[:k]
            out.append([(p.probability, p.index, p.label) for p in best])
        return out

    def check_class_strings(self, datatype, shape, values, indices, k, where):
        self.assertEqual((datatype, shape), ("BYTES", [len(indices), k]), where)
        want = self.expected_top(indices, k)
        for row, (i, expected) in enumerate(zip(indices, want)):
            got = []
            for value in values[row * k:(row + 1) * k]:
                text = value.decode() if isinstance(value, bytes) else value
                score, index, label = text.split(":", 2)
                got.append((float(score), int(index), label))
            self.assertEqual([(x, y) for _, x, y in got], [(x, y) for _, x, y in expected],
                             f"{where}: document {i}")
            for (g, _, _), (w, _, _) in zip(got, expected):
                self.assertAlmostEqual(g, w, delta=1e-5 * max(1.0, w), msg=f"{where}: {i}")

    def test_classification_extension(self):
        indices = [0, 7, 9]
        documents = [self.documents[i] for i in indices]
        # class_count on the probabilities output, top_k as a request parameter: same answer.
        for kind, kwargs in (("class_count", {"outputs": [{"name": "probabilities",
                                                           "parameters": {"class_count": 3}}]}),
                             ("top_k", {"parameters": {"top_k": 3}})):
            response = self.main.inference.ModelInfer(v2_request("listops", documents, **kwargs),
                                                      timeout=60)
            outputs = grpc_v2_outputs(response)
            self.check_class_strings(*outputs["probabilities"], indices, 3, f"gRPC {kind}")
            response = self.rest_infer("listops", documents, **kwargs)
            self.assertEqual(response.status, 200, response)
            outputs = v2_outputs(response.json()["outputs"])
            self.check_class_strings(*outputs["probabilities"], indices, 3, f"REST {kind}")
            if kind == "top_k":  # no outputs requested: both, probabilities first
                self.assertEqual(list(outputs), ["probabilities", "label"])
                self.assertEqual(outputs["label"][2],
                                 [self.reference[i][0] for i in indices])
        # Only the label.
        response = self.rest_infer("listops", documents, outputs=[{"name": "label"}])
        self.assertEqual(response.status, 200, response)
        self.assertEqual([(o["name"], o["data"]) for o in response.json()["outputs"]],
                         [("label", [self.reference[i][0] for i in indices])])

    # -- errors ----------------------------------------------------------------------------------

    def test_unknown_model(self):
        doc = self.documents[:1]
        self.assert_grpc_error(lambda: self.main.classifier.Classify(
            pb.ClassifyRequest(model="nope", document=doc[0]), timeout=30),
            grpc.StatusCode.NOT_FOUND, "nope")
        self.assert_grpc_error(lambda: self.main.inference.ModelInfer(
            v2_request("nope", doc), timeout=30), grpc.StatusCode.NOT_FOUND, "nope")
        self.assert_http_error(self.rest_infer("nope", doc), 404, "NOT_FOUND", "nope")
        self.assert_http_error(self.plain_classify("nope", doc[0]), 404, "NOT_FOUND", "nope")

    def test_invalid_inputs(self):
        doc = self.documents[:1]
        text = doc[0].decode()
        invalid = grpc.StatusCode.INVALID_ARGUMENT
        cases = []  # (what, gRPC v2 request, REST body, gRPC field, REST field)

        def case(what, field, mutate_grpc, rest, rest_field=None):
            request = v2_request("listops", doc)
            mutate_grpc(request)
            cases.append((what, request, rest, field, rest_field or field))

        def datatype(r):
            r.inputs[0].datatype = "FP32"
        case("wrong datatype", "inputs[0].datatype", datatype,
             {"inputs": [{"name": "document", "datatype": "FP32", "shape": [1], "data": [1.5]}]})

        def shape(r):
            r.inputs[0].shape[:] = [1, 2]
        case("wrong shape", "inputs[0].shape", shape,
             {"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1, 2],
                          "data": [text]}]})

        def top_k_type(r):
            r.parameters["top_k"].string_param = "3"
        case("bad parameter type", "parameters.top_k", top_k_type,
             rest_body(doc, parameters={"top_k": "3"}))

        def unknown_parameter(r):
            r.parameters["colour"].string_param = "red"
        case("unknown parameter", "parameters.colour", unknown_parameter,
             rest_body(doc, parameters={"colour": "red"}))

        def too_many_classes(r):
            r.parameters["top_k"].int64_param = 11
        case("top_k above the class count", "parameters.top_k", too_many_classes,
             rest_body(doc, parameters={"top_k": 11}))

        def class_count(r):
            out = r.outputs.add(name="probabilities")
            out.parameters["class_count"].int64_param = 11
        case("class_count above the class count", "class_count", class_count,
             rest_body(doc, outputs=[{"name": "probabilities",
                                      "parameters": {"class_count": 11}}]))

        def output_name(r):
            r.outputs.add(name="logits")
        case("unknown output", "outputs[0].name", output_name,
             rest_body(doc, outputs=[{"name": "logits"}]))

        def input_name(r):
            r.inputs[0].name = "image"
        case("wrong input name", "inputs[0].name", input_name,
             {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "data": [text]}]})

        def path(r):
            r.parameters["path"].string_param = "fastest"
        case("bad path", "parameters.path", path, rest_body(doc, parameters={"path": "fastest"}))

        def count(r):
            r.inputs[0].shape[:] = [2]
        # Each names its own transport's field: REST requests have no contents.bytes_contents.
        case("shape and data disagree", "inputs[0].contents.bytes_contents", count,
             {"inputs": [{"name": "document", "datatype": "BYTES", "shape": [2],
                          "data": [text]}]}, "inputs[0].data")

        for what, request, rest, field, _ in cases:
            with self.subTest(f"gRPC: {what}"):
                self.assert_grpc_error(lambda: self.main.inference.ModelInfer(request, timeout=30),
                                       invalid, field)
        # Classifier.Classify: its own fields.
        self.assert_grpc_error(lambda: self.main.classifier.Classify(
            pb.ClassifyRequest(model="listops", document=doc[0], top_k=11), timeout=30),
            invalid, "top_k")
        self.assert_grpc_error(lambda: self.main.classifier.Classify(
            pb.ClassifyRequest(model="listops", document=doc[0], over_length="chop"),
            timeout=30), invalid, "over_length")
        # over_length=reject on a document past max_length, everywhere.
        long_doc = next(d for d in self.documents if len(d) > self.listops.max_length)
        self.assert_grpc_error(lambda: self.main.classifier.Classify(
            pb.ClassifyRequest(model="listops", document=long_doc, over_length="reject"),
            timeout=30), invalid)
        self.assert_grpc_error(lambda: self.main.inference.ModelInfer(
            v2_request("listops", [long_doc], parameters={"over_length": "reject"}),
            timeout=30), invalid)
        for what, request, rest, _, field in cases:
            with self.subTest(f"REST: {what}"):
                self.assert_http_error(self.main.request("POST", "/v2/models/listops/infer",
                                                         rest),
                                       400, "INVALID_ARGUMENT", field)

        # The plain route: its own fields.
        plain_cases = [("wrong datatype", {"text": 5}, "text"),
                       ("bad parameter type", {"text": text, "top_k": "three"}, "top_k"),
                       ("unknown parameter", {"text": text, "colour": "red"}, "colour"),
                       ("top_k above the class count", {"text": text, "top_k": 11}, "top_k"),
                       ("bad path", {"text": text, "path": "fastest"}, "path"),
                       ("bad over_length", {"text": text, "over_length": "chop"}, "over_length"),
                       ("no input", {"top_k": 3}, ""),
                       ("bad base64", {"document_base64": "!!not base64!!"},
                        "document_base64")]
        for what, body, field in plain_cases:
            with self.subTest(f"plain route: {what}"):
                self.assert_http_error(self.main.request("POST", "/v1/models/listops:classify",
                                                         body),
                                       400, "INVALID_ARGUMENT", field)
        self.assert_http_error(self.rest_infer("listops", [long_doc],
                                               parameters={"over_length": "reject"}),
                               400, "INVALID_ARGUMENT")
        self.assert_http_error(self.plain_classify("listops", long_doc, over_length="reject"),
                               400, "INVALID_ARGUMENT")

    def assert_json_error(self, response, status):
        """An HTTP-only status (413, 404 and 405 of routing): the JSON error object; its code
        is not checked, the status table has no gRPC code for 405 and 413."""
        self.assertEqual(response.status, status, response)
        try:
            body = response.json()
        except ValueError:
            self.fail(f"error body is not JSON: {response}")
        self.assertIsInstance(body.get("error"), str, response)
        self.assertIsInstance(body.get("code"), str, response)
        return body

    def test_http_protocol_errors(self):
        s = self.main
        # The body limit is the HTTP front end's: the document is fine over gRPC.
        big = [b"[MAX 1 2 ]" * (MAX_BODY_BYTES // 10 + 100)]
        response = s.inference.ModelInfer(v2_request("listops", big), timeout=60)
        self.assertEqual(len(response.raw_output_contents), 2)
        for path in ("/v2/models/listops/infer", "/v1/models/listops:classify"):
            with self.subTest(f"bad JSON: {path}"):
                body = self.assert_http_error(
                    s.request("POST", path, '{"inputs": [{"name": "document",,]}'), 400,
                    "INVALID_ARGUMENT")
                # The message says where the JSON broke.
                self.assertRegex(body["error"], r"(?i)(line|column|position|offset|byte)\D{0,3}\d",
                                 body)
            with self.subTest(f"body over max_body_bytes: {path}"):
                self.assert_json_error(s.request("POST", path, rest_body(big)), 413)
            with self.subTest(f"wrong method: GET {path}"):
                response = s.request("GET", path)
                self.assert_json_error(response, 405)
                self.assertIn("POST", response.headers.get("Allow", ""), response.headers)
        for method, path, allowed in (("POST", "/v2/health/live", "GET"),
                                      ("DELETE", "/v2/models/listops", "GET"),
                                      ("PUT", "/v2/models/listops/ready", "GET"),
                                      ("POST", "/v1/models", "GET")):
            with self.subTest(f"wrong method: {method} {path}"):
                response = s.request(method, path, None if method == "DELETE" else "{}")
                self.assert_json_error(response, 405)
                self.assertIn(allowed, response.headers.get("Allow", ""), response.headers)
        for method, path in (("GET", "/"), ("GET", "/v3/models"),
                             ("POST", "/v2/models/listops/explain"),
                             ("GET", "/v2/health/alive"),
                             ("POST", "/v1/models/listops:predict")):
            with self.subTest(f"unknown route: {method} {path}"):
                self.assert_json_error(
                    s.request(method, path, "{}" if method == "POST" else None), 404)

    def repeat_until(self, what, attempt):
        """Calls attempt() (which asserts what it gets) until it returns True, at most
        TIMING_ATTEMPTS times: whether a request finds a full queue or an expired deadline
        depends on timing."""
        for _ in range(TIMING_ATTEMPTS):
            if attempt():
                return
        self.fail(f"{what}: not seen in {TIMING_ATTEMPTS} attempts")

    def long_documents(self):
        long_docs = [d for d in self.documents if len(d) > self.listops.max_length]
        self.assertGreaterEqual(len(long_docs), 6)
        return long_docs

    def test_queue_full(self):
        batch = (self.long_documents() * 3)[:12]
        exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
        # One v2 request of 12 elements: one computed, one queued, the third has no room.
        self.assert_grpc_error(lambda: self.main.inference.ModelInfer(
            v2_request("tiny-queue", batch), timeout=60), exhausted, "batch element ",
            "max_queue_size")

        # Single-document calls at once: some find the queue full, the others are answered.
        def classify_at_once():
            futures = [self.main.classifier.Classify.future(
                pb.ClassifyRequest(model="tiny-queue", document=d), timeout=60) for d in batch]
            errors = [f.exception() for f in futures]
            codes = [e.code() if e else grpc.StatusCode.OK for e in errors]
            self.assertLessEqual(set(codes), {grpc.StatusCode.OK, exhausted},
                                 [e.details() for e in errors if e])
            if exhausted not in codes:
                return False
            self.assertIn("max_queue_size", errors[codes.index(exhausted)].details())
            return True

        self.repeat_until("Classify: RESOURCE_EXHAUSTED from tiny-queue", classify_at_once)

        self.assert_http_error(self.rest_infer("tiny-queue", batch), 429, "RESOURCE_EXHAUSTED",
                               "batch element ", "max_queue_size")
        pool = concurrent.futures.ThreadPoolExecutor(max_workers=len(batch))

        def plain_at_once():
            responses = list(pool.map(lambda d: self.plain_classify("tiny-queue", d), batch))
            full = [r for r in responses if r.status == 429]
            self.assertEqual(len(full) + sum(r.status == 200 for r in responses), len(batch),
                             responses)
            if not full:
                return False
            self.assert_http_error(full[0], 429, "RESOURCE_EXHAUSTED", "max_queue_size")
            return True

        try:
            self.repeat_until("plain route: 429 from tiny-queue", plain_at_once)
        finally:
            pool.shutdown()

    def behind_load(self, call):
        """call() while a v2 gRPC call of 128 long documents keeps listops busy, so that what
        call() sends waits in the queue; returns what call() returns."""
        load = self.main.inference.ModelInfer.future(
            v2_request("listops", (self.long_documents() * 32)[:128]), timeout=120)
        try:
            time.sleep(0.05)  # the load is queued first
            return call()
        finally:
            load.result()

    def test_expired_deadline(self):
        long_docs = self.long_documents()
        batch = (long_docs * 4)[:16]
        expired = grpc.StatusCode.DEADLINE_EXCEEDED
        # 16 elements are not done in 1 ms.
        self.assert_grpc_error(lambda: self.main.inference.ModelInfer(
            v2_request("listops", batch), timeout=0.001), expired)

        # One document with 1 ms, queued behind a large call.
        def classify():
            try:
                self.behind_load(lambda: self.main.classifier.Classify(
                    pb.ClassifyRequest(model="listops", document=long_docs[0]), timeout=0.001))
            except grpc.RpcError as error:
                self.assertEqual(error.code(), expired, error.details())
                return True
            return False

        self.repeat_until("Classify: DEADLINE_EXCEEDED after 1 ms", classify)

        # More elements than one batch holds (max_batch_size 32): the second batch starts late.
        self.assert_http_error(self.rest_infer("listops", (long_docs * 11)[:64],
                                               headers={"X-Timeout-Ms": "1"}),
                               504, "DEADLINE_EXCEEDED", "batch element ")

        def plain():
            response = self.behind_load(lambda: self.plain_classify(
                "listops", long_docs[0], headers={"X-Timeout-Ms": "1"}))
            if response.status == 200:
                return False
            self.assert_http_error(response, 504, "DEADLINE_EXCEEDED")
            return True

        self.repeat_until("plain route: 504 after X-Timeout-Ms: 1", plain)
        # A generous X-Timeout-Ms is no error.
        rows, _ = self.rest_probabilities(
            self.rest_infer("listops", self.documents[:1], headers={"X-Timeout-Ms": "60000"}),
            1, len(self.listops.labels))
        self.assert_same_bits(rows, self.reference[:1], "REST infer with X-Timeout-Ms")
        response = self.plain_classify("listops", self.documents[0],
                                       headers={"X-Timeout-Ms": "60000"})
        self.assertEqual(response.status, 200, response)
        # The 16 elements that gRPC answered with DEADLINE_EXCEEDED above: X-Timeout-Ms is a
        # deadline like grpc-timeout, so no 200 after it has passed.
        started = time.monotonic()
        response = self.rest_infer("listops", batch, headers={"X-Timeout-Ms": "1"})
        elapsed_ms = (time.monotonic() - started) * 1e3
        self.assertNotEqual(response.status, 200,
                            f"X-Timeout-Ms: 1 answered 200 after {elapsed_ms:.0f} ms")
        self.assert_http_error(response, 504, "DEADLINE_EXCEEDED")

    def test_authentication(self):
        s = self.auth
        doc = self.documents[:1]
        reference = self.reference[:1]
        classes = len(self.listops.labels)
        bearer = lambda token: {"Authorization": f"Bearer {token}"} if token else {}
        metadata = lambda token: [("authorization", f"Bearer {token}")] if token else None
        refusals = (("missing token", None, grpc.StatusCode.UNAUTHENTICATED, 401),
                    ("unknown token", "not-a-token", grpc.StatusCode.UNAUTHENTICATED, 401),
                    ("admin-only token", ADMIN_TOKEN, grpc.StatusCode.PERMISSION_DENIED, 403))
        # gRPC. Health needs no token; with the classify token the answers are the same as
        # from the server without auth.
        self.assertTrue(s.inference.ServerLive(v2.ServerLiveRequest(), timeout=30).live)
        self.assertTrue(s.inference.ServerReady(v2.ServerReadyRequest(), timeout=30).ready)
        got = s.classifier.Classify(pb.ClassifyRequest(model="listops", document=doc[0]),
                                    metadata=metadata(CLASSIFY_TOKEN), timeout=60)
        self.assertEqual(pack_f32([p.probability for p in got.probabilities]), reference[0][1])
        rows, _ = self.grpc_probabilities(s.inference.ModelInfer(
            v2_request("listops", doc), metadata=metadata(CLASSIFY_TOKEN), timeout=60), 1,
            classes)
        self.assert_same_bits(rows, reference, "v2 gRPC with a token")
        for what, token, code, _ in refusals:
            with self.subTest(f"gRPC: {what}"):
                md = metadata(token)
                self.assert_grpc_error(lambda: s.classifier.Classify(
                    pb.ClassifyRequest(model="listops", document=doc[0]), metadata=md,
                    timeout=30), code)
                self.assert_grpc_error(lambda: s.inference.ModelInfer(
                    v2_request("listops", doc), metadata=md, timeout=30), code)
                self.assert_grpc_error(lambda: s.inference.ModelMetadata(
                    v2.ModelMetadataRequest(name="listops"), metadata=md, timeout=30), code)
        # HTTP, the same.
        self.assertEqual(s.request("GET", "/v2/health/live").status, 200)
        self.assertEqual(s.request("GET", "/v2/health/ready").status, 200)
        rows, _ = self.rest_probabilities(
            self.rest_infer("listops", doc, server=s, headers=bearer(CLASSIFY_TOKEN)), 1, classes)
        self.assert_same_bits(rows, reference, "v2 REST with a token")
        response = self.plain_classify("listops", doc[0], server=s,
                                       headers=bearer(CLASSIFY_TOKEN))
        self.assertEqual(response.status, 200, response)
        self.assertEqual(pack_f32([p["probability"] for p in response.json()["probabilities"]]),
                         reference[0][1])
        self.assertEqual(s.request("GET", "/v2/models/listops", headers=bearer(CLASSIFY_TOKEN))
                         .status, 200)
        for what, token, code, status in refusals:
            with self.subTest(f"HTTP: {what}"):
                headers = bearer(token)
                self.assert_http_error(self.rest_infer("listops", doc, server=s,
                                                       headers=headers), status, code.name)
                self.assert_http_error(self.plain_classify("listops", doc[0], server=s,
                                                           headers=headers), status, code.name)
                self.assert_http_error(s.request("GET", "/v2/models/listops", headers=headers),
                                       status, code.name)
                self.assert_http_error(s.request("GET", "/v1/models", headers=headers),
                                       status, code.name)
        self.assertIsNone(s.process.poll(), s.log_tail())

    # After the tests above have used every front end (unittest runs tests in name order).
    def test_zz_requests_counted_by_protocol(self):
        """taylorshift_requests_total{protocol} tells the four front ends apart (issue 26)."""
        host, port = self.main.metrics.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        try:
            connection.request("GET", "/metrics")
            text = connection.getresponse().read().decode()
        finally:
            connection.close()
        counts = {}
        for line in text.splitlines():
            if line.startswith("taylorshift_requests_total{") and 'model="listops"' in line \
                    and 'code="OK"' in line:
                protocol = line.split('protocol="', 1)[1].split('"', 1)[0]
                counts[protocol] = float(line.rsplit(" ", 1)[1])
        self.assertEqual(set(counts), {"grpc", "v2_grpc", "v2_rest", "rest"}, counts)
        self.assertTrue(all(n >= len(self.documents) for n in counts.values()), counts)

    # Named to run last (unittest runs tests in name order).
    def test_zz_still_serving(self):
        self.assertIsNone(self.main.process.poll(), self.main.log_tail())
        documents = self.documents[:4]
        again = self.classify_all("listops", documents)
        self.assertEqual([r[1] for r in again], [r[1] for r in self.reference[:4]])
        classes = len(self.listops.labels)
        rows = []
        for document in documents:
            rows += self.grpc_probabilities(self.main.inference.ModelInfer(
                v2_request("listops", [document]), timeout=60), 1, classes)[0]
        self.assert_same_bits(rows, self.reference[:4], "v2 gRPC after the errors")
        rows = []
        for document in documents:
            rows += self.rest_probabilities(self.rest_infer("listops", [document]), 1,
                                            classes)[0]
        self.assert_same_bits(rows, self.reference[:4], "v2 REST after the errors")
        response = self.plain_classify("listops", documents[0])
        self.assertEqual(response.status, 200, response)
        self.assertTrue(self.main.inference.ServerReady(v2.ServerReadyRequest(),
                                                        timeout=30).ready)
        self.assertEqual(self.main.request("GET", "/v2/health/ready").status, 200)
        # tiny-queue works again once its queue has drained.
        response = self.main.classifier.Classify(
            pb.ClassifyRequest(model="tiny-queue", document=documents[0]), timeout=60)
        self.assertEqual(pack_f32([p.probability for p in response.probabilities]),
                         self.reference[0][1])


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tsserver", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

"""Triton's own clients, unmodified and in their default modes, against a real tsserver (issue 44).

Starts tsserver on free loopback ports (gRPC and the HTTP front end) serving the bundled
source-lang demo model, then:

- tritonclient.http in its default mode (BYTES inputs and every output in the binary tensor data
  extension), tritonclient.http.aio (aiohttp, which offers `Accept-Encoding: br`), and
  tritonclient.grpc sync and streaming (start_stream / async_stream_infer, an invalid request in
  the middle of the stream answered as that request's error without ending the stream): every
  answer equal to tsserver's own JSON path (POST /v2/models/NAME/infer with JSON tensors,
  read with the standard library), bitwise for one document per request.
- The model configuration over both transports, readiness, metadata.
- perf_analyzer (the PyPI wheel, run by scripts/setup's wrapper through Debian 13's loader) over
  gRPC, HTTP and gRPC --streaming, a few seconds each with real documents: exit status 0 (it
  exits non-zero on any failed request) and a measured throughput; the figures are printed.

Runs with the project venv's python (scripts/setup: .venv-triton, tritonclient[all]==2.73.0 and
perf_analyzer 2.60.0). Usage: triton_clients_test.py --tsserver BIN [--perf-analyzer BIN]"""

import argparse
import asyncio
import csv
import http.client
import json
import os
import queue
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.http.aio as aiohttpclient
from tritonclient.utils import InferenceServerException

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tsserver_process import TsServer  # noqa: E402

ARGS = None
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHECKPOINT = os.path.join(ROOT, "models", "source-lang-demo.tsckpt")
MODEL = "source-lang"
DOCUMENTS = [b"#include <stdio.h>\nint main(void) { return 0; }\n",
             b"#!/bin/sh\nset -e\nfor f in *.txt; do echo \"$f\"; done\n",
             b"import sys\n\ndef main():\n    print(sys.argv)\n",
             b"use strict;\nmy $x = shift;\nprint \"$x\\n\";\n",
             "fn main() { println!(\"h\u00e9llo \u00ab\u00bb\"); }\n".encode("utf-8"),
             b"SELECT name FROM t WHERE id = 1;\n"]
# Several documents of one request are computed as one batch, which is not bitwise the batch of
# one (see protocols_test.py's BATCHED_TOLERANCE).
BATCHED_TOLERANCE = 1e-6
PERF_SECONDS_MS = 1500  # perf_analyzer's measurement window


class Server(TsServer):
    """tsserver with gRPC and the HTTP front end on free loopback ports, jobs off."""

    def __init__(self):
        super().__init__(ARGS.tsserver, {
            "listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0", "jobs": {"enabled": False},
            "shutdown_grace_ms": 2000, "intra_op_threads": 1, "max_infer_batch": 16,
            "models": [{"name": MODEL, "checkpoint": CHECKPOINT}],
            "http": {"listen": "127.0.0.1:0", "threads": 8}},
            needed=("grpc", "http"), prefix="ts-triton-clients-")
        self.grpc, self.http = self.addresses["grpc"], self.addresses["http"]


def documents_input(module, documents):
    """The "document" input of `documents` as a tritonclient InferInput, its default mode."""
    tensor = module.InferInput("document", [len(documents)], "BYTES")
    tensor.set_data_from_numpy(np.array(documents, dtype=np.object_))
    return tensor


class TritonClientsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        try:
            cls.reference = [cls.json_infer([d])[0] for d in DOCUMENTS]
        except BaseException:
            logs = cls.server.log_tail()
            cls.server.close()
            raise AssertionError("setup failed" + logs)

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def tearDown(self):
        if self.server.process.poll() is not None:
            self.fail("tsserver died" + self.server.log_tail())

    @classmethod
    def json_infer(cls, documents):
        """tsserver's own JSON path: [(probabilities float32 array, label)] per document."""
        body = json.dumps({"inputs": [{"name": "document", "datatype": "BYTES",
                                       "shape": [len(documents)],
                                       "data": [d.decode("utf-8") for d in documents]}]})
        host, port = cls.server.http.rsplit(":", 1)
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        connection.request("POST", f"/v2/models/{MODEL}/infer", body,
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        answer = json.loads(response.read())
        connection.close()
        assert response.status == 200, answer
        outputs = {o["name"]: o for o in answer["outputs"]}
        classes = outputs["probabilities"]["shape"][1]
        probabilities = np.array(outputs["probabilities"]["data"], dtype=np.float32)
        return [(probabilities[i * classes:(i + 1) * classes], outputs["label"]["data"][i])
                for i in range(len(documents))]

    def assert_matches(self, probabilities, labels, documents, exact):
        """`probabilities` [B, classes] and `labels` [B] equal to the reference for
        `documents` (bitwise when `exact`)."""
        expected = [self.reference[DOCUMENTS.index(d)] for d in documents]
        self.assertEqual(probabilities.dtype, np.float32)
        self.assertEqual(probabilities.shape[0], len(documents))
        for row, (want, label), got_label in zip(probabilities, expected, labels):
            if exact:
                np.testing.assert_array_equal(row, want)
            else:
                np.testing.assert_allclose(row, want, rtol=0, atol=BATCHED_TOLERANCE)
            self.assertEqual(got_label.decode() if isinstance(got_label, bytes) else got_label,
                             label)

    # --- tritonclient.http ------------------------------------------------------------------

    def test_http_default_mode_is_binary_and_answers_as_json(self):
        client = httpclient.InferenceServerClient(self.server.http)
        self.assertTrue(client.is_server_live())
        self.assertTrue(client.is_server_ready())
        self.assertTrue(client.is_model_ready(MODEL))
        metadata = client.get_model_metadata(MODEL)
        self.assertEqual(metadata["inputs"][0]["datatype"], "BYTES")
        config = client.get_model_config(MODEL)
        self.assertEqual(config["max_batch_size"], 16)
        self.assertEqual(config["input"][0]["data_type"], "TYPE_STRING")
        self.assertEqual(config["output"][0]["dims"], [len(self.reference[0][0])])
        for document in DOCUMENTS:
            # The default: the input and both outputs as binary data.
            result = client.infer(MODEL, [documents_input(httpclient, [document])],
                                  request_id="one")
            self.assertEqual(result.get_response()["id"], "one")
            self.assertIn("binary_data_size",
                          result.get_output("probabilities")["parameters"])
            self.assertMatches(result, [document], exact=True)
        outputs = [httpclient.InferRequestedOutput("label"),
                   httpclient.InferRequestedOutput("probabilities", binary_data=False)]
        result = client.infer(MODEL, [documents_input(httpclient, DOCUMENTS)], outputs=outputs)
        self.assertNotIn("parameters", result.get_output("probabilities"))
        self.assertMatches(result, DOCUMENTS, exact=False)
        # The classification extension in binary: "score:index:label", best first.
        top = client.infer(MODEL, [documents_input(httpclient, DOCUMENTS[:1])],
                           outputs=[httpclient.InferRequestedOutput("probabilities",
                                                                    class_count=2)])
        best = top.as_numpy("probabilities")[0][0].decode().split(":")
        self.assertEqual(best[2], self.reference[0][1])
        # Errors are InferenceServerExceptions with the server's message.
        with self.assertRaisesRegex(InferenceServerException, "no version"):
            client.get_model_config(MODEL, model_version="9")
        wrong = httpclient.InferInput("text", [1], "BYTES")
        wrong.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
        with self.assertRaisesRegex(InferenceServerException, "inputs\\[0\\].name"):
            client.infer(MODEL, [wrong])
        client.close()

    def assertMatches(self, result, documents, exact):
        self.assert_matches(result.as_numpy("probabilities"), result.as_numpy("label"),
                            documents, exact)

    def test_http_aio_client(self):
        async def run():
            client = aiohttpclient.InferenceServerClient(self.server.http)
            try:
                self.assertTrue(await client.is_server_ready())
                config = await client.get_model_config(MODEL)
                self.assertEqual(config["name"], MODEL)
                results = await asyncio.gather(*[
                    client.infer(MODEL, [documents_input(aiohttpclient, [d])])
                    for d in DOCUMENTS])
                # Concurrent requests share batches: not bitwise the batch of one.
                for document, result in zip(DOCUMENTS, results):
                    self.assertMatches(result, [document], exact=False)
            finally:
                await client.close()

        asyncio.run(run())

    # --- tritonclient.grpc ------------------------------------------------------------------

    def test_grpc_sync_and_config(self):
        client = grpcclient.InferenceServerClient(self.server.grpc)
        self.assertTrue(client.is_server_ready())
        config = client.get_model_config(MODEL, as_json=True)["config"]
        self.assertEqual(config["name"], MODEL)
        self.assertEqual(config["max_batch_size"], 16)
        self.assertEqual(config["input"][0]["data_type"], "TYPE_STRING")
        self.assertFalse(config["model_transaction_policy"].get("decoupled", False))
        with self.assertRaisesRegex(InferenceServerException, "is not served"):
            client.get_model_config("nope")
        for document in DOCUMENTS:
            result = client.infer(MODEL, [documents_input(grpcclient, [document])])
            self.assertMatches(result, [document], exact=True)
        # (tritonclient refuses triton_* parameters itself; perf_analyzer sends one each time.)
        result = client.infer(MODEL, [documents_input(grpcclient, DOCUMENTS)])
        self.assertMatches(result, DOCUMENTS, exact=False)
        client.close()

    def test_grpc_streaming_in_order_with_an_error_in_the_middle(self):
        client = grpcclient.InferenceServerClient(self.server.grpc)
        answers = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        sent = []
        for round_ in range(3):
            for i, document in enumerate(DOCUMENTS):
                request_id = f"{round_}-{i}"
                client.async_stream_infer(MODEL, [documents_input(grpcclient, [document])],
                                          request_id=request_id)
                sent.append((request_id, document))
            if round_ == 1:
                wrong = grpcclient.InferInput("text", [1], "BYTES")
                wrong.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
                client.async_stream_infer(MODEL, [wrong], request_id="bad")
                sent.append(("bad", None))
        received = [answers.get(timeout=30) for _ in sent]
        client.stop_stream()
        client.close()
        for (request_id, document), (result, error) in zip(sent, received):
            if document is None:
                self.assertIsNone(result)
                self.assertIn("inputs[0].name", str(error))
                continue
            self.assertIsNone(error, request_id)
            self.assertEqual(result.get_response().id, request_id)  # in the order sent
            # A stream's requests are computed concurrently and share batches.
            self.assertMatches(result, [document], exact=False)

    # --- perf_analyzer ----------------------------------------------------------------------

    def perf_analyzer(self, name, *args):
        """perf_analyzer with real documents; its CSV row (throughput, latencies)."""
        with tempfile.TemporaryDirectory(prefix="ts-perf-analyzer-") as d:
            data = os.path.join(d, "documents.json")
            with open(data, "w") as f:
                json.dump({"data": [{"document": [doc.decode("utf-8")]} for doc in DOCUMENTS]},
                          f)
            report = os.path.join(d, "report.csv")
            command = [ARGS.perf_analyzer, "-m", MODEL, "--input-data", data,
                       "--concurrency-range", "4", "-p", str(PERF_SECONDS_MS),
                       "--max-trials", "4", "--stability-percentage", "100", "-f", report,
                       *args]
            run = subprocess.run(command, capture_output=True, text=True, timeout=60)
            self.assertEqual(run.returncode, 0,
                             f"{name}: {' '.join(command)}\n{run.stdout}\n{run.stderr}")
            with open(report) as f:
                row = next(csv.DictReader(f))
        throughput = float(row["Inferences/Second"])
        p50_ms = float(row["p50 latency"]) / 1000
        p99_ms = float(row["p99 latency"]) / 1000
        print(f"perf_analyzer {name}: concurrency 4, {throughput:.1f} infer/s, "
              f"p50 {p50_ms:.2f} ms, p99 {p99_ms:.2f} ms", file=sys.stderr)
        self.assertGreater(throughput, 0)
        return row

    def test_perf_analyzer_grpc(self):
        self.perf_analyzer("grpc", "-u", self.server.grpc, "-i", "grpc")

    def test_perf_analyzer_http(self):
        self.perf_analyzer("http", "-u", self.server.http, "-i", "http")

    def test_perf_analyzer_grpc_streaming(self):
        self.perf_analyzer("grpc --streaming", "-u", self.server.grpc, "-i", "grpc",
                           "--streaming")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tsserver", required=True)
    parser.add_argument("--perf-analyzer",
                        default=os.path.join(os.path.dirname(sys.executable), "perf_analyzer"))
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

"""KServe's own Python SDK (`kserve` from PyPI), unmodified, against a real tsserver (issue 44).

Starts tsserver on free loopback ports (gRPC and the HTTP front end, bearer tokens on) serving
the bundled source-lang demo model, then uses the SDK's two v2 clients as its documentation
shows them:

- `InferenceRESTClient(RESTConfig(protocol="v2"))`: server and model readiness, and `infer` with
  an `InferRequest` of BYTES documents as JSON tensors and in the binary tensor data extension,
  outputs as JSON and as binary (`RequestedOutput(..., {"binary_data": True})`). The SDK puts
  `model_name` in every body, which tsserver accepts when it names the route's model.
- `InferenceGRPCClient`: readiness and `infer`.

Every answer is compared with tsserver's own JSON path (POST /v2/models/NAME/infer with JSON
tensors, read with the standard library): labels equal, probabilities bitwise for one document
per request and within 1e-6 for a batch. Errors come back as the SDK's exceptions with
tsserver's message (an unknown model names the served ones; a missing token is 401/
UNAUTHENTICATED).

Runs with the project venv's python (scripts/setup: .venv-kserve, kserve==0.21.0).
Usage: kserve_client_test.py --tsserver BIN"""

import argparse
import asyncio
import json
import os
import sys
import unittest
import urllib.request

import grpc
import httpx
import numpy as np
from kserve import (InferenceGRPCClient, InferenceRESTClient, InferInput, InferRequest,
                    RESTConfig)
from kserve.protocol.infer_type import RequestedOutput

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tsserver_process import TsServer  # noqa: E402

ARGS = None
CHECKPOINT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models",
                          "source-lang-demo.tsckpt")
MODEL = "source-lang"
TOKEN = "kserve-sdk-test-token"
AUTH = {"authorization": f"Bearer {TOKEN}"}
DOCUMENTS = [b"#include <stdio.h>\nint main(void) { return 0; }\n",
             b"#!/bin/sh\nset -e\nfor f in *.txt; do echo \"$f\"; done\n",
             b"import sys\n\ndef main():\n    print(sys.argv)\n",
             b"use strict;\nmy $x = shift;\nprint \"$x\\n\";\n",
             "fn main() { println!(\"h\u00e9llo \u00ab\u00bb\"); }\n".encode("utf-8")]
BATCHED_TOLERANCE = 1e-6  # a batch is not bitwise the batch of one (protocols_test.py)


class Server(TsServer):
    """tsserver with gRPC and the HTTP front end on free loopback ports, tokens on, jobs off."""

    def __init__(self):
        super().__init__(ARGS.tsserver, {
            "listen": "127.0.0.1:0", "metrics_listen": "127.0.0.1:0", "jobs": {"enabled": False},
            "shutdown_grace_ms": 2000, "intra_op_threads": 1, "max_infer_batch": 16,
            "auth": {"tokens": {TOKEN: ["classify"]}},
            "models": [{"name": MODEL, "checkpoint": CHECKPOINT}],
            "http": {"listen": "127.0.0.1:0", "threads": 4}},
            needed=("grpc", "http"), prefix="ts-kserve-client-")
        self.grpc, self.http = self.addresses["grpc"], self.addresses["http"]


def json_infer(server, documents):
    """tsserver's own JSON path: per document, (label, probabilities as float32)."""
    body = {"inputs": [{"name": "document", "datatype": "BYTES", "shape": [len(documents)],
                        "data": [d.decode("utf-8") for d in documents]}]}
    request = urllib.request.Request(f"http://{server.http}/v2/models/{MODEL}/infer",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json", **AUTH})
    with urllib.request.urlopen(request, timeout=30) as response:
        answer = json.loads(response.read())
    outputs = {o["name"]: o for o in answer["outputs"]}
    width = outputs["probabilities"]["shape"][1]
    flat = np.array(outputs["probabilities"]["data"], dtype=np.float32)
    return [(outputs["label"]["data"][i], flat[i * width:(i + 1) * width])
            for i in range(len(documents))]


def documents_input(documents, binary):
    tensor = InferInput(name="document", shape=[len(documents)], datatype="BYTES")
    tensor.set_data_from_numpy(np.array(documents, dtype=np.object_), binary_data=binary)
    return tensor


class KServeClientTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.server = Server()
        try:
            cls.reference = [json_infer(cls.server, [d])[0] for d in DOCUMENTS]
        except BaseException:
            logs = cls.server.log_tail()
            cls.server.close()
            raise AssertionError("setup failed" + logs)

    @classmethod
    def tearDownClass(cls):
        cls.server.close()

    def tearDown(self):
        if self.server.process.poll() is not None:
            self.fail("tsserver exited" + self.server.log_tail())

    def assertMatches(self, response, documents, exact):
        outputs = {o.name: o for o in response.outputs}
        labels = [v.decode() if isinstance(v, bytes) else v
                  for v in outputs["label"].as_numpy().tolist()]
        probabilities = outputs["probabilities"].as_numpy().astype(np.float32)
        self.assertEqual(probabilities.shape, (len(documents), 4))
        for i, document in enumerate(documents):
            label, expected = self.reference[DOCUMENTS.index(document)]
            self.assertEqual(labels[i], label)
            if exact:
                np.testing.assert_array_equal(probabilities[i], expected)
            else:
                np.testing.assert_allclose(probabilities[i], expected, atol=BATCHED_TOLERANCE)

    def test_rest_client(self):
        async def run():
            client = InferenceRESTClient(RESTConfig(protocol="v2", timeout=30))
            base = f"http://{self.server.http}"
            try:
                self.assertTrue(await client.is_server_live(base))
                self.assertTrue(await client.is_server_ready(base))
                self.assertTrue(await client.is_model_ready(base, MODEL, headers=AUTH))
                for binary in (False, True):
                    for document in DOCUMENTS:
                        request = InferRequest(model_name=MODEL, request_id="one",
                                               infer_inputs=[documents_input([document], binary)])
                        response = await client.infer(base, request, model_name=MODEL,
                                                      headers=dict(AUTH))
                        self.assertEqual(response.id, "one")
                        self.assertMatches(response, [document], exact=True)
                    outputs = [RequestedOutput("probabilities", {"binary_data": True}),
                               RequestedOutput("label", {"binary_data": binary})]
                    request = InferRequest(model_name=MODEL, request_outputs=outputs,
                                           infer_inputs=[documents_input(DOCUMENTS, binary)])
                    response = await client.infer(base, request, model_name=MODEL,
                                                  headers=dict(AUTH))
                    self.assertMatches(response, DOCUMENTS, exact=False)
                # Errors: the SDK raises httpx's HTTPStatusError with tsserver's message.
                request = InferRequest(model_name="nope",
                                       infer_inputs=[documents_input(DOCUMENTS[:1], False)])
                with self.assertRaisesRegex(httpx.HTTPStatusError, "source-lang"):
                    await client.infer(base, request, model_name="nope", headers=dict(AUTH))
                request = InferRequest(model_name=MODEL,
                                       infer_inputs=[documents_input(DOCUMENTS[:1], False)])
                with self.assertRaisesRegex(httpx.HTTPStatusError, "401"):
                    await client.infer(base, request, model_name=MODEL)
            finally:
                await client.close()

        asyncio.run(run())

    def test_grpc_client(self):
        async def run():
            client = InferenceGRPCClient(self.server.grpc, timeout=30)
            metadata = list(AUTH.items())
            try:
                self.assertTrue(await client.is_server_live())
                self.assertTrue(await client.is_server_ready())
                self.assertTrue(await client.is_model_ready(MODEL, headers=metadata))
                for document in DOCUMENTS:
                    request = InferRequest(model_name=MODEL, request_id="g",
                                           infer_inputs=[documents_input([document], False)])
                    response = await client.infer(request, headers=metadata)
                    self.assertEqual(response.id, "g")
                    self.assertMatches(response, [document], exact=True)
                request = InferRequest(model_name=MODEL,
                                       infer_inputs=[documents_input(DOCUMENTS, False)])
                self.assertMatches(await client.infer(request, headers=metadata), DOCUMENTS,
                                   exact=False)
                request = InferRequest(model_name="nope",
                                       infer_inputs=[documents_input(DOCUMENTS[:1], False)])
                with self.assertRaises(grpc.aio.AioRpcError) as caught:
                    await client.infer(request, headers=metadata)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.NOT_FOUND)
                self.assertIn("source-lang", caught.exception.details())
                request = InferRequest(model_name=MODEL,
                                       infer_inputs=[documents_input(DOCUMENTS[:1], False)])
                with self.assertRaises(grpc.aio.AioRpcError) as caught:
                    await client.infer(request)
                self.assertEqual(caught.exception.code(), grpc.StatusCode.UNAUTHENTICATED)
            finally:
                await client.close()

        asyncio.run(run())


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tsserver", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)

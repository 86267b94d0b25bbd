"""gRPC server reflection v1 from outside (issue 44): grpcio from PyPI (the project venv of
scripts/setup, .venv-triton) against a real tsserver, over grpc.reflection.v1.ServerReflection,
which newer grpcurl, Postman and grpcio-reflection's servers speak and Debian's gRPC 1.51 lacks.

grpcio-reflection's own client (ProtoReflectionDescriptorDatabase, 1.85.1) still asks v1alpha, so
the v1 messages are compiled here from proto/grpc/reflection/v1/reflection.proto with protoc and
sent through grpcio's generic stream. With a bearer token configured (auth.protect_discovery on by
default): without the token the call fails and names no service; with it, list_services names the
served services, the files of taylorshift.v1.Classifier and inference.GRPCInferenceService build
a descriptor pool in which their methods resolve, and an unknown symbol answers an
error_response NOT_FOUND on the same stream.

Usage: reflection_v1_test.py --tsserver BIN --protoc BIN (with the venv's python)."""

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

import grpc
from google.protobuf import descriptor_pb2, descriptor_pool

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from tsserver_process import TsServer  # noqa: E402

ARGS = None
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
CHECKPOINT = os.path.join(ROOT, "models", "source-lang-demo.tsckpt")
METHOD = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
TOKEN = "s3cret"


def compile_reflection(out_dir):
    """reflection_pb2 of grpc.reflection.v1, loaded under its own name (not inside `grpc`)."""
    subprocess.run([ARGS.protoc, "--proto_path", os.path.join(ROOT, "proto"),
                    "--python_out", out_dir, "grpc/reflection/v1/reflection.proto"], check=True)
    path = os.path.join(out_dir, "grpc", "reflection", "v1", "reflection_pb2.py")
    spec = importlib.util.spec_from_file_location("reflection_v1_pb2", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class ReflectionV1Test(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="ts-reflection-v1-")
        d = cls.tmp.name
        cls.pb = compile_reflection(d)
        try:
            cls.server = TsServer(ARGS.tsserver, {
                "listen": "127.0.0.1:0", "metrics_listen": "", "intra_op_threads": 1,
                "auth": {"tokens": {TOKEN: ["classify"]}},
                "models": [{"name": "source-lang", "checkpoint": CHECKPOINT}]},
                prefix="ts-reflection-v1-server-")
        except BaseException:
            cls.tmp.cleanup()
            raise
        cls.channel = grpc.insecure_channel(cls.server.addresses["grpc"])

    @classmethod
    def tearDownClass(cls):
        cls.channel.close()
        cls.server.close()
        cls.tmp.cleanup()

    def exchange(self, requests, token=TOKEN):
        """The responses to `requests`, sent on one v1 stream."""
        call = self.channel.stream_stream(
            METHOD, request_serializer=self.pb.ServerReflectionRequest.SerializeToString,
            response_deserializer=self.pb.ServerReflectionResponse.FromString)
        metadata = [("authorization", "Bearer " + token)] if token else None
        return list(call(iter(requests), metadata=metadata, timeout=10))

    def test_without_a_token_the_call_fails_and_names_no_service(self):
        for token in ("", "wrong"):
            with self.assertRaises(grpc.RpcError) as raised:
                self.exchange([self.pb.ServerReflectionRequest(list_services="")], token)
            self.assertNotEqual(raised.exception.code(), grpc.StatusCode.UNIMPLEMENTED)
            self.assertNotIn("taylorshift", raised.exception.details() or "")

    def test_services_and_their_files_resolve_and_unknown_symbols_are_not_found(self):
        Request = self.pb.ServerReflectionRequest
        responses = self.exchange([
            Request(list_services=""),
            Request(file_containing_symbol="taylorshift.v1.Classifier"),
            Request(file_containing_symbol="inference.GRPCInferenceService.ModelInfer"),
            Request(file_containing_symbol="taylorshift.v1.NoSuchService"),
        ])
        self.assertEqual(len(responses), 4)
        services = {s.name for s in responses[0].list_services_response.service}
        for name in ("taylorshift.v1.Classifier", "taylorshift.v1.Jobs",
                     "inference.GRPCInferenceService", "grpc.health.v1.Health",
                     "grpc.reflection.v1alpha.ServerReflection",
                     "grpc.reflection.v1.ServerReflection"):
            self.assertIn(name, services)

        files = []
        for response in responses[1:3]:
            self.assertTrue(response.HasField("file_descriptor_response"), response)
            for raw in response.file_descriptor_response.file_descriptor_proto:
                files.append(descriptor_pb2.FileDescriptorProto.FromString(raw))
        names = [f.name for f in files]
        self.assertEqual(len(names), len(set(names)), "a file was sent twice on one stream")
        self.assertEqual(names[0], "taylorshift/v1/classifier.proto")
        pool = descriptor_pool.DescriptorPool()
        added = set()
        while len(added) < len(files):  # each file once its imports are in the pool
            progress = False
            for f in files:
                if f.name not in added and all(d in added for d in f.dependency):
                    pool.Add(f)
                    added.add(f.name)
                    progress = True
            self.assertTrue(progress, f"imports missing from {sorted(added)}")
        classifier = pool.FindServiceByName("taylorshift.v1.Classifier")
        self.assertIn("Classify", classifier.methods_by_name)
        inference = pool.FindServiceByName("inference.GRPCInferenceService")
        self.assertEqual(inference.methods_by_name["ModelInfer"].input_type.full_name,
                         "inference.ModelInferRequest")

        error = responses[3].error_response
        self.assertEqual(error.error_code, grpc.StatusCode.NOT_FOUND.value[0])
        self.assertIn("taylorshift.v1.NoSuchService", error.error_message)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--tsserver", required=True)
    parser.add_argument("--protoc", required=True)
    ARGS, rest = parser.parse_known_args()
    unittest.main(argv=[sys.argv[0]] + rest)

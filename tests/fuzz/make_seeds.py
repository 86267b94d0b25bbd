#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/TARGET/) from the examples of the
tests, the docs and config/: small, real inputs, each file one input. The first byte of a
target's input is its selector where the target has one (tests/fuzz/fuzz_support.h). Protobuf
seeds are written as text and encoded with `protoc --encode`. Deterministic: running it again
rewrites the same files. Usage: tests/fuzz/make_seeds.py (from anywhere)."""

import base64
import gzip
import io
import os
import shutil
import struct
import subprocess
import tempfile
import zipfile
import zlib

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")
PROTO = os.path.join(ROOT, "proto")


def write_proto(target, name, bits, message, proto, text):
    """A protobuf seed twice: in the wire format and in the text format."""
    write(target, name, sel(bits) + encode(message, proto, text))
    write(target, name + ".txt", sel(bits | TEXT_FORMAT) + text.encode())


def write(target, name, data):
    folder = os.path.join(CORPUS, target)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)


def encode(message, proto, text):
    """The wire form of a text-form message (the text must parse: protoc checks it)."""
    return subprocess.run(["protoc", f"--proto_path={PROTO}", f"--encode={message}", proto],
                          input=text.encode(), capture_output=True, check=True).stdout


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


DOC, IMG, VERSIONED, BINARY_HEADER = 0, 1, 2, 4
TEXT_FORMAT = 0x80  # proto targets: the message in the text format (tests/fuzz/proto_input.h)


def sel(bits):
    return bytes([bits])


# --- request bodies as the HTTP listener decodes them (server/serving/http_body.h) -----------
# Selector bits 0-1: identity, gzip, deflate; bits 2-7: the piece size the bytes arrive in.
HTTP_BODY = b'{"text": "a document, a document, a document"}'
write("http_body_fuzz", "identity", sel(0) + HTTP_BODY)
write("http_body_fuzz", "gzip", sel(1 | 4) + gzip.compress(HTTP_BODY, mtime=0))
write("http_body_fuzz", "gzip_two_members",
      sel(1) + gzip.compress(b"ab", mtime=0) + gzip.compress(b"cd", mtime=0))
write("http_body_fuzz", "deflate", sel(2 | 8) + zlib.compress(HTTP_BODY))
write("http_body_fuzz", "gzip_zeros_past_the_ratio", sel(1) + gzip.compress(bytes(1 << 20), mtime=0))


# --- KServe v2 REST bodies (tests/server/http_frontend_test.cc, docs/PROTOCOLS.md) -----------
V2 = {
    "batch": (DOC, '{"id": "q", "inputs": [{"name": "document", "datatype": "BYTES", '
                   '"shape": [2, 1], "data": [["ab"], ["abcd"]]}], "parameters": {"path": "direct"}}'),
    "classification": (DOC | VERSIONED,
                       '{"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1], '
                       '"data": ["int main() { return 0; }"]}], "parameters": {"top_k": 2, '
                       '"over_length": "window"}, "outputs": [{"name": "probabilities", '
                       '"parameters": {"class_count": 2}}, {"name": "label"}]}'),
    "image": (IMG, '{"inputs": [{"name": "image", "datatype": "UINT8", "shape": [1, 2, 2], '
                   '"data": [[0, 255], [7, 128]]}]}'),
    "image_rgb": (IMG, '{"inputs": [{"name": "image", "datatype": "UINT8", "shape": [1, 1, 2, 3], '
                       '"data": [1, 2, 3, 250, 251, 252]}], "outputs": [{"name": "label"}]}'),
    "binary_data_size": (DOC | BINARY_HEADER,
                         '{"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1], '
                         '"data": ["a"], "parameters": {"binary_data_size": 1}}]}'),
    "binary_output": (DOC, '{"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1], '
                           '"data": ["a"]}], "outputs": [{"name": "label", "parameters": '
                           '{"binary_data": false}}, {"name": "probabilities", "parameters": '
                           '{"binary_data": true}}]}'),
    "bad_data": (DOC, '{"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1], '
                      '"data": [7]}]}'),
    "big_number": (DOC, '{"inputs": [{"name": "document", "datatype": "BYTES", "shape": [1e400], '
                        '"data": ["a"]}]}'),
}
for name, (bits, body) in V2.items():
    write("v2_json_body_fuzz", name, sel(bits) + body.encode())
# The binary data extension as tritonclient sends it: JSON, then the raw tensor bytes.
write("v2_json_body_fuzz", "binary_appended",
      sel(DOC | BINARY_HEADER) + b'{"inputs": [{"name": "document", "datatype": "BYTES", '
      b'"shape": [1], "parameters": {"binary_data_size": 9}}]}' + b"\x05\x00\x00\x00hello")

# --- the binary tensor data extension, structured (tests/fuzz/v2_binary_body_fuzz.cc) ---------
# Bytes 0-4: flags, layout, image, the header and binary_data_size offsets; then the payload.
def binary_seed(flags, layout, image=0, header_delta=0, size_delta=0, payload=b""):
    return bytes([flags, layout, image, header_delta & 0xFF, size_delta & 0xFF]) + payload


BINARY_SEEDS = {
    # Two documents (lengths 5 and 3), both outputs asked, all answered as binary.
    "documents": binary_seed(2, 2 | (3 << 4), payload=b"\x04hello\x02abc"),
    # [2, 1] documents, probabilities as binary and the label as JSON (per-output parameters).
    "per_output": binary_seed(4, 2 | 8 | (3 << 4) | 64, payload=b"\x00x\x01yz"),
    # One 2x3 RGB image, classification on the probabilities output.
    "image_rgb": binary_seed(1 | 2, 1 | 8 | (1 << 4), image=1 | (2 << 2) | 32,
                             payload=bytes(range(0, 180, 10))),
    # The header's length one byte short, binary_data_size one too many.
    "header_short": binary_seed(8, 1, header_delta=-1, payload=b"\x03abcd"),
    "size_over": binary_seed(16, 1, size_delta=1, payload=b"\x03abcd"),
    # data and binary_data_size together; a second input; raw bytes with a broken length prefix.
    "data_and_size": binary_seed(32, 1, payload=b"\x00a"),
    "two_inputs": binary_seed(64, 1, payload=b"\x00a\x03xyz"),
    "raw_prefix": binary_seed(128, 1, payload=b"\xff\x00\x00\x00ab"),
    # Pixels the shape does not account for.
    "pixels_raw": binary_seed(1 | 128, 2, image=5, payload=b"\x01\x02\x03"),
}
for name, data in BINARY_SEEDS.items():
    write("v2_binary_body_fuzz", name, data)

# --- the plain route (tests/server/http_frontend_test.cc, README) ----------------------------
PLAIN = {
    "text": (DOC, '{"text": "hello", "top_k": 2, "request_id": "r", "over_length": "reject"}'),
    "base64": (DOC, '{"document_base64": "AAEC", "path": "efficient"}'),
    "window": (DOC, '{"text": "' + "abcdefgh" * 20 + '", "over_length": "window"}'),
    "pixels": (IMG, '{"image": {"width": 2, "height": 1, "pixels": [0, 255]}}'),
    "pixels_base64": (IMG, '{"image": {"width": 1, "height": 2, "channels": 3, '
                           '"pixels_base64": "AQID+vv8"}, "top_k": 1}'),
    "unknown_key": (DOC, '{"txt": "a"}'),
    "deep": (DOC, '{"top_k": ' + "[" * 40 + "]" * 40 + "}"),
}
for name, (bits, body) in PLAIN.items():
    write("plain_route_fuzz", name, sel(bits) + body.encode())

# --- KServe v2 gRPC requests (tests/server/kserve_v2_test.cc, tests/client/protocol_calls) ---
V2_PROTO = "inference/grpc_predict_v2.proto"
RAW = {
    "raw_documents": (DOC, r'''model_name: "doc" id: "r1"
inputs { name: "document" datatype: "BYTES" shape: 2 }
raw_input_contents: "\t\000\000\000[MAX 1 2]\002\000\000\000hi"'''),
    "contents": (DOC, r'''model_name: "doc" model_version: "1"
parameters { key: "top_k" value { int64_param: 2 } }
inputs { name: "document" datatype: "BYTES" shape: 1 shape: 1
         contents { bytes_contents: "a document" } }
outputs { name: "probabilities" parameters { key: "classification" value { int64_param: 2 } } }'''),
    "raw_pixels": (IMG, r'''inputs { name: "image" datatype: "UINT8" shape: 1 shape: 2 shape: 2 }
raw_input_contents: "\000\377\007\200"'''),
    "uint_pixels": (IMG, r'''model_name: "img"
inputs { name: "image" datatype: "UINT8" shape: 1 shape: 1 shape: 2 shape: 3
         contents { uint_contents: [1, 2, 3, 250, 251, 252] } }
parameters { key: "path" value { string_param: "direct" } }'''),
    "cut_prefix": (DOC, r'''inputs { name: "document" datatype: "BYTES" shape: 1 }
raw_input_contents: "\377\000\000\000abc"'''),
}
for name, (bits, text) in RAW.items():
    write_proto("v2_raw_input_fuzz", name, bits, "inference.ModelInferRequest", V2_PROTO, text)

# --- Classifier.Classify requests (tests/server/server_integration_test.cc) ------------------
CLASSIFIER_PROTO = "taylorshift/v1/classifier.proto"
CLASSIFY = {
    "document": (DOC, 'model: "doc" document: "a short document" top_k: 2 request_id: "r"'),
    "window": (DOC, 'document: "' + "0123456789" * 10 + '" over_length: "window"'),
    "gray": (IMG, r'image { width: 2 height: 2 channels: 1 pixels: "\000\377\007\200" }'),
    "rgb": (IMG, r'model: "img" image { width: 2 height: 1 channels: 3 '
                 r'pixels: "\001\002\003\372\373\374" } over_length: "keep_tail"'),
}
for name, (bits, text) in CLASSIFY.items():
    write_proto("classify_request_fuzz", name, bits, "taylorshift.v1.ClassifyRequest",
                CLASSIFIER_PROTO, text)

# --- images (tests/client/image_reader_test.cc) -----------------------------------------------
write("pnm_image_fuzz", "p5_comments", b"P5\n# made by a test\n3 # width\n2\n# maxval next\n255\n"
      + bytes([0, 10, 20, 30, 40, 250]))
write("pnm_image_fuzz", "p6", b"P6\n#c\n2 1\n255\n" + bytes([1, 2, 3, 250, 251, 252]))
write("pnm_image_fuzz", "p2", b"P2\n# plain gray\n2 2\n255\n0 128 # first row\n  255\n\t7\n")
write("pnm_image_fuzz", "p3", b"P3 1 2 255 1 2 3 250 251 252")
write("pnm_image_fuzz", "p5_maxval15", b"P5 2 2 15\n" + bytes([0, 5, 10, 15]))

# --- job specs (docs/JOBS.md, tests/job_contract/job_spec_yaml_test.cc) ----------------------------
TRAINING_YAML = {
    "issue_example": """name: filetype
model: {embed_dim: 64, depth: 2, heads: 8, mlp_ratio: 2, max_length: 2048}
data:
  train: {format: jsonl, path: train.jsonl}
  validation: {format: jsonl, path: val.jsonl}     # or split: 0.1
optimizer: {name: adamw, lr: 0.001, weight_decay: 0.001, warmup_steps: 20}
batch_size: 16
steps: 300             # or epochs
seed: 1
""",
    "split_epochs": """name: filetype
model: {embed_dim: 64, depth: 2, heads: 8, max_length: 2048}
data:
  train: {format: jsonl, path: train.jsonl}
  validation: {split: 0.1}
epochs: 3
""",
    "full": """name: full-spec-1_a
model:
  embed_dim: 128
  depth: 3
  heads: 4
  mlp_ratio: 2.5
  max_length: 1024
  conv_embed: true
  drop_rate: 0.1
  drop_path: 0.2
  attn_drop: 0.05
data:
  train:
    format: listops
    generate: {count: 5000, min_length: 100, max_length: 900, seed: 7}
    skip_malformed: true
  validation: {format: lra_tsv, path: lists/val.tsv, skip_malformed: true}
optimizer:
  name: lamb
  lr: 0.002
  weight_decay: 0
  warmup_steps: 40
  schedule: cosine
  min_lr_ratio: 0.1
  beta1: 0.8
  beta2: 0.99
  eps: 1.0e-6
batch_size: 32
steps: 400
seed: 0
grad_clip: 0
checkpoint_interval: 50
eval_interval: 25
log_interval: 5
path: efficient
threads: 2
labels: [neg, pos, "3"]
keep_checkpoints: 3
modality: pixels
workers: 2
max_retries: 1
dtype: float64
""",
    "init_from": """name: finetune
init_from: job:job-3
data: {train: {format: folder, path: aclImdb/train}, validation: {split: 0.2}}
epochs: 0.5
batch_size: 8
""",
    "cifar": """name: cifar
model: {embed_dim: 32, depth: 1, heads: 4, max_length: 1024}
data: {train: {format: cifar10, path: cifar/data_batch_1.bin}}
steps: 10
""",
}
EVALUATION_YAML = {
    "model": """name: eval-1
model: imdb
data: {format: folder, path: aclImdb/test, skip_malformed: true}
batch_size: 8
path: direct
threads: 2
""",
    "job": "name: eval-2\njob_id: job-7\ndata: {format: jsonl, path: val.jsonl}\n",
    "checkpoint": "name: eval-3\ncheckpoint: models/best.tsckpt\n"
                  "data: {format: listops, generate: {count: 100}}\n",
}
for i, (name, text) in enumerate(TRAINING_YAML.items()):
    write("job_spec_yaml_fuzz", "training_" + name, sel(2 * (i + 3)) + text.encode())
for name, text in EVALUATION_YAML.items():
    write("job_spec_yaml_fuzz", "evaluation_" + name, sel(1) + text.encode())

JOBS_PROTO = "taylorshift/v1/jobs.proto"
TRAINING_PROTO = {
    "issue_example": '''spec { name: "filetype"
  model { embed_dim: 64 depth: 2 heads: 8 mlp_ratio: 2 max_length: 2048 }
  data { train { format: "jsonl" path: "train.jsonl" } validation { format: "jsonl" path: "val.jsonl" } }
  optimizer { name: "adamw" lr: 0.001 weight_decay: 0.001 warmup_steps: 20 }
  batch_size: 16 steps: 300 seed: 1 }''',
    "epochs_split": '''spec { name: "e" model { embed_dim: 64 depth: 2 heads: 8 max_length: 2048 }
  data { train { format: "jsonl" path: "train.jsonl" } validation { split: 0.1 } }
  epochs: 3 }''',
    "listops": '''spec { name: "lo" model { embed_dim: 32 depth: 1 heads: 4 max_length: 512 }
  data { train { format: "listops" generate { count: 100 min_length: 20 max_length: 500 } } }
  steps: 20 path: ATTENTION_PATH_EFFICIENT workers: 2 dtype: "float64" }''',
}
EVALUATION_PROTO = {
    "model": 'spec { name: "eval-1" model: "imdb" data { format: "folder" path: "aclImdb/test" } '
             'batch_size: 8 }',
    "job": 'spec { name: "eval-2" job_id: "job-7" data { format: "jsonl" path: "v.jsonl" } }',
}
for i, (name, text) in enumerate(TRAINING_PROTO.items()):
    write_proto("job_spec_proto_fuzz", "training_" + name, 2 * (i + 3),
                "taylorshift.v1.SubmitTrainingRequest", JOBS_PROTO, text)
for name, text in EVALUATION_PROTO.items():
    write_proto("job_spec_proto_fuzz", "evaluation_" + name, 1,
                "taylorshift.v1.SubmitEvaluationRequest", JOBS_PROTO, text)

# --- the Jobs API's paged reads (tests/server/job_store_test.cc) -----------------------------
def token(text):
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


PAGES = {
    "list_first": (0, "page_size: 1"),
    "list_running": (0, "state: JOB_STATE_RUNNING kind: JOB_KIND_TRAINING page_size: 2"),
    "list_token": (0, f'page_size: 1 page_token: "{token("2.0.0")}"'),
    "history_first": (1, 'id: "job-1" page_size: 3 include_class_reports: true'),
    "history_token": (1, f'id: "job-2" page_size: 2 page_token: "{token("3.0.3.job-2")}"'),
    "history_other_job": (1, f'id: "job-1" page_token: "{token("3.1.1.job-2")}"'),
}
for name, (bits, text) in PAGES.items():
    message = "GetJobHistoryRequest" if bits & 1 else "ListJobsRequest"
    write_proto("job_page_token_fuzz", name, bits, f"taylorshift.v1.{message}", JOBS_PROTO, text)

# --- the server configuration (config/) --------------------------------------------------------
for path in ("config/default.yaml", "config/examples/tls.yaml", "config/examples/two-models.yaml"):
    write("server_config_fuzz", os.path.basename(path), read(path))

# --- the calibration file (tests/model/cost_model_test.cc) ------------------------------------
write("calibration_file_fuzz", "two_batches", """taylorshift-calibration 1
crossover head_dim=32 heads=8 batch=1 precision=fp32 tokens=900 crossed=1 device=cpu threads=2
point head_dim=32 heads=8 batch=1 precision=fp32 tokens=512 direct_s=0.01 efficient_s=0.02
point head_dim=32 heads=8 batch=1 precision=fp32 tokens=1024 direct_s=0.04 efficient_s=0.03
crossover head_dim=32 heads=8 batch=16 precision=fp32 tokens=400 crossed=1 device=cpu threads=2
crossover head_dim=32 heads=8 batch=1 precision=bf16 tokens=600 crossed=0 device=cuda:0 threads=1
""")
write("calibration_file_fuzz", "no_precision", """taylorshift-calibration 1
# written before precision existed
crossover head_dim=32 heads=8 batch=1 tokens=412 crossed=1 device=cpu threads=2
point head_dim=32 heads=8 batch=1 tokens=256 direct_s=0.1 efficient_s=0.2
""")

# --- data sets (docs/JOBS.md, tests/model/dataset_readers_test.cc) ----------------------------
JSONL = {
    "strings": (0, '{"text": "great film", "label": "pos"}\n{"text": "dull", "label": "neg"}\n'),
    "integers": (2, '\ufeff{"text": "a", "label": 1, "id": 7}\r\n\n{"text": "b", "label": 0}\n'),
    "malformed": (1, '{"text": "a", "label": "pos"}\n{"text": 3}\n{"text": "b", "label": 1.5}\n'
                     '{"text": "c", "label": "neg", "label": "pos"}\nnot json\n'),
}
for name, (bits, text) in JSONL.items():
    write("jsonl_dataset_fuzz", name, sel(bits) + text.encode())

LISTOPS = {
    "lra": (0, "Source\tTarget\n( ( ( [MAX 4 3 ) [MIN 2 3 ) ] 1 0 ) ]\t4\n[SM 1 2 [MED 3 4 5 ] ]\t7\n"),
    "malformed": (1, "Source\tTarget\n[FIRST 1 2 ]\t1\n\t3\n[LAST 1 ]\t12\nno tab\n"
                     "[MAX [MIN 1 2 ] ]\t1\n"),
}
for name, (bits, text) in LISTOPS.items():
    write("listops_dataset_fuzz", name, sel(bits) + text.encode())

# Two CIFAR-10 records (label, 1024 R, 1024 G, 1024 B) and a third cut short.
records = b""
for label in (3, 11):
    records += bytes([label]) + bytes((i * 7 + label) % 256 for i in range(3072))
write("cifar10_dataset_fuzz", "two_records", sel(0) + records)
write("cifar10_dataset_fuzz", "truncated", sel(1) + records + bytes([2]) + b"\x80" * 100)

FOLDERS = {
    "aclimdb": (0, "=== pos/1.txt\nA fine film.\n=== pos/2.txt\nGreat.\n=== neg/1.txt\nDull.\n"
                   "=== unsup/1.txt\nunlabelled\n=== neg/notes.md\nignored\n"),
    "labels_links": (7, "=== pos/a.txt\nyes\n=== neg/b.txt\n=== neg/c.txt -> ../pos/a.txt\n"
                        "=== pos/d.txt -> ../../outside/secret.txt\n"),
    "class_link": (4, "=== neg/a.txt\nno\n=== pos -> ../outside/class\n"),
}
for name, (bits, text) in FOLDERS.items():
    write("folder_dataset_fuzz", name, sel(bits) + text.encode())

# --- worker events (job_contract/event_pipe.h): 4-byte little-endian length, then the message ------
WORKER_PROTO = "taylorshift/v1/worker.proto"
EVENTS = [
    "rank: 1 heartbeat: true",
    'started { total_steps: 60 train_examples: 200 labels: "neg" labels: "pos" '
    'spec { name: "t" steps: 60 } world_size: 2 }',
    "progress { step: 10 loss: 0.69 learning_rate: 0.001 examples_per_second: 120 time_ms: 1 }",
    'checkpoint { checkpoint { path: "job/step-10.tsckpt" step: 10 } '
    'removed_paths: "job/step-5.tsckpt" }',
    'log: "loading data"',
    'result { code: 0 message: "" }',
]
stream = b""
for text in EVENTS:
    message = encode("taylorshift.v1.WorkerMessage", WORKER_PROTO, text)
    stream += struct.pack("<I", len(message)) + message
write("event_pipe_fuzz", "session_one_byte_reads", sel(0) + stream)
write("event_pipe_fuzz", "session_whole", sel(255) + stream)
write("event_pipe_fuzz", "oversized_frame", sel(3) + struct.pack("<I", 0x7fffffff) + b"\x10\x01")

# --- checkpoints (model/checkpoints/checkpoint.h), written by `tsmodel init` -------------------------
# Tiny untrained models (17-31 KB), each three times: the whole file (selector 0), its payload
# alone, which the target wraps in a correct header and CRC-32 (selector 1), and the payload's
# pickle alone, around which the target writes the archive (selector 2). tsmodel comes from the
# ordinary build (TS_TSMODEL names another); without one, the committed seeds stay as they are.
# Not byte-for-byte repeatable: SaveCheckpoint stamps the provenance with the time of the run.
TSMODEL = os.environ.get("TS_TSMODEL", os.path.join(ROOT, "build", "model", "tsmodel"))
CHECKPOINTS = {
    # 2 classes, one block: the smallest model the server serves.
    "bytes_tiny": ["--labels", "neg,pos", "--embed-dim", "8", "--depth", "1", "--heads", "2",
                   "--mlp-ratio", "2", "--max-length", "16"],
    # Pixels, two blocks, a max_length past 255 (pickled as a 2-byte integer, not 1).
    "pixels_two_blocks": ["--modality", "pixels", "--labels", "a,b,c", "--embed-dim", "8",
                          "--depth", "2", "--heads", "4", "--mlp-ratio", "1",
                          "--max-length", "300"],
}
if os.access(TSMODEL, os.X_OK):
    for name, flags in CHECKPOINTS.items():
        with tempfile.TemporaryDirectory() as scratch:
            path = os.path.join(scratch, "model.tsckpt")
            subprocess.run([TSMODEL, "init", "--out", path, "--seed", "7"] + flags, check=True,
                           stdout=subprocess.DEVNULL)
            with open(path, "rb") as f:
                checkpoint = f.read()
        header = 8 + 4 + 8
        (length,) = struct.unpack_from("<Q", checkpoint, 12)
        assert len(checkpoint) == header + length + 4
        write("checkpoint_fuzz", name + ".tsckpt", sel(0) + checkpoint)
        payload = checkpoint[header:header + length]
        write("checkpoint_fuzz", name + ".payload", sel(1) + payload)
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            write("checkpoint_fuzz", name + ".pkl", sel(2) + archive.read("archive/data.pkl"))
else:
    print(f"make_seeds: no {TSMODEL}; the checkpoint_fuzz seeds are left as they are")

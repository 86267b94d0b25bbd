#!/usr/bin/python3
"""Runs every shell example of README.md and docs/*.md against a real tsserver (issue 26).

Extracts the fenced ```sh, ```bash and ```python blocks of README.md and docs/*.md (and
```console blocks, and bare fences whose first line starts with `$ `, which must be skipped) and
runs each in Markdown order, so that a documented example cannot break silently. The convention
(docs/DEVELOPMENT.md, "Documentation examples"):

- A block runs unless `<!-- doc-test: skip REASON -->` stands right before it (only blank lines
  and other doc-test markers between). A block that neither ran successfully nor is skipped
  fails the test; the summary names every block run and every block skipped, with its reason.
- `# => TEXT` (on its own line or at the end of a line) is output the block must print: each
  TEXT is looked for in the block's stdout and stderr, in order, after the previous one; `...`
  in TEXT matches anything within one line.
- `<!-- doc-test: setup NAME -->` runs the named fixture of SETUPS below first (the files that
  the prose says the user already has: data, a reference state dict).
- `<!-- doc-test: write PATH -->` writes the block (a spec, say) to PATH before the first block
  of its file runs.
- `<!-- doc-test: replace `OLD` `NEW` REASON -->` substitutes NEW for OLD in the next block
  (a training job's step count, say); a replacement that finds nothing fails.
- `<!-- doc-test: venv NAME -->` runs the next python block with the python of the project venv
  given as `--venv NAME=DIR` (a client from PyPI, say); without that argument the block fails.

Each Markdown file gets a fresh work directory (the repository's top-level folders symlinked
in, so `proto/...` and `models/...` resolve as from the repository root; files the examples
write land there) and, when one of its blocks runs, a fresh tsserver: a copy of
config/default.yaml with gRPC, HTTP and metrics on free loopback ports (port 0 and
--ready-file), the state dir under the work dir, data_root `data/` in it, the bundled demo
models, and jobs.worker_binary the --tsworker given. sh blocks run under `bash -e -o pipefail`
(every command's exit status counts), python blocks under /usr/bin/python3. Before running,
and printed with each block: the documented addresses (127.0.0.1:50051 gRPC, :8080 HTTP,
:9464 metrics) become the server's, `build/...` binaries the ones given on the command line,
a `tsctl` command without `--server` gets the server's address, and the rows of
CPU_SUBSTITUTIONS whose condition holds on this machine apply. A `build/` path left after
that fails the block.

Only the standard library and python3-yaml (as deploy_lib.py).

Usage: doc_examples_test.py --tsserver BIN --tsctl BIN --tsmodel BIN [--tsworker BIN]
       [--venv NAME=DIR]... [--only FILE.md]... [--keep] [--verbose]
(--keep leaves the work dirs for a look, --verbose prints every block's output)"""

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

import yaml

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
from deploy_lib import stop, wait_for  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEFAULT_CONFIG = os.path.join(ROOT, "config", "default.yaml")
RUN_LANGUAGES = {"sh", "bash", "python"}
ARGS_VENVS = {}  # --venv NAME=DIR
BLOCK_TIMEOUT_S = 150
FENCE_RE = re.compile(r"^(\s*)```(\S*)\s*$")
MARKER_RE = re.compile(r"^\s*<!--\s*doc-test:\s*(\w+)\s*(.*?)\s*-->\s*$")
EXPECT_RE = re.compile(r"#\s*=>\s?(.*)$")
REPLACE_RE = re.compile(r"^`([^`]+)`\s+`([^`]*)`\s*(.*)$")
# Documented default addresses -> the keys of the server's ready file.
DOCUMENTED_ADDRESSES = {"127.0.0.1:50051": "grpc", "127.0.0.1:8080": "http",
                        "127.0.0.1:9464": "metrics"}
BINARIES = {"build/client/tsctl": "tsctl", "build/model/tsmodel": "tsmodel",
            "build/server/tsserver": "tsserver", "build/server/tsworker": "tsworker"}


def cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# (OLD, NEW, why, applies(cpu flags)): substitutions the runner makes in every block, printed
# with the block whenever one applies. The README's calibration example measures bf16 too, which
# a CPU without AVX512-BF16 or AMX refuses (exit 1, by design: README "Build options", docs/
# MODEL.md); there it runs fp32 only.
CPU_SUBSTITUTIONS = [
    ("--precision fp32,bf16", "--precision fp32",
     "this CPU has neither AVX512-BF16 nor AMX, which bf16 needs",
     lambda flags: not ({"avx512_bf16", "amx_bf16"} & flags)),
]


# --- fixtures named by `<!-- doc-test: setup NAME -->` ------------------------------------------

def setup_reference_state_dict(work):
    """state_dict.pt: a two-class reference state dict written by PyTorch (the conv-embedding
    fixture of tests/fixtures/make_reference_fixture.py); review1.txt, review2.txt."""
    shutil.copy(os.path.join(ROOT, "tests", "fixtures", "reference_tiny_conv.pt"),
                os.path.join(work, "state_dict.pt"))
    with open(os.path.join(work, "review1.txt"), "w") as f:
        f.write("A warm, funny film; the cast is superb and the ending earns its tears.\n")
    with open(os.path.join(work, "review2.txt"), "w") as f:
        f.write("Two hours I will not get back. Flat jokes, no plot.\n")


FILETYPE_SNIPPETS = {
    "c-header": ["#include <stddef.h>\nint f{}(void);\n", "#define MAX_{0} 4\nstruct s{0} {{ int x; }};\n"],
    "python": ["import os\n\ndef f{}():\n    return os.sep\n", "class C{}:\n    pass\n"],
    "shell": ["#!/bin/sh\nset -e\necho {}\n", "for f in *.{}; do rm \"$f\"; done\n"],
}


def setup_filetype_data(work):
    """data/train.jsonl (96 records) and data/val.jsonl (24): {"text", "label"} JSON Lines of
    short C-header, Python and shell snippets, the data the filetype specs of docs/JOBS.md and
    docs/DISTRIBUTED.md read."""
    data = os.path.join(work, "data")
    os.makedirs(data, exist_ok=True)
    for name, count in (("train.jsonl", 96), ("val.jsonl", 24)):
        with open(os.path.join(data, name), "w") as f:
            for i in range(count):
                label = sorted(FILETYPE_SNIPPETS)[i % 3]
                template = FILETYPE_SNIPPETS[label][(i // 3) % 2]
                f.write(json.dumps({"text": template.format(i), "label": label}) + "\n")


SETUPS = {"reference-state-dict": setup_reference_state_dict,
          "filetype-data": setup_filetype_data}


# --- extraction ---------------------------------------------------------------------------------

class Block:
    def __init__(self, doc, line, language, text, markers):
        self.doc, self.line, self.language, self.text = doc, line, language, text
        self.markers = markers  # [(kind, argument)] in Markdown order

    @property
    def where(self):
        return f"{self.doc}:{self.line}"

    def marker(self, kind):
        return [argument for k, argument in self.markers if k == kind]

    def is_example(self):
        """A block the runner must run or see skipped."""
        if self.language in RUN_LANGUAGES or self.language == "console":
            return True
        first = self.text.lstrip("\n").split("\n", 1)[0]
        return self.language == "" and first.startswith("$ ")


def extract(doc_path):
    """Every fenced block of a Markdown file with the doc-test markers right before it."""
    relative = os.path.relpath(doc_path, ROOT)
    with open(doc_path) as f:
        lines = f.read().split("\n")
    blocks, markers, i = [], [], 0
    while i < len(lines):
        fence = FENCE_RE.match(lines[i])
        marker = MARKER_RE.match(lines[i])
        if marker:
            markers.append((marker.group(1), marker.group(2)))
        elif fence:
            end = i + 1
            while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
                end += 1
            indent = len(fence.group(1))
            text = "\n".join(l[indent:] for l in lines[i + 1:end]) + "\n"
            blocks.append(Block(relative, i + 1, fence.group(2), text, markers))
            markers, i = [], end
        elif lines[i].strip():
            if markers:
                raise ValueError(f"{relative}:{i + 1}: doc-test marker not right before a block")
        i += 1
    for block in blocks:
        for kind, argument in block.markers:
            if kind not in ("skip", "setup", "write", "replace", "venv"):
                raise ValueError(f"{block.where}: unknown doc-test marker {kind!r}")
            if kind == "skip" and not argument:
                raise ValueError(f"{block.where}: a skip marker needs a reason")
            if kind == "setup" and argument not in SETUPS:
                raise ValueError(f"{block.where}: unknown setup {argument!r}, not in {sorted(SETUPS)}")
            if kind == "replace" and not REPLACE_RE.match(argument):
                raise ValueError(f"{block.where}: replace needs `OLD` `NEW` and a reason")
    return blocks


def expectations(text):
    return [m.group(1).strip() for line in text.split("\n") for m in [EXPECT_RE.search(line)]
            if m and m.group(1).strip()]


def missing_output(expected, output):
    """The first expected TEXT not found in order in output, or None."""
    at = 0
    for text in expected:
        pattern = ".*?".join(re.escape(part) for part in text.split("..."))
        match = re.compile(pattern).search(output, at)
        if not match:
            return text
        at = match.end()
    return None


# --- the server ---------------------------------------------------------------------------------

class Server:
    """tsserver on config/default.yaml with free loopback ports, state and data under `work`."""

    def __init__(self, args, work):
        with open(DEFAULT_CONFIG) as f:
            config = yaml.safe_load(f)
        config_dir = os.path.dirname(DEFAULT_CONFIG)
        config["listen"] = config["metrics_listen"] = config["http"]["listen"] = "127.0.0.1:0"
        config["state_dir"] = os.path.join(work, "state")
        config["data_root"] = os.path.join(work, "data")
        config["jobs"]["worker_binary"] = args.tsworker
        for model in config["models"]:
            model["checkpoint"] = os.path.normpath(os.path.join(config_dir, model["checkpoint"]))
        os.makedirs(config["data_root"], exist_ok=True)
        self.scratch = tempfile.mkdtemp(prefix="server-", dir=os.path.dirname(work))
        config_path = os.path.join(self.scratch, "tsserver.yaml")
        with open(config_path, "w") as f:
            yaml.safe_dump(config, f)
        ready_file = os.path.join(self.scratch, "ready")
        self.log_path = os.path.join(self.scratch, "tsserver.log")
        with open(self.log_path, "w") as log:
            self.process = subprocess.Popen(
                [args.tsserver, "--config", config_path, "--ready-file", ready_file],
                stdout=log, stderr=subprocess.STDOUT)

        def ready():
            if self.process.poll() is not None:
                raise AssertionError(f"tsserver exited with {self.process.returncode}:\n"
                                     f"{self.log_tail()}")
            if not os.path.exists(ready_file):
                return None
            with open(ready_file) as f:
                fields = dict(l.split("=", 1) for l in f.read().split() if "=" in l)
            return fields if {"grpc", "http", "metrics"} <= fields.keys() else None

        self.addresses = wait_for(ready, 90, "tsserver's ready file")

    def log_tail(self, chars=3000):
        with open(self.log_path, errors="replace") as f:
            return f.read()[-chars:]

    def stop(self):
        stop(self.process)


# --- running ------------------------------------------------------------------------------------

def replaced(block):
    """(the block's text with its replace markers applied, [a note per replacement])."""
    text, notes = block.text, []
    for argument in block.marker("replace"):
        old, new, why = REPLACE_RE.match(argument).groups()
        if old not in text:
            raise AssertionError(f"replace marker: `{old}` is not in the block")
        text = text.replace(old, new)
        notes.append(f"`{old}` -> `{new}` {why}")
    return text, notes


def prepare(block, args, server):
    """(the block's text as it runs, [substitutions made, for the log])."""
    text, notes = replaced(block)
    flags = cpu_flags()
    for old, new, why, applies in CPU_SUBSTITUTIONS:
        if old in text and applies(flags):
            text = text.replace(old, new)
            notes.append(f"`{old}` -> `{new}` ({why})")
    if server is not None:
        for documented, key in DOCUMENTED_ADDRESSES.items():
            if documented in text:
                text = text.replace(documented, server.addresses[key])
                notes.append(f"{documented} -> {server.addresses[key]}")
    for path, name in BINARIES.items():
        if re.search(rf"(?<![\w/.-]){re.escape(path)}\b", text):
            text = re.sub(rf"(?<![\w/.-]){re.escape(path)}\b", getattr(args, name), text)
            notes.append(f"{path} -> {getattr(args, name)}")
    if server is not None and args.tsctl in text:
        # tsctl's default --server is 127.0.0.1:50051; give commands without one the server's.
        command = re.compile(rf"({re.escape(args.tsctl)}(?:\s+jobs)?\s+[a-z]+)(?=\s|$)")
        lines = []
        for line in text.split("\n"):
            if "--server" not in line and command.search(line):
                line = command.sub(rf"\1 --server {server.addresses['grpc']}", line)
                if f"tsctl: --server {server.addresses['grpc']}" not in notes:
                    notes.append(f"tsctl: --server {server.addresses['grpc']}")
            lines.append(line)
        text = "\n".join(lines)
    leftover = re.search(r"(?<![\w/.-])build/\S*", text)
    if leftover:
        raise AssertionError(f"{leftover.group(0)}: no binary given for this build path")
    return text, notes


def run_block(block, text, work):
    """(ok, seconds, log text)."""
    trace = os.path.join(work, ".doc-test-trace")
    if block.language == "python":
        venvs = [argument for kind, argument in block.markers if kind == "venv"]
        python = "/usr/bin/python3"
        if venvs:
            if venvs[0] not in ARGS_VENVS:
                return False, 0.0, f"no --venv {venvs[0]}=DIR given for this block"
            python = os.path.join(ARGS_VENVS[venvs[0]], "bin", "python")
        command = [python, "-c", text]
    else:
        command = ["bash", "-c",
                   f"exec 9>{shlex.quote(trace)}; BASH_XTRACEFD=9; PS4='+ '; "
                   f"set -e -o pipefail -x\n{text}"]
    start = time.monotonic()
    process = subprocess.Popen(command, cwd=work, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                               start_new_session=True)
    try:
        output, _ = process.communicate(timeout=BLOCK_TIMEOUT_S)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)  # the block's own process group
        output, _ = process.communicate()
        timed_out = True
    seconds = time.monotonic() - start
    output = output.decode(errors="replace")
    log = f"--- output ---\n{output[-4000:]}"
    if timed_out:
        return False, seconds, f"timed out after {BLOCK_TIMEOUT_S} s\n{log}"
    if process.returncode != 0:
        last = ""
        if os.path.exists(trace):
            with open(trace, errors="replace") as f:
                last = "".join(f.readlines()[-3:])
        return False, seconds, f"exit status {process.returncode}; last commands:\n{last}{log}"
    missing = missing_output(expectations(block.text), output)
    if missing is not None:
        return False, seconds, f"expected output not found (in order): {missing!r}\n{log}"
    return True, seconds, output


def make_work_dir(base, doc):
    work = os.path.join(base, re.sub(r"\W", "_", doc))
    os.makedirs(work)
    for name in os.listdir(ROOT):
        if name.startswith((".", "build")) or name in ("data", "state"):
            continue
        os.symlink(os.path.join(ROOT, name), os.path.join(work, name))
    return work


def run_doc(doc, blocks, args, base, results):
    examples = [b for b in blocks if b.is_example()]
    runnable = [b for b in examples if not b.marker("skip")]
    for block in examples:
        if block.marker("skip"):
            results.append((block, "skipped", 0.0, block.marker("skip")[0]))
    if not runnable:
        return
    for block in runnable:
        if block.language not in RUN_LANGUAGES:
            results.append((block, "failed", 0.0,
                            f"a {block.language or '$-prompt'} block is not run: mark it skip"))
    runnable = [b for b in runnable if b.language in RUN_LANGUAGES]
    if not runnable:
        return
    work = make_work_dir(base, doc)
    for block in blocks:
        for path in block.marker("write"):
            try:
                text, notes = replaced(block)
            except AssertionError as error:
                results.append((block, "failed", 0.0, str(error)))
                continue
            with open(os.path.join(work, path), "w") as f:
                f.write(text)
            print(f"{block.where}: written to {path}" + "".join(f"; {n}" for n in notes))
    server = Server(args, work)
    print(f"== {doc}: tsserver grpc={server.addresses['grpc']} http={server.addresses['http']} "
          f"metrics={server.addresses['metrics']}, work dir {work}", flush=True)
    try:
        for block in runnable:
            for name in block.marker("setup"):
                SETUPS[name](work)
            try:
                text, notes = prepare(block, args, server)
            except AssertionError as error:
                results.append((block, "failed", 0.0, str(error)))
                print(f"FAIL {block.where}: {error}", flush=True)
                continue
            ok, seconds, log = run_block(block, text, work)
            setups = "".join(f"\n    setup: {name}" for name in block.marker("setup"))
            substituted = "".join(f"\n    {note}" for note in notes)
            print(f"{'ok  ' if ok else 'FAIL'} {block.where} [{block.language}] {seconds:.1f} s"
                  f"{setups}{substituted}", flush=True)
            if ok and args.verbose:
                print(log, flush=True)
            if not ok:
                print(f"--- block as run ---\n{text}{log}\n--- tsserver log (tail) ---\n"
                      f"{server.log_tail(1500)}", flush=True)
            results.append((block, "run" if ok else "failed", seconds, "" if ok else log))
    finally:
        server.stop()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tsserver", required=True)
    parser.add_argument("--tsctl", required=True)
    parser.add_argument("--tsmodel", required=True)
    parser.add_argument("--tsworker",
                        help="default: tsworker next to tsserver")
    parser.add_argument("--only", action="append", default=[],
                        help="run only this Markdown file (relative to the repository)")
    parser.add_argument("--venv", action="append", default=[], metavar="NAME=DIR",
                        help="a project venv for python blocks marked `doc-test: venv NAME`")
    parser.add_argument("--keep", action="store_true", help="keep the work directories")
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="print the output of every block, not only of those that fail")
    args = parser.parse_args()
    for name in ("tsserver", "tsctl", "tsmodel", "tsworker"):
        if name == "tsworker" and args.tsworker is None:
            args.tsworker = os.path.join(os.path.dirname(args.tsserver), "tsworker")
        setattr(args, name, os.path.abspath(getattr(args, name)))
        if not os.access(getattr(args, name), os.X_OK):
            parser.error(f"--{name} {getattr(args, name)}: not an executable")
    for venv in args.venv:
        name, sep, directory = venv.partition("=")
        if not sep or not name:
            parser.error(f"--venv {venv}: expected NAME=DIR")
        ARGS_VENVS[name] = os.path.abspath(directory)

    docs = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
    if args.only:
        docs = [os.path.join(ROOT, d) for d in args.only]
    start = time.monotonic()
    results = []
    base = tempfile.mkdtemp(prefix="ts-doc-examples-")
    try:
        for doc in docs:
            try:
                blocks = extract(doc)
            except ValueError as error:  # a malformed marker
                print(f"error: {error}")
                return 1
            run_doc(os.path.relpath(doc, ROOT), blocks, args, base, results)
    finally:
        if args.keep:
            print(f"work dirs kept in {base}")
        else:
            shutil.rmtree(base, ignore_errors=True)

    ran = [r for r in results if r[1] == "run"]
    skipped = [r for r in results if r[1] == "skipped"]
    failed = [r for r in results if r[1] == "failed"]
    print(f"\n== summary: {len(ran)} blocks run, {len(skipped)} skipped, {len(failed)} failed, "
          f"{time.monotonic() - start:.0f} s")
    for block, _, seconds, _ in ran:
        print(f"  run     {block.where} ({seconds:.1f} s)")
    for block, _, _, reason in skipped:
        print(f"  skipped {block.where}: {reason}")
    for block, _, _, reason in failed:
        print(f"  FAILED  {block.where}: {reason.splitlines()[0] if reason else ''}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

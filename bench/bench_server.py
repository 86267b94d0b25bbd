"""Helpers the serving benchmarks share: an untrained checkpoint of the demo model's size and a
tsserver on loopback that is stopped (SIGTERM, by its PID) when the block ends."""
import contextlib
import os
import signal
import subprocess
import time


def init_checkpoint(build, work):
    """The demo model's size (C 64, depth 2, 4 heads, MLP 128) with room for 4000-byte documents;
    untrained, since speed does not depend on the weights."""
    checkpoint = os.path.join(work, "bench.tsckpt")
    subprocess.run([os.path.join(build, "model", "tsmodel"), "init", "--out", checkpoint,
                    "--labels", "neg,pos", "--embed-dim", "64", "--depth", "2", "--heads", "4",
                    "--mlp-ratio", "2", "--max-length", "4096", "--seed", "1"],
                   check=True, capture_output=True)
    return checkpoint


@contextlib.contextmanager
def serve(build, work, config_text):
    """Starts tsserver on `config_text` (written under `work`) and yields its gRPC address."""
    config = os.path.join(work, "bench.yaml")
    with open(config, "w") as f:
        f.write(config_text)
    ready = os.path.join(work, "ready")
    with open(os.path.join(work, "server.log"), "w") as log:
        server = subprocess.Popen([os.path.join(build, "server", "tsserver"), "--config", config,
                                   "--ready-file", ready], stderr=log)
    try:
        for _ in range(600):
            if os.path.exists(ready) or server.poll() is not None:
                break
            time.sleep(0.1)
        with open(ready) as f:
            yield f.read().split("grpc=")[1].split()[0]
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=120)


def tsworker_children(parent):
    """[(pid, stat, argv)] of the tsworker processes whose parent is `parent`: `stat` is
    /proc/PID/stat's fields after the command name (state first), `argv` the command line."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{entry}/cmdline") as f:
                argv = f.read().split("\0")
        except OSError:
            continue
        if int(fields[1]) == parent and argv and argv[0].endswith("tsworker"):
            found.append((int(entry), fields, argv))
    return found

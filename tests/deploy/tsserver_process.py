"""One real tsserver for a deployment test, with the standard library only (so the tests that run
in a project venv of PyPI clients, which has no python3-yaml, share it with those that run under
Debian's python3): waiting for its --ready-file, its log's tail, and stopping it by its PID.
deploy_lib.py re-exports wait_for, ready_fields and stop."""

import json
import os
import signal
import subprocess
import tempfile
import time


def wait_for(predicate, timeout_s, what, interval_s=0.1):
    """predicate()'s first truthy result, polled until timeout_s; AssertionError naming `what`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = predicate()
        if result:
            return result
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def ready_fields(process, ready_file, needed, log_tail, timeout_s=90):
    """The key=value fields of tsserver's --ready-file once it holds every key in `needed`;
    AssertionError with log_tail() if the process exits first or the time runs out."""
    def ready():
        if process.poll() is not None:
            raise AssertionError(f"tsserver exited with {process.returncode}: " + log_tail())
        if not os.path.exists(ready_file):
            return None
        with open(ready_file) as f:
            fields = dict(l.split("=", 1) for l in f.read().split() if "=" in l)
        return fields if all(key in fields for key in needed) else None

    return wait_for(ready, timeout_s, "tsserver's ready file with " + ", ".join(needed))


def stop(process, timeout_s=20):
    """SIGTERM, then SIGKILL after timeout_s; only the process this test started."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


class TsServer:
    """tsserver on `config` (a dict; state_dir and data_root default to the temp dir) in a temp
    dir, ready once its ready file names every address in `needed` (self.addresses);
    close() stops it by its PID and removes the temp dir."""

    def __init__(self, tsserver, config, needed=("grpc",), prefix="ts-deploy-test-"):
        self.tmp = tempfile.TemporaryDirectory(prefix=prefix)
        d = self.tmp.name
        config = {"state_dir": os.path.join(d, "state"), "data_root": os.path.join(d, "data"),
                  **config}
        path = os.path.join(d, "tsserver.yaml")
        with open(path, "w") as f:
            json.dump(config, f)  # JSON is YAML
        ready_file = os.path.join(d, "ready")
        self.log = open(os.path.join(d, "tsserver.log"), "w")
        self.process = subprocess.Popen([tsserver, "--config", path, "--ready-file", ready_file],
                                        stdout=self.log, stderr=subprocess.STDOUT)
        try:
            self.addresses = ready_fields(self.process, ready_file, needed, self.log_tail)
        except BaseException:
            self.close()
            raise

    def log_tail(self, chars=3000):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return "\n--- tsserver log (tail) ---\n" + f.read()[-chars:]

    def close(self):
        stop(self.process)
        self.log.close()
        self.tmp.cleanup()

"""Shared helpers of the deployment tests (tests/deploy/*_test.py): where the shipped files
are, how to read dashboards and alert rules, and which metric names exist."""

import glob
import json
import os
import re

import yaml

from tsserver_process import ready_fields, stop, wait_for  # noqa: F401 (re-exported)

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DEPLOY = os.path.join(ROOT, "deploy")
PROMETHEUS_DIR = os.path.join(DEPLOY, "prometheus")
PROMETHEUS_CONFIG = os.path.join(PROMETHEUS_DIR, "prometheus.yml")
DASHBOARD_DIR = os.path.join(DEPLOY, "grafana", "dashboards")
PROMTOOL = "/usr/bin/promtool"
PROMETHEUS = "/usr/bin/prometheus"

# Exported by tsserver only when a model runs on CUDA (README, "Metrics").
DEVICE_METRICS = {
    "taylorshift_device_memory_allocated_bytes",
    "taylorshift_device_memory_reserved_bytes",
}

# Exported only while something happens: a job's worker runs (its series go when it ends), an
# HTTP client has been answered (metrics_test and http_frontend_test check their values).
TRANSIENT_METRICS = {
    "taylorshift_job_worker_resident_memory_bytes",
    "taylorshift_job_worker_cpu_seconds",
    "taylorshift_http_responses_total",
}

_METRIC_RE = re.compile(r"\btaylorshift_[a-z0-9_]+")
# A taylorshift_* vector selector with its label matchers, if any.
_SELECTOR_RE = re.compile(r"\btaylorshift_[a-z0-9_]+(?:\{[^}]*\})?")


def rule_files():
    """Absolute paths of the rule files prometheus.yml loads."""
    with open(PROMETHEUS_CONFIG) as f:
        config = yaml.safe_load(f)
    out = []
    for pattern in config.get("rule_files", []):
        out.extend(sorted(glob.glob(os.path.join(PROMETHEUS_DIR, pattern))))
    return out


def alert_rules():
    """[(group name, rule dict)] of every rule in every loaded rule file."""
    out = []
    for path in rule_files():
        with open(path) as f:
            for group in yaml.safe_load(f)["groups"]:
                for rule in group["rules"]:
                    out.append((group["name"], rule))
    return out


def dashboards():
    """{file name: dashboard dict} of every shipped dashboard."""
    out = {}
    for path in sorted(glob.glob(os.path.join(DASHBOARD_DIR, "*.json"))):
        with open(path) as f:
            out[os.path.basename(path)] = json.load(f)
    return out


def panels(dashboard):
    """Every non-row panel, including panels nested in collapsed rows."""
    out = []
    for panel in dashboard.get("panels", []):
        if panel.get("type") == "row":
            out.extend(panel.get("panels", []))
        else:
            out.append(panel)
    return out


def metric_names(expr):
    """taylorshift_* metric names in a PromQL expression, histogram suffixes removed."""
    names = set()
    for name in _METRIC_RE.findall(expr):
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in HISTOGRAMS:
                name = name[: -len(suffix)]
                break
        names.add(name)
    return names


def selectors(expr):
    """The taylorshift_* vector selectors of a PromQL expression, with their label matchers and
    without range or offset: `rate(m{a="b"}[5m])` gives `m{a="b"}`."""
    return sorted(set(_SELECTOR_RE.findall(expr)))


HISTOGRAMS = {
    "taylorshift_request_duration_seconds",
    "taylorshift_queue_duration_seconds",
    "taylorshift_compute_duration_seconds",
    "taylorshift_batch_size",
    "taylorshift_batch_tokens",
    "taylorshift_padding_ratio",
    "taylorshift_sequence_length",
}


def variables(dashboard):
    return dashboard.get("templating", {}).get("list", [])


def variable_query(variable):
    query = variable.get("query", "")
    if isinstance(query, dict):
        query = query.get("query", "")
    return query


def substitute(expr, values, rate_interval="1m"):
    """Replaces Grafana's built-in interval variables and the dashboard's template variables
    (`$name`, `${name}`, `[[name]]`) by concrete values."""
    builtins = {
        "__rate_interval": rate_interval,
        "__interval": "15s",
        "__range": "5m",
        "__interval_ms": "15000",
        "__range_s": "300",
    }
    merged = dict(values)
    merged.update(builtins)

    def repl(match):
        name = match.group(1) or match.group(2) or match.group(3)
        if name not in merged:
            raise KeyError(f"undefined variable ${name} in: {expr}")
        return merged[name]

    return re.sub(r"\$\{(\w+)(?::\w+)?\}|\[\[(\w+)\]\]|\$(\w+)", repl, expr)


def listops_expression(rng, budget):
    """A ListOps-like expression of roughly `budget` characters (a digit when budget is tiny)."""
    if budget < 12:
        return str(rng.randint(0, 9))
    op = rng.choice(["MAX", "MIN", "MED", "SM"])
    arity = rng.randint(2, 5)
    parts = [listops_expression(rng, (budget - len(op) - 4) // arity - 1) for _ in range(arity)]
    return f"[{op} " + " ".join(parts) + " ]"

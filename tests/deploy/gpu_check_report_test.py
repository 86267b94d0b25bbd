#!/usr/bin/python3
"""bench/gpu_check_report.py on made-up benchmark output: issue 27's targets computed from the
attention and encoder benchmarks (ratios to SDPA, the share of the GEMM rate, the crossover
interpolated between measured lengths), the training table with its out-of-memory row, and the
8-file limit of $OUT kept (train.json is read from the work folder). No GPU needed."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench")
sys.path.insert(0, BENCH)
import gpu_check_report  # noqa: E402


def bench_json(rows):
    """Google Benchmark JSON from (name, ms, counters) rows; ms None = an error."""
    out = []
    for name, ms, counters in rows:
        if ms is None:
            out.append({"name": name, "error_occurred": True, "error_message": counters})
        else:
            out.append(dict({"name": name, "real_time": ms, "time_unit": "ms"}, **counters))
    return {"benchmarks": out}


def attention_rows():
    rows = [("BM_Gemm_bf16/n:8192", 2.0, {"FLOP/s": 5.0e14})]
    # direct faster at 1024, efficient faster from 2048: the crossover lies between.
    times = {1024: (0.10, 0.20, 0.15), 2048: (0.40, 0.30, 0.45), 4096: (1.6, 0.5, 1.8),
             16384: (25.0, 2.0, 24.0)}
    for n, (direct, efficient, flash) in times.items():
        rows += [(f"BM_Attention_direct_cuda/N:{n}/d:32/H:8/bf16", direct, {}),
                 (f"BM_Attention_efficient_cuda/N:{n}/d:32/H:8/bf16", efficient,
                  {"paper_FLOP/s": 3.0e14 if n == 16384 else 1.0e14}),
                 (f"BM_Attention_softmax_flash/N:{n}/d:32/H:8/bf16", flash, {}),
                 (f"BM_Attention_softmax_cudnn/N:{n}/d:32/H:8/bf16", flash * 0.9, {}),
                 # another head dim must not mix in
                 (f"BM_Attention_efficient_cuda/N:{n}/d:64/H:8/bf16", 1e-3, {})]
    return rows


class ReportTest(unittest.TestCase):
    def test_crossover_interpolates_on_log_n(self):
        self.assertEqual(gpu_check_report.crossover({1024: 1.0, 4096: 3.0},
                                                    {1024: 2.0, 4096: 2.0}), 2048)
        self.assertEqual(gpu_check_report.crossover({1024: 3.0}, {1024: 1.0}), "<= 1024")
        self.assertIsNone(gpu_check_report.crossover({1024: 1.0, 2048: 2.0},
                                                      {1024: 3.0, 2048: 4.0}))

    def test_targets_and_training_in_summary_and_json(self):
        with tempfile.TemporaryDirectory() as out, tempfile.TemporaryDirectory() as work:
            with open(os.path.join(out, "bench-attention-b1.json"), "w") as f:
                json.dump(bench_json(attention_rows()), f)
            with open(os.path.join(out, "bench-encoder.json"), "w") as f:
                json.dump(bench_json([
                    ("BM_Encoder_softmax_flash/N:16384/B:1/bf16", 60.0, {}),
                    ("BM_Encoder_efficient_cuda/N:16384/B:1/bf16", 10.0, {}),
                    ("BM_Encoder_efficient_aten/N:16384/B:1/bf16", 30.0, {})]), f)
            with open(os.path.join(work, "train.json"), "w") as f:
                json.dump(bench_json([
                    ("BM_TrainStep_softmax/L:1024/C:256/H:8/depth:2/batch:8", 20.0,
                     {"peak_MiB": 300.0, "examples/s": 400.0}),
                    ("BM_TrainStep_efficient/L:1024/C:256/H:8/depth:2/batch:8", 10.0,
                     {"peak_MiB": 200.0, "examples/s": 800.0}),
                    ("BM_TrainStep_direct/L:16384/C:256/H:8/depth:2/batch:8", None,
                     "CUDA out of memory. Tried to allocate 32.00 GiB")]), f)
            with open(os.path.join(work, "train-fused.json"), "w") as f:
                json.dump(bench_json([
                    ("BM_TrainStep_efficient/L:1024/C:256/H:8/depth:2/batch:8/kernel:cuda", 5.0,
                     {"peak_MiB": 100.0, "examples/s": 1600.0})]), f)
            with open(os.path.join(work, "serve.json"), "w") as f:
                json.dump({"cases": [], "jobs": [], "load": {
                    "gpu": {"requests_per_s": 600.0, "latency_ms": {"p99": 40.0}},
                    "cpu2": {"requests_per_s": 10.0, "latency_ms": {"p99": 900.0}},
                    "ratio": 60.0}}, f)
            subprocess.run([sys.executable, os.path.join(BENCH, "gpu_check_report.py"),
                            "--work", work, "--out", out, "--gpu", "test GPU"], check=True)
            with open(os.path.join(out, "gpu-check.json")) as f:
                result = json.load(f)
            with open(os.path.join(out, "summary.txt")) as f:
                summary = f.read()
        met = {t["target"].split(":")[0]: (t["measured"], t["met"]) for t in result["targets"]}
        # best SDPA at 16384 is cuDNN's 21.6 ms: 21.6 / 2.0
        self.assertAlmostEqual(met["efficient forward at N 16384"][0], 10.8)
        self.assertTrue(met["efficient forward at N 16384"][1])
        self.assertAlmostEqual(met["efficient forward at N 4096"][0], 1.8 * 0.9 / 0.5)
        self.assertTrue(met["efficient forward at N 4096"][1])
        self.assertAlmostEqual(met["efficient forward"][0], 0.6)  # 3e14 / 5e14
        # direct / flash: worst of 0.67, 0.89, 0.89, 1.04
        self.assertAlmostEqual(met["direct forward / SDPA flash, worst N <= 1.3"][0], 25 / 24)
        cross, cross_met = met["crossover direct / efficient (fused) <= 2000 tokens"]
        self.assertTrue(1024 < cross < 2048 and cross_met, cross)
        self.assertAlmostEqual(met["paper encoder at N 16384"][0], 6.0)
        self.assertEqual(met["serving source-lang at 4000 bytes"], (60.0, True))
        self.assertEqual(met["serving on the GPU at that load"], (40.0, True))
        self.assertIn("  met     efficient forward at N 16384: best SDPA / fused >= 10x: 10.80",
                      summary)
        self.assertNotIn("NOT met", summary)
        self.assertIn("L   1024: efficient 10.0 ms, 200 MiB (2.00x SDPA)", summary)
        self.assertIn("direct CUDA out of memory", summary)
        self.assertIn("efficient[cuda] 5.0 ms, 100 MiB (4.00x SDPA)", summary)
        self.assertEqual(result["train"]["BM_TrainStep_efficient/L:1024/C:256/H:8/depth:2/batch:8"]
                         ["examples/s"], 800.0)

    def test_missing_figures_are_not_met(self):
        with tempfile.TemporaryDirectory() as out:
            goals = gpu_check_report.targets(out)
        self.assertEqual(len(goals), 8)
        self.assertTrue(all(value is None and not met for _, value, met in goals))


if __name__ == "__main__":
    unittest.main()

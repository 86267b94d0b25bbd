// The whole encoder's forward pass against the sequence length, each attention path beside the
// softmax Transformer of the same size (the softmax path: SDPA, each backend asked for) in the
// same run: random weights, random tokens, inference mode, at the model's precision. Built for
// GPUs (scripts/gpu-check), runs on any device.
//
//   encoder_bench [--device=cuda] [--precision=bf16|fp32] [--embed_dim=512 --depth=4 --heads=16
//                 --mlp_ratio=2] [--batch=1] [--min_tokens=1024] [--max_tokens=16384]
//                 [--paths=direct,efficient,softmax] [--sdpa_backends=auto,flash,efficient,cudnn]
//                 [--threads=N] [benchmark flags, e.g. --benchmark_out=FILE]
// Counters: tokens/s (real tokens, CLS excluded) and the peak device (or CPU tensor) memory of one
// forward pass.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bench/peak_memory.h"
#include "common/command_line.h"
#include "model/kernels/mixed_linear.h"
#include "model/networks/encoder.h"
#include "model/torch_compat.h"

namespace ts::bench {
namespace {

struct Flags {
  std::string device = "cuda";
  std::string precision = "bf16";
  std::int64_t embed_dim = 512, depth = 4, heads = 16;
  double mlp_ratio = 2;
  std::int64_t batch = 1, min_tokens = 1024, max_tokens = 16384;
  std::vector<std::string> paths = {"direct", "efficient", "softmax"};
  std::vector<std::string> sdpa_backends = {"auto"};
  // The Taylor paths once per implementation ("auto", "aten", "cuda": the fused CUDA kernels).
  std::vector<std::string> implementations = {"auto"};
  int threads = 2;
};

void BM_Encoder(benchmark::State& state, TaylorShiftEncoder& model, AttentionPath path,
                std::int64_t batch, std::int64_t n, const std::string& backend,
                KernelImplementation implementation, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  model->set_kernel_implementation(implementation);
  if (path == AttentionPath::kSoftmax && !compat::UseOnlySdpaBackend(backend)) {
    state.SkipWithError(("no SDPA backend " + backend + " in this LibTorch").c_str());
    return;
  }
  torch::manual_seed(0);
  const auto tokens = torch::randint(0, model->options().vocab_size(), {batch, n},
                                     torch::TensorOptions().dtype(torch::kLong).device(device));
  const auto run = [&] {
    auto logits = model->forward(tokens, {}, path);
    compat::Synchronize(device);
    benchmark::DoNotOptimize(logits.data_ptr());
  };
  std::int64_t peak = 0;
  try {
    peak = MeasurePeakBytes(device, run);
  } catch (const std::exception& e) {
    // Out of memory at this length is a result, not a failure of the run.
    compat::UseOnlySdpaBackend("auto");
    state.SkipWithError(std::string(e.what()).substr(0, 200).c_str());
    return;
  }
  for (auto _ : state) run();
  compat::UseOnlySdpaBackend("auto");
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(batch * n),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace
}  // namespace ts::bench

int main(int argc, char** argv) try {
  CLI::App app("encoder_bench: the whole encoder per attention path and SDPA backend",
               "encoder_bench");
  ts::UseFlagConventions(app);
  ts::bench::Flags f;
  app.add_option("--device", f.device, "cpu|cuda[:N]")->capture_default_str();
  app.add_option("--precision", f.precision, "fp32|bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16"}));
  for (auto [name, value] : {std::pair{"--embed_dim", &f.embed_dim},
                             {"--depth", &f.depth},
                             {"--heads", &f.heads},
                             {"--batch", &f.batch},
                             {"--min_tokens", &f.min_tokens},
                             {"--max_tokens", &f.max_tokens}}) {
    app.add_option(name, *value)->capture_default_str()->check(ts::IntegerIn(1, INT32_MAX));
  }
  app.add_option("--mlp_ratio", f.mlp_ratio)->capture_default_str();
  app.add_option("--paths", f.paths, "attention paths")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"direct", "efficient", "softmax"}));
  app.add_option("--sdpa_backends", f.sdpa_backends, "softmax path: SDPA backends, one run each")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "flash", "efficient", "cudnn", "math"}));
  app.add_option("--implementations", f.implementations,
                 "Taylor paths' implementations: auto (the dispatcher's), aten, cuda (fused)")
      ->delimiter(',')
      ->check(CLI::IsMember({"auto", "aten", "cuda"}))
      ->capture_default_str();
  app.add_option("--threads", f.threads, "intra-op threads (CPU)")
      ->capture_default_str()
      ->check(ts::IntegerIn(1, INT32_MAX));
  if (std::optional<int> exit = ts::ParseCommandLineKeepingExtras(app, &argc, argv)) return *exit;
  ts::compat::SetThreads(f.threads);
  ts::compat::SetCudaTf32(false);
  const torch::Device device(f.device);
  const auto precision = *ts::ParsePrecision(f.precision);
  if (auto supported = ts::CheckPrecisionSupported(precision, device); !supported.ok()) {
    std::cerr << "encoder_bench: " << supported.message() << "\n";
    return 2;
  }
  ts::TaylorShiftEncoderOptions options(f.embed_dim, f.depth, f.heads, f.max_tokens, 10);
  options.mlp_hidden(static_cast<std::int64_t>(std::llround(f.embed_dim * f.mlp_ratio)));
  ts::TaylorShiftEncoder model(options);
  model->to(device);
  model->eval();
  model->set_precision(precision);
  benchmark::AddCustomContext("device", f.device);
  benchmark::AddCustomContext("precision", f.precision);
  benchmark::AddCustomContext("torch_version", ts::compat::TorchVersion());
  benchmark::AddCustomContext("model", "C " + std::to_string(f.embed_dim) + ", depth " +
                                           std::to_string(f.depth) + ", H " +
                                           std::to_string(f.heads));
  for (const std::string& name : f.paths) {
    const ts::AttentionPath path = *ts::ParseAttentionPath(name);
    // Softmax: one run per SDPA backend; direct and efficient: one per implementation.
    const bool softmax = path == ts::AttentionPath::kSoftmax;
    const std::vector<std::string> variants = softmax ? f.sdpa_backends : f.implementations;
    for (const std::string& variant : variants) {
      const std::string backend = softmax ? variant : "auto";
      const ts::KernelImplementation implementation =
          softmax ? ts::KernelImplementation::kAuto : *ts::ParseKernelImplementation(variant);
      for (std::int64_t n = f.min_tokens; n <= f.max_tokens; n *= 2) {
        std::string title = "BM_Encoder_" + name;
        if (variant != "auto") title += "_" + variant;
        title += "/N:" + std::to_string(n) + "/B:" + std::to_string(f.batch) + "/" + f.precision;
        benchmark::RegisterBenchmark(
            title.c_str(),
            [&model, path, n, backend, implementation, &f, device](benchmark::State& s) {
              ts::bench::BM_Encoder(s, model, path, f.batch, n, backend, implementation, device);
            })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.2);
      }
    }
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
} catch (const std::exception& e) {
  std::cerr << "encoder_bench: " << e.what() << "\n";
  return 1;
}

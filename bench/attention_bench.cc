// Attention benchmarks: every path at B = 1, fp32, H = 8, d ∈ {16, 32, 64}, N = 256…16384, with
// the paper's FLOP count as a rate, the peak memory of one call, and the sgemm rate of this
// machine measured in the same run (so ratios are comparable on a noisy shared machine).
//
//   attention_bench [--threads=N] [--device=cpu|cuda] [--max_reference_tokens=N]
//                   [--max_tokens=N] [--efficient_chunk_tokens=N] [--direct_block_elements=N]
//                   [--direct_tiles=true|false]
//                   [benchmark flags, e.g. --benchmark_out=FILE --benchmark_out_format=json]
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "bench/peak_memory.h"
#include "common/command_line.h"
#include "model/cost_model.h"
#include "model/heap_policy.h"
#include "model/taylor_attention.h"
#include "model/torch_compat.h"

namespace ts::bench {
namespace {

struct Flags {
  int threads = 2;
  std::string device = "cpu";
  std::int64_t max_tokens = 16384;
  std::int64_t max_reference_tokens = 4096;
  TaylorKernelOptions kernel;
};

double PaperFlops(AttentionPath path, double n, double d, double heads) {
  const bool efficient =
      path == AttentionPath::kEfficient || path == AttentionPath::kEfficientReference;
  return heads * (efficient ? EfficientOps(n, d) : DirectOps(n, d));
}

void BM_Attention(benchmark::State& state, AttentionPath path, std::int64_t n, std::int64_t d,
                  std::int64_t heads, const torch::Device& device,
                  const TaylorKernelOptions& kernel) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  const auto options = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  auto q = torch::randn({1, heads, n, d}, options);
  auto k = torch::randn({1, heads, n, d}, options);
  const auto v = torch::randn({1, heads, n, d}, options);
  if (path != AttentionPath::kSoftmax) std::tie(q, k) = NormalizeQueryKey(q, k, {});
  const auto run = [&] {
    auto y = RunAttentionPath(path, q, k, v, {}, kernel);
    compat::Synchronize(device);
    benchmark::DoNotOptimize(y.data_ptr());
  };
  const std::int64_t peak = MeasurePeakBytes(device, run);
  for (auto _ : state) run();
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["paper_FLOP/s"] = benchmark::Counter(
      PaperFlops(path, static_cast<double>(n), static_cast<double>(d), static_cast<double>(heads)),
      benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Sgemm(benchmark::State& state, std::int64_t n, const torch::Device& device) {
  torch::NoGradGuard no_grad;
  const auto options = torch::TensorOptions().device(device).dtype(torch::kFloat32);
  const auto a = torch::randn({n, n}, options);
  const auto b = torch::randn({n, n}, options);
  auto c = torch::empty({n, n}, options);
  for (auto _ : state) {
    at::mm_out(c, a, b);
    compat::Synchronize(device);
    benchmark::DoNotOptimize(c.data_ptr());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * n * n * n, benchmark::Counter::kIsIterationInvariantRate);
}

void AddFlags(CLI::App& app, Flags* flags) {
  UseFlagConventions(app);
  app.footer(
      "Other flags go to Google Benchmark (--benchmark_filter=REGEX, --benchmark_out=FILE).");
  app.add_option("--threads", flags->threads, "intra-op threads")
      ->capture_default_str()
      ->check(IntegerIn(1, INT32_MAX));
  app.add_option("--device", flags->device, "cpu|cuda[:N]")->capture_default_str();
  app.add_option("--max_tokens", flags->max_tokens, "longest N")
      ->capture_default_str()
      ->check(IntegerIn(0, INT64_MAX));
  app.add_option("--max_reference_tokens", flags->max_reference_tokens,
                 "longest N of the reference paths")
      ->capture_default_str()
      ->check(IntegerIn(0, INT64_MAX));
  app.add_option("--efficient_chunk_tokens", flags->kernel.efficient_chunk_tokens,
                 "efficient path: tokens per feature chunk")
      ->capture_default_str()
      ->check(IntegerIn(1, INT64_MAX));
  app.add_option("--direct_tiles", flags->kernel.direct_tiles,
                 "direct path, d <= 16 on AVX-512: register tiles (false: the GEMM form)")
      ->capture_default_str();
  app.add_option("--direct_block_elements", flags->kernel.direct_block_elements,
                 "direct path: score entries at once")
      ->capture_default_str()
      ->check(IntegerIn(1, INT64_MAX));
}

void RegisterAll(const Flags& flags) {
  const torch::Device device(flags.device);
  for (const std::int64_t n : {512, 1024, 2048}) {
    benchmark::RegisterBenchmark(("BM_Sgemm/n:" + std::to_string(n)).c_str(),
                                 [=](benchmark::State& s) { BM_Sgemm(s, n, device); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  const std::vector<AttentionPath> paths = {
      AttentionPath::kSoftmax, AttentionPath::kDirect, AttentionPath::kEfficient,
      AttentionPath::kDirectReference, AttentionPath::kEfficientReference};
  constexpr std::int64_t kHeads = 8;
  for (const std::int64_t d : {16, 32, 64}) {
    for (const auto path : paths) {
      for (std::int64_t n = 256; n <= flags.max_tokens; n *= 2) {
        const bool reference =
            path == AttentionPath::kDirectReference || path == AttentionPath::kEfficientReference;
        if (reference && n > flags.max_reference_tokens) continue;
        const std::string name = "BM_Attention_" + std::string(AttentionPathName(path)) +
                                 "/N:" + std::to_string(n) + "/d:" + std::to_string(d) +
                                 "/H:" + std::to_string(kHeads);
        benchmark::RegisterBenchmark(
            name.c_str(),
            [=](benchmark::State& s) { BM_Attention(s, path, n, d, kHeads, device, flags.kernel); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(0.2);
      }
    }
  }
}

}  // namespace
}  // namespace ts::bench

int main(int argc, char** argv) try {
  CLI::App app("attention_bench: every attention path against N and d, with the sgemm rate",
               "attention_bench");
  ts::bench::Flags flags;
  ts::bench::AddFlags(app, &flags);
  if (std::optional<int> exit = ts::ParseCommandLineKeepingExtras(app, &argc, argv)) return *exit;
  ts::compat::SetThreads(flags.threads);
  benchmark::AddCustomContext("intra_op_threads", std::to_string(flags.threads));
  // The heap policy of tsserver and tsmodel (model/heap_policy.h), so the numbers are theirs.
  if (ts::KeepFreedHeapMemory(ts::kDefaultHeapKeepFreedBytes).ok()) {
    benchmark::AddCustomContext("heap_keep_freed_bytes",
                                std::to_string(ts::kDefaultHeapKeepFreedBytes));
  }
  benchmark::AddCustomContext("device", flags.device);
  benchmark::AddCustomContext("torch_version", ts::compat::TorchVersion());
  ts::bench::RegisterAll(flags);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
} catch (const std::exception& e) {
  // A LibTorch or CLI11 failure outside the measured work: its message, not an abort.
  std::cerr << "attention_bench: " << e.what() << "\n";
  return 1;
}

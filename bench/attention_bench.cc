// Attention benchmarks: every path at B = 1, fp32, H = 8, d ∈ {16, 32, 64}, N = 256…16384 by
// default, with the paper's FLOP count as a rate, the peak memory of one call, and the GEMM rate
// of this machine measured in the same run (so ratios are comparable on a noisy shared machine).
// On a GPU, the softmax path runs once per SDPA backend asked for (--sdpa_backends), beside the
// Taylor paths in the same run.
//
//   attention_bench [--threads=N] [--device=cpu|cuda] [--precision=fp32|bf16] [--batch=B]
//                   [--heads=H] [--head_dims=16,32,64] [--min_tokens=N] [--max_tokens=N]
//                   [--paths=softmax,direct,...] [--sdpa_backends=auto,flash,efficient,cudnn]
//                   [--max_reference_tokens=N] [--efficient_chunk_tokens=N]
//                   [--direct_block_elements=N] [--direct_tiles=true|false]
//                   [--efficient_tiles=true|false]
//                   [--implementations=auto,aten,cuda]
//                   [benchmark flags, e.g. --benchmark_out=FILE --benchmark_out_format=json]
// bf16: the Taylor paths' products in bfloat16 with float32 sums (bf16_products, inputs float32 as
// the model gives them); the softmax path on bfloat16 inputs (what flash attention takes).
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
#include "model/heap_policy.h"
#include "model/kernels/taylor_attention.h"
#include "model/networks/cost_model.h"
#include "model/torch_compat.h"

namespace ts::bench {
namespace {

struct Flags {
  int threads = 2;
  std::string device = "cpu";
  std::string precision = "fp32";
  std::int64_t batch = 1;
  std::int64_t heads = 8;
  std::vector<std::int64_t> head_dims = {16, 32, 64};
  std::int64_t min_tokens = 256;
  std::int64_t max_tokens = 16384;
  std::int64_t max_reference_tokens = 4096;
  std::vector<std::string> paths = {"softmax", "direct", "efficient", "direct_reference",
                                    "efficient_reference"};
  std::vector<std::string> sdpa_backends = {"auto"};
  // The Taylor paths once per implementation asked for ("auto": the dispatcher's choice; "aten":
  // the ATen form; "cuda": the fused CUDA kernels, bf16 only).
  std::vector<std::string> implementations = {"auto"};
  TaylorKernelOptions kernel;
};

double PaperFlops(AttentionPath path, double n, double d, double heads) {
  const bool efficient =
      path == AttentionPath::kEfficient || path == AttentionPath::kEfficientReference;
  return heads * (efficient ? EfficientOps(n, d) : DirectOps(n, d));
}

struct Case {
  AttentionPath path;
  std::int64_t batch, heads, n, d;
  bool bf16;
  std::string sdpa_backend;  // softmax path: the SDPA backend ("auto": LibTorch's choice)
};

void BM_Attention(benchmark::State& state, const Case& c, const torch::Device& device,
                  TaylorKernelOptions kernel) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(0);
  if (c.path == AttentionPath::kSoftmax && !compat::UseOnlySdpaBackend(c.sdpa_backend)) {
    state.SkipWithError(("no SDPA backend " + c.sdpa_backend + " in this LibTorch").c_str());
    return;
  }
  // Softmax at bf16 takes bfloat16 inputs; the Taylor paths take float32 and multiply in bf16.
  const bool bf16_inputs = c.bf16 && c.path == AttentionPath::kSoftmax;
  kernel.bf16_products = c.bf16;
  const auto options =
      torch::TensorOptions().device(device).dtype(bf16_inputs ? torch::kBFloat16 : torch::kFloat32);
  auto q = torch::randn({c.batch, c.heads, c.n, c.d}, options);
  auto k = torch::randn({c.batch, c.heads, c.n, c.d}, options);
  const auto v = torch::randn({c.batch, c.heads, c.n, c.d}, options);
  if (c.path != AttentionPath::kSoftmax) std::tie(q, k) = NormalizeQueryKey(q, k, {});
  const auto path = c.path;
  const auto run = [&] {
    auto y = RunAttentionPath(path, q, k, v, {}, kernel);
    compat::Synchronize(device);
    benchmark::DoNotOptimize(y.data_ptr());
  };
  const std::int64_t peak = MeasurePeakBytes(device, run);
  for (auto _ : state) run();
  compat::UseOnlySdpaBackend("auto");
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["paper_FLOP/s"] =
      benchmark::Counter(PaperFlops(path, static_cast<double>(c.n), static_cast<double>(c.d),
                                    static_cast<double>(c.heads * c.batch)),
                         benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Sgemm(benchmark::State& state, std::int64_t n, const torch::Device& device, bool bf16) {
  torch::NoGradGuard no_grad;
  const auto options =
      torch::TensorOptions().device(device).dtype(bf16 ? torch::kBFloat16 : torch::kFloat32);
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
  app.add_option("--precision", flags->precision, "fp32|bf16")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--batch", flags->batch, "sequences per call")
      ->capture_default_str()
      ->check(IntegerIn(1, 1 << 20));
  app.add_option("--heads", flags->heads, "heads")
      ->capture_default_str()
      ->check(IntegerIn(1, 1024));
  app.add_option("--head_dims", flags->head_dims, "head dimensions d")
      ->delimiter(',')
      ->capture_default_str()
      ->check(IntegerIn(1, 1024));
  app.add_option("--min_tokens", flags->min_tokens, "shortest N (N doubles up to max_tokens)")
      ->capture_default_str()
      ->check(IntegerIn(1, INT64_MAX));
  app.add_option("--paths", flags->paths, "attention paths")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember(
          {"softmax", "direct", "efficient", "direct_reference", "efficient_reference"}));
  app.add_option("--sdpa_backends", flags->sdpa_backends,
                 "softmax path: SDPA backends, one run each (auto, flash, efficient, cudnn, math)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "flash", "efficient", "cudnn", "math"}));
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
  app.add_option("--efficient_tiles", flags->kernel.efficient_tiles,
                 "efficient path, fp32 at the AVX2 level: register tiles (false: GEMMs)")
      ->capture_default_str();
  app.add_option("--implementations", flags->implementations,
                 "Taylor paths' implementations: auto (the dispatcher's), aten, cuda (fused)")
      ->delimiter(',')
      ->check(CLI::IsMember({"auto", "aten", "cuda"}))
      ->capture_default_str();
  app.add_option("--direct_block_elements", flags->kernel.direct_block_elements,
                 "direct path: score entries at once")
      ->capture_default_str()
      ->check(IntegerIn(1, INT64_MAX));
}

void RegisterAll(const Flags& flags) {
  const torch::Device device(flags.device);
  const bool bf16 = flags.precision == "bf16";
  // A GPU reaches its tensor-core rate only on larger products.
  const std::vector<std::int64_t> gemm_sizes = device.is_cuda()
                                                   ? std::vector<std::int64_t>{2048, 4096, 8192}
                                                   : std::vector<std::int64_t>{512, 1024, 2048};
  for (const std::int64_t n : gemm_sizes) {
    benchmark::RegisterBenchmark(
        (std::string(bf16 ? "BM_Gemm_bf16" : "BM_Sgemm") + "/n:" + std::to_string(n)).c_str(),
        [=](benchmark::State& s) { BM_Sgemm(s, n, device, bf16); })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime();
  }
  for (const std::int64_t d : flags.head_dims) {
    for (const std::string& name : flags.paths) {
      const AttentionPath path = *ParseAttentionPath(name);  // the flag's check took only these
      const bool reference =
          path == AttentionPath::kDirectReference || path == AttentionPath::kEfficientReference;
      const bool taylor = path == AttentionPath::kDirect || path == AttentionPath::kEfficient;
      // Softmax: one run per SDPA backend; direct and efficient: one per implementation.
      std::vector<std::string> variants = {""};
      if (path == AttentionPath::kSoftmax) variants = flags.sdpa_backends;
      if (taylor) variants = flags.implementations;
      for (const std::string& variant : variants) {
        const std::string backend = taylor ? "" : variant;
        TaylorKernelOptions kernel = flags.kernel;
        if (taylor) kernel.implementation = *ParseKernelImplementation(variant);
        for (std::int64_t n = flags.min_tokens; n <= flags.max_tokens; n *= 2) {
          if (reference && n > flags.max_reference_tokens) continue;
          const Case c{
              path, flags.batch, flags.heads, n, d, bf16, backend.empty() ? "auto" : backend};
          std::string title = "BM_Attention_" + name;
          if (!variant.empty() && variant != "auto") title += "_" + variant;
          title += "/N:" + std::to_string(n) + "/d:" + std::to_string(d) +
                   "/H:" + std::to_string(flags.heads);
          if (flags.batch != 1) title += "/B:" + std::to_string(flags.batch);
          if (bf16) title += "/bf16";
          benchmark::RegisterBenchmark(
              title.c_str(), [=](benchmark::State& s) { BM_Attention(s, c, device, kernel); })
              ->Unit(benchmark::kMillisecond)
              ->UseRealTime()
              ->MinTime(0.2);
        }
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
  ts::compat::SetCudaTf32(false);  // fp32 means float32 (model/torch_compat.h)
  benchmark::AddCustomContext("intra_op_threads", std::to_string(flags.threads));
  // The heap policy of tsserver and tsmodel (model/heap_policy.h), so the numbers are theirs.
  if (ts::KeepFreedHeapMemory(ts::kDefaultHeapKeepFreedBytes).ok()) {
    benchmark::AddCustomContext("heap_keep_freed_bytes",
                                std::to_string(ts::kDefaultHeapKeepFreedBytes));
  }
  benchmark::AddCustomContext("device", flags.device);
  benchmark::AddCustomContext("precision", flags.precision);
  benchmark::AddCustomContext("cuda_tf32", ts::compat::CudaTf32Allowed() ? "on" : "off");
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

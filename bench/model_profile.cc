// Roofline profile of the whole model: the time of each part of a forward pass (embedding, qkv,
// attention, proj, MLP, norms, head) and of the whole model, against the time its FLOPs take at
// the GEMM rate measured in the same run (docs/PERFORMANCE.md, "Roofline profile").
//
//   model_profile [--preset paper|demo|pixel] [--embed-dim C --depth L --heads H --mlp-ratio R]
//                 [--length N] [--batch B] [--precision fp32|bf16] [--path auto|direct|efficient]
//                 [--cpu-gemm onednn|libtorch] [--efficient-tiles on|off]
//                 [--threads T] [--repeats R] [--json]
//
// Each part runs alone on inputs of the shape it sees in the model ([B, N+1, C]), in inference
// mode, median of --repeats timed runs after max(3, --repeats) warm-ups (the first GEMMs of
// a process run well below the rate). "attention" is the attention module
// without its qkv and proj products (normalisation, the kernel of --path, default the one auto
// picks, the reshapes). FLOPs count multiply-adds as two: linear 2·rows·in·out; direct attention
// 4·N²·C (S = q kᵀ and P·V); efficient attention 4·N·F·(d+1)·H with F = d(d+1)/2 + d + 1 symmetric
// features. The GEMM rate is the best of three products of [N+1, C] × [C, 4C] (the second
// operand transposed, as a Linear weight is) in the part's dtype: at float32 the faster of
// torch::mm and model/kernels/cpu_gemm.h's SgemmInto (what the model's float32 inference layers
// run), at bfloat16 (the linear layers at --precision bf16) torch::mm. Also printed: the
// register-only peaks of float32 FMAs and bf16 dot products (bench/peak_rate.h), whose ratio bounds
// what bf16 can gain over fp32.
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <iostream>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "bench/peak_rate.h"
#include "common/command_line.h"
#include "common/json_output.h"
#include "model/api/precision.h"
#include "model/heap_policy.h"
#include "model/kernels/cpu_gemm.h"
#include "model/kernels/mixed_linear.h"
#include "model/networks/encoder.h"
#include "model/torch_compat.h"

namespace ts::bench {
namespace {

struct Config {
  std::int64_t embed_dim = 512, depth = 4, heads = 16, mlp_ratio = 2, length = 2000, batch = 1;
  int threads = 2;
  int repeats = 5;
  Precision precision = Precision::kFp32;
  AttentionPath path = AttentionPath::kAuto;
  bool json = false;
  bool efficient_tiles = true;
  std::string preset = "paper";
};

double MedianSeconds(const std::function<void()>& run, int repeats) {
  for (int i = 0; i < std::max(3, repeats); ++i) run();
  std::vector<double> times;
  for (int i = 0; i < repeats; ++i) {
    const auto start = std::chrono::steady_clock::now();
    run();
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

struct Part {
  std::string name;
  double seconds = 0;  // per forward (all blocks for block parts)
  double flops = 0;
  double rate = 0;  // the GEMM rate this part's roofline uses (FLOP/s)
};

int Run(const Config& config) {
  compat::SetThreads(config.threads);
  // As tsserver and tsmodel do: without it glibc returns and re-faults the kernels' buffers on
  // every call, which tripled the efficient path's time in this profile.
  if (auto status = KeepFreedHeapMemory(kDefaultHeapKeepFreedBytes); !status.ok()) {
    std::cerr << "model_profile: " << status.message() << "\n";
    return 1;
  }
  c10::InferenceMode inference;
  torch::manual_seed(1);
  const std::int64_t C = config.embed_dim, H = config.heads, d = C / H;
  const std::int64_t L = C * config.mlp_ratio, B = config.batch, N = config.length + 1;
  TaylorShiftEncoderOptions options(C, config.depth, H, config.length, 10);
  options.mlp_hidden(L);
  TaylorShiftEncoder model(options);
  model->eval();
  model->set_efficient_tiles(config.efficient_tiles);
  if (auto status = CheckPrecisionSupported(config.precision, torch::kCPU); !status.ok()) {
    std::cerr << "model_profile: " << status.message() << "\n";
    return 1;
  }
  model->set_precision(config.precision);
  const bool bf16 = config.precision == Precision::kBf16;
  const AttentionPath path = model->ResolvePath(config.path, N);

  const auto tokens = torch::randint(0, 256, {B, config.length}, torch::kLong);
  const auto lengths = torch::full({B}, config.length, torch::kLong);
  // The first second or so of heavy work in a process runs well below the rates that follow
  // (2-4x on the shared 2-core machine: clocks, fresh pages); whole passes absorb it.
  for (int i = 0; i < 2; ++i) model->forward(tokens, lengths, path);

  // GEMM rates of this run.
  // One sequence's rows: a larger product (batch 8: 16008 × 2048 out) runs at a third of the rate
  // here, and the roofline is the machine's best.
  const auto a = torch::randn({N, C});
  const auto w = torch::randn({4 * C, C}).t();  // the layout of a Linear weight (faster here)
  const double gemm_flops = 2.0 * static_cast<double>(N) * C * 4 * C;
  auto gemm_out = torch::empty({N, 4 * C});
  const auto a16 = a.to(torch::kBFloat16);
  const auto w16 = w.to(torch::kBFloat16);
  // The best of three measurements: the first GEMMs of a process run well below the rate
  // (thread pool start, clocks), which would flatter every ratio.
  double fp32_rate = 0, bf16_rate = 0;
  for (int round = 0; round < 3; ++round) {
    fp32_rate =
        std::max(fp32_rate, gemm_flops / MedianSeconds([&] { torch::mm(a, w); }, config.repeats));
    fp32_rate = std::max(fp32_rate, gemm_flops / MedianSeconds(
                                                     [&] {
                                                       SgemmInto(false, true, N, 4 * C, C,
                                                                 a.data_ptr<float>(), C,
                                                                 w.data_ptr<float>(), C, 0.0f,
                                                                 gemm_out.data_ptr<float>(), 4 * C);
                                                     },
                                                     config.repeats));
    if (bf16) {
      bf16_rate = std::max(
          bf16_rate, gemm_flops / MedianSeconds([&] { torch::mm(a16, w16); }, config.repeats));
    }
  }
  const double linear_rate = bf16 ? bf16_rate : fp32_rate;
  const PeakRates peak = MeasurePeakRates(config.threads);

  const auto x = torch::randn({B, N, C});
  const auto block0 = model->blocks->ptr<TaylorShiftBlockImpl>(0);
  auto& block = block0->attn;
  const double depth = static_cast<double>(config.depth);
  const double rows = static_cast<double>(B * N);
  const std::int64_t features = d * (d + 1) / 2 + d + 1;
  const double attention_flops = path == AttentionPath::kEfficient
                                     ? 4.0 * B * N * static_cast<double>(features) * (d + 1) * H
                                     : 4.0 * B * static_cast<double>(N) * N * C;

  std::vector<Part> parts;
  const auto time_part = [&](const std::string& name, double flops, double rate,
                             const std::function<void()>& run, double times) {
    parts.push_back({name, MedianSeconds(run, config.repeats) * times, flops * times, rate});
  };
  const auto embed_weight = model->patch_embed->weight.t().contiguous();
  time_part(
      "embedding (+pos, cls)", 0, fp32_rate,
      [&] {
        auto e = torch::embedding(embed_weight, tokens) + model->patch_embed->bias +
                 model->pe.slice(1, 0, config.length);
        torch::cat({model->cls_token.expand({B, 1, C}), e}, 1);
      },
      1);
  time_part(
      "norms (2 per block)", 0, fp32_rate, [&] { block0->Norm(block0->norm1, x); }, 2 * depth);
  const auto qkv_low = LowPrecisionWeight(block->qkv, config.precision);
  const auto proj_low = LowPrecisionWeight(block->proj, config.precision);
  time_part(
      "qkv", 2 * rows * C * 3 * C, linear_rate, [&] { MixedLinear(block->qkv, qkv_low, x); },
      depth);
  const double attention_module =
      MedianSeconds([&] { block->forward(x, {}, path); }, config.repeats);
  const double qkv_seconds = parts.back().seconds / depth;
  time_part(
      "proj", 2 * rows * C * C, linear_rate, [&] { MixedLinear(block->proj, proj_low, x); }, depth);
  const double proj_seconds = parts.back().seconds / depth;
  parts.push_back({absl::StrFormat("attention (%s)", std::string(AttentionPathName(path))),
                   std::max(0.0, attention_module - qkv_seconds - proj_seconds) * depth,
                   attention_flops * depth, fp32_rate});
  auto mlp = block0->mlp;
  time_part(
      "mlp (fc1, gelu, fc2)", 2 * rows * C * L * 2, linear_rate, [&] { mlp->forward(x); }, depth);
  time_part(
      "final norm + head", 2.0 * B * C * 10, fp32_rate,
      [&] { model->head(model->norm(x.select(1, 0))); }, 1);
  const double whole =
      MedianSeconds([&] { model->forward(tokens, lengths, path); }, config.repeats);

  double roofline = 0, flops = 0, sum = 0;
  for (const Part& part : parts) {
    roofline += part.flops / part.rate;
    flops += part.flops;
    sum += part.seconds;
  }
  if (config.json) {
    Json json_parts = Json::array();
    for (const Part& part : parts) {
      json_parts.push_back({{"name", part.name},
                            {"ms", JsonNumber(part.seconds * 1e3)},
                            {"gflop", JsonNumber(part.flops / 1e9)},
                            {"roofline_ms", JsonNumber(part.flops / part.rate * 1e3)}});
    }
    std::cout << DumpJson(Json{{"preset", config.preset},
                               {"embed_dim", C},
                               {"depth", config.depth},
                               {"heads", H},
                               {"mlp_hidden", L},
                               {"length", config.length},
                               {"batch", B},
                               {"threads", config.threads},
                               {"precision", PrecisionName(config.precision)},
                               {"path", std::string(AttentionPathName(path))},
                               {"cpu_gemm", CpuGemmBackend()},
                               {"efficient_tiles", config.efficient_tiles},
                               {"fp32_gemm_gflops", JsonNumber(fp32_rate / 1e9)},
                               {"bf16_gemm_gflops", JsonNumber(bf16_rate / 1e9)},
                               {"fp32_fma_peak_gflops", JsonNumber(peak.fp32_fma / 1e9)},
                               {"bf16_dot_peak_gflops", JsonNumber(peak.bf16_dot / 1e9)},
                               {"parts", std::move(json_parts)},
                               {"sum_of_parts_ms", JsonNumber(sum * 1e3)},
                               {"whole_ms", JsonNumber(whole * 1e3)},
                               {"gflop", JsonNumber(flops / 1e9)},
                               {"roofline_ms", JsonNumber(roofline * 1e3)},
                               {"whole_over_roofline", JsonNumber(whole / roofline)},
                               {"docs_per_s", JsonNumber(static_cast<double>(B) / whole)}})
              << "\n";
    return 0;
  }
  std::cout << absl::StrFormat(
      "%s: C %d, depth %d, H %d (d %d), MLP %d, N %d, batch %d, %d threads, %s, path %s, "
      "kernel GEMMs %s, efficient tiles %s\n"
      "GEMM rate: fp32 %.0f GFLOP/s%s\n"
      "Register-only peak: fp32 FMA %.0f GFLOP/s, bf16 dot %.0f GFLOP/s (%.2fx)\n\n",
      config.preset, C, config.depth, H, d, L, config.length, B, config.threads,
      PrecisionName(config.precision), std::string(AttentionPathName(path)), CpuGemmBackend(),
      config.efficient_tiles ? "on" : "off", fp32_rate / 1e9,
      bf16 ? absl::StrFormat(", bf16 %.0f GFLOP/s", bf16_rate / 1e9) : "", peak.fp32_fma / 1e9,
      peak.bf16_dot / 1e9, peak.fp32_fma > 0 ? peak.bf16_dot / peak.fp32_fma : 0.0);
  std::cout << "| part | ms | GFLOP | GFLOP/s | roofline ms | ms / roofline |\n"
               "|---|---:|---:|---:|---:|---:|\n";
  for (const Part& part : parts) {
    const double ideal = part.flops / part.rate;
    std::cout << absl::StrFormat(
        "| %s | %.2f | %.3f | %s | %.2f | %s |\n", part.name, part.seconds * 1e3, part.flops / 1e9,
        part.flops > 0 ? absl::StrFormat("%.0f", part.flops / part.seconds / 1e9) : "-",
        ideal * 1e3, part.flops > 0 ? absl::StrFormat("%.2f", part.seconds / ideal) : "-");
  }
  std::cout << absl::StrFormat(
      "| sum of parts | %.2f | %.3f | %.0f | %.2f | %.2f |\n"
      "| whole model | %.2f | %.3f | %.0f | %.2f | **%.2f** |\n"
      "\n%.2f docs/s; the whole model runs at %.0f%% of its roofline\n",
      sum * 1e3, flops / 1e9, flops / sum / 1e9, roofline * 1e3, sum / roofline, whole * 1e3,
      flops / 1e9, flops / whole / 1e9, roofline * 1e3, whole / roofline,
      static_cast<double>(B) / whole, 100 * roofline / whole);
  return 0;
}

}  // namespace
}  // namespace ts::bench

int main(int argc, char** argv) try {
  CLI::App app("model_profile: the time of each part of a forward pass against its roofline",
               "model_profile");
  ts::UseFlagConventions(app);
  ts::bench::Config config;
  app.add_option("--preset", config.preset,
                 "paper; demo (the bundled demo models' size, a 38-token request: C 64, depth 2, "
                 "H 4, N 38); pixel (a 1-block C 32 pixel model, a 32x32 image: depth 1, H 4, "
                 "N 1024)")
      ->capture_default_str()
      ->check(CLI::IsMember({"paper", "demo", "pixel"}));
  // Given, these override the preset's.
  std::optional<std::int64_t> embed_dim, depth, heads, length;
  for (auto [name, value] :
       {std::pair<const char*, std::optional<std::int64_t>*>{"--embed-dim", &embed_dim},
        {"--depth", &depth},
        {"--heads", &heads},
        {"--length", &length}}) {
    app.add_option(name, *value, "default: the preset's")->check(ts::IntegerIn(1, INT32_MAX));
  }
  for (auto [name, value] :
       {std::pair<const char*, std::int64_t*>{"--mlp-ratio", &config.mlp_ratio},
        {"--batch", &config.batch}}) {
    app.add_option(name, *value)->capture_default_str()->check(ts::IntegerIn(1, INT32_MAX));
  }
  for (auto [name, value] : {std::pair<const char*, int*>{"--threads", &config.threads},
                             {"--repeats", &config.repeats}}) {
    app.add_option(name, *value)->capture_default_str()->check(ts::IntegerIn(1, INT32_MAX));
  }
  ts::AddParsedOption(app, "--precision", &config.precision, ts::ParsePrecision,
                      "fp32 (default) or bf16 for the linear layers");
  ts::AddParsedOption(app, "--path", &config.path, ts::ParseAttentionPath,
                      "auto (default), direct or efficient");
  app.add_option_function<std::string>(
         "--cpu-gemm",
         [](const std::string& backend) { ts::SetCpuGemmUseOneDnn(backend == "onednn"); },
         "the float products: onednn (default where built with it) or libtorch")
      ->check(CLI::IsMember({"onednn", "libtorch"}));
  app.add_option_function<std::string>(
         "--efficient-tiles",
         [&config](const std::string& value) { config.efficient_tiles = value == "on"; },
         "efficient path, fp32 at the AVX2 level: on (default), our register tiles; off, GEMMs")
      ->check(CLI::IsMember({"on", "off"}));
  app.add_flag("--json", config.json, "one JSON object instead of the table");
  if (std::optional<int> exit = ts::ParseCommandLine(app, argc, argv)) return *exit;
  if (config.preset == "demo") {
    config.embed_dim = 64, config.depth = 2, config.heads = 4, config.length = 38;
  } else if (config.preset == "pixel") {
    config.embed_dim = 32, config.depth = 1, config.heads = 4, config.length = 1024;
  }
  config.embed_dim = embed_dim.value_or(config.embed_dim);
  config.depth = depth.value_or(config.depth);
  config.heads = heads.value_or(config.heads);
  config.length = length.value_or(config.length);
  if (config.embed_dim % config.heads != 0) {
    std::cerr << "model_profile: --embed-dim must be divisible by --heads\n";
    return ts::kUsageExitStatus;
  }
  return ts::bench::Run(config);
} catch (const std::exception& e) {
  // A LibTorch or CLI11 failure outside the measured work: its message, not an abort.
  std::cerr << "model_profile: " << e.what() << "\n";
  return 1;
}

// Training throughput: ts::Trainer::Step (forward, backward, gradient clipping and an AdamW
// step) on generated ListOps batches whose every sequence is exactly L bytes, for the direct,
// efficient and auto attention paths (and softmax, the baseline: PyTorch's SDPA on CUDA), so the
// paths can be compared on the work a training job does (docs/PERFORMANCE.md, "Training
// throughput"; on a GPU, scripts/gpu-check's train phase). Reports examples/s and tokens/s as
// rates and `peak_MiB`, by how much one step raises peak memory above what was held before the
// step (activations saved for backward, gradients, temporaries): on the CPU the process's peak
// resident memory (see MeasurePeakResidentBytes for why not the tensor-counting allocator), on
// CUDA the caching allocator's peak.
//
//   train_bench [--device=cpu|cuda[:N]] [--precision=fp32|bf16] [--threads=N]
//               [--lengths=500,1000,2000] [--heads=4,2] [--embed_dim=64] [--depth=2] [--batch=8]
//               [--paths=direct,efficient,auto] [--kernel=auto|aten|cuda] [--min_time=1]
//               [benchmark flags, e.g. --benchmark_out=FILE
//               --benchmark_out_format=json]
//
// --heads takes a list: each head count is one model (head dim d = embed_dim / heads), so the
// crossover of `auto` can be checked at more than one d in the same run. --kernel=cuda runs the
// Taylor paths' forward and backward by the fused CUDA kernels (bf16 products; auto keeps the
// ATen form under autograd); its benchmarks' names end in /kernel:cuda.
#include <benchmark/benchmark.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/peak_memory.h"
#include "common/command_line.h"
#include "model/api/attention_path.h"
#include "model/api/precision.h"
#include "model/data/listops_generator.h"
#include "model/heap_policy.h"
#include "model/kernels/mixed_linear.h"
#include "model/networks/encoder.h"
#include "model/torch_compat.h"
#include "model/training/training.h"

namespace ts::bench {
namespace {

struct Flags {
  std::string device = "cpu";
  std::string precision = "fp32";
  std::vector<std::string> paths = {"direct", "efficient", "auto"};
  std::string kernel = "auto";
  int threads = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));
  std::vector<std::int64_t> lengths = {500, 1000, 2000};
  std::vector<std::int64_t> heads = {4, 2};
  std::int64_t embed_dim = 64;
  std::int64_t depth = 2;
  std::int64_t batch = 8;
  double min_time_s = 1.0;  // per benchmark, after the warm-up step
};

// Examples in each generated training set: enough for a few distinct batches.
constexpr std::int64_t kBatchesPerSet = 4;
// The model's positional table (max_length), raised to the longest benchmarked length if that is
// longer, so that no sequence is cut.
constexpr std::int64_t kMaxLength = 2048;

std::int64_t ModelMaxLength(const Flags& flags) {
  std::int64_t longest = kMaxLength;
  for (const std::int64_t length : flags.lengths) longest = std::max(longest, length);
  return longest;
}

// Generated once per length (min_length = max_length = length) and shared by every benchmark of
// that length.
const absl::StatusOr<std::vector<LabeledSequence>>& ListOpsOfLength(std::int64_t length,
                                                                    std::int64_t count) {
  static std::map<std::int64_t, absl::StatusOr<std::vector<LabeledSequence>>> sets;
  if (auto it = sets.find(length); it != sets.end()) return it->second;
  ListOpsGeneratorOptions options;
  options.count = count;
  options.min_length = length;
  options.max_length = length;
  options.seed = static_cast<std::uint64_t>(length);
  absl::StatusOr<Dataset> dataset = GenerateListOpsDataset(options);
  if (!dataset.ok()) return sets.emplace(length, dataset.status()).first->second;
  std::vector<LabeledSequence> set;
  for (auto& e : dataset->examples) set.push_back({std::move(e.tokens), e.label});
  return sets.emplace(length, std::move(set)).first->second;
}

TaylorShiftEncoderOptions ModelOptions(const Flags& flags, std::int64_t heads) {
  TaylorShiftEncoderOptions options(flags.embed_dim, flags.depth, heads, ModelMaxLength(flags),
                                    /*num_classes=*/10);
  options.mlp_hidden(2 * flags.embed_dim);
  return options;
}

// The fixed part of the model and training setup, for the benchmark context.
std::string DescribeModel(const Flags& flags) {
  return "embed_dim=" + std::to_string(flags.embed_dim) + " depth=" + std::to_string(flags.depth) +
         " mlp_hidden=" + std::to_string(2 * flags.embed_dim) +
         " max_length=" + std::to_string(ModelMaxLength(flags)) +
         " batch=" + std::to_string(flags.batch) + " optimizer=adamw precision=" + flags.precision;
}

void BM_TrainStep(benchmark::State& state, AttentionPath path, std::int64_t length,
                  std::int64_t heads, const Flags& flags) {
  const auto& examples = ListOpsOfLength(length, kBatchesPerSet * flags.batch);
  if (!examples.ok()) {
    state.SkipWithError(std::string(examples.status().message()).c_str());
    return;
  }
  const TaylorShiftEncoderOptions encoder = ModelOptions(flags, heads);
  TrainingOptions options;
  options.optimizer = OptimizerKind::kAdamW;
  options.lr = 1e-4;
  options.batch_size = flags.batch;
  // Effectively unlimited (Step() fails once `steps` are done); with no warmup the cosine
  // schedule then keeps the learning rate at `lr`.
  options.steps = std::int64_t{1} << 40;
  options.path = path;
  options.device = torch::Device(flags.device);
  options.precision = *ParsePrecision(flags.precision);
  auto trainer = Trainer::Create(encoder, options, *examples, {});
  if (!trainer.ok()) {
    state.SkipWithError(std::string(trainer.status().message()).c_str());
    return;
  }
  (*trainer)->model()->set_kernel_implementation(*ParseKernelImplementation(flags.kernel));
  absl::Status status;
  const auto step = [&] {
    if (auto result = (*trainer)->Step(); !result.ok()) status = result.status();
  };
  // The first step doubles as the warm-up (thread pool start, first page faults, CUDA kernels'
  // first launches). The AdamW moments it allocates (2 floats per parameter, under 1 MiB for the
  // default model) are within its peak. Step() reads the loss back, so it ends when the device
  // has finished.
  std::int64_t peak = -1;
  try {
    peak = options.device.is_cuda() ? MeasurePeakBytes(options.device, step)
                                    : MeasurePeakResidentBytes(step);
  } catch (const std::exception& e) {
    // Out of memory at this length is a result, not a failure of the run.
    status = absl::ResourceExhaustedError(std::string(e.what()).substr(0, 200));
  }
  if (!status.ok()) {
    state.SkipWithError(std::string(status.message()).c_str());
    return;
  }
  for (auto _ : state) step();
  if (!status.ok()) {
    state.SkipWithError(std::string(status.message()).c_str());
    return;
  }
  const std::int64_t tokens = length + 1;  // incl. CLS
  const AttentionPath resolved = (*trainer)->model()->ResolvePath(path, tokens);
  // The concrete path that ran (what `auto` resolved to).
  state.SetLabel(std::string(AttentionPathName(resolved)));
  state.counters["examples/s"] = benchmark::Counter(static_cast<double>(flags.batch),
                                                    benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(flags.batch * length),
                                                  benchmark::Counter::kIsIterationInvariantRate);
  if (peak >= 0) state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
}

// "500,1000,2000": positive integers, empty items skipped. A list flag given twice keeps the last
// list, as every other flag keeps its last value.
absl::StatusOr<std::vector<std::int64_t>> ParseList(const std::string& text) {
  std::vector<std::int64_t> values;
  for (const absl::string_view item : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    std::int64_t value = 0;
    if (!absl::SimpleAtoi(item, &value) || value <= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("expected positive integers separated by commas, got '", text, "'"));
    }
    values.push_back(value);
  }
  return values;
}

void AddFlags(CLI::App& app, Flags* flags) {
  UseFlagConventions(app);
  app.footer(
      "Other flags go to Google Benchmark (--benchmark_filter=REGEX, --benchmark_out=FILE).");
  app.add_option("--threads", flags->threads, "intra-op threads (default: every core)")
      ->check(IntegerIn(1, INT32_MAX));
  app.add_option("--device", flags->device, "cpu|cuda[:N]")->capture_default_str();
  app.add_option("--precision", flags->precision, "fp32|bf16 (bf16: autocast mixed precision)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16"}));
  app.add_option("--paths", flags->paths, "attention paths (softmax: the baseline)")
      ->delimiter(',')
      ->capture_default_str()
      ->check(CLI::IsMember({"direct", "efficient", "auto", "softmax"}));
  app.add_option("--kernel", flags->kernel,
                 "auto|aten|cuda: what runs the Taylor paths (cuda: the fused CUDA kernels)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "aten", "cuda"}));
  app.add_option("--min_time", flags->min_time_s, "seconds each benchmark runs after its warm-up")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  AddParsedOption(app, "--lengths", &flags->lengths, ParseList,
                  "sequence lengths L (default 500,1000,2000)");
  AddParsedOption(app, "--heads", &flags->heads, ParseList,
                  "head counts, one model each (default 4,2)");
  for (auto [name, value] :
       {std::pair<const char*, std::int64_t*>{"--embed_dim", &flags->embed_dim},
        {"--depth", &flags->depth},
        {"--batch", &flags->batch}}) {
    app.add_option(name, *value)->capture_default_str()->check(IntegerIn(1, INT32_MAX));
  }
}

void RegisterAll(const Flags& flags) {
  for (const std::int64_t heads : flags.heads) {
    for (const std::int64_t length : flags.lengths) {
      for (const std::string& path_name : flags.paths) {
        const AttentionPath path = *ParseAttentionPath(path_name);
        const std::string name =
            "BM_TrainStep_" + std::string(AttentionPathName(path)) +
            "/L:" + std::to_string(length) + "/C:" + std::to_string(flags.embed_dim) +
            "/H:" + std::to_string(heads) + "/depth:" + std::to_string(flags.depth) +
            "/batch:" + std::to_string(flags.batch) +
            (flags.kernel == "auto" ? "" : "/kernel:" + flags.kernel);
        benchmark::RegisterBenchmark(
            name.c_str(), [=](benchmark::State& s) { BM_TrainStep(s, path, length, heads, flags); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime()
            ->MinTime(flags.min_time_s);
      }
    }
  }
}

}  // namespace
}  // namespace ts::bench

int main(int argc, char** argv) try {
  CLI::App app("train_bench: Trainer::Step throughput and peak memory per attention path",
               "train_bench");
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
  const torch::Device device(flags.device);
  if (const absl::Status supported =
          ts::CheckPrecisionSupported(*ts::ParsePrecision(flags.precision), device);
      !supported.ok()) {
    std::cerr << "train_bench: " << supported.message() << "\n";
    return 2;
  }
  if (device.is_cuda() && ts::compat::CudaDeviceCount() == 0) {
    std::cerr << "train_bench: --device=" << flags.device << ": this process sees no CUDA device\n";
    return 2;
  }
  benchmark::AddCustomContext("device", flags.device);
  benchmark::AddCustomContext("torch_version", ts::compat::TorchVersion());
  benchmark::AddCustomContext("model", ts::bench::DescribeModel(flags));
  ts::bench::RegisterAll(flags);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
} catch (const std::exception& e) {
  // A LibTorch or CLI11 failure outside the measured work: its message, not an abort.
  std::cerr << "train_bench: " << e.what() << "\n";
  return 1;
}

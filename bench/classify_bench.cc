// In-process classification throughput: ClassifyBatch on batches like the ones the server forms
// (fixed 4000-byte documents at several batch sizes, and a mixed length distribution), so the
// server's throughput can be compared against the model alone (docs/PERFORMANCE.md); the mixed
// batch both padded and packed (model/networks/packed_forward.h), side by side.
//
//   classify_bench --checkpoint=CKPT [--threads=N] [--device=cuda] [benchmark flags]
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <iostream>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "common/command_line.h"
#include "model/checkpoints/checkpoint.h"
#include "model/heap_policy.h"
#include "model/networks/batch_classifier.h"
#include "model/torch_compat.h"

namespace ts::bench {
namespace {

std::vector<std::string> Documents(std::int64_t count, std::int64_t min_length,
                                   std::int64_t max_length, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int64_t> length(min_length, max_length);
  std::uniform_int_distribution<int> byte(32, 126);
  std::vector<std::string> docs;
  for (std::int64_t i = 0; i < count; ++i) {
    std::string doc(static_cast<std::size_t>(length(rng)), ' ');
    for (auto& c : doc) c = static_cast<char>(byte(rng));
    docs.push_back(std::move(doc));
  }
  return docs;
}

void BM_Classify(benchmark::State& state, LoadedCheckpoint* model, const torch::Device& device,
                 std::int64_t batch, std::int64_t min_length, std::int64_t max_length,
                 BatchLayout layout) {
  const auto docs = Documents(batch, min_length, max_length, 1);
  std::vector<std::string_view> views(docs.begin(), docs.end());
  std::int64_t tokens = 0;
  for (const auto& d : docs) tokens += static_cast<std::int64_t>(d.size());
  for (auto _ : state) {
    auto result = ClassifyBatch(model->model, views, AttentionPath::kAuto, device, 0, layout);
    if (!result.ok()) {
      state.SkipWithError(std::string(result.status().message()).c_str());
      return;
    }
    benchmark::DoNotOptimize(result->probabilities.data());
  }
  state.counters["docs_per_s"] =
      benchmark::Counter(static_cast<double>(batch), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tokens_per_s"] = benchmark::Counter(
      static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace
}  // namespace ts::bench

int main(int argc, char** argv) try {
  CLI::App app("classify_bench: in-process ClassifyBatch throughput", "classify_bench");
  ts::UseFlagConventions(app);
  app.footer(
      "Other flags go to Google Benchmark (--benchmark_filter=REGEX, --benchmark_out=FILE).");
  std::string checkpoint;
  int threads = 2;
  app.add_option("--checkpoint", checkpoint, "the model")->required()->check(ts::NonEmpty());
  app.add_option("--threads", threads, "intra-op threads")
      ->capture_default_str()
      ->check(ts::IntegerIn(1, INT32_MAX));
  std::string device_name = "cpu";
  app.add_option("--device", device_name, "cpu or cuda[:N]")->capture_default_str();
  if (std::optional<int> exit = ts::ParseCommandLineKeepingExtras(app, &argc, argv)) return *exit;
  ts::compat::SetThreads(threads);
  if (!ts::KeepFreedHeapMemory(ts::kDefaultHeapKeepFreedBytes).ok()) return 1;  // as tsserver
  const torch::Device device(device_name);
  auto loaded = ts::LoadCheckpoint(checkpoint, device);
  if (!loaded.ok()) {
    std::cerr << "classify_bench: " << loaded.status().message() << "\n";
    return 1;
  }
  static ts::LoadedCheckpoint model = std::move(*loaded);
  benchmark::AddCustomContext("intra_op_threads", std::to_string(threads));
  using ts::BatchLayout;
  const auto add = [&device](const std::string& name, std::int64_t batch, std::int64_t min_length,
                             std::int64_t max_length, BatchLayout layout) {
    benchmark::RegisterBenchmark(name.c_str(),
                                 [=](benchmark::State& s) {
                                   ts::bench::BM_Classify(s, &model, device, batch, min_length,
                                                          max_length, layout);
                                 })
        ->Unit(benchmark::kMillisecond)
        ->UseRealTime()
        ->MinTime(1.0);
  };
  // 4000-byte documents, or the model's max_length where that is shorter.
  const std::int64_t longest = std::min<std::int64_t>(4000, model.model->options().max_length());
  const std::string fixed = "BM_Classify/len:" + std::to_string(longest);
  const std::string mixed = "BM_Classify/len:100-" + std::to_string(longest);
  for (const std::int64_t batch : {1, 2, 4, 8, 16}) {
    add(fixed + "/batch:" + std::to_string(batch), batch, longest, longest, BatchLayout::kAuto);
  }
  add(mixed + "/batch:1", 1, 100, longest, BatchLayout::kAuto);
  // Mixed lengths side by side: padded to the longest, and packed (PackedForward).
  add(mixed + "/batch:16/padded", 16, 100, longest, BatchLayout::kPadded);
  add(mixed + "/batch:16/packed", 16, 100, longest, BatchLayout::kPacked);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
} catch (const std::exception& e) {
  // A LibTorch or CLI11 failure outside the measured work: its message, not an abort.
  std::cerr << "classify_bench: " << e.what() << "\n";
  return 1;
}

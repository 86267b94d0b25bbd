// tsmodel: offline model tool — import reference weights, inspect a checkpoint, classify files,
// calibrate the direct/efficient crossover. Exit codes: 0 success, 1 error, 2 usage error.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/build_version.h"
#include "common/command_line.h"
#include "common/file_slice.h"
#include "common/json_output.h"
#include "common/status_macros.h"
#include "model/api/attention_path.h"
#include "model/api/inputs.h"
#include "model/api/precision.h"
#include "model/checkpoints/checkpoint.h"
#include "model/checkpoints/reference_import.h"
#include "model/data/listops_generator.h"
#include "model/heap_policy.h"
#include "model/kernels/cpu_features.h"
#include "model/kernels/mixed_linear.h"
#include "model/networks/calibration.h"
#include "model/networks/cost_model.h"
#include "model/networks/encoder.h"
#include "model/torch_compat.h"
#include "model/torch_status.h"
#include "model/version_fields.h"

namespace ts {
namespace {

constexpr int kExitError = 1;

// A usage error found after parsing (exit 2) as opposed to a failure while doing the work (exit 1).
struct UsageError {
  std::string message;
};

// The flags of each command, as given (defaults as documented in its --help).
struct ImportFlags {
  std::string state_dict, out, labels, modality = "bytes";
  std::int64_t heads = 0;
};
struct InitFlags {
  std::string out, labels, modality = "bytes";
  std::int64_t embed_dim = 64, depth = 2, heads = 8, mlp_ratio = 2, max_length = 2048, seed = 1;
};
struct InfoFlags {
  std::string checkpoint;
  std::optional<std::string> calibration;
  Precision precision = Precision::kFp32;
};
struct PredictFlags {
  std::string checkpoint, device = "cpu";
  std::vector<std::string> files;
  AttentionPath path = AttentionPath::kAuto;
  Precision precision = Precision::kFp32;
  std::int64_t batch_size = 8;
  std::optional<std::string> calibration;
};
struct CalibrateFlags {
  std::string checkpoint, out, device = "cpu";
  std::vector<std::int64_t> batches{1};
  std::vector<Precision> precisions{Precision::kFp32};
  std::int64_t repeats = 3;
  std::int64_t sweeps = 2;
  std::optional<std::int64_t> max_tokens;
};
struct ListOpsFlags {
  std::string out;
  ListOpsGeneratorOptions options;
  std::int64_t seed = 1;
};

void ApplyThreads(std::int64_t threads) {
  // LibTorch would start with one intra-op thread here; default to every core instead.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  compat::SetThreads(threads > 0 ? static_cast<int>(threads) : cores);
  compat::SetCudaTf32(false);  // fp32 means float32 on a GPU too (docs/GPU.md)
}

absl::StatusOr<torch::Device> DeviceFlag(const std::string& name) {
  auto device = CatchTorch(absl::StrCat("--device ", name), [&] { return torch::Device(name); });
  if (!device.ok()) return absl::InvalidArgumentError(device.status().message());
  if (device->is_cuda() && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", name, " requested but CUDA is not available"));
  }
  return *device;
}

// Applies the crossovers measured for this model's heads at `precision` from a calibration
// file: kAuto then picks the path by each batch's size as well as its length.
absl::Status ApplyCalibration(const std::optional<std::string>& calibration,
                              LoadedCheckpoint& loaded, Precision precision) {
  if (!calibration) return absl::OkStatus();
  const std::int64_t heads = loaded.options.heads();
  TS_ASSIGN_OR_RETURN(auto table, LoadCrossovers(*calibration, loaded.options.embed_dim() / heads,
                                                 heads, precision));
  loaded.model->set_crossover_table(std::move(table));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------

absl::Status ImportReference(const ImportFlags& flags) {
  const std::string& out = flags.out;
  ReferenceImportOptions options;
  options.modality = flags.modality;
  if (!flags.labels.empty()) options.labels = absl::StrSplit(flags.labels, ',');
  options.heads = flags.heads;
  options.provenance["created_by"] = "tsmodel import-reference";

  TS_ASSIGN_OR_RETURN(auto imported, ImportReferenceStateDict(flags.state_dict, options));
  TS_RETURN_IF_ERROR(SaveCheckpoint(out, imported.options, imported.metadata, imported.model));
  std::cout << "wrote " << out << ": " << DescribeEncoderOptions(imported.options) << " ("
            << imported.model->CountParameters() << " parameters, labels "
            << absl::StrJoin(imported.metadata.labels, ",") << ")\n";
  return absl::OkStatus();
}

absl::Status Init(const InitFlags& flags) {
  std::vector<std::string> labels = absl::StrSplit(flags.labels, ',');
  TaylorShiftEncoderOptions options(flags.embed_dim, flags.depth, flags.heads, flags.max_length,
                                    static_cast<std::int64_t>(labels.size()));
  options.mlp_hidden(flags.embed_dim * flags.mlp_ratio);
  if (auto valid = ValidateEncoderOptions(options); !valid.ok()) {
    throw UsageError{std::string(valid.message())};
  }
  CheckpointMetadata metadata;
  metadata.modality = flags.modality;
  metadata.labels = labels;
  metadata.provenance["created_by"] = "tsmodel init";
  metadata.provenance["source"] =
      absl::StrCat("untrained: random initialisation, seed ", flags.seed);
  torch::manual_seed(static_cast<std::uint64_t>(flags.seed));
  TaylorShiftEncoder model(options);
  TS_RETURN_IF_ERROR(SaveCheckpoint(flags.out, options, metadata, model));
  std::cout << "wrote " << flags.out << ": " << DescribeEncoderOptions(options) << " (untrained, "
            << model->CountParameters() << " parameters)\n";
  return absl::OkStatus();
}

absl::Status Info(const InfoFlags& flags) {
  TS_ASSIGN_OR_RETURN(auto loaded, LoadCheckpoint(flags.checkpoint));
  TS_RETURN_IF_ERROR(ApplyCalibration(flags.calibration, loaded, flags.precision));
  const auto& options = loaded.options;
  const std::int64_t head_dim = options.embed_dim() / options.heads();
  std::cout << "checkpoint: " << flags.checkpoint << "\n"
            << "format_version: " << loaded.metadata.format_version << "\n"
            << "architecture: " << DescribeEncoderOptions(options) << "\n"
            << "parameters: " << loaded.model->CountParameters() << "\n"
            << "dtype: " << c10::toString(loaded.model->cls_token.scalar_type()) << "\n"
            << "modality: " << loaded.metadata.modality << "\n"
            << "labels: " << absl::StrJoin(loaded.metadata.labels, ",") << "\n"
            << "cpu_kernels: " << DescribeCpuCapability() << "\n";
  for (const auto& [key, value] : loaded.metadata.provenance) {
    std::cout << "provenance." << key << ": " << value << "\n";
  }
  for (std::int64_t layer = 0; layer < options.depth(); ++layer) {
    std::cout << "layer " << layer << ": heads=" << options.heads() << " d=" << head_dim
              << " N0=" << SpeedCrossoverN0(head_dim) << " N1=" << MemoryCrossoverN1(head_dim)
              << "\n";
  }
  const auto& table = loaded.model->crossover_table();
  std::cout << "crossover_tokens: " << loaded.model->crossover_tokens(1)
            << (flags.calibration ? absl::StrCat(" (calibrated at ", PrecisionName(flags.precision),
                                                 ": ", table.Describe(), ")")
                : options.crossover_tokens() > 0 ? " (checkpoint)"
                                                 : " (formula N0)")
            << "\n"
            << "auto path at max_length: "
            << AttentionPathName(
                   loaded.model->ResolvePath(AttentionPath::kAuto, options.max_length() + 1))
            << "\n";
  return absl::OkStatus();
}

// One input file of `predict` and, once classified, its logits.
struct PredictItem {
  std::string file;
  // Why this file has no result (it could not be read, or the server would refuse its bytes);
  // the other files still get theirs.
  absl::Status error;
  std::vector<std::int64_t> tokens;
  bool truncated = false;
  std::vector<double> logits;
  AttentionPath path = AttentionPath::kAuto;
};

// Each file's bytes as tokens, or the error that reading it gave. Only the first `max_length`
// bytes are read; they go through PrepareTokens (model/api/inputs.h), the check the server
// applies to a document, under the server's default over-length policy (truncate: the first
// `max_length`), so tsmodel and the server answer the same bytes alike: an empty file is "input
// is empty (0 tokens)" for both.
std::vector<PredictItem> ReadPredictItems(const std::vector<std::string>& files,
                                          std::int64_t max_length) {
  std::vector<PredictItem> items;
  for (const auto& file : files) {
    PredictItem& item = items.emplace_back();
    item.file = file;
    absl::StatusOr<FileSlice> read = ReadFileSlice(file, FileEnd::kHead, max_length);
    if (!read.ok()) {
      item.error = read.status();
      continue;
    }
    LengthPolicyOptions policy;
    policy.max_length = max_length;
    policy.policy = LengthPolicy::kTruncate;
    absl::StatusOr<PreparedInput> prepared = PrepareTokens(read->bytes, policy);
    if (!prepared.ok()) {
      item.error = prepared.status();
      continue;
    }
    const std::string& window = prepared->windows.front();
    const auto* bytes = reinterpret_cast<const unsigned char*>(window.data());
    item.truncated = prepared->truncated || read->file_bytes > max_length;
    item.tokens.assign(bytes, bytes + window.size());
  }
  return items;
}

absl::Status Predict(const PredictFlags& flags) {
  const std::int64_t batch_size = flags.batch_size;
  TS_ASSIGN_OR_RETURN(const torch::Device device, DeviceFlag(flags.device));
  TS_RETURN_IF_ERROR(CheckPrecisionSupported(flags.precision, device));

  TS_ASSIGN_OR_RETURN(auto loaded, LoadCheckpoint(flags.checkpoint, device));
  TS_RETURN_IF_ERROR(ApplyCalibration(flags.calibration, loaded, flags.precision));
  loaded.model->set_precision(flags.precision);
  std::vector<PredictItem> items = ReadPredictItems(flags.files, loaded.options.max_length());

  // Similar lengths share a batch, so little compute goes to padding.
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (items[i].error.ok()) order.push_back(i);
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return items[a].tokens.size() < items[b].tokens.size();
  });
  auto& model = loaded.model;
  for (std::size_t start = 0; start < order.size(); start += batch_size) {
    const std::size_t end = std::min(order.size(), start + static_cast<std::size_t>(batch_size));
    TS_RETURN_IF_ERROR(CatchTorch("predict", [&] {
      c10::InferenceMode inference;
      const auto batch = static_cast<std::int64_t>(end - start);
      std::int64_t longest = 0;
      for (std::size_t i = start; i < end; ++i) {
        longest = std::max<std::int64_t>(longest, items[order[i]].tokens.size());
      }
      auto tokens = torch::zeros({batch, longest}, torch::kLong);
      auto lengths = torch::empty({batch}, torch::kLong);
      for (std::int64_t row = 0; row < batch; ++row) {
        const auto& item_tokens = items[order[start + row]].tokens;
        lengths[row] = static_cast<std::int64_t>(item_tokens.size());
        tokens[row].narrow(0, 0, item_tokens.size()).copy_(torch::tensor(item_tokens));
      }
      const AttentionPath concrete = model->ResolvePath(flags.path, longest + 1);
      const auto logits = model->forward(tokens.to(device), lengths.to(device), concrete)
                              .to(torch::kCPU, torch::kDouble)
                              .contiguous();
      for (std::int64_t row = 0; row < batch; ++row) {
        auto& item = items[order[start + row]];
        const double* data = logits[row].data_ptr<double>();
        item.logits.assign(data, data + logits.size(1));
        item.path = concrete;
      }
    }));
  }

  std::vector<std::string> failed;
  absl::StatusCode first_error = absl::StatusCode::kOk;
  for (const auto& item : items) {
    if (!item.error.ok()) {
      // The error object tsctl classify --json prints for an input that failed.
      if (failed.empty()) first_error = item.error.code();
      failed.push_back(item.file);
      std::cout << DumpJson(Json{{"file", item.file},
                                 {"error",
                                  {{"code", absl::StatusCodeToString(item.error.code())},
                                   {"message", std::string(item.error.message())}}}})
                << "\n";
      continue;
    }
    // Softmax in double, stable against large logits.
    const double top = *std::max_element(item.logits.begin(), item.logits.end());
    double sum = 0;
    for (double logit : item.logits) sum += std::exp(logit - top);
    // Floats, as the server answers: one probability schema for every tool.
    std::vector<ClassProbability> probabilities;
    Json logits = Json::array();
    for (std::size_t i = 0; i < item.logits.size(); ++i) {
      probabilities.push_back({loaded.metadata.labels[i], static_cast<std::int64_t>(i),
                               static_cast<float>(std::exp(item.logits[i] - top) / sum)});
      logits.push_back(JsonNumber(item.logits[i]));
    }
    const auto best =
        std::max_element(item.logits.begin(), item.logits.end()) - item.logits.begin();
    std::cout << DumpJson(Json{{"file", item.file},
                               {"label", loaded.metadata.labels[best]},
                               {"logits", std::move(logits)},
                               {"probabilities", ProbabilitiesJson(probabilities)},
                               {"path", std::string(AttentionPathName(item.path))},
                               // What the model saw, incl. CLS: the server's `tokens`.
                               {"tokens", item.tokens.size() + 1},
                               {"truncated", item.truncated}})
              << "\n";
  }
  std::cout.flush();
  if (!failed.empty()) {
    return absl::Status(
        first_error, absl::StrCat(failed.size(), " of ", items.size(),
                                  " files could not be classified: ", absl::StrJoin(failed, ", ")));
  }
  return absl::OkStatus();
}

absl::Status Calibrate(const CalibrateFlags& flags) {
  const std::string& out = flags.out;
  TS_ASSIGN_OR_RETURN(const auto loaded, LoadCheckpoint(flags.checkpoint));
  const auto& model_options = loaded.options;

  CalibrationOptions options;
  options.heads = model_options.heads();
  options.head_dim = model_options.embed_dim() / model_options.heads();
  options.device = flags.device;
  options.repeats = static_cast<int>(flags.repeats);
  options.sweeps = static_cast<int>(flags.sweeps);
  options.max_sweeps = options.sweeps + 2;
  options.a = model_options.a();
  options.b = model_options.b();
  options.c = model_options.c();
  // Longer sequences than the model accepts (max_length + CLS) never reach it.
  options.max_tokens =
      flags.max_tokens.value_or(std::max(options.min_tokens * 2, model_options.max_length() + 1));
  options.min_tokens = std::min(options.min_tokens, options.max_tokens / 2);

  // Every precision asked for must run here before anything is measured (minutes of fp32
  // sweeps would otherwise end in a bf16 refusal and no file).
  TS_ASSIGN_OR_RETURN(const torch::Device device, DeviceFlag(flags.device));
  for (const Precision precision : flags.precisions) {
    TS_RETURN_IF_ERROR(CheckPrecisionSupported(precision, device));
  }
  std::vector<CalibrationResult> results;
  for (const Precision precision : flags.precisions) {
    for (const std::int64_t batch : flags.batches) {
      options.precision = precision;
      options.batch = batch;
      TS_ASSIGN_OR_RETURN(auto result, CalibrateCrossover(options));
      std::cout << "head_dim=" << result.head_dim << " heads=" << result.heads
                << " batch=" << result.batch << " precision=" << PrecisionName(precision)
                << " device=" << result.device << " crossover_tokens=" << result.crossover_tokens
                << " sweeps=" << absl::StrJoin(result.sweep_crossovers, ",")
                << (result.crossed ? "" : " (direct was faster up to max tokens)") << "\n";
      for (const auto& warning : result.warnings) {
        std::cerr << "tsmodel calibrate: warning: " << warning << "\n";
      }
      results.push_back(std::move(result));
    }
  }
  TS_RETURN_IF_ERROR(SaveCalibration(out, results));
  std::cout << "wrote " << out << " (formula N0=" << SpeedCrossoverN0(options.head_dim) << ")\n";
  return absl::OkStatus();
}

absl::Status ListOps(const ListOpsFlags& flags) {
  ListOpsGeneratorOptions options = flags.options;
  options.seed = static_cast<std::uint64_t>(flags.seed);
  TS_ASSIGN_OR_RETURN(const auto dataset, GenerateListOpsDataset(options));
  std::string text;
  for (const Example& example : dataset.examples) {
    absl::StrAppend(
        &text,
        DumpJson(Json{{"text", example.tokens},
                      {"label", dataset.label_names[static_cast<std::size_t>(example.label)]}}),
        "\n");
  }
  std::ofstream file(flags.out, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) return absl::PermissionDeniedError(absl::StrCat("cannot write ", flags.out));
  std::cout << "wrote " << flags.out << ": " << dataset.examples.size() << " ListOps examples\n";
  return absl::OkStatus();
}

// Adds the command's --threads (default: every core) and `run` on its flags, kept in `flags`.
template <typename Flags>
CLI::App* AddCommand(CLI::App& app, const std::string& name, const std::string& description,
                     std::shared_ptr<Flags> flags, absl::Status (*run)(const Flags&),
                     std::int64_t* threads, std::function<absl::Status()>* chosen) {
  CLI::App* command = app.add_subcommand(name, description);
  command->add_option("--threads", *threads, "intra-op threads (default: every core)")
      ->check(IntegerIn(1, INT32_MAX));
  command->callback([flags, run, chosen] { *chosen = [flags, run] { return run(*flags); }; });
  return command;
}

CLI::Validator OneOf(std::vector<std::string> values) { return CLI::IsMember(std::move(values)); }

int Main(int argc, char** argv) {
  CLI::App app(
      "tsmodel: offline model tool — import reference weights, inspect a checkpoint, classify "
      "files, calibrate the direct/efficient crossover",
      "tsmodel");
  UseFlagConventions(app);
  AddVersionFlag(app, TorchVersionFields);
  app.require_subcommand(1);
  app.footer("Exit status: 0 success, 1 error, 2 usage error.");
  std::int64_t threads = 0;
  std::function<absl::Status()> run;
  {
    auto flags = std::make_shared<ImportFlags>();
    CLI::App* command = AddCommand(app, "import-reference",
                                   "Convert a reference (tobna/TaylorShift) state dict saved with "
                                   "torch.save(dict(model.state_dict()), path) into a checkpoint.",
                                   flags, ImportReference, &threads, &run);
    command->add_option("STATE_DICT", flags->state_dict, "the .pt file")->required();
    command->add_option("--out", flags->out, "the checkpoint to write")->required();
    command->add_option("--labels", flags->labels, "label names a,b,...");
    command->add_option("--modality", flags->modality, "bytes|pixels")
        ->capture_default_str()
        ->check(OneOf({"bytes", "pixels"}));
    command->add_option("--heads", flags->heads, "attention heads (default: from the state dict)")
        ->check(IntegerIn(1, INT32_MAX));
  }
  {
    auto flags = std::make_shared<PredictFlags>();
    CLI::App* command = AddCommand(
        app, "predict",
        "Classify each file (its bytes are the tokens; longer files keep their head). Prints "
        "one JSON object per file, in input order: the result, or {\"file\":...,\"error\":{"
        "\"code\":...,\"message\":...}} for a file that cannot be read (then exits 1 after the "
        "others). `tokens` counts what the model saw, incl. CLS, as the server does.",
        flags, Predict, &threads, &run);
    command->add_option("FILE", flags->files, "the inputs")->required();
    command->add_option("--checkpoint", flags->checkpoint, "the model")->required();
    AddParsedOption(*command, "--path", &flags->path, ParseAttentionPath,
                    "auto|direct|efficient|softmax (default auto)");
    command->add_option("--batch-size", flags->batch_size, "files per forward pass")
        ->capture_default_str()
        ->check(IntegerIn(1, INT32_MAX));
    command->add_option("--device", flags->device, "cpu|cuda[:N]")->capture_default_str();
    AddParsedOption(*command, "--precision", &flags->precision, ParsePrecision,
                    "fp32 (default) or bf16: the linear layers in bfloat16 (CPUs with "
                    "AVX512-BF16 or AMX, CUDA 8.0+; refused elsewhere)");
    command->add_option("--calibration", flags->calibration, "a crossover measured by calibrate");
  }
  {
    auto flags = std::make_shared<InitFlags>();
    CLI::App* command = AddCommand(
        app, "init",
        "Write an UNTRAINED checkpoint (seeded random weights; provenance says so): for smoke "
        "tests and as the starting point of training. Its predictions are meaningless.",
        flags, Init, &threads, &run);
    command->add_option("--out", flags->out, "the checkpoint to write")->required();
    command->add_option("--labels", flags->labels, "label names a,b,...")->required();
    for (auto [name, value] :
         {std::pair<const char*, std::int64_t*>{"--embed-dim", &flags->embed_dim},
          {"--depth", &flags->depth},
          {"--heads", &flags->heads},
          {"--mlp-ratio", &flags->mlp_ratio},
          {"--max-length", &flags->max_length},
          {"--seed", &flags->seed}}) {
      command->add_option(name, *value)->capture_default_str()->check(IntegerIn(1, INT32_MAX));
    }
    command->add_option("--modality", flags->modality, "bytes|pixels")
        ->capture_default_str()
        ->check(OneOf({"bytes", "pixels"}));
  }
  {
    auto flags = std::make_shared<InfoFlags>();
    CLI::App* command = AddCommand(
        app, "info", "Architecture, parameter count, metadata, per-layer cost-model crossovers.",
        flags, Info, &threads, &run);
    command->add_option("CKPT", flags->checkpoint, "the checkpoint")->required();
    command->add_option("--calibration", flags->calibration, "a crossover measured by calibrate");
    AddParsedOption(*command, "--precision", &flags->precision, ParsePrecision,
                    "fp32 (default) or bf16: which of the calibration file's crossovers to show");
  }
  {
    auto flags = std::make_shared<CalibrateFlags>();
    CLI::App* command = AddCommand(
        app, "calibrate",
        "Measure direct vs efficient attention for this model's heads on this machine and "
        "write the crossover to FILE (the --calibration input of predict/info and the server).",
        flags, Calibrate, &threads, &run);
    command->add_option("CKPT", flags->checkpoint, "the checkpoint")->required();
    command->add_option("--out", flags->out, "the calibration file to write")->required();
    command
        ->add_option("--batch", flags->batches,
                     "batch sizes to measure, e.g. 1,8 (kAuto interpolates between them)")
        ->delimiter(',')
        ->allow_extra_args(false)
        ->capture_default_str()
        ->check(IntegerIn(1, INT32_MAX));
    command->add_option("--device", flags->device, "cpu|cuda[:N]")->capture_default_str();
    command
        ->add_option_function<std::vector<std::string>>(
            "--precision",
            [flags](const std::vector<std::string>& names) {
              flags->precisions.clear();
              for (const auto& name : names) {
                auto precision = ParsePrecision(name);
                if (!precision.ok()) {
                  throw CLI::ValidationError("--precision",
                                             std::string(precision.status().message()));
                }
                flags->precisions.push_back(*precision);
              }
            },
            "precisions to measure at, e.g. fp32,bf16 (default fp32; the efficient path's feature "
            "products run in bfloat16 at bf16)")
        ->delimiter(',')
        ->allow_extra_args(false);
    command
        ->add_option("--max-tokens", flags->max_tokens,
                     "longest sequence measured (default: the model's max_length + 1)")
        ->check(IntegerIn(2, INT32_MAX));
    command->add_option("--repeats", flags->repeats, "timed runs per point and path")
        ->capture_default_str()
        ->check(IntegerIn(1, INT32_MAX));
    command
        ->add_option("--sweeps", flags->sweeps,
                     "sweeps per batch size and precision (up to two more run when their "
                     "crossovers differ by over 20 %; the median counts)")
        ->capture_default_str()
        ->check(IntegerIn(1, 16));
  }
  {
    auto flags = std::make_shared<ListOpsFlags>();
    CLI::App* command = AddCommand(
        app, "listops",
        "Write the procedural ListOps examples a training job's `format: listops` source makes "
        "with the same settings, as JSON Lines ({\"text\": ..., \"label\": \"0\"..\"9\"}), "
        "so other trainers (bench/reference_train.py) can learn from exactly the same data.",
        flags, ListOps, &threads, &run);
    command->add_option("--out", flags->out, "the FILE.jsonl to write")->required();
    command->add_option("--count", flags->options.count, "examples")
        ->required()
        ->check(IntegerIn(0, INT64_MAX));
    for (auto [name, value] :
         {std::pair<const char*, std::int64_t*>{"--min-length", &flags->options.min_length},
          {"--max-length", &flags->options.max_length},
          {"--seed", &flags->seed}}) {
      command->add_option(name, *value)->capture_default_str()->check(IntegerIn(0, INT64_MAX));
    }
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && args[0] == "help") args[0] = "--help";
  if (std::optional<int> exit = ParseCommandLine(app, std::move(args))) return *exit;
  const std::string name = app.get_subcommands().front()->get_name();
  try {
    if (auto cap = CpuCapabilityFromEnvironment(); !cap.ok()) {
      std::cerr << "tsmodel " << name << ": error: " << cap.status().message() << "\n";
      return kExitError;
    }
    ApplyThreads(threads);
    // Keep freed tensor memory for the next batch (model/heap_policy.h).
    if (auto status = KeepFreedHeapMemory(kDefaultHeapKeepFreedBytes); !status.ok()) {
      std::cerr << "tsmodel: warning: " << status.message() << "\n";
    }
    if (auto status = run(); !status.ok()) {
      std::cerr << "tsmodel " << name << ": error: " << status.message() << "\n";
      return kExitError;
    }
  } catch (const UsageError& e) {
    std::cerr << "tsmodel " << name << ": " << e.message << "\nRun 'tsmodel " << name
              << " --help' for usage.\n";
    return kUsageExitStatus;
  } catch (const std::exception& e) {
    std::cerr << "tsmodel " << name
              << ": error: " << StatusFromException(e, "unexpected failure").message() << "\n";
    return kExitError;
  }
  return 0;
}

}  // namespace
}  // namespace ts

int main(int argc, char** argv) try {
  return ts::Main(argc, argv);
} catch (const std::exception& e) {  // outside a command's run, e.g. declaring the flags
  std::cerr << "tsmodel: error: " << e.what() << "\n";
  return ts::kExitError;
}

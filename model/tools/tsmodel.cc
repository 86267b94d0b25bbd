// tsmodel: offline model tool — import reference weights, inspect a checkpoint, classify files,
// calibrate the direct/efficient crossover. Exit codes: 0 success, 1 error, 2 usage error.
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "model/attention_path.h"
#include "model/calibration.h"
#include "model/checkpoint.h"
#include "model/cost_model.h"
#include "model/listops_generator.h"
#include "model/encoder.h"
#include "model/heap_policy.h"
#include "model/json_output.h"
#include "model/reference_import.h"
#include "model/torch_compat.h"
#include "model/torch_status.h"

namespace ts {
namespace {

constexpr int kExitError = 1;
constexpr int kExitUsage = 2;

constexpr char kUsage[] = R"(usage: tsmodel <command> [options]

commands:
  import-reference STATE_DICT.pt --out CKPT [--labels a,b,...] [--modality bytes|pixels]
                   [--heads H]
      Convert a reference (tobna/TaylorShift) state dict saved with
      torch.save(dict(model.state_dict()), path) into a checkpoint.
  predict --checkpoint CKPT [--path auto|direct|efficient|softmax] [--batch-size B]
          [--device cpu|cuda[:N]] [--precision fp32|bf16] [--calibration FILE] FILE...
      Classify each file (its bytes are the tokens; longer files keep their head). Prints one
      JSON object per file, in input order. --precision bf16 runs the linear layers in bfloat16
      (CPUs with AVX512-BF16 or AMX, CUDA 8.0+; refused elsewhere).
  init --out CKPT --labels a,b,... [--embed-dim C] [--depth L] [--heads H] [--mlp-ratio R]
       [--max-length N] [--modality bytes|pixels] [--seed S]
      Write an UNTRAINED checkpoint (seeded random weights; provenance says so): for smoke
      tests and as the starting point of training. Its predictions are meaningless.
  info CKPT [--calibration FILE]
      Architecture, parameter count, metadata, per-layer cost-model crossovers.
  calibrate CKPT --out FILE [--batch B] [--device cpu|cuda[:N]] [--max-tokens N] [--repeats R]
      Measure direct vs efficient attention for this model's heads on this machine and write
      the crossover to FILE (the --calibration input of predict/info and the server).
  listops --out FILE.jsonl --count N [--min-length 500] [--max-length 2000] [--seed 1]
      Write the procedural ListOps examples a training job's `format: listops` source makes
      with the same settings, as JSON Lines ({"text": ..., "label": "0".."9"}), so other
      trainers (bench/reference_train.py) can learn from exactly the same data.

every command: --threads N (intra-op threads; default: every core), --help
)";

// A usage error (exit 2) as opposed to a failure while doing the work (exit 1).
struct UsageError {
  std::string message;
};

struct Args {
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;
};

// Parses "--name value" / "--name=value" for the allowed flags; everything else not starting
// with "--" is positional ("--" ends flag parsing).
absl::StatusOr<Args> ParseArgs(const std::vector<std::string>& argv,
                               const std::set<std::string>& allowed) {
  Args args;
  bool flags_done = false;
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (flags_done || arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      args.positional.push_back(arg);
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    if (const auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
    } else if (name != "help") {
      if (i + 1 >= argv.size()) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
      value = argv[++i];
    }
    if (name != "help" && allowed.count(name) == 0) {
      return absl::InvalidArgumentError(absl::StrCat("unknown option --", name));
    }
    args.flags[name] = value;
  }
  return args;
}

absl::StatusOr<std::int64_t> IntFlag(const Args& args, const std::string& name,
                                     std::int64_t fallback, std::int64_t minimum) {
  const auto it = args.flags.find(name);
  if (it == args.flags.end()) return fallback;
  std::int64_t value = 0;
  if (!absl::SimpleAtoi(it->second, &value) || value < minimum) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be an integer >= ", minimum, ", got '", it->second, "'"));
  }
  return value;
}

std::string StringFlag(const Args& args, const std::string& name, const std::string& fallback) {
  const auto it = args.flags.find(name);
  return it == args.flags.end() ? fallback : it->second;
}

absl::Status ApplyThreads(const Args& args) {
  auto threads = IntFlag(args, "threads", 0, 1);
  if (!threads.ok()) return threads.status();
  // LibTorch would start with one intra-op thread here; default to every core instead.
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  compat::SetThreads(*threads > 0 ? static_cast<int>(*threads) : cores);
  return absl::OkStatus();
}

absl::StatusOr<torch::Device> DeviceFlag(const Args& args) {
  const std::string name = StringFlag(args, "device", "cpu");
  auto device = CatchTorch(absl::StrCat("--device ", name), [&] { return torch::Device(name); });
  if (!device.ok()) return absl::InvalidArgumentError(device.status().message());
  if (device->is_cuda() && !torch::cuda::is_available()) {
    return absl::FailedPreconditionError(
        absl::StrCat("--device ", name, " requested but CUDA is not available"));
  }
  return *device;
}

// Applies the crossover measured for this model's heads from a calibration file.
absl::Status ApplyCalibration(const Args& args, LoadedCheckpoint& loaded, std::int64_t batch) {
  const auto it = args.flags.find("calibration");
  if (it == args.flags.end()) return absl::OkStatus();
  auto results = LoadCalibration(it->second);
  if (!results.ok()) return results.status();
  const std::int64_t heads = loaded.options.heads();
  const std::int64_t head_dim = loaded.options.embed_dim() / heads;
  const auto crossover = LookupCrossover(*results, head_dim, heads, batch);
  if (!crossover) {
    return absl::NotFoundError(absl::StrCat(it->second, " has no crossover for head_dim ", head_dim,
                                            " with ", heads, " heads"));
  }
  loaded.model->set_crossover_tokens(*crossover);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read ", path));
  return bytes;
}

// ---------------------------------------------------------------------------------------------

absl::Status ImportReference(const Args& args) {
  if (args.positional.size() != 1) throw UsageError{"import-reference takes one STATE_DICT.pt"};
  const std::string out = StringFlag(args, "out", "");
  if (out.empty()) throw UsageError{"import-reference needs --out CKPT"};
  ReferenceImportOptions options;
  options.modality = StringFlag(args, "modality", "bytes");
  if (options.modality != "bytes" && options.modality != "pixels") {
    throw UsageError{
        absl::StrCat("--modality must be bytes or pixels, got '", options.modality, "'")};
  }
  if (const auto labels = args.flags.find("labels"); labels != args.flags.end()) {
    options.labels = absl::StrSplit(labels->second, ',');
  }
  auto heads = IntFlag(args, "heads", 0, 1);
  if (!heads.ok()) throw UsageError{std::string(heads.status().message())};
  options.heads = *heads;
  options.provenance["created_by"] = "tsmodel import-reference";

  auto imported = ImportReferenceStateDict(args.positional[0], options);
  if (!imported.ok()) return imported.status();
  if (auto status = SaveCheckpoint(out, imported->options, imported->metadata, imported->model);
      !status.ok()) {
    return status;
  }
  std::cout << "wrote " << out << ": " << DescribeEncoderOptions(imported->options) << " ("
            << imported->model->CountParameters() << " parameters, labels "
            << absl::StrJoin(imported->metadata.labels, ",") << ")\n";
  return absl::OkStatus();
}

absl::Status Init(const Args& args) {
  if (!args.positional.empty()) throw UsageError{"init takes no positional arguments"};
  const std::string out = StringFlag(args, "out", "");
  if (out.empty()) throw UsageError{"init needs --out CKPT"};
  const auto labels_flag = args.flags.find("labels");
  if (labels_flag == args.flags.end()) throw UsageError{"init needs --labels a,b,..."};
  std::vector<std::string> labels = absl::StrSplit(labels_flag->second, ',');
  const auto get = [&](const char* name, std::int64_t fallback) {
    auto value = IntFlag(args, name, fallback, 1);
    if (!value.ok()) throw UsageError{std::string(value.status().message())};
    return *value;
  };
  const std::int64_t embed_dim = get("embed-dim", 64);
  const std::int64_t mlp_ratio = get("mlp-ratio", 2);
  const std::int64_t seed = get("seed", 1);
  TaylorShiftEncoderOptions options(embed_dim, get("depth", 2), get("heads", 8),
                                    get("max-length", 2048),
                                    static_cast<std::int64_t>(labels.size()));
  options.mlp_hidden(embed_dim * mlp_ratio);
  if (auto valid = ValidateEncoderOptions(options); !valid.ok()) {
    throw UsageError{std::string(valid.message())};
  }
  CheckpointMetadata metadata;
  metadata.format_version = kCheckpointFormatVersion;
  metadata.modality = StringFlag(args, "modality", "bytes");
  metadata.labels = labels;
  metadata.provenance["created_by"] = "tsmodel init";
  metadata.provenance["source"] = absl::StrCat("untrained: random initialisation, seed ", seed);
  torch::manual_seed(static_cast<std::uint64_t>(seed));
  TaylorShiftEncoder model(options);
  if (auto status = SaveCheckpoint(out, options, metadata, model); !status.ok()) return status;
  std::cout << "wrote " << out << ": " << DescribeEncoderOptions(options) << " (untrained, "
            << model->CountParameters() << " parameters)\n";
  return absl::OkStatus();
}

absl::Status Info(const Args& args) {
  if (args.positional.size() != 1) throw UsageError{"info takes one CKPT"};
  auto loaded = LoadCheckpoint(args.positional[0]);
  if (!loaded.ok()) return loaded.status();
  if (auto status = ApplyCalibration(args, *loaded, 1); !status.ok()) return status;
  const auto& options = loaded->options;
  const std::int64_t head_dim = options.embed_dim() / options.heads();
  std::cout << "checkpoint: " << args.positional[0] << "\n"
            << "format_version: " << loaded->metadata.format_version << "\n"
            << "architecture: " << DescribeEncoderOptions(options) << "\n"
            << "parameters: " << loaded->model->CountParameters() << "\n"
            << "dtype: " << c10::toString(loaded->model->cls_token.scalar_type()) << "\n"
            << "modality: " << loaded->metadata.modality << "\n"
            << "labels: " << absl::StrJoin(loaded->metadata.labels, ",") << "\n";
  for (const auto& [key, value] : loaded->metadata.provenance) {
    std::cout << "provenance." << key << ": " << value << "\n";
  }
  for (std::int64_t layer = 0; layer < options.depth(); ++layer) {
    std::cout << "layer " << layer << ": heads=" << options.heads() << " d=" << head_dim
              << " N0=" << SpeedCrossoverN0(head_dim) << " N1=" << MemoryCrossoverN1(head_dim)
              << "\n";
  }
  const std::int64_t crossover = loaded->model->crossover_tokens();
  std::cout << "crossover_tokens: " << crossover
            << (args.flags.count("calibration")  ? " (calibrated)"
                : options.crossover_tokens() > 0 ? " (checkpoint)"
                                                 : " (formula N0)")
            << "\n"
            << "auto path at max_length: "
            << AttentionPathName(
                   loaded->model->ResolvePath(AttentionPath::kAuto, options.max_length() + 1))
            << "\n";
  return absl::OkStatus();
}

absl::Status Predict(const Args& args) {
  const std::string checkpoint = StringFlag(args, "checkpoint", "");
  if (checkpoint.empty()) throw UsageError{"predict needs --checkpoint CKPT"};
  if (args.positional.empty()) throw UsageError{"predict needs at least one FILE"};
  auto path = ParseAttentionPath(StringFlag(args, "path", "auto"));
  if (!path.ok()) throw UsageError{std::string(path.status().message())};
  auto batch_size = IntFlag(args, "batch-size", 8, 1);
  if (!batch_size.ok()) throw UsageError{std::string(batch_size.status().message())};
  auto device = DeviceFlag(args);
  if (!device.ok()) return device.status();

  auto precision = ParsePrecision(StringFlag(args, "precision", "fp32"));
  if (!precision.ok()) throw UsageError{absl::StrCat("--", precision.status().message())};
  if (auto status = CheckPrecisionSupported(*precision, *device); !status.ok()) return status;

  auto loaded = LoadCheckpoint(checkpoint, *device);
  if (!loaded.ok()) return loaded.status();
  if (auto status = ApplyCalibration(args, *loaded, *batch_size); !status.ok()) return status;
  loaded->model->set_precision(*precision);
  const std::int64_t max_length = loaded->options.max_length();

  struct Item {
    std::string file;
    std::vector<std::int64_t> tokens;
    bool truncated = false;
    std::vector<double> logits;
    AttentionPath path = AttentionPath::kAuto;
  };
  std::vector<Item> items;
  for (const auto& file : args.positional) {
    auto bytes = ReadBytes(file);
    if (!bytes.ok()) return bytes.status();
    Item item;
    item.file = file;
    item.truncated = static_cast<std::int64_t>(bytes->size()) > max_length;
    const std::size_t kept = std::min<std::size_t>(bytes->size(), max_length);
    item.tokens.reserve(kept);
    for (std::size_t i = 0; i < kept; ++i) {
      item.tokens.push_back(static_cast<unsigned char>((*bytes)[i]));
    }
    items.push_back(std::move(item));
  }

  // Similar lengths share a batch, so little compute goes to padding.
  std::vector<std::size_t> order(items.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return items[a].tokens.size() < items[b].tokens.size();
  });
  auto& model = loaded->model;
  for (std::size_t start = 0; start < order.size(); start += *batch_size) {
    const std::size_t end = std::min(order.size(), start + static_cast<std::size_t>(*batch_size));
    auto ran = CatchTorch("predict", [&] {
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
        if (!item_tokens.empty()) {
          tokens[row]
              .narrow(0, 0, item_tokens.size())
              .copy_(torch::from_blob(const_cast<std::int64_t*>(item_tokens.data()),
                                      {static_cast<std::int64_t>(item_tokens.size())},
                                      torch::kLong));
        }
      }
      const AttentionPath concrete = model->ResolvePath(*path, longest + 1);
      const auto logits = model->forward(tokens.to(*device), lengths.to(*device), concrete)
                              .to(torch::kCPU, torch::kDouble)
                              .contiguous();
      for (std::int64_t row = 0; row < batch; ++row) {
        auto& item = items[order[start + row]];
        const double* data = logits[row].data_ptr<double>();
        item.logits.assign(data, data + logits.size(1));
        item.path = concrete;
      }
      return true;
    });
    if (!ran.ok()) return ran.status();
  }

  for (const auto& item : items) {
    // Softmax in double, stable against large logits.
    const double top = *std::max_element(item.logits.begin(), item.logits.end());
    double sum = 0;
    for (double logit : item.logits) sum += std::exp(logit - top);
    // Floats, as the server answers: one probability schema for every tool.
    std::vector<ClassProbability> probabilities;
    Json logits = Json::array();
    for (std::size_t i = 0; i < item.logits.size(); ++i) {
      probabilities.push_back({loaded->metadata.labels[i], static_cast<std::int64_t>(i),
                               static_cast<float>(std::exp(item.logits[i] - top) / sum)});
      logits.push_back(JsonNumber(item.logits[i]));
    }
    const auto best =
        std::max_element(item.logits.begin(), item.logits.end()) - item.logits.begin();
    std::cout << DumpJson(Json{{"file", item.file},
                               {"label", loaded->metadata.labels[best]},
                               {"logits", std::move(logits)},
                               {"probabilities", ProbabilitiesJson(probabilities)},
                               {"path", std::string(AttentionPathName(item.path))},
                               {"tokens", item.tokens.size()},
                               {"truncated", item.truncated}})
              << "\n";
  }
  std::cout.flush();
  return absl::OkStatus();
}

absl::Status Calibrate(const Args& args) {
  if (args.positional.size() != 1) throw UsageError{"calibrate takes one CKPT"};
  const std::string out = StringFlag(args, "out", "");
  if (out.empty()) throw UsageError{"calibrate needs --out FILE"};
  auto batch = IntFlag(args, "batch", 1, 1);
  if (!batch.ok()) throw UsageError{std::string(batch.status().message())};
  auto repeats = IntFlag(args, "repeats", 3, 1);
  if (!repeats.ok()) throw UsageError{std::string(repeats.status().message())};
  auto loaded = LoadCheckpoint(args.positional[0]);
  if (!loaded.ok()) return loaded.status();
  const auto& model_options = loaded->options;

  CalibrationOptions options;
  options.heads = model_options.heads();
  options.head_dim = model_options.embed_dim() / model_options.heads();
  options.batch = *batch;
  options.device = StringFlag(args, "device", "cpu");
  options.repeats = static_cast<int>(*repeats);
  options.a = model_options.a();
  options.b = model_options.b();
  options.c = model_options.c();
  // Longer sequences than the model accepts (max_length + CLS) never reach it.
  auto max_tokens = IntFlag(args, "max-tokens",
                            std::max(options.min_tokens * 2, model_options.max_length() + 1), 2);
  if (!max_tokens.ok()) throw UsageError{std::string(max_tokens.status().message())};
  options.max_tokens = *max_tokens;
  options.min_tokens = std::min(options.min_tokens, options.max_tokens / 2);

  auto result = CalibrateCrossover(options);
  if (!result.ok()) return result.status();
  if (auto status = SaveCalibration(out, {*result}); !status.ok()) return status;
  std::cout << "wrote " << out << ": head_dim=" << result->head_dim << " heads=" << result->heads
            << " batch=" << result->batch << " device=" << result->device
            << " crossover_tokens=" << result->crossover_tokens
            << (result->crossed ? "" : " (direct was faster up to max tokens)")
            << " (formula N0=" << SpeedCrossoverN0(result->head_dim) << ")\n";
  return absl::OkStatus();
}

absl::Status ListOps(const Args& args) {
  if (!args.positional.empty()) throw UsageError{"listops takes no positional arguments"};
  const std::string out = StringFlag(args, "out", "");
  if (out.empty()) throw UsageError{"listops needs --out FILE.jsonl"};
  if (args.flags.count("count") == 0) throw UsageError{"listops needs --count N"};
  ListOpsGeneratorOptions options;
  for (auto [flag, field] : {std::pair<const char*, std::int64_t*>{"count", &options.count},
                             {"min-length", &options.min_length},
                             {"max-length", &options.max_length}}) {
    auto value = IntFlag(args, flag, *field, 0);
    if (!value.ok()) throw UsageError{std::string(value.status().message())};
    *field = *value;
  }
  auto seed = IntFlag(args, "seed", 1, 0);
  if (!seed.ok()) throw UsageError{std::string(seed.status().message())};
  options.seed = static_cast<std::uint64_t>(*seed);
  auto dataset = GenerateListOpsDataset(options);
  if (!dataset.ok()) return dataset.status();
  std::string text;
  for (const Example& example : dataset->examples) {
    absl::StrAppend(
        &text,
        DumpJson(Json{{"text", example.tokens},
                      {"label", dataset->label_names[static_cast<std::size_t>(example.label)]}}),
        "\n");
  }
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file) return absl::PermissionDeniedError(absl::StrCat("cannot write ", out));
  std::cout << "wrote " << out << ": " << dataset->examples.size() << " ListOps examples\n";
  return absl::OkStatus();
}

struct Command {
  const char* name;
  absl::Status (*run)(const Args&);
  std::set<std::string> flags;
};

int Main(int argc, char** argv) {
  const std::vector<Command> commands = {
      {"import-reference", ImportReference, {"out", "labels", "modality", "heads", "threads"}},
      {"predict",
       Predict,
       {"checkpoint", "path", "threads", "batch-size", "device", "precision", "calibration"}},
      {"init",
       Init,
       {"out", "labels", "embed-dim", "depth", "heads", "mlp-ratio", "max-length", "modality",
        "seed", "threads"}},
      {"info", Info, {"threads", "calibration"}},
      {"calibrate", Calibrate, {"out", "threads", "batch", "device", "max-tokens", "repeats"}},
      {"listops", ListOps, {"out", "count", "min-length", "max-length", "seed", "threads"}},
  };
  if (argc < 2) {
    std::cerr << kUsage;
    return kExitUsage;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    std::cout << kUsage;
    return 0;
  }
  const auto command = std::find_if(commands.begin(), commands.end(),
                                    [&](const Command& c) { return name == c.name; });
  if (command == commands.end()) {
    std::cerr << "tsmodel: unknown command '" << name << "'\n\n" << kUsage;
    return kExitUsage;
  }
  auto args = ParseArgs(std::vector<std::string>(argv + 2, argv + argc), command->flags);
  if (!args.ok()) {
    std::cerr << "tsmodel " << name << ": " << args.status().message() << "\n\n" << kUsage;
    return kExitUsage;
  }
  if (args->flags.count("help")) {
    std::cout << kUsage;
    return 0;
  }
  try {
    if (auto status = ApplyThreads(*args); !status.ok())
      throw UsageError{std::string(status.message())};
    // Keep freed tensor memory for the next batch (model/heap_policy.h).
    if (auto status = KeepFreedHeapMemory(kDefaultHeapKeepFreedBytes); !status.ok()) {
      std::cerr << "tsmodel: warning: " << status.message() << "\n";
    }
    if (auto status = command->run(*args); !status.ok()) {
      std::cerr << "tsmodel " << name << ": error: " << status.message() << "\n";
      return kExitError;
    }
  } catch (const UsageError& e) {
    std::cerr << "tsmodel " << name << ": " << e.message << "\n\n" << kUsage;
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "tsmodel " << name
              << ": error: " << StatusFromException(e, "unexpected failure").message() << "\n";
    return kExitError;
  }
  return 0;
}

}  // namespace
}  // namespace ts

int main(int argc, char** argv) { return ts::Main(argc, argv); }
